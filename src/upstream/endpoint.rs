//! Several apiservers of one cluster (`--server` given more than once): which one a
//! request goes to, and which are left out for a while.
//!
//! Requests go to the first healthy endpoint in the order given, and to the next only
//! when it is not: one apiserver at a time keeps every resourceVersion the gateway and
//! its clients see coming from one watch cache, so a list on one apiserver is never
//! followed by a watch on another that lags behind it (kubernetes/kubernetes#100745).
//! An endpoint is left out ("ejected") when a connection to it fails or its `/readyz`
//! answers 5xx or not at all, and checked again after a backoff (1 s doubling to 30 s);
//! healthy endpoints are checked every 5 s, so an apiserver that starts shutting down
//! (its `/readyz` fails first) loses new requests before it closes its connections. An
//! endpoint the reflector found behind (it answered "Too large resource version") comes
//! after the others for a while. With one endpoint nothing is ever left out: there is
//! nowhere else to go, and each request tries it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::error::UpstreamError;
use super::pool::EndpointPool;
use crate::metrics as m;

/// How often a healthy endpoint's `/readyz` is checked (with several endpoints).
pub const CHECK_INTERVAL: Duration = Duration::from_secs(5);
/// The first backoff of an ejected endpoint; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long an endpoint found behind comes after the others.
pub const BEHIND_FOR: Duration = Duration::from_secs(10);

/// One apiserver.
pub struct Endpoint {
    pub pool: Arc<EndpointPool>,
    health: Mutex<Health>,
}

#[derive(Debug)]
struct Health {
    /// Left out until then.
    ejected_until: Option<Instant>,
    /// Failures in a row, for the backoff.
    failures: u32,
    behind_until: Option<Instant>,
    next_check: Instant,
    checking: bool,
}

/// What a `/readyz` check found.
pub enum CheckResult {
    /// Any answer but a 5xx: reachable (an apiserver that forbids `/readyz` to our
    /// credentials is not thereby unready).
    Answered(http::StatusCode),
    Failed(String),
}

/// The endpoints, in the order given.
pub struct Endpoints {
    list: Vec<Endpoint>,
}

impl Endpoints {
    pub fn new(pools: Vec<Arc<EndpointPool>>) -> Self {
        let now = Instant::now();
        let list: Vec<Endpoint> = pools
            .into_iter()
            .map(|pool| Endpoint {
                pool,
                health: Mutex::new(Health {
                    ejected_until: None,
                    failures: 0,
                    behind_until: None,
                    next_check: now,
                    checking: false,
                }),
            })
            .collect();
        let this = Self { list };
        if this.several() {
            for e in &this.list {
                metrics::gauge!(m::UPSTREAM_ENDPOINT_HEALTHY, "endpoint" => e.pool.label().to_owned())
                    .set(1.0);
            }
        }
        this
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn get(&self, i: usize) -> &Endpoint {
        &self.list[i]
    }

    pub fn iter(&self) -> impl Iterator<Item = &Endpoint> {
        self.list.iter()
    }

    fn several(&self) -> bool {
        self.list.len() > 1
    }

    /// The endpoints to try, best first: healthy ones in the order given (those found
    /// behind after the others), then the ejected ones, soonest due first, as a last
    /// resort when nothing else answers.
    pub fn order(&self) -> Vec<usize> {
        if !self.several() {
            return vec![0];
        }
        let now = Instant::now();
        let mut keyed: Vec<(u8, Option<Instant>, usize)> = self
            .list
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let h = e.health.lock().expect("health lock");
                match h.ejected_until {
                    Some(until) => (2, Some(until), i),
                    None if h.behind_until.is_some_and(|t| t > now) => (1, None, i),
                    None => (0, None, i),
                }
            })
            .collect();
        keyed.sort();
        keyed.into_iter().map(|(_, _, i)| i).collect()
    }

    /// A connection to endpoint `i` failed: leave it out until its backoff has passed
    /// and a check finds it ready.
    pub fn eject(&self, i: usize, why: &UpstreamError) {
        if !self.several() {
            return;
        }
        let e = &self.list[i];
        let mut h = e.health.lock().expect("health lock");
        let was_healthy = h.ejected_until.is_none();
        h.failures = h.failures.saturating_add(1);
        let backoff = FIRST_BACKOFF
            .saturating_mul(1 << (h.failures - 1).min(5))
            .min(MAX_BACKOFF);
        let now = Instant::now();
        h.ejected_until = Some(now + backoff);
        h.next_check = now + backoff;
        drop(h);
        e.pool.clear();
        if was_healthy {
            tracing::warn!(endpoint = %e.pool.base(), error = %why, "upstream endpoint left out; checking it again in {backoff:?}");
            metrics::gauge!(m::UPSTREAM_ENDPOINT_HEALTHY, "endpoint" => e.pool.label().to_owned())
                .set(0.0);
            metrics::counter!(m::UPSTREAM_EJECTIONS_TOTAL, "endpoint" => e.pool.label().to_owned())
                .increment(1);
        } else {
            tracing::debug!(endpoint = %e.pool.base(), error = %why, "upstream endpoint still failing; checking it again in {backoff:?}");
        }
    }

    /// Endpoint `i` answered "Too large resource version": its watch cache is behind the
    /// state the gateway has seen. Others come first for [`BEHIND_FOR`].
    pub fn mark_behind(&self, i: usize) {
        if !self.several() {
            return;
        }
        let e = &self.list[i];
        e.health.lock().expect("health lock").behind_until = Some(Instant::now() + BEHIND_FOR);
        tracing::info!(endpoint = %e.pool.base(), "upstream endpoint is behind; preferring the others for {BEHIND_FOR:?}");
    }

    /// The endpoints whose `/readyz` is due, each claimed so that one check at a time runs.
    pub fn due_checks(&self) -> Vec<usize> {
        if !self.several() {
            return Vec::new();
        }
        let now = Instant::now();
        self.list
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                let mut h = e.health.lock().expect("health lock");
                (!h.checking && h.next_check <= now).then(|| {
                    h.checking = true;
                    i
                })
            })
            .collect()
    }

    /// Records what endpoint `i`'s `/readyz` check found.
    pub fn checked(&self, i: usize, result: CheckResult) {
        let e = &self.list[i];
        let failure = match result {
            CheckResult::Answered(code) if code.is_server_error() => {
                Some(format!("/readyz answered {code}"))
            }
            CheckResult::Answered(_) => None,
            CheckResult::Failed(why) => Some(why),
        };
        match failure {
            Some(why) => {
                e.health.lock().expect("health lock").checking = false;
                self.eject(i, &UpstreamError::Broken(why));
            }
            None => {
                let mut h = e.health.lock().expect("health lock");
                h.checking = false;
                h.next_check = Instant::now() + CHECK_INTERVAL;
                h.failures = 0;
                if h.ejected_until.take().is_some() {
                    drop(h);
                    tracing::info!(endpoint = %e.pool.base(), "upstream endpoint is ready again");
                    metrics::gauge!(m::UPSTREAM_ENDPOINT_HEALTHY, "endpoint" => e.pool.label().to_owned())
                        .set(1.0);
                }
            }
        }
    }

    /// Whether endpoint `i` is left out now.
    #[cfg(test)]
    pub fn is_ejected(&self, i: usize) -> bool {
        self.list[i]
            .health
            .lock()
            .expect("health lock")
            .ejected_until
            .is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(n: usize) -> Endpoints {
        Endpoints::new(
            (0..n)
                .map(|i| {
                    Arc::new(EndpointPool::new(
                        format!("http://127.0.0.1:{}", 1000 + i).parse().unwrap(),
                    ))
                })
                .collect(),
        )
    }

    #[test]
    fn healthy_endpoints_come_first_in_the_order_given() {
        let e = endpoints(3);
        assert_eq!(e.order(), vec![0, 1, 2]);
        e.eject(0, &UpstreamError::Connect("refused".into()));
        assert_eq!(e.order(), vec![1, 2, 0]);
        e.mark_behind(1);
        assert_eq!(e.order(), vec![2, 1, 0]);
        assert!(e.is_ejected(0));
        e.checked(0, CheckResult::Answered(http::StatusCode::OK));
        assert!(!e.is_ejected(0));
        assert_eq!(e.order(), vec![0, 2, 1]);
        // A 5xx readiness answer leaves it out again; a 403 does not.
        e.checked(
            2,
            CheckResult::Answered(http::StatusCode::INTERNAL_SERVER_ERROR),
        );
        e.checked(0, CheckResult::Answered(http::StatusCode::FORBIDDEN));
        assert_eq!(e.order(), vec![0, 1, 2]);
    }

    #[test]
    fn a_single_endpoint_is_never_left_out() {
        let e = endpoints(1);
        e.eject(0, &UpstreamError::Connect("refused".into()));
        assert!(!e.is_ejected(0));
        assert_eq!(e.order(), vec![0]);
        assert!(e.due_checks().is_empty());
    }

    #[test]
    fn the_backoff_doubles_up_to_its_cap() {
        let e = endpoints(2);
        let mut last = Duration::ZERO;
        for _ in 0..8 {
            e.eject(1, &UpstreamError::Connect("refused".into()));
            let h = e.list[1].health.lock().unwrap();
            let wait = h.ejected_until.unwrap() - Instant::now();
            assert!(wait <= MAX_BACKOFF);
            assert!(
                wait + Duration::from_millis(50)
                    >= last.min(MAX_BACKOFF - Duration::from_millis(50))
            );
            last = wait;
        }
        assert!(last > Duration::from_secs(20));
    }
}

//! Fair limits per user: at most N requests in flight and M long-running requests
//! (watches, logs, exec/attach/port-forward, proxy: `request::Parsed::long_running`) open per
//! user at once; beyond that
//! a 429 with `Retry-After`, as kube-apiserver's max-in-flight filter answers (APF
//! answers the same way when a flow's queue is full). Per user rather than global, so that
//! one tenant cannot take the gateway from the others: what APF's per-user flow
//! distinguisher achieves, without its queues and shares. Members of `system:masters` are
//! exempt, as APF's `exempt` priority level exempts them.
//!
//! A permit is held by the response body, so a list counts until it has been written and
//! a watch until its stream ends.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dashmap::DashMap;

use super::user::{User, MASTERS};

pub struct Limits {
    max_in_flight: usize,
    max_long_running: usize,
    users: DashMap<String, Arc<Counts>>,
}

#[derive(Default)]
struct Counts {
    in_flight: AtomicUsize,
    long_running: AtomicUsize,
}

/// One admitted request; dropping it frees its place.
pub struct Permit {
    counts: Arc<Counts>,
    long_running: bool,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.counter().fetch_sub(1, Ordering::AcqRel);
    }
}

impl Permit {
    fn counter(&self) -> &AtomicUsize {
        if self.long_running {
            &self.counts.long_running
        } else {
            &self.counts.in_flight
        }
    }
}

impl Limits {
    /// `0` leaves that count unlimited.
    pub fn new(max_in_flight: usize, max_long_running: usize) -> Self {
        Self {
            max_in_flight,
            max_long_running,
            users: DashMap::new(),
        }
    }

    /// A permit for one more request of `user`, or `None` when the user is at its limit.
    /// `Some(None)` is "admitted, nothing to count" (unlimited or exempt).
    pub fn admit(&self, user: &User, long_running: bool) -> Option<Option<Permit>> {
        let max = if long_running {
            self.max_long_running
        } else {
            self.max_in_flight
        };
        if max == 0 || user.in_group(MASTERS) {
            return Some(None);
        }
        let counts = match self.users.get(user.name()) {
            Some(c) => c.clone(),
            None => self
                .users
                .entry(user.name().to_string())
                .or_default()
                .clone(),
        };
        let counter = if long_running {
            &counts.long_running
        } else {
            &counts.in_flight
        };
        let mut n = counter.load(Ordering::Acquire);
        loop {
            if n >= max {
                return None;
            }
            match counter.compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => n = now,
            }
        }
        Some(Some(Permit {
            counts,
            long_running,
        }))
    }

    /// Users with a counter (one per user seen; a counter is a few words).
    pub fn users(&self) -> usize {
        self.users.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::user::UserInfo;

    fn user(name: &str, groups: &[&str]) -> User {
        User::new(UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        })
    }

    #[test]
    fn each_user_has_its_own_budget() {
        let limits = Limits::new(2, 1);
        let (a, b) = (user("a", &[]), user("b", &[]));
        let p1 = limits.admit(&a, false).unwrap();
        let _p2 = limits.admit(&a, false).unwrap();
        assert!(limits.admit(&a, false).is_none(), "a is at its limit");
        assert!(limits.admit(&b, false).is_some(), "b is not");
        let _w = limits.admit(&a, true).unwrap();
        assert!(limits.admit(&a, true).is_none());
        drop(p1);
        assert!(limits.admit(&a, false).is_some(), "a place was freed");
        let root = user("root", &[MASTERS]);
        for _ in 0..10 {
            assert!(
                limits.admit(&root, true).is_some(),
                "system:masters is exempt"
            );
        }
    }
}

//! Background churn: a steady stream of writes at a given rate, for the demo and the
//! benches (watch fan-out under load).
//!
//! The mix, per write: 60 % pod status/annotation updates, 20 % ConfigMap data updates,
//! 10 % creation of a `churn-N` pod, 10 % deletion of the oldest `churn-N` pod still
//! around (so the population stays bounded: at most [`MAX_CHURN_PODS`] extra pods).
//! Updates target the seeded objects by name (known from the [`SeedSpec`]), so no write
//! scans the store; objects deleted by a user in the meantime are skipped.
//!
//! Pacing: writes owed are computed from elapsed time × rate, in ticks of at least 1 ms,
//! so high rates are batched rather than sleeping per write. The task stops when the
//! shutdown signal flips or its sender is dropped.
// metav1.Status is the crate's error type (large by design; see status.rs).
#![allow(clippy::result_large_err)]

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use rand::Rng;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use super::resources::{self, ResourceType};
use super::seed::{self, SeedSpec};
use super::store::{Mutation, Store};
use super::Sim;

/// Upper bound of extra pods created by churn at any time.
pub const MAX_CHURN_PODS: usize = 200;

fn rt(resource: &str) -> &'static ResourceType {
    resources::RESOURCES
        .iter()
        .find(|r| r.resource == resource)
        .expect("served resource")
}

/// Counters of what churn has done (for tests and logs).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ChurnStats {
    pub updates: u64,
    pub creates: u64,
    pub deletes: u64,
    pub skipped: u64,
}

/// The churn state machine: one [`Churner::step`] = one write.
pub struct Churner {
    spec: SeedSpec,
    next_pod: u64,
    live: VecDeque<(String, String)>,
    pub stats: ChurnStats,
}

impl Churner {
    pub fn new(spec: SeedSpec) -> Self {
        Self {
            spec,
            next_pod: 0,
            live: VecDeque::new(),
            stats: ChurnStats::default(),
        }
    }

    fn update(&mut self, store: &Store, resource: &str, ns: &str, name: &str) {
        let now = Timestamp::now().to_string();
        let res = store.mutate(rt(resource), ns, name, |cur| {
            let Some(cur) = cur else {
                return Ok(Mutation::NoOp);
            };
            let mut v: Value = cur.as_ref().clone();
            let md = v["metadata"].as_object_mut();
            let Some(md) = md else {
                return Ok(Mutation::NoOp);
            };
            let ann = md.entry("annotations").or_insert_with(|| json!({}));
            let n = ann["sim.watchgate.dev/churn"]
                .as_str()
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(0)
                + 1;
            ann["sim.watchgate.dev/churn"] = json!(n.to_string());
            match resource {
                "pods" => {
                    if let Some(conds) = v["status"]["conditions"].as_array_mut() {
                        for c in conds {
                            if c["type"] == "Ready" {
                                c["lastProbeTime"] = json!(now);
                            }
                        }
                    }
                }
                _ => {
                    v["data"]["churn"] = json!(now);
                }
            }
            Ok(Mutation::Put(v))
        });
        match res {
            Ok(Some(_)) => self.stats.updates += 1,
            _ => self.stats.skipped += 1,
        }
    }

    /// Performs one write chosen by `roll` in 0..100.
    pub fn step(&mut self, store: &Store, roll: u32, pick: usize) {
        let seeded_pods = self.spec.pods;
        let seeded_cms = self.spec.configmaps;
        match roll {
            0..=59 if seeded_pods > 0 => {
                let i = pick % seeded_pods;
                self.update(
                    store,
                    "pods",
                    &self.spec.namespace_of(i),
                    &format!("pod-{i}"),
                );
            }
            60..=79 if seeded_cms > 0 => {
                let i = pick % seeded_cms;
                self.update(
                    store,
                    "configmaps",
                    &self.spec.namespace_of(i),
                    &format!("configmap-{i}"),
                );
            }
            90..=99 if !self.live.is_empty() => self.delete_oldest(store),
            _ => {
                if self.live.len() >= MAX_CHURN_PODS {
                    self.delete_oldest(store);
                } else {
                    self.create(store);
                }
            }
        }
    }

    fn create(&mut self, store: &Store) {
        let k = self.next_pod;
        self.next_pod += 1;
        let mut p = seed::pod(&self.spec, k as usize, Timestamp::now());
        let ns = if self.spec.namespaces == 0 {
            "default".to_string()
        } else {
            self.spec.namespace_of(k as usize)
        };
        let name = format!("churn-{k}");
        p["metadata"]["name"] = json!(name);
        p["metadata"]["namespace"] = json!(ns);
        p["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
        p["metadata"]["creationTimestamp"] =
            json!(Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        let res = store.mutate(rt("pods"), &ns, &name, |cur| {
            Ok(if cur.is_some() {
                Mutation::NoOp
            } else {
                Mutation::Put(p)
            })
        });
        match res {
            Ok(_) => {
                self.stats.creates += 1;
                self.live.push_back((ns, name));
            }
            Err(_) => self.stats.skipped += 1,
        }
    }

    fn delete_oldest(&mut self, store: &Store) {
        if let Some((ns, name)) = self.live.pop_front() {
            match store.mutate(rt("pods"), &ns, &name, |cur| {
                Ok(if cur.is_some() {
                    Mutation::Delete
                } else {
                    Mutation::NoOp
                })
            }) {
                Ok(Some(_)) => self.stats.deletes += 1,
                _ => self.stats.skipped += 1,
            }
        }
    }
}

/// Runs churn at `per_sec` writes per second until `shutdown` flips to true (or its
/// sender goes away). Returns what it did.
pub async fn run(
    store: Arc<Store>,
    spec: SeedSpec,
    per_sec: f64,
    mut shutdown: watch::Receiver<bool>,
) -> ChurnStats {
    let mut churner = Churner::new(spec);
    if per_sec <= 0.0 || !per_sec.is_finite() {
        return churner.stats;
    }
    let tick = Duration::from_secs_f64((1.0 / per_sec).max(0.001));
    let start = Instant::now();
    let mut done: u64 = 0;
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    break;
                }
                continue;
            }
        }
        if *shutdown.borrow() {
            break;
        }
        let owed = (start.elapsed().as_secs_f64() * per_sec) as u64 + 1;
        // Never burst more than one second's worth after a stall.
        let batch = owed.saturating_sub(done).min(per_sec.ceil() as u64);
        for _ in 0..batch {
            let (roll, pick) = {
                let mut rng = rand::rng();
                (rng.random_range(0..100u32), rng.random_range(0..usize::MAX))
            };
            churner.step(&store, roll, pick);
        }
        done += batch;
        done = done.max(owed.saturating_sub(per_sec.ceil() as u64));
    }
    churner.stats
}

/// Starts churn for the simulator if `--churn` asked for it (contract with `start()`).
pub fn spawn_churn(sim: Arc<Sim>) {
    let per_sec = sim.cfg.churn_per_sec;
    if per_sec <= 0.0 {
        return;
    }
    let spec = SeedSpec::per_type(sim.cfg.seed_per_type, sim.cfg.pod_size);
    let store = sim.store.clone();
    let shutdown = sim.shutdown.clone();
    tokio::spawn(async move {
        let stats = run(store, spec, per_sec, shutdown).await;
        tracing::info!(?stats, "churn stopped");
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::seed::seed_store;

    #[tokio::test(start_paused = true)]
    async fn churn_writes_at_the_rate_and_stops_on_shutdown() {
        let store = Store::new(Default::default());
        let spec = SeedSpec::per_type(20, 4096);
        seed_store(&store, &spec);
        let rv0 = store.current_rv();
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(run(store.clone(), spec, 100.0, rx));
        // Paused time: sleeping advances the clock deterministically.
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        tx.send(true).unwrap();
        let stats = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("churn stops on shutdown")
            .unwrap();
        let writes = stats.updates + stats.creates + stats.deletes;
        assert!((190..=210).contains(&writes), "{stats:?}");
        assert_eq!(store.current_rv() - rv0, writes);
        assert!(stats.updates > stats.creates, "{stats:?}");
        let (_, pods) = store.list(rt("pods"), None);
        let churned = pods
            .iter()
            .filter(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .starts_with("churn-")
            })
            .count() as u64;
        assert_eq!(churned, stats.creates - stats.deletes);
        assert!(churned <= MAX_CHURN_PODS as u64);
    }

    #[test]
    fn steps_update_create_and_delete() {
        let store = Store::new(Default::default());
        let spec = SeedSpec::per_type(3, 4096);
        seed_store(&store, &spec);
        let mut c = Churner::new(spec);
        c.step(&store, 0, 1); // update pod-1
        let p = store.get(rt("pods"), "ns-1", "pod-1").unwrap();
        assert_eq!(p["metadata"]["annotations"]["sim.watchgate.dev/churn"], "1");
        c.step(&store, 70, 2); // update configmap-2
        let cm = store.get(rt("configmaps"), "ns-2", "configmap-2").unwrap();
        assert!(cm["data"]["churn"].is_string());
        c.step(&store, 85, 0); // create churn-0
        assert!(store.get(rt("pods"), "ns-0", "churn-0").is_some());
        c.step(&store, 95, 0); // delete it again
        assert!(store.get(rt("pods"), "ns-0", "churn-0").is_none());
        assert_eq!(
            c.stats,
            ChurnStats {
                updates: 2,
                creates: 1,
                deletes: 1,
                skipped: 0
            }
        );
    }
}

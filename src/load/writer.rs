//! The writer: creates the pool, then applies churn at a fixed rate, stamping every write
//! with its wall-clock time (so each watcher computes the delivery latency of each event)
//! and logging the resourceVersion of every write it made (so each watcher's stream can
//! be checked against it).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use futures_util::{stream, StreamExt};
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::checker::{EventType, WriteRecord, WriterLog};
use super::pool::Pool;
use super::stats::{unix_ns, Stats};
use super::target::Target;

pub fn stamp(run: &str) -> String {
    format!("{run}/{}", unix_ns())
}

/// The resourceVersion of a write's response body.
fn rv_of(body: &[u8]) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.pointer("/metadata/resourceVersion")?
        .as_str()?
        .parse()
        .ok()
}

async fn send_json(
    target: &Target,
    method: Method,
    path: &str,
    ct: &str,
    body: &serde_json::Value,
) -> anyhow::Result<(StatusCode, Bytes)> {
    let resp = target
        .send(
            method,
            path,
            Some((ct, Bytes::from(serde_json::to_vec(body)?))),
        )
        .await?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| anyhow::anyhow!(e))?
        .to_bytes();
    Ok((status, body))
}

/// Creates the namespace (if missing) and the pool; returns the highest RV it wrote.
///
/// Every creation goes into the writer's log as an ADDED record. Watchers that start
/// from the returned RV never expect them, but an informer whose RV=0 list was served
/// from a cache that had not yet seen the whole pool legitimately watches from an older
/// RV and receives the later creations: the checker must know them to accept them.
pub async fn create_pool(
    target: &Target,
    pool: &Pool,
    concurrency: usize,
    log: &Mutex<WriterLog>,
) -> anyhow::Result<u64> {
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": pool.namespace}});
    let (status, body) = send_json(
        target,
        Method::POST,
        "/api/v1/namespaces",
        "application/json",
        &ns,
    )
    .await
    .context("creating the load namespace")?;
    anyhow::ensure!(
        status.is_success() || status == StatusCode::CONFLICT,
        "creating namespace {}: {status} {}",
        pool.namespace,
        String::from_utf8_lossy(&body)
    );
    let path = pool.collection();
    let results: Vec<(usize, anyhow::Result<u64>)> = stream::iter(0..pool.size)
        .map(|i| {
            let obj = pool.object(i, &stamp(&pool.run));
            let path = path.clone();
            async move {
                let created = async {
                    let (status, body) =
                        send_json(target, Method::POST, &path, "application/json", &obj).await?;
                    anyhow::ensure!(
                        status.is_success(),
                        "creating {}: {status} {}",
                        pool.name(i),
                        String::from_utf8_lossy(&body)
                    );
                    rv_of(&body).context("a created object without a resourceVersion")
                };
                (i, created.await)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut max = 0;
    let mut log = log.lock().unwrap();
    for (object, r) in results {
        let rv = r?;
        log.insert(WriteRecord {
            rv,
            object,
            event: EventType::Added,
        });
        max = max.max(rv);
    }
    Ok(max)
}

/// Waits (bounded) until the target's RV=0 reads of the pool's namespace are at least at
/// `rv`, the pool's last creation: a caching target (a watchgate, kube-apiserver's watch
/// cache) then holds the whole pool before the clock starts, so informers list all of it
/// and the run measures steady state, not the cache catching up. The list selects nothing
/// (an impossible shard), so each poll is small whatever the pool's size. Returns whether
/// the target got there; a run that goes on without it is still checked correctly.
pub async fn wait_until_seen(target: &Target, pool: &Pool, rv: u64, timeout: Duration) -> bool {
    let path = format!(
        "{}?resourceVersion=0&labelSelector={}%3Dnone",
        pool.collection(),
        super::pool::SHARD_LABEL
    );
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(resp) = target.send(Method::GET, &path, None).await {
            let ok = resp.status().is_success();
            if let Ok(body) = resp.into_body().collect().await {
                let seen = super::lister::list_rv(&body.to_bytes());
                if ok && seen.is_some_and(|seen| seen >= rv) {
                    return true;
                }
            }
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Deletes the pool (best effort; the run's result does not depend on it).
pub async fn delete_pool(target: &Target, pool: &Pool, concurrency: usize) {
    stream::iter(0..pool.size)
        .for_each_concurrent(concurrency.max(1), |i| async move {
            let path = format!("{}?gracePeriodSeconds=0", pool.object_path(i));
            let _ = target
                .send(Method::DELETE, &path, None)
                .await
                .map(|r| r.into_body());
        })
        .await;
}

/// Removes an object from the unsettled set when its write task ends, however it ends.
struct Settled<'a>(&'a Mutex<std::collections::HashSet<usize>>, usize);

impl Drop for Settled<'_> {
    fn drop(&mut self) {
        self.0.lock().unwrap().remove(&self.1);
    }
}

/// How long a write whose outcome is unknown is read back before it is given up on.
const SETTLE_FOR: Duration = Duration::from_secs(60);

/// A write whose answer was lost (the connection broke, or the gateway answered 5xx after
/// its upstream died) may or may not have been applied. Watchers see it if it was, so the
/// log must say which: read the object back (retrying while the target is unreachable)
/// and log the write if the object carries its stamp. Nothing else writes the object
/// meanwhile (it is unsettled), so its resourceVersion is then the write's. Counted in
/// the errors as `write: unknown outcome, applied` / `…, not applied` / `…, unresolved`.
async fn settle(
    target: &Target,
    path: &str,
    stamped: &str,
    object: usize,
    stats: &Stats,
    log: &Mutex<WriterLog>,
) {
    let deadline = Instant::now() + SETTLE_FOR;
    while Instant::now() < deadline {
        if let Ok(resp) = target.send(Method::GET, path, None).await {
            let status = resp.status();
            if let Ok(body) = resp.into_body().collect().await {
                if status.is_success() {
                    let body = body.to_bytes();
                    let (rv, stamp) = rv_and_stamp(&body);
                    match (rv, stamp) {
                        (Some(rv), Some(s)) if s == stamped => {
                            stats.error("write: unknown outcome, applied");
                            log.lock().unwrap().insert(WriteRecord {
                                rv,
                                object,
                                event: EventType::Modified,
                            });
                        }
                        _ => stats.error("write: unknown outcome, not applied"),
                    }
                    return;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    stats.error("write: unknown outcome, unresolved");
}

/// The resourceVersion and the load stamp of an object's body.
fn rv_and_stamp(body: &[u8]) -> (Option<u64>, Option<String>) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return (None, None);
    };
    let rv = v
        .pointer("/metadata/resourceVersion")
        .and_then(|r| r.as_str())
        .and_then(|r| r.parse().ok());
    let stamp = v
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(super::scan::STAMP_ANNOTATION))
        .and_then(|s| s.as_str())
        .map(String::from);
    (rv, stamp)
}

/// Applies `rate` writes per second round-robin over the pool until `stop`; every write is
/// logged with the RV it produced.
pub async fn run(
    target: Target,
    pool: Arc<Pool>,
    rate: f64,
    max_in_flight: usize,
    stats: Arc<Stats>,
    log: Arc<Mutex<WriterLog>>,
    stop: CancellationToken,
) {
    if rate <= 0.0 || pool.size == 0 {
        stop.cancelled().await;
        return;
    }
    let sem = Arc::new(Semaphore::new(max_in_flight.max(1)));
    // Objects whose last write is not settled yet (in flight, or its outcome unknown):
    // the next write of an object waits until the previous one is in the log or known
    // lost, so that a read-back can tell what happened to it.
    let unsettled: Arc<Mutex<std::collections::HashSet<usize>>> = Arc::default();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    // A stalled target must not be answered with a burst of catch-up writes later.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next = 0usize;
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let Ok(permit) = sem.clone().try_acquire_owned() else {
            Stats::add(&stats.c.writes_behind, 1);
            continue;
        };
        let i = {
            let mut busy = unsettled.lock().unwrap();
            let free = (0..pool.size)
                .map(|k| (next + k) % pool.size)
                .find(|i| !busy.contains(i));
            match free {
                Some(i) => {
                    busy.insert(i);
                    next = i + 1;
                    i
                }
                None => {
                    Stats::add(&stats.c.writes_behind, 1);
                    continue;
                }
            }
        };
        let (target, pool, stats, log) = (target.clone(), pool.clone(), stats.clone(), log.clone());
        let unsettled = unsettled.clone();
        tasks.spawn(async move {
            let _permit = permit;
            let _settled = Settled(&unsettled, i);
            let path = pool.object_path(i);
            let stamped = stamp(&pool.run);
            let patch = Pool::stamp_patch(&stamped);
            let started = Instant::now();
            match send_json(
                &target,
                Method::PATCH,
                &path,
                "application/merge-patch+json",
                &patch,
            )
            .await
            {
                Ok((status, body)) if status.is_success() => {
                    stats.record_write(started.elapsed().as_micros() as u64);
                    Stats::add(&stats.c.writes, 1);
                    match rv_of(&body) {
                        Some(rv) => log.lock().unwrap().insert(WriteRecord {
                            rv,
                            object: i,
                            event: EventType::Modified,
                        }),
                        None => stats.error("write: no resourceVersion"),
                    }
                }
                Ok((status, _)) => {
                    stats.error(format!("write {}", status.as_u16()));
                    // A 5xx may come from a gateway that lost the upstream after the
                    // write was sent: it may have been applied.
                    if status.is_server_error() {
                        settle(&target, &path, &stamped, i, &stats, &log).await;
                    }
                }
                Err(_) => {
                    stats.error("write: connection");
                    settle(&target, &path, &stamped, i, &stats, &log).await;
                }
            }
        });
        // Reap finished writes so the set stays small.
        while tasks.try_join_next().is_some() {}
    }
    // Writes in flight complete and are logged: watchers will see them.
    while tasks.join_next().await.is_some() {}
}

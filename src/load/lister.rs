//! Lists: RV=0 (or any) lists read in full, optionally paginated, timed and counted. Used
//! by the `lists` scenario, by informers before their watch, and by watchers relisting
//! after a 410.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use http_body_util::BodyExt;
use memchr::memmem;
use tokio_util::sync::CancellationToken;

use super::stats::Stats;
use super::target::Target;

/// What a list scenario reads.
#[derive(Debug, Clone)]
pub struct ListSpec {
    /// Collection path, e.g. `/api/v1/pods`.
    pub path: String,
    /// Extra query (selectors), already encoded, without `?`.
    pub query: String,
    /// Page size (0: one response).
    pub limit: usize,
    /// The resourceVersion parameter (`0` for the cache-friendly list).
    pub resource_version: String,
}

/// A string field of the list's head (ListMeta comes before the items).
fn head_field(body: &[u8], name: &str) -> Option<String> {
    let head = &body[..body.len().min(4096)];
    let needle = format!("\"{name}\":\"");
    let at = memmem::find(head, needle.as_bytes())? + needle.len();
    let len = memchr::memchr(b'"', &head[at..])?;
    Some(String::from_utf8_lossy(&head[at..at + len]).into_owned())
}

/// Reads one list (all pages); returns its resourceVersion (of the last page).
pub async fn list_once(target: &Target, spec: &ListSpec, stats: &Stats) -> anyhow::Result<u64> {
    let started = Instant::now();
    let mut cont: Option<String> = None;
    let rv = loop {
        // The serializer is not Send: build the query in a block.
        let mut q = {
            let mut q = form_urlencoded::Serializer::new(String::new());
            if cont.is_none() {
                q.append_pair("resourceVersion", &spec.resource_version);
            }
            if spec.limit > 0 {
                q.append_pair("limit", &spec.limit.to_string());
            }
            if let Some(c) = &cont {
                q.append_pair("continue", c);
            }
            q.finish()
        };
        if !spec.query.is_empty() {
            q.push('&');
            q.push_str(&spec.query);
        }
        let resp = target
            .send(Method::GET, &format!("{}?{q}", spec.path), None)
            .await
            .inspect_err(|_| stats.error("list: connection"))?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        Stats::add(&stats.c.list_bytes, body.len() as u64);
        if !status.is_success() {
            stats.error(format!("list {}", status.as_u16()));
            anyhow::bail!("list {}: {status}", spec.path);
        }
        let rv = head_field(&body, "resourceVersion")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        cont = head_field(&body, "continue").filter(|c| !c.is_empty());
        if cont.is_none() {
            break rv;
        }
    };
    stats.record_list(started.elapsed().as_micros() as u64);
    Stats::add(&stats.c.lists, 1);
    Ok(rv)
}

/// Closed loop: `concurrency` workers listing back to back until `stop`.
pub async fn closed_loop(
    target: Target,
    spec: Arc<ListSpec>,
    concurrency: usize,
    stats: Arc<Stats>,
    stop: CancellationToken,
) {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (target, spec, stats, stop) =
            (target.clone(), spec.clone(), stats.clone(), stop.clone());
        set.spawn(async move {
            while !stop.is_cancelled() {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    r = list_once(&target, &spec, &stats) => {
                        if r.is_err() {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
}

/// Open loop: `rate` lists per second (at most `max_in_flight` at once) until `stop`.
pub async fn at_rate(
    target: Target,
    spec: Arc<ListSpec>,
    rate: f64,
    max_in_flight: usize,
    stats: Arc<Stats>,
    stop: CancellationToken,
) {
    let sem = Arc::new(tokio::sync::Semaphore::new(max_in_flight.max(1)));
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.001)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut set = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let Ok(permit) = sem.clone().try_acquire_owned() else {
            stats.error("list: behind (too many in flight)");
            continue;
        };
        let (target, spec, stats, stop) =
            (target.clone(), spec.clone(), stats.clone(), stop.clone());
        set.spawn(async move {
            let _permit = permit;
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = list_once(&target, &spec, &stats) => {}
            }
        });
        while set.try_join_next().is_some() {}
    }
    while set.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_list_head() {
        let body = br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"abc"},"items":[{"metadata":{"resourceVersion":"7"}}]}"#;
        assert_eq!(head_field(body, "resourceVersion").as_deref(), Some("42"));
        assert_eq!(head_field(body, "continue").as_deref(), Some("abc"));
    }
}

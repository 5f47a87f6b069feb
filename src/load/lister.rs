//! Lists: RV=0 (or any) lists read in full, optionally paginated, timed and counted. Used
//! by the `lists` scenario, by informers before their watch, and by watchers relisting
//! after a 410.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use http_body_util::BodyExt;
use memchr::memmem;
use tokio_util::sync::CancellationToken;

use super::encoding::{is_protobuf, Encoding};
use super::proto_scan::scan_proto_list;
use super::stats::{unix_ns, Stats};
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
    /// The resourceVersion parameter (`0` for the cache-friendly list; empty: none is
    /// sent, a consistent list, which honours `limit`).
    pub resource_version: String,
    /// The representation asked for (`--encoding`).
    pub encoding: Encoding,
}

/// A string field of the list's head (ListMeta comes before the items).
fn head_field(body: &[u8], name: &str) -> Option<String> {
    let head = &body[..body.len().min(4096)];
    let needle = format!("\"{name}\":\"");
    let at = memmem::find(head, needle.as_bytes())? + needle.len();
    let len = memchr::memchr(b'"', &head[at..])?;
    Some(String::from_utf8_lossy(&head[at..at + len]).into_owned())
}

/// The resourceVersion of a list body (its ListMeta's).
pub fn list_rv(body: &[u8]) -> Option<u64> {
    head_field(body, "resourceVersion")?.parse().ok()
}

/// The number of objects in the top-level `items` array of a list body (a Kubernetes
/// list's items are always objects), or `None` if the body has none (not a list, or cut
/// short).
///
/// A structural scan rather than a parse: the load tool reads lists at gigabytes per second
/// and must not become the bottleneck it measures. Only string boundaries and nesting are
/// tracked; string contents (most of a pod's bytes) are skipped with memchr.
pub fn count_items(body: &[u8]) -> Option<u64> {
    let mut depth = 0usize;
    // Whether the last key read at depth 1 was `items`, and whether we are inside its array.
    let mut key_is_items = false;
    let mut in_items = false;
    let mut items = None;
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => {
                // Find the closing quote, skipping escaped ones.
                let start = i + 1;
                let mut j = start;
                loop {
                    j += memchr::memchr2(b'"', b'\\', body.get(j..)?)?;
                    if body[j] == b'\\' {
                        j += 2;
                        continue;
                    }
                    break;
                }
                if depth == 1 {
                    key_is_items = &body[start..j] == b"items";
                }
                i = j + 1;
                continue;
            }
            b'{' | b'[' => {
                if depth == 1 && body[i] == b'[' && key_is_items {
                    in_items = true;
                    items = Some(0);
                } else if depth == 2 && in_items {
                    items = items.map(|n| n + 1);
                }
                depth += 1;
            }
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 1 {
                    in_items = false;
                }
            }
            _ => {}
        }
        i += 1;
    }
    (depth == 0).then_some(items).flatten()
}

/// Reads one list (all pages); returns its resourceVersion (of the last page).
pub async fn list_once(target: &Target, spec: &ListSpec, stats: &Stats) -> anyhow::Result<u64> {
    let started = Instant::now();
    let started_ns = unix_ns();
    let mut cont: Option<String> = None;
    let (mut pages, mut items) = (0u64, 0u64);
    let rv = loop {
        // The serializer is not Send: build the query in a block.
        let mut q = {
            let mut q = form_urlencoded::Serializer::new(String::new());
            if cont.is_none() && !spec.resource_version.is_empty() {
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
            .send_accepting(
                Method::GET,
                &format!("{}?{q}", spec.path),
                None,
                spec.encoding.accept(),
            )
            .await
            .inspect_err(|_| stats.error("list: connection"))?;
        let status = resp.status();
        let protobuf = is_protobuf(resp.headers().get(http::header::CONTENT_TYPE));
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!(e))?
            .to_bytes();
        Stats::add(&stats.c.list_bytes, body.len() as u64);
        pages += 1;
        if !status.is_success() {
            stats.error(format!("list {}", status.as_u16()));
            anyhow::bail!("list {}: {status}", spec.path);
        }
        let rv = if protobuf {
            Stats::add(&stats.c.protobuf_lists, 1);
            let head = scan_proto_list(&body).map_err(|e| {
                stats.error("list: undecodable protobuf");
                anyhow::anyhow!("list {}: {e}", spec.path)
            })?;
            items += head.items;
            cont = head.continue_token;
            head.resource_version.unwrap_or(0)
        } else {
            let Some(n) = count_items(&body) else {
                stats.error("list: not a list");
                anyhow::bail!("list {}: the body has no items array", spec.path);
            };
            items += n;
            cont = head_field(&body, "continue").filter(|c| !c.is_empty());
            head_field(&body, "resourceVersion")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0)
        };
        if cont.is_none() {
            break rv;
        }
    };
    stats.record_list(
        started_ns,
        started.elapsed().as_micros() as u64,
        pages,
        items,
    );
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

    #[test]
    fn counts_the_items_of_a_list() {
        // Nested arrays and objects, brackets and quotes inside strings, an `items` key
        // deeper down, and whitespace: only the top-level items count.
        let body = br#"{"kind":"PodList","metadata":{"resourceVersion":"42","items":"x"},
            "items": [ {"metadata":{"name":"a]}\"[{","labels":{"items":"[1,2]"}},"spec":{"containers":[{"a":1},{"b":[2,3]}]}},
                       {"metadata":{"name":"b"}} , {"items":[{},{}]} ],
            "trailer":[{},{}]}"#;
        assert_eq!(count_items(body), Some(3));
        assert_eq!(count_items(br#"{"kind":"PodList","items":[]}"#), Some(0));
        // Not a list, or cut short: no count rather than a wrong one.
        assert_eq!(count_items(br#"{"kind":"Status","code":410}"#), None);
        assert_eq!(count_items(br#"{"items":[{"a":1},{"b""#), None);
    }
}

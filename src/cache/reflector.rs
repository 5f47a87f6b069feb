//! The reflector: ONE upstream list+watch per resource type, feeding the store.
//!
//! It is an explicit state machine, after kube-runtime's `watcher`:
//!
//! ```text
//!   Listing ──(all pages read)──▶ Watching(rv) ──(stream ends)──▶ Watching(last rv)
//!      ▲                              │
//!      └────(410 Expired / malformed event / list error, with backoff)──┘
//! ```
//!
//! A list is read page by page (`limit=500`, as client-go's reflector pages) into a new
//! snapshot that replaces the store's state in one step, so readers see the old state or
//! the new one, never half a list. Bookmarks only advance the resourceVersion. Errors back
//! off exponentially with jitter so that a sick apiserver is not hammered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use rand::Rng;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::watch;

use super::events::{Bookmark, ErrorStatus, LineSplitter, RawEvent};
use super::object::CachedObject;
use super::resource::ResourceInfo;
use super::store::{Change, Snapshot, Store};
use crate::body;
use crate::upstream::Upstream;

/// Page size of upstream lists, as client-go's reflector uses.
const PAGE_SIZE: u32 = 500;
/// The largest list page accepted; far above 500 objects of the 1.5 MiB etcd limit is a
/// broken upstream, and the bound keeps the reflector's memory bounded.
const MAX_PAGE_BYTES: usize = 1024 * 1024 * 1024;

/// Counters a later metrics layer exports; kept as atomics so the reflector never waits.
#[derive(Debug, Default)]
pub struct ReflectorStats {
    pub lists: AtomicU64,
    pub relists_after_expired: AtomicU64,
    pub watch_restarts: AtomicU64,
    pub errors: AtomicU64,
    pub malformed_objects: AtomicU64,
    pub events: AtomicU64,
    /// How long the last completed list took, in milliseconds (at least 1; 0 = none yet).
    pub sync_millis: AtomicU64,
}

/// Jittered exponential backoff: 0.8 s doubling to 30 s, like kube-runtime's default.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            next: Self::INITIAL,
        }
    }
}

impl Backoff {
    const INITIAL: Duration = Duration::from_millis(800);
    const MAX: Duration = Duration::from_secs(30);

    pub fn reset(&mut self) {
        self.next = Self::INITIAL;
    }

    /// The next delay: the current step with ±50 % jitter, then double the step.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        base.mul_f64(rand::rng().random_range(0.5..1.5))
    }
}

/// How one watch ended.
#[derive(Debug)]
enum WatchEnd {
    /// The stream ended normally (timeout, upstream closed): resume from this RV.
    Closed,
    /// 410 Expired (or Gone): the RV is compacted; relist.
    Expired(String),
    /// Something broke; resume from the last RV after a backoff.
    Failed(String),
    /// An event could not be understood: relist so that nothing is lost.
    Malformed(String),
}

/// The reflector of one resource type.
pub struct Reflector {
    info: Arc<ResourceInfo>,
    upstream: Upstream,
    store: Arc<Store>,
    synced: watch::Sender<bool>,
    stats: Arc<ReflectorStats>,
}

impl Reflector {
    pub fn new(
        info: Arc<ResourceInfo>,
        upstream: Upstream,
        store: Arc<Store>,
        synced: watch::Sender<bool>,
        stats: Arc<ReflectorStats>,
    ) -> Self {
        Self {
            info,
            upstream,
            store,
            synced,
            stats,
        }
    }

    /// Runs until the task is dropped or aborted.
    pub async fn run(self) {
        let mut backoff = Backoff::default();
        let mut listed = false;
        loop {
            if !listed {
                tracing::info!(resource = %self.info.resource, "listing {}…", self.info.resource);
                let started = std::time::Instant::now();
                match self.list().await {
                    Ok(snapshot) => {
                        let (n, rv) = (snapshot.len(), snapshot.resource_version);
                        let bytes = snapshot.bytes;
                        self.store.replace(snapshot);
                        self.synced.send_replace(true);
                        listed = true;
                        backoff.reset();
                        let took = started.elapsed();
                        let millis = (took.as_millis() as u64).max(1);
                        self.stats.sync_millis.store(millis, Ordering::Relaxed);
                        tracing::info!(
                            resource = %self.info.resource,
                            objects = n,
                            bytes,
                            resource_version = rv,
                            "synced {} {} ({}) in {}",
                            crate::logging::thousands(n as u64),
                            self.info.resource,
                            crate::logging::megabytes(bytes as u64),
                            crate::logging::seconds(took)
                        );
                    }
                    Err(err) => {
                        self.stats.errors.fetch_add(1, Ordering::Relaxed);
                        let delay = backoff.next_delay();
                        tracing::warn!(resource = %self.info.resource, error = %err, "list failed; retrying in {delay:.1?}");
                        tokio::time::sleep(delay).await;
                        continue;
                    }
                }
            }
            let from = self.store.resource_version();
            match self.watch(from).await {
                WatchEnd::Closed => {
                    self.stats.watch_restarts.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(resource = %self.info.resource, "watch ended; resuming from {}", self.store.resource_version());
                    backoff.reset();
                }
                WatchEnd::Expired(msg) => {
                    self.stats
                        .relists_after_expired
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::info!(resource = %self.info.resource, "watch expired ({msg}); relisting");
                    listed = false;
                }
                WatchEnd::Malformed(msg) => {
                    self.stats.malformed_objects.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(resource = %self.info.resource, "malformed watch event ({msg}); relisting");
                    listed = false;
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                WatchEnd::Failed(msg) => {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    let delay = backoff.next_delay();
                    tracing::warn!(resource = %self.info.resource, "watch failed ({msg}); resuming in {delay:.1?}");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    async fn get(&self, path_and_query: String) -> Result<(StatusCode, Bytes), String> {
        let req = Request::builder()
            .method(Method::GET)
            .uri(path_and_query)
            .header(http::header::ACCEPT, "application/json")
            .body(body::empty())
            .map_err(|e| e.to_string())?;
        let resp = self.upstream.send(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let bytes = Limited::new(resp.into_body(), MAX_PAGE_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading list body: {e}"))?
            .to_bytes();
        Ok((status, bytes))
    }

    /// Reads the whole collection, page by page, into a new snapshot.
    async fn list(&self) -> Result<Snapshot, String> {
        self.stats.lists.fetch_add(1, Ordering::Relaxed);
        let base = self.info.collection_path();
        let mut snapshot = Snapshot::default();
        let mut cont: Option<String> = None;
        loop {
            let query = {
                let mut q = form_urlencoded::Serializer::new(String::new());
                q.append_pair("limit", &PAGE_SIZE.to_string());
                if let Some(c) = &cont {
                    q.append_pair("continue", c);
                }
                q.finish()
            };
            let (status, bytes) = self.get(format!("{base}?{query}")).await?;
            if !status.is_success() {
                return Err(format!(
                    "list returned {status}: {}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(512)])
                ));
            }
            let page: ListPage<'_> =
                serde_json::from_slice(&bytes).map_err(|e| format!("list is not JSON: {e}"))?;
            for item in page.items {
                match CachedObject::parse(
                    Bytes::copy_from_slice(item.get().as_bytes()),
                    &self.info.field_labels,
                ) {
                    Ok(obj) => {
                        snapshot.insert(Arc::new(obj));
                    }
                    Err(err) => {
                        // One broken object must not keep the whole type out of the cache;
                        // it is counted and logged, and the watch will bring its next version.
                        self.stats.malformed_objects.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(resource = %self.info.resource, error = %err, "skipping malformed object in list");
                    }
                }
            }
            let rv = page.metadata.resource_version.parse::<u64>().map_err(|_| {
                format!(
                    "list resourceVersion {:?} is not a number",
                    page.metadata.resource_version
                )
            })?;
            // Every page of a paged list is served at the first page's resourceVersion.
            snapshot.resource_version = rv;
            match page.metadata.cont {
                Some(c) if !c.is_empty() => cont = Some(c),
                _ => return Ok(snapshot),
            }
        }
    }

    /// Watches from `from` until the stream ends, applying every event to the store.
    async fn watch(&self, from: u64) -> WatchEnd {
        // A randomised timeout spreads reconnects, like client-go's 5–10 minute choice.
        let timeout = rand::rng().random_range(300..600);
        let path = format!(
            "{}?allowWatchBookmarks=true&resourceVersion={from}&timeoutSeconds={timeout}&watch=true",
            self.info.collection_path()
        );
        let req = match Request::builder()
            .method(Method::GET)
            .uri(path)
            .header(http::header::ACCEPT, "application/json")
            .body(body::empty())
        {
            Ok(r) => r,
            Err(e) => return WatchEnd::Failed(e.to_string()),
        };
        let resp = match self.upstream.send(req).await {
            Ok(r) => r,
            Err(e) => return WatchEnd::Failed(e.to_string()),
        };
        let status = resp.status();
        if status == StatusCode::GONE {
            return WatchEnd::Expired(format!("HTTP {status}"));
        }
        if !status.is_success() {
            return WatchEnd::Failed(format!("watch returned {status}"));
        }
        let mut body = resp.into_body();
        let mut lines = LineSplitter::default();
        loop {
            let frame = match body.frame().await {
                None => return WatchEnd::Closed,
                Some(Err(e)) => return WatchEnd::Failed(format!("watch stream broke: {e}")),
                Some(Ok(f)) => f,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let batch = match lines.push(data) {
                Ok(b) => b,
                Err(e) => return WatchEnd::Malformed(e.to_string()),
            };
            for line in batch {
                if let Some(end) = self.apply_event(&line) {
                    return end;
                }
            }
        }
    }

    /// Applies one event line; returns how the watch ends if this event ends it.
    fn apply_event(&self, line: &[u8]) -> Option<WatchEnd> {
        let ev: RawEvent<'_> = match serde_json::from_slice(line) {
            Ok(ev) => ev,
            Err(e) => return Some(WatchEnd::Malformed(format!("event is not JSON: {e}"))),
        };
        self.stats.events.fetch_add(1, Ordering::Relaxed);
        let object = || {
            CachedObject::parse(
                Bytes::copy_from_slice(ev.object.get().as_bytes()),
                &self.info.field_labels,
            )
            .map(Arc::new)
        };
        match ev.kind {
            "ADDED" | "MODIFIED" => match object() {
                Ok(o) => self.store.apply(Change::Upsert(o)),
                Err(e) => return Some(WatchEnd::Malformed(e.to_string())),
            },
            "DELETED" => match object() {
                Ok(o) => self.store.apply(Change::Delete(o)),
                Err(e) => return Some(WatchEnd::Malformed(e.to_string())),
            },
            "BOOKMARK" => {
                let rv = serde_json::from_str::<Bookmark<'_>>(ev.object.get())
                    .ok()
                    .and_then(|b| b.metadata.resource_version.parse::<u64>().ok());
                match rv {
                    Some(rv) => self.store.apply(Change::Progress(rv)),
                    None => {
                        return Some(WatchEnd::Malformed(
                            "bookmark without a numeric resourceVersion".into(),
                        ))
                    }
                }
            }
            "ERROR" => {
                let st: ErrorStatus =
                    serde_json::from_str(ev.object.get()).unwrap_or(ErrorStatus {
                        code: 0,
                        reason: String::new(),
                        message: ev.object.get().to_string(),
                    });
                return Some(
                    if st.code == 410 || st.reason == "Expired" || st.reason == "Gone" {
                        WatchEnd::Expired(st.message)
                    } else {
                        WatchEnd::Failed(format!("watch error {}: {}", st.code, st.message))
                    },
                );
            }
            other => return Some(WatchEnd::Malformed(format!("unknown event type {other:?}"))),
        }
        None
    }
}

#[derive(Deserialize)]
struct ListPage<'a> {
    metadata: ListMeta,
    #[serde(borrow, default)]
    items: Vec<&'a RawValue>,
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
    #[serde(rename = "continue", default)]
    cont: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_caps() {
        let mut b = Backoff::default();
        let first = b.next_delay();
        assert!(first >= Duration::from_millis(400) && first <= Duration::from_millis(1200));
        for _ in 0..20 {
            let d = b.next_delay();
            assert!(d <= Duration::from_secs(45), "{d:?}");
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(1200));
    }
}

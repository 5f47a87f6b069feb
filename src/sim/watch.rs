//! WATCH: newline-delimited JSON events (`{"type":..,"object":..}`), or in protobuf
//! (`application/vnd.kubernetes.protobuf;stream=watch`) length-prefixed `WatchEvent`
//! frames whose object is the full `k8s\0` + `runtime.Unknown` envelope; one chunk per
//! event. A protobuf BOOKMARK carries the zero object of the type with only
//! `metadata.resourceVersion` (and the initial-events-end annotation), every Go value
//! field written, as the apiserver's `newFunc()` object encodes; ERROR events carry the
//! Status.
//!
//! Each watcher is one task reading the store's shared history through its own cursor
//! (no per-watcher event queue: the only buffer is a small bounded channel of encoded
//! frames towards hyper). A watcher that falls behind the history window gets the 410
//! ERROR event, as a slow cacheWatcher would be terminated by kube-apiserver.
//!
//! Semantics follow k8s.io/apiserver cacher.go `Watch` + watch_cache.go
//! (`getAllEventsSinceLocked`: "too old resource version: N (M)"), cache_watcher.go
//! (selector transitions, bookmarks, the `k8s.io/initial-events-end` annotation) and
//! handlers/get.go + watch.go (timeoutSeconds, legacy `/watch/` paths). See
//! docs/simulator.md.

// `Status` is the error currency of every handler (one per failed request), so its size
// does not matter on these paths.
#![allow(clippy::result_large_err)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use http_body::Frame;
use http_body_util::StreamBody;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::body::{self, Body, BoxError};
use crate::negotiate::Encoding;
use crate::request::{parse_resource_version, ApiRequest, ListOptions, ResourcePath, WatchTimeout};
use crate::sim::answer::{self, Answer};
use crate::sim::bookmarks::Schedule;
use crate::sim::convert::Events;
use crate::sim::list::{check_field_labels, matches, wait_for_rv};
use crate::sim::protobuf;
use crate::sim::resources::ResourceType;
use crate::sim::store::{EventType, HistoryError, ReadAt};
use crate::sim::{wait_shutdown, Sim};
use crate::status::Status;

use crate::duration::deadline_after;
pub use crate::watch::event::{value_line as event_line, INITIAL_EVENTS_END};

/// Without timeoutSeconds the apiserver picks minRequestTimeout (1800 s) × [1, 2).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// Events read from history per lock acquisition.
const BATCH: usize = 256;

/// Frames buffered towards the connection: small, so a slow client stalls only itself.
const FRAME_BUFFER: usize = 16;

fn too_old(requested: u64, compacted: u64) -> Status {
    Status::too_old_resource_version(requested, compacted)
}

/// One watch event line around an already-encoded object.
pub fn event_line_raw(kind: &str, object_json: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(object_json.len() + 32);
    v.extend_from_slice(b"{\"type\":");
    let _ = serde_json::to_writer(&mut v, kind);
    v.extend_from_slice(b",\"object\":");
    v.extend_from_slice(object_json);
    v.extend_from_slice(b"}\n");
    Bytes::from(v)
}

/// The BOOKMARK object: the type's zero object (a custom resource: a map with sorted
/// keys) with only metadata.resourceVersion, plus the initial-events-end annotation when
/// it closes the initial events (`crate::bookmark`).
pub fn bookmark(rt: &ResourceType, rv: u64, initial_end: bool) -> Value {
    crate::bookmark::BookmarkObject::new(&rt.api_version(), rt.kind).at(rv, initial_end)
}

/// One event in the stream's encoding; `None` when the object has no protobuf (the
/// stream ends, as the apiserver's watch server stops on an encoding error).
fn event_bytes(encoding: Encoding, kind: &str, obj: &Value) -> Option<Bytes> {
    match encoding {
        Encoding::Protobuf => protobuf::encode_value(obj)
            .ok()
            .map(|env| protobuf::frame(kind, &env)),
        _ => Some(event_line(kind, obj)),
    }
}

/// The object of the DELETED event sent when an object stops matching a watcher's
/// selector: the previous state with `metadata.resourceVersion` set to the event's RV
/// (cache_watcher.go `convertToWatchEvent`: `updateResourceVersion(oldObj, .., event RV)`),
/// so the watcher can resume from that RV.
pub fn left_selector(prev: &Value, rv: u64) -> Value {
    let mut obj = prev.clone();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
    }
    obj
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Synthetic ADDED events for the current state, then changes after it.
    /// `end_bookmark`: close the initial events with the initial-events-end bookmark.
    InitialState { end_bookmark: bool },
    /// Changes after this RV only.
    After(u64),
}

struct Watcher {
    sim: Arc<Sim>,
    rt: &'static ResourceType,
    ns: Option<String>,
    opts: ListOptions,
    /// Table / PartialObjectMetadata conversion of the event objects (convert.rs).
    events: Events,
    /// JSON lines or protobuf frames (the stream negotiation's encoding).
    encoding: Encoding,
    tx: mpsc::Sender<Bytes>,
    /// `Faults::drop_watches_now`, subscribed to before the response head goes out: a
    /// drop asked for once the client has the head ends this stream, even if its task has
    /// not run yet.
    drop_rx: tokio::sync::watch::Receiver<u64>,
}

impl Watcher {
    fn in_scope(&self, key: &str) -> bool {
        match &self.ns {
            None => true,
            Some(n) => {
                key.len() > n.len()
                    && key.starts_with(n.as_str())
                    && key.as_bytes()[n.len()] == b'/'
            }
        }
    }

    /// One event; false when the stream must end (the client left, or the object cannot
    /// be encoded in the asked form).
    async fn send(&mut self, kind: &str, obj: &Value) -> bool {
        let Some(o) = self.events.event_object(obj) else {
            return false;
        };
        let Some(line) = event_bytes(self.encoding, kind, &o) else {
            return false;
        };
        self.tx.send(line).await.is_ok()
    }

    /// A history event: plain answers reuse the event's shared encoding.
    async fn send_event(&mut self, kind: &str, ev: &crate::sim::store::Event) -> bool {
        if !self.events.is_plain() {
            return self.send(kind, &ev.object).await;
        }
        let line = match self.encoding {
            Encoding::Protobuf => match ev.object_envelope() {
                Some(env) => protobuf::frame(kind, env),
                None => return false,
            },
            _ => event_line_raw(kind, ev.object_json()),
        };
        self.tx.send(line).await.is_ok()
    }

    async fn send_error(&self, s: &Status) {
        if let Some(line) = event_bytes(self.encoding, "ERROR", &s.to_value()) {
            let _ = self.tx.send(line).await;
        }
    }

    async fn run(mut self, start: Start, timeout: Duration) {
        if timeout.is_zero() {
            // A negative timeoutSeconds: the apiserver's timer has fired before its serve
            // loop selects, which picks it or a ready event at random; nothing is the
            // likeliest outcome, and the one given every time (the gateway's too).
            return;
        }
        let started = Instant::now();
        let deadline = deadline_after(started, timeout);
        let drop_at = self.sim.faults.drop_watch_after().map(|d| started + d);
        let mut shutdown = self.sim.shutdown.clone();
        let mut rv_rx = self.sim.store.subscribe();
        rv_rx.borrow_and_update();
        // A frozen server (a lagging apiserver) delivers nothing past its frozen RV.
        let mut frozen_rx = self.sim.faults.frozen_signal();
        frozen_rx.borrow_and_update();
        // The watch cache's schedule (`sim::bookmarks`): a heartbeat each bookmark
        // interval and one about 2 s before the deadline, at its timer's ticks. Only
        // watchers that allow bookmarks are queued for them.
        let schedule = Schedule::new(
            self.sim.bookmark_epoch,
            self.sim.cfg.bookmark_interval,
            deadline,
        );
        let mut next_bookmark = schedule
            .first(started)
            .filter(|_| self.opts.allow_watch_bookmarks);

        let mut cursor = match start {
            Start::After(rv) => rv,
            Start::InitialState { end_bookmark } => {
                let at = if self.sim.visible_rv() < self.sim.store.current_rv() {
                    ReadAt::Exact(self.sim.visible_rv())
                } else {
                    ReadAt::Latest
                };
                let snap = match self.sim.store.snapshot(self.rt, self.ns.as_deref(), at) {
                    Ok(s) => s,
                    Err(_) => return,
                };
                for (_, obj) in &snap.items {
                    if matches(self.rt, &self.opts, obj) && !self.send("ADDED", obj).await {
                        return;
                    }
                }
                if end_bookmark && self.opts.allow_watch_bookmarks {
                    if !self
                        .send("BOOKMARK", &bookmark(self.rt, snap.rv, true))
                        .await
                    {
                        return;
                    }
                    next_bookmark = schedule.next(Instant::now());
                }
                snap.rv
            }
        };

        loop {
            if Instant::now() >= deadline || drop_at.is_some_and(|d| Instant::now() >= d) {
                return;
            }
            let visible = self.sim.visible_rv();
            let history = if cursor < visible {
                self.sim.store.events_since(self.rt, cursor, BATCH)
            } else {
                Ok((Vec::new(), cursor))
            };
            match history {
                Err(HistoryError::Compacted {
                    requested,
                    compacted,
                }) => {
                    self.send_error(&too_old(requested, compacted)).await;
                    return;
                }
                Ok((events, new_cursor)) => {
                    let scanned = events.len();
                    // Events past the visible RV wait for it; a cursor already past it (a
                    // watch from a future RV) never moves back.
                    let new_cursor = new_cursor.min(visible).max(cursor);
                    for ev in events.iter().take_while(|e| e.rv <= visible) {
                        if !self.in_scope(&ev.key) {
                            continue;
                        }
                        let now_match = ev.kind != EventType::Deleted
                            && matches(self.rt, &self.opts, &ev.object);
                        let was_match = ev
                            .prev
                            .as_ref()
                            .is_some_and(|p| matches(self.rt, &self.opts, p));
                        let sent = match (ev.kind, was_match, now_match) {
                            (EventType::Deleted, true, _) => self.send_event("DELETED", ev).await,
                            (EventType::Deleted, false, _) => continue,
                            (_, true, true) => self.send_event("MODIFIED", ev).await,
                            (_, false, true) => self.send_event("ADDED", ev).await,
                            // Stopped matching: DELETED carrying the PREVIOUS object (the
                            // one the watcher knew) stamped with this event's RV, as
                            // cache_watcher.go convertToWatchEvent does.
                            (_, true, false) => match &ev.prev {
                                Some(prev) => {
                                    self.send("DELETED", &left_selector(prev, ev.rv)).await
                                }
                                None => continue,
                            },
                            (_, false, false) => continue,
                        };
                        if !sent {
                            return;
                        }
                    }
                    let caught_up = scanned < BATCH && new_cursor >= self.sim.visible_rv();
                    cursor = new_cursor;
                    // Under constant churn the wait below is always cut short by a
                    // write, so a due bookmark is sent here too.
                    let now = Instant::now();
                    if next_bookmark.is_some_and(|t| now >= t) {
                        // Requeued as `finishDispatching` does, once it went out.
                        next_bookmark = schedule.next(now);
                        if !self
                            .send("BOOKMARK", &bookmark(self.rt, cursor, false))
                            .await
                        {
                            return;
                        }
                    }
                    if !caught_up {
                        continue;
                    }
                }
            }
            // Caught up: wait for a write, the next bookmark, the end, or a fault.
            let mut wake = deadline;
            for t in [drop_at, next_bookmark].into_iter().flatten() {
                wake = wake.min(t);
            }
            tokio::select! {
                r = rv_rx.changed() => { if r.is_err() { return; } }
                _ = tokio::time::sleep_until(wake) => {
                    let now = Instant::now();
                    if next_bookmark.is_some_and(|t| now >= t) {
                        next_bookmark = schedule.next(now);
                        if !self.send("BOOKMARK", &bookmark(self.rt, cursor, false)).await {
                            return;
                        }
                    }
                }
                _ = self.drop_rx.changed() => return,
                r = frozen_rx.changed() => { if r.is_err() { return; } }
                _ = wait_shutdown(&mut shutdown) => return,
                _ = self.tx.closed() => return,
            }
        }
    }
}

fn stream_response(rx: mpsc::Receiver<Bytes>, encoding: Encoding) -> Response<Body> {
    let s = stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, BoxError>(Frame::data(b)), rx))
    });
    let mut resp = Response::new(body::boxed(StreamBody::new(s)));
    *resp.status_mut() = StatusCode::OK;
    // handlers/watch.go: JSON streams say `application/json`, the others
    // `<type>;stream=watch`.
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(encoding.watch_content_type()),
    );
    resp
}

/// A 200 stream carrying exactly one ERROR event (what the cacher's `newErrWatcher` does).
fn error_stream(s: &Status, encoding: Encoding) -> Response<Body> {
    let (tx, rx) = mpsc::channel(1);
    if let Some(line) = event_bytes(encoding, "ERROR", &s.to_value()) {
        let _ = tx.try_send(line);
    }
    stream_response(rx, encoding)
}

/// WATCH.
pub async fn handle(
    sim: &Arc<Sim>,
    api: &ApiRequest,
    headers: &HeaderMap,
    rt: &'static ResourceType,
    rp: &ResourcePath,
) -> Response<Body> {
    sim.stats.record_request(
        "watch",
        &rt.group_resource().to_string(),
        &api.query,
        headers,
    );
    // handlers/get.go ListResource: the list negotiation comes first.
    let answer = match Answer::negotiate(rt, headers, api) {
        Ok(a) => a,
        Err(s) => return answer::error(&s, headers, api),
    };
    match watch(sim, api, &answer, rt, rp).await {
        Ok(resp) => resp,
        Err(s) => answer::error(&s, headers, api),
    }
}

/// How a watch begins, once `rw.Watch` has run.
enum Begin {
    Stream(Start),
    /// A 200 carrying one ERROR event (the cacher's `newErrWatcher`).
    Error(Status),
}

async fn watch(
    sim: &Arc<Sim>,
    api: &ApiRequest,
    answer: &Answer,
    rt: &'static ResourceType,
    rp: &ResourcePath,
) -> Result<Response<Body>, Status> {
    let mut opts = api.list_options()?;
    check_field_labels(rt, &opts.field_selector)?;
    // A name in a legacy /watch/ path becomes (or must agree with) metadata.name.
    if let Some(name) = &rp.name {
        if opts.field_selector.is_empty() {
            opts.field_selector
                .terms
                .push(crate::selector::field::Term {
                    field: "metadata.name".into(),
                    equals: true,
                    value: name.clone(),
                });
        } else if opts.field_selector.requires_exact("metadata.name") != Some(name.as_str()) {
            return Err(Status::bad_request(
                "fieldSelector metadata.name doesn't match requested name",
            ));
        }
    }
    let begin = begin(sim, &opts).await?;
    // serveWatchHandler, after rw.Watch: the transform options (400), then the stream
    // serializer (406: YAML has none), so both win over an ERROR-event watch.
    let events = Events::for_watch(sim, rt, answer, api)?;
    // The events' encoding is the stream serializer's; the conversion the list
    // negotiation's (serveWatchHandler).
    let encoding = answer.stream()?.encoding;
    let start = match begin {
        Begin::Error(s) => return Ok(error_stream(&s, encoding)),
        Begin::Stream(start) => start,
    };
    // Go's conversion, overflow included (`ListOptions::watch_timeout`).
    let timeout = match opts.watch_timeout() {
        WatchTimeout::Expired => Duration::ZERO,
        WatchTimeout::Default => DEFAULT_TIMEOUT,
        WatchTimeout::After(d) => d,
    };
    let (tx, rx) = mpsc::channel(FRAME_BUFFER);
    let w = Watcher {
        sim: sim.clone(),
        rt,
        ns: rp.namespace.clone(),
        opts,
        events,
        encoding,
        tx,
        drop_rx: sim.faults.drop_signal(),
    };
    tokio::spawn(w.run(start, timeout));
    Ok(stream_response(rx, encoding))
}

/// The cacher's `Watch`: where the stream starts, or the ERROR event it carries.
async fn begin(sim: &Arc<Sim>, opts: &ListOptions) -> Result<Begin, Status> {
    let rv_str = opts.resource_version.clone().unwrap_or_default();
    // cacher.Watch returns the storage InvalidError unchanged: 500, empty reason.
    let rv = parse_resource_version(&rv_str).map_err(|e| Status::new(500, "", e.to_string()))?;
    let current = sim.store.current_rv();
    if sim.faults.begin_watch(rv, current) {
        let compacted = sim.store.compacted_rv();
        return Ok(Begin::Error(too_old(rv, current.max(compacted))));
    }
    let start = match opts.send_initial_events {
        Some(true) => {
            // watch-list: the watch cache must first reach RV N, or, with RV unset (a
            // consistent read), the store's current RV (cacher.go
            // `waitUntilWatchCacheFreshAndForceAllEvents`: blockTimeout, then the 504 as
            // an ERROR event). RV="0" takes the cache as it is.
            let required = if rv > 0 {
                Some(rv)
            } else if rv_str.is_empty() {
                Some(sim.store.current_rv())
            } else {
                None
            };
            if let Some(required) = required {
                if let Err(s) = wait_for_rv(sim, required).await {
                    return Ok(Begin::Error(s));
                }
            }
            Start::InitialState { end_bookmark: true }
        }
        Some(false) => {
            if rv == 0 {
                Start::After(sim.store.current_rv())
            } else {
                Start::After(rv)
            }
        }
        None => {
            if rv == 0 {
                Start::InitialState {
                    end_bookmark: false,
                }
            } else {
                Start::After(rv)
            }
        }
    };
    if let Start::After(n) = start {
        let compacted = sim.store.compacted_rv();
        if n < compacted {
            return Ok(Begin::Error(too_old(n, compacted)));
        }
    }
    Ok(Begin::Stream(start))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// `drop_watches_now` ends every watch whose response head is out, including one whose
    /// task has not run yet. On this current-thread runtime the watch's task cannot run
    /// before the drop: had it subscribed to the drop signal when it first ran, it would
    /// have missed the drop and stayed open until its timeout.
    #[tokio::test(start_paused = true)]
    async fn a_drop_right_after_the_response_head_ends_the_watch() {
        let (sim, _shutdown) = Sim::new(crate::sim::SimConfig::default());
        let uri: http::Uri = "/api/v1/configmaps?watch=true".parse().unwrap();
        let api = crate::request::parse(&http::Method::GET, &uri);
        let crate::request::ApiPath::Resource(rp) = api.path.clone() else {
            panic!("a resource path: {:?}", api.path)
        };
        let rt = crate::sim::resources::find("", "v1", "configmaps").unwrap();
        let resp = handle(&sim, &api, &HeaderMap::new(), rt, &rp).await;
        assert_eq!(resp.status(), StatusCode::OK);
        sim.faults.drop_watches_now();
        let ended = tokio::time::timeout(Duration::from_secs(1), resp.into_body().collect())
            .await
            .expect("the dropped watch ends, not at its timeout");
        assert!(ended.is_ok());
    }

    /// A watch's events as (time since `t0`, type, resourceVersion), until it ends.
    async fn timeline(sim: &Arc<Sim>, query: &str, t0: Instant) -> Vec<(Duration, String, u64)> {
        let uri: http::Uri = format!("/api/v1/configmaps?{query}").parse().unwrap();
        let api = crate::request::parse(&http::Method::GET, &uri);
        let crate::request::ApiPath::Resource(rp) = api.path.clone() else {
            panic!("a resource path: {:?}", api.path)
        };
        let rt = crate::sim::resources::find("", "v1", "configmaps").unwrap();
        let mut body = handle(sim, &api, &HeaderMap::new(), rt, &rp)
            .await
            .into_body();
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.unwrap().into_data() else {
                continue;
            };
            let e: Value = serde_json::from_slice(&data).unwrap();
            let rv = e["object"]["metadata"]["resourceVersion"].as_str().unwrap();
            out.push((
                Instant::now() - t0,
                e["type"].as_str().unwrap().to_string(),
                rv.parse().unwrap(),
            ));
        }
        out.push((Instant::now() - t0, "END".into(), 0));
        out
    }

    fn put_pod(sim: &Sim, name: &str) -> u64 {
        let rt = crate::sim::resources::find("", "v1", "pods").unwrap();
        let obj = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "other"}});
        sim.store
            .mutate(rt, "other", name, |_| Ok(crate::sim::Mutation::Put(obj)))
            .unwrap();
        sim.store.current_rv()
    }

    /// The pre-timeout bookmark's schedule is kube-apiserver 1.36's watch cache's
    /// (k8s.io/apiserver pkg/storage/cacher: cache_watcher.go `nextBookmarkTime` asks for
    /// it 2 s before the deadline; cacher.go `watcherBookmarkTimeBuckets` files it under
    /// that time's whole second from the cacher's creation and pops it at the first tick
    /// of the dispatch loop's 1 s bookmark timer at or after that second's start, then
    /// `finishDispatching` queues it again while it is not yet past due). Paused time, so
    /// the instants are exact: the simulator's ticks are not jittered (docs/simulator.md).
    #[tokio::test(start_paused = true)]
    async fn the_pre_timeout_bookmark_follows_the_watch_caches_ticks() {
        let (sim, _shutdown) = Sim::new(crate::sim::SimConfig::default());
        let epoch = sim.bookmark_epoch;
        put_pod(&sim, "a");
        // Half a second into the watch cache's second.
        tokio::time::sleep_until(epoch + Duration::from_millis(500)).await;
        let t0 = Instant::now();
        let from = sim.store.current_rv();
        // Writes to another resource while the watch is open: they move the global
        // resourceVersion, which the bookmark carries.
        let writer = {
            let sim = sim.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let a = put_pod(&sim, "b");
                tokio::time::sleep(Duration::from_millis(1000)).await;
                let b = put_pod(&sim, "c");
                (a, b)
            })
        };
        let q = format!("watch=1&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion={from}");
        let events = timeline(&sim, &q, t0).await;
        let (a, b) = writer.await.unwrap();
        let ms = Duration::from_millis;
        assert_eq!(
            events,
            [
                // Due at 1.5 s, in the bucket of the cacher's second 1, popped at its tick
                // (0.5 s into the watch), which is before it is due: queued again, popped
                // at the tick of second 2 (1.5 s into the watch).
                (ms(500), "BOOKMARK".to_string(), a),
                (ms(1500), "BOOKMARK".to_string(), b),
                (ms(3000), "END".to_string(), 0),
            ],
            "writes at {a} and {b}"
        );
        // Every write before a bookmark is at or below its resourceVersion: the
        // simulator's current one when it went out.
        assert!(from < a && a < b);

        // timeoutSeconds=2: its pre-timeout time has passed when it is queued; no
        // bookmark at all (the heartbeat is a minute away).
        let t0 = Instant::now();
        let now = sim.store.current_rv();
        let q = format!("watch=1&allowWatchBookmarks=true&timeoutSeconds=2&resourceVersion={now}");
        assert_eq!(
            timeline(&sim, &q, t0).await,
            [(ms(2000), "END".to_string(), 0)]
        );
        // Without allowWatchBookmarks: none either.
        let t0 = Instant::now();
        let q = format!("watch=1&timeoutSeconds=3&resourceVersion={now}");
        assert_eq!(
            timeline(&sim, &q, t0).await,
            [(ms(3000), "END".to_string(), 0)]
        );
    }

    #[test]
    fn left_selector_is_the_previous_object_at_the_event_rv() {
        let prev = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "4",
                         "labels": {"app": "web"}},
            "status": {"phase": "Running"}});
        let got = left_selector(&prev, 9);
        let mut want = prev.clone();
        want["metadata"]["resourceVersion"] = json!("9");
        assert_eq!(got, want);
    }
}

//! Watch streams as the wire carries them, for the watch semantics tests (issue 5).
//!
//! [`open`] sends one watch over HTTP/1.1 and keeps the response's status and headers
//! (`x-watchgate-source` says whether the gateway served it from its cache); [`Watch`]
//! reads newline-delimited events one at a time, each with a bounded wait and a failure
//! message naming the request and what was read so far. Each [`Event`] keeps the exact
//! bytes of its line, so differential tests can compare bytes, not only JSON.
//!
//! Also: pod writes straight into the simulator's store, and the gateway cache's
//! readiness (synced, caught up to an RV) as bounded polls.

use std::fmt;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tokio::time::Instant;

use watchgate::sim::resources::find;
use watchgate::sim::{Mutation, ResourceType, SimHandle, Store};

use super::{objects, EVENT_TIMEOUT};

/// The bound for the response headers of a watch.
const HEADERS_TIMEOUT: Duration = Duration::from_secs(20);

/// One event: its line's exact bytes (without the newline) and their JSON.
#[derive(Clone)]
pub struct Event {
    pub raw: Bytes,
    pub json: Value,
}

impl Event {
    pub fn ty(&self) -> &str {
        self.json["type"].as_str().unwrap_or("")
    }

    pub fn object(&self) -> &Value {
        &self.json["object"]
    }

    pub fn name(&self) -> &str {
        self.object()["metadata"]["name"].as_str().unwrap_or("")
    }

    /// The object's metadata.resourceVersion as a number (0 if absent).
    pub fn rv(&self) -> u64 {
        self.object()["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    /// `(type, name)`, for asserting sequences.
    pub fn typed(&self) -> (String, String) {
        (self.ty().to_string(), self.name().to_string())
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", String::from_utf8_lossy(&self.raw))
    }
}

/// `(type, name)` pairs, for comparing with [`Event::typed`].
pub fn typed(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(t, n)| (t.to_string(), n.to_string()))
        .collect()
}

/// An open watch response.
pub struct Watch {
    /// `base + path`, for failure messages.
    pub what: String,
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: Incoming,
    buf: BytesMut,
    ended: bool,
    /// Every event read so far (failure context).
    pub seen: Vec<Event>,
}

/// Sends `GET base+path` over HTTP/1.1 and returns once the response headers are in,
/// whatever the status (bad input tests read the Status body with [`Watch::body_json`]).
pub async fn open(base: &str, path: &str) -> Watch {
    open_with(base, path, &[("accept", "application/json")]).await
}

/// [`open`] with the given request headers (e.g. an `Accept` asking for a Table or
/// PartialObjectMetadata).
pub async fn open_with(base: &str, path: &str, headers: &[(&str, &str)]) -> Watch {
    let what = format!("{base}{path}");
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut req = Request::get(&what);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Empty::new()).expect("valid request");
    let resp = match tokio::time::timeout(HEADERS_TIMEOUT, client.request(req)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => panic!("watch {what}: {e:?}"),
        Err(_) => panic!("watch {what}: no response headers within {HEADERS_TIMEOUT:?}"),
    };
    Watch::from_response(what, resp)
}

/// [`open`], asserting a 200.
pub async fn open_ok(base: &str, path: &str) -> Watch {
    let mut w = open(base, path).await;
    if w.status != StatusCode::OK {
        let body = w.rest(Duration::from_secs(5)).await;
        panic!(
            "watch {}: status {}, body {}",
            w.what,
            w.status,
            String::from_utf8_lossy(&body)
        );
    }
    w
}

/// [`open_with`], asserting a 200.
pub async fn open_ok_with(base: &str, path: &str, headers: &[(&str, &str)]) -> Watch {
    let mut w = open_with(base, path, headers).await;
    if w.status != StatusCode::OK {
        let body = w.rest(Duration::from_secs(5)).await;
        panic!(
            "watch {}: status {}, body {}",
            w.what,
            w.status,
            String::from_utf8_lossy(&body)
        );
    }
    w
}

impl Watch {
    /// A watch from a response obtained some other way (e.g. an HTTP/2 stream).
    pub fn from_response(what: String, resp: http::Response<Incoming>) -> Self {
        let (parts, body) = resp.into_parts();
        Watch {
            what,
            status: parts.status,
            headers: parts.headers,
            body,
            buf: BytesMut::new(),
            ended: false,
            seen: Vec::new(),
        }
    }

    /// The `x-watchgate-source` header (`cache` or `upstream`), if any.
    pub fn source(&self) -> Option<&str> {
        super::http::source(&self.headers)
    }

    /// Asserts that the gateway served this watch from its cache.
    #[track_caller]
    pub fn assert_from_cache(&self) {
        assert_eq!(
            self.source(),
            Some("cache"),
            "watch {} must be served from the gateway's cache (x-watchgate-source)",
            self.what
        );
    }

    fn context(&self) -> String {
        let seen: Vec<String> = self.seen.iter().map(|e| format!("  {e:?}")).collect();
        format!(
            "events read so far:\n{}\nbuffered: {:?}",
            seen.join("\n"),
            String::from_utf8_lossy(&self.buf)
        )
    }

    /// The next event, or `None` at a clean end of stream. Panics if neither comes within
    /// `timeout`, on a transport error, or if the stream ends inside a line.
    pub async fn next_within(&mut self, timeout: Duration) -> Option<Event> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line = self.buf.split_to(pos + 1).freeze().slice(..pos);
                // kube-apiserver frames every event as one JSON line: a blank line is a
                // framing error, not something a client should skip.
                assert!(
                    !line.iter().all(u8::is_ascii_whitespace),
                    "watch {}: a blank line in the stream ({:?})\n{}",
                    self.what,
                    String::from_utf8_lossy(&line),
                    self.context()
                );
                let json = serde_json::from_slice(&line).unwrap_or_else(|e| {
                    panic!(
                        "watch {}: event is not JSON ({e}): {:?}",
                        self.what,
                        String::from_utf8_lossy(&line)
                    )
                });
                let ev = Event { raw: line, json };
                self.seen.push(ev.clone());
                return Some(ev);
            }
            if self.ended {
                assert!(
                    self.buf.is_empty(),
                    "watch {}: stream ended inside an event\n{}",
                    self.what,
                    self.context()
                );
                return None;
            }
            let frame = match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Ok(f) => f,
                Err(_) => panic!(
                    "watch {}: nothing (no event, no end) within {timeout:?}\n{}",
                    self.what,
                    self.context()
                ),
            };
            match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => {
                    panic!("watch {}: stream error: {e}\n{}", self.what, self.context())
                }
                None => self.ended = true,
            }
        }
    }

    /// The next event of a protobuf stream (`application/vnd.kubernetes.protobuf;stream=watch`:
    /// 4-byte big-endian length, then a `WatchEvent`): its type and the object's envelope
    /// (`k8s\0` + `runtime.Unknown`). Panics naming `desc` if none comes within
    /// [`EVENT_TIMEOUT`], or on a malformed frame.
    pub async fn next_proto(&mut self, desc: &str) -> (String, Bytes) {
        let deadline = Instant::now() + EVENT_TIMEOUT;
        loop {
            let split = watchgate::proto::split_frame(&self.buf, 16 << 20)
                .unwrap_or_else(|e| panic!("watch {}: {desc}: bad frame: {e}", self.what));
            if let Some((frame, rest)) = split {
                let used = self.buf.len() - rest.len();
                let (ty, env) = watchgate::proto::parse_watch_event(frame)
                    .unwrap_or_else(|e| panic!("watch {}: {desc}: bad WatchEvent: {e}", self.what));
                let out = (ty.to_string(), Bytes::copy_from_slice(env));
                let _ = self.buf.split_to(used);
                return out;
            }
            assert!(!self.ended, "watch {}: {desc}: the stream ended", self.what);
            let frame = match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Ok(f) => f,
                Err(_) => panic!(
                    "watch {}: {desc}: no frame within {EVENT_TIMEOUT:?}",
                    self.what
                ),
            };
            match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => panic!("watch {}: {desc}: stream error: {e}", self.what),
                None => self.ended = true,
            }
        }
    }

    /// The next event; panics naming `desc` if none comes within [`EVENT_TIMEOUT`] or the
    /// stream ends.
    pub async fn next(&mut self, desc: &str) -> Event {
        match self.next_within(EVENT_TIMEOUT).await {
            Some(e) => e,
            None => panic!(
                "watch {}: stream ended, expected {desc}\n{}",
                self.what,
                self.context()
            ),
        }
    }

    /// The next `n` events.
    pub async fn take(&mut self, n: usize, desc: &str) -> Vec<Event> {
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            out.push(self.next(&format!("{desc} (event {} of {n})", i + 1)).await);
        }
        out
    }

    /// A watch-list's initial events: everything up to the BOOKMARK annotated
    /// `k8s.io/initial-events-end`, and that bookmark.
    pub async fn initial_events(&mut self) -> (Vec<Event>, Event) {
        let mut events = Vec::new();
        loop {
            let e = self.next("the initial-events-end bookmark").await;
            let end = e.ty() == "BOOKMARK"
                && e.object()["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true";
            if end {
                return (events, e);
            }
            events.push(e);
        }
    }

    /// Asserts that the stream ends (cleanly, with no further event) within `timeout`.
    pub async fn expect_end(&mut self, timeout: Duration) {
        if let Some(e) = self.next_within(timeout).await {
            panic!(
                "watch {}: expected the end of the stream, got {e:?}\n{}",
                self.what,
                self.context()
            );
        }
    }

    /// Asserts that nothing (no event, no end) arrives for `quiet`: the stream stays open
    /// and idle.
    pub async fn expect_quiet(&mut self, quiet: Duration) {
        // A bound far beyond `quiet`, so that only `quiet` decides.
        let next = self.next_within(quiet + Duration::from_secs(3600));
        if let Ok(got) = tokio::time::timeout(quiet, next).await {
            panic!(
                "watch {}: expected {quiet:?} of quiet, got {got:?}\n{}",
                self.what,
                self.context()
            );
        }
    }

    /// The rest of the body (for error answers), bounded by `timeout`.
    pub async fn rest(&mut self, timeout: Duration) -> Bytes {
        let mut out = std::mem::take(&mut self.buf);
        let collect = async {
            while let Some(frame) = self.body.frame().await {
                match frame {
                    Ok(f) => {
                        if let Ok(d) = f.into_data() {
                            out.extend_from_slice(&d);
                        }
                    }
                    Err(e) => panic!("watch {}: body error: {e}", self.what),
                }
            }
        };
        if tokio::time::timeout(timeout, collect).await.is_err() {
            panic!(
                "watch {}: body did not end within {timeout:?}: {:?}",
                self.what,
                String::from_utf8_lossy(&out)
            );
        }
        self.ended = true;
        out.freeze()
    }

    /// The whole body of a non-watch answer (a Status), as JSON.
    pub async fn body_json(&mut self) -> Value {
        let body = self.rest(Duration::from_secs(10)).await;
        serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!(
                "{} ({}): body is not JSON ({e}): {:?}",
                self.what,
                self.status,
                String::from_utf8_lossy(&body)
            )
        })
    }
}

/// Asserts that two event sequences are the same: same length, and for each position the
/// same type and the same JSON. Shows both sequences, line by line, when they differ.
#[track_caller]
pub fn assert_same_events(what: &str, sim: &[Event], gateway: &[Event]) {
    let same = sim.len() == gateway.len() && sim.iter().zip(gateway).all(|(a, b)| a.json == b.json);
    if !same {
        let show = |evs: &[Event]| {
            evs.iter()
                .map(|e| format!("  {e:?}"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        panic!(
            "{what}: the gateway's events differ from the simulator's\n--- simulator (expected) ---\n{}\n--- gateway (got) ---\n{}",
            show(sim),
            show(gateway)
        );
    }
}

/// Asserts byte-for-byte equal event lines.
#[track_caller]
pub fn assert_same_bytes(what: &str, sim: &[Event], gateway: &[Event]) {
    assert_eq!(sim.len(), gateway.len(), "{what}: number of events");
    for (i, (a, b)) in sim.iter().zip(gateway).enumerate() {
        assert!(
            a.raw == b.raw,
            "{what}: event {i} bytes differ\n--- simulator (expected) ---\n{a:?}\n--- gateway (got) ---\n{b:?}"
        );
    }
}

pub fn pods() -> &'static ResourceType {
    find("", "v1", "pods").expect("pods are served")
}

/// An object's metadata.resourceVersion as a number; panics if it has none.
pub fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no numeric resourceVersion in {v}"))
}

/// Creates or replaces a pod in the simulator's store (another client's write); returns
/// the write's RV.
pub fn put_pod(
    sim: &SimHandle,
    ns: &str,
    name: &str,
    labels: Value,
    node: &str,
    phase: &str,
) -> u64 {
    let pod = objects::pod(ns, name)
        .labels(labels)
        .node(node)
        .phase(phase);
    put_object(sim, pods(), ns, pod.build())
}

/// Deletes a pod in the simulator's store; returns the deletion's RV.
pub fn delete_pod(sim: &SimHandle, ns: &str, name: &str) -> u64 {
    let out = sim
        .store()
        .mutate(pods(), ns, name, |_| Ok(Mutation::Delete))
        .expect("store delete")
        .unwrap_or_else(|| panic!("pod {ns}/{name} to delete does not exist"));
    rv_of(&out)
}

/// The pod as the simulator stores it now.
pub fn stored_pod(sim: &SimHandle, ns: &str, name: &str) -> Value {
    sim.store()
        .get(pods(), ns, name)
        .unwrap_or_else(|| panic!("pod {ns}/{name} does not exist"))
        .as_ref()
        .clone()
}

/// The one way to wait for the gateway's cache: reads `path` on the gateway until it
/// answers 200 *from its cache* (`x-watchgate-source: cache`; an answer forwarded to the
/// upstream never counts) and `done` holds for that answer, and returns it. The first
/// cacheable read starts the resource's reflector; until it has synced, reads are
/// forwarded. Panics after 30 s with the last answer (status, source, body).
///
/// `done` is usually `|_| true` (the cache serves `path`) or [`rv_at_least`] (the cache
/// has seen every write up to an RV).
pub async fn wait_until_cached(
    gateway: &str,
    path: &str,
    mut done: impl FnMut(&super::http::Resp) -> bool,
) -> super::http::Resp {
    let http = super::Http::new(gateway);
    let (http, desc) = (&http, format!("{gateway}{path} is served from the cache"));
    let seen = super::wait::wait_for(
        &desc,
        CACHE_TIMEOUT,
        || async move { Cached(http.get(path).await) },
        |r| r.0.status == StatusCode::OK && r.0.source() == Some("cache") && done(&r.0),
    )
    .await;
    seen.0
}

/// How long [`wait_until_cached`] waits: generous, for a loaded 2-core CI machine.
pub const CACHE_TIMEOUT: Duration = Duration::from_secs(30);

/// An answer as [`wait_until_cached`] reports it on timeout: status, source and the
/// start of the body (the whole of a big list helps nobody).
struct Cached(super::http::Resp);

impl fmt::Debug for Cached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.text();
        let cut = text.char_indices().nth(600).map_or(text.len(), |(i, _)| i);
        write!(
            f,
            "{} from {:?}: {}{}",
            self.0.status,
            self.0.source(),
            &text[..cut],
            if cut < text.len() { "…" } else { "" }
        )
    }
}

/// For [`wait_until_cached`]: the answer's `metadata.resourceVersion` (a list's, or an
/// object's) is at least `rv`, i.e. the cache has seen every write up to `rv`.
pub fn rv_at_least(rv: u64) -> impl Fn(&super::http::Resp) -> bool {
    move |r| {
        serde_json::from_slice::<Value>(&r.body)
            .ok()
            .and_then(|v| {
                v["metadata"]["resourceVersion"]
                    .as_str()?
                    .parse::<u64>()
                    .ok()
            })
            .is_some_and(|at| at >= rv)
    }
}

/// Creates or replaces any object in the simulator's store (`ns` empty for cluster-scoped
/// types); returns the write's RV.
pub fn put_object(sim: &SimHandle, rt: &ResourceType, ns: &str, obj: Value) -> u64 {
    store_put(sim.store(), rt, ns, obj)
}

/// [`put_object`] on the store itself, for writer tasks that hold it without the handle.
pub fn store_put(store: &Store, rt: &ResourceType, ns: &str, obj: Value) -> u64 {
    let name = obj["metadata"]["name"]
        .as_str()
        .expect("metadata.name")
        .to_string();
    let out = store
        .mutate(rt, ns, &name, |_| Ok(Mutation::Put(obj)))
        .expect("store write")
        .expect("stored object");
    rv_of(&out)
}

/// Deletes any object in the simulator's store; returns the deletion's RV.
pub fn delete_object(sim: &SimHandle, rt: &ResourceType, ns: &str, name: &str) -> u64 {
    let out = sim
        .store()
        .mutate(rt, ns, name, |_| Ok(Mutation::Delete))
        .expect("store delete")
        .unwrap_or_else(|| panic!("{ns}/{name} to delete does not exist"));
    rv_of(&out)
}

/// A served resource type; panics if the simulator does not serve it.
pub fn resource(group: &str, version: &str, resource: &str) -> &'static ResourceType {
    find(group, version, resource)
        .unwrap_or_else(|| panic!("{group}/{version}/{resource} is not served"))
}

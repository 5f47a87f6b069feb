//! Consistent reads from the cache: for each request with no resourceVersion, proof that
//! the cache reflects every write the upstream acknowledged before the request arrived.
//! The argument, its costs and its timeouts are in docs/consistency.md; in short:
//!
//! 1. **The target.** A `limit=1` list with no resourceVersion is a consistent read
//!    upstream (etcd quorum read, or kube-apiserver's cache after it confirmed freshness
//!    with etcd), so its `metadata.resourceVersion` G is at least the resourceVersion of
//!    every write acknowledged before the upstream read it. A probe *sent after* a request
//!    arrived therefore covers every write acknowledged before that request.
//! 2. **Reaching it.** The cache's resourceVersion moves only with its one ordered upstream
//!    stream: an event at N means every earlier event of the resource arrived before it; a
//!    BOOKMARK at N means "all changes up to N have been sent"; a (re)list replaces the
//!    state with a consistent snapshot at its RV. So once the store is at G or later it
//!    holds every write with an RV up to G: the request may be served.
//! 3. **Quiet resources.** Writes to other resources move G while this resource's stream
//!    has nothing to say, so it may never reach G. After a short wait, a *re-sync*: the
//!    reflector re-reads the resource with a consistent watch-list (or list) sent after the
//!    request, whose snapshot RV is at least G by (1). That costs one full read of the
//!    resource for every request waiting then, so it is asked for only when forwarding the
//!    waiting request would cost about as much (see [`Scope`]); otherwise, and whenever the
//!    bound passes, the request is forwarded, as before.
//!
//! Probes are coalesced strictly: a request joins the first probe *sent after it arrived*
//! (sharing one already in flight could miss a write acknowledged between the probe's
//! read and the request's arrival). At most one probe per resource is in flight; requests
//! arriving meanwhile share the next one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{header, Request};
use http_body_util::{BodyExt, Limited};
use serde::Deserialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::reflector::ReflectorStats;
use super::store::{Snapshot, Store};
use crate::body;
use crate::upstream::Upstream;

/// `--consistent-reads`: where reads with no resourceVersion are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ConsistentReads {
    // Plain comments, not doc comments, so that clap prints its possible values on one
    // line (the README's flag table); the flag's help explains both.
    // From the cache, once it is proven fresh (docs/consistency.md).
    #[default]
    Cache,
    // Always forwarded.
    Upstream,
}

/// How long a consistent read waits, after the probe answered, for the cache to reach
/// the probe's resourceVersion before it is forwarded: kube-apiserver's watch cache waits
/// as long (`blockTimeout`, 3 s) before it falls back to etcd.
pub const FRESH_WAIT: Duration = Duration::from_secs(3);

/// How long a probe may take. A probe that fails or takes longer sends its requests
/// upstream.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// A probe that answered more than this many requests starts a herd (a thundering herd of
/// informers starting at once, say); the herd lasts until a probe answers one request or
/// none. Outside a herd (a few clients reading in a loop) every probe is sent as soon as
/// the one before it has answered.
pub const HERD_SIZE: u64 = 8;

/// During a herd the next probe waits before it is sent, so that more of the herd shares
/// it: 20 ms after the first herd-sized probe, doubling with each one after, up to
/// [`HERD_WINDOW`]. kube-apiserver paces its own consistent reads the same way: while one
/// waits, it asks etcd for progress every 100 ms.
pub const HERD_FIRST_WINDOW: Duration = Duration::from_millis(20);

/// The longest wait before a probe during a herd: at most ten probes per second per
/// resource, however many requests arrive.
pub const HERD_WINDOW: Duration = Duration::from_millis(100);

/// Resources with at most this many objects (one page of client-go's pager) are re-synced
/// for any waiting request, a get included: re-reading them costs the upstream about what
/// forwarding one request would.
pub const SMALL_RESOURCE: usize = 500;

/// The shortest wait for the stream before a re-sync is considered.
const MIN_GRACE: Duration = Duration::from_millis(1);

/// The largest probe answer read (one object; etcd's limit is 1.5 MiB).
const MAX_PROBE_BYTES: usize = 8 * 1024 * 1024;

/// Why a consistent read cannot be answered from the cache; the request is forwarded.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NotFresh {
    #[error("the upstream's current resourceVersion could not be read: {0}")]
    Probe(String),
    #[error("the cache did not reach resourceVersion {needed} in time (it is at {reached})")]
    Behind { needed: u64, reached: u64 },
}

/// A consistent read's state.
#[derive(Debug, Clone)]
pub struct Fresh {
    /// The upstream's resourceVersion when it was asked, after the request arrived: every
    /// write acknowledged before the request is at or below it, every later one above.
    pub rv: u64,
    /// A state at `rv` or later.
    pub snapshot: Arc<Snapshot>,
}

/// What forwarding a waiting request would cost the upstream, to weigh against a re-sync
/// (one full read of the resource).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// A get: one object.
    Object,
    /// A list or watch-list of one namespace.
    Namespace(&'a str),
    /// A list or watch-list of the whole resource.
    All,
}

/// Re-sync requests from the consistent-read path to the reflector.
///
/// `requested` counts requests; the reflector remembers the count it last re-synced for,
/// reading it *before* it sends its consistent request, so every request counted by then
/// is answered by that re-sync, and a request counted later by the next one.
#[derive(Debug)]
pub struct ResyncSignal {
    requested: watch::Sender<u64>,
    /// The count the reflector's current (or last) re-sync covers.
    started: AtomicU64,
}

impl Default for ResyncSignal {
    fn default() -> Self {
        Self {
            requested: watch::channel(0).0,
            started: AtomicU64::new(0),
        }
    }
}

impl ResyncSignal {
    /// Asks for a re-sync (several askers before it starts share one).
    pub fn request(&self) {
        self.requested.send_modify(|n| *n += 1);
    }

    /// A re-sync has been asked for and has not started yet.
    pub fn pending(&self) -> bool {
        *self.requested.borrow() > self.started.load(Ordering::Acquire)
    }

    /// The reflector's side: a receiver that wakes on every new request.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.requested.subscribe()
    }

    /// The reflector starts a re-sync (or any sync: it answers the requests made so far).
    pub fn starting(&self, rx: &mut watch::Receiver<u64>) {
        let n = *rx.borrow_and_update();
        self.started.fetch_max(n, Ordering::AcqRel);
    }
}

/// Counters for metrics (`watchgate_consistent_reads_total`, …).
#[derive(Debug, Default)]
pub struct FreshStats {
    pub probes: AtomicU64,
    pub probe_errors: AtomicU64,
    /// Consistent reads the cache answered at once (already at the probe's RV).
    pub fresh: AtomicU64,
    /// … after its own stream brought the RV.
    pub waited: AtomicU64,
    /// … after a re-sync.
    pub resynced: AtomicU64,
    /// Consistent reads forwarded because freshness could not be established.
    pub forwarded: AtomicU64,
    pub resyncs_requested: AtomicU64,
}

#[derive(Debug, Default)]
struct ProbeState {
    /// The generation new requests join: not sent yet.
    next: u64,
    /// Requests that joined `next`.
    next_waiters: u64,
    /// A probe task is running (sending `next - 1`, or about to send `next`).
    running: bool,
}

/// A finished probe: its generation and what it found.
#[derive(Debug, Clone)]
struct ProbeDone {
    generation: u64,
    result: Result<u64, String>,
}

/// The consistent-read machinery of one resource.
pub struct Freshness {
    upstream: Upstream,
    probe_uri: String,
    store: Arc<Store>,
    stats: Arc<ReflectorStats>,
    resync: Arc<ResyncSignal>,
    probes: Mutex<ProbeState>,
    done: watch::Sender<Option<ProbeDone>>,
    pub counters: FreshStats,
}

impl std::fmt::Debug for Freshness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Freshness")
            .field("probe_uri", &self.probe_uri)
            .finish()
    }
}

#[derive(Deserialize)]
struct ProbeList {
    metadata: ProbeMeta,
}

#[derive(Deserialize)]
struct ProbeMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
    /// A client's first page's token, when the resource has two objects or more: the
    /// form the cache's tokens copy (`cache::token_form`).
    #[serde(rename = "continue", default)]
    continue_token: String,
}

impl Freshness {
    pub fn new(
        upstream: Upstream,
        collection_path: &str,
        store: Arc<Store>,
        stats: Arc<ReflectorStats>,
        resync: Arc<ResyncSignal>,
    ) -> Self {
        Self {
            upstream,
            probe_uri: format!("{collection_path}?limit=1"),
            store,
            stats,
            resync,
            probes: Mutex::new(ProbeState::default()),
            done: watch::channel(None).0,
            counters: FreshStats::default(),
        }
    }

    /// The upstream's current resourceVersion, from a probe sent after this call began
    /// (shared with every other caller that joined the same probe).
    pub async fn current_rv(self: &Arc<Self>) -> Result<u64, NotFresh> {
        let mut rx = self.done.subscribe();
        let needed = {
            let mut st = self.probes.lock().expect("probe lock");
            st.next_waiters += 1;
            if !st.running {
                st.running = true;
                tokio::spawn(self.clone().probe_loop());
            }
            st.next
        };
        let done = tokio::time::timeout(
            PROBE_TIMEOUT + HERD_WINDOW,
            rx.wait_for(|d| d.as_ref().is_some_and(|d| d.generation >= needed)),
        )
        .await;
        match done {
            Ok(Ok(d)) => d
                .as_ref()
                .expect("checked")
                .result
                .clone()
                .map_err(NotFresh::Probe),
            Ok(Err(_)) => Err(NotFresh::Probe("the probe was abandoned".into())),
            Err(_) => Err(NotFresh::Probe(format!(
                "no answer within {PROBE_TIMEOUT:?}"
            ))),
        }
    }

    /// Sends probes while requests wait for them, one at a time. A generation's requests
    /// all joined it (under the lock) before the generation is closed, and its probe is
    /// sent after that: every probe is sent after every request it answers arrived.
    async fn probe_loop(self: Arc<Self>) {
        let mut window = Duration::ZERO;
        loop {
            if !window.is_zero() {
                // A herd: let more of it join this probe.
                tokio::time::sleep(window).await;
            }
            let (generation, served) = {
                let mut st = self.probes.lock().expect("probe lock");
                let generation = st.next;
                st.next += 1;
                (generation, std::mem::take(&mut st.next_waiters))
            };
            tracing::trace!(uri = %self.probe_uri, generation, requests = served, waited = ?window, "probe");
            let result = self.probe_once().await;
            self.counters.probes.fetch_add(1, Ordering::Relaxed);
            if result.is_err() {
                self.counters.probe_errors.fetch_add(1, Ordering::Relaxed);
            }
            self.done
                .send_replace(Some(ProbeDone { generation, result }));
            let mut st = self.probes.lock().expect("probe lock");
            if st.next_waiters == 0 {
                st.running = false;
                return;
            }
            let herd_starts = served > HERD_SIZE || st.next_waiters > HERD_SIZE;
            let herd_goes_on = !window.is_zero() && served > 1;
            window = if herd_starts || herd_goes_on {
                (window * 2).clamp(HERD_FIRST_WINDOW, HERD_WINDOW)
            } else {
                Duration::ZERO
            };
        }
    }

    /// One `limit=1` consistent list of the resource: the upstream's resourceVersion now.
    async fn probe_once(&self) -> Result<u64, String> {
        let req = Request::get(&self.probe_uri)
            .header(header::ACCEPT, "application/json")
            .body(body::empty())
            .map_err(|e| e.to_string())?;
        let answer = async {
            let resp = self.upstream.send(req).await.map_err(|e| e.to_string())?;
            let status = resp.status();
            let bytes = Limited::new(resp.into_body(), MAX_PROBE_BYTES)
                .collect()
                .await
                .map_err(|e| format!("reading the probe's answer: {e}"))?
                .to_bytes();
            if !status.is_success() {
                return Err(format!(
                    "the probe got {status}: {}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(256)])
                ));
            }
            let list: ProbeList = serde_json::from_slice(&bytes)
                .map_err(|e| format!("the probe's answer is not a list: {e}"))?;
            self.store.token_form().learn(&list.metadata.continue_token);
            list.metadata.resource_version.parse::<u64>().map_err(|_| {
                format!(
                    "the probe's resourceVersion {:?} is not a number",
                    list.metadata.resource_version
                )
            })
        };
        match tokio::time::timeout(PROBE_TIMEOUT, answer).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
        }
    }

    /// A snapshot that reflects every write the upstream acknowledged before this call,
    /// or why there is none in time (the caller forwards the request).
    pub async fn consistent_snapshot(
        self: &Arc<Self>,
        scope: Scope<'_>,
    ) -> Result<Fresh, NotFresh> {
        let needed = match self.current_rv().await {
            Ok(rv) => rv,
            Err(e) => {
                self.counters.forwarded.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        let snapshot = self.snapshot_at_least(needed, scope).await?;
        Ok(Fresh {
            rv: needed,
            snapshot,
        })
    }

    /// A snapshot at `needed` or later: at once, after the stream brings it, or after a
    /// re-sync, within [`FRESH_WAIT`].
    pub async fn snapshot_at_least(
        &self,
        needed: u64,
        scope: Scope<'_>,
    ) -> Result<Arc<Snapshot>, NotFresh> {
        let c = &self.counters;
        let now = self.store.snapshot();
        if now.resource_version >= needed {
            c.fresh.fetch_add(1, Ordering::Relaxed);
            return Ok(now);
        }
        let deadline = Instant::now() + FRESH_WAIT;
        // Waiting for the stream costs nothing upstream; a re-sync costs a full read. Wait
        // about as long as a re-sync would take (the last sync's duration): never more
        // than twice the better of the two.
        let last_sync = Duration::from_millis(self.stats.sync_millis.load(Ordering::Relaxed));
        let grace = last_sync.clamp(MIN_GRACE, FRESH_WAIT / 2);
        if let Some(s) = self.store.wait_for(needed, grace).await {
            c.waited.fetch_add(1, Ordering::Relaxed);
            return Ok(s);
        }
        // A reflector backing off after a failure answers no re-sync request soon: forward
        // rather than wait out the bound.
        let able = self.stats.backing_off.load(Ordering::Relaxed) == 0;
        let pays = able && self.resync_pays(scope, &now, last_sync);
        if pays || (able && self.resync.pending()) {
            if pays {
                c.resyncs_requested.fetch_add(1, Ordering::Relaxed);
                self.resync.request();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if let Some(s) = self.store.wait_for(needed, left).await {
                c.resynced.fetch_add(1, Ordering::Relaxed);
                return Ok(s);
            }
        }
        c.forwarded.fetch_add(1, Ordering::Relaxed);
        Err(NotFresh::Behind {
            needed,
            reached: self.store.resource_version(),
        })
    }

    /// Whether one full re-read of the resource is worth it for this request: it must be
    /// able to finish in time, and forwarding the request would cost about as much (a
    /// list of most of the resource, or any request on a small resource). Other requests
    /// only ride along a re-sync someone else asked for.
    fn resync_pays(&self, scope: Scope<'_>, snap: &Snapshot, last_sync: Duration) -> bool {
        if last_sync > FRESH_WAIT / 2 {
            return false;
        }
        let total = snap.len();
        if total <= SMALL_RESOURCE {
            return true;
        }
        match scope {
            Scope::Object => false,
            Scope::All => true,
            Scope::Namespace(ns) => 2 * snap.iter_namespace(Some(ns)).count() >= total,
        }
    }

    /// The re-sync signal the reflector listens to.
    pub fn resync_signal(&self) -> &Arc<ResyncSignal> {
        &self.resync
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resync_requests_are_answered_by_the_next_sync() {
        let s = ResyncSignal::default();
        let mut rx = s.subscribe();
        assert!(!s.pending());
        s.request();
        s.request();
        assert!(s.pending());
        // The reflector reads the count before it sends its consistent request.
        s.starting(&mut rx);
        assert!(!s.pending());
        s.request();
        assert!(
            s.pending(),
            "a request after the sync began needs the next one"
        );
    }
}

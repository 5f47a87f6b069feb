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
//!    has nothing to say, so it may never reach G. Two proofs remain, both asked of the
//!    reflector (`cache::demand`): a *progress* watch, a short watch from the cache's
//!    resourceVersion whose pre-timeout BOOKMARK comes 1 to 3 s later at the
//!    upstream's current resourceVersion (at least G, after every event before it); and a
//!    *re-sync*, a consistent re-read of the resource (its snapshot RV is at least G by
//!    (1)), used when it is cheaper than the bookmark's seconds (a small resource). A proof
//!    costs seconds or a re-read, so a lone get, page or list is forwarded at once
//!    instead (forwarding it is faster and costs the upstream what the client would have
//!    cost it); herds and watch-lists wait for the proof, which they share.
//! 4. **Cold caches.** A request that arrived before the reflector sent the consistent
//!    request whose state the store holds (its first sync, or a re-sync) needs no probe:
//!    that state already reflects every write acknowledged before the request.
//!
//! Probes are coalesced strictly: a request joins the first probe *sent after it arrived*
//! (sharing one already in flight could miss a write acknowledged between the probe's
//! read and the request's arrival). At most one probe per resource is in flight; requests
//! arriving meanwhile share the next one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::demand::{Demands, PROGRESS_BOOKMARK_NOT_BEFORE};
use super::forward::Forward;
use super::reflector::ReflectorStats;
use super::store::Store;
use crate::model::snapshot::Snapshot;
use crate::upstream::{Upstream, UpstreamError};

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
/// forwarding one request would, and takes less than a progress watch's bookmark.
pub const SMALL_RESOURCE: usize = 500;

/// A stream that brought an event this recently is live: events of the resource below
/// the probe's resourceVersion may still be on their way, or its next write may come in
/// a moment.
pub const LIVE_STREAM: Duration = Duration::from_millis(250);

/// How long a read waits for a live stream before it asks for a proof or is forwarded.
pub const LIVE_GRACE: Duration = Duration::from_millis(20);

/// The longest wait for a small resource's stream before it is re-synced.
pub const SMALL_GRACE: Duration = Duration::from_millis(250);

/// A probe shared by watch-lists that wait for a progress bookmark anyway is sent this
/// long before the bookmark can come at the earliest, so that it is answered before the
/// bookmark is sent (and the bookmark, at the upstream's resourceVersion then, covers it).
pub const PATIENT_MARGIN: Duration = Duration::from_millis(300);

/// The largest probe answer read (one object; etcd's limit is 1.5 MiB).
const MAX_PROBE_BYTES: usize = 8 * 1024 * 1024;

/// Why a consistent read cannot be answered from the cache; the request is forwarded.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NotFresh {
    #[error("the upstream's current resourceVersion could not be read: {0}")]
    Probe(ProbeError),
    #[error("the cache did not reach resourceVersion {needed} in time (it is at {reached})")]
    Behind { needed: u64, reached: u64 },
    #[error("the cache is at {reached}, behind {needed}, and forwarding this read is cheaper than proving it")]
    Cheaper { needed: u64, reached: u64 },
    #[error("the upstream's resourceVersion {upstream} is below the cache's {cache}: the upstream went back")]
    WentBack { upstream: u64, cache: u64 },
    #[error("the last probe found the cache behind at {reached} and it has not moved since: a lone read is forwarded without a probe")]
    Lone { reached: u64 },
    #[error("a consistency check found the cache different from the upstream; the re-sync that repairs it is not in yet")]
    Inconsistent,
}

impl NotFresh {
    /// The forward reason (`cache::forward`).
    pub fn reason(&self) -> Forward {
        match self {
            NotFresh::Probe(_) => Forward::ProbeFailed,
            NotFresh::Behind { .. } | NotFresh::Cheaper { .. } => Forward::NotFresh,
            NotFresh::WentBack { .. } => Forward::UpstreamWentBack,
            NotFresh::Lone { .. } => Forward::LoneRead,
            NotFresh::Inconsistent => Forward::Inconsistent,
        }
    }
}

/// Why a probe did not read the upstream's resourceVersion.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProbeError {
    /// No answer: the upstream failed, or the gateway's own pool refused the probe.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The upstream answered with an error.
    #[error("the probe got {status}: {body}")]
    Status {
        status: http::StatusCode,
        body: String,
    },
    #[error("the probe's answer is not a list: {0}")]
    NotAList(String),
    #[error("the probe's resourceVersion {0:?} is not a number")]
    ResourceVersion(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The probe task ended without an answer.
    #[error("the probe was abandoned")]
    Abandoned,
}

impl ProbeError {
    /// The gateway's own pool refused the probe: local load, not the upstream failing.
    pub fn pool_full(&self) -> bool {
        matches!(self, ProbeError::Upstream(e) if e.is_pool_full())
    }

    /// The probe failed for load, the gateway's or the upstream's: no answer in time,
    /// the gateway's pool full, the upstream throttling (429: API Priority and Fairness
    /// during a herd) or failing for the moment (5xx). Forwarding the reads that waited
    /// for it would add a copy of each to that load, so they try the next probe once.
    /// Anything else (the upstream unreachable, an answer that is not a list) forwards
    /// them at once: another probe would find the same.
    pub fn from_load(&self) -> bool {
        match self {
            ProbeError::Timeout(_) | ProbeError::Abandoned => true,
            ProbeError::Upstream(e) => e.is_pool_full(),
            ProbeError::Status { status, .. } => {
                *status == http::StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
            }
            ProbeError::NotAList(_) | ProbeError::ResourceVersion(_) => false,
        }
    }
}

/// A probe's answer: the upstream's resourceVersion, and whether it answered a herd.
#[derive(Debug, Clone, Copy)]
pub struct Probed {
    pub rv: u64,
    /// More than [`HERD_SIZE`] requests shared it, or it was paced as part of a herd.
    pub herd: bool,
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

/// A consistent read, as the proof needs to know it.
#[derive(Debug, Clone, Copy)]
pub struct ConsistentRead {
    /// A watch (a watch-list, or a legacy watch with no resourceVersion): forwarding it
    /// keeps an upstream stream open for its whole life, so it waits for a proof.
    pub stream: bool,
    /// When the request arrived.
    pub arrived: std::time::Instant,
}

/// Counters for metrics (`watchgate_consistent_reads_total`, …).
#[derive(Debug, Default)]
pub struct FreshStats {
    pub probes: AtomicU64,
    pub probe_errors: AtomicU64,
    /// Consistent reads the cache answered at once (already at the probe's RV).
    pub fresh: AtomicU64,
    /// … with no probe: they arrived before the state's own consistent read was sent (a
    /// cold cache's first sync, or a re-sync).
    pub synced: AtomicU64,
    /// … after its own stream brought the RV.
    pub waited: AtomicU64,
    /// … after a proof: a progress watch's bookmark or a re-sync.
    pub resynced: AtomicU64,
    /// Consistent reads forwarded because freshness could not be established.
    pub forwarded: AtomicU64,
    pub resyncs_requested: AtomicU64,
    pub progress_requested: AtomicU64,
    /// Probes that answered a resourceVersion below one the cache had already seen.
    pub went_back: AtomicU64,
}

#[derive(Debug, Default)]
struct ProbeState {
    /// The generation new requests join: not sent yet.
    next: u64,
    /// Requests that joined `next`.
    next_waiters: u64,
    /// … of which want their answer as soon as it can be had (see [`Freshness::probe`]).
    next_impatient: u64,
    /// A probe task is running (sending `next - 1`, or about to send `next`).
    running: bool,
}

/// A finished probe: its generation and what it found.
#[derive(Debug, Clone)]
struct ProbeDone {
    generation: u64,
    result: Result<u64, ProbeError>,
    /// The probe answered a herd (more than [`HERD_SIZE`] requests, or it was paced).
    herd: bool,
}

/// The consistent-read machinery of one resource.
pub struct Freshness {
    upstream: Upstream,
    probe_uri: String,
    store: Arc<Store>,
    stats: Arc<ReflectorStats>,
    demands: Arc<Demands>,
    /// Where the last probe found a quiet cache behind (lone reads then skip the probe).
    known_behind: KnownBehind,
    probes: Mutex<ProbeState>,
    /// An impatient request joined the next probe: a probe held back for patient ones
    /// goes at once.
    impatient_joined: tokio::sync::Notify,
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
        demands: Arc<Demands>,
    ) -> Self {
        Self {
            upstream,
            probe_uri: format!("{collection_path}?limit=1"),
            store,
            stats,
            demands,
            known_behind: KnownBehind::default(),
            probes: Mutex::new(ProbeState::default()),
            impatient_joined: tokio::sync::Notify::new(),
            done: watch::channel(None).0,
            counters: FreshStats::default(),
        }
    }

    /// The upstream's current resourceVersion, from a probe sent after this call began
    /// (shared with every other caller that joined the same probe).
    pub async fn current_rv(self: &Arc<Self>) -> Result<u64, NotFresh> {
        self.probe(false).await.map(|p| p.rv)
    }

    /// [`Self::current_rv`], and whether the probe answered a herd.
    ///
    /// A `patient` request (a watch-list of a quiet large resource: it waits for a
    /// progress bookmark unless the probe finds the cache already there) lets its probe
    /// be held back while a progress bookmark is on its way, until just before that
    /// bookmark can come: a herd arriving meanwhile then shares one probe and one bookmark.
    pub async fn probe(self: &Arc<Self>, patient: bool) -> Result<Probed, NotFresh> {
        let mut rx = self.done.subscribe();
        let needed = {
            let mut st = self.probes.lock().expect("probe lock");
            st.next_waiters += 1;
            if !patient {
                st.next_impatient += 1;
                self.impatient_joined.notify_one();
            }
            if !st.running {
                st.running = true;
                tokio::spawn(self.clone().probe_loop());
            }
            st.next
        };
        // A safety net: each probe ends within its own bound, and this request's is sent
        // after the one in flight (if any) ends, a herd's window and a hold later.
        let done = tokio::time::timeout(
            2 * PROBE_TIMEOUT + HERD_WINDOW + PROGRESS_BOOKMARK_NOT_BEFORE,
            rx.wait_for(|d| d.as_ref().is_some_and(|d| d.generation >= needed)),
        )
        .await;
        match done {
            Ok(Ok(d)) => {
                let d = d.as_ref().expect("checked");
                let herd = d.herd;
                d.result
                    .clone()
                    .map(|rv| Probed { rv, herd })
                    .map_err(NotFresh::Probe)
            }
            Ok(Err(_)) => Err(NotFresh::Probe(ProbeError::Abandoned)),
            Err(_) => Err(NotFresh::Probe(ProbeError::Timeout(PROBE_TIMEOUT))),
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
            self.hold_for_patient_requests().await;
            let (generation, served) = {
                let mut st = self.probes.lock().expect("probe lock");
                let generation = st.next;
                st.next += 1;
                st.next_impatient = 0;
                (generation, std::mem::take(&mut st.next_waiters))
            };
            tracing::trace!(uri = %self.probe_uri, generation, requests = served, waited = ?window, "probe");
            let result = self.probe_once().await;
            self.counters.probes.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = &result {
                self.counters.probe_errors.fetch_add(1, Ordering::Relaxed);
                // A refusal by the gateway's own pool is load, logged like a forwarded
                // request's (watchgate_upstream_refusals_total counts it); the upstream
                // failing is worth a warning.
                if e.pool_full() {
                    tracing::debug!(uri = %self.probe_uri, requests = served, "consistency probe refused: {e}");
                } else {
                    tracing::warn!(uri = %self.probe_uri, requests = served, "consistency probe failed: {e}");
                }
            }
            let herd = served > HERD_SIZE || !window.is_zero();
            self.done.send_replace(Some(ProbeDone {
                generation,
                result,
                herd,
            }));
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

    /// Holds the next probe back while every request that joined it is patient and a
    /// progress bookmark is on its way, until [`PATIENT_MARGIN`] before that bookmark can
    /// come (or an impatient request joins). The probe is then still answered before the
    /// bookmark is sent, so the bookmark's resourceVersion covers it; and everyone who
    /// arrived until then shares it. Never later than the bookmark's earliest time: a probe
    /// answered after the bookmark would need the next one.
    async fn hold_for_patient_requests(&self) {
        let all_patient = || {
            let st = self.probes.lock().expect("probe lock");
            st.next_impatient == 0 && st.next_waiters > 0
        };
        if !all_patient() {
            return;
        }
        // A bookmark on its way, or about to be asked for: the last probe found the cache
        // behind, and its requests are asking for a proof now.
        let asked_soon = || {
            self.behind_last_probe()
                .then(|| std::time::Instant::now() + PROGRESS_BOOKMARK_NOT_BEFORE)
        };
        let Some(not_before) = self
            .demands
            .progress_bookmark_not_before()
            .or_else(asked_soon)
        else {
            return;
        };
        let Some(send_at) = not_before.checked_sub(PATIENT_MARGIN) else {
            return;
        };
        let send_at = Instant::from_std(send_at);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(send_at) => return,
                // Re-checked: the permit may be an impatient request's of a probe already
                // sent.
                _ = self.impatient_joined.notified() => {
                    if !all_patient() {
                        return;
                    }
                }
            }
        }
    }

    /// The last probe answered a resourceVersion the store has not reached.
    fn behind_last_probe(&self) -> bool {
        let last = self.done.borrow();
        last.as_ref()
            .and_then(|d| d.result.as_ref().ok())
            .is_some_and(|&rv| rv > self.store.resource_version())
    }

    /// One `limit=1` consistent list of the resource: the upstream's resourceVersion now.
    async fn probe_once(&self) -> Result<u64, ProbeError> {
        // The gateway's own request (`get_internal`): it may use the connections kept
        // back for short requests, so a pool full of forwarded watches never fails a
        // probe (whose failure would forward every request waiting for it).
        let answer = async {
            let answer = self
                .upstream
                .get_internal(&self.probe_uri, "application/json", MAX_PROBE_BYTES)
                .await?;
            if !answer.status.is_success() {
                return Err(ProbeError::Status {
                    status: answer.status,
                    body: answer.body_head(256).into_owned(),
                });
            }
            let list: ProbeList = serde_json::from_slice(&answer.body)
                .map_err(|e| ProbeError::NotAList(e.to_string()))?;
            self.store.token_form().learn(&list.metadata.continue_token);
            let rv = list.metadata.resource_version;
            rv.parse::<u64>()
                .map_err(|_| ProbeError::ResourceVersion(rv.clone()))
        };
        match tokio::time::timeout(PROBE_TIMEOUT, answer).await {
            Ok(r) => r,
            Err(_) => Err(ProbeError::Timeout(PROBE_TIMEOUT)),
        }
    }

    /// A snapshot that reflects every write the upstream acknowledged before `read`
    /// arrived, or why there is none in time (the caller forwards the request).
    pub async fn consistent_snapshot(
        self: &Arc<Self>,
        read: ConsistentRead,
    ) -> Result<Fresh, NotFresh> {
        let c = &self.counters;
        // Known wrong (a consistency check found it so): no proof of freshness can make
        // it right; the re-sync that repairs it is under way.
        if self.demands.inconsistent() {
            c.forwarded.fetch_add(1, Ordering::Relaxed);
            return Err(NotFresh::Inconsistent);
        }
        // The state's own consistent read was sent after the request arrived (the cache
        // was cold, or re-syncing): it is proof enough. Read before the snapshot.
        if self.demands.covers(read.arrived) {
            let snapshot = self.store.snapshot();
            c.synced.fetch_add(1, Ordering::Relaxed);
            return Ok(Fresh {
                rv: snapshot.resource_version,
                snapshot,
            });
        }
        // A lone get or list on a resource the last probe found behind, whose stream has
        // not moved since: the probe would find it behind again and the read would be
        // forwarded anyway; forward it now and spare the upstream the probe.
        if !read.stream && self.known_behind.lone_read(self.store.resource_version()) {
            c.forwarded.fetch_add(1, Ordering::Relaxed);
            return Err(NotFresh::Lone {
                reached: self.store.resource_version(),
            });
        }
        // Read before the probe is sent: a consistent read sent after the cache saw this
        // resourceVersion can never answer a smaller one, unless the upstream went back
        // (etcd restored from a backup, or the endpoint now serves another cluster).
        let seen = self.store.resource_version();
        // A watch of a large resource whose stream is silent waits for a progress
        // bookmark unless the probe finds the cache there already: its probe may wait for
        // the herd too.
        let patient =
            read.stream && self.store.snapshot().len() > SMALL_RESOURCE && !self.stream_is_live();
        let probed = match self.probe(patient).await {
            Ok(p) => p,
            // Load: every read that shared the probe tries the next one (they share it
            // too), once.
            Err(NotFresh::Probe(e)) if e.from_load() => match self.probe(patient).await {
                Ok(p) => p,
                Err(e) => {
                    c.forwarded.fetch_add(1, Ordering::Relaxed);
                    return Err(e);
                }
            },
            Err(e) => {
                c.forwarded.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        if probed.rv < seen {
            c.forwarded.fetch_add(1, Ordering::Relaxed);
            c.went_back.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(uri = %self.probe_uri, upstream = probed.rv, cache = seen, "the upstream's resourceVersion went back below the cache's (a restored or replaced cluster?); consistent reads are forwarded");
            // With several endpoints a lagging one could answer so; with one, only an
            // upstream that went back can: every cache is dropped and rebuilt.
            if self.upstream.endpoints().len() == 1 {
                self.demands.upstream_went_back();
            }
            return Err(NotFresh::WentBack {
                upstream: probed.rv,
                cache: seen,
            });
        }
        let snapshot = self.snapshot_at_least(probed, read).await?;
        Ok(Fresh {
            rv: probed.rv,
            snapshot,
        })
    }

    /// A snapshot at `probed.rv` or later: at once, after a live stream brings it, or
    /// after a proof (a progress watch's bookmark, or a re-sync), within [`FRESH_WAIT`];
    /// or forwarded at once when forwarding is cheaper than the proof.
    async fn snapshot_at_least(
        &self,
        probed: Probed,
        read: ConsistentRead,
    ) -> Result<Arc<Snapshot>, NotFresh> {
        let c = &self.counters;
        let needed = probed.rv;
        let now = self.store.snapshot();
        if now.resource_version >= needed {
            c.fresh.fetch_add(1, Ordering::Relaxed);
            return Ok(now);
        }
        let deadline = Instant::now() + FRESH_WAIT;
        // A live stream is likely to bring the RV in a moment: worth a short wait that
        // costs the upstream nothing. So is any stream of a small resource, whose
        // alternative is a re-read: it may be about to bring a write made just before the
        // read (as long as a sync takes, at least LIVE_GRACE, at most SMALL_GRACE). A
        // silent stream of a large resource is not waited for: its read is forwarded or
        // proven.
        let live = self.stream_is_live();
        let grace = if now.len() <= SMALL_RESOURCE {
            let last_sync = Duration::from_millis(self.stats.sync_millis.load(Ordering::Relaxed));
            Some(last_sync.clamp(LIVE_GRACE, SMALL_GRACE))
        } else {
            live.then_some(LIVE_GRACE)
        };
        if let Some(grace) = grace {
            if let Some(s) = self.store.wait_for(needed, grace).await {
                c.waited.fetch_add(1, Ordering::Relaxed);
                return Ok(s);
            }
        }
        // A reflector backing off after a failure answers no request soon.
        let able = self.stats.backing_off.load(Ordering::Relaxed) == 0;
        let proof = if able {
            self.proof_for(probed, read, &now)
        } else {
            None
        };
        let Some(proof) = proof else {
            c.forwarded.fetch_add(1, Ordering::Relaxed);
            self.known_behind.found_behind(now.resource_version);
            return Err(NotFresh::Cheaper {
                needed,
                reached: self.store.resource_version(),
            });
        };
        match proof {
            Proof::Resync => {
                c.resyncs_requested.fetch_add(1, Ordering::Relaxed);
                self.demands.resync.request_until(needed);
            }
            Proof::Progress => {
                c.progress_requested.fetch_add(1, Ordering::Relaxed);
                self.demands.progress.request_until(needed);
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if let Some(s) = self.store.wait_for(needed, left).await {
            c.resynced.fetch_add(1, Ordering::Relaxed);
            return Ok(s);
        }
        c.forwarded.fetch_add(1, Ordering::Relaxed);
        Err(NotFresh::Behind {
            needed,
            reached: self.store.resource_version(),
        })
    }

    /// The stream brought an event within [`LIVE_STREAM`]: more may be on their way.
    fn stream_is_live(&self) -> bool {
        self.stats
            .since_last_event()
            .is_some_and(|d| d <= LIVE_STREAM)
    }

    /// Which proof a read behind the probe's RV waits for, if any (`None`: forward it now).
    ///
    /// - a small resource: a re-sync, for any read (it costs about one forwarded request
    ///   and is quicker than a bookmark);
    /// - a watch, or a read of a herd: a progress watch, which they all share (O(1)
    ///   upstream requests for any number of them, and one small request however large
    ///   the resource);
    /// - any other read (a lone get, page or list): none. Forwarding it is faster than a
    ///   bookmark and costs the upstream what the client alone would have.
    ///
    /// A watch is not forwarded when alone: forwarded, it would stay on the upstream for
    /// its whole life (5–10 minutes for an informer), which is what the gateway exists to
    /// spare it; it waits a second for the bookmark instead.
    fn proof_for(&self, probed: Probed, read: ConsistentRead, snap: &Snapshot) -> Option<Proof> {
        if snap.len() <= SMALL_RESOURCE {
            return Some(Proof::Resync);
        }
        (read.stream || probed.herd).then_some(Proof::Progress)
    }

    /// A read forwarded as [`Forward::LoneRead`] has its answer: it no longer counts as in
    /// flight.
    pub fn lone_read_done(&self) {
        let _ =
            self.known_behind
                .in_flight
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// The demands the reflector answers (re-syncs, progress watches).
    pub fn demands(&self) -> &Arc<Demands> {
        &self.demands
    }
}

/// The resourceVersion at which a probe last found the cache behind with no proof worth
/// asking for (a lone read of a quiet large resource). While the store stays there, a
/// probe would find the same, so lone reads are forwarded without one
/// ([`Forward::LoneRead`]). Only while they stay lone: with [`HERD_SIZE`] of them being
/// forwarded at once, reads take the probe path again, whose herd detection has them share
/// a progress watch. One client reading in a loop has one in flight at a time, however
/// fast; a herd has many.
#[derive(Debug, Default)]
struct KnownBehind {
    /// The store's RV when found behind, plus one (0: not known behind).
    rv: AtomicU64,
    /// Lone reads being forwarded now (the router says when each has its answer).
    in_flight: AtomicU64,
}

impl KnownBehind {
    fn found_behind(&self, store_rv: u64) {
        self.rv.store(store_rv + 1, Ordering::Relaxed);
    }

    /// Whether a lone read at a store at `store_rv` may be forwarded without a probe; if
    /// so it is counted in flight until [`Freshness::lone_read_done`].
    fn lone_read(&self, store_rv: u64) -> bool {
        if self.rv.load(Ordering::Relaxed) != store_rv + 1 {
            return false;
        }
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < HERD_SIZE).then_some(n + 1)
            })
            .is_ok()
    }
}

/// A proof of freshness the reflector is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proof {
    Resync,
    Progress,
}

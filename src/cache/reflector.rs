//! The reflector: ONE upstream list+watch per resource type, feeding the store.
//!
//! It is an explicit state machine ([`Step`]), after kube-runtime's `watcher` and
//! client-go's `Reflector.ListAndWatchWithContext`, in two parts:
//!
//! - **the decisions** ([`step`], no I/O): [`Machine::step`] maps what the last step
//!   brought ([`Outcome`]: a state read, a watch-list or list failure, how a watch ended,
//!   the identity check's answer) and what the reflector sees of its own side ([`Seen`]:
//!   the store's resourceVersion, a pending progress demand) to the next [`Step`] and the
//!   [`Action`]s before it (count, sleep, install the state, mark an endpoint behind, tell
//!   the registry the upstream went back). It holds the backoff, whether watch-list is
//!   still tried, and the run of states older than the cache. Beside it, [`on_event`]
//!   (what a decoded event does to the store), [`Following`] (a progress watch's
//!   bookmark) and [`InitialEvents`] (a watch-list's initial events). Unit-tested
//!   transition by transition without a server (`reflector/step/tests.rs`).
//! - **the I/O shell** ([`Reflector::run`]): performs each step (the internal GETs and
//!   streams through `Upstream::get_internal`/`open_internal`, the identity check, the
//!   demands' bookkeeping), hands the outcome to the machine, and performs its actions
//!   (sleeping, writing the store through the [`StoreWriter`] only it holds, the byte
//!   budget, the stats, the log lines).
//!
//! The states:
//!
//! ```text
//!             ┌── watch-list supported (or not yet known) ──▶ WatchList ──┐ initial-events-end
//!   Sync ─────┤                                       rejected/ignored/   │ bookmark: replace
//!     ▲       │                                       failed: fall back ◀─┘ the store, keep
//!     │       └──────────────────────▶ PagedList ◀───────┘                  │ the same stream
//!     │                                   │ replace the store               ▼
//!     │                                   └──────────▶ Watch(rv) ◀──── Follow(stream)
//!     │                                                  │  ▲ stream ended: resume from
//!     │                                                  │  └─ the last rv (after Verify)
//!     └── 410 Expired / malformed event / sync error ────┘ (with backoff)
//! ```
//!
//! **Backfill(R)** comes before all of it, once, when the state file recorded the
//! resourceVersion R the previous run's cache had reached (`cache::warm`): the state
//! exactly at R (`resourceVersionMatch=Exact`, paged like **PagedList**) replaces the empty
//! store, and **Watch(R)** replays every change since into the history, so that clients
//! reconnecting after a restart from R or later resume from the cache. Its install does
//! not count as a consistent state (`cache::fresh`, step 0: it is a past one). A 410 (R
//! compacted) or any other failure goes to **Sync** at once, as a start without R would;
//! so does an upstream that is another cluster than the one the state file names (its
//! `kube-system` uid, checked once for all caches before the first list at R): R is a
//! resourceVersion of the old cluster's (docs/cache.md, "Resuming after a restart").
//!
//! **Verify** sits between the end of a watch and what follows it when the stream ended
//! normally, expired (410) or failed: the upstream's identity (`cache::identity`) is
//! checked first, and another cluster goes back to `Sync` as at start-up (the registry,
//! told, rebuilds every cache). **Dropped**: a state or a change the byte budget cannot
//! hold ends the reflector (`Reflector::drop_cache`).
//!
//! **Sync** builds a complete new snapshot and replaces the store's state in one step
//! (`Store::replace`), so readers see the old state or the new one, never half a list.
//! Two ways, chosen by [`WatchListMode`] (`--upstream-watch-list`):
//!
//! - **WatchList** (KEP-3157 streaming list): one request,
//!   `watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true`
//!   with resourceVersion unset (a consistent snapshot, client-go's "case 1"). The upstream
//!   sends the state as ADDED events and ends it with a BOOKMARK annotated
//!   `k8s.io/initial-events-end: "true"`, whose resourceVersion is the snapshot's; the
//!   SAME stream then continues as the watch (**Follow**). Events other than ADDED before
//!   that bookmark are applied to the snapshot being built, as client-go applies them to
//!   its temporary store.
//! - **PagedList**: `limit=500` pages, like client-go's pager, then **Watch** from the
//!   list's resourceVersion.
//!
//! Falling back (client-go `ListAndWatchWithContext`: "falling back to the standard
//! LIST/WATCH semantics because making progress is better than deadlocking", on *any*
//! watch-list error since kubernetes/kubernetes#120984): a watch-list attempt that
//! fails ends in a paged list. Two failures mean the upstream does not do watch-list at
//! all, and the reflector stops trying for good: a 4xx answer (apiservers before 1.27
//! reject `resourceVersionMatch` on a watch as Invalid; 1.27–1.31 without the `WatchList`
//! gate reject `sendInitialEvents`), or a stream that does not end its initial events
//! with the bookmark (an upstream that ignores the parameter streams a plain watch:
//! detected when the stream ends, or when no bookmark follows the last object within
//! [`ReflectorConfig::initial_events_idle`]). client-go itself only logs a warning and
//! keeps waiting in that last case (its `initialEventsEndBookmarkTicker`); a cache must
//! not stay cold, hence the bound. Other failures (connection errors, 5xx, 429, an
//! ERROR event) fall back for this sync only.
//!
//! **Watch/Follow**: bookmarks only advance the resourceVersion. A normal end of stream
//! resumes from the last resourceVersion; 410 Expired (HTTP or ERROR event) or an event
//! that cannot be understood goes back to **Sync**; other errors back off exponentially
//! with jitter (0.8 s doubling to 30 s, reset by every success) so that a sick apiserver
//! is not hammered. A refusal by the gateway's own connection pool is local load, not the
//! upstream failing: retried after about a second, without growing the backoff.
//!
//! **Consistent reads' demands** (`cache::demand`): a re-sync request ends the watch and
//! syncs ([`SyncCause::Consistent`]); a progress request ends an ordinary watch for a
//! short one from the same resourceVersion ([`WatchKind::Progress`]), whose pre-timeout
//! bookmark is the proof; one pending when a watch ends opens that short watch next.
//!
//! **A lagging apiserver** (one of several behind `--server`, whose watch cache has not
//! reached what the cache has already seen) is never a reason to relist: an answer of
//! "Too large resource version" (504, cause `ResourceVersionTooLarge`; HTTP, or an ERROR
//! event, to a watch, watch-list or list; kubernetes/kubernetes#100745), or a new state
//! older than the cache's, is [`WatchEnd::Behind`]: the upstream client is told to prefer
//! the other endpoints for a while, and the same step is tried again after the answer's
//! `retryAfterSeconds` (1 s): on an endpoint that is ahead, or on the same one once it has
//! caught up. The cache keeps its state and its watchers their streams meanwhile. (A plain
//! watch from a resourceVersion the apiserver has not reached yet just waits for it:
//! that is only a delay.)

mod step;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use rand::Rng;
use tokio::sync::watch;

use super::budget::{ByteBudget, OverBudget};
use super::demand::{Demands, PROGRESS_WATCH_TIMEOUT};
use super::events::{decode_event, ErrorStatus, LineSplitter, MalformedEvent};
use super::identity::{ClusterIdentity, Verdict};
use super::list_page::{decode_page, BodyFormat};
use super::store::{Change, StoreWriter};
use crate::model::resource::ResourceInfo;
use crate::model::snapshot::Snapshot;
use crate::upstream::{served_by, Class, Upstream, UpstreamBody, UpstreamError};
pub use step::Backoff;
use step::{
    on_event, stream_broke, watch_list_refused, watch_refused, Action, Behind, Counter, Effect,
    Failure, Following, Initial, InitialEvents, ListError, Machine, Outcome, Read, RequestError,
    Seen, Step, SyncCause, Transition, Via, Wait, WatchEnd, WatchKind, WatchListFailure,
    WatchListSupport,
};

/// What the reflector asks the upstream for: it caches the JSON.
const JSON: &str = "application/json";
/// Page size of upstream lists, as client-go's reflector uses.
const PAGE_SIZE: u32 = 500;
/// The largest list page accepted; far above 500 objects of the 1.5 MiB etcd limit is a
/// broken upstream, and the bound keeps the reflector's memory bounded.
const MAX_PAGE_BYTES: usize = 1024 * 1024 * 1024;

/// Counters a later metrics layer exports; kept as atomics so the reflector never waits.
#[derive(Debug, Default)]
pub struct ReflectorStats {
    /// Attempts to read the whole state: paged lists and watch-lists alike (exported as
    /// `watchgate_reflector_lists_total`); `watch_lists` counts the latter's successes.
    pub lists: AtomicU64,
    pub relists_after_expired: AtomicU64,
    pub watch_restarts: AtomicU64,
    pub errors: AtomicU64,
    pub malformed_objects: AtomicU64,
    pub events: AtomicU64,
    /// How long the last completed list took, in milliseconds (at least 1; 0 = none yet).
    pub sync_millis: AtomicU64,
    /// States built from a watch-list's initial events.
    pub watch_lists: AtomicU64,
    /// Watch-list attempts that ended in a paged list.
    pub watch_list_fallbacks: AtomicU64,
    /// Upstream watch streams open now: 1 from a watch's (or watch-list's) 200 until its
    /// stream ends, 0 while the reflector lists, backs off or cannot reach the upstream.
    /// Kept by [`EventStream`]'s lifetime, so no path can forget to decrement it.
    pub watches_open: AtomicU64,
    /// Answers from an upstream that was behind the cache ("Too large resource version",
    /// or an older state): retried, never relisted.
    pub behind: AtomicU64,
    /// Syncs made because a consistent read could not otherwise be proven fresh
    /// (`cache::fresh`); they are also counted in `lists`.
    pub consistent_resyncs: AtomicU64,
    /// Short watches opened for a consistent read's progress proof (`WatchKind::Progress`).
    pub progress_watches: AtomicU64,
    /// First states read at the state file's resourceVersion ([`Step::Backfill`]), and
    /// backfills that failed (then an ordinary sync followed).
    pub backfills: AtomicU64,
    pub backfill_fallbacks: AtomicU64,
    /// Backfills not tried: the upstream is another cluster than the state file's.
    pub backfills_other_cluster: AtomicU64,
    /// When the stream last brought an event, in milliseconds since the process's first
    /// reading (0: never): a live stream is worth a short wait, a silent one is not.
    last_event_millis: AtomicU64,
    /// 1 while the reflector sleeps in a backoff after a failure: it answers no re-sync
    /// request until it wakes (consistent reads then forward instead of waiting).
    pub backing_off: AtomicU64,
}

impl ReflectorStats {
    /// An event (a change or a bookmark) arrived on the stream now.
    fn note_event(&self) {
        let now = process_millis();
        self.last_event_millis.store(now.max(1), Ordering::Relaxed);
    }

    /// How long ago the stream last brought an event (`None`: never).
    pub fn since_last_event(&self) -> Option<Duration> {
        match self.last_event_millis.load(Ordering::Relaxed) {
            0 => None,
            at => Some(Duration::from_millis(process_millis().saturating_sub(at))),
        }
    }

    /// Sleeps `delay`, marked as backing off.
    async fn back_off(&self, delay: Duration) {
        self.backing_off.store(1, Ordering::Relaxed);
        tokio::time::sleep(delay).await;
        self.backing_off.store(0, Ordering::Relaxed);
    }
}

/// Milliseconds since the first call in this process (a monotonic clock for atomics).
fn process_millis() -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// Whether the reflector builds its state from a watch-list (`--upstream-watch-list`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum WatchListMode {
    // Plain comments, not doc comments: clap then prints `[possible values: auto, off]`
    // on one line, as the README's flag table expects; the flag's help explains both.
    // Use watch-list while the upstream supports it, the paged list otherwise.
    #[default]
    Auto,
    // Always use the paged list then a watch.
    Off,
}

/// How the reflectors talk to the upstream.
#[derive(Debug, Clone)]
pub struct ReflectorConfig {
    pub watch_list: WatchListMode,
    /// How long a watch-list may go without an object event before its initial events
    /// have ended; past it, the upstream is taken to ignore `sendInitialEvents`. Also the
    /// longest wait for the watch-list's response head (then: a paged list this time).
    pub initial_events_idle: Duration,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        Self {
            watch_list: WatchListMode::Auto,
            // A watch-list upstream streams its initial events back to back and sends the
            // closing bookmark right after them (the cacher within about a second).
            initial_events_idle: Duration::from_secs(10),
        }
    }
}

/// What the registry does when a reflector drops its cache for its size.
pub type OnDrop = Arc<dyn Fn(OverBudget) + Send + Sync>;

/// An open upstream watch, read line by line. Counted in
/// [`ReflectorStats::watches_open`] from creation to drop.
struct EventStream {
    body: UpstreamBody,
    /// The endpoint that serves it.
    endpoint: Option<usize>,
    lines: LineSplitter,
    ready: VecDeque<Bytes>,
    stats: Arc<ReflectorStats>,
    opened: Instant,
    /// The `timeoutSeconds` asked for, to tell a timeout from the upstream closing early.
    timeout: Duration,
    /// A progress watch ([`WatchKind::Progress`]), and whether its bookmark came.
    following: Following,
}

impl EventStream {
    fn new(
        body: UpstreamBody,
        endpoint: Option<usize>,
        stats: Arc<ReflectorStats>,
        timeout: Duration,
    ) -> Self {
        stats.watches_open.fetch_add(1, Ordering::Relaxed);
        Self {
            body,
            endpoint,
            lines: LineSplitter::default(),
            ready: VecDeque::new(),
            stats,
            opened: Instant::now(),
            timeout,
            following: Following::default(),
        }
    }

    /// Why a stream that ended cleanly ended, as far as the client can tell.
    fn end_reason(&self) -> String {
        let lasted = self.opened.elapsed();
        // The upstream ends the stream at its timeout; a second of slack for clocks.
        if lasted + Duration::from_secs(1) >= self.timeout {
            format!("its timeoutSeconds={} passed", self.timeout.as_secs())
        } else {
            format!(
                "the upstream closed it after {}",
                crate::logging::seconds(lasted)
            )
        }
    }

    /// The next event line; `Ok(None)` when the stream ended normally.
    async fn next_line(&mut self) -> Result<Option<Bytes>, Failure> {
        loop {
            if let Some(line) = self.ready.pop_front() {
                return Ok(Some(line));
            }
            let frame = match self.body.frame().await {
                None => return Ok(None),
                Some(Err(e)) => return Err(Failure::StreamBroke(e.to_string())),
                Some(Ok(f)) => f,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            match self.lines.push(data) {
                Ok(batch) => self.ready.extend(batch),
                Err(e) => return Err(Failure::EventTooLarge(e)),
            }
        }
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.stats.watches_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The reflector of one resource type.
pub struct Reflector {
    info: Arc<ResourceInfo>,
    upstream: Upstream,
    /// The only handle that writes the cache (readers hold `Arc<Store>`).
    store: StoreWriter,
    synced: watch::Sender<bool>,
    stats: Arc<ReflectorStats>,
    config: ReflectorConfig,
    /// The caches' byte budget, and what this cache holds of it (committed).
    budget: Arc<ByteBudget>,
    held: AtomicUsize,
    on_drop: Option<OnDrop>,
    /// Re-sync and progress requests from consistent reads (`None`: never asked).
    demands: Option<Arc<Demands>>,
    /// The cluster the cache was built from, verified before the stream resumes or the
    /// resource is relisted (`None`: never checked).
    identity: Option<Arc<ClusterIdentity>>,
    /// The resourceVersion the previous run's cache had reached (the state file): the
    /// first state is read there, and the watch resumes from it ([`Step::Backfill`]).
    resume_from: Option<u64>,
}

/// The reflector's end of the consistent reads' requests: wakes when one is made.
struct DemandRx {
    demands: Arc<Demands>,
    resync: watch::Receiver<u64>,
    progress: watch::Receiver<u64>,
}

impl DemandRx {
    fn new(demands: Arc<Demands>) -> Self {
        Self {
            resync: demands.resync.subscribe(),
            progress: demands.progress.subscribe(),
            demands,
        }
    }

    /// Resolves with the watch's end when a re-sync is requested after the last sync
    /// began, or (with `progress`) a progress proof after the last one began that the
    /// store (`store_rv`) has not reached yet; never when none can be.
    async fn requested(
        rx: &mut Option<DemandRx>,
        progress: bool,
        store_rv: impl Fn() -> u64,
    ) -> WatchEnd {
        let Some(r) = rx else {
            return std::future::pending().await;
        };
        let demands = r.demands.clone();
        let progress_changed = async {
            if !progress {
                std::future::pending::<()>().await;
            }
            loop {
                if r.progress.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
                // Requests the last bookmark already answered need no other watch.
                if demands.progress.pending_beyond(store_rv()) {
                    return;
                }
            }
        };
        let resync_changed = async {
            if r.resync.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = resync_changed => WatchEnd::Resync,
            _ = progress_changed => WatchEnd::Progress,
        }
    }

    /// A progress proof is asked for beyond `store_rv`: one whose requests the store has
    /// already reached (the last bookmark brought it past them) needs no other watch.
    fn progress_pending(rx: &Option<DemandRx>, store_rv: u64) -> bool {
        rx.as_ref()
            .is_some_and(|r| r.demands.progress.pending_beyond(store_rv))
    }
}

impl Reflector {
    pub fn new(
        info: Arc<ResourceInfo>,
        upstream: Upstream,
        store: StoreWriter,
        synced: watch::Sender<bool>,
        stats: Arc<ReflectorStats>,
    ) -> Self {
        Self {
            info,
            upstream,
            store,
            synced,
            stats,
            config: ReflectorConfig::default(),
            budget: Arc::new(ByteBudget::default()),
            held: AtomicUsize::new(0),
            on_drop: None,
            demands: None,
            identity: None,
            resume_from: None,
        }
    }

    /// Starts from the state at `rv` (the previous run's, from the state file) rather than
    /// the upstream's current one, so that clients resuming from it find its history;
    /// falls back to an ordinary sync if the upstream no longer has it.
    pub fn with_resume_from(mut self, rv: Option<u64>) -> Self {
        self.resume_from = rv;
        self
    }

    /// Verifies that the upstream is still this cluster before resuming or relisting.
    pub fn with_identity(mut self, identity: Arc<ClusterIdentity>) -> Self {
        self.identity = Some(identity);
        self
    }

    /// Whether the upstream is still the cluster the cache was built from, as of a read
    /// sent after `since`. Another cluster is an upstream that went back: the registry is
    /// told, and drops and rebuilds every cache (this reflector's task with it).
    async fn same_cluster(&self, since: Instant) -> bool {
        let Some(identity) = &self.identity else {
            return true;
        };
        match identity.verify(since).await {
            Verdict::Changed { was, now } => {
                tracing::warn!(resource = %self.info.resource, %was, %now, "the upstream's kube-system namespace has another uid: it is another cluster");
                if let Some(d) = &self.demands {
                    d.upstream_went_back();
                }
                false
            }
            Verdict::Same | Verdict::Unknown => true,
        }
    }

    /// Whether the state file's resourceVersions may be resumed from: the upstream is not
    /// known to be another cluster than the one the file names (decided once for every
    /// cache, `ClusterIdentity::may_resume`).
    async fn may_resume(&self) -> bool {
        match &self.identity {
            Some(identity) => identity.may_resume().await.allowed(),
            None => true,
        }
    }

    /// Holds the cache to `budget`; `on_drop` runs if it stops caching for its size.
    pub fn with_budget(mut self, budget: Arc<ByteBudget>, on_drop: OnDrop) -> Self {
        self.budget = budget;
        self.on_drop = Some(on_drop);
        self
    }

    /// Listens to re-sync and progress requests from consistent reads, and tells them
    /// when each consistent state it installs was read.
    pub fn with_demands(mut self, demands: Arc<Demands>) -> Self {
        self.demands = Some(demands);
        self
    }

    pub fn with_config(mut self, config: ReflectorConfig) -> Self {
        self.config = config;
        self
    }

    /// Runs until the task is dropped or aborted: performs each [`Step`], hands what it
    /// brought to the [`Machine`], and performs the [`Action`]s it answers with.
    pub async fn run(self) {
        let support = match self.config.watch_list {
            WatchListMode::Auto => WatchListSupport::Try,
            WatchListMode::Off => WatchListSupport::No,
        };
        let mut machine = Machine::new(support, self.upstream.endpoints().len());
        let mut demands = self.demands.clone().map(DemandRx::new);
        // The state a sync read, held until the machine says to install it.
        let mut read: Option<Snapshot> = None;
        // When the current sync began: its states come from requests sent after it.
        let mut sync_started = Instant::now();
        // When the last watch ended: the identity check must answer for a read after it.
        let mut ended = Instant::now();
        let mut step: Step<EventStream> = Machine::start(self.resume_from);
        loop {
            let outcome = match step {
                // R is a resourceVersion of the cluster the state file names: in another
                // one, the state at R is not what the previous run's clients saw.
                Step::Backfill(from) if !self.may_resume().await => Outcome::BackfillRefused(from),
                Step::Backfill(from) => {
                    // Demands are left pending: a past state answers none of them.
                    tracing::info!(resource = %self.info.resource, "resuming {} from resourceVersion {from} (the cache state file)…", self.info.resource);
                    sync_started = Instant::now();
                    let got = self.list(Some(from)).await.map(|(snapshot, endpoint)| {
                        let r = Read {
                            resource_version: snapshot.resource_version,
                            endpoint,
                        };
                        read = Some(snapshot);
                        r
                    });
                    Outcome::Backfilled(from, got)
                }
                Step::Sync(cause) => {
                    // Every re-sync or progress proof requested before this point is
                    // answered by this sync: its consistent request is sent after it.
                    if let Some(r) = demands.as_mut() {
                        r.demands.resync.starting(&mut r.resync);
                        r.demands.progress.starting(&mut r.progress);
                    }
                    self.sync_begins(&cause);
                    sync_started = Instant::now();
                    Outcome::SyncBegun(cause)
                }
                Step::WatchList(cause) => {
                    let got = self.watch_list().await.map(|(snapshot, stream)| {
                        let r = Read {
                            resource_version: snapshot.resource_version,
                            endpoint: stream.endpoint,
                        };
                        read = Some(snapshot);
                        (r, stream)
                    });
                    Outcome::WatchListed(cause, got)
                }
                Step::PagedList(cause) => {
                    let got = self.list(None).await.map(|(snapshot, endpoint)| {
                        let r = Read {
                            resource_version: snapshot.resource_version,
                            endpoint,
                        };
                        read = Some(snapshot);
                        r
                    });
                    Outcome::Listed(cause, got)
                }
                Step::Watch(from, kind) => {
                    if let (WatchKind::Progress, Some(r)) = (kind, demands.as_mut()) {
                        r.demands.progress.starting(&mut r.progress);
                    }
                    let end = self.watch(from, kind, &mut demands).await;
                    ended = Instant::now();
                    Outcome::WatchEnded(end)
                }
                Step::Follow(mut stream) => {
                    let end = self.follow(&mut stream, &mut demands).await;
                    // Closed before any backoff: the upstream watches gauge counts open
                    // streams, not streams waiting to be dropped.
                    drop(stream);
                    ended = Instant::now();
                    Outcome::WatchEnded(end)
                }
                Step::Verify(after) => Outcome::Verified(after, self.same_cluster(ended).await),
                Step::Dropped(why) => {
                    self.drop_cache(why);
                    return;
                }
            };
            let seen = Seen {
                store_rv: self.store.resource_version(),
                progress_pending: DemandRx::progress_pending(
                    &demands,
                    self.store.resource_version(),
                ),
            };
            let Transition { actions, next } = machine.step(outcome, seen);
            if !actions.iter().any(|a| matches!(a, Action::Install { .. })) {
                // A state not installed (older than the cache) is not held through a wait.
                read = None;
            }
            step = next;
            for action in actions {
                if let Err(why) = self.perform(action, &mut read, sync_started).await {
                    step = machine.step(Outcome::InstallRefused(why), seen).next;
                    break;
                }
            }
        }
    }

    /// Logs the start of a sync (a relist is logged once done, with its reason).
    fn sync_begins(&self, cause: &SyncCause) {
        let resource = &self.info.resource;
        match cause {
            SyncCause::Start => tracing::info!(%resource, "listing {resource}…"),
            SyncCause::Relist { reason, .. } => {
                tracing::debug!(%resource, reason = %reason, "relisting {resource}")
            }
            SyncCause::Consistent => {
                self.stats
                    .consistent_resyncs
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%resource, "re-syncing {resource} for a consistent read")
            }
        }
    }

    /// Performs one of the machine's actions. Only an install can fail: the state does
    /// not fit the byte budget.
    async fn perform(
        &self,
        action: Action,
        read: &mut Option<Snapshot>,
        sync_started: Instant,
    ) -> Result<(), OverBudget> {
        let resource = &self.info.resource;
        match action {
            Action::Count(c) => {
                let counter = match c {
                    Counter::Errors => &self.stats.errors,
                    Counter::WatchRestarts => &self.stats.watch_restarts,
                    Counter::RelistsAfterExpired => &self.stats.relists_after_expired,
                    Counter::MalformedObjects => &self.stats.malformed_objects,
                    Counter::WatchLists => &self.stats.watch_lists,
                    Counter::WatchListFallbacks => &self.stats.watch_list_fallbacks,
                    Counter::Behind => &self.stats.behind,
                    Counter::ProgressWatches => &self.stats.progress_watches,
                    Counter::Backfills => &self.stats.backfills,
                    Counter::BackfillFallbacks => &self.stats.backfill_fallbacks,
                    Counter::BackfillsOtherCluster => &self.stats.backfills_other_cluster,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Action::MarkBehind(i) => self.upstream.mark_behind(i),
            Action::Sleep(delay, why) => {
                let delay = delay.jittered();
                self.log_wait(&why, delay);
                self.stats.back_off(delay).await;
            }
            Action::Install { via, cause } => {
                if let Some(snapshot) = read.take() {
                    self.install(snapshot, sync_started, via, &cause)?;
                }
            }
            Action::WentBack {
                upstream,
                cache,
                times,
            } => {
                if let Some(d) = &self.demands {
                    tracing::warn!(%resource, upstream, cache, "consistent reads of the only upstream are older than the cache, {times} times in a row: its resourceVersions went back");
                    d.upstream_went_back();
                }
            }
            Action::WatchListFellBack {
                why,
                for_good: true,
            } => {
                tracing::warn!(%resource, "the upstream does not support watch-list ({why}); using paged lists")
            }
            Action::WatchListFellBack {
                why,
                for_good: false,
            } => {
                tracing::warn!(%resource, "watch-list failed ({why}); falling back to a paged list")
            }
            Action::Resuming { reason, rv } => {
                tracing::info!(%resource, reason = %reason, "watch ended ({reason}); resuming from {rv}")
            }
            Action::ProgressEnded { rv } => {
                tracing::debug!(%resource, "progress watch ended; resuming from {rv}")
            }
            Action::BackfillFellBack {
                from,
                why,
                expired: true,
            } => {
                tracing::info!(%resource, from, "the upstream no longer has resourceVersion {from} ({why:?}); syncing {resource} as usual")
            }
            Action::BackfillFellBack {
                from,
                why,
                expired: false,
            } => {
                tracing::warn!(%resource, from, "resuming {resource} from resourceVersion {from} failed ({why:?}); syncing it as usual")
            }
            // The warning is the identity's, once for every cache.
            Action::BackfillRefused { from } => {
                tracing::info!(%resource, from, "not resuming {resource} from resourceVersion {from}: the cache state file's resourceVersions are another cluster's; syncing it as usual")
            }
        }
        Ok(())
    }

    /// The log line of a wait: a warning when the upstream is at fault, info when the
    /// gateway's own pool refused or an endpoint lags.
    fn log_wait(&self, why: &Wait, delay: Duration) {
        let resource = &self.info.resource;
        let upstreams_fault = why.upstreams_fault();
        match why {
            Wait::ListFailed { error, first } => {
                let what = if *first { "list" } else { "relist" };
                if upstreams_fault {
                    tracing::warn!(%resource, error = %error, "{what} failed; retrying in {delay:.1?}");
                } else {
                    tracing::info!(%resource, error = %error, "{what} refused by the gateway's own connection pool; retrying in {delay:.1?}");
                }
            }
            Wait::WatchFailed(error) => {
                if upstreams_fault {
                    tracing::warn!(%resource, "watch failed ({error}); resuming in {delay:.1?}");
                } else {
                    tracing::info!(%resource, "watch refused by the gateway's own connection pool ({error}); resuming in {delay:.1?}");
                }
            }
            // The relist that follows says why, once done.
            Wait::Malformed => {}
            Wait::Behind { endpoint, what } => {
                let endpoint = endpoint
                    .and_then(|i| self.upstream.endpoints().get(i).map(|u| u.to_string()))
                    .unwrap_or_default();
                tracing::info!(%resource, %endpoint, "the upstream is behind the cache ({what}); retrying in {delay:.1?}");
            }
        }
    }

    fn install(
        &self,
        snapshot: Snapshot,
        started: Instant,
        via: Via,
        cause: &SyncCause,
    ) -> Result<(), OverBudget> {
        let backfill = via == Via::Backfill;
        let via = via.as_str();
        self.commit(snapshot.heap)?;
        let (n, rv) = (snapshot.len(), snapshot.resource_version);
        let bytes = snapshot.bytes;
        // A state replacing one a consistency check found wrong: streams it cannot
        // continue end with 410, so that their clients relist rather than resume.
        let repair = self.demands.as_ref().is_some_and(|d| d.inconsistent());
        self.store.replace_with(snapshot, repair);
        // Every state but a backfill's is read with a consistent request (a watch-list or
        // a list with no resourceVersion) sent after `started`; said after the store holds
        // it. A backfill's is the state at a past resourceVersion: it proves nothing about
        // writes made since, so consistent reads go through their probe (cache::fresh).
        if !backfill {
            if let Some(d) = &self.demands {
                d.consistent_state(started);
            }
        }
        self.synced.send_replace(true);
        let took = started.elapsed();
        let millis = (took.as_millis() as u64).max(1);
        self.stats.sync_millis.store(millis, Ordering::Relaxed);
        let what = format!(
            "{} {} ({}) in {}",
            crate::logging::thousands(n as u64),
            self.info.resource,
            crate::logging::megabytes(bytes as u64),
            crate::logging::seconds(took)
        );
        let resource = &self.info.resource;
        match cause {
            SyncCause::Start => tracing::info!(
                %resource, objects = n, bytes, resource_version = rv, via,
                "synced {what}"
            ),
            SyncCause::Relist {
                reason,
                anomaly: false,
            } => tracing::info!(
                %resource, objects = n, bytes, resource_version = rv, via, reason = %reason,
                "relisted {what} after {reason}"
            ),
            SyncCause::Relist {
                reason,
                anomaly: true,
            } => tracing::warn!(
                %resource, objects = n, bytes, resource_version = rv, via, reason = %reason,
                "relisted {what} after {reason}"
            ),
            SyncCause::Consistent => tracing::debug!(
                %resource, objects = n, bytes, resource_version = rv, via,
                "re-synced {what} for a consistent read"
            ),
        }
        Ok(())
    }

    /// Moves this cache's share of the byte budget to `heap`, if it fits.
    fn commit(&self, heap: usize) -> Result<(), OverBudget> {
        let held = self.held.load(Ordering::Relaxed);
        self.budget.try_commit(held, heap)?;
        self.held.store(heap, Ordering::Relaxed);
        Ok(())
    }

    /// Stops caching the resource: it does not fit the byte budget. Its watchers end (and
    /// resume through the upstream), its share of the budget is given back, and the
    /// registry forwards its requests from now on (kubernetes/kubernetes#142062 asks the
    /// apiserver for the same).
    fn drop_cache(&self, why: OverBudget) {
        let held = self.held.swap(0, Ordering::Relaxed);
        self.budget.release(held);
        self.synced.send_replace(false);
        self.store.hub().shutdown();
        let r = self.budget.config.retry_after;
        let retry = if r.as_secs() >= 60 && r.as_secs() % 60 == 0 {
            format!("{}m", r.as_secs() / 60)
        } else {
            crate::logging::seconds(r)
        };
        tracing::warn!(
            resource = %self.info.resource, group = %self.info.group, reason = why.reason(),
            "not caching {}: {why}; its requests are forwarded (caching is tried again on a request after {retry})",
            self.info.resource
        );
        if let Some(f) = &self.on_drop {
            f(why);
        }
    }

    /// A paged list of the whole resource: the upstream's current state (`exact`: none),
    /// or the state exactly at `exact` (`resourceVersionMatch=Exact`; its pages after the
    /// first follow their continue tokens, which carry that resourceVersion).
    async fn list(&self, exact: Option<u64>) -> Result<(Snapshot, Option<usize>), ListError> {
        self.stats.lists.fetch_add(1, Ordering::Relaxed);
        let base = self.info.collection_path();
        let mut snapshot = Snapshot::default();
        let mut cont: Option<String> = None;
        loop {
            let query = {
                let mut q = form_urlencoded::Serializer::new(String::new());
                q.append_pair("limit", &PAGE_SIZE.to_string());
                match (&cont, exact) {
                    (Some(c), _) => {
                        q.append_pair("continue", c);
                    }
                    (None, Some(rv)) => {
                        q.append_pair("resourceVersion", &rv.to_string());
                        q.append_pair("resourceVersionMatch", "Exact");
                    }
                    (None, None) => {}
                }
                q.finish()
            };
            // A page of the reflector's own: it may use the connections kept for short
            // requests when clients' watches fill the others.
            let answer = self
                .upstream
                .get_internal(&format!("{base}?{query}"), JSON, MAX_PAGE_BYTES)
                .await
                .map_err(|e| ListError::Failed(e.into()))?;
            let endpoint = answer.endpoint;
            if !answer.status.is_success() {
                let st: ErrorStatus = serde_json::from_slice(&answer.body).unwrap_or_default();
                if st.is_too_large_resource_version() {
                    return Err(ListError::Behind(Behind::from_status(&st, endpoint)));
                }
                return Err(ListError::Failed(Failure::ListStatus {
                    status: answer.status,
                    body: answer.body_head(512).into_owned(),
                }));
            }
            let page = decode_page(BodyFormat::Json, &answer.body, &self.info.field_labels)
                .map_err(|e| ListError::Failed(e.into()))?;
            for obj in page.objects {
                snapshot.insert(Arc::new(obj));
            }
            for err in page.malformed {
                // One broken object must not keep the whole type out of the cache; it is
                // counted and logged, and the watch will bring its next version.
                self.stats.malformed_objects.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(resource = %self.info.resource, error = %err, "skipping malformed object in list");
            }
            // A list too large for the budget is given up as soon as it is known to be:
            // the whole of it is never held.
            self.budget
                .check(self.held.load(Ordering::Relaxed), snapshot.heap)
                .map_err(ListError::OverBudget)?;
            // Every page of a paged list is served at the first page's resourceVersion.
            snapshot.resource_version = page.resource_version;
            match page.continue_token {
                Some(c) => {
                    // The upstream's own token: the form the cache's pages copy.
                    self.store.token_form().learn(&c);
                    cont = Some(c)
                }
                None => return Ok((snapshot, endpoint)),
            }
        }
    }

    /// Opens a watch with `query` (whose `timeoutSeconds` is `timeout`); an HTTP error
    /// comes back with its status.
    async fn open(&self, query: &str, timeout: u32) -> Result<EventStream, RequestError> {
        let path = format!("{}?{query}", self.info.collection_path());
        let resp = self
            .upstream
            .open_internal(&path, JSON, Class::LongRunning)
            .await
            .map_err(RequestError::Upstream)?;
        let status = resp.status();
        let endpoint = served_by(&resp);
        if !status.is_success() {
            // The Status says whether the apiserver is merely behind.
            let bytes = Limited::new(resp.into_body(), 64 << 10)
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let st: ErrorStatus = serde_json::from_slice(&bytes).unwrap_or_default();
            if st.is_too_large_resource_version() {
                return Err(RequestError::Behind(Behind::from_status(&st, endpoint)));
            }
            return Err(RequestError::Status(status));
        }
        Ok(EventStream::new(
            resp.into_body(),
            endpoint,
            self.stats.clone(),
            Duration::from_secs(timeout.into()),
        ))
    }

    /// A randomised timeout spreads reconnects, like client-go's 5–10 minute choice.
    fn watch_timeout() -> u32 {
        rand::rng().random_range(300..600)
    }

    /// Watches from `from` until the stream ends, applying every event to the store.
    async fn watch(&self, from: u64, kind: WatchKind, demands: &mut Option<DemandRx>) -> WatchEnd {
        let timeout = match kind {
            WatchKind::Long => Self::watch_timeout(),
            WatchKind::Progress => PROGRESS_WATCH_TIMEOUT,
        };
        let query = format!(
            "allowWatchBookmarks=true&resourceVersion={from}&timeoutSeconds={timeout}&watch=true"
        );
        let progress = demands
            .as_ref()
            .filter(|_| kind == WatchKind::Progress)
            .map(|r| r.demands.clone());
        if let Some(d) = &progress {
            // Before it is sent: its bookmark comes no sooner than a second after this.
            d.progress_watch_sent(std::time::Instant::now());
        }
        let end = match self.open(&query, timeout).await {
            Ok(mut stream) => {
                stream.following.progress = kind == WatchKind::Progress;
                self.follow(&mut stream, demands).await
            }
            Err(e) => watch_refused(e),
        };
        if let Some(d) = &progress {
            d.progress_watch_done();
        }
        end
    }

    /// Reads an open watch until it ends (or a consistent read asks for a re-sync or a
    /// progress proof), applying every event to the store.
    ///
    /// A progress request ends an ordinary watch: the reflector resumes from the same
    /// resourceVersion with a short one, whose pre-timeout bookmark is the proof. One that
    /// comes while a progress watch awaits its bookmark waits for that bookmark; one still
    /// pending after it opens the next short watch ([`Following::bookmark`]).
    async fn follow(&self, stream: &mut EventStream, demands: &mut Option<DemandRx>) -> WatchEnd {
        loop {
            let awaiting = stream.following.awaiting_bookmark();
            let line = tokio::select! {
                line = stream.next_line() => line,
                end = DemandRx::requested(demands, !awaiting, || self.store.resource_version()) => return end,
            };
            let line = match line {
                Ok(Some(line)) => line,
                Ok(None) => return stream.following.ended(|| stream.end_reason()),
                Err(f) => return stream_broke(f),
            };
            match self.apply_event(&line) {
                Err(mut end) => {
                    if let WatchEnd::Behind(b) = &mut end {
                        b.endpoint = stream.endpoint;
                    }
                    return end;
                }
                Ok(Applied::Bookmark) => {
                    if stream.following.progress {
                        if let Some(r) = demands.as_ref() {
                            r.demands.progress_watch_done();
                        }
                    }
                    let pending =
                        DemandRx::progress_pending(demands, self.store.resource_version());
                    if let Some(end) = stream.following.bookmark(pending) {
                        return end;
                    }
                }
                Ok(Applied::Change) => {}
            }
        }
    }

    /// WatchList: the state from a watch's initial events, and the stream to follow.
    async fn watch_list(&self) -> Result<(Snapshot, EventStream), WatchListFailure> {
        self.stats.lists.fetch_add(1, Ordering::Relaxed);
        // resourceVersion unset: a consistent snapshot (KEP-3157, client-go's case 1).
        let timeout = Self::watch_timeout();
        let query = format!(
            "allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds={timeout}&watch=true"
        );
        let idle = self.config.initial_events_idle;
        // An upstream that never answers must not keep the cache cold either.
        let mut stream = tokio::time::timeout(idle, self.open(&query, timeout))
            .await
            .unwrap_or(Err(RequestError::Upstream(UpstreamError::Timeout(idle))))
            .map_err(watch_list_refused)?;
        let mut initial = InitialEvents::new(&self.info.field_labels, stream.endpoint);
        // The initial state is checked against the budget as it grows, so one too large
        // for it is given up before all of it is held.
        let held = self.held.load(Ordering::Relaxed);
        let mut deadline = tokio::time::Instant::now() + idle;
        loop {
            let line = match tokio::time::timeout_at(deadline, stream.next_line()).await {
                Err(_) => return Err(InitialEvents::idle(idle)),
                Ok(Ok(None)) => return Err(InitialEvents::ended()),
                Ok(Err(f)) => return Err(WatchListFailure::Failed(f)),
                Ok(Ok(Some(line))) => line,
            };
            let taken = initial.line(&line);
            match &taken {
                Err(WatchListFailure::Failed(Failure::NotJson(_))) => {}
                Err(WatchListFailure::Failed(Failure::MalformedDeleted(_))) => {
                    self.stats.events.fetch_add(1, Ordering::Relaxed);
                    self.stats.malformed_objects.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    self.stats.events.fetch_add(1, Ordering::Relaxed);
                }
            }
            match taken? {
                Initial::Added => {
                    deadline = tokio::time::Instant::now() + idle;
                    self.budget
                        .check(held, initial.heap())
                        .map_err(WatchListFailure::OverBudget)?;
                }
                Initial::Removed => deadline = tokio::time::Instant::now() + idle,
                // As for a list item: skipped, counted, logged.
                Initial::Skipped(err) => {
                    deadline = tokio::time::Instant::now() + idle;
                    self.stats.malformed_objects.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(resource = %self.info.resource, error = %err, "skipping malformed object in watch-list");
                }
                Initial::Bookmark => {}
                Initial::Done(snapshot) => return Ok((snapshot, stream)),
            }
        }
    }

    /// Applies one event line: a change or a bookmark, or how the watch ends if this
    /// event ends it.
    fn apply_event(&self, line: &[u8]) -> Result<Applied, WatchEnd> {
        let decoded = decode_event(line, &self.info.field_labels).map_err(|e| {
            if !matches!(e, MalformedEvent::NotJson(_)) {
                self.stats.events.fetch_add(1, Ordering::Relaxed);
            }
            WatchEnd::Malformed(e.into())
        })?;
        self.stats.events.fetch_add(1, Ordering::Relaxed);
        self.stats.note_event();
        let change = match on_event(decoded) {
            Effect::End(end) => return Err(end),
            Effect::Apply(change) => change,
        };
        let (bookmark, upsert) = (
            matches!(change, Change::Progress(_)),
            matches!(change, Change::Upsert(_)),
        );
        self.store.apply(change);
        if bookmark {
            return Ok(Applied::Bookmark);
        }
        // The change is in; a cache an upsert takes over the budget is dropped whole (a
        // delete only shrinks it).
        let committed = self.commit(self.store.snapshot().heap);
        if upsert {
            committed.map_err(WatchEnd::OverBudget)?;
        }
        Ok(Applied::Change)
    }
}

/// What one event line did.
enum Applied {
    /// An object changed.
    Change,
    /// A BOOKMARK moved the resourceVersion.
    Bookmark,
}

//! The reflector: ONE upstream list+watch per resource type, feeding the store.
//!
//! It is an explicit state machine ([`Step`]), after kube-runtime's `watcher` and
//! client-go's `Reflector.ListAndWatchWithContext`:
//!
//! ```text
//!             ┌── watch-list supported (or not yet known) ──▶ WatchList ──┐ initial-events-end
//!   Sync ─────┤                                       rejected/ignored/   │ bookmark: replace
//!     ▲       │                                       failed: fall back ◀─┘ the store, keep
//!     │       └──────────────────────▶ PagedList ◀───────┘                  │ the same stream
//!     │                                   │ replace the store               ▼
//!     │                                   └──────────▶ Watch(rv) ◀──── Follow(stream)
//!     │                                                  │  ▲ stream ended: resume from
//!     │                                                  │  └─ the last rv
//!     └── 410 Expired / malformed event / sync error ────┘ (with backoff)
//! ```
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
//! with jitter so that a sick apiserver is not hammered.
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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Limited};
use rand::Rng;
use serde::Deserialize;
use tokio::sync::watch;

use super::budget::{ByteBudget, OverBudget};
use super::demand::Demands;
use super::events::{decode_event, Decoded, ErrorStatus, LineSplitter, MalformedEvent, RawEvent};
use super::identity::{ClusterIdentity, Verdict};
use super::list_page::{decode_page, BodyFormat};
use super::store::{Change, StoreWriter};
use crate::model::object::CachedObject;
use crate::model::resource::ResourceInfo;
use crate::model::snapshot::{entry_bytes, Snapshot};
use crate::upstream::{served_by, Class, Upstream, UpstreamBody, UpstreamError};

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

/// The annotation of the BOOKMARK that ends a watch-list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

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
    /// The stream ended normally (its timeout, or the upstream closed it): resume from the
    /// last RV. Carries which of the two, for the log line.
    Closed(String),
    /// 410 Expired (or Gone): the RV is compacted; relist.
    Expired(String),
    /// Something broke; resume from the last RV after a backoff.
    Failed(Failure),
    /// An event could not be understood: relist so that nothing is lost.
    Malformed(String),
    /// A consistent read asked for a re-sync (`cache::fresh`).
    Resync,
    /// Consistent reads asked for a progress proof: a short watch from the cache's
    /// resourceVersion, for its pre-timeout bookmark (`cache::demand`).
    Progress,
    /// A progress watch ended at its timeout: resume with an ordinary watch (or another
    /// progress watch, if one is asked for).
    ProgressEnded,
    /// The upstream endpoint is behind what the cache has seen: try again (elsewhere).
    Behind(Behind),
    /// The cache outgrew its byte budget: stop caching the resource.
    OverBudget(OverBudget),
}

/// An upstream endpoint that answered from behind the cache's resourceVersion.
#[derive(Debug)]
struct Behind {
    /// Which endpoint (`Served`), to be preferred less for a while.
    endpoint: Option<usize>,
    /// The answer's `retryAfterSeconds`, or a second.
    retry_after: Duration,
    what: String,
}

impl Behind {
    fn from_status(st: &ErrorStatus, endpoint: Option<usize>) -> Self {
        Self {
            endpoint,
            retry_after: st.retry_after().unwrap_or(Duration::from_secs(1)),
            what: st.message.clone(),
        }
    }
}

/// Why a request for a watch, a watch-list or a list page got no usable answer.
#[derive(Debug)]
enum RequestError {
    /// The upstream answered with this code.
    Status(StatusCode, String),
    Behind(Behind),
    /// No answer (connection, credentials, a refusal at the connection bound).
    Upstream(UpstreamError),
}

/// Why a list or a watch failed, kept typed so that the reflector can tell its own pool
/// being full (local load: retried soon, without growing the backoff) from the upstream
/// failing (backed off exponentially, logged as a warning).
#[derive(Debug, thiserror::Error)]
enum Failure {
    /// No answer from the upstream, or a refusal by the gateway's own pool.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// An answer the reflector cannot use: an error status, a body that does not decode,
    /// a stream that broke, an ERROR event.
    #[error("{0}")]
    Answer(String),
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure::Answer(s)
    }
}

impl Failure {
    fn pool_full(&self) -> bool {
        matches!(self, Failure::Upstream(e) if e.is_pool_full())
    }
}

/// How long the reflector waits after its own pool refused it: about the 429's
/// `Retry-After`, as a client would. The pool frees a connection as soon as any request
/// ends, and a refusal costs the upstream nothing, so nothing is gained by backing off
/// further (and a cache would stay cold for up to 30 s longer).
const POOL_FULL_RETRY: Duration = Duration::from_secs(1);

/// The wait before retrying after `failure`, and whether it is the upstream's fault
/// (logged as a warning) rather than the gateway's own load (logged at info).
fn retry_delay(failure: &Failure, backoff: &mut Backoff) -> (Duration, bool) {
    if failure.pool_full() {
        (
            POOL_FULL_RETRY.mul_f64(rand::rng().random_range(0.5..1.5)),
            false,
        )
    } else {
        (backoff.next_delay(), true)
    }
}

/// The state machine's states (see the module docs).
enum Step {
    /// Build a new state: watch-list or paged list.
    Sync(SyncCause),
    /// Open a watch from this resourceVersion.
    Watch(u64, WatchKind),
    /// Keep reading an open watch (the watch-list's stream after its initial events).
    /// (Boxed: the stream holds its pooled connection's lease.)
    Follow(Box<EventStream>),
    /// The resource does not fit the byte budget: the reflector stops (`Reflector::drop_cache`).
    Dropped(OverBudget),
}

/// Which watch the reflector opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WatchKind {
    /// The ordinary watch: 5–10 minutes, like client-go's.
    Long,
    /// A short watch for a progress proof: kube-apiserver sends a watch that allows
    /// bookmarks a BOOKMARK 2 s before its deadline (`cacheWatcher.nextBookmarkTime`), at
    /// its current resourceVersion and after every event it sent before; with
    /// [`PROGRESS_WATCH_TIMEOUT`] that bookmark comes about a second after the watch
    /// opened (up to two: the cacher's bookmark timer ticks each second, its buckets are
    /// whole seconds).
    Progress,
}

/// `timeoutSeconds` of a progress watch: the shortest whose pre-timeout bookmark is sent
/// (at 2 s or less before the deadline, `nextBookmarkTime` finds the time already past).
pub const PROGRESS_WATCH_TIMEOUT: u32 = 3;

/// Why a state is being built: logged once it is in place, so that a relist is one line
/// with its reason (start-up has its two progress lines instead).
#[derive(Debug, Clone)]
enum SyncCause {
    /// The first state of this reflector.
    Start,
    /// The watch could not continue; `reason` says why. `anomaly` (an event that could not
    /// be understood) logs the relist as a warning; a 410 is routine and logs at info.
    Relist { reason: String, anomaly: bool },
    /// A consistent read needs a state at least as new as the upstream's now, and the
    /// stream has not brought it (`cache::fresh`). Routine: logged at debug.
    Consistent,
}

/// What the reflector knows of the upstream's watch-list support.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WatchListSupport {
    /// Try it (mode `auto`, nothing against it seen yet).
    Try,
    /// Never try it: mode `off`, or the upstream rejected or ignored it.
    No,
}

/// Why a watch-list attempt produced no state.
#[derive(Debug)]
enum WatchListFailure {
    /// The upstream does not do watch-list: never try it again.
    Unsupported(String),
    /// A transient failure: a paged list this time, watch-list again next time.
    Failed(String),
    /// A lagging endpoint: the same watch-list again, not a paged list.
    Behind(Behind),
    /// The initial events outgrew the byte budget.
    OverBudget(OverBudget),
}

/// Why a paged list produced no state.
#[derive(Debug)]
enum ListError {
    /// A lagging endpoint: try again (elsewhere), never a relist from stale data.
    Behind(Behind),
    /// The upstream failed or sent garbage: retry after a backoff.
    Failed(Failure),
    /// The pages read so far outgrow the byte budget.
    OverBudget(OverBudget),
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
    progress: bool,
    bookmarked: bool,
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
            progress: false,
            bookmarked: false,
        }
    }

    /// A progress watch whose bookmark has not come yet: a new progress request waits
    /// for it rather than opening another watch.
    fn awaiting_bookmark(&self) -> bool {
        self.progress && !self.bookmarked
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
    async fn next_line(&mut self) -> Result<Option<Bytes>, WatchEnd> {
        loop {
            if let Some(line) = self.ready.pop_front() {
                return Ok(Some(line));
            }
            let frame = match self.body.frame().await {
                None => return Ok(None),
                Some(Err(e)) => {
                    return Err(WatchEnd::Failed(format!("watch stream broke: {e}").into()))
                }
                Some(Ok(f)) => f,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            match self.lines.push(data) {
                Ok(batch) => self.ready.extend(batch),
                Err(e) => return Err(WatchEnd::Malformed(e.to_string())),
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
    /// Consistent states older than the cache's, in a row (see `older_than_cache`).
    older_in_a_row: AtomicU32,
    /// The cluster the cache was built from, verified before the stream resumes or the
    /// resource is relisted (`None`: never checked).
    identity: Option<Arc<ClusterIdentity>>,
}

/// Consistent states older than the cache's, in a row, from a lone `--server` endpoint,
/// after which the upstream is taken to have gone back (a restored or replaced cluster)
/// rather than to lag: a consistent read is never older than one seen before unless the
/// resourceVersions themselves went back. A few, not one, to be sure.
const WENT_BACK_AFTER: u32 = 3;

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
    /// began, or (with `progress`) a progress proof after the last one began; never when
    /// none can be.
    async fn requested(rx: &mut Option<DemandRx>, progress: bool) -> WatchEnd {
        let Some(r) = rx else {
            return std::future::pending().await;
        };
        let progress_changed = async {
            if !progress || r.progress.changed().await.is_err() {
                std::future::pending::<()>().await;
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

    fn progress_pending(rx: &Option<DemandRx>) -> bool {
        rx.as_ref().is_some_and(|r| r.demands.progress.pending())
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
            older_in_a_row: AtomicU32::new(0),
            identity: None,
        }
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

    /// Runs until the task is dropped or aborted.
    pub async fn run(self) {
        let mut backoff = Backoff::default();
        let mut watch_list = match self.config.watch_list {
            WatchListMode::Auto => WatchListSupport::Try,
            WatchListMode::Off => WatchListSupport::No,
        };
        let mut demands = self.demands.clone().map(DemandRx::new);
        let mut step = Step::Sync(SyncCause::Start);
        loop {
            step = match step {
                Step::Sync(cause) => {
                    // Every re-sync or progress proof requested before this point is
                    // answered by this sync: its consistent request is sent after it.
                    if let Some(r) = demands.as_mut() {
                        r.demands.resync.starting(&mut r.resync);
                        r.demands.progress.starting(&mut r.progress);
                    }
                    self.sync(cause, &mut backoff, &mut watch_list).await
                }
                Step::Watch(from, kind) => {
                    if let (WatchKind::Progress, Some(r)) = (kind, demands.as_mut()) {
                        r.demands.progress.starting(&mut r.progress);
                    }
                    let end = self.watch(from, kind, &mut demands).await;
                    self.after_watch(end, &mut backoff, &demands).await
                }
                Step::Follow(mut stream) => {
                    let end = self.follow(&mut stream, &mut demands).await;
                    // Closed before any backoff: the upstream watches gauge counts open
                    // streams, not streams waiting to be dropped.
                    drop(stream);
                    self.after_watch(end, &mut backoff, &demands).await
                }
                Step::Dropped(why) => {
                    self.drop_cache(why);
                    return;
                }
            };
        }
    }

    /// Sync: a new state from a watch-list, else from a paged list.
    async fn sync(
        &self,
        cause: SyncCause,
        backoff: &mut Backoff,
        watch_list: &mut WatchListSupport,
    ) -> Step {
        match &cause {
            SyncCause::Start => {
                tracing::info!(resource = %self.info.resource, "listing {}…", self.info.resource)
            }
            // One line per relist, written when it is done (`install`).
            SyncCause::Relist { reason, .. } => {
                tracing::debug!(resource = %self.info.resource, reason = %reason, "relisting {}", self.info.resource)
            }
            SyncCause::Consistent => {
                self.stats
                    .consistent_resyncs
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(resource = %self.info.resource, "re-syncing {} for a consistent read", self.info.resource)
            }
        }
        let started = Instant::now();
        if *watch_list == WatchListSupport::Try {
            match self.watch_list().await {
                Ok((snapshot, stream)) => {
                    if let Some(behind) = self.older_than_cache(&snapshot, stream.endpoint) {
                        drop(stream);
                        return self.after_behind(behind, Step::Sync(cause)).await;
                    }
                    self.stats.watch_lists.fetch_add(1, Ordering::Relaxed);
                    if let Err(why) = self.install(snapshot, started, "watch-list", &cause) {
                        return Step::Dropped(why);
                    }
                    backoff.reset();
                    return Step::Follow(Box::new(stream));
                }
                Err(WatchListFailure::Behind(behind)) => {
                    return self.after_behind(behind, Step::Sync(cause)).await;
                }
                Err(WatchListFailure::OverBudget(why)) => return Step::Dropped(why),
                Err(WatchListFailure::Unsupported(msg)) => {
                    self.stats
                        .watch_list_fallbacks
                        .fetch_add(1, Ordering::Relaxed);
                    *watch_list = WatchListSupport::No;
                    tracing::warn!(resource = %self.info.resource, "the upstream does not support watch-list ({msg}); using paged lists");
                }
                Err(WatchListFailure::Failed(msg)) => {
                    self.stats
                        .watch_list_fallbacks
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(resource = %self.info.resource, "watch-list failed ({msg}); falling back to a paged list");
                }
            }
        }
        match self.list().await {
            Ok((snapshot, endpoint)) => {
                if let Some(behind) = self.older_than_cache(&snapshot, endpoint) {
                    return self.after_behind(behind, Step::Sync(cause)).await;
                }
                if let Err(why) = self.install(snapshot, started, "list", &cause) {
                    return Step::Dropped(why);
                }
                backoff.reset();
                Step::Watch(self.store.resource_version(), WatchKind::Long)
            }
            Err(ListError::Behind(behind)) => self.after_behind(behind, Step::Sync(cause)).await,
            Err(ListError::OverBudget(why)) => Step::Dropped(why),
            Err(ListError::Failed(err)) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                let (delay, upstreams_fault) = retry_delay(&err, backoff);
                let what = match cause {
                    SyncCause::Start => "list",
                    SyncCause::Relist { .. } | SyncCause::Consistent => "relist",
                };
                if upstreams_fault {
                    tracing::warn!(resource = %self.info.resource, error = %err, "{what} failed; retrying in {delay:.1?}");
                } else {
                    tracing::info!(resource = %self.info.resource, error = %err, "{what} refused by the gateway's own connection pool; retrying in {delay:.1?}");
                }
                self.stats.back_off(delay).await;
                Step::Sync(cause)
            }
        }
    }

    /// A new state older than the one the cache already has can only come from a lagging
    /// endpoint (a consistent read is never older than what was seen before): installing
    /// it would end every downstream watch. `None` when the state may be installed.
    /// With one endpoint, the same answer [`WENT_BACK_AFTER`] times in a row means the
    /// upstream went back: the registry is told, and drops and rebuilds every cache.
    fn older_than_cache(&self, snapshot: &Snapshot, endpoint: Option<usize>) -> Option<Behind> {
        let have = self.store.resource_version();
        let older = have > 0 && snapshot.resource_version < have;
        if !older {
            self.older_in_a_row.store(0, Ordering::Relaxed);
        } else if self.upstream.endpoints().len() == 1 {
            let n = self.older_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
            if n >= WENT_BACK_AFTER {
                if let Some(d) = &self.demands {
                    tracing::warn!(resource = %self.info.resource, upstream = snapshot.resource_version, cache = have, "consistent reads of the only upstream are older than the cache, {n} times in a row: its resourceVersions went back");
                    d.upstream_went_back();
                }
            }
        }
        older.then(|| Behind {
            endpoint,
            retry_after: Duration::from_secs(1),
            what: format!(
                "its state is at resourceVersion {}, the cache's at {have}",
                snapshot.resource_version
            ),
        })
    }

    /// After an answer from an endpoint behind the cache: prefer the others for a while,
    /// wait as the answer asked (with jitter: reflectors of every resource may get it at
    /// once), and try `next` again. Never a relist.
    async fn after_behind(&self, behind: Behind, next: Step) -> Step {
        self.stats.behind.fetch_add(1, Ordering::Relaxed);
        if let Some(i) = behind.endpoint {
            self.upstream.mark_behind(i);
        }
        let delay = behind
            .retry_after
            .max(Duration::from_millis(100))
            .mul_f64(rand::rng().random_range(1.0..1.5));
        let endpoint = behind
            .endpoint
            .and_then(|i| self.upstream.endpoints().get(i).map(|u| u.to_string()))
            .unwrap_or_default();
        tracing::info!(resource = %self.info.resource, %endpoint, "the upstream is behind the cache ({}); retrying in {delay:.1?}", behind.what);
        self.stats.back_off(delay).await;
        next
    }

    /// Replaces the store's state with a complete new snapshot, in one step, and logs it:
    /// the start-up's "synced …" progress line, or a relist's one line with its reason.
    /// A snapshot the byte budget cannot hold is not installed.
    fn install(
        &self,
        snapshot: Snapshot,
        started: Instant,
        via: &'static str,
        cause: &SyncCause,
    ) -> Result<(), OverBudget> {
        self.commit(snapshot.heap)?;
        let (n, rv) = (snapshot.len(), snapshot.resource_version);
        let bytes = snapshot.bytes;
        // A state replacing one a consistency check found wrong: streams it cannot
        // continue end with 410, so that their clients relist rather than resume.
        let repair = self.demands.as_ref().is_some_and(|d| d.inconsistent());
        self.store.replace_with(snapshot, repair);
        // Every state is read with a consistent request (a watch-list or a list with no
        // resourceVersion) sent after `started`; said after the store holds it.
        if let Some(d) = &self.demands {
            d.consistent_state(started);
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

    /// What follows the end of a watch.
    async fn after_watch(
        &self,
        end: WatchEnd,
        backoff: &mut Backoff,
        demands: &Option<DemandRx>,
    ) -> Step {
        let ended = Instant::now();
        match end {
            WatchEnd::Closed(reason) => {
                self.stats.watch_restarts.fetch_add(1, Ordering::Relaxed);
                // A stream that ended may end because the apiserver behind it was
                // replaced: resuming would mix two clusters' objects.
                if !self.same_cluster(ended).await {
                    return Step::Sync(SyncCause::Start);
                }
                let rv = self.store.resource_version();
                backoff.reset();
                if DemandRx::progress_pending(demands) {
                    self.stats.progress_watches.fetch_add(1, Ordering::Relaxed);
                    return Step::Watch(rv, WatchKind::Progress);
                }
                tracing::info!(resource = %self.info.resource, reason = %reason, "watch ended ({reason}); resuming from {rv}");
                Step::Watch(rv, WatchKind::Long)
            }
            WatchEnd::Progress => {
                self.stats.progress_watches.fetch_add(1, Ordering::Relaxed);
                Step::Watch(self.store.resource_version(), WatchKind::Progress)
            }
            WatchEnd::ProgressEnded => {
                let rv = self.store.resource_version();
                if DemandRx::progress_pending(demands) {
                    self.stats.progress_watches.fetch_add(1, Ordering::Relaxed);
                    return Step::Watch(rv, WatchKind::Progress);
                }
                tracing::debug!(resource = %self.info.resource, "progress watch ended; resuming from {rv}");
                Step::Watch(rv, WatchKind::Long)
            }
            WatchEnd::Expired(msg) => {
                self.stats
                    .relists_after_expired
                    .fetch_add(1, Ordering::Relaxed);
                // Another cluster answers 410 to the old one's resourceVersions too; its
                // state must not be told to the watchers as the old one's next events.
                if !self.same_cluster(ended).await {
                    return Step::Sync(SyncCause::Start);
                }
                Step::Sync(SyncCause::Relist {
                    reason: format!("the watch expired ({msg})"),
                    anomaly: false,
                })
            }
            WatchEnd::Resync => Step::Sync(SyncCause::Consistent),
            WatchEnd::Malformed(msg) => {
                self.stats.malformed_objects.fetch_add(1, Ordering::Relaxed);
                self.stats.back_off(backoff.next_delay()).await;
                Step::Sync(SyncCause::Relist {
                    reason: format!("a malformed watch event ({msg})"),
                    anomaly: true,
                })
            }
            WatchEnd::OverBudget(why) => Step::Dropped(why),
            WatchEnd::Failed(msg) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                let (delay, upstreams_fault) = retry_delay(&msg, backoff);
                if upstreams_fault {
                    tracing::warn!(resource = %self.info.resource, "watch failed ({msg}); resuming in {delay:.1?}");
                } else {
                    tracing::info!(resource = %self.info.resource, "watch refused by the gateway's own connection pool ({msg}); resuming in {delay:.1?}");
                }
                self.stats.back_off(delay).await;
                if !self.same_cluster(ended).await {
                    return Step::Sync(SyncCause::Start);
                }
                Step::Watch(self.store.resource_version(), WatchKind::Long)
            }
            WatchEnd::Behind(behind) => {
                let rv = self.store.resource_version();
                self.after_behind(behind, Step::Watch(rv, WatchKind::Long))
                    .await
            }
        }
    }

    /// Reads the whole collection, page by page, into a new snapshot; also says which
    /// endpoint served the last page.
    async fn list(&self) -> Result<(Snapshot, Option<usize>), ListError> {
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
                return Err(ListError::Failed(
                    format!("list returned {}: {}", answer.status, answer.body_head(512)).into(),
                ));
            }
            let page = decode_page(BodyFormat::Json, &answer.body, &self.info.field_labels)
                .map_err(|e| ListError::Failed(e.to_string().into()))?;
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
            return Err(RequestError::Status(
                status,
                format!("watch returned {status}"),
            ));
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
        match self.open(&query, timeout).await {
            Ok(mut stream) => {
                stream.progress = kind == WatchKind::Progress;
                self.follow(&mut stream, demands).await
            }
            Err(RequestError::Status(StatusCode::GONE, _)) => {
                WatchEnd::Expired("HTTP 410 Gone".into())
            }
            Err(RequestError::Behind(b)) => WatchEnd::Behind(b),
            Err(RequestError::Status(_, msg)) => WatchEnd::Failed(msg.into()),
            Err(RequestError::Upstream(e)) => WatchEnd::Failed(e.into()),
        }
    }

    /// Reads an open watch until it ends (or a consistent read asks for a re-sync or a
    /// progress proof), applying every event to the store.
    ///
    /// A progress request ends an ordinary watch: the reflector resumes from the same
    /// resourceVersion with a short one, whose pre-timeout bookmark is the proof. One that
    /// comes while a progress watch awaits its bookmark waits for that bookmark; one still
    /// pending after it opens the next short watch (its probe may have been answered after
    /// the bookmark was sent).
    async fn follow(&self, stream: &mut EventStream, demands: &mut Option<DemandRx>) -> WatchEnd {
        loop {
            let awaiting = stream.awaiting_bookmark();
            let line = tokio::select! {
                line = stream.next_line() => line,
                end = DemandRx::requested(demands, !awaiting) => return end,
            };
            match line {
                Ok(None) if stream.progress => return WatchEnd::ProgressEnded,
                Ok(None) => return WatchEnd::Closed(stream.end_reason()),
                Err(end) => return end,
                Ok(Some(line)) => match self.apply_event(&line) {
                    Applied::End(mut end) => {
                        if let WatchEnd::Behind(b) = &mut end {
                            b.endpoint = stream.endpoint;
                        }
                        return end;
                    }
                    Applied::Bookmark if stream.progress => {
                        stream.bookmarked = true;
                        if DemandRx::progress_pending(demands) {
                            return WatchEnd::Progress;
                        }
                    }
                    Applied::Bookmark | Applied::Change => {}
                },
            }
        }
    }

    /// WatchList: the state from a watch's initial events, and the stream to follow.
    async fn watch_list(&self) -> Result<(Snapshot, EventStream), WatchListFailure> {
        use WatchListFailure::{Failed, Unsupported};
        let behind = WatchListFailure::Behind;
        self.stats.lists.fetch_add(1, Ordering::Relaxed);
        // resourceVersion unset: a consistent snapshot (KEP-3157, client-go's case 1).
        let timeout = Self::watch_timeout();
        let query = format!(
            "allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds={timeout}&watch=true"
        );
        let idle = self.config.initial_events_idle;
        // An upstream that never answers must not keep the cache cold either.
        let opened = tokio::time::timeout(idle, self.open(&query, timeout))
            .await
            .unwrap_or(Err(RequestError::Upstream(UpstreamError::Timeout(idle))));
        let mut stream = match opened {
            Ok(s) => s,
            // 429 asks to come back later; any other 4xx is the upstream saying no.
            Err(RequestError::Status(code, msg))
                if code.is_client_error() && code != StatusCode::TOO_MANY_REQUESTS =>
            {
                return Err(Unsupported(msg))
            }
            Err(RequestError::Behind(b)) => return Err(behind(b)),
            Err(RequestError::Status(_, msg)) => return Err(Failed(msg)),
            Err(RequestError::Upstream(e)) => return Err(Failed(e.to_string())),
        };
        // A temporary map, like client-go's temporaryStore: only the complete state
        // reaches the store.
        let mut objects: BTreeMap<Box<str>, Arc<CachedObject>> = BTreeMap::new();
        // What `objects` holds as the byte budget counts it: checked as it grows, so an
        // initial state too large for the budget is given up before all of it is held.
        let mut heap = 0usize;
        let held = self.held.load(Ordering::Relaxed);
        let mut deadline = tokio::time::Instant::now() + idle;
        loop {
            let line = match tokio::time::timeout_at(deadline, stream.next_line()).await {
                Err(_) => {
                    return Err(Unsupported(format!(
                        "no {INITIAL_EVENTS_END} bookmark within {idle:?} of the last object"
                    )))
                }
                Ok(Ok(None)) => {
                    return Err(Unsupported(format!(
                        "the stream ended before the {INITIAL_EVENTS_END} bookmark"
                    )))
                }
                Ok(Err(end)) => return Err(Failed(format!("{end:?}"))),
                Ok(Ok(Some(line))) => line,
            };
            let ev: RawEvent<'_> = serde_json::from_slice(&line)
                .map_err(|e| Failed(format!("event is not JSON: {e}")))?;
            self.stats.events.fetch_add(1, Ordering::Relaxed);
            let parsed = || {
                CachedObject::parse(
                    Bytes::copy_from_slice(ev.object.get().as_bytes()),
                    &self.info.field_labels,
                )
            };
            match ev.kind {
                "ADDED" | "MODIFIED" => {
                    deadline = tokio::time::Instant::now() + idle;
                    match parsed() {
                        Ok(o) => {
                            heap += entry_bytes(&o);
                            if let Some(old) = objects.insert(o.key.clone(), Arc::new(o)) {
                                heap -= entry_bytes(&old);
                            }
                            self.budget
                                .check(held, heap)
                                .map_err(WatchListFailure::OverBudget)?;
                        }
                        // As for a list item: skipped, counted, logged.
                        Err(err) => {
                            self.stats.malformed_objects.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(resource = %self.info.resource, error = %err, "skipping malformed object in watch-list");
                        }
                    }
                }
                "DELETED" => {
                    deadline = tokio::time::Instant::now() + idle;
                    let o = parsed().map_err(|e| {
                        self.stats.malformed_objects.fetch_add(1, Ordering::Relaxed);
                        Failed(format!("malformed DELETED event: {e}"))
                    })?;
                    if let Some(old) = objects.remove(&o.key) {
                        heap -= entry_bytes(&old);
                    }
                }
                "BOOKMARK" => {
                    let b: ListBookmark = serde_json::from_str(ev.object.get())
                        .map_err(|e| Failed(format!("malformed bookmark: {e}")))?;
                    let end = b
                        .metadata
                        .annotations
                        .get(INITIAL_EVENTS_END)
                        .is_some_and(|v| v == "true");
                    if end {
                        let rv = crate::strconv::parse_uint(&b.metadata.resource_version).map_err(
                            |_| {
                                Failed(format!(
                                    "bookmark resourceVersion {:?} is not a number",
                                    b.metadata.resource_version
                                ))
                            },
                        )?;
                        let mut snapshot = Snapshot::default();
                        for (_, o) in objects {
                            snapshot.insert(o);
                        }
                        snapshot.resource_version = rv;
                        return Ok((snapshot, stream));
                    }
                }
                "ERROR" => {
                    let st: Option<ErrorStatus> = serde_json::from_str(ev.object.get()).ok();
                    return Err(match st {
                        // The watch cache did not reach the consistent RV in time.
                        Some(st) if st.is_too_large_resource_version() => {
                            behind(Behind::from_status(&st, stream.endpoint))
                        }
                        Some(st) => Failed(format!("watch error {}: {}", st.code, st.message)),
                        None => Failed(format!("watch error {}", ev.object.get())),
                    });
                }
                other => return Err(Failed(format!("unknown event type {other:?}"))),
            }
        }
    }

    /// Applies one event line: a change, a bookmark, or how the watch ends if this event
    /// ends it.
    fn apply_event(&self, line: &[u8]) -> Applied {
        let decoded = match decode_event(line, &self.info.field_labels) {
            Ok(d) => d,
            Err(e) => {
                if !matches!(e, MalformedEvent::NotJson(_)) {
                    self.stats.events.fetch_add(1, Ordering::Relaxed);
                }
                return Applied::End(WatchEnd::Malformed(e.to_string()));
            }
        };
        self.stats.events.fetch_add(1, Ordering::Relaxed);
        self.stats.note_event();
        match decoded {
            Decoded::Upsert(o) => {
                self.store.apply(Change::Upsert(Arc::new(o)));
                // The change is in; a cache it takes over the budget is dropped whole.
                if let Err(why) = self.commit(self.store.snapshot().heap) {
                    return Applied::End(WatchEnd::OverBudget(why));
                }
                Applied::Change
            }
            Decoded::Delete(o) => {
                self.store.apply(Change::Delete(Arc::new(o)));
                let _ = self.commit(self.store.snapshot().heap);
                Applied::Change
            }
            Decoded::Progress(rv) => {
                self.store.apply(Change::Progress(rv));
                Applied::Bookmark
            }
            Decoded::Expired(message) => Applied::End(WatchEnd::Expired(message)),
            Decoded::Behind(st) => Applied::End(WatchEnd::Behind(Behind::from_status(&st, None))),
            Decoded::Failed { code, message } => Applied::End(WatchEnd::Failed(
                format!("watch error {code}: {message}").into(),
            )),
        }
    }
}

/// What one event line did.
enum Applied {
    /// An object changed.
    Change,
    /// A BOOKMARK moved the resourceVersion.
    Bookmark,
    /// The watch ends.
    End(WatchEnd),
}

/// The endpoint that answered (with several `--server`s).
/// A BOOKMARK's object, with the annotations that may end a watch-list's initial events.
#[derive(Deserialize)]
struct ListBookmark {
    metadata: ListBookmarkMeta,
}

#[derive(Deserialize)]
struct ListBookmarkMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
    #[serde(default)]
    annotations: HashMap<String, String>,
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

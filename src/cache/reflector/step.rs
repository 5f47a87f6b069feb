//! The reflector's decisions, without I/O: what it does next, given what it has just
//! seen (after kube-runtime's `watcher`, whose `step` is a function over an explicit
//! `State` with the API behind a trait).
//!
//! [`Machine::step`] takes an [`Outcome`] (what the upstream answered to the last
//! [`Step`], or how a watch ended) and what the reflector observes of its own side
//! ([`Seen`]: the store's resourceVersion, whether a progress proof is asked for) and
//! returns a [`Transition`]: the [`Action`]s to perform, in order (count, sleep, install
//! the state just read, mark an endpoint behind, …) and the next [`Step`]. The I/O shell,
//! `Reflector::run` in the parent module, performs the steps and the actions; nothing
//! here awaits, reads a clock or draws a random number, so every transition is unit-tested
//! below without a server.
//!
//! Two smaller pure parts beside it: [`on_event`] (what one decoded watch event does to
//! the store, or how it ends the watch) with [`Following`] (a progress watch's bookmark),
//! and [`InitialEvents`] (a watch-list's initial events, up to the bookmark that ends
//! them, and which failures mean "no watch-list here, ever").

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use serde::Deserialize;

use crate::bookmark::INITIAL_EVENTS_END;
use crate::cache::budget::OverBudget;
use crate::cache::events::{Decoded, ErrorStatus, EventTooLarge, MalformedEvent, RawEvent};
use crate::cache::list_page::PageError;
use crate::cache::store::Change;
use crate::model::object::{CachedObject, ObjectError};
use crate::model::snapshot::{entry_bytes, Snapshot};
use crate::upstream::UpstreamError;

/// How long the reflector waits after its own pool refused it: about the 429's
/// `Retry-After`, as a client would. The pool frees a connection as soon as any request
/// ends, and a refusal costs the upstream nothing, so nothing is gained by backing off
/// further (and a cache would stay cold for up to 30 s longer).
pub const POOL_FULL_RETRY: Duration = Duration::from_secs(1);

/// Consistent states older than the cache's, in a row, from a lone `--server` endpoint,
/// after which the upstream is taken to have gone back (a restored or replaced cluster)
/// rather than to lag: a consistent read is never older than one seen before unless the
/// resourceVersions themselves went back. A few, not one, to be sure.
pub const WENT_BACK_AFTER: u32 = 3;

/// The shortest wait after a "behind" answer, whatever its `retryAfterSeconds` says.
const MIN_BEHIND_RETRY: Duration = Duration::from_millis(100);

/// A wait: `base`, multiplied by a factor drawn from `jitter` when it is slept (by the
/// shell: the decisions draw no random numbers, so that tests can check the base).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Delay {
    pub base: Duration,
    /// The factor's range, `lo..hi`.
    pub jitter: (f64, f64),
}

impl Delay {
    /// The delay to sleep: `base` times a factor drawn from `jitter`.
    pub fn jittered(&self) -> Duration {
        use rand::Rng;
        let (lo, hi) = self.jitter;
        self.base.mul_f64(rand::rng().random_range(lo..hi))
    }
}

/// Exponential backoff: 0.8 s doubling to 30 s, with ±50 % jitter, like kube-runtime's
/// default.
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
    const JITTER: (f64, f64) = (0.5, 1.5);

    pub fn reset(&mut self) {
        self.next = Self::INITIAL;
    }

    /// The next delay before jitter: the current step; then the step doubles.
    pub fn next_step(&mut self) -> Delay {
        let base = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        Delay {
            base,
            jitter: Self::JITTER,
        }
    }

    /// The next delay, jittered.
    pub fn next_delay(&mut self) -> Duration {
        self.next_step().jittered()
    }
}

/// Why a list or a watch failed, kept typed so that the reflector can tell its own pool
/// being full (local load: retried soon, without growing the backoff) from the upstream
/// failing (backed off exponentially, logged as a warning).
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// No answer from the upstream, or a refusal by the gateway's own pool.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// A watch (or watch-list) answered with an error status.
    #[error("watch returned {0}")]
    WatchStatus(StatusCode),
    /// A list page answered with an error status; `body` is the start of its body.
    #[error("list returned {status}: {body}")]
    ListStatus { status: StatusCode, body: String },
    /// A list page that does not decode.
    #[error(transparent)]
    Page(#[from] PageError),
    /// The stream broke off (the connection's error, as text: hyper's error is not ours).
    #[error("watch stream broke: {0}")]
    StreamBroke(String),
    /// A line longer than any event may be.
    #[error(transparent)]
    EventTooLarge(#[from] EventTooLarge),
    /// An ERROR event that is neither 410 nor "behind".
    #[error("watch error {code}: {message}")]
    ErrorEvent { code: u16, message: String },
    /// An ERROR event whose object is not a Status.
    #[error("watch error {0}")]
    ErrorEventRaw(String),
    /// A watch-list line that is not a JSON event.
    #[error("event is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// A watch-list DELETED event whose object cannot be read: the state cannot be built.
    #[error("malformed DELETED event: {0}")]
    MalformedDeleted(#[source] ObjectError),
    /// A watch-list BOOKMARK that is not one.
    #[error("malformed bookmark: {0}")]
    MalformedBookmark(#[source] serde_json::Error),
    /// The bookmark ending the initial events without a numeric resourceVersion.
    #[error("bookmark resourceVersion {0:?} is not a number")]
    BookmarkResourceVersion(String),
    /// A watch-list event of a type no apiserver sends.
    #[error("unknown event type {0:?}")]
    UnknownType(String),
}

impl Failure {
    pub fn pool_full(&self) -> bool {
        matches!(self, Failure::Upstream(e) if e.is_pool_full())
    }
}

/// Why a watch stream was cut off by a line the cache cannot use.
#[derive(Debug, thiserror::Error)]
pub enum Malformed {
    #[error(transparent)]
    Event(#[from] MalformedEvent),
    #[error(transparent)]
    TooLarge(#[from] EventTooLarge),
}

/// An upstream endpoint that answered from behind the cache's resourceVersion.
#[derive(Debug, PartialEq)]
pub struct Behind {
    /// Which endpoint (`Served`), to be preferred less for a while.
    pub endpoint: Option<usize>,
    /// The answer's `retryAfterSeconds`, or a second.
    pub retry_after: Duration,
    pub what: String,
}

impl Behind {
    pub fn from_status(st: &ErrorStatus, endpoint: Option<usize>) -> Self {
        Self {
            endpoint,
            retry_after: st.retry_after().unwrap_or(Duration::from_secs(1)),
            what: st.message.clone(),
        }
    }
}

/// Why a request for a watch, a watch-list or a list page got no usable answer.
#[derive(Debug)]
pub enum RequestError {
    /// The upstream answered with this code.
    Status(StatusCode),
    Behind(Behind),
    /// No answer (connection, credentials, a refusal at the connection bound).
    Upstream(UpstreamError),
}

/// How one watch ended.
#[derive(Debug)]
pub enum WatchEnd {
    /// The stream ended normally (its timeout, or the upstream closed it): resume from the
    /// last RV. Carries which of the two, for the log line.
    Closed(String),
    /// 410 Expired (or Gone): the RV is compacted; relist. Carries the upstream's message.
    Expired(String),
    /// Something broke; resume from the last RV after a backoff.
    Failed(Failure),
    /// An event could not be understood: relist so that nothing is lost.
    Malformed(Malformed),
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

/// How a watch that could not be opened ends: 410 relists, "behind" retries, anything
/// else is a failure to back off from.
pub fn watch_refused(err: RequestError) -> WatchEnd {
    match err {
        RequestError::Status(StatusCode::GONE) => WatchEnd::Expired("HTTP 410 Gone".into()),
        RequestError::Behind(b) => WatchEnd::Behind(b),
        RequestError::Status(code) => WatchEnd::Failed(Failure::WatchStatus(code)),
        RequestError::Upstream(e) => WatchEnd::Failed(e.into()),
    }
}

/// Why the upstream is taken not to do watch-list at all.
#[derive(Debug, thiserror::Error)]
pub enum NoWatchList {
    /// A 4xx answer: before 1.27 `resourceVersionMatch` on a watch is Invalid; 1.27–1.31
    /// without the `WatchList` gate reject `sendInitialEvents`.
    #[error("watch returned {0}")]
    Refused(StatusCode),
    /// The stream ended without the bookmark: a plain watch, the parameter ignored.
    #[error("the stream ended before the {INITIAL_EVENTS_END} bookmark")]
    EndedBeforeBookmark,
    /// No bookmark followed the last object in time: the same, on a stream that stays open.
    #[error("no {INITIAL_EVENTS_END} bookmark within {0:?} of the last object")]
    NoBookmarkWithin(Duration),
}

/// Why a watch-list attempt produced no state.
#[derive(Debug, thiserror::Error)]
pub enum WatchListFailure {
    /// The upstream does not do watch-list: never try it again.
    #[error(transparent)]
    Unsupported(NoWatchList),
    /// A transient failure: a paged list this time, watch-list again next time.
    #[error(transparent)]
    Failed(Failure),
    /// A lagging endpoint: the same watch-list again, not a paged list.
    #[error("the upstream is behind the cache ({})", .0.what)]
    Behind(Behind),
    /// The initial events outgrew the byte budget.
    #[error(transparent)]
    OverBudget(OverBudget),
}

/// How a watch-list that could not be opened fails: 429 asks to come back later; any
/// other 4xx is the upstream saying no.
pub fn watch_list_refused(err: RequestError) -> WatchListFailure {
    match err {
        RequestError::Status(code)
            if code.is_client_error() && code != StatusCode::TOO_MANY_REQUESTS =>
        {
            WatchListFailure::Unsupported(NoWatchList::Refused(code))
        }
        RequestError::Behind(b) => WatchListFailure::Behind(b),
        RequestError::Status(code) => WatchListFailure::Failed(Failure::WatchStatus(code)),
        RequestError::Upstream(e) => WatchListFailure::Failed(e.into()),
    }
}

/// How a stream that broke off mid-way ends the watch: a line too long to be an event is
/// malformed (relist); a connection that broke is a failure (resume after a backoff).
pub fn stream_broke(f: Failure) -> WatchEnd {
    match f {
        Failure::EventTooLarge(e) => WatchEnd::Malformed(e.into()),
        f => WatchEnd::Failed(f),
    }
}

/// Why a paged list produced no state.
#[derive(Debug)]
pub enum ListError {
    /// A lagging endpoint: try again (elsewhere), never a relist from stale data.
    Behind(Behind),
    /// The upstream failed or sent garbage: retry after a backoff.
    Failed(Failure),
    /// The pages read so far outgrow the byte budget.
    OverBudget(OverBudget),
}

/// Which watch the reflector opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchKind {
    /// The ordinary watch: 5–10 minutes, like client-go's.
    Long,
    /// A short watch for a progress proof: kube-apiserver sends a watch that allows
    /// bookmarks a BOOKMARK 2 s before its deadline (`cacheWatcher.nextBookmarkTime`), at
    /// its current resourceVersion and after every event it sent before; with
    /// `PROGRESS_WATCH_TIMEOUT` (4 s) that bookmark comes 1 to 3 s after the watch opened
    /// (the cacher's bookmark timer ticks each second, its buckets are whole seconds, so
    /// up to a second early; never sooner than a second: `cache::demand`).
    Progress,
}

/// Why a state is being built: logged once it is in place, so that a relist is one line
/// with its reason (start-up has its two progress lines instead).
#[derive(Debug, Clone, PartialEq)]
pub enum SyncCause {
    /// The first state of this reflector (or of a cache rebuilt for another cluster).
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
pub enum WatchListSupport {
    /// Try it (mode `auto`, nothing against it seen yet).
    Try,
    /// Never try it: mode `off`, or the upstream rejected or ignored it.
    No,
}

/// What follows a check that the upstream is still the cluster the cache was built from.
#[derive(Debug, Clone, PartialEq)]
pub enum After {
    /// The stream ended normally: resume (`reason`: how it ended, for the log line).
    Resume(String),
    /// The watch expired (the upstream's message): relist.
    Relist(String),
    /// The watch failed and the backoff has passed: watch again.
    Rewatch,
}

/// The state machine's states (see the parent module's docs).
#[derive(Debug)]
pub enum Step<S> {
    /// Resume where the previous run's cache was (the state file's resourceVersion): read
    /// the state exactly at it with a paged list, then watch from it, which brings every
    /// change since into the history. Only as the first step, and only if the upstream is
    /// not known to be another cluster than the file's (the shell asks `cache::identity`
    /// first: [`Outcome::BackfillRefused`]); any failure falls back to [`Step::Sync`].
    Backfill(u64),
    /// Build a new state: the shell marks the demands it answers, then asks [`Machine::step`]
    /// which way ([`Outcome::SyncBegun`]).
    Sync(SyncCause),
    /// Read the state with a watch-list.
    WatchList(SyncCause),
    /// Read the state with a paged list.
    PagedList(SyncCause),
    /// Open a watch from this resourceVersion.
    Watch(u64, WatchKind),
    /// Keep reading an open watch (the watch-list's stream after its initial events).
    Follow(S),
    /// Check the upstream's identity, then go on as `After` says.
    Verify(After),
    /// The resource does not fit the byte budget: the reflector stops.
    Dropped(OverBudget),
}

/// Which request read a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    WatchList,
    List,
    /// An Exact paged list at a resourceVersion of the previous run ([`Step::Backfill`]):
    /// a past state, not a consistent one.
    Backfill,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::WatchList => "watch-list",
            Via::List => "list",
            Via::Backfill => "backfill",
        }
    }
}

/// A complete state the upstream sent (held by the shell until [`Action::Install`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    pub resource_version: u64,
    /// The endpoint that served it.
    pub endpoint: Option<usize>,
}

/// What the last step brought.
#[derive(Debug)]
pub enum Outcome<S> {
    /// [`Step::Sync`]'s bookkeeping is done.
    SyncBegun(SyncCause),
    /// [`Step::WatchList`]'s answer: the state and the stream that continues it.
    WatchListed(SyncCause, Result<(Read, S), WatchListFailure>),
    /// [`Step::PagedList`]'s answer.
    Listed(SyncCause, Result<Read, ListError>),
    /// [`Step::Backfill`]'s answer (the resourceVersion it asked for, and the state).
    Backfilled(u64, Result<Read, ListError>),
    /// [`Step::Backfill`] read nothing: the upstream is another cluster than the one the
    /// state file's resourceVersion (the one given) belongs to (`cache::identity`).
    BackfillRefused(u64),
    /// How [`Step::Watch`] or [`Step::Follow`] ended.
    WatchEnded(WatchEnd),
    /// [`Step::Verify`]'s answer: whether the upstream is the same cluster.
    Verified(After, bool),
    /// [`Action::Install`] found that the state does not fit the byte budget.
    InstallRefused(OverBudget),
}

/// What the reflector sees of its own side when it decides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    /// The store's resourceVersion: where a watch resumes from.
    pub store_rv: u64,
    /// Whether consistent reads wait for a progress proof.
    pub progress_pending: bool,
}

/// A counter of `ReflectorStats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Errors,
    WatchRestarts,
    RelistsAfterExpired,
    MalformedObjects,
    WatchLists,
    WatchListFallbacks,
    Behind,
    ProgressWatches,
    /// A backfill installed its state.
    Backfills,
    /// A backfill failed and the first sync was an ordinary one.
    BackfillFallbacks,
    /// No backfill: the upstream is another cluster than the state file's.
    BackfillsOtherCluster,
}

/// Why the reflector sleeps (for its log line).
#[derive(Debug)]
pub enum Wait {
    /// A list failed; `first`: the reflector's first list.
    ListFailed { error: Failure, first: bool },
    /// A watch failed.
    WatchFailed(Failure),
    /// An event could not be understood.
    Malformed,
    /// An endpoint answered from behind the cache.
    Behind {
        endpoint: Option<usize>,
        what: String,
    },
}

impl Wait {
    /// Whether the wait is the upstream's doing (a warning) rather than the gateway's own
    /// load (info).
    pub fn upstreams_fault(&self) -> bool {
        match self {
            Wait::ListFailed { error, .. } | Wait::WatchFailed(error) => !error.pool_full(),
            Wait::Malformed | Wait::Behind { .. } => true,
        }
    }
}

/// What the shell does, in order, before it takes the next step.
#[derive(Debug)]
pub enum Action {
    Count(Counter),
    /// Prefer the other endpoints over this one for a while.
    MarkBehind(usize),
    /// Sleep (marked as backing off: no re-sync request is answered meanwhile).
    Sleep(Delay, Wait),
    /// Replace the store's state with the one just read. If it does not fit the byte
    /// budget, the shell reports [`Outcome::InstallRefused`] instead of going on.
    /// (`cause`: why the state was read, for its log line.)
    Install {
        via: Via,
        cause: SyncCause,
    },
    /// The lone upstream's consistent states went back [`WENT_BACK_AFTER`] times in a row:
    /// tell the registry, which rebuilds every cache.
    WentBack {
        upstream: u64,
        cache: u64,
        times: u32,
    },
    /// Watch-list is given up: for good (`for_good`) or for this sync.
    WatchListFellBack {
        why: WatchListFailure,
        for_good: bool,
    },
    /// A watch ended and resumes from `rv` (`reason`: how it ended).
    Resuming {
        reason: String,
        rv: u64,
    },
    /// A progress watch ended and an ordinary one resumes from `rv`.
    ProgressEnded {
        rv: u64,
    },
    /// The backfill from `from` failed: the first sync is an ordinary one. `expired`: the
    /// upstream no longer has that resourceVersion (410), the expected way to fail.
    BackfillFellBack {
        from: u64,
        why: ListError,
        expired: bool,
    },
    /// The state file's `from` is another cluster's: the first sync is an ordinary one.
    BackfillRefused {
        from: u64,
    },
}

/// The actions to perform and the step after them.
#[derive(Debug)]
pub struct Transition<S> {
    pub actions: Vec<Action>,
    pub next: Step<S>,
}

impl<S> Transition<S> {
    fn to(next: Step<S>) -> Self {
        Self {
            actions: Vec::new(),
            next,
        }
    }

    fn with(actions: Vec<Action>, next: Step<S>) -> Self {
        Self { actions, next }
    }
}

/// The state the decisions carry from one step to the next.
#[derive(Debug)]
pub struct Machine {
    backoff: Backoff,
    watch_list: WatchListSupport,
    /// Consistent states older than the cache's, in a row (see [`Machine::older`]).
    older_in_a_row: u32,
    /// Whether the upstream is one endpoint (only then can "older" mean "went back").
    lone_endpoint: bool,
}

impl Machine {
    pub fn new(watch_list: WatchListSupport, endpoints: usize) -> Self {
        Self {
            backoff: Backoff::default(),
            watch_list,
            older_in_a_row: 0,
            lone_endpoint: endpoints == 1,
        }
    }

    /// The first step: a backfill from `resume` (the resourceVersion the previous run's
    /// cache had reached, from the state file), or an ordinary sync.
    pub fn start<S>(resume: Option<u64>) -> Step<S> {
        match resume {
            Some(rv) => Step::Backfill(rv),
            None => Step::Sync(SyncCause::Start),
        }
    }

    #[cfg(test)]
    pub fn watch_list_support(&self) -> WatchListSupport {
        self.watch_list
    }

    /// The transition after `outcome`.
    pub fn step<S>(&mut self, outcome: Outcome<S>, seen: Seen) -> Transition<S> {
        match outcome {
            Outcome::SyncBegun(cause) => Transition::to(match self.watch_list {
                WatchListSupport::Try => Step::WatchList(cause),
                WatchListSupport::No => Step::PagedList(cause),
            }),
            Outcome::WatchListed(cause, Ok((read, stream))) => {
                if let Some(t) = self.older(read, seen, Step::Sync(cause.clone())) {
                    // The stream (in `stream`) is dropped here, before the wait.
                    return t;
                }
                self.backoff.reset();
                Transition::with(
                    vec![
                        Action::Count(Counter::WatchLists),
                        Action::Install {
                            via: Via::WatchList,
                            cause,
                        },
                    ],
                    Step::Follow(stream),
                )
            }
            Outcome::WatchListed(cause, Err(failure)) => match failure {
                WatchListFailure::Behind(b) => self.behind(b, Step::Sync(cause)),
                WatchListFailure::OverBudget(why) => Transition::to(Step::Dropped(why)),
                why @ WatchListFailure::Unsupported(_) => {
                    self.watch_list = WatchListSupport::No;
                    Transition::with(
                        vec![
                            Action::Count(Counter::WatchListFallbacks),
                            Action::WatchListFellBack {
                                why,
                                for_good: true,
                            },
                        ],
                        Step::PagedList(cause),
                    )
                }
                why @ WatchListFailure::Failed(_) => Transition::with(
                    vec![
                        Action::Count(Counter::WatchListFallbacks),
                        Action::WatchListFellBack {
                            why,
                            for_good: false,
                        },
                    ],
                    Step::PagedList(cause),
                ),
            },
            Outcome::Listed(cause, Ok(read)) => {
                if let Some(t) = self.older(read, seen, Step::Sync(cause.clone())) {
                    return t;
                }
                self.backoff.reset();
                Transition::with(
                    vec![Action::Install {
                        via: Via::List,
                        cause,
                    }],
                    Step::Watch(read.resource_version, WatchKind::Long),
                )
            }
            Outcome::Listed(cause, Err(err)) => match err {
                ListError::Behind(b) => self.behind(b, Step::Sync(cause)),
                ListError::OverBudget(why) => Transition::to(Step::Dropped(why)),
                ListError::Failed(error) => {
                    let delay = self.retry_delay(&error);
                    let first = cause == SyncCause::Start;
                    Transition::with(
                        vec![
                            Action::Count(Counter::Errors),
                            Action::Sleep(delay, Wait::ListFailed { error, first }),
                        ],
                        Step::Sync(cause),
                    )
                }
            },
            Outcome::Backfilled(from, got) => self.backfilled(from, got),
            // The state at `from` in this cluster is not the one the previous run's clients
            // saw: what a client resumes from must be the cache's own history or a 410.
            Outcome::BackfillRefused(from) => Transition::with(
                vec![
                    Action::Count(Counter::BackfillsOtherCluster),
                    Action::BackfillRefused { from },
                ],
                Step::Sync(SyncCause::Start),
            ),
            Outcome::InstallRefused(why) => Transition::to(Step::Dropped(why)),
            Outcome::WatchEnded(end) => self.watch_ended(end, seen),
            Outcome::Verified(_, false) => {
                // Another cluster: the registry was told and rebuilds every cache; this
                // reflector starts over rather than mix two clusters' objects.
                Transition::to(Step::Sync(SyncCause::Start))
            }
            Outcome::Verified(After::Resume(reason), true) => {
                self.backoff.reset();
                let rv = seen.store_rv;
                if seen.progress_pending {
                    return Transition::with(
                        vec![Action::Count(Counter::ProgressWatches)],
                        Step::Watch(rv, WatchKind::Progress),
                    );
                }
                Transition::with(
                    vec![Action::Resuming { reason, rv }],
                    Step::Watch(rv, WatchKind::Long),
                )
            }
            Outcome::Verified(After::Relist(msg), true) => {
                Transition::to(Step::Sync(SyncCause::Relist {
                    reason: format!("the watch expired ({msg})"),
                    anomaly: false,
                }))
            }
            Outcome::Verified(After::Rewatch, true) => {
                Transition::to(Step::Watch(seen.store_rv, WatchKind::Long))
            }
        }
    }

    /// What follows a backfill. Its state is installed and the watch resumes from its
    /// resourceVersion: the watch brings every change since into the history. Whatever
    /// else happened (410: the upstream compacted that resourceVersion; a lagging endpoint;
    /// any failure), the first sync is an ordinary one at once, as without a backfill, and
    /// that sync's own failures back off as usual. No wait after a failed backfill: the
    /// sync that follows is the request the cache would have sent anyway, so the upstream
    /// sees at most one request more, and a cold cache is not kept cold longer.
    fn backfilled<S>(&mut self, from: u64, got: Result<Read, ListError>) -> Transition<S> {
        match got {
            Ok(read) => {
                self.backoff.reset();
                Transition::with(
                    vec![
                        Action::Count(Counter::Backfills),
                        Action::Install {
                            via: Via::Backfill,
                            cause: SyncCause::Start,
                        },
                    ],
                    Step::Watch(read.resource_version, WatchKind::Long),
                )
            }
            Err(ListError::OverBudget(why)) => Transition::to(Step::Dropped(why)),
            Err(why) => {
                let expired = matches!(
                    &why,
                    ListError::Failed(Failure::ListStatus { status, .. }) if *status == StatusCode::GONE
                );
                let mut actions = vec![Action::Count(Counter::BackfillFallbacks)];
                if let ListError::Behind(Behind {
                    endpoint: Some(i), ..
                }) = &why
                {
                    // The ordinary sync is a consistent read: let it prefer the others.
                    actions.push(Action::MarkBehind(*i));
                }
                actions.push(Action::BackfillFellBack { from, why, expired });
                Transition::with(actions, Step::Sync(SyncCause::Start))
            }
        }
    }

    /// What follows the end of a watch.
    fn watch_ended<S>(&mut self, end: WatchEnd, seen: Seen) -> Transition<S> {
        let rv = seen.store_rv;
        match end {
            // A stream that ended may end because the apiserver behind it was replaced:
            // resuming would mix two clusters' objects.
            WatchEnd::Closed(reason) => Transition::with(
                vec![Action::Count(Counter::WatchRestarts)],
                Step::Verify(After::Resume(reason)),
            ),
            WatchEnd::Progress => Transition::with(
                vec![Action::Count(Counter::ProgressWatches)],
                Step::Watch(rv, WatchKind::Progress),
            ),
            WatchEnd::ProgressEnded if seen.progress_pending => Transition::with(
                vec![Action::Count(Counter::ProgressWatches)],
                Step::Watch(rv, WatchKind::Progress),
            ),
            WatchEnd::ProgressEnded => Transition::with(
                vec![Action::ProgressEnded { rv }],
                Step::Watch(rv, WatchKind::Long),
            ),
            // Another cluster answers 410 to the old one's resourceVersions too; its state
            // must not be told to the watchers as the old one's next events.
            WatchEnd::Expired(msg) => Transition::with(
                vec![Action::Count(Counter::RelistsAfterExpired)],
                Step::Verify(After::Relist(msg)),
            ),
            WatchEnd::Resync => Transition::to(Step::Sync(SyncCause::Consistent)),
            WatchEnd::Malformed(why) => Transition::with(
                vec![
                    Action::Count(Counter::MalformedObjects),
                    Action::Sleep(self.backoff.next_step(), Wait::Malformed),
                ],
                Step::Sync(SyncCause::Relist {
                    reason: format!("a malformed watch event ({why})"),
                    anomaly: true,
                }),
            ),
            WatchEnd::OverBudget(why) => Transition::to(Step::Dropped(why)),
            WatchEnd::Failed(error) => {
                let delay = self.retry_delay(&error);
                Transition::with(
                    vec![
                        Action::Count(Counter::Errors),
                        Action::Sleep(delay, Wait::WatchFailed(error)),
                    ],
                    Step::Verify(After::Rewatch),
                )
            }
            WatchEnd::Behind(b) => self.behind(b, Step::Watch(rv, WatchKind::Long)),
        }
    }

    /// The wait before retrying after `failure`: about a second when the gateway's own
    /// pool refused (the backoff does not grow), else the next backoff step.
    fn retry_delay(&mut self, failure: &Failure) -> Delay {
        if failure.pool_full() {
            Delay {
                base: POOL_FULL_RETRY,
                jitter: (0.5, 1.5),
            }
        } else {
            self.backoff.next_step()
        }
    }

    /// After an answer from an endpoint behind the cache: prefer the others for a while,
    /// wait as the answer asked (with jitter: reflectors of every resource may get it at
    /// once), and try `next` again. Never a relist, and the backoff does not grow.
    fn behind<S>(&mut self, b: Behind, next: Step<S>) -> Transition<S> {
        let mut actions = vec![Action::Count(Counter::Behind)];
        if let Some(i) = b.endpoint {
            actions.push(Action::MarkBehind(i));
        }
        let delay = Delay {
            base: b.retry_after.max(MIN_BEHIND_RETRY),
            jitter: (1.0, 1.5),
        };
        actions.push(Action::Sleep(
            delay,
            Wait::Behind {
                endpoint: b.endpoint,
                what: b.what,
            },
        ));
        Transition::with(actions, next)
    }

    /// A new state older than the one the cache already has can only come from a lagging
    /// endpoint (a consistent read is never older than what was seen before): installing
    /// it would end every downstream watch, so it is a "behind" answer instead (`None`:
    /// install it). With one endpoint, the same answer [`WENT_BACK_AFTER`] times in a row
    /// means the upstream went back.
    fn older<S>(&mut self, read: Read, seen: Seen, retry: Step<S>) -> Option<Transition<S>> {
        let have = seen.store_rv;
        let older = have > 0 && read.resource_version < have;
        let mut went_back = None;
        if !older {
            self.older_in_a_row = 0;
            return None;
        } else if self.lone_endpoint {
            self.older_in_a_row += 1;
            if self.older_in_a_row >= WENT_BACK_AFTER {
                went_back = Some(Action::WentBack {
                    upstream: read.resource_version,
                    cache: have,
                    times: self.older_in_a_row,
                });
            }
        }
        let behind = Behind {
            endpoint: read.endpoint,
            retry_after: Duration::from_secs(1),
            what: format!(
                "its state is at resourceVersion {}, the cache's at {have}",
                read.resource_version
            ),
        };
        let mut t = self.behind(behind, retry);
        if let Some(a) = went_back {
            t.actions.insert(0, a);
        }
        Some(t)
    }
}

/// What one decoded watch event does.
#[derive(Debug)]
pub enum Effect {
    /// Apply this change to the store (an object, or a bookmark's progress).
    Apply(Change),
    /// The watch ends.
    End(WatchEnd),
}

/// What a decoded watch event does: objects and bookmarks go to the store (a bookmark
/// only advances the resourceVersion); ERROR events end the watch as their Status says.
pub fn on_event(decoded: Decoded) -> Effect {
    match decoded {
        Decoded::Upsert(o) => Effect::Apply(Change::Upsert(Arc::new(o))),
        Decoded::Delete(o) => Effect::Apply(Change::Delete(Arc::new(o))),
        Decoded::Progress(rv) => Effect::Apply(Change::Progress(rv)),
        Decoded::Expired(message) => Effect::End(WatchEnd::Expired(message)),
        Decoded::Behind(st) => Effect::End(WatchEnd::Behind(Behind::from_status(&st, None))),
        Decoded::Failed { code, message } => {
            Effect::End(WatchEnd::Failed(Failure::ErrorEvent { code, message }))
        }
    }
}

/// An open watch as the decisions see it: whether it is a progress watch and whether its
/// bookmark came.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Following {
    pub progress: bool,
    pub bookmarked: bool,
}

impl Following {
    /// A progress watch whose bookmark has not come yet: a new progress request waits
    /// for it rather than opening another watch.
    pub fn awaiting_bookmark(&self) -> bool {
        self.progress && !self.bookmarked
    }

    /// A bookmark came: on a progress watch, a progress proof still asked for after it
    /// opens the next short watch (its probe may have been answered after the bookmark
    /// was sent).
    pub fn bookmark(&mut self, progress_pending: bool) -> Option<WatchEnd> {
        if !self.progress {
            return None;
        }
        self.bookmarked = true;
        progress_pending.then_some(WatchEnd::Progress)
    }

    /// How the stream's normal end ends the watch (`reason`: how it ended, for an
    /// ordinary watch).
    pub fn ended(&self, reason: impl FnOnce() -> String) -> WatchEnd {
        if self.progress {
            WatchEnd::ProgressEnded
        } else {
            WatchEnd::Closed(reason())
        }
    }
}

/// What one line of a watch-list's initial events did.
#[derive(Debug)]
pub enum Initial {
    /// An object was added or changed (the idle deadline restarts).
    Added,
    /// An object was removed (the idle deadline restarts).
    Removed,
    /// An object that cannot be read was skipped, as a list item would be.
    Skipped(ObjectError),
    /// A bookmark that does not end the initial events.
    Bookmark,
    /// The bookmark ending the initial events: the complete state.
    Done(Snapshot),
}

/// A watch-list's initial events, gathered into a temporary map like client-go's
/// temporaryStore: only the complete state reaches the store.
pub struct InitialEvents<'a> {
    objects: BTreeMap<Box<str>, Arc<CachedObject>>,
    /// What `objects` holds as the byte budget counts it.
    heap: usize,
    field_labels: &'a [(&'static str, &'static str)],
    /// The endpoint serving the stream, for a "behind" ERROR.
    endpoint: Option<usize>,
}

impl<'a> InitialEvents<'a> {
    pub fn new(field_labels: &'a [(&'static str, &'static str)], endpoint: Option<usize>) -> Self {
        Self {
            objects: BTreeMap::new(),
            heap: 0,
            field_labels,
            endpoint,
        }
    }

    /// What the gathered objects take of the byte budget.
    pub fn heap(&self) -> usize {
        self.heap
    }

    /// Takes one line of the stream. Events other than ADDED before the bookmark are
    /// applied to the state being built, as client-go applies them to its temporary store.
    pub fn line(&mut self, line: &[u8]) -> Result<Initial, WatchListFailure> {
        use WatchListFailure::Failed;
        let ev: RawEvent<'_> =
            serde_json::from_slice(line).map_err(|e| Failed(Failure::NotJson(e)))?;
        let parsed = || {
            CachedObject::parse(
                Bytes::copy_from_slice(ev.object.get().as_bytes()),
                self.field_labels,
            )
        };
        match ev.kind {
            "ADDED" | "MODIFIED" => match parsed() {
                Ok(o) => {
                    self.heap += entry_bytes(&o);
                    if let Some(old) = self.objects.insert(o.key.clone(), Arc::new(o)) {
                        self.heap -= entry_bytes(&old);
                    }
                    Ok(Initial::Added)
                }
                Err(e) => Ok(Initial::Skipped(e)),
            },
            "DELETED" => {
                let o = parsed().map_err(|e| Failed(Failure::MalformedDeleted(e)))?;
                if let Some(old) = self.objects.remove(&o.key) {
                    self.heap -= entry_bytes(&old);
                }
                Ok(Initial::Removed)
            }
            "BOOKMARK" => {
                let b: ListBookmark = serde_json::from_str(ev.object.get())
                    .map_err(|e| Failed(Failure::MalformedBookmark(e)))?;
                let end = b
                    .metadata
                    .annotations
                    .get(INITIAL_EVENTS_END)
                    .is_some_and(|v| v == "true");
                if !end {
                    return Ok(Initial::Bookmark);
                }
                let rv =
                    crate::strconv::parse_uint(&b.metadata.resource_version).map_err(|_| {
                        Failed(Failure::BookmarkResourceVersion(
                            b.metadata.resource_version.clone(),
                        ))
                    })?;
                let mut snapshot = Snapshot::default();
                for (_, o) in std::mem::take(&mut self.objects) {
                    snapshot.insert(o);
                }
                snapshot.resource_version = rv;
                Ok(Initial::Done(snapshot))
            }
            "ERROR" => {
                let st: Option<ErrorStatus> = serde_json::from_str(ev.object.get()).ok();
                Err(match st {
                    // The watch cache did not reach the consistent RV in time.
                    Some(st) if st.is_too_large_resource_version() => {
                        WatchListFailure::Behind(Behind::from_status(&st, self.endpoint))
                    }
                    Some(st) => Failed(Failure::ErrorEvent {
                        code: st.code,
                        message: st.message,
                    }),
                    None => Failed(Failure::ErrorEventRaw(ev.object.get().to_string())),
                })
            }
            other => Err(Failed(Failure::UnknownType(other.to_string()))),
        }
    }

    /// The stream ended normally before the bookmark: the upstream streamed a plain watch.
    pub fn ended() -> WatchListFailure {
        WatchListFailure::Unsupported(NoWatchList::EndedBeforeBookmark)
    }

    /// No object event for `idle` and no bookmark: the same, on a stream left open.
    pub fn idle(idle: Duration) -> WatchListFailure {
        WatchListFailure::Unsupported(NoWatchList::NoBookmarkWithin(idle))
    }
}

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
mod tests;

//! The hub of one resource type: its event history and its watchers.
//!
//! Every change the reflector applies becomes one [`Event`] appended to the history and
//! dispatched, under one lock, to the live watchers the index names. Each live watcher
//! has a small bounded queue. A watcher whose queue is full is not waited for: it leaves
//! live dispatch, remembers where (`lag_seq`), and reads the shared history at its own
//! pace until it has caught up, when it rejoins under the same lock (so nothing is missed
//! or repeated). Only when the history no longer holds its next event does its stream
//! end. A slow client therefore costs nobody else anything, and memory stays bounded by
//! the history's window and byte budget plus `QUEUE_LEN` events per watcher.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use rustc_hash::FxHashMap;
use tokio::time::Instant;

use super::encoding::BookmarkShape;
use super::event::{Change, EncodedBytes, Encoder, Event};
use super::filter::{WatchFilter, NAME};
use super::index::{Index, WatcherId};
use super::queue::{self, BookmarkSent, Delivered, Offered, SendError};
use super::schedule::{self, Schedule, Slotted, Ticker};
use super::stats::{EndReason, FanoutStats};
use super::WatchConfig;
use crate::model::object::CachedObject;
use crate::model::snapshot::Snapshot;

/// Events a live watcher may have queued before it is switched to reading the history.
/// Small on purpose: the history already holds every event, so a longer queue would only
/// duplicate it per watcher.
pub const QUEUE_LEN: usize = 64;

/// One queued event: its resourceVersion and its shared wire line.
use super::queue::Item;

const NO_LAG: u64 = u64::MAX;

impl Slotted for WatcherShared {
    fn id(&self) -> WatcherId {
        self.id
    }
    fn slot(&self) -> &AtomicU64 {
        &self.bookmark_slot
    }
}

/// The part of a watcher the hub shares with its response body.
#[derive(Debug)]
pub struct WatcherShared {
    pub id: WatcherId,
    pub filter: WatchFilter,
    /// How its events are written (the representation its Accept header negotiated).
    pub encoding: super::encoding::WatchEncoding,
    /// The history position of the first event it missed when its queue overflowed.
    lag_seq: AtomicU64,
    /// Its periodic bookmark is due and the hub's tick left it to the body (see
    /// `watch::bookmarks`): the body sends it when it is next idle and caught up.
    pub bookmark_due: AtomicBool,
    /// Its slot in the hub's bookmark schedule (`schedule::UNSCHEDULED`: none); written
    /// under the hub's lock.
    pub(super) bookmark_slot: AtomicU64,
    /// Why the hub closed its queue, when it was not for lagging.
    closed_by: AtomicU8,
    /// The history's epoch when it registered: a restart starts a new epoch, and nothing
    /// from an older one may continue on the new history (see [`Hub::restart`]).
    epoch: u64,
}

impl WatcherShared {
    /// A JSON watcher of everything, registered nowhere (for the schedule's tests).
    #[cfg(test)]
    pub fn for_tests(id: WatcherId) -> Self {
        Self {
            id,
            filter: WatchFilter::default(),
            encoding: super::encoding::WatchEncoding::Json,
            lag_seq: AtomicU64::new(NO_LAG),
            bookmark_due: AtomicBool::new(false),
            bookmark_slot: AtomicU64::new(schedule::UNSCHEDULED),
            closed_by: AtomicU8::new(0),
            epoch: 0,
        }
    }

    /// Where to resume in the history after the queue was closed for lagging.
    pub fn take_lag(&self) -> Option<u64> {
        let s = self.lag_seq.swap(NO_LAG, Ordering::AcqRel);
        (s != NO_LAG).then_some(s)
    }

    /// Why the hub closed this watcher's queue (when not for lagging).
    pub fn closed_reason(&self) -> EndReason {
        match self.closed_by.load(Ordering::Acquire) {
            1 => EndReason::Relist,
            2 => EndReason::UpstreamReset,
            3 => EndReason::Inconsistent,
            _ => EndReason::Shutdown,
        }
    }
}

struct Entry {
    key: super::filter::IndexKey,
    shared: Arc<WatcherShared>,
    tx: queue::Sender<Item>,
}

/// Where a new watcher starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Synthetic ADDED events for the current state, then the changes after it.
    Initial,
    /// The changes after this resourceVersion.
    After(u64),
}

/// One published event, whose express-lane writes are still to be done.
pub struct Published {
    rv: u64,
    started: std::time::Instant,
    lane: Vec<queue::Handoff>,
}

impl Published {
    /// Writes the event to the idle connections of the express lane (or queues it for
    /// those that are not idle any more), then publishes the new head. Run it once the
    /// hub's lock is released, before the next event is published: only the store's
    /// writer publishes, one event after another, so a watcher's events stay in order.
    pub fn deliver(mut self, hub: &Hub) {
        // Connection by connection (HTTP/2 streams share one): a connection's task,
        // woken by its first frame, finds all of them handed over when it runs and writes
        // them at once, and the client reads them while the dispatch writes the next
        // connection's. In the index's order every connection would wait for the whole
        // fan-out, and its task would write it in pieces (docs/benchmarks.md).
        self.lane.sort_unstable_by_key(|h| h.group());
        let (mut written, mut bytes) = (0u64, 0u64);
        for h in self.lane {
            let len = h.line_len() as u64;
            if h.deliver() == Delivered::Written {
                written += 1;
                bytes += len;
            }
        }
        if written > 0 {
            // No body saw these: count them here.
            hub.stats.delivered.fetch_add(written, Ordering::Relaxed);
            hub.stats
                .written_directly
                .fetch_add(written, Ordering::Relaxed);
            hub.stats.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        // After every write: a bookmark carrying the head never runs ahead of an event
        // still on its way to the connection.
        hub.head_rv.store(self.rv, Ordering::Release);
        hub.dispatch_seconds
            .record(self.started.elapsed().as_secs_f64());
    }
}

/// A watcher's starting snapshot while its body sends it.
///
/// A body is only polled when its connection can take bytes, so a client that stops
/// reading in the middle of its initial state would pin that version of the state (every
/// object changed since, however much churn follows) for as long as it stalls, and its
/// body could not let go. The hub holds a `Weak` to each lease and takes the snapshot back
/// from a watcher that has asked for no batch for `stall_timeout` ([`Hub::sweep`]). The
/// body finds it gone when (if ever) it is polled again, and its stream ends.
#[derive(Debug)]
pub struct SnapshotLease {
    state: Mutex<LeaseState>,
}

#[derive(Debug)]
struct LeaseState {
    /// `None` once the hub took it back.
    snap: Option<Arc<Snapshot>>,
    /// When the body last took a batch.
    progress_at: Instant,
}

impl SnapshotLease {
    fn new(snap: Arc<Snapshot>) -> Self {
        Self {
            state: Mutex::new(LeaseState {
                snap: Some(snap),
                progress_at: Instant::now(),
            }),
        }
    }

    /// The snapshot for the next batch (asking is the body's progress); `None` once the
    /// hub has taken it back.
    pub fn step(&self) -> Option<Arc<Snapshot>> {
        let mut st = self.state.lock().expect("lease lock");
        st.progress_at = Instant::now();
        st.snap.clone()
    }

    /// Whether the hub took the snapshot back (and counted the watcher's end).
    pub fn released(&self) -> bool {
        self.state.lock().expect("lease lock").snap.is_none()
    }

    /// The body ends: gives the snapshot up. `true` when this call did it, so the body
    /// counts its end; `false` when the hub had taken it back first and counted the end
    /// already (as `slow`). One of the two wins, under the lease's lock, so each watch is
    /// counted once.
    pub fn finish(&self) -> bool {
        self.state.lock().expect("lease lock").snap.take().is_some()
    }

    /// Takes the snapshot back if the body has asked for nothing since `stalled_before`.
    fn release_if_stalled(&self, stalled_before: Instant) -> bool {
        let mut st = self.state.lock().expect("lease lock");
        if st.snap.is_some() && st.progress_at <= stalled_before {
            st.snap = None;
            return true;
        }
        false
    }
}

/// A registered watcher.
pub struct Registration {
    pub shared: Arc<WatcherShared>,
    /// The state to send as ADDED events first (`Start::Initial`).
    pub snapshot: Option<Arc<SnapshotLease>>,
    /// The history position to continue from.
    pub cursor: u64,
    /// Set when the watcher joined live dispatch at once.
    pub live: Option<queue::Receiver<Item>>,
}

/// The requested resourceVersion is older than the history: (requested, oldest-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooOld(pub u64, pub u64);

/// One step of reading the history.
pub enum CatchUp {
    /// The stream cannot continue: the history no longer holds its next event (`Slow`),
    /// or it was restarted since the watcher registered (`Relist`).
    Expired(EndReason),
    Events {
        events: Vec<Arc<Event>>,
        next: u64,
        /// Set when these were the last events: the watcher is live again.
        live: Option<queue::Receiver<Item>>,
    },
}

pub struct HubState {
    events: VecDeque<Arc<Event>>,
    /// History position of `events[0]` (or of the next event when empty).
    first_seq: u64,
    /// The events' base costs; their encodings are in `Hub::encoded`.
    bytes: usize,
    /// The list resourceVersion the history starts after, or the last trimmed event's.
    floor_rv: u64,
    trimmed: bool,
    /// Bumped by every restart. Sequence numbers keep counting across a restart, so a
    /// watcher's position alone cannot tell the old history from the new one.
    epoch: u64,
    /// Keyed by ids the hub hands out in sequence: an Fx hash, not SipHash (looked up
    /// for every delivery).
    watchers: FxHashMap<WatcherId, Entry>,
    index: Index,
    next_id: WatcherId,
    scratch: Vec<WatcherId>,
    /// The snapshots of watchers sending their initial state (dead entries are theirs
    /// that finished or went away, pruned by the sweep).
    leases: Vec<Weak<SnapshotLease>>,
    /// Live entries of `leases` at the last sweep: a sweep also runs, early, when the
    /// vector has doubled since, so it never holds more than twice what is live.
    leases_kept: usize,
    next_sweep: Instant,
    /// When each watcher that asked for bookmarks gets its next periodic one.
    bookmarks: Schedule<WatcherShared>,
}

/// History sizes, for metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct HistoryStats {
    pub events: usize,
    pub bytes: usize,
    pub oldest_age: Duration,
}

pub struct Hub {
    pub enc: Encoder,
    /// Bytes of the history's events' wire encodings (built on first use, some by
    /// watchers reading the history outside the lock).
    pub encoded: EncodedBytes,
    pub cfg: WatchConfig,
    /// Field labels the index may bucket by: `metadata.name`, then the type's own.
    indexed: Vec<&'static str>,
    state: Mutex<HubState>,
    /// The resourceVersion every live watcher has been handed all events up to (set
    /// after each dispatch): what an idle watcher's bookmark may carry.
    head_rv: AtomicU64,
    /// `HubState::epoch`, readable without the lock (a body streaming its initial state
    /// checks it between batches).
    epoch: AtomicU64,
    /// Set once the gateway drains: every stream ends at its next event boundary.
    shutting_down: AtomicBool,
    /// Set when the cache is dropped because the upstream went back ([`Hub::reset`]).
    reset: AtomicBool,
    /// Why the history last restarted ([`Hub::restart`]), as `closed_by` codes it: what a
    /// watcher of an older epoch ends with.
    restart_reason: AtomicU8,
    pub stats: FanoutStats,
    dispatch_seconds: metrics::Histogram,
    /// The task that sends periodic bookmarks (`watch::bookmarks`).
    pub(super) ticker: Ticker,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").field("kind", &self.enc.kind).finish()
    }
}

impl Hub {
    pub fn new(
        enc: Encoder,
        cfg: WatchConfig,
        field_labels: &[&'static str],
        dispatch_seconds: metrics::Histogram,
    ) -> Self {
        let mut indexed = vec![NAME];
        indexed.extend(field_labels.iter().copied().filter(|l| *l != NAME));
        let bookmarks = Schedule::new(cfg.bookmark_interval);
        Self {
            enc,
            encoded: EncodedBytes::default(),
            cfg,
            indexed,
            state: Mutex::new(HubState {
                events: VecDeque::new(),
                first_seq: 0,
                bytes: 0,
                floor_rv: 0,
                trimmed: false,
                epoch: 0,
                watchers: FxHashMap::default(),
                index: Index::default(),
                next_id: 0,
                scratch: Vec::new(),
                leases: Vec::new(),
                leases_kept: 0,
                next_sweep: Instant::now(),
                bookmarks,
            }),
            head_rv: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            shutting_down: AtomicBool::new(false),
            reset: AtomicBool::new(false),
            restart_reason: AtomicU8::new(1),
            stats: FanoutStats::default(),
            dispatch_seconds,
            ticker: Ticker::default(),
        }
    }

    /// The writer's lock. The store takes it around every change so that a snapshot read
    /// under it agrees with the history's head.
    pub fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().expect("hub lock")
    }

    pub fn head_rv(&self) -> u64 {
        self.head_rv.load(Ordering::Acquire)
    }

    /// Whether the history was restarted since `shared` registered: its stream can then
    /// not be continued.
    pub fn restarted_since(&self, shared: &WatcherShared) -> bool {
        self.epoch.load(Ordering::Acquire) != shared.epoch
    }

    /// Why the history last restarted: how the streams it could not continue end.
    pub fn restart_reason(&self) -> EndReason {
        match self.restart_reason.load(Ordering::Acquire) {
            3 => EndReason::Inconsistent,
            _ => EndReason::Relist,
        }
    }

    /// Appends one change and hands it to every live watcher it concerns. Events for
    /// watchers on the express lane are written by [`Published::deliver`], which the
    /// caller runs once it has released the hub's lock: those are socket writes (a few µs
    /// each), and registrations, catch-ups and ends of other watches must not wait for
    /// thousands of them.
    #[must_use = "the express lane's writes happen in `Published::deliver`"]
    pub fn publish(
        &self,
        st: &mut HubState,
        change: Change,
        object: Arc<CachedObject>,
        prev: Option<Arc<CachedObject>>,
    ) -> Published {
        let started = std::time::Instant::now();
        let rv = object.resource_version;
        let seq = st.first_seq + st.events.len() as u64;
        let ev = Arc::new(Event::new(seq, rv, change, object, prev));
        st.bytes += ev.base_cost();
        st.events.push_back(ev.clone());
        let lane = self.dispatch(st, &ev);
        self.trim(st);
        Published { rv, started, lane }
    }

    /// The upstream reached `rv` with no change (a bookmark).
    pub fn progress(&self, st: &mut HubState, rv: u64) {
        self.trim(st);
        self.head_rv.fetch_max(rv, Ordering::AcqRel);
    }

    fn dispatch(&self, st: &mut HubState, ev: &Event) -> Vec<queue::Handoff> {
        let mut ids = std::mem::take(&mut st.scratch);
        ids.clear();
        st.index
            .candidates(&ev.object, ev.prev.as_deref(), &mut ids);
        let mut fallen: Vec<(WatcherId, bool)> = Vec::new();
        let mut lane = Vec::new();
        for id in &ids {
            let Some(e) = st.watchers.get(id) else {
                continue;
            };
            let Some(d) = ev.transition(|o| e.shared.filter.matches(o)) else {
                continue;
            };
            let line = e.shared.encoding.line(ev, d, &self.enc, &self.encoded);
            match e.tx.offer((ev.rv, line)) {
                Ok(Offered::Lane(h)) => lane.push(h),
                Ok(Offered::Queued | Offered::Skipped) => {}
                Err(SendError::Full) => fallen.push((*id, true)),
                Err(SendError::Closed) => fallen.push((*id, false)),
            }
        }
        for (id, lagging) in fallen {
            if let Some(e) = st.watchers.remove(&id) {
                st.index.remove(&e.key, id);
                if lagging {
                    // Stored before the queue's sender is dropped (end of scope): the
                    // watcher reads it once it has drained the queue and seen it closed.
                    e.shared.lag_seq.store(ev.seq, Ordering::Release);
                    self.stats.lagging.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        st.scratch = ids;
        lane
    }

    /// What the history keeps alive: its events and the encodings built for them so far.
    /// Encodings a watcher reading the history builds count from then on, so they are
    /// held to the budget at the next append (see docs/watch.md).
    fn history_bytes(&self, st: &HubState) -> usize {
        st.bytes + self.encoded.get()
    }

    /// Drops the oldest events while the history is over its byte budget or older than
    /// its window, and sweeps stalled initial states.
    fn trim(&self, st: &mut HubState) {
        let now = Instant::now();
        self.sweep(st, now);
        while let Some(front) = st.events.front() {
            let over_budget = self.history_bytes(st) > self.cfg.history_bytes;
            let too_old = now.saturating_duration_since(front.at) > self.cfg.history_window;
            if !over_budget && !too_old {
                break;
            }
            st.bytes -= front.base_cost();
            front.retire(&self.encoded);
            st.floor_rv = front.rv;
            st.trimmed = true;
            st.first_seq += 1;
            st.events.pop_front();
        }
    }

    /// Takes the snapshot back from every watcher that has sent no batch of its initial
    /// state for `stall_timeout`, and counts its end (`slow`) now: its client may never
    /// read again. Runs with every change, registration and metrics scrape (through
    /// `trim`), at most every quarter of the timeout (or second), so a snapshot is released
    /// within that much of the deadline once the state has moved on; while nothing
    /// changes, a pinned snapshot shares all of its memory with the current state anyway.
    fn sweep(&self, st: &mut HubState, now: Instant) {
        let timeout = self.cfg.stall_timeout;
        let crowded = st.leases.len() > 2 * st.leases_kept + 16;
        if !crowded && (timeout.is_zero() || now < st.next_sweep) {
            return;
        }
        st.next_sweep = now + (timeout / 4).min(Duration::from_secs(1));
        let stalled_before = now.checked_sub(timeout);
        st.leases.retain(|weak| {
            let Some(lease) = weak.upgrade() else {
                return false;
            };
            if timeout.is_zero() {
                return true;
            }
            match stalled_before {
                Some(t) if lease.release_if_stalled(t) => {
                    self.stats.count_end(EndReason::Slow);
                    false
                }
                _ => true,
            }
        });
        st.leases_kept = st.leases.len();
    }

    /// kube-apiserver's bound (watch_cache.go `getAllEventsSinceLocked`): a watch from N
    /// is answered 410 when N < oldest-1, where oldest is the list's RV + 1 while no event
    /// has been dropped, else the oldest event kept.
    fn oldest_minus_one(st: &HubState) -> u64 {
        match (st.trimmed, st.events.front()) {
            (true, Some(f)) => f.rv.saturating_sub(1).max(st.floor_rv),
            _ => st.floor_rv,
        }
    }

    /// The oldest resourceVersion the history continues from: it holds every event after
    /// it (a watch from an older one is answered 410).
    pub fn floor_rv(&self, st: &HubState) -> u64 {
        Self::oldest_minus_one(st)
    }

    /// The events after `rv`, oldest first, if the history holds all of them (to rebuild
    /// the state at `rv`, `cache::snapshots`).
    pub fn events_after(&self, st: &HubState, rv: u64) -> Option<Vec<Arc<Event>>> {
        if rv < Self::oldest_minus_one(st) {
            return None;
        }
        let skip = st.events.partition_point(|e| e.rv <= rv);
        Some(st.events.range(skip..).cloned().collect())
    }

    /// How many of the history's events have an RV in (lo, hi].
    pub fn events_between(&self, st: &HubState, lo: u64, hi: u64) -> usize {
        let a = st.events.partition_point(|e| e.rv <= lo);
        let b = st.events.partition_point(|e| e.rv <= hi);
        b.saturating_sub(a)
    }

    /// Registers a watcher. `snapshot` is read under the lock, so it is exactly the state
    /// the history continues from.
    pub fn register(
        &self,
        snapshot: impl FnOnce() -> Arc<Snapshot>,
        filter: WatchFilter,
        encoding: super::encoding::WatchEncoding,
        start: Start,
    ) -> Result<Registration, TooOld> {
        let mut st = self.lock();
        self.trim(&mut st);
        let next_seq = st.first_seq + st.events.len() as u64;
        let (snapshot, cursor) = match start {
            Start::Initial => {
                let lease = Arc::new(SnapshotLease::new(snapshot()));
                st.leases.push(Arc::downgrade(&lease));
                (Some(lease), next_seq)
            }
            Start::After(n) => {
                let below = Self::oldest_minus_one(&st);
                if n < below {
                    return Err(TooOld(n, below));
                }
                let skip = st.events.partition_point(|e| e.rv <= n);
                (None, st.first_seq + skip as u64)
            }
        };
        let id = st.next_id;
        st.next_id += 1;
        let shared = Arc::new(WatcherShared {
            id,
            filter,
            encoding,
            lag_seq: AtomicU64::new(NO_LAG),
            bookmark_due: AtomicBool::new(false),
            bookmark_slot: AtomicU64::new(schedule::UNSCHEDULED),
            closed_by: AtomicU8::new(0),
            epoch: st.epoch,
        });
        // Nothing to replay: join live dispatch at once.
        let live = (snapshot.is_none() && cursor == next_seq).then(|| self.join(&mut st, &shared));
        self.stats.watchers.fetch_add(1, Ordering::Relaxed);
        Ok(Registration {
            shared,
            snapshot,
            cursor,
            live,
        })
    }

    fn join(&self, st: &mut HubState, shared: &Arc<WatcherShared>) -> queue::Receiver<Item> {
        let (tx, rx) = queue::channel(QUEUE_LEN);
        if self.is_shutting_down() {
            // Draining: the queue is born closed and the stream ends (reason: shutdown).
            return rx;
        }
        if self.is_reset() {
            // The cache was dropped: the stream ends with its 410.
            shared.closed_by.store(2, Ordering::Release);
            return rx;
        }
        let key = shared.filter.index_key(&self.indexed);
        st.index.insert(key.clone(), shared.id);
        st.watchers.insert(
            shared.id,
            Entry {
                key,
                shared: shared.clone(),
                tx,
            },
        );
        rx
    }

    /// Reads up to `max` events from `cursor`, and no more once their objects add up to
    /// `max_bytes` (at least one); joins live dispatch when they were the last.
    pub fn catch_up(
        &self,
        shared: &Arc<WatcherShared>,
        cursor: u64,
        max: usize,
        max_bytes: usize,
    ) -> CatchUp {
        let mut st = self.lock();
        // Checked first: a watcher registered just before a restart, with no event
        // published since, holds exactly the new history's first position.
        if shared.epoch != st.epoch {
            return CatchUp::Expired(self.restart_reason());
        }
        if cursor < st.first_seq {
            return CatchUp::Expired(EndReason::Slow);
        }
        let start = ((cursor - st.first_seq) as usize).min(st.events.len());
        let mut end = start;
        let mut bytes = 0;
        while end < st.events.len() && end - start < max && bytes < max_bytes {
            bytes += st.events[end].object.raw.len();
            end += 1;
        }
        let events: Vec<Arc<Event>> = st.events.range(start..end).cloned().collect();
        let next = st.first_seq + end as u64;
        let live = (end == st.events.len()).then(|| self.join(&mut st, shared));
        CatchUp::Events { events, next, live }
    }

    /// Removes a watcher from live dispatch and from the bookmark schedule (its client
    /// went away, or it ended).
    pub fn unregister(&self, shared: &WatcherShared) {
        let mut st = self.lock();
        let id = shared.id;
        if let Some(e) = st.watchers.remove(&id) {
            st.index.remove(&e.key, id);
        }
        st.bookmarks.remove(shared);
    }

    /// Schedules `shared`'s next periodic bookmark one interval from now (at
    /// registration, and again after the initial-events-end bookmark), stopping before
    /// `until` (the pre-timeout bookmark's time). The hub's tick must run
    /// (`bookmarks::start`).
    pub fn schedule_bookmarks(&self, shared: &Arc<WatcherShared>, until: Instant) {
        let Some(at) = Instant::now().checked_add(self.cfg.bookmark_interval) else {
            return;
        };
        let earlier = self.lock().bookmarks.insert(shared, at, until);
        if earlier {
            self.ticker.wake();
        }
    }

    /// When the bookmark tick should run next (`None`: no watcher is scheduled).
    pub fn next_bookmark_tick(&self) -> Option<Instant> {
        self.lock().bookmarks.next_tick()
    }

    /// Watchers in the bookmark schedule (for tests).
    pub fn scheduled_bookmarks(&self) -> usize {
        self.lock().bookmarks.len()
    }

    /// One step of the bookmark tick: takes up to `schedule::BATCH` watchers whose
    /// periodic bookmark is due, writes it through the express lane to those idle on it
    /// and leaves it to the body of every other one (`watch::bookmarks`). Returns true
    /// when there may be more due.
    pub fn send_due_bookmarks(&self, now: Instant) -> bool {
        let mut due = Vec::new();
        let mut live = Vec::new();
        {
            let mut st = self.lock();
            st.bookmarks
                .pop_due(now, self.cfg.bookmark_interval, schedule::BATCH, &mut due);
            for shared in &due {
                match st.watchers.get(&shared.id) {
                    Some(e) => live.push((shared, e.tx.bookmark_handoff())),
                    // Sending its initial state or reading the history: its body sends the
                    // bookmark once it is live and idle (it joins under this lock, and
                    // reads the flag when it is idle).
                    None => shared.bookmark_due.store(true, Ordering::SeqCst),
                }
            }
        }
        // The sockets are written outside the hub's lock, as the dispatch's lane writes.
        let mut lines: Vec<(BookmarkShape, u64, bytes::Bytes)> = Vec::new();
        let (mut written, mut bytes) = (0u64, 0u64);
        for (shared, h) in live {
            // Read before the queue is looked at (see `BookmarkHandoff::deliver`).
            let head = self.head_rv();
            let sent = h.deliver(head, &shared.bookmark_due, |rv| {
                self.bookmark_line(&mut lines, &shared.encoding, rv)
            });
            if let BookmarkSent::Written(n) = sent {
                written += 1;
                bytes += n as u64;
            }
        }
        if written > 0 {
            self.stats.bookmarks.fetch_add(written, Ordering::Relaxed);
            self.stats
                .bookmarks_written_directly
                .fetch_add(written, Ordering::Relaxed);
            self.stats.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        due.len() == schedule::BATCH
    }

    /// A periodic bookmark's bytes at `rv` for `encoding`, built once per shape and RV in
    /// one step of the tick.
    fn bookmark_line(
        &self,
        lines: &mut Vec<(BookmarkShape, u64, bytes::Bytes)>,
        encoding: &super::encoding::WatchEncoding,
        rv: u64,
    ) -> bytes::Bytes {
        let Some(shape) = encoding.bookmark_shape() else {
            return encoding.bookmark(&self.enc, rv, false);
        };
        if let Some((_, _, b)) = lines.iter().find(|(s, r, _)| *s == shape && *r == rv) {
            return b.clone();
        }
        let b = encoding.bookmark(&self.enc, rv, false);
        lines.push((shape, rv, b.clone()));
        b
    }

    /// The first state of the cache (or a relist that could not be continued): the
    /// history restarts after `list_rv`, and every watcher's stream ends, as
    /// kube-apiserver's cacher ends them when it relists. That is every watcher registered
    /// before now, not only the live ones: one still sending its initial state, or one
    /// reading the history at its own pace, would otherwise carry on from a state the new
    /// history does not continue. The live ones are closed here; the others learn it from
    /// the new epoch when they next read (`catch_up`, `restarted_since`).
    ///
    /// `why` is [`EndReason::Relist`], or [`EndReason::Inconsistent`] for the re-sync
    /// after a failed consistency check: its streams end with an ERROR 410, because a
    /// client that resumed would carry on from a state the cache got wrong.
    pub fn restart(&self, st: &mut HubState, list_rv: u64, why: EndReason) {
        let code = match why {
            EndReason::Inconsistent => 3,
            _ => 1,
        };
        st.epoch += 1;
        self.restart_reason.store(code, Ordering::Release);
        self.epoch.store(st.epoch, Ordering::Release);
        for (_, e) in st.watchers.drain() {
            e.shared.closed_by.store(code, Ordering::Release);
        }
        st.index = Index::default();
        st.first_seq += st.events.len() as u64;
        for ev in st.events.drain(..) {
            ev.retire(&self.encoded);
        }
        st.bytes = 0;
        st.floor_rv = list_rv;
        st.trimmed = false;
        self.head_rv.store(list_rv, Ordering::Release);
    }

    /// The gateway is draining: every stream ends at its next event boundary (live
    /// watchers' queues close now; the others see [`Hub::is_shutting_down`] at their next
    /// step), as kube-apiserver ends its watches when it shuts down. One flag for the hub
    /// instead of a drain future that every stream would poll with every event.
    pub fn shutdown(&self) {
        let mut st = self.lock();
        self.shutting_down.store(true, Ordering::Release);
        // Dropping the senders closes the queues and wakes their bodies; `closed_by` stays
        // 0, which reads as `EndReason::Shutdown`.
        st.watchers.clear();
        st.index = Index::default();
    }

    /// The cache is dropped because the upstream's resourceVersions went back (a restored
    /// or replaced cluster): every stream ends with an ERROR 410 Expired, at once for the
    /// live ones and at their next step for the others, so that each client relists from
    /// the new cluster instead of waiting for resourceVersions it will never see again.
    pub fn reset(&self) {
        let mut st = self.lock();
        self.reset.store(true, Ordering::Release);
        for (_, e) in st.watchers.drain() {
            e.shared.closed_by.store(2, Ordering::Release);
        }
        st.index = Index::default();
    }

    pub fn is_reset(&self) -> bool {
        self.reset.load(Ordering::Acquire)
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    pub fn history_stats(&self) -> HistoryStats {
        let mut st = self.lock();
        self.trim(&mut st);
        HistoryStats {
            events: st.events.len(),
            bytes: self.history_bytes(&st),
            oldest_age: st
                .events
                .front()
                .map(|e| Instant::now().saturating_duration_since(e.at))
                .unwrap_or_default(),
        }
    }

    /// Starting snapshots held by watchers still sending their initial state (for tests).
    pub fn pinned_snapshots(&self) -> usize {
        let st = self.lock();
        st.leases
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|l| !l.released())
            .count()
    }

    /// Live watchers (for tests and metrics).
    pub fn live_watchers(&self) -> usize {
        self.lock().watchers.len()
    }

    pub fn count_end(&self, reason: EndReason) {
        self.stats.count_end(reason);
    }
}

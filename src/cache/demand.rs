//! What consistent reads ask of a resource's reflector, and what the reflector proves to
//! them (docs/consistency.md). Shared by `cache::fresh` (the asking side) and
//! `cache::reflector` (the answering side), so neither imports the other.
//!
//! - a **re-sync**: re-read the whole resource with a consistent request;
//! - a **progress** proof: a short watch from the cache's resourceVersion whose
//!   pre-timeout BOOKMARK (kube-apiserver's `cacheWatcher.nextBookmarkTime`: 2 s before
//!   the watch's deadline) moves the cache to the upstream's current resourceVersion
//!   without re-reading anything;
//! - the **send time of the current state's consistent read**: a request that arrived
//!   before the reflector sent the consistent list (or watch-list) whose snapshot the
//!   store now holds is answered by that snapshot, with no probe.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// `timeoutSeconds` of a progress watch. kube-apiserver's watch cache sends its
/// pre-timeout bookmark 2 s before the deadline (`nextBookmarkTime`; at 2 s or less it
/// finds that time already past and sends none), from the bucket of that time's whole
/// second, popped by a timer that ticks each second: up to a second early
/// (`watcherBookmarkTimeBuckets`). At 4 s the bookmark comes 1 to 3 s after the watch
/// was sent, never sooner: watch-lists waiting for it can share one probe sent up to then
/// (`cache::fresh`), which a timeout of 3 s (a bookmark possibly at once) would not allow.
pub const PROGRESS_WATCH_TIMEOUT: u32 = 4;

/// The earliest a progress watch's bookmark comes after the watch was sent: its deadline
/// less the 2 s `nextBookmarkTime` asks for, less the second a bucket may be popped early.
pub const PROGRESS_BOOKMARK_NOT_BEFORE: Duration =
    Duration::from_secs(PROGRESS_WATCH_TIMEOUT as u64 - 3);

/// Requests for one kind of work from the reflector, counted.
///
/// The reflector remembers the count it last started work for, reading it *before* it
/// sends its request upstream, so every request counted by then is answered by that work,
/// and a request counted later by the next one. A request may say which resourceVersion
/// it waits for: once the store is there, it needs no more work, so a proof that already
/// brought the store past every later request's need is not followed by another one.
#[derive(Debug)]
pub struct Demand {
    /// Wakes the reflector (the count of requests).
    requested: watch::Sender<u64>,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    requested: u64,
    /// The count the reflector's current (or last) work covers.
    started: u64,
    /// The highest resourceVersion a request counted after `started` waits for.
    needed: u64,
}

impl Default for Demand {
    fn default() -> Self {
        Self {
            requested: watch::channel(0).0,
            counts: Mutex::default(),
        }
    }
}

impl Demand {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        // Every critical section is a few assignments: a poisoned lock is still consistent.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for the work, whatever the store reaches meanwhile (several askers before it
    /// starts share one).
    pub fn request(&self) {
        self.request_until(u64::MAX);
    }

    /// Asks for the work on behalf of a request that waits for the store to reach
    /// `needed`.
    pub fn request_until(&self, needed: u64) {
        let n = {
            let mut c = self.counts();
            c.requested += 1;
            c.needed = c.needed.max(needed);
            c.requested
        };
        self.requested.send_replace(n);
    }

    /// The work has been asked for and has not started yet.
    pub fn pending(&self) -> bool {
        let c = self.counts();
        c.requested > c.started
    }

    /// The work has been asked for, has not started yet, and a request waits for more
    /// than `store_rv`, the store's resourceVersion now.
    pub fn pending_beyond(&self, store_rv: u64) -> bool {
        let c = self.counts();
        c.requested > c.started && c.needed > store_rv
    }

    /// The reflector's side: a receiver that wakes on every new request.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.requested.subscribe()
    }

    /// The reflector starts the work: it answers the requests made so far.
    pub fn starting(&self, rx: &mut watch::Receiver<u64>) {
        rx.borrow_and_update();
        let mut c = self.counts();
        c.started = c.requested;
        c.needed = 0;
    }
}

/// What the registry does when a resource finds its upstream went back (a restored or
/// replaced cluster): drop and rebuild every cache (`Registry::reset`).
pub type OnWentBack = std::sync::Arc<dyn Fn() + Send + Sync>;

/// The link between a resource's consistent reads and its reflector.
#[derive(Default)]
pub struct Demands {
    /// Re-read the whole resource.
    pub resync: Demand,
    /// Follow the stream with a short watch, for its pre-timeout bookmark.
    pub progress: Demand,
    /// When the consistent request whose state the store holds was sent (`None`: the
    /// state came from a request with a resourceVersion, or there is none yet).
    state_sent: Mutex<Option<Instant>>,
    /// When a consistency check last found the state different from the upstream's, if
    /// no state read after that has been installed since (`cache::consistency`).
    inconsistent_since: Mutex<Option<Instant>>,
    /// Called when a consistent answer proves the upstream went back; `None` in tests
    /// of a lone reflector.
    went_back: Option<OnWentBack>,
    /// When the progress watch awaiting its bookmark was sent (`None`: none is).
    progress_sent: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Demands {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Demands")
            .field("resync", &self.resync)
            .field("progress", &self.progress)
            .finish_non_exhaustive()
    }
}

impl Demands {
    /// Demands whose went-back signal reaches `on_went_back`.
    pub fn with_went_back(on_went_back: OnWentBack) -> Self {
        Self {
            went_back: Some(on_went_back),
            ..Self::default()
        }
    }

    /// A consistent answer was older than a state the cache had seen: the upstream's
    /// resourceVersions went back, and the cache (every cache) must be rebuilt.
    pub fn upstream_went_back(&self) {
        if let Some(f) = &self.went_back {
            f();
        }
    }

    /// The reflector installed a state read with a consistent request sent at `sent`.
    /// Called *after* the store holds it: a reader that sees this time then takes a
    /// snapshot gets that state or a newer one.
    pub fn consistent_state(&self, sent: Instant) {
        let mut s = self.state_sent.lock().unwrap_or_else(|e| e.into_inner());
        *s = Some(s.map_or(sent, |old| old.max(sent)));
        drop(s);
        // A state read after the check found the old one wrong repairs it; one whose read
        // was sent before (a re-sync already under way) may hold the same mistake.
        let mut bad = self
            .inconsistent_since
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if bad.is_some_and(|found| sent >= found) {
            *bad = None;
        }
    }

    /// A consistency check found the state different from the upstream's at `found`:
    /// consistent reads are forwarded until a state read after `found` is installed, and
    /// the reflector is asked for one.
    pub fn found_inconsistent(&self, found: Instant) {
        *self
            .inconsistent_since
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(found);
        self.resync.request();
    }

    /// Whether the state is known to differ from the upstream's (see
    /// [`Demands::found_inconsistent`]).
    pub fn inconsistent(&self) -> bool {
        self.inconsistent_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// The reflector sent a progress watch at `sent`; its bookmark comes no sooner than
    /// [`PROGRESS_BOOKMARK_NOT_BEFORE`] later.
    pub fn progress_watch_sent(&self, sent: Instant) {
        *self.progress_sent.lock().unwrap_or_else(|e| e.into_inner()) = Some(sent);
    }

    /// The progress watch's bookmark came, or the watch ended without one.
    pub fn progress_watch_done(&self) {
        *self.progress_sent.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The earliest time a progress bookmark can come, if one is on its way: the open
    /// progress watch's, or (a proof is asked for and not started) one the reflector is
    /// about to send. A probe answered before then is at or below that bookmark's
    /// resourceVersion (docs/consistency.md, "Quiet resources").
    pub fn progress_bookmark_not_before(&self) -> Option<Instant> {
        let sent = *self.progress_sent.lock().unwrap_or_else(|e| e.into_inner());
        match sent {
            Some(sent) => Some(sent + PROGRESS_BOOKMARK_NOT_BEFORE),
            None if self.progress.pending() => Some(Instant::now() + PROGRESS_BOOKMARK_NOT_BEFORE),
            None => None,
        }
    }

    /// Whether the store's state (taken after this call) reflects every write the upstream
    /// acknowledged before `arrived`: its consistent request was sent at or after it, and
    /// no consistency check has found it wrong since.
    pub fn covers(&self, arrived: Instant) -> bool {
        !self.inconsistent()
            && self
                .state_sent
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some_and(|sent| sent >= arrived)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_answered_by_the_next_start() {
        let s = Demand::default();
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
            "a request after the work began needs the next one"
        );
    }

    #[test]
    fn a_request_the_store_has_reached_needs_no_more_work() {
        let s = Demand::default();
        let mut rx = s.subscribe();
        s.request_until(100);
        s.starting(&mut rx);
        // Two requests while the work runs, one waiting for 120, one for 150.
        s.request_until(120);
        s.request_until(150);
        assert!(s.pending_beyond(110));
        assert!(s.pending_beyond(149), "the request for 150 still waits");
        assert!(
            !s.pending_beyond(150),
            "the work that brought 150 answered both"
        );
        // A request that names no resourceVersion is pending until the work starts.
        s.request();
        assert!(s.pending_beyond(u64::MAX - 1));
        s.starting(&mut rx);
        assert!(!s.pending_beyond(0));
        assert!(!s.pending());
    }

    #[test]
    fn a_progress_bookmark_is_expected_while_a_watch_awaits_it_or_one_is_asked_for() {
        let d = Demands::default();
        let mut rx = d.progress.subscribe();
        assert_eq!(d.progress_bookmark_not_before(), None);
        let before = Instant::now();
        d.progress.request_until(7);
        let asked = d.progress_bookmark_not_before().expect("about to be sent");
        assert!(asked >= before + PROGRESS_BOOKMARK_NOT_BEFORE);
        d.progress.starting(&mut rx);
        let sent = Instant::now();
        d.progress_watch_sent(sent);
        assert_eq!(
            d.progress_bookmark_not_before(),
            Some(sent + PROGRESS_BOOKMARK_NOT_BEFORE)
        );
        d.progress_watch_done();
        assert_eq!(d.progress_bookmark_not_before(), None);
    }

    #[test]
    fn an_inconsistent_state_is_repaired_only_by_a_state_read_after_the_finding() {
        let d = Demands::default();
        let mut rx = d.resync.subscribe();
        let early = Instant::now();
        d.consistent_state(early);
        let found = Instant::now() + std::time::Duration::from_millis(1);
        d.found_inconsistent(found);
        assert!(d.inconsistent());
        assert!(d.resync.pending(), "the finding asks for a re-sync");
        assert!(!d.covers(early), "a wrong state covers nothing");
        // A re-sync whose read was sent before the finding may hold the same mistake.
        d.consistent_state(early);
        assert!(d.inconsistent());
        d.resync.starting(&mut rx);
        d.consistent_state(found + std::time::Duration::from_millis(1));
        assert!(!d.inconsistent());
        assert!(d.covers(found));
    }

    #[test]
    fn a_state_covers_requests_that_arrived_before_its_read_was_sent() {
        let d = Demands::default();
        let before = Instant::now();
        assert!(!d.covers(before), "no state yet");
        let sent = Instant::now();
        d.consistent_state(sent);
        assert!(d.covers(before));
        assert!(d.covers(sent));
        let after = Instant::now() + std::time::Duration::from_millis(1);
        assert!(
            !d.covers(after),
            "a request after the read was sent needs a probe"
        );
    }
}

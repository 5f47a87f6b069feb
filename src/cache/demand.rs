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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use tokio::sync::watch;

/// Requests for one kind of work from the reflector, counted.
///
/// `requested` counts requests; the reflector remembers the count it last started work
/// for, reading it *before* it sends its request upstream, so every request counted by
/// then is answered by that work, and a request counted later by the next one.
#[derive(Debug)]
pub struct Demand {
    requested: watch::Sender<u64>,
    /// The count the reflector's current (or last) work covers.
    started: AtomicU64,
}

impl Default for Demand {
    fn default() -> Self {
        Self {
            requested: watch::channel(0).0,
            started: AtomicU64::new(0),
        }
    }
}

impl Demand {
    /// Asks for the work (several askers before it starts share one).
    pub fn request(&self) {
        self.requested.send_modify(|n| *n += 1);
    }

    /// The work has been asked for and has not started yet.
    pub fn pending(&self) -> bool {
        *self.requested.borrow() > self.started.load(Ordering::Acquire)
    }

    /// The reflector's side: a receiver that wakes on every new request.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.requested.subscribe()
    }

    /// The reflector starts the work: it answers the requests made so far.
    pub fn starting(&self, rx: &mut watch::Receiver<u64>) {
        let n = *rx.borrow_and_update();
        self.started.fetch_max(n, Ordering::AcqRel);
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

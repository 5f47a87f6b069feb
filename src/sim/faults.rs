//! Fault knobs for reliability work: drop watch streams periodically, force 410 on the
//! next watch(es), fail the next watch(es) with a 503, add latency to every response,
//! freeze this server's view of the store (a lagging apiserver of an HA control plane).
//! Set by flags (`FaultConfig`) and at runtime through `SimHandle::faults()` or
//! `/debug/sim/faults/*`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;

/// How many watches [`Faults::watch_begins`] remembers.
pub const MAX_WATCH_BEGINS: usize = 100_000;

/// A watch as the server began it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchBegin {
    pub at: std::time::Instant,
    /// The resourceVersion it asked to start from (0: "0" or unset, e.g. a watch-list).
    pub asked: u64,
    /// The store's resourceVersion at that moment.
    pub current: u64,
    /// It was answered with a forced 410.
    pub gone: bool,
}

#[derive(Debug, Clone, Default)]
pub struct FaultConfig {
    /// End every watch stream this long after it started.
    pub drop_watch_after: Option<Duration>,
    /// Added to every response.
    pub latency: Duration,
    /// The next N watches get an immediate 410 ERROR event.
    pub watch_410: u32,
}

#[derive(Debug)]
pub struct Faults {
    latency_ms: AtomicU64,
    drop_after_ms: AtomicU64,
    watch_410: AtomicU32,
    watch_503: AtomicU32,
    /// The next N lists get API Priority and Fairness's 429.
    list_429: AtomicU32,
    /// Bumped to end all currently open watch streams.
    drop_gen: watch::Sender<u64>,
    /// The newest [`MAX_WATCH_BEGINS`] watches begun, and whether each got a forced 410 (the soak's checker needs them, docs/reliability.md).
    watch_begins: Mutex<std::collections::VecDeque<WatchBegin>>,
    /// Freeze: this server's watch cache stops at this resourceVersion (see [`Faults::freeze_at`]).
    frozen: watch::Sender<Option<u64>>,
    _guard: Mutex<()>,
}

impl Faults {
    pub fn new(cfg: FaultConfig) -> Self {
        Self {
            latency_ms: AtomicU64::new(cfg.latency.as_millis() as u64),
            drop_after_ms: AtomicU64::new(
                cfg.drop_watch_after
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0),
            ),
            watch_410: AtomicU32::new(cfg.watch_410),
            watch_503: AtomicU32::new(0),
            list_429: AtomicU32::new(0),
            watch_begins: Mutex::default(),
            drop_gen: watch::channel(0).0,
            frozen: watch::channel(None).0,
            _guard: Mutex::new(()),
        }
    }

    pub fn latency(&self) -> Duration {
        Duration::from_millis(self.latency_ms.load(Ordering::Relaxed))
    }

    pub fn set_latency(&self, d: Duration) {
        self.latency_ms
            .store(d.as_millis() as u64, Ordering::Relaxed);
    }

    /// Every watch stream ends this long after it started (None = never).
    pub fn set_drop_watch_after(&self, d: Option<Duration>) {
        self.drop_after_ms.store(
            d.map(|d| d.as_millis().max(1) as u64).unwrap_or(0),
            Ordering::Relaxed,
        );
    }

    pub fn drop_watch_after(&self) -> Option<Duration> {
        match self.drop_after_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// The next `n` watch requests get HTTP 200 and one 410 ERROR event.
    pub fn force_410_next_watch(&self, n: u32) {
        self.watch_410.fetch_add(n, Ordering::SeqCst);
    }

    /// Consumes one forced 410, if any is pending.
    pub fn take_watch_410(&self) -> bool {
        self.watch_410
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// A watch from `asked` (0: RV "0" or unset) begins while the store is at `current`:
    /// consumes a forced 410 if one is pending (true: answer 410), and remembers the watch.
    /// After a 410, a client relists and cannot have seen the changes between `asked` and
    /// its list one by one; its next watch starts from the list's RV.
    pub fn begin_watch(&self, asked: u64, current: u64) -> bool {
        let gone = self.take_watch_410();
        let mut begins = self.watch_begins.lock().unwrap();
        if begins.len() == MAX_WATCH_BEGINS {
            begins.pop_front();
        }
        begins.push_back(WatchBegin {
            at: std::time::Instant::now(),
            asked,
            current,
            gone,
        });
        gone
    }

    /// The watches remembered by [`Faults::begin_watch`], oldest first.
    pub fn watch_begins(&self) -> Vec<WatchBegin> {
        self.watch_begins.lock().unwrap().iter().copied().collect()
    }

    /// The next `n` watch requests get HTTP 503 ServiceUnavailable, as from an apiserver
    /// that is overloaded or cannot reach etcd: a watch that fails before it starts.
    pub fn fail_next_watch(&self, n: u32) {
        self.watch_503.fetch_add(n, Ordering::SeqCst);
    }

    /// Consumes one forced watch failure, if any is pending.
    pub fn take_watch_failure(&self) -> bool {
        self.watch_503
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// The next `n` list requests get 429 from API Priority and Fairness, as from an
    /// apiserver whose priority level's queues are full (a herd): the request is rejected
    /// before any handler runs.
    pub fn throttle_next_list(&self, n: u32) {
        self.list_429.fetch_add(n, Ordering::SeqCst);
    }

    /// Consumes one forced list rejection, if any is pending.
    pub fn take_list_throttle(&self) -> bool {
        self.list_429
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Ends every watch stream open right now (they end cleanly, like a dropped
    /// connection to an apiserver that restarts): every watch whose response head has
    /// been sent, since each subscribes before its head goes out.
    pub fn drop_watches_now(&self) {
        self.drop_gen.send_modify(|g| *g += 1);
    }

    /// Watch streams subscribe to this and end when it changes.
    pub fn drop_signal(&self) -> watch::Receiver<u64> {
        self.drop_gen.subscribe()
    }

    /// A lagging apiserver: from now on this server serves what its watch cache would if
    /// it had stopped at `rv` (the store, shared with other replicas, keeps moving).
    /// Watches deliver events up to `rv` only (one from a later RV waits, as kube-apiserver's
    /// cacher lets it); watch-lists and lists or gets that need a later RV wait the
    /// `too_large_rv_wait` and then answer 504 "Too large resource version"; RV="0" lists and
    /// watches are served at `rv`. Consistent lists (RV unset) stay fresh: kube-apiserver
    /// reads them from etcd when its cache is behind.
    pub fn freeze_at(&self, rv: u64) {
        self.frozen.send_replace(Some(rv));
    }

    /// Ends a freeze: the server catches up at once.
    pub fn unfreeze(&self) {
        self.frozen.send_replace(None);
    }

    /// The resourceVersion this server's view is frozen at, if any.
    pub fn frozen(&self) -> Option<u64> {
        *self.frozen.borrow()
    }

    /// Changes whenever a freeze begins or ends.
    pub fn frozen_signal(&self) -> watch::Receiver<Option<u64>> {
        self.frozen.subscribe()
    }

    pub fn to_json(&self) -> Value {
        json!({
            "frozenAt": self.frozen(),
            "latencyMs": self.latency_ms.load(Ordering::Relaxed),
            "dropWatchAfterMs": self.drop_after_ms.load(Ordering::Relaxed),
            "pendingWatch410": self.watch_410.load(Ordering::Relaxed),
            "pendingWatch503": self.watch_503.load(Ordering::Relaxed),
            "pendingList429": self.list_429.load(Ordering::Relaxed),
        })
    }
}

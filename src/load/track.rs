//! Reconnects after a restart of the target, watcher by watcher (the `restart`
//! scenario): how long each one took to stream again, and whether it had to relist
//! (a 410 Gone after the restart) or resumed from its last resourceVersion.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// One slot per watcher id.
pub struct Track {
    since: OnceLock<Instant>,
    /// Microseconds from the restart to the watcher's first stream after it (after its
    /// relist, if it had to relist); `u64::MAX` while it has none.
    reconnect_us: Vec<AtomicU64>,
    relisted: Vec<AtomicBool>,
}

/// What the watchers did after the restart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconnects {
    /// Microseconds until each watcher that streams again did.
    pub times_us: Vec<u64>,
    /// Watchers streaming again without having relisted.
    pub resumed: u64,
    /// Watchers that got 410 Gone after the restart and relisted.
    pub relisted: u64,
    /// Watchers not streaming again (yet).
    pub missing: u64,
}

impl Track {
    pub fn new(watchers: usize) -> Self {
        Self {
            since: OnceLock::new(),
            reconnect_us: (0..watchers).map(|_| AtomicU64::new(u64::MAX)).collect(),
            relisted: (0..watchers).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// The target went away now: every stream from here on is a reconnect.
    pub fn restarted(&self) {
        let _ = self.since.set(Instant::now());
    }

    /// Watcher `id` has a stream (2xx).
    pub fn connected(&self, id: usize) {
        let (Some(since), Some(slot)) = (self.since.get(), self.reconnect_us.get(id)) else {
            return;
        };
        let us = since.elapsed().as_micros() as u64;
        let _ = slot.compare_exchange(u64::MAX, us, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Watcher `id` was told 410 Gone: it relists, and its reconnect is the stream after.
    pub fn gone(&self, id: usize) {
        if self.since.get().is_none() {
            return;
        }
        if let (Some(r), Some(t)) = (self.relisted.get(id), self.reconnect_us.get(id)) {
            r.store(true, Ordering::Relaxed);
            t.store(u64::MAX, Ordering::Relaxed);
        }
    }

    pub fn reconnects(&self) -> Reconnects {
        let mut out = Reconnects::default();
        for (t, r) in self.reconnect_us.iter().zip(&self.relisted) {
            match (t.load(Ordering::Relaxed), r.load(Ordering::Relaxed)) {
                (u64::MAX, _) => out.missing += 1,
                (us, relisted) => {
                    out.times_us.push(us);
                    if relisted {
                        out.relisted += 1;
                    } else {
                        out.resumed += 1;
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnects_count_from_the_restart_and_a_410_restarts_the_clock() {
        let t = Track::new(4);
        t.connected(0); // before the restart: not a reconnect
        t.gone(1);
        t.restarted();
        t.connected(0);
        t.connected(1);
        t.gone(1); // its resumed stream was 410: it relists
        t.gone(2);
        t.connected(2);
        let r = t.reconnects();
        assert_eq!((r.resumed, r.relisted, r.missing), (1, 1, 2));
        assert_eq!(r.times_us.len(), 2);
    }
}

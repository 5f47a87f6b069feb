//! The schedule of periodic bookmarks: when each watcher's next one is due, in slots,
//! and the hub's tick that pops the due ones (`bookmarks` runs it). Generic over the
//! watcher handle so that it sits below the hub that owns it (the hub's watchers are
//! [`Slotted`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::index::WatcherId;

/// A watcher as the schedule holds it: its id, and the slot its next bookmark is in
/// ([`UNSCHEDULED`]: none), kept on the watcher so that removing it needs no search.
pub trait Slotted {
    fn id(&self) -> WatcherId;
    fn slot(&self) -> &AtomicU64;
}

/// Watchers handled per step of a tick, before the task yields its thread.
pub const BATCH: usize = 512;

/// The schedule's granularity for a bookmark interval: a second, as kube-apiserver's
/// buckets, or an eighth of the interval if that is shorter (tests run with intervals of
/// tens of milliseconds). Bookmarks due in the same slot go out together.
pub fn slot_for(interval: Duration) -> Duration {
    (interval / 8).clamp(Duration::from_millis(1), Duration::from_secs(1))
}

/// Marks a watcher that has no bookmark scheduled.
pub const UNSCHEDULED: u64 = u64::MAX;

/// One watcher's place in the schedule.
struct Scheduled<W> {
    shared: Arc<W>,
    /// Periodic bookmarks stop here: the pre-timeout bookmark (the body's) replaces them,
    /// as `nextBookmarkTime` caps the next one at the deadline minus 2 s.
    until: Instant,
}

/// When each watcher's next periodic bookmark is due, by slot. Lives in the hub's state,
/// under its lock, so that the tick sees a watcher either live (with its current queue)
/// or not, never in between.
pub struct Schedule<W> {
    origin: Instant,
    slot: Duration,
    due: BTreeMap<(u64, WatcherId), Scheduled<W>>,
    /// The slot the tick sleeps until; `None` while it waits for a first entry.
    target: Option<u64>,
}

impl<W: Slotted> Schedule<W> {
    pub fn new(interval: Duration) -> Self {
        Self {
            origin: Instant::now(),
            slot: slot_for(interval),
            due: BTreeMap::new(),
            target: None,
        }
    }

    /// The first slot that starts at or after `t`.
    fn slot_at_or_after(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.origin).as_nanos();
        let s = self.slot.as_nanos();
        u64::try_from(d.div_ceil(s)).unwrap_or(UNSCHEDULED - 1)
    }

    /// The last slot that has started by `t`.
    fn slot_by(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.origin).as_nanos();
        u64::try_from(d / self.slot.as_nanos()).unwrap_or(UNSCHEDULED - 1)
    }

    fn start_of(&self, slot: u64) -> Instant {
        let nanos = u128::from(slot) * self.slot.as_nanos();
        let d = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        crate::duration::deadline_after(self.origin, d)
    }

    /// Schedules `shared`'s next bookmark in the first slot at or after `at` (replacing
    /// any it had), unless that is not before `until`. Returns true when that slot is
    /// earlier than the one the tick sleeps until: the tick must be woken.
    pub fn insert(&mut self, shared: &Arc<W>, at: Instant, until: Instant) -> bool {
        self.remove(shared);
        let slot = self.slot_at_or_after(at);
        if self.start_of(slot) >= until {
            return false;
        }
        shared.slot().store(slot, Ordering::Relaxed);
        self.due.insert(
            (slot, shared.id()),
            Scheduled {
                shared: shared.clone(),
                until,
            },
        );
        self.target.is_none_or(|t| slot < t)
    }

    pub fn remove(&mut self, shared: &W) {
        let slot = shared.slot().swap(UNSCHEDULED, Ordering::Relaxed);
        if slot != UNSCHEDULED {
            self.due.remove(&(slot, shared.id()));
        }
    }

    /// Takes up to `max` watchers whose bookmark is due at `now`, each rescheduled one
    /// interval later (kube-apiserver's next one counts from when it is sent).
    pub fn pop_due(&mut self, now: Instant, interval: Duration, max: usize, out: &mut Vec<Arc<W>>) {
        let by = self.slot_by(now);
        let next = now.checked_add(interval);
        while out.len() < max {
            let Some(entry) = self.due.first_entry() else {
                break;
            };
            if entry.key().0 > by {
                break;
            }
            let sched = entry.remove();
            sched.shared.slot().store(UNSCHEDULED, Ordering::Relaxed);
            if let Some(next) = next {
                self.insert(&sched.shared, next, sched.until);
            }
            out.push(sched.shared);
        }
    }

    /// When the tick should run next (`None`: nothing is scheduled); remembered, so that
    /// [`Schedule::insert`] knows when an earlier entry must wake it.
    pub fn next_tick(&mut self) -> Option<Instant> {
        let slot = self.due.first_key_value().map(|((s, _), _)| *s);
        self.target = slot;
        slot.map(|s| self.start_of(s))
    }

    /// Watchers scheduled (for tests).
    pub fn len(&self) -> usize {
        self.due.len()
    }

    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }
}

/// The hub's tick task: started with the first watcher that asks for bookmarks, ended
/// when the hub is dropped.
#[derive(Debug, Default)]
pub struct Ticker {
    pub(super) started: std::sync::atomic::AtomicBool,
    pub(super) wake: Arc<Notify>,
}

impl Ticker {
    /// Wakes the tick to look at the schedule again.
    pub fn wake(&self) {
        self.wake.notify_one();
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        // The task holds no strong reference while it waits: let it see the hub is gone.
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct W(WatcherId, AtomicU64);

    impl Slotted for W {
        fn id(&self) -> WatcherId {
            self.0
        }
        fn slot(&self) -> &AtomicU64 {
            &self.1
        }
    }

    fn watcher(id: WatcherId) -> Arc<W> {
        Arc::new(W(id, AtomicU64::new(UNSCHEDULED)))
    }

    #[test]
    fn slots_are_a_second_or_an_eighth_of_a_short_interval() {
        assert_eq!(slot_for(Duration::from_secs(60)), Duration::from_secs(1));
        assert_eq!(
            slot_for(Duration::from_millis(400)),
            Duration::from_millis(50)
        );
        assert_eq!(slot_for(Duration::ZERO), Duration::from_millis(1));
    }

    #[tokio::test(start_paused = true)]
    async fn due_watchers_come_out_together_and_go_back_one_interval_later() {
        let interval = Duration::from_secs(60);
        let mut s = Schedule::new(interval);
        let t0 = Instant::now();
        let far = t0 + Duration::from_secs(3600);
        let (a, b, c) = (watcher(1), watcher(2), watcher(3));
        // a and b are due in the same slot (rounded up to the second), c later.
        assert!(
            s.insert(&a, t0 + Duration::from_millis(59_100), far),
            "the first wakes the tick"
        );
        s.next_tick();
        assert!(
            !s.insert(&b, t0 + Duration::from_millis(59_900), far),
            "same slot: no wake-up"
        );
        assert!(!s.insert(&c, t0 + Duration::from_secs(61), far));
        assert_eq!(s.next_tick(), Some(t0 + Duration::from_secs(60)));
        let mut out = Vec::new();
        s.pop_due(
            t0 + Duration::from_millis(59_999),
            interval,
            BATCH,
            &mut out,
        );
        assert!(out.is_empty(), "nothing before its slot");
        s.pop_due(t0 + Duration::from_secs(60), interval, BATCH, &mut out);
        let ids: Vec<_> = out.iter().map(|w| w.id()).collect();
        assert_eq!(ids, vec![1, 2]);
        assert_eq!(s.next_tick(), Some(t0 + Duration::from_secs(61)));
        // Rescheduled one interval after they were handled.
        out.clear();
        s.pop_due(t0 + Duration::from_secs(61), interval, BATCH, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(s.next_tick(), Some(t0 + Duration::from_secs(120)));
        assert_eq!(s.len(), 3);
        // An earlier entry wakes the tick; a removed one is gone.
        assert!(s.insert(&b, t0 + Duration::from_secs(90), far));
        s.remove(&a);
        s.remove(&a);
        assert_eq!(s.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn periodic_bookmarks_stop_before_the_pre_timeout_one() {
        let interval = Duration::from_secs(60);
        let mut s = Schedule::new(interval);
        let t0 = Instant::now();
        let a = watcher(1);
        // Deadline at 150 s: the pre-timeout bookmark at 148 s; periodic ones at 60, 120.
        let until = t0 + Duration::from_secs(148);
        s.insert(&a, t0 + interval, until);
        let mut out = Vec::new();
        s.pop_due(t0 + Duration::from_secs(60), interval, BATCH, &mut out);
        s.pop_due(t0 + Duration::from_secs(120), interval, BATCH, &mut out);
        assert_eq!(out.len(), 2);
        assert!(s.is_empty(), "180 s is past 148 s: not rescheduled");
        assert!(!s.insert(&a, t0 + Duration::from_secs(148), until));
        assert!(s.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_takes_at_most_a_batch() {
        let interval = Duration::from_secs(60);
        let mut s = Schedule::new(interval);
        let t0 = Instant::now();
        let far = t0 + Duration::from_secs(3600);
        let ws: Vec<_> = (0..BATCH as u64 + 10).map(watcher).collect();
        for w in &ws {
            s.insert(w, t0 + interval, far);
        }
        let mut out = Vec::new();
        s.pop_due(t0 + interval, interval, BATCH, &mut out);
        assert_eq!(out.len(), BATCH);
        out.clear();
        s.pop_due(t0 + interval, interval, BATCH, &mut out);
        assert_eq!(out.len(), 10);
    }
}

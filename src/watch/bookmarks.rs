//! Periodic bookmarks from one tick per resource type, not a timer per watcher.
//!
//! kube-apiserver sends a watcher that asked for bookmarks one every `bookmarkFrequency`
//! (a minute) while it is idle, and one 2 s before its deadline. Its cacher does that from
//! one timer per resource type: watchers sit in buckets by the second their next bookmark
//! is due (`watcherBookmarkTimeBuckets`), and a tick about every second pops the due ones
//! (`cacher.go` `dispatchEvents`, `cache_watcher.go` `nextBookmarkTime`).
//!
//! watchgate does the same. Each hub keeps a [`Schedule`] of its watchers' next periodic
//! bookmarks, in slots of [`slot_for`] (a second at the default interval); one task per
//! hub ([`start`]) sleeps until the next slot with due watchers and then, for each:
//!
//! - live, idle and on the express lane (a detached HTTP/1.1 watch whose queue is empty
//!   and whose connection's task is idle): the bookmark is written to the socket right
//!   there, with one non-blocking `send`, exactly as the dispatch writes a lone event
//!   (`queue::BookmarkHandoff`); the connection's task is not woken;
//! - anything else (HTTP/2, TLS, a queue holding events, a socket that would block, a
//!   watcher still sending its initial state or catching up): the watcher's
//!   `bookmark_due` flag is set and its body is woken; the body sends the bookmark when it
//!   is next idle and caught up, as before.
//!
//! So 5,000 idle HTTP/1.1 kubelets cost about 5,000 `send`s a minute and a few dozen
//! wake-ups of one task, instead of 5,000 timers firing and 5,000 connection tasks polled.
//! The pre-timeout bookmark, once per watch, stays with the body's own deadline timer.
//!
//! The rules that keep docs/watch.md's guarantees:
//! - A bookmark through the lane is written under the watcher's queue lock, only while
//!   its queue is empty and the lane open (the task idle): nothing queued or being
//!   written is overtaken.
//! - Its RV is the larger of the hub's head read *before* that check (every event at or
//!   below it has been offered to every live watcher, and the lane writes of an event
//!   finish before the head moves past it) and the newest RV the watcher has been given
//!   (`queue`'s `sent_rv`: lane writes, and what the body had taken when it went idle).
//!   It is never behind an event the watcher was sent, never ahead of one it was not.
//! - The schedule holds one entry per watcher that asked for bookmarks; the body removes
//!   it when it ends. Each tick handles at most [`BATCH`] watchers before it yields, so a
//!   thousand bookmarks due together never hold a worker thread for long.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::hub::{Hub, WatcherShared};
use super::index::WatcherId;

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
struct Scheduled {
    shared: Arc<WatcherShared>,
    /// Periodic bookmarks stop here: the pre-timeout bookmark (the body's) replaces them,
    /// as `nextBookmarkTime` caps the next one at the deadline minus 2 s.
    until: Instant,
}

/// When each watcher's next periodic bookmark is due, by slot. Lives in the hub's state,
/// under its lock, so that the tick sees a watcher either live (with its current queue)
/// or not, never in between.
pub struct Schedule {
    origin: Instant,
    slot: Duration,
    due: BTreeMap<(u64, WatcherId), Scheduled>,
    /// The slot the tick sleeps until; `None` while it waits for a first entry.
    target: Option<u64>,
}

impl Schedule {
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
        super::body::deadline_after(self.origin, d)
    }

    /// Schedules `shared`'s next bookmark in the first slot at or after `at` (replacing
    /// any it had), unless that is not before `until`. Returns true when that slot is
    /// earlier than the one the tick sleeps until: the tick must be woken.
    pub fn insert(&mut self, shared: &Arc<WatcherShared>, at: Instant, until: Instant) -> bool {
        self.remove(shared);
        let slot = self.slot_at_or_after(at);
        if self.start_of(slot) >= until {
            return false;
        }
        shared.bookmark_slot.store(slot, Ordering::Relaxed);
        self.due.insert(
            (slot, shared.id),
            Scheduled {
                shared: shared.clone(),
                until,
            },
        );
        self.target.is_none_or(|t| slot < t)
    }

    pub fn remove(&mut self, shared: &WatcherShared) {
        let slot = shared.bookmark_slot.swap(UNSCHEDULED, Ordering::Relaxed);
        if slot != UNSCHEDULED {
            self.due.remove(&(slot, shared.id));
        }
    }

    /// Takes up to `max` watchers whose bookmark is due at `now`, each rescheduled one
    /// interval later (kube-apiserver's next one counts from when it is sent).
    pub fn pop_due(
        &mut self,
        now: Instant,
        interval: Duration,
        max: usize,
        out: &mut Vec<Arc<WatcherShared>>,
    ) {
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
            sched
                .shared
                .bookmark_slot
                .store(UNSCHEDULED, Ordering::Relaxed);
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
    started: std::sync::atomic::AtomicBool,
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

/// Starts `hub`'s tick task once (it needs a tokio runtime: watches are served on one).
pub fn start(hub: &Arc<Hub>) {
    let ticker = &hub.ticker;
    if ticker.started.swap(true, Ordering::AcqRel) {
        return;
    }
    let wake = ticker.wake.clone();
    tokio::spawn(run(Arc::downgrade(hub), wake));
}

async fn run(hub: Weak<Hub>, wake: Arc<Notify>) {
    loop {
        let next = match hub.upgrade() {
            Some(h) => h.next_bookmark_tick(),
            None => return,
        };
        match next {
            Some(t) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(t) => {}
                    // An earlier entry (or the hub's end): look again.
                    _ = wake.notified() => continue,
                }
            }
            None => {
                wake.notified().await;
                continue;
            }
        }
        loop {
            let Some(h) = hub.upgrade() else {
                return;
            };
            let more = h.send_due_bookmarks(Instant::now());
            drop(h);
            if !more {
                break;
            }
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watcher(id: WatcherId) -> Arc<WatcherShared> {
        Arc::new(WatcherShared::for_tests(id))
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
        let ids: Vec<_> = out.iter().map(|w| w.id).collect();
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

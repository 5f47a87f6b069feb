//! When kube-apiserver's watch cache sends a watcher its next BOOKMARK
//! (k8s.io/apiserver release-1.36 `pkg/storage/cacher`):
//!
//! - `cache_watcher.go` `nextBookmarkTime`: the heartbeat a `bookmarkFrequency` from now
//!   (`defaultBookmarkFrequency`, a minute), or 2 s before the watch's deadline when that is
//!   sooner; none once that time has passed, so a watch of `timeoutSeconds` ≤ 2 gets no
//!   pre-timeout bookmark.
//! - `cacher.go` `watcherBookmarkTimeBuckets.addWatcherThreadUnsafe`: the watcher goes in
//!   the bucket of that time's whole second counted from the cacher's creation (never a
//!   bucket already popped), and `popExpiredWatchersThreadUnsafe` pops every bucket up to
//!   the current second at each tick of the dispatch loop's bookmark timer (`time.Second`,
//!   `wait.Jitter(time.Second, 0.25)`). So the bookmark goes out at the first tick at or
//!   after the start of its second: up to a second *before* the time asked ("if you set
//!   fire time at X, you can get the bookmark within (X-1,X+1) period"), and a watcher
//!   popped before its pre-timeout time is put back (`finishDispatching`) and gets a
//!   second one at the next tick.
//!
//! The simulator keeps that arithmetic with a timer that is not jittered: ticks at whole
//! seconds from the simulator's start, so tests can say exactly when a bookmark comes.
//! kube-apiserver's ticks drift by up to ±0.25 s each; its bookmarks come up to that much
//! later than the simulator's. A bookmark interval below a second (tests' speed-up) makes
//! the tick that interval too.

use std::time::Duration;

use tokio::time::Instant;

/// How long before a watch's deadline its last bookmark is due (`nextBookmarkTime`).
pub const PRE_TIMEOUT: Duration = Duration::from_secs(2);

/// The dispatch loop's bookmark timer (`time.Second`).
const TICK: Duration = Duration::from_secs(1);

/// One watcher's bookmark times.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// The cacher's creation: ticks and buckets count whole ticks from it.
    epoch: Instant,
    tick: Duration,
    frequency: Duration,
    deadline: Instant,
}

impl Schedule {
    pub fn new(epoch: Instant, frequency: Duration, deadline: Instant) -> Self {
        Self {
            epoch,
            tick: TICK.min(frequency).max(Duration::from_millis(1)),
            frequency,
            deadline,
        }
    }

    /// `nextBookmarkTime`: when the next bookmark is due, asked at `now`; `None` when that
    /// is `Before(now)`.
    fn due(&self, now: Instant) -> Option<Instant> {
        let heartbeat = now + self.frequency;
        let due = match self.deadline.checked_sub(PRE_TIMEOUT) {
            Some(pre) if pre < heartbeat => pre,
            _ => heartbeat,
        };
        (due >= now).then_some(due)
    }

    /// The whole ticks from the epoch to `t`.
    fn ticks(&self, t: Instant) -> u32 {
        let n = t.saturating_duration_since(self.epoch).as_nanos() / self.tick.as_nanos();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// When the first bookmark goes out for a watch that starts at `now` (its deadline
    /// counted from `now` too). kube-apiserver sets the deadline when the request
    /// arrives, before the watcher is queued, so a pre-timeout time equal to `now` (a
    /// watch of exactly 2 s) has already passed there: none.
    pub fn first(&self, now: Instant) -> Option<Instant> {
        self.due(now).filter(|due| *due > now)?;
        self.next(now)
    }

    /// When the next bookmark goes out for a watcher (re)queued at `now`: the tick that
    /// pops its bucket, never the one that has just passed.
    pub fn next(&self, now: Instant) -> Option<Instant> {
        let due = self.due(now)?;
        let bucket = self.ticks(due).max(self.ticks(now).saturating_add(1));
        Some(self.epoch + self.tick * bucket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_pre_timeout_bookmark_goes_out_at_its_seconds_tick_and_again_if_early() {
        let epoch = Instant::now();
        // A watch of timeoutSeconds=3 started 0.5 s into a second: due at 1.5 s, the
        // bucket of second 1 is popped at the tick of 1 s, before it is due, so it is put
        // back and popped again at 2 s; at 2 s the due time has passed.
        let t0 = epoch + 500 * MS;
        let s = Schedule::new(epoch, Duration::from_secs(60), t0 + 3 * S);
        let first = s.first(t0).unwrap();
        assert_eq!(first, epoch + S);
        let second = s.next(first).unwrap();
        assert_eq!(second, epoch + 2 * S);
        assert_eq!(s.next(second), None);
        // Started on a tick: due on the next one, where it is not yet `Before(now)`, so
        // queued once more.
        let t0 = epoch + S;
        let s = Schedule::new(epoch, Duration::from_secs(60), t0 + 3 * S);
        assert_eq!(s.first(t0), Some(epoch + 2 * S));
        assert_eq!(s.next(epoch + 2 * S), Some(epoch + 3 * S));
        assert_eq!(s.next(epoch + 3 * S), None);
    }

    #[test]
    fn two_seconds_or_less_gets_no_pre_timeout_bookmark() {
        let epoch = Instant::now();
        for timeout in [2 * S, 1500 * MS, S] {
            let t0 = epoch + 300 * MS;
            let s = Schedule::new(epoch, Duration::from_secs(60), t0 + timeout);
            assert_eq!(s.first(t0), None, "{timeout:?}");
        }
    }

    #[test]
    fn the_heartbeat_is_a_minute_to_its_second() {
        let epoch = Instant::now();
        let t0 = epoch + 10 * S + 700 * MS;
        let s = Schedule::new(
            epoch,
            Duration::from_secs(60),
            t0 + Duration::from_secs(600),
        );
        // Due at 70.7 s: popped at the tick of 70 s.
        assert_eq!(s.first(t0), Some(epoch + 70 * S));
    }
}

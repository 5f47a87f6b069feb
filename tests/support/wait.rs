//! Bounded polling: the alternative to sleeping and hoping.
//!
//! [`wait_for`] is the one polling loop: it observes a state, checks it, and on timeout
//! panics with what it waited for *and the last state it saw*, so a failure says how far
//! things got. [`wait_until`] is the same for a plain yes/no condition. [`within`] bounds a
//! single future; [`wait_for_every`] is [`wait_for`] at a pace of the test's choosing. Tests
//! do not write their own deadline loops.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How often [`wait_for`] and [`wait_until`] poll.
pub const POLL: Duration = Duration::from_millis(20);

/// Polls `observe` every [`POLL`] until `done` holds for what it returned, and returns that
/// state. Panics after `timeout` naming `desc` and showing the last state seen (`{:?}`).
///
/// `observe` is called at least once, and once more after the deadline has passed, so a
/// condition that becomes true while the last poll's sleep ran still counts.
pub async fn wait_for<T, F, Fut, D>(desc: &str, timeout: Duration, observe: F, done: D) -> T
where
    T: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
    D: FnMut(&T) -> bool,
{
    wait_for_every(desc, timeout, POLL, observe, done).await
}

/// [`wait_for`] polling every `every` instead of [`POLL`], for an `observe` that also
/// drives what it waits for (a write per poll) at a pace the test sets.
pub async fn wait_for_every<T, F, Fut, D>(
    desc: &str,
    timeout: Duration,
    every: Duration,
    mut observe: F,
    mut done: D,
) -> T
where
    T: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
    D: FnMut(&T) -> bool,
{
    let deadline = Instant::now() + timeout;
    loop {
        let state = observe().await;
        if done(&state) {
            return state;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting until {desc}; last state seen: {state:#?}");
        }
        tokio::time::sleep(every).await;
    }
}

/// [`wait_for`] with a yes/no condition, for waits whose state has nothing more to show
/// than "not yet". When there is a state worth printing (a response, a count, a list of
/// names), use [`wait_for`].
pub async fn wait_until<F, Fut>(desc: &str, timeout: Duration, cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(desc, timeout, cond, |ok| *ok).await;
}

/// Awaits `fut` for at most `timeout`; panics naming `desc` if it takes longer.
pub async fn within<T>(desc: &str, timeout: Duration, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(timeout, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {timeout:?}: {desc}"),
    }
}

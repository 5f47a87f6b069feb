//! Bounded polling: the alternative to sleeping and hoping.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// Polls `cond` every 20 ms until it returns true; panics after `timeout` naming `desc`.
pub async fn wait_until<F, Fut>(desc: &str, timeout: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if cond().await {
            return;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting until {desc}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Awaits `fut` for at most `timeout`; panics naming `desc` if it takes longer.
pub async fn within<T>(desc: &str, timeout: Duration, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(timeout, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {timeout:?}: {desc}"),
    }
}

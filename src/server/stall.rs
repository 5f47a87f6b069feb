//! A bound on how long a client may leave the gateway's writes waiting.
//!
//! A response is only polled when its connection can take bytes. A client that stops
//! reading (its receive window stays at zero) therefore freezes everything the gateway
//! holds for it: a watch's timer never fires, a watch-list's starting snapshot stays
//! pinned, hyper's and h2's buffers stay full, and nothing ends the connection, since the
//! server only gets to end a response when it can write to it (kube-apiserver's handler
//! goroutine blocks in its write the same way, for as long as TCP keeps the peer).
//!
//! [`StallGuard`] wraps a connection's socket. When a write has been pending (zero bytes
//! accepted) for the limit, the write fails with `TimedOut`; hyper then drops the
//! connection with every response on it, and their bodies free what they held. A client
//! that reads slowly but steadily is never cut: any accepted byte restarts the clock. The
//! timer lives in the socket's own write path, so it needs no task and costs nothing
//! until a write is pending. Upgraded connections (exec, attach, port-forward) are exempt:
//! their far end decides how long a tunnel may sit idle (see [`StallGuard::exempt`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::express::{DirectWrite, TryWrite, TryWriteNow};

/// The socket of one connection, with a deadline on writes that make no progress.
pub struct StallGuard<T> {
    inner: T,
    /// `None`: no deadline.
    limit: Option<Duration>,
    shared: Arc<StallState>,
    /// Armed while a write is pending; allocated on the first stall only.
    timer: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

/// What the connection's server code shares with its guard.
#[derive(Debug, Default)]
pub struct StallState {
    exempt: AtomicBool,
    cut: AtomicBool,
}

impl StallState {
    /// Lifts the deadline for good (the connection became a tunnel).
    pub fn exempt(&self) {
        self.exempt.store(true, Ordering::Release);
    }

    /// Whether the guard ended the connection.
    pub fn was_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }
}

impl<T> StallGuard<T> {
    /// `limit` of `None` or zero: no deadline.
    pub fn new(inner: T, limit: Option<Duration>) -> Self {
        Self {
            inner,
            limit: limit.filter(|l| !l.is_zero()),
            shared: Arc::default(),
            timer: None,
            armed: false,
        }
    }

    pub fn state(&self) -> Arc<StallState> {
        self.shared.clone()
    }

    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// Passes a write's outcome on, failing it once the socket has accepted nothing for
    /// the limit.
    fn guard<R>(&mut self, cx: &mut Context<'_>, res: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        let Poll::Pending = res else {
            // Progress (or an error of the socket's own): the clock starts again at the
            // next stall.
            self.armed = false;
            return res;
        };
        let Some(limit) = self.limit else {
            return Poll::Pending;
        };
        if self.shared.exempt.load(Ordering::Acquire) {
            return Poll::Pending;
        }
        let deadline = crate::duration::deadline_after(Instant::now(), limit);
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !self.armed {
            timer.as_mut().reset(deadline);
            self.armed = true;
        }
        // Registers this task's waker with the timer: when it fires, hyper is woken,
        // flushes again, and gets the error below.
        ready!(timer.as_mut().poll(cx));
        self.shared.cut.store(true, Ordering::Release);
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the client accepted no bytes for {limit:?}"),
        )))
    }
}

impl<T: TryWriteNow> TryWriteNow for StallGuard<T> {
    /// Only the express lane writes this way, and only while the connection's own writes
    /// are all done (so no stall is being timed): a write that takes nothing fails with
    /// `WouldBlock` and the event goes to the connection's task, whose writes are guarded.
    fn try_write_now(&self, buf: &[u8]) -> io::Result<usize> {
        self.inner.try_write_now(buf)
    }
}

/// Writes from outside the task need a shared socket (`coalesce::Coalesced` offers them);
/// a guard owned by its task offers none.
impl<T> DirectWrite for StallGuard<T> {
    fn direct_writer(&self) -> Option<Arc<dyn TryWrite>> {
        None
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for StallGuard<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StallGuard<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.guard(cx, res)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.guard(cx, res)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    // A socket's flush does not say whether the peer accepts bytes (a TCP stream's is a
    // no-op), so it neither proves progress nor starts the clock.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Fills `w` until a write stays pending (bounded).
    async fn fill(w: &mut (impl AsyncWrite + Unpin)) {
        let chunk = [b'x'; 1024];
        for _ in 0..64 {
            match tokio::time::timeout(Duration::from_millis(1), w.write(&chunk)).await {
                Ok(r) => {
                    r.expect("writes succeed while there is room");
                }
                Err(_) => return,
            }
        }
        panic!("the pipe never filled");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_stalled_for_the_limit_fails_and_progress_restarts_the_clock() {
        let (client, server) = tokio::io::duplex(4096);
        let mut guard = StallGuard::new(server, Some(Duration::from_secs(10)));
        let state = guard.state();
        let mut client = client;
        fill(&mut guard).await;
        let start = Instant::now();

        // The client reads a little after 8 s: the pending write goes through, and the
        // clock starts again at the next stall.
        let reader = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(8)).await;
            let mut buf = [0u8; 2048];
            client.read_exact(&mut buf).await.unwrap();
            client
        });
        guard.write_all(&[b'y'; 1024]).await.expect("progress");
        assert_eq!(start.elapsed(), Duration::from_secs(8));
        let _client = reader.await.unwrap();

        // Then nothing more is read: a write fails exactly at the limit after the first
        // one that had to wait.
        let stalled = Instant::now();
        fill(&mut guard).await;
        let err = guard.write(&[b'z'; 1024]).await.expect_err("cut");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(stalled.elapsed(), Duration::from_secs(10));
        assert!(state.was_cut());
    }

    #[tokio::test(start_paused = true)]
    async fn exempt_or_unlimited_connections_wait_for_ever() {
        for (limit, exempt) in [(Some(Duration::from_secs(10)), true), (None, false)] {
            let (_client, server) = tokio::io::duplex(4096);
            let mut guard = StallGuard::new(server, limit);
            if exempt {
                guard.state().exempt();
            }
            fill(&mut guard).await;
            let waited =
                tokio::time::timeout(Duration::from_secs(3600), guard.write(&[b'z'; 1024])).await;
            assert!(waited.is_err(), "still pending after an hour");
            assert!(!guard.state().was_cut());
        }
    }
}

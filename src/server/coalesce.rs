//! One socket write per poll of an HTTP/2 connection.
//!
//! hyper's HTTP/2 server writes through the h2 crate, which sends every DATA frame of 256
//! bytes or more with its own `writev`: it holds at most one such frame aside and flushes
//! the socket before it takes the next (`h2::codec::FramedWrite`). With many watches
//! multiplexed on one connection, one upstream event becomes one frame per watch, so a
//! connection carrying 100 watches made 100 syscalls for every event, and a loopback
//! write costs about as much as everything else a delivery does (docs/watch.md).
//!
//! [`Coalesced`] is the connection's socket with a write buffer in front of it. It recognises
//! an HTTP/2 connection by its client preface; from then on h2's writes and flushes only fill
//! the buffer, and the task serving the connection writes the buffer out once after each
//! poll of the connection ([`Flusher::poll_flush_buffer`]). Every frame produced in one poll
//! (the events that woke it, for all its streams) leaves in one write, and nothing waits for
//! a timer: the write happens before the task yields.
//!
//! HTTP/1.1 connections pass straight through (hyper already writes a response's ready
//! frames with one `writev`, and an upgraded connection's tunnel must see its own flushes
//! honoured), so the buffer only ever exists for HTTP/2.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::express::{DirectWrite, TryWrite, TryWriteNow};

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
pub const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Above this many buffered bytes a flush from h2 writes at once instead of waiting for the
/// end of the poll: a long burst streams out instead of growing the buffer.
const EAGER_FLUSH: usize = 256 * 1024;

/// A write that would take the buffer past this waits until the socket has taken some:
/// the socket's backpressure reaches h2 as before, and the buffer stays bounded.
const MAX_BUFFER: usize = 1024 * 1024;

/// A drained buffer keeps this much for good. Above it, the capacity is spare: kept while
/// the connection keeps writing (one event to a connection's 100 watches is ~130 KB of
/// frames, and growing the buffer back for every event cost 10-12 % of the CPU of a
/// lone HTTP/2 delivery: reallocations, page faults and frees, docs/benchmarks.md), and
/// released by the serving task once a whole [`TRIM_PERIOD`] passes without a write
/// ([`Flusher::trim`]), so an idle connection keeps no burst-sized allocation.
const KEEP_CAPACITY: usize = 64 * 1024;

/// How long spare capacity survives without a write (between one and two periods).
pub const TRIM_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Not yet known: the first bytes read decide.
    Sniffing,
    /// HTTP/1.1 (or anything that is not HTTP/2): writes and flushes pass through.
    Direct,
    /// HTTP/2: writes are buffered until the serving task flushes.
    Buffered,
}

struct Inner<T> {
    io: T,
    mode: Mode,
    /// How many bytes of the preface have been seen so far (while sniffing).
    sniffed: usize,
    buf: Vec<u8>,
    /// A write error seen while flushing for the serving task: reported to h2 on its next
    /// write or flush, so that the connection ends.
    failed: Option<io::ErrorKind>,
    /// The serving task's flush also flushes `io` (a TLS stream, which may hold records
    /// back after a write that returned); a socket's flush is a no-op and is skipped.
    flush_io: bool,
    /// The buffer was written out since the last [`Flusher::trim`].
    written_since_trim: bool,
}

impl<T: AsyncWrite + Unpin> Inner<T> {
    /// Writes the buffer out until it is empty or the socket is full.
    fn poll_write_buffer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(kind) = self.failed {
            return Poll::Ready(Err(kind.into()));
        }
        let mut written = 0;
        let result = loop {
            if written == self.buf.len() {
                break Poll::Ready(Ok(()));
            }
            match Pin::new(&mut self.io).poll_write(cx, &self.buf[written..]) {
                Poll::Ready(Ok(0)) => break Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => written += n,
                Poll::Ready(Err(e)) => break Poll::Ready(Err(e)),
                Poll::Pending => break Poll::Pending,
            }
        };
        self.buf.drain(..written);
        if written > 0 {
            self.written_since_trim = true;
        }
        if let Poll::Ready(Err(e)) = &result {
            self.failed = Some(e.kind());
        }
        result
    }

    /// Flushes the socket itself once the buffer is out.
    fn poll_flush_all(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_write_buffer(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    /// Buffers `bufs` (h2's frame head and payload), waiting for room when it is full.
    fn poll_buffer(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let Some(kind) = self.failed {
            return Poll::Ready(Err(kind.into()));
        }
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if self.buf.len() + len > MAX_BUFFER && !self.buf.is_empty() {
            match self.poll_write_buffer(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                // Partly written: take what fits now, or wait for the socket.
                Poll::Pending if self.buf.len() + len > MAX_BUFFER => return Poll::Pending,
                Poll::Pending => {}
            }
        }
        for b in bufs {
            self.buf.extend_from_slice(b);
        }
        Poll::Ready(Ok(len))
    }
}

impl<T> Inner<T> {
    /// Watches the first bytes read for the HTTP/2 preface.
    fn sniff(&mut self, read: &[u8]) {
        if self.mode != Mode::Sniffing || read.is_empty() {
            return;
        }
        let want = &H2_PREFACE[self.sniffed..];
        let n = want.len().min(read.len());
        if read[..n] != want[..n] {
            self.mode = Mode::Direct;
            return;
        }
        self.sniffed += n;
        if self.sniffed == H2_PREFACE.len() {
            self.mode = Mode::Buffered;
        }
    }
}

/// The connection's socket, as handed to hyper.
pub struct Coalesced<T> {
    inner: Arc<Mutex<Inner<T>>>,
}

/// The serving task's handle on the same socket: writes out what hyper buffered.
pub struct Flusher<T> {
    inner: Arc<Mutex<Inner<T>>>,
}

/// Wraps `io`; the [`Flusher`] must be polled after every poll of the connection.
pub fn wrap<T>(io: T) -> (Coalesced<T>, Flusher<T>) {
    wrap_with(io, false)
}

/// [`wrap`] for a stream whose writes may leave bytes behind until it is flushed (TLS):
/// the [`Flusher`] flushes it after writing the buffer out.
pub fn wrap_flushing<T>(io: T) -> (Coalesced<T>, Flusher<T>) {
    wrap_with(io, true)
}

fn wrap_with<T>(io: T, flush_io: bool) -> (Coalesced<T>, Flusher<T>) {
    let inner = Arc::new(Mutex::new(Inner {
        io,
        mode: Mode::Sniffing,
        sniffed: 0,
        buf: Vec::new(),
        failed: None,
        flush_io,
        written_since_trim: false,
    }));
    (
        Coalesced {
            inner: inner.clone(),
        },
        Flusher { inner },
    )
}

fn lock<T>(m: &Mutex<Inner<T>>) -> MutexGuard<'_, Inner<T>> {
    // Only one task at a time touches a connection's socket; a poisoned lock means a
    // panic mid-write, after which the connection is useless anyway.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T: AsyncWrite + Unpin> Flusher<T> {
    /// Writes out everything the connection buffered. `Pending` leaves the rest for when the
    /// socket can take it (the task is woken then); an error is kept for the connection to
    /// see on its next write.
    pub fn poll_flush_buffer(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut inner = lock(&self.inner);
        if inner.flush_io {
            return inner.poll_flush_all(cx);
        }
        if inner.buf.is_empty() {
            return Poll::Ready(Ok(()));
        }
        inner.poll_write_buffer(cx)
    }

    /// Whether the buffer holds spare capacity (see [`KEEP_CAPACITY`]): the serving task
    /// then calls [`Flusher::trim`] every [`TRIM_PERIOD`] until it says it is gone.
    pub fn holds_spare(&self) -> bool {
        lock(&self.inner).buf.capacity() > KEEP_CAPACITY
    }

    /// Releases the spare capacity unless the buffer was written out since the last call
    /// (or holds bytes now). Returns whether spare capacity remains.
    pub fn trim(&self) -> bool {
        let mut inner = lock(&self.inner);
        if std::mem::take(&mut inner.written_since_trim) || !inner.buf.is_empty() {
            return inner.buf.capacity() > KEEP_CAPACITY;
        }
        if inner.buf.capacity() > KEEP_CAPACITY {
            inner.buf = Vec::new();
        }
        false
    }

    /// Whether anything waits to be written.
    pub fn has_buffered(&self) -> bool {
        !lock(&self.inner).buf.is_empty()
    }

    /// Bytes waiting to be written.
    #[cfg(test)]
    pub fn buffered(&self) -> usize {
        lock(&self.inner).buf.len()
    }
}

/// Writes from outside the connection's task (the express lane, `express.rs`): HTTP/1.1
/// connections only, and only while nothing waits in the buffer.
struct DirectHandle<T> {
    inner: Arc<Mutex<Inner<T>>>,
}

impl<T: TryWriteNow + Send> TryWrite for DirectHandle<T> {
    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        let inner = lock(&self.inner);
        if inner.mode != Mode::Direct || !inner.buf.is_empty() || inner.failed.is_some() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        inner.io.try_write_now(buf)
    }
}

impl<T: TryWriteNow + Send + 'static> DirectWrite for Coalesced<T> {
    fn direct_writer(&self) -> Option<Arc<dyn TryWrite>> {
        Some(Arc::new(DirectHandle {
            inner: self.inner.clone(),
        }))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut inner = lock(&self.inner);
        let before = buf.filled().len();
        let r = Pin::new(&mut inner.io).poll_read(cx, buf);
        if r.is_ready() {
            inner.sniff(&buf.filled()[before..]);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut inner = lock(&self.inner);
        match inner.mode {
            Mode::Buffered => inner.poll_buffer(cx, &[io::IoSlice::new(buf)]),
            _ => Pin::new(&mut inner.io).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut inner = lock(&self.inner);
        match inner.mode {
            Mode::Buffered => inner.poll_buffer(cx, bufs),
            _ => Pin::new(&mut inner.io).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        // h2 then hands over its frame head and payload together instead of copying the
        // payload into its own buffer first.
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut inner = lock(&self.inner);
        match inner.mode {
            // The serving task writes the buffer once this poll of the connection is over;
            // only a large burst goes out now.
            Mode::Buffered if inner.buf.len() < EAGER_FLUSH => match inner.failed {
                Some(kind) => Poll::Ready(Err(kind.into())),
                None => Poll::Ready(Ok(())),
            },
            Mode::Buffered => match inner.poll_write_buffer(cx) {
                // Partly written is progress enough: the rest goes with the end of the poll.
                Poll::Pending if inner.buf.len() < MAX_BUFFER => Poll::Ready(Ok(())),
                r => r,
            },
            _ => Pin::new(&mut inner.io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut inner = lock(&self.inner);
        std::task::ready!(inner.poll_flush_all(cx))?;
        Pin::new(&mut inner.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A socket pair whose peer counts the writes it receives through a wrapper.
    #[tokio::test]
    async fn http2_writes_wait_for_the_serving_task_and_leave_together() {
        let (client, server) = tokio::io::duplex(1 << 20);
        let (mut io, flusher) = wrap(server);
        let mut client = client;
        client.write_all(H2_PREFACE).await.unwrap();
        let mut got = vec![0u8; H2_PREFACE.len()];
        io.read_exact(&mut got).await.unwrap();
        assert_eq!(lock(&io.inner).mode, Mode::Buffered);
        for i in 0..100u8 {
            io.write_all(&[i; 300]).await.unwrap();
            io.flush().await.unwrap();
        }
        assert_eq!(flusher.buffered(), 30_000, "h2's flushes only buffer");
        poll_fn(|cx| flusher.poll_flush_buffer(cx)).await.unwrap();
        assert_eq!(flusher.buffered(), 0);
        let mut out = vec![0u8; 30_000];
        client.read_exact(&mut out).await.unwrap();
        for (i, chunk) in out.chunks(300).enumerate() {
            assert!(chunk.iter().all(|b| *b == i as u8), "order kept");
        }
    }

    #[tokio::test]
    async fn http1_passes_straight_through() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (mut io, flusher) = wrap(server);
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut got = [0u8; 18];
        io.read_exact(&mut got).await.unwrap();
        assert_eq!(lock(&io.inner).mode, Mode::Direct);
        io.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        io.flush().await.unwrap();
        assert_eq!(flusher.buffered(), 0);
        let mut out = [0u8; 19];
        client.read_exact(&mut out).await.unwrap();
        assert_eq!(&out, b"HTTP/1.1 200 OK\r\n\r\n");
    }

    #[tokio::test]
    async fn a_preface_read_in_pieces_is_recognised_and_a_near_miss_is_not() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (mut io, _f) = wrap(server);
        for piece in H2_PREFACE.chunks(5) {
            client.write_all(piece).await.unwrap();
            let mut got = vec![0u8; piece.len()];
            io.read_exact(&mut got).await.unwrap();
        }
        assert_eq!(lock(&io.inner).mode, Mode::Buffered);

        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (mut io, _f) = wrap(server);
        client.write_all(b"PRI * HTTP/1.1\r\n").await.unwrap();
        let mut got = [0u8; 16];
        io.read_exact(&mut got).await.unwrap();
        assert_eq!(lock(&io.inner).mode, Mode::Direct);
    }

    /// A burst's buffer is kept while the connection keeps writing, and released after a
    /// trim period without a write; one no larger than KEEP_CAPACITY is always kept.
    #[tokio::test]
    async fn spare_capacity_is_kept_while_busy_and_released_when_quiet() {
        let (client, server) = tokio::io::duplex(4 << 20);
        let (mut io, flusher) = wrap(server);
        let mut client = client;
        client.write_all(H2_PREFACE).await.unwrap();
        let mut got = vec![0u8; H2_PREFACE.len()];
        io.read_exact(&mut got).await.unwrap();
        // 100 frames of 1,300 bytes, below EAGER_FLUSH: all of it waits for the serving task.
        async fn burst(io: &mut Coalesced<tokio::io::DuplexStream>) {
            for _ in 0..100 {
                io.write_all(&[1u8; 1300]).await.unwrap();
            }
        }
        burst(&mut io).await;
        poll_fn(|cx| flusher.poll_flush_buffer(cx)).await.unwrap();
        assert_eq!(flusher.buffered(), 0);
        assert!(
            flusher.holds_spare(),
            "the burst's capacity is kept after the write"
        );
        assert!(flusher.trim(), "written since the last trim: kept");
        burst(&mut io).await;
        poll_fn(|cx| flusher.poll_flush_buffer(cx)).await.unwrap();
        assert!(flusher.trim(), "written again: kept");
        assert!(!flusher.trim(), "a quiet period: released");
        assert!(!flusher.holds_spare());
        assert_eq!(lock(&io.inner).buf.capacity(), 0);
        // A small buffer is not spare.
        io.write_all(&[2u8; 1000]).await.unwrap();
        poll_fn(|cx| flusher.poll_flush_buffer(cx)).await.unwrap();
        assert!(!flusher.holds_spare());
        let mut out = vec![0u8; 2 * 130_000 + 1000];
        client.read_exact(&mut out).await.unwrap();
    }

    #[tokio::test]
    async fn a_full_buffer_waits_for_the_socket_and_a_write_error_reaches_h2() {
        // The peer reads nothing: the duplex holds 64 KiB.
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (mut io, flusher) = wrap(server);
        let mut client = client;
        client.write_all(H2_PREFACE).await.unwrap();
        let mut got = vec![0u8; H2_PREFACE.len()];
        io.read_exact(&mut got).await.unwrap();
        let chunk = vec![7u8; 64 * 1024];
        // MAX_BUFFER plus what the socket takes, then a write must wait.
        let mut accepted = 0;
        let blocked = loop {
            let w = poll_fn(|cx| Poll::Ready(Pin::new(&mut io).poll_write(cx, &chunk))).await;
            match w {
                Poll::Ready(Ok(n)) => accepted += n,
                Poll::Ready(Err(e)) => panic!("{e}"),
                Poll::Pending => break accepted,
            }
            assert!(accepted <= MAX_BUFFER + 128 * 1024, "the buffer is bounded");
        };
        assert!(blocked >= MAX_BUFFER, "{blocked}");
        assert!(flusher.buffered() <= MAX_BUFFER);
        // The peer goes away: the serving task's flush fails, and h2's next write sees it.
        drop(client);
        let r = poll_fn(|cx| flusher.poll_flush_buffer(cx)).await;
        assert!(r.is_err());
        let w = poll_fn(|cx| Pin::new(&mut io).poll_write(cx, b"x")).await;
        assert!(w.is_err());
    }
}

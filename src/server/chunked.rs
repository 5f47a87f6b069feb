//! The rest of an HTTP/1.1 response body, written in chunked encoding without hyper.
//!
//! Once hyper has written a cached watch's response head, the connection's task takes the
//! socket back (`h1.rs`) and streams the body itself, so that an idle watch holds no
//! hyper buffers. The bytes are the ones hyper would write: each data frame is one chunk
//! (`{len:X}\r\n`, the frame, `\r\n`), empty frames are skipped, and the end is
//! `0\r\n\r\n`. While it streams it watches the client's side as hyper does: the end of
//! the client's stream (or an error) ends the response and the connection; bytes the
//! client sends (a pipelined request) are kept for the next request and stop the watching,
//! as hyper stops reading once it holds unread bytes.

use std::future::poll_fn;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Body as _;
use tokio::io::{AsyncRead, AsyncWrite};

use super::express::TryWrite;
use super::rewind::Rewind;
use crate::body::Body;
use crate::lane::{Sent, Sink};

/// At most this many frames go into one write, like hyper's writer (16 buffers per
/// `writev`): a long backlog streams out in bounded writes.
const FRAMES_PER_WRITE: usize = 16;

/// Write-and-refill rounds per poll (hyper's connection loops 16 times per poll too).
const ROUNDS_PER_POLL: usize = 16;

/// No more frames are taken once this many bytes wait: hyper's own bound on what it
/// queues for a connection (its default maximum buffer size), so a client that stops
/// reading pins no more here than it did in hyper.
const MAX_PENDING: usize = 8192 + 4096 * 100;

/// The last chunk.
const END: &[u8] = b"0\r\n\r\n";

/// How the body's streaming ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// The body ended and its last chunk is written: the connection may serve another
    /// request.
    Finished,
    /// The client closed its side or the socket failed.
    ClientGone,
    /// The body failed; the response is cut short, as hyper cuts it.
    BodyFailed,
}

/// Streams `body` to `io` until it ends, the client goes, or a write fails. With a `sink`
/// (the express lane, `express.rs`), the body's producer may write chunks itself while
/// this task is idle.
pub async fn stream<T>(io: &mut Rewind<T>, mut body: Body, sink: Option<&ChunkSink>) -> End
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    // Chunks not yet written; released once written, so an idle watch holds none.
    let mut out = Chunks::default();
    let mut unflushed = false;
    let mut ended = false;
    // However the stream ends (even dropped at the drain's deadline), no producer writes
    // to this socket afterwards: it may carry the next response.
    let _closing = sink.map(SinkGuard);
    poll_fn(|cx| {
        if let Some(sink) = sink {
            // Running: nothing a producer writes may interleave with this task's writes.
            if let Some(rest) = sink.pause() {
                out.push(Piece::Data(rest));
            }
        }
        if !io.has_unread() {
            match io.poll_fill(cx) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(End::ClientGone),
                Poll::Ready(Ok(_)) | Poll::Pending => {}
            }
        }
        // Like hyper's connection, give the thread back after a bounded number of rounds
        // even if the body and the socket are always ready.
        for _ in 0..ROUNDS_PER_POLL {
            if !out.is_empty() {
                match out.poll_write(io, cx) {
                    Poll::Ready(Ok(())) => unflushed = true,
                    Poll::Ready(Err(_)) => return Poll::Ready(End::ClientGone),
                    Poll::Pending => return Poll::Pending,
                }
            }
            if unflushed {
                match Pin::new(&mut *io).poll_flush(cx) {
                    Poll::Ready(Ok(())) => unflushed = false,
                    Poll::Ready(Err(_)) => return Poll::Ready(End::ClientGone),
                    Poll::Pending => return Poll::Pending,
                }
            }
            if ended {
                return Poll::Ready(End::Finished);
            }
            let mut frames = 0;
            while frames < FRAMES_PER_WRITE && out.bytes < MAX_PENDING {
                match Pin::new(&mut body).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => {
                        // Trailers are not sent (hyper sends them only when the client
                        // asked with `TE: trailers`; no watch has any).
                        if let Ok(data) = frame.into_data() {
                            if !data.is_empty() {
                                out.push_chunk(data);
                                frames += 1;
                            }
                        }
                    }
                    Poll::Ready(Some(Err(err))) => {
                        tracing::debug!(error = %err, "response body failed");
                        return Poll::Ready(End::BodyFailed);
                    }
                    Poll::Ready(None) => {
                        out.push(Piece::Static(END));
                        ended = true;
                        break;
                    }
                    Poll::Pending => break,
                }
            }
            if out.is_empty() {
                // The body has nothing ready and has registered for when it does; all
                // that was taken from it is written and flushed: idle.
                if let Some(sink) = sink {
                    sink.resume();
                }
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

/// The express lane's sink of one detached watch (`express.rs`): while this connection's
/// task is idle, the fan-out writes an event's chunk straight to the socket, exactly as
/// the task would have written it.
pub struct ChunkSink {
    writer: Arc<dyn TryWrite>,
    state: Mutex<SinkState>,
}

#[derive(Default)]
struct SinkState {
    /// The task is idle: all it took from the body is written and flushed, and the body
    /// waits for its next event.
    open: bool,
    /// The stream is over: the socket may already carry the next response.
    closed: bool,
    /// What a producer's short write left, for the task to write before anything else.
    rest: Option<Bytes>,
}

impl ChunkSink {
    pub fn new(writer: Arc<dyn TryWrite>) -> Self {
        Self {
            writer,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SinkState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The task runs: producers write nothing until it is idle again. Returns what a
    /// producer's short write left.
    fn pause(&self) -> Option<Bytes> {
        let mut st = self.state();
        st.open = false;
        st.rest.take()
    }

    fn resume(&self) {
        let mut st = self.state();
        st.open = !st.closed;
    }

    fn close(&self) {
        let mut st = self.state();
        st.closed = true;
        st.open = false;
    }
}

impl Sink for ChunkSink {
    fn try_send(&self, frame: &Bytes) -> Sent {
        if frame.is_empty() {
            // An empty frame is no chunk (it would read as the last one).
            return Sent::All;
        }
        let mut st = self.state();
        if !st.open {
            return Sent::Nothing;
        }
        // The chunk in one buffer (head, frame, line end): one `send(2)`, cheaper than a
        // `writev(2)` of the three pieces. The buffer is the dispatching thread's own.
        let written = CHUNK.with_borrow_mut(|chunk| {
            chunk.clear();
            chunk.extend_from_slice(Piece::head(frame.len()).bytes());
            chunk.extend_from_slice(frame);
            chunk.extend_from_slice(CRLF);
            let r = self.writer.try_write(chunk);
            let rest = match r {
                // The socket is nearly full: the task writes the rest, and everything
                // after it, as usual.
                Ok(n) if n > 0 && n < chunk.len() => Some(Bytes::copy_from_slice(&chunk[n..])),
                _ => None,
            };
            if chunk.capacity() > KEEP_CHUNK {
                *chunk = Vec::new();
            }
            (r, rest)
        });
        match written {
            (Ok(n), None) if n > 0 => Sent::All,
            (Ok(_), Some(rest)) => {
                st.rest = Some(rest);
                st.open = false;
                Sent::Part
            }
            // Would block, or failed (the task meets the error on its own write).
            _ => {
                st.open = false;
                Sent::Nothing
            }
        }
    }
}

thread_local! {
    /// The express lane's chunk buffer, per dispatching thread.
    static CHUNK: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A larger chunk buffer is released after use (one large object must not pin it).
const KEEP_CHUNK: usize = 64 * 1024;

/// Closes the sink when the stream is over, however it ends.
struct SinkGuard<'a>(&'a ChunkSink);

impl Drop for SinkGuard<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

const CRLF: &[u8] = b"\r\n";

/// One slice of the output: a chunk's head, its data (the body's own bytes, not copied),
/// or a constant.
enum Piece {
    /// `{len:X}\r\n`: at most 16 hex digits and the line end.
    Head {
        buf: [u8; 18],
        len: u8,
    },
    Data(Bytes),
    Static(&'static [u8]),
}

impl Piece {
    fn head(len: usize) -> Self {
        let mut buf = [0u8; 18];
        let digits = (usize::BITS - len.leading_zeros()).div_ceil(4).max(1) as usize;
        for (i, b) in buf[..digits].iter_mut().enumerate() {
            let nibble = (len >> (4 * (digits - 1 - i))) & 0xf;
            *b = b"0123456789ABCDEF"[nibble];
        }
        buf[digits..digits + 2].copy_from_slice(b"\r\n");
        Piece::Head {
            buf,
            len: (digits + 2) as u8,
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Piece::Head { buf, len } => &buf[..*len as usize],
            Piece::Data(b) => b,
            Piece::Static(s) => s,
        }
    }
}

/// Chunks waiting to be written, written with one `writev` of their pieces: a frame is
/// never copied, and a chunk costs its head (a few bytes, built in place) and two slices.
/// hyper writes its chunks the same way (`writev` of head, data and line end).
#[derive(Default)]
struct Chunks {
    pieces: Vec<Piece>,
    /// Bytes of `pieces[0]` already written.
    offset: usize,
    /// Bytes waiting, for the bound on what is taken from the body.
    bytes: usize,
}

/// Slices per `writev`: a full round of frames (three each) and the last chunk.
const MAX_SLICES: usize = 3 * FRAMES_PER_WRITE + 1;

impl Chunks {
    fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    fn push(&mut self, piece: Piece) {
        self.bytes += piece.bytes().len();
        self.pieces.push(piece);
    }

    /// `data` as one chunk, exactly as hyper encodes it.
    fn push_chunk(&mut self, data: Bytes) {
        if self.pieces.is_empty() {
            // A lone frame, the common case, takes one allocation of its exact size.
            self.pieces.reserve_exact(3);
        }
        self.push(Piece::head(data.len()));
        self.push(Piece::Data(data));
        self.push(Piece::Static(CRLF));
    }

    /// Writes until everything is out (`Ready(Ok)`), the socket is full (`Pending`) or
    /// fails. Written pieces are dropped as they go; the vector is released at the end,
    /// so an idle connection keeps no allocation.
    fn poll_write<T: AsyncWrite + Unpin>(
        &mut self,
        io: &mut T,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        while !self.pieces.is_empty() {
            let n = {
                let mut slices = [IoSlice::new(&[]); MAX_SLICES];
                let mut count = 0;
                for (i, p) in self.pieces.iter().take(MAX_SLICES).enumerate() {
                    let b = p.bytes();
                    slices[i] = IoSlice::new(if i == 0 { &b[self.offset..] } else { b });
                    count += 1;
                }
                match Pin::new(&mut *io).poll_write_vectored(cx, &slices[..count]) {
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()))
                    }
                    Poll::Ready(Ok(n)) => n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            };
            self.advance(n);
        }
        self.pieces = Vec::new();
        Poll::Ready(Ok(()))
    }

    fn advance(&mut self, mut n: usize) {
        self.bytes -= n;
        let mut done = 0;
        for p in &self.pieces {
            let left = p.bytes().len() - self.offset;
            if n < left {
                self.offset += n;
                break;
            }
            n -= left;
            self.offset = 0;
            done += 1;
        }
        self.pieces.drain(..done);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body::Frame;
    use http_body_util::{BodyExt, StreamBody};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::mpsc;

    type Sent = Result<Frame<Bytes>, crate::body::BoxError>;

    fn channel_body(capacity: usize) -> (mpsc::Sender<Sent>, Body) {
        let (tx, rx) = mpsc::channel::<Sent>(capacity);
        let frames = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|frame| (frame, rx))
        });
        (tx, StreamBody::new(frames).boxed_unsync())
    }

    async fn read_exactly(client: &mut tokio::io::DuplexStream, n: usize) -> Vec<u8> {
        let mut got = vec![0u8; n];
        client.read_exact(&mut got).await.unwrap();
        got
    }

    #[tokio::test]
    async fn frames_become_hypers_chunks_and_the_end_is_the_last_chunk() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut io = Rewind::new(server, &[]);
        let (tx, body) = channel_body(8);
        let task = tokio::spawn(async move {
            let end = stream(&mut io, body, None).await;
            (end, io)
        });
        let line = Bytes::from(vec![b'x'; 300]);
        tx.send(Ok(Frame::data(Bytes::from_static(b"{\"a\":1}\n"))))
            .await
            .unwrap();
        assert_eq!(read_exactly(&mut client, 13).await, b"8\r\n{\"a\":1}\n\r\n");
        tx.send(Ok(Frame::data(Bytes::new()))).await.unwrap();
        tx.send(Ok(Frame::data(line.clone()))).await.unwrap();
        let mut want = b"12C\r\n".to_vec();
        want.extend_from_slice(&line);
        want.extend_from_slice(b"\r\n");
        assert_eq!(read_exactly(&mut client, want.len()).await, want);
        drop(tx);
        assert_eq!(read_exactly(&mut client, 5).await, b"0\r\n\r\n");
        let (end, mut io) = task.await.unwrap();
        assert_eq!(end, End::Finished);
        // The connection is still usable: the next request's bytes reach the next reader.
        client.write_all(b"GET /next").await.unwrap();
        let mut got = [0u8; 9];
        io.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"GET /next");
    }

    #[tokio::test]
    async fn a_client_that_closes_ends_the_stream_and_pipelined_bytes_are_kept() {
        let (client, server) = tokio::io::duplex(1 << 16);
        let mut io = Rewind::new(server, &[]);
        let (_tx, body) = channel_body(8);
        drop(client);
        assert_eq!(stream(&mut io, body, None).await, End::ClientGone);

        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut io = Rewind::new(server, &[]);
        let (tx, body) = channel_body(8);
        client.write_all(b"GET /pipelined").await.unwrap();
        let task = tokio::spawn(async move {
            let end = stream(&mut io, body, None).await;
            (end, io)
        });
        drop(tx);
        assert_eq!(read_exactly(&mut client, 5).await, b"0\r\n\r\n");
        let (end, mut io) = task.await.unwrap();
        assert_eq!(end, End::Finished);
        assert!(io.has_unread());
        let mut got = [0u8; 14];
        io.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"GET /pipelined");
    }

    #[tokio::test]
    async fn a_client_that_stops_reading_pins_at_most_hypers_bound() {
        // The client reads nothing: the socket takes 64 KiB, then every write waits.
        let (_client, server) = tokio::io::duplex(64 * 1024);
        let mut io = Rewind::new(server, &[]);
        let (tx, body) = channel_body(100);
        let frame = Bytes::from(vec![b'x'; 64 * 1024]);
        for _ in 0..100 {
            tx.try_send(Ok(Frame::data(frame.clone()))).unwrap();
        }
        let mut task = Box::pin(stream(&mut io, body, None));
        // One poll takes frames until the socket is full and the write waits.
        assert!(futures_util::poll!(task.as_mut()).is_pending());
        let taken = tx.capacity() * frame.len();
        assert!(taken > 0, "frames are taken");
        assert!(
            taken <= MAX_PENDING + frame.len(),
            "{taken} bytes taken from the body for a client that reads nothing"
        );
    }

    #[test]
    fn chunk_heads_are_hypers() {
        for len in [
            1,
            9,
            10,
            15,
            16,
            255,
            256,
            1257,
            4095,
            65536,
            1 << 40,
            usize::MAX,
        ] {
            assert_eq!(
                Piece::head(len).bytes(),
                format!("{len:X}\r\n").as_bytes(),
                "{len}"
            );
        }
    }

    /// A socket that takes at most `limit` bytes per write, with `writev`, and records
    /// the size of each.
    struct Trickle {
        got: Vec<u8>,
        writes: Vec<usize>,
        limit: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.poll_write_vectored(cx, &[IoSlice::new(buf)])
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(self.limit - n);
                self.got.extend_from_slice(&b[..take]);
                n += take;
            }
            self.writes.push(n);
            Poll::Ready(Ok(n))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[test]
    fn chunks_leave_in_one_writev_and_a_short_write_resumes_where_it_stopped() {
        let frames: Vec<Bytes> = (0..16u8)
            .map(|i| Bytes::from(vec![b'a' + i; 100 + i as usize]))
            .collect();
        let mut want = Vec::new();
        for f in &frames {
            want.extend_from_slice(format!("{:X}\r\n", f.len()).as_bytes());
            want.extend_from_slice(f);
            want.extend_from_slice(b"\r\n");
        }
        want.extend_from_slice(END);
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        for limit in [usize::MAX, 1, 7, 100, 1000] {
            let mut out = Chunks::default();
            for f in &frames {
                out.push_chunk(f.clone());
            }
            out.push(Piece::Static(END));
            assert_eq!(out.bytes, want.len());
            let mut io = Trickle {
                got: Vec::new(),
                writes: Vec::new(),
                limit,
            };
            assert!(matches!(
                out.poll_write(&mut io, &mut cx),
                Poll::Ready(Ok(()))
            ));
            assert_eq!(io.got, want, "limit {limit}");
            assert!(out.is_empty() && out.bytes == 0 && out.pieces.capacity() == 0);
            if limit == usize::MAX {
                assert_eq!(
                    io.writes,
                    vec![want.len()],
                    "one writev for the whole round"
                );
            }
        }
    }

    use crate::lane::Sent as Express;

    /// A shared socket for the express lane that takes at most `limit` bytes per write.
    #[derive(Default)]
    struct Shared {
        got: std::sync::Mutex<Vec<u8>>,
        limit: std::sync::atomic::AtomicUsize,
    }

    impl TryWrite for Shared {
        fn try_write(&self, buf: &[u8]) -> std::io::Result<usize> {
            let n = buf
                .len()
                .min(self.limit.load(std::sync::atomic::Ordering::Relaxed));
            if n == 0 {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            self.got.lock().unwrap().extend_from_slice(&buf[..n]);
            Ok(n)
        }
    }

    #[test]
    fn the_sink_writes_whole_chunks_only_while_the_task_is_idle_and_never_after_the_end() {
        let socket = Arc::new(Shared::default());
        socket
            .limit
            .store(usize::MAX, std::sync::atomic::Ordering::Relaxed);
        let sink = ChunkSink::new(socket.clone());
        // Not idle yet: the task has not gone idle once.
        assert_eq!(
            sink.try_send(&Bytes::from_static(b"{\"a\":1}\n")),
            Express::Nothing
        );
        sink.resume();
        assert_eq!(
            sink.try_send(&Bytes::from_static(b"{\"a\":1}\n")),
            Express::All
        );
        assert_eq!(
            sink.try_send(&Bytes::from_static(b"")),
            Express::All,
            "an empty frame is no chunk"
        );
        assert_eq!(&socket.got.lock().unwrap()[..], b"8\r\n{\"a\":1}\n\r\n");
        // The task runs: nothing is written until it is idle again.
        assert_eq!(sink.pause(), None);
        assert_eq!(sink.try_send(&Bytes::from_static(b"x")), Express::Nothing);
        sink.resume();
        // A socket that would block: the event goes to the task, and the lane stays shut
        // until the task has run.
        socket.limit.store(0, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(sink.try_send(&Bytes::from_static(b"y")), Express::Nothing);
        socket
            .limit
            .store(usize::MAX, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(sink.try_send(&Bytes::from_static(b"y")), Express::Nothing);
        // A short write: the task gets the rest first, and the lane is shut meanwhile.
        sink.resume();
        socket.limit.store(2, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(sink.try_send(&Bytes::from_static(b"hello")), Express::Part);
        assert_eq!(
            sink.try_send(&Bytes::from_static(b"later")),
            Express::Nothing
        );
        assert_eq!(sink.pause().as_deref(), Some(&b"\nhello\r\n"[..]));
        assert_eq!(socket.got.lock().unwrap()[13..], *b"5\r");
        // Closed with its stream: the socket may carry the next response.
        sink.close();
        sink.resume();
        socket
            .limit
            .store(usize::MAX, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(sink.try_send(&Bytes::from_static(b"z")), Express::Nothing);
    }

    #[tokio::test]
    async fn the_task_writes_what_a_short_express_write_left_before_anything_else() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut io = Rewind::new(server, &[]);
        let socket = Arc::new(Shared::default());
        socket.limit.store(3, std::sync::atomic::Ordering::Relaxed);
        let sink = ChunkSink::new(socket.clone());
        let (tx, body) = channel_body(8);
        let mut task = Box::pin(stream(&mut io, body, Some(&sink)));
        // One poll: the body waits, nothing is pending, the task is idle: the lane opens.
        assert!(futures_util::poll!(task.as_mut()).is_pending());
        assert!(sink.state().open);
        // A producer's short write: "5\r\n" reached the (other) socket, "hello\r\n" is
        // left for the task, which is then woken (here: by the next frame).
        assert_eq!(sink.try_send(&Bytes::from_static(b"hello")), Express::Part);
        tx.send(Ok(Frame::data(Bytes::from_static(b"next"))))
            .await
            .unwrap();
        drop(tx);
        let (end, got) = tokio::join!(task, read_exactly(&mut client, 7 + 9 + 5));
        assert_eq!(got, b"hello\r\n4\r\nnext\r\n0\r\n\r\n");
        assert_eq!(end, End::Finished);
        assert!(sink.state().closed, "closed with its stream");
    }

    #[tokio::test]
    async fn a_failing_body_cuts_the_response() {
        let (_client, server) = tokio::io::duplex(1 << 16);
        let mut io = Rewind::new(server, &[]);
        let (tx, body) = channel_body(8);
        tx.send(Err("boom".into())).await.unwrap();
        assert_eq!(stream(&mut io, body, None).await, End::BodyFailed);
    }
}

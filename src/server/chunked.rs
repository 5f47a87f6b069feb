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
use std::pin::Pin;
use std::task::Poll;

use http_body::Body as _;
use tokio::io::{AsyncRead, AsyncWrite};

use super::rewind::Rewind;
use crate::body::Body;

/// At most this many frames go into one write, like hyper's writer (16 buffers per
/// `writev`): a long backlog streams out in bounded writes.
const FRAMES_PER_WRITE: usize = 16;

/// Write-and-refill rounds per poll (hyper's connection loops 16 times per poll too).
const ROUNDS_PER_POLL: usize = 16;

/// No more frames are taken once this many bytes wait: hyper's own bound on what it
/// queues for a connection (its default maximum buffer size), so a client that stops
/// reading pins no more here than it did in hyper.
const MAX_PENDING: usize = 8192 + 4096 * 100;

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

/// Streams `body` to `io` until it ends, the client goes, or a write fails.
pub async fn stream<T>(io: &mut Rewind<T>, mut body: Body) -> End
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    // Encoded chunks not yet written; released once written, so an idle watch holds none.
    let mut out: Vec<u8> = Vec::new();
    let mut written = 0;
    let mut unflushed = false;
    let mut ended = false;
    poll_fn(|cx| {
        if !io.has_unread() {
            match io.poll_fill(cx) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(End::ClientGone),
                Poll::Ready(Ok(_)) | Poll::Pending => {}
            }
        }
        // Like hyper's connection, give the thread back after a bounded number of rounds
        // even if the body and the socket are always ready.
        for _ in 0..ROUNDS_PER_POLL {
            while written < out.len() {
                match Pin::new(&mut *io).poll_write(cx, &out[written..]) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                        return Poll::Ready(End::ClientGone)
                    }
                    Poll::Ready(Ok(n)) => written += n,
                    Poll::Pending => return Poll::Pending,
                }
            }
            if !out.is_empty() {
                out = Vec::new();
                written = 0;
                unflushed = true;
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
            while frames < FRAMES_PER_WRITE && out.len() < MAX_PENDING {
                match Pin::new(&mut body).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => {
                        // Trailers are not sent (hyper sends them only when the client
                        // asked with `TE: trailers`; no watch has any).
                        if let Ok(data) = frame.into_data() {
                            if !data.is_empty() {
                                encode_chunk(&mut out, &data);
                                frames += 1;
                            }
                        }
                    }
                    Poll::Ready(Some(Err(err))) => {
                        tracing::debug!(error = %err, "response body failed");
                        return Poll::Ready(End::BodyFailed);
                    }
                    Poll::Ready(None) => {
                        out.extend_from_slice(b"0\r\n\r\n");
                        ended = true;
                        break;
                    }
                    Poll::Pending => break,
                }
            }
            if out.is_empty() {
                // The body has nothing ready and has registered for when it does.
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

/// One chunk, as hyper encodes it.
fn encode_chunk(out: &mut Vec<u8>, data: &[u8]) {
    use std::io::Write as _;
    let _ = write!(out, "{:X}\r\n", data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
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
            let end = stream(&mut io, body).await;
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
        assert_eq!(stream(&mut io, body).await, End::ClientGone);

        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut io = Rewind::new(server, &[]);
        let (tx, body) = channel_body(8);
        client.write_all(b"GET /pipelined").await.unwrap();
        let task = tokio::spawn(async move {
            let end = stream(&mut io, body).await;
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
        let mut task = Box::pin(stream(&mut io, body));
        // One poll takes frames until the socket is full and the write waits.
        assert!(futures_util::poll!(task.as_mut()).is_pending());
        let taken = tx.capacity() * frame.len();
        assert!(taken > 0, "frames are taken");
        assert!(
            taken <= MAX_PENDING + frame.len(),
            "{taken} bytes taken from the body for a client that reads nothing"
        );
    }

    #[tokio::test]
    async fn a_failing_body_cuts_the_response() {
        let (_client, server) = tokio::io::duplex(1 << 16);
        let mut io = Rewind::new(server, &[]);
        let (tx, body) = channel_body(8);
        tx.send(Err("boom".into())).await.unwrap();
        assert_eq!(stream(&mut io, body).await, End::BodyFailed);
    }
}

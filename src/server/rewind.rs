//! A socket with bytes put back in front of it.
//!
//! The listener reads a connection's first bytes to tell HTTP/2 from HTTP/1.1, and an
//! HTTP/1.1 connection changes hands between hyper and the detached watch writer
//! (`h1.rs`): whatever one reader took from the socket but did not consume (the sniffed
//! bytes, a request pipelined behind a watch) is replayed here to the next.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::express::{DirectWrite, TryWrite};

/// How much one [`Rewind::poll_fill`] reads: the next request's head, usually whole.
const FILL_CHUNK: usize = 4096;

pub struct Rewind<T> {
    pre: BytesMut,
    io: T,
}

impl<T> Rewind<T> {
    pub fn new(io: T, pre: &[u8]) -> Self {
        Rewind {
            pre: BytesMut::from(pre),
            io,
        }
    }

    /// Puts `bytes` in front of whatever is already waiting to be replayed. They are
    /// copied: `bytes` may be a view into a larger buffer (hyper's read buffer) that must
    /// not stay alive for them.
    pub fn unread(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut pre = BytesMut::with_capacity(bytes.len() + self.pre.len());
        pre.extend_from_slice(bytes);
        pre.extend_from_slice(&self.pre);
        self.pre = pre;
    }

    /// Whether bytes wait to be replayed.
    pub fn has_unread(&self) -> bool {
        !self.pre.is_empty()
    }
}

impl<T: DirectWrite> DirectWrite for Rewind<T> {
    fn direct_writer(&self) -> Option<std::sync::Arc<dyn TryWrite>> {
        self.io.direct_writer()
    }
}

impl<T: AsyncRead + Unpin> Rewind<T> {
    /// Reads what the client sends next from the socket, behind the bytes already waiting.
    /// `Ok(0)` is the end of the client's stream.
    pub fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        // Not zeroed: the chunked writer asks with every poll, and the socket is usually
        // not readable; zeroing 4 KiB each time was most of the cost of such a call.
        let mut chunk = [std::mem::MaybeUninit::<u8>::uninit(); FILL_CHUNK];
        let mut buf = ReadBuf::uninit(&mut chunk);
        std::task::ready!(Pin::new(&mut self.io).poll_read(cx, &mut buf))?;
        self.pre.extend_from_slice(buf.filled());
        Poll::Ready(Ok(buf.filled().len()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pre.is_empty() {
            return Pin::new(&mut self.io).poll_read(cx, buf);
        }
        let n = self.pre.len().min(buf.remaining());
        buf.put_slice(&self.pre[..n]);
        self.pre.advance(n);
        if self.pre.is_empty() {
            // Release the allocation: an idle connection keeps no buffer.
            self.pre = BytesMut::new();
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn replays_unread_bytes_in_order_then_reads_the_socket() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut io = Rewind::new(server, b"GET");
        io.unread(b"<");
        client.write_all(b" / HTTP/1.1\r\n").await.unwrap();
        std::future::poll_fn(|cx| io.poll_fill(cx)).await.unwrap();
        client.write_all(b"\r\n").await.unwrap();
        drop(client);
        let mut got = Vec::new();
        io.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"<GET / HTTP/1.1\r\n\r\n");
        assert!(!io.has_unread());
    }
}

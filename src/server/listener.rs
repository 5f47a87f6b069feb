//! The accept loop and per-connection serving: HTTP/1.1 (`h1.rs`) and HTTP/2 prior
//! knowledge (h2c) on one port, told apart by the HTTP/2 client preface; drain-aware.
//! With TLS (`tls.rs`) the protocol is the one ALPN negotiated.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::TokioTimer;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::{TcpListener, TcpStream};

use super::coalesce::{self, H2_PREFACE};
use super::h1;
use super::handler::Handler;
use super::http2;
use super::rewind::Rewind;
use super::stall::StallGuard;
use super::tls::TlsServing;
use crate::drain::DrainWatch;

/// A client gets this long to send its request head: bounds slow-loris connections.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How connections are served.
#[derive(Debug, Clone, Copy)]
pub struct ConnOptions {
    /// Concurrent streams per HTTP/2 connection.
    pub http2_max_streams: u32,
    /// A connection whose writes accept no byte for this long is closed (`None`: never).
    /// See `stall.rs`.
    pub write_stall_timeout: Option<Duration>,
}

/// One builder per protocol: the listener tells them apart by the HTTP/2 preface.
struct Builders {
    http1: http1::Builder,
    http2: http2::Settings,
}

fn builders(max_streams: u32) -> Builders {
    let mut http1 = http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        // Many small writes (watch events) must not wait for Nagle-style coalescing in
        // hyper's buffer either.
        .writev(true);
    // HTTP/2 is served on h2 directly (`http2.rs`), with hyper's settings; its
    // keep-alive PINGs every 30 s, answered within 20 s, are set there.
    let http2 = http2::Settings {
        // Many watches multiplexed on one connection (kube-apiserver's
        // --http2-max-streams-per-connection; see docs/watch.md).
        max_concurrent_streams: max_streams,
    };
    Builders { http1, http2 }
}

/// Accept connections until the drain begins; each connection is served in its own task
/// that holds a [`DrainWatch`], so the drain waits for it.
pub async fn accept_loop(
    listener: TcpListener,
    handler: Handler,
    drain: DrainWatch,
    name: &'static str,
    opts: ConnOptions,
    tls: Option<Arc<TlsServing>>,
) {
    let builders = Arc::new(builders(opts.http2_max_streams));
    let draining = drain.draining();
    tokio::pin!(draining);
    loop {
        tokio::select! {
            _ = &mut draining => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let io = StallGuard::new(stream, opts.write_stall_timeout);
                    match &tls {
                        None => {
                            tokio::spawn(serve(io, peer, builders.clone(), handler.clone(), drain.clone()));
                        }
                        Some(tls) => {
                            tokio::spawn(serve_tls(io, peer, builders.clone(), handler.clone(), drain.clone(), tls.clone()));
                        }
                    }
                }
                Err(err) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(listener = name, error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    tracing::debug!(listener = name, "stopped accepting");
}

async fn serve(
    stream: StallGuard<TcpStream>,
    peer: SocketAddr,
    builders: Arc<Builders>,
    handler: Handler,
    drain: DrainWatch,
) {
    // Watch events are small writes that must leave at once.
    let _ = stream.get_ref().set_nodelay(true);
    let stall = stream.state();
    // HTTP/2 frames produced in one poll of the connection leave in one write (see
    // `coalesce`): the flusher writes them out right after each poll. The stall guard sits
    // under it, on the socket's real writes.
    let (mut io, flusher) = coalesce::wrap(stream);
    let sniffed = tokio::select! {
        s = tokio::time::timeout(HEADER_READ_TIMEOUT, sniff(&mut io)) => match s {
            Ok(Ok(s)) => s,
            // Silent or gone before its first bytes: nothing to answer (hyper would close
            // the same way at its header read timeout).
            Ok(Err(_)) | Err(_) => return,
        },
        _ = drain.draining() => return,
    };
    let http2 = sniffed.http2;
    let io = Rewind::new(io, &sniffed.bytes[..sniffed.len]);
    if !http2 {
        return h1::serve(io, peer, &builders.http1, handler, drain, stall, None).await;
    }
    // Boxed: h2's connection state is large, and inline it would size every connection's
    // task, HTTP/1.1 ones included (each idle HTTP/1.1 watch is a task).
    Box::pin(http2::serve(
        io,
        flusher,
        peer,
        builders.http2,
        handler,
        drain,
        stall,
        None,
    ))
    .await
}

/// A TLS connection: the handshake (bounded like a request head), then the protocol ALPN
/// chose. HTTP/1.1 watches still leave hyper after their head (`h1.rs`), written by the
/// connection's task through the TLS stream; HTTP/2 frames are coalesced into one TLS
/// write per poll, as on plain connections.
async fn serve_tls(
    stream: StallGuard<TcpStream>,
    peer: SocketAddr,
    builders: Arc<Builders>,
    handler: Handler,
    drain: DrainWatch,
    tls: Arc<TlsServing>,
) {
    let _ = stream.get_ref().set_nodelay(true);
    let stall = stream.state();
    let accepted = tokio::select! {
        a = tokio::time::timeout(HEADER_READ_TIMEOUT, tls.accept(stream)) => match a {
            Ok(Ok(a)) => a,
            Ok(Err(err)) => {
                tracing::debug!(%peer, error = %err, "TLS handshake failed");
                return;
            }
            Err(_) => return,
        },
        _ = drain.draining() => return,
    };
    let cert = accepted.cert;
    if !accepted.h2 {
        let io = Rewind::new(accepted.io, &[]);
        return h1::serve(io, peer, &builders.http1, handler, drain, stall, cert).await;
    }
    let (io, flusher) = coalesce::wrap_flushing(accepted.io);
    let io = Rewind::new(io, &[]);
    Box::pin(http2::serve(
        io,
        flusher,
        peer,
        builders.http2,
        handler,
        drain,
        stall,
        cert,
    ))
    .await
}

/// A connection's first bytes: up to the length of the HTTP/2 preface, and only as many as
/// it takes to tell the two protocols apart (one read, for any HTTP/1.1 request).
struct Sniffed {
    bytes: [u8; H2_PREFACE.len()],
    len: usize,
    http2: bool,
}

async fn sniff<T: AsyncRead + Unpin>(io: &mut T) -> std::io::Result<Sniffed> {
    let mut s = Sniffed {
        bytes: [0; H2_PREFACE.len()],
        len: 0,
        http2: false,
    };
    while s.len < H2_PREFACE.len() {
        let n = io.read(&mut s.bytes[s.len..]).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        s.len += n;
        if s.bytes[..s.len] != H2_PREFACE[..s.len] {
            return Ok(s);
        }
    }
    s.http2 = true;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::Drain;

    /// Every connection is a task, and an idle HTTP/1.1 watch is one connection: the
    /// task's own size counts against the memory per watcher (docs/watch.md). hyper's
    /// HTTP/2 state, inline, took it to 3.3 KiB.
    #[tokio::test]
    async fn a_connections_task_is_small() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        let drain = Drain::new();
        let handler: Handler =
            Arc::new(|_| Box::pin(async { http::Response::new(crate::body::empty()) }));
        let task = serve(
            StallGuard::new(stream, None),
            peer,
            Arc::new(builders(100)),
            handler,
            drain.watcher(),
        );
        let size = std::mem::size_of_val(&task);
        assert!(size <= 1280, "a connection's task takes {size} bytes");
        drop(client);
    }
}

//! The accept loop and per-connection serving: HTTP/1.1 and HTTP/2 prior knowledge (h2c)
//! on one port via hyper-util's auto builder, upgrades enabled, drain-aware.

use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};

use super::coalesce;
use super::drain::DrainWatch;
use super::stall::StallGuard;
use crate::body::Body;

/// What a listener serves: one request in, one response out (errors are responses too).
pub type Handler = Arc<
    dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> + Send + Sync,
>;

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

fn builder(max_streams: u32) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        // Many small writes (watch events) must not wait for Nagle-style coalescing in
        // hyper's buffer either.
        .writev(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        // Many watches multiplexed on one connection (kube-apiserver's
        // --http2-max-streams-per-connection; see docs/watch.md).
        .max_concurrent_streams(max_streams)
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    builder
}

/// Accept connections until the drain begins; each connection is served in its own task
/// that holds a [`DrainWatch`], so the drain waits for it.
pub async fn accept_loop(
    listener: TcpListener,
    handler: Handler,
    drain: DrainWatch,
    name: &'static str,
    opts: ConnOptions,
) {
    let builder = Arc::new(builder(opts.http2_max_streams));
    let draining = drain.draining();
    tokio::pin!(draining);
    loop {
        tokio::select! {
            _ = &mut draining => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let io = StallGuard::new(stream, opts.write_stall_timeout);
                    tokio::spawn(serve(io, peer, builder.clone(), handler.clone(), drain.clone()));
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
    builder: Arc<auto::Builder<TokioExecutor>>,
    handler: Handler,
    drain: DrainWatch,
) {
    // Watch events are small writes that must leave at once.
    let _ = stream.get_ref().set_nodelay(true);
    let stall = stream.state();
    let svc = {
        let stall = stall.clone();
        service_fn(move |req| {
            let handler = handler.clone();
            let stall = stall.clone();
            async move {
                let resp = handler(req).await;
                // A tunnel (exec, attach, port-forward) may sit unread as long as its
                // far end allows: the write-stall deadline is for responses.
                if resp.status() == http::StatusCode::SWITCHING_PROTOCOLS {
                    stall.exempt();
                }
                Ok::<_, Infallible>(resp)
            }
        })
    };
    // HTTP/2 frames produced in one poll of the connection leave in one write (see
    // `coalesce`): the flusher writes them out right after each poll. The stall guard sits
    // under it, on the socket's real writes.
    let (io, flusher) = coalesce::wrap(stream);
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
    tokio::pin!(conn);
    let draining = drain.draining();
    let stopped = drain.stopped();
    tokio::pin!(draining, stopped);
    let mut graceful = false;
    let mut deferred = false;
    loop {
        tokio::select! {
            res = poll_fn(|cx| {
                let res = conn.as_mut().poll(cx);
                if res.is_pending() && !deferred && flusher.has_buffered() {
                    // The watches woken by the same event are queueing their frames on
                    // other tasks right now: go once round the run queue (a self-wake is a
                    // yield in tokio) so that they join this write instead of each
                    // waking the connection for a write of its own.
                    deferred = true;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                deferred = false;
                if let Poll::Ready(Err(err)) = flusher.poll_flush_buffer(cx) {
                    // The connection sees the error on its next write; let it run now.
                    tracing::debug!(%peer, error = %err, "write failed");
                    cx.waker().wake_by_ref();
                }
                res
            }) => {
                if stall.was_cut() {
                    tracing::info!(%peer, "connection closed: the client stopped reading (--write-stall-timeout)");
                } else if let Err(err) = res {
                    tracing::debug!(%peer, error = %err, "connection ended with an error");
                }
                // What the connection's last poll buffered (a GOAWAY, the end of a stream),
                // unless the drain deadline cuts it.
                tokio::select! {
                    _ = poll_fn(|cx| flusher.poll_flush_buffer(cx)) => {}
                    _ = &mut stopped => {}
                }
                break;
            }
            // HTTP/1.1: finish the current response, then close; HTTP/2: GOAWAY.
            _ = &mut draining, if !graceful => {
                conn.as_mut().graceful_shutdown();
                graceful = true;
            }
            _ = &mut stopped => {
                tracing::debug!(%peer, "connection cut at the drain deadline");
                break;
            }
        }
    }
}

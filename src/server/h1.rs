//! HTTP/1.1 connections, with cached watches streamed outside hyper.
//!
//! Why: an idle HTTP/1.1 watch served by hyper keeps hyper's connection state alive for
//! as long as it lasts (30 to 60 minutes): a 16 KiB read buffer, an 8 KiB header write
//! buffer and a 2.4 KiB task (docs/watch.md). None of it is needed while the response only
//! streams events. So hyper parses the request and writes the response head, and then the
//! connection's task takes the socket back ([`hyper::server::conn::http1::Connection::into_parts`]),
//! drops hyper's connection with its buffers, and writes the body's chunks itself
//! (`chunked.rs`). When the watch ends normally the socket goes back to a new hyper
//! connection, with whatever the client sent meanwhile, so keep-alive works as before: an
//! informer's next LIST can reuse the connection.
//!
//! The hand-over: the watch handler marks its response [`Detachable`]; the service swaps
//! its body for a [`Placeholder`] that, when hyper first polls it (the head is encoded by
//! then), passes the real body to the task and never yields a frame. The socket wrapper
//! ([`Tracked`]) notes when hyper's flush has completed after that, which means hyper holds
//! no unwritten bytes; only then is the connection taken apart.
//!
//! Because hyper's plain connection is used (the upgradeable one cannot be taken apart),
//! protocol upgrades are completed here too (`upgrade.rs`).

use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use crate::body::RequestBody;
use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode, Version};
use http_body::{Body as _, Frame};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::oneshot;

use super::chunked::{self, ChunkSink, End};
use super::express::DirectWrite;
use super::handler::Handler;
use super::rewind::Rewind;
use super::stall::StallState;
use crate::auth::x509::PeerCert;
use crate::body::{self, Body, BoxError};
use crate::drain::DrainWatch;
use crate::lane::{Detachable, Lane};
use crate::upgrade::{OnUpgrade, Upgraded};

/// What the service, the placeholder body and the socket wrapper share with the task.
#[derive(Default)]
struct Shared {
    /// The watch's real body, handed over by its placeholder.
    detached: Mutex<Option<Detached>>,
    /// Set when the placeholder hands its body over; cleared when a flush of the socket
    /// completes, after which hyper holds no unwritten bytes.
    unflushed: AtomicBool,
    /// The client's side of a connection whose 101 hyper is writing.
    upgrade: Mutex<Option<oneshot::Sender<Upgraded>>>,
}

struct Detached {
    body: Body,
    /// The request allows another one on this connection after it.
    keep_alive: bool,
    lane: Option<Arc<Lane>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves one HTTP/1.1 connection until it closes, is upgraded or the drain cuts it.
pub async fn serve<T>(
    mut io: Rewind<T>,
    peer: SocketAddr,
    builder: &http1::Builder,
    handler: Handler,
    drain: DrainWatch,
    stall: Arc<StallState>,
    cert: Option<Arc<PeerCert>>,
) where
    T: AsyncRead + AsyncWrite + DirectWrite + Send + Unpin + 'static,
{
    loop {
        let shared = Arc::new(Shared::default());
        let svc = Service {
            handler: handler.clone(),
            shared: shared.clone(),
            stall: stall.clone(),
            cert: cert.clone(),
        };
        let tracked = Tracked {
            io,
            shared: shared.clone(),
        };
        // Boxed: the task keeps only a pointer to hyper's state, which it frees on detach.
        let mut conn = Box::new(builder.serve_connection(TokioIo::new(tracked), svc));
        // Boxed too: its drain futures are only needed while hyper serves.
        let phase = Box::pin(hyper_phase(&mut conn, &shared, &drain)).await;
        match phase {
            Phase::Cut => {
                tracing::debug!(%peer, "connection cut at the drain deadline");
                return;
            }
            Phase::Failed(err) => {
                log_end(peer, &stall, Some(&err));
                return;
            }
            Phase::Done if lock(&shared.upgrade).is_none() => {
                // The client closed the connection or the drain ended it. hyper may still
                // hold the end of the last response (a drain closes a connection whose
                // response is written but not yet flushed): poll it once more with
                // shutdown, which flushes first, as hyper's own connection future does.
                tokio::select! {
                    res = &mut *conn => {
                        if let Err(err) = res {
                            log_end(peer, &stall, Some(&err));
                            return;
                        }
                    }
                    _ = drain.stopped() => {}
                }
                log_end(peer, &stall, None);
                return;
            }
            Phase::Done | Phase::Detach => {}
        }
        let http1::Parts {
            io: tracked,
            read_buf,
            service,
            ..
        } = conn.into_parts();
        drop(service);
        io = tracked.into_inner().io;
        // Bytes hyper read past the request (a pipelined request). Copied by `unread`, so
        // hyper's read buffer goes with the rest of its state.
        io.unread(&read_buf);
        drop(read_buf);

        let Some(Detached {
            body,
            keep_alive,
            lane,
        }) = lock(&shared.detached).take()
        else {
            // hyper wrote a 101 (its write side closes only once that is flushed) and the
            // socket belongs to the upgrade now.
            if let Some(tx) = lock(&shared.upgrade).take() {
                let io: Upgraded = Box::new(io);
                let _ = tx.send(io);
            }
            return;
        };
        // The express lane, when the body offers one and the socket can be written from
        // outside this task.
        let sink = lane.and_then(|lane| {
            let sink = Arc::new(ChunkSink::new(io.direct_writer()?));
            lane.connect(sink.clone());
            Some(sink)
        });
        let end = tokio::select! {
            end = chunked::stream(&mut io, body, sink.as_deref()) => end,
            _ = drain.stopped() => {
                tracing::debug!(%peer, "connection cut at the drain deadline");
                return;
            }
        };
        match end {
            End::Finished if keep_alive && !drain.is_draining() => continue,
            End::Finished => {
                tokio::select! {
                    _ = io.shutdown() => {}
                    _ = drain.stopped() => {}
                }
                return;
            }
            End::ClientGone | End::BodyFailed => {
                log_end(peer, &stall, None);
                return;
            }
        }
    }
}

fn log_end(peer: SocketAddr, stall: &StallState, err: Option<&hyper::Error>) {
    if stall.was_cut() {
        tracing::info!(%peer, "connection closed: the client stopped reading (--write-stall-timeout)");
    } else if let Some(err) = err {
        tracing::debug!(%peer, error = %err, "connection ended with an error");
    }
}

enum Phase {
    /// hyper finished with the connection (closed, drained or upgraded).
    Done,
    /// A detachable response's head is out: the task streams its body.
    Detach,
    Failed(hyper::Error),
    /// The drain deadline passed.
    Cut,
}

type Conn<T> = http1::Connection<TokioIo<Tracked<T>>, Service>;

/// Runs hyper until the connection is done or a detachable response is ready to leave it.
async fn hyper_phase<T>(conn: &mut Conn<T>, shared: &Shared, drain: &DrainWatch) -> Phase
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let draining = drain.draining();
    let stopped = drain.stopped();
    tokio::pin!(draining, stopped);
    let mut graceful = false;
    loop {
        tokio::select! {
            phase = poll_fn(|cx| match conn.poll_without_shutdown(cx) {
                Poll::Ready(Ok(())) => Poll::Ready(Phase::Done),
                Poll::Ready(Err(err)) => Poll::Ready(Phase::Failed(err)),
                Poll::Pending => {
                    if !shared.unflushed.load(Ordering::Acquire)
                        && lock(&shared.detached).is_some()
                    {
                        Poll::Ready(Phase::Detach)
                    } else {
                        Poll::Pending
                    }
                }
            }) => return phase,
            // Finish the current response, then close (a detached watch is ended by the
            // drain through its hub, and its connection then closes).
            _ = &mut draining, if !graceful => {
                Pin::new(&mut *conn).graceful_shutdown();
                graceful = true;
            }
            _ = &mut stopped => return Phase::Cut,
        }
    }
}

/// The service hyper calls for each request on the connection.
struct Service {
    handler: Handler,
    shared: Arc<Shared>,
    stall: Arc<StallState>,
    /// A TLS connection's client certificate, for every request on it.
    cert: Option<Arc<PeerCert>>,
}

impl hyper::service::Service<Request<hyper::body::Incoming>> for Service {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, req: Request<hyper::body::Incoming>) -> Self::Future {
        let mut req = req.map(RequestBody::from);
        if let Some(cert) = &self.cert {
            req.extensions_mut().insert(cert.clone());
        }
        let upgrade_tx = req.headers().contains_key(header::UPGRADE).then(|| {
            let (tx, on) = OnUpgrade::pair();
            req.extensions_mut().insert(on);
            tx
        });
        // Only a GET over HTTP/1.1 is streamed in chunks that the task can take over, and
        // only without a request body: hyper must have read the whole request, or the
        // rest of its body would be taken for the next request.
        let detachable = req.version() == Version::HTTP_11
            && req.method() == Method::GET
            && req.body().is_end_stream();
        let keep_alive = !crate::proxy::headers::connection_has(req.headers(), "close");
        let handler = self.handler.clone();
        let shared = self.shared.clone();
        let stall = self.stall.clone();
        Box::pin(async move {
            let resp = handler(req).await;
            if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
                // A tunnel (exec, attach, port-forward) may sit unread as long as its far
                // end allows: the write-stall deadline is for responses.
                stall.exempt();
                if let Some(tx) = upgrade_tx {
                    *lock(&shared.upgrade) = Some(tx);
                }
            }
            if detachable && streams_in_chunks(&resp) {
                // hyper closes after a response that says `Connection: close` too.
                let keep_alive =
                    keep_alive && !crate::proxy::headers::connection_has(resp.headers(), "close");
                let lane = resp
                    .extensions()
                    .get::<Detachable>()
                    .and_then(|d| d.lane.clone());
                let (parts, body) = resp.into_parts();
                let placeholder = Placeholder {
                    body: Some(body),
                    keep_alive,
                    lane,
                    shared,
                };
                return Ok(Response::from_parts(parts, body::boxed(placeholder)));
            }
            Ok(resp)
        })
    }
}

/// Whether hyper will send `resp` chunked (no length known or set) and it is marked.
fn streams_in_chunks(resp: &Response<Body>) -> bool {
    resp.extensions().get::<Detachable>().is_some()
        && resp.status() == StatusCode::OK
        && resp.body().size_hint().exact().is_none()
        && !resp.headers().contains_key(header::CONTENT_LENGTH)
        && !resp.headers().contains_key(header::TRANSFER_ENCODING)
}

/// The body hyper sees for a detachable response: it hands the real body to the task when
/// first polled and then never yields, so hyper writes the head and nothing else.
struct Placeholder {
    body: Option<Body>,
    keep_alive: bool,
    lane: Option<Arc<Lane>>,
    shared: Arc<Shared>,
}

impl http_body::Body for Placeholder {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(body) = self.body.take() {
            // hyper flushes after polling a body that is not ready; the task detaches
            // once that flush has completed.
            self.shared.unflushed.store(true, Ordering::Release);
            *lock(&self.shared.detached) = Some(Detached {
                body,
                keep_alive: self.keep_alive,
                lane: self.lane.take(),
            });
        }
        // No waker is kept: the task takes the connection apart after hyper's flush, and
        // until then hyper is woken by the socket.
        Poll::Pending
    }
}

/// The socket as hyper sees it: notes completed flushes for the hand-over.
struct Tracked<T> {
    io: Rewind<T>,
    shared: Arc<Shared>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
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
        let r = Pin::new(&mut self.io).poll_flush(cx);
        if let Poll::Ready(Ok(())) = r {
            // hyper flushes the socket only after writing out all it buffered.
            self.shared.unflushed.store(false, Ordering::Release);
        }
        r
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::Drain;
    use crate::server::stall::StallGuard;
    use http_body_util::{BodyExt, StreamBody};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, DuplexStream};
    use tokio::sync::mpsc;

    type Sent = Result<Frame<Bytes>, BoxError>;

    /// Larger than the test socket's buffer, so that hyper holds part of it unflushed.
    const BIG: usize = 200_000;

    /// A handler whose `/watch` answers with a detachable stream fed by the returned
    /// channel (one per request) and whose other paths answer `ok` in full.
    fn handler() -> (Handler, mpsc::UnboundedReceiver<mpsc::Sender<Sent>>) {
        let (streams_tx, streams_rx) = mpsc::unbounded_channel();
        let handler: Handler = Arc::new(move |req: Request<RequestBody>| {
            let streams_tx = streams_tx.clone();
            Box::pin(async move {
                match req.uri().path() {
                    "/watch" => {}
                    "/big" => return Response::new(body::full(vec![b'x'; BIG])),
                    _ => return Response::new(body::full("ok")),
                }
                let (tx, rx) = mpsc::channel::<Sent>(8);
                streams_tx.send(tx).unwrap();
                let frames = futures_util::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|f| (f, rx))
                });
                let mut resp = Response::new(StreamBody::new(frames).boxed_unsync());
                resp.extensions_mut().insert(Detachable::default());
                resp
            })
        });
        (handler, streams_rx)
    }

    /// Reads until `want` has arrived, with a bound.
    async fn read_until(client: &mut DuplexStream, want: &[u8]) -> String {
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), async {
            while !got.windows(want.len()).any(|w| w == want) {
                let mut buf = [0u8; 1024];
                let n = client.read(&mut buf).await.unwrap();
                assert!(n > 0, "closed; got {:?}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&buf[..n]);
            }
        })
        .await;
        let text = String::from_utf8_lossy(&got).into_owned();
        assert!(read.is_ok(), "no {want:?} within 10 s; got {text:?}");
        text
    }

    /// Polls (bounded) until only `n` handles on the handler remain: one in the test, one
    /// in `serve`, plus one in hyper's service while hyper owns the connection.
    async fn handler_refs(handler: &Handler, n: usize) {
        for _ in 0..1000 {
            if Arc::strong_count(handler) == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("handler refs: {} (want {n})", Arc::strong_count(handler));
    }

    fn start(handler: &Handler, drain: &Drain) -> (DuplexStream, tokio::task::JoinHandle<()>) {
        let (client, server) = tokio::io::duplex(1 << 16);
        let guard = StallGuard::new(server, None);
        let stall = guard.state();
        let mut builder = http1::Builder::new();
        builder.writev(true);
        let task = tokio::spawn({
            let (handler, watch) = (handler.clone(), drain.watcher());
            async move {
                let peer = "127.0.0.1:1".parse().unwrap();
                serve(
                    Rewind::new(guard, &[]),
                    peer,
                    &builder,
                    handler,
                    watch,
                    stall,
                    None,
                )
                .await
            }
        });
        (client, task)
    }

    /// Sends a watch request and waits until its head is read and hyper has let go of the
    /// connection; returns the watch's event sender.
    async fn open_watch(
        client: &mut DuplexStream,
        streams: &mut mpsc::UnboundedReceiver<mpsc::Sender<Sent>>,
        handler: &Handler,
    ) -> mpsc::Sender<Sent> {
        client
            .write_all(b"GET /watch HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let events = streams.recv().await.unwrap();
        let head = read_until(client, b"\r\n\r\n").await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("transfer-encoding: chunked\r\n"), "{head}");
        // hyper's connection (and with it its buffers and its service) is gone while the
        // watch is open.
        handler_refs(handler, 2).await;
        events
    }

    #[tokio::test]
    async fn a_watch_leaves_hyper_after_its_head_and_the_connection_returns_to_hyper_after_it() {
        let (handler, mut streams) = handler();
        let drain = Drain::new();
        let (mut client, task) = start(&handler, &drain);

        let events = open_watch(&mut client, &mut streams, &handler).await;

        events
            .send(Ok(Frame::data(Bytes::from_static(
                b"{\"type\":\"ADDED\"}\n",
            ))))
            .await
            .unwrap();
        assert_eq!(
            read_until(&mut client, b"\r\n").await,
            "11\r\n{\"type\":\"ADDED\"}\n\r\n"
        );
        drop(events);
        assert_eq!(read_until(&mut client, b"0\r\n\r\n").await, "0\r\n\r\n");

        // Keep-alive: the next request on the same connection is hyper's again.
        client
            .write_all(b"GET /other HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let resp = read_until(&mut client, b"\r\n\r\nok").await;
        assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
        assert!(resp.contains("content-length: 2\r\n"), "{resp}");
        assert_eq!(
            Arc::strong_count(&handler),
            3,
            "hyper serves the connection"
        );
        drop(client);
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the connection ends with the client")
            .unwrap();
    }

    #[tokio::test]
    async fn a_client_that_leaves_a_detached_watch_ends_it_and_a_pipelined_request_is_served_after_it(
    ) {
        let (handler, mut streams) = handler();
        let drain = Drain::new();

        // Gone: the watch's body is dropped (its sender sees the receiver closed) and the
        // connection's task ends.
        let (mut client, task) = start(&handler, &drain);
        let events = open_watch(&mut client, &mut streams, &handler).await;
        drop(client);
        tokio::time::timeout(Duration::from_secs(10), events.closed())
            .await
            .expect("the body is dropped when the client goes");
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the connection's task ends")
            .unwrap();

        // Pipelined behind the watch: answered once the watch ends, in order.
        let (mut client, task) = start(&handler, &drain);
        let events = open_watch(&mut client, &mut streams, &handler).await;
        client
            .write_all(b"GET /next HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        events
            .send(Ok(Frame::data(Bytes::from_static(b"e\n"))))
            .await
            .unwrap();
        drop(events);
        let rest = read_until(&mut client, b"\r\n\r\nok").await;
        let next = rest.find("HTTP/1.1 200 OK").expect(&rest);
        assert_eq!(&rest[..next], "2\r\ne\n\r\n0\r\n\r\n");
        drop(client);
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_watch_request_with_a_body_stays_with_hyper() {
        let (handler, mut streams) = handler();
        let drain = Drain::new();
        let (mut client, _task) = start(&handler, &drain);
        client
            .write_all(b"GET /watch HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello")
            .await
            .unwrap();
        let events = streams.recv().await.unwrap();
        read_until(&mut client, b"\r\n\r\n").await;
        events
            .send(Ok(Frame::data(Bytes::from_static(b"e\n"))))
            .await
            .unwrap();
        assert_eq!(read_until(&mut client, b"e\n\r\n").await, "2\r\ne\n\r\n");
        // hyper still owns the connection (and its service) while the watch streams.
        assert_eq!(Arc::strong_count(&handler), 3);
    }

    #[tokio::test]
    async fn the_drain_lets_hyper_flush_a_closing_connections_last_response() {
        let (handler, _streams) = handler();
        let drain = Drain::new();
        let (mut client, task) = start(&handler, &drain);
        client
            .write_all(b"GET /big HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        // The head is out and the rest waits in hyper: the socket holds 64 KiB.
        let head = read_until(&mut client, b"\r\n\r\n").await;
        let draining = tokio::spawn(drain.run(Duration::from_secs(30)));
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut rest))
            .await
            .expect("the connection closes")
            .unwrap();
        let body_start = head.find("\r\n\r\n").unwrap() + 4;
        assert_eq!(head.len() - body_start + rest.len(), BIG, "the whole body");
        task.await.unwrap();
        draining.await.unwrap();
    }

    #[tokio::test]
    async fn the_drain_closes_a_detached_watchs_connection_after_its_end() {
        let (handler, mut streams) = handler();
        let drain = Drain::new();
        let (mut client, task) = start(&handler, &drain);
        let events = open_watch(&mut client, &mut streams, &handler).await;
        let draining = tokio::spawn(drain.run(Duration::from_secs(30)));
        // The hub ends cached watches at the drain; here the test does.
        drop(events);
        assert_eq!(read_until(&mut client, b"0\r\n\r\n").await, "0\r\n\r\n");
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut rest))
            .await
            .expect("the connection closes")
            .unwrap();
        assert!(rest.is_empty(), "{rest:?}");
        task.await.unwrap();
        draining.await.unwrap();
    }
}

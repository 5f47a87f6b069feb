//! The HTTP/2 server, written on the h2 crate.
//!
//! hyper's HTTP/2 server runs one task per stream that polls the response body and hands
//! its frames to h2. For a watch that is a wake-up, a trip through the scheduler and
//! several polls per event and per stream, about ten times the cost of the connection's
//! write (docs/benchmarks.md, issue 18). Here the server owns each stream's `SendStream`,
//! so while a cached watch's stream is idle the fan-out hands an event's frame to h2
//! itself (the express lane, `express.rs`): h2 queues it and wakes the connection's task,
//! which writes the frames of every stream the event reached in one write (`coalesce.rs`).
//!
//! Everything else is what hyper's server does, so a client sees the same frames: the
//! same SETTINGS, a `date` field and a `content-length` from a body of known size on every
//! response, connection-specific fields dropped, a body's frames sent as flow control
//! allows, RST_STREAM(INTERNAL_ERROR) when a body fails, a service call dropped when the
//! client resets its stream, GOAWAY on drain, and keep-alive PINGs
//! (docs/operations.md).

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use ::h2::server::{Connection, SendResponse};
use ::h2::{Reason, SendStream};
use bytes::{Buf, Bytes};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response};
use http_body::Body as _;
use tokio::io::{AsyncRead, AsyncWrite};

use super::coalesce::{Coalesced, Flusher, TRIM_PERIOD};
use super::handler::{Handler, HandlerFuture};
use super::rewind::Rewind;
use super::stall::StallState;
use crate::auth::x509::PeerCert;
use crate::body::{Body, H2RequestBody, ReadActivity, RequestBody};
use crate::drain::DrainWatch;
use crate::lane::{Detachable, Sent, Sink};

/// hyper's defaults for its HTTP/2 server (`hyper::proto::h2::server::Config`), so that
/// the SETTINGS a client sees are the ones it saw before this server was written.
const INITIAL_WINDOW: u32 = 1024 * 1024;
const MAX_FRAME_SIZE: u32 = 16 * 1024;
const MAX_HEADER_LIST_SIZE: u32 = 16 * 1024;
const MAX_SEND_BUFFER: usize = 400 * 1024;
const MAX_LOCAL_ERROR_RESETS: usize = 1024;

/// A PING this long after the client last sent a request (or answered the previous PING);
/// no answer within [`PING_TIMEOUT`] closes the connection (hyper's `keep_alive_interval`
/// and `keep_alive_timeout` as the listener set them, with its `keep_alive_while_idle`).
const PING_INTERVAL: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a connection's client preface may take: kube-apiserver's, Go's HTTP/2 server
/// (`x/net/http2`, `serverConn.readPreface`, `prefaceTimeout`), drops the connection after
/// 10 s ("timeout waiting for client preface"); hyper's waits without a bound.
const PREFACE_TIMEOUT: Duration = Duration::from_secs(10);

/// Once this many bytes of the frames the express lane handed to h2 wait for the client's
/// flow-control window or the socket, the lane hands over no more (so at most this plus
/// one event wait): the events queue for the stream's task, which waits for capacity as hyper does, and a slow client goes the
/// usual way to lagging and the history (docs/watch.md).
const LANE_MAX_IN_FLIGHT: usize = 64 * 1024;

/// Numbers the connections, for the express lane's grouping (`Sink::group`); 0 is left to
/// sinks alone on their connection.
static NEXT_GROUP: AtomicU64 = AtomicU64::new(1);

/// How this server's connections are set up.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub max_concurrent_streams: u32,
}

fn builder(settings: Settings) -> ::h2::server::Builder {
    let mut b = ::h2::server::Builder::new();
    b.initial_window_size(INITIAL_WINDOW)
        .initial_connection_window_size(INITIAL_WINDOW)
        .max_frame_size(MAX_FRAME_SIZE)
        .max_header_list_size(MAX_HEADER_LIST_SIZE)
        .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS))
        .max_send_buffer_size(MAX_SEND_BUFFER)
        .max_concurrent_streams(settings.max_concurrent_streams);
    b
}

/// A frame's bytes as h2 holds them until the connection has written them. Frames the
/// express lane hands over count against their stream's bytes in flight until then.
pub struct OutBuf {
    bytes: Bytes,
    counted: Option<(Arc<AtomicUsize>, usize)>,
}

impl OutBuf {
    fn plain(bytes: Bytes) -> Self {
        OutBuf {
            bytes,
            counted: None,
        }
    }

    fn counted(bytes: Bytes, in_flight: &Arc<AtomicUsize>) -> Self {
        let len = bytes.len();
        in_flight.fetch_add(len, Ordering::AcqRel);
        OutBuf {
            bytes,
            counted: Some((in_flight.clone(), len)),
        }
    }
}

impl Drop for OutBuf {
    fn drop(&mut self) {
        if let Some((in_flight, len)) = self.counted.take() {
            in_flight.fetch_sub(len, Ordering::AcqRel);
        }
    }
}

impl Buf for OutBuf {
    fn remaining(&self) -> usize {
        self.bytes.remaining()
    }

    fn chunk(&self) -> &[u8] {
        self.bytes.chunk()
    }

    fn advance(&mut self, cnt: usize) {
        self.bytes.advance(cnt)
    }
}

/// Serves one HTTP/2 connection until it closes, the drain's GOAWAY has let its streams
/// finish, or the drain's deadline cuts it.
#[allow(clippy::too_many_arguments)]
pub(super) async fn serve<T>(
    io: Rewind<Coalesced<T>>,
    flusher: Flusher<T>,
    peer: SocketAddr,
    settings: Settings,
    handler: Handler,
    drain: DrainWatch,
    stall: Arc<StallState>,
    cert: Option<Arc<PeerCert>>,
) where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let stopped = drain.stopped();
    tokio::pin!(stopped);
    // The client's preface, within kube-apiserver's bound. On a plain connection the
    // listener's sniff has read it already; over TLS, ALPN chose h2 before the client sent
    // a byte of it, and h2's handshake would wait for it forever (as hyper's did): a
    // client that completes TLS and says nothing more must not hold its socket for good.
    let handshake = builder(settings).handshake::<_, OutBuf>(io);
    let handshake = tokio::time::timeout(PREFACE_TIMEOUT, handshake);
    let mut conn = tokio::select! {
        h = handshake => match h {
            Ok(Ok(conn)) => conn,
            Ok(Err(err)) => {
                tracing::debug!(%peer, error = %err, "HTTP/2 handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%peer, "timeout waiting for client preface");
                return;
            }
        },
        _ = &mut stopped => return,
    };
    // The handshake's SETTINGS are buffered: written with the connection's first poll.
    let mut ping = conn.ping_pong().map(KeepAlive::new);
    // This connection's streams' group on the express lane (`Sink::group`).
    let group = NEXT_GROUP.fetch_add(1, Ordering::Relaxed);
    let last_read = Arc::new(LastRead::new());
    let draining = drain.draining();
    tokio::pin!(draining);
    let mut graceful = false;
    let mut deferred = false;
    let mut trim = Trim::default();
    loop {
        tokio::select! {
            res = poll_fn(|cx| {
                let res = accept(&mut conn, cx, &handler, &cert, &last_read, group);
                if res.is_pending() && !deferred && flusher.has_buffered() {
                    // The same event's other frames are being handed to h2 right now (by
                    // the dispatch through the lane, or by stream tasks it woke): go once
                    // round the run queue (a self-wake is a yield in tokio) so that they
                    // join this write instead of each waking the connection for a write
                    // of its own.
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
                trim.poll(cx, &flusher);
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
            () = poll_fn(|cx| match ping.as_mut() {
                Some(p) => p.poll(cx, &last_read),
                None => Poll::Pending,
            }) => {
                tracing::debug!(%peer, "keep-alive timed out, closing connection");
                conn.abrupt_shutdown(Reason::NO_ERROR);
                ping = None;
            }
            // GOAWAY, then the open streams finish.
            _ = &mut draining, if !graceful => {
                conn.graceful_shutdown();
                graceful = true;
            }
            _ = &mut stopped => {
                tracing::debug!(%peer, "connection cut at the drain deadline");
                break;
            }
        }
    }
}

/// Drives the connection: accepts its new streams (each served by a task of its own)
/// until it has none ready. `Ready` when the connection is over.
fn accept<T>(
    conn: &mut Connection<T, OutBuf>,
    cx: &mut Context<'_>,
    handler: &Handler,
    cert: &Option<Arc<PeerCert>>,
    last_read: &Arc<LastRead>,
    group: u64,
) -> Poll<Result<(), ::h2::Error>>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        match conn.poll_accept(cx) {
            Poll::Ready(Some(Ok((req, respond)))) => {
                last_read.now();
                // The call's future (boxed, with the request in it) is made here, so the
                // stream's task, which a watch keeps for its whole life, is not sized by
                // the request (docs/watch.md, memory per idle watcher).
                let call = handler(request(req, cert, last_read));
                tokio::spawn(serve_stream(call, respond, group));
            }
            Poll::Ready(Some(Err(err))) => return Poll::Ready(Err(err)),
            Poll::Ready(None) => return Poll::Ready(Ok(())),
            Poll::Pending => return Poll::Pending,
        }
    }
}

/// h2's request as the stack takes it: the body is the stream's DATA frames, sized by its
/// `content-length` as hyper sizes it, each read counting for the keep-alive; a TLS
/// client's certificate rides along.
fn request(
    req: Request<::h2::RecvStream>,
    cert: &Option<Arc<PeerCert>>,
    last_read: &Arc<LastRead>,
) -> Request<RequestBody> {
    let content_length = content_length(req.headers());
    let activity: Arc<dyn ReadActivity> = last_read.clone();
    let mut req =
        req.map(|recv| RequestBody::H2(H2RequestBody::new(recv, content_length, activity)));
    if let Some(cert) = cert {
        req.extensions_mut().insert(cert.clone());
    }
    req
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    let mut values = headers.get_all(header::CONTENT_LENGTH).iter();
    let first = values.next()?.to_str().ok()?.trim().parse::<u64>().ok()?;
    // Several values must agree (h2 itself rejects a request whose values differ).
    values
        .all(|v| v.to_str().ok().and_then(|v| v.trim().parse().ok()) == Some(first))
        .then_some(first)
}

/// One stream: the service's answer, unless the client resets the stream first (the call
/// is dropped, as hyper drops it), then the response's head and body.
async fn serve_stream(call: HandlerFuture, mut respond: SendResponse<OutBuf>, group: u64) {
    // The call's future is gone once it has answered: a watch's task holds only its body
    // and its stream from then on.
    let resp = tokio::select! {
        resp = call => resp,
        reason = poll_fn(|cx| respond.poll_reset(cx)) => {
            tracing::debug!(?reason, "stream reset before its response");
            return;
        }
    };
    let (mut parts, body) = resp.into_parts();
    let lane = parts.extensions.remove::<Detachable>().and_then(|d| d.lane);
    let end = body.is_end_stream();
    prepare_head(&mut parts.headers, &body, end);
    let head = Response::from_parts(parts, ());
    let stream = match respond.send_response(head, end) {
        Ok(stream) => stream,
        Err(err) => {
            tracing::debug!(error = %err, "the response's head could not be sent");
            respond.send_reset(Reason::INTERNAL_ERROR);
            return;
        }
    };
    if end {
        return;
    }
    let sink = Arc::new(StreamSink::new(stream, group));
    if let Some(lane) = lane {
        lane.connect(sink.clone());
    }
    pipe(body, &sink).await;
}

/// The head's fields as hyper's server sends them (`proto::h2::strip_connection_headers`,
/// `H2Stream::poll2`): none of the connection-specific fields HTTP/2 forbids (RFC 9113
/// §8.2.2; h2 would refuse the head), a `date` unless the response has one, and a
/// `content-length` for a non-empty body of known size.
fn prepare_head(headers: &mut HeaderMap, body: &Body, end: bool) {
    for name in [
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        if headers.remove(&name).is_some() {
            tracing::warn!("Connection header illegal in HTTP/2: {}", name.as_str());
        }
    }
    if headers.remove(header::TE).is_some() {
        tracing::warn!("TE headers illegal in HTTP/2 responses");
    }
    if let Some(connection) = headers.remove(header::CONNECTION) {
        tracing::warn!("Connection header illegal in HTTP/2: connection");
        if let Ok(names) = connection.to_str() {
            for name in names.split(',') {
                headers.remove(name.trim());
            }
        }
    }
    if !headers.contains_key(header::DATE) {
        if let Ok(date) = HeaderValue::from_str(&httpdate::fmt_http_date(SystemTime::now())) {
            headers.insert(header::DATE, date);
        }
    }
    if let (false, Some(len)) = (end, body.size_hint().exact()) {
        if !headers.contains_key(header::CONTENT_LENGTH) {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        }
    }
}

/// A stream's `SendStream`, shared by the task that streams its body and, while that task
/// is idle, the express lane (`express.rs`).
pub struct StreamSink {
    state: Mutex<SinkState>,
    /// Bytes the lane handed to h2 that the connection has not written yet.
    in_flight: Arc<AtomicUsize>,
    /// Its connection (`Sink::group`).
    group: u64,
}

struct SinkState {
    stream: SendStream<OutBuf>,
    /// The task is idle: all it took from the body is with h2, and the body waits. Shut
    /// for good once the stream is over.
    open: bool,
}

impl StreamSink {
    fn new(stream: SendStream<OutBuf>, group: u64) -> Self {
        StreamSink {
            state: Mutex::new(SinkState {
                stream,
                open: false,
            }),
            in_flight: Arc::new(AtomicUsize::new(0)),
            group,
        }
    }

    fn state(&self) -> MutexGuard<'_, SinkState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Sink for StreamSink {
    fn group(&self) -> u64 {
        self.group
    }

    fn try_send(&self, frame: &Bytes) -> Sent {
        if frame.is_empty() {
            return Sent::All;
        }
        let mut st = self.state();
        if !st.open {
            return Sent::Nothing;
        }
        if self.in_flight.load(Ordering::Acquire) >= LANE_MAX_IN_FLIGHT {
            // The client or the socket is behind: the task takes over, waiting for
            // capacity as it does for any body.
            st.open = false;
            return Sent::Nothing;
        }
        // h2 queues the frame behind everything the stream sent before, asks for the
        // window it needs, and wakes the connection's task to write it.
        let buf = OutBuf::counted(frame.clone(), &self.in_flight);
        match st.stream.send_data(buf, false) {
            Ok(()) => Sent::All,
            Err(_) => {
                // Reset by the client or the connection is gone: the task meets it.
                st.open = false;
                Sent::Nothing
            }
        }
    }
}

/// Closes the lane when the stream is over, however it ends.
struct SinkGuard<'a>(&'a StreamSink);

impl Drop for SinkGuard<'_> {
    fn drop(&mut self) {
        self.0.state().open = false;
    }
}

/// Streams `body` on the stream until it ends, fails (RST_STREAM, `reset_reason`) or the
/// client resets the stream. In the order of hyper 1.12's `PipeToSendStream`: a frame is
/// taken from the body first, and only then is send capacity asked for and awaited (asking
/// while idle would hold a byte of the client's connection window per idle stream, hyper
/// #4003); at most that one frame waits here, and everything the stream has waiting in h2
/// (from this task or the lane) has found its window before it is sent. While the body
/// waits and no frame is held, the lane is open.
async fn pipe(mut body: Body, sink: &StreamSink) {
    let _closing = SinkGuard(sink);
    // A frame taken from the body and waiting for send capacity, and whether it ends it.
    let mut held: Option<(Bytes, bool)> = None;
    poll_fn(|cx| loop {
        {
            let mut st = sink.state();
            // Running: nothing the lane sends may slip between this task's frames.
            st.open = false;
            if let Poll::Ready(reason) = st.stream.poll_reset(cx) {
                tracing::debug!(?reason, "stream reset by the client");
                return Poll::Ready(());
            }
            if let Some((data, end)) = held.take() {
                while st.stream.capacity() == 0 {
                    match st.stream.poll_capacity(cx) {
                        Poll::Ready(Some(Ok(_))) => {}
                        Poll::Ready(Some(Err(_))) | Poll::Ready(None) => {
                            return Poll::Ready(());
                        }
                        Poll::Pending => {
                            held = Some((data, end));
                            return Poll::Pending;
                        }
                    }
                }
                if st.stream.send_data(OutBuf::plain(data), end).is_err() || end {
                    return Poll::Ready(());
                }
                continue;
            }
        }
        // The body is polled without the sink's lock: its producer takes the body's queue
        // lock and then this one (`watch::queue::Handoff::deliver`).
        match Pin::new(&mut body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    let end = body.is_end_stream();
                    let mut st = sink.state();
                    if data.is_empty() {
                        // An empty frame needs no capacity (hyper sends it as is).
                        if st.stream.send_data(OutBuf::plain(data), end).is_err() || end {
                            return Poll::Ready(());
                        }
                    } else {
                        st.stream.reserve_capacity(1);
                        held = Some((data, end));
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        let mut st = sink.state();
                        st.stream.reserve_capacity(0);
                        let _ = st.stream.send_trailers(trailers);
                    }
                    return Poll::Ready(());
                }
            },
            Poll::Ready(Some(Err(err))) => {
                tracing::debug!(error = %err, "response body failed");
                sink.state().stream.send_reset(reset_reason(&*err));
                return Poll::Ready(());
            }
            Poll::Ready(None) => {
                let _ = sink
                    .state()
                    .stream
                    .send_data(OutBuf::plain(Bytes::new()), true);
                return Poll::Ready(());
            }
            Poll::Pending => {
                // Idle: all it took is with h2, and the body registered for its next
                // frame.
                sink.state().open = true;
                return Poll::Pending;
            }
        }
    })
    .await
}

/// The reset a failed body's stream gets, as hyper chooses it: the reason of an h2 error
/// in the error's chain (a forwarded stream the upstream reset), else INTERNAL_ERROR.
fn reset_reason(err: &(dyn std::error::Error + 'static)) -> Reason {
    let mut cause = Some(err);
    while let Some(e) = cause {
        if let Some(reason) = e.downcast_ref::<::h2::Error>().and_then(|h| h.reason()) {
            return reason;
        }
        cause = e.source();
    }
    Reason::INTERNAL_ERROR
}

/// Releases the connection's spare write-buffer capacity once a whole trim period passed
/// without a write (`coalesce::Flusher::trim`): a timer armed only while there is spare
/// capacity, polled with the connection.
#[derive(Default)]
struct Trim {
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Trim {
    fn poll<T: AsyncWrite + Unpin>(&mut self, cx: &mut Context<'_>, flusher: &Flusher<T>) {
        loop {
            let Some(sleep) = self.sleep.as_mut() else {
                if !flusher.holds_spare() {
                    return;
                }
                self.sleep = Some(Box::pin(tokio::time::sleep(TRIM_PERIOD)));
                continue;
            };
            if sleep.as_mut().poll(cx).is_pending() {
                return;
            }
            if flusher.trim() {
                sleep.as_mut().reset(Instant::now() + TRIM_PERIOD);
            } else {
                self.sleep = None;
                return;
            }
        }
    }
}

/// When the client last sent something that counts for the keep-alive: a request's head
/// (the accept loop), its body's data and trailers (`H2RequestBody`, on the request's
/// task), or the answer to a PING.
struct LastRead {
    base: Instant,
    /// Since `base`, in milliseconds.
    at: AtomicU64,
}

impl LastRead {
    fn new() -> Self {
        LastRead {
            base: Instant::now(),
            at: AtomicU64::new(0),
        }
    }

    fn now(&self) {
        let ms = self.base.elapsed().as_millis() as u64;
        self.at.store(ms, Ordering::Relaxed);
    }

    fn get(&self) -> Instant {
        self.base + Duration::from_millis(self.at.load(Ordering::Relaxed))
    }
}

impl ReadActivity for LastRead {
    fn record(&self) {
        self.now();
    }
}

/// hyper's keep-alive for a server connection (`proto::h2::ping`): a PING once the client
/// has sent nothing for [`PING_INTERVAL`] (see [`LastRead`]; h2 answers the client's own
/// PINGs), and the connection closed without its answer within [`PING_TIMEOUT`].
struct KeepAlive {
    ping_pong: ::h2::PingPong,
    sleep: Pin<Box<tokio::time::Sleep>>,
    waiting: bool,
}

impl KeepAlive {
    fn new(ping_pong: ::h2::PingPong) -> Self {
        KeepAlive {
            ping_pong,
            sleep: Box::pin(tokio::time::sleep(PING_INTERVAL)),
            waiting: false,
        }
    }

    /// `Ready` when a PING went unanswered. `last_read` is when the client last sent a
    /// request's head (or answered).
    fn poll(&mut self, cx: &mut Context<'_>, last_read: &LastRead) -> Poll<()> {
        loop {
            if self.waiting {
                match self.ping_pong.poll_pong(cx) {
                    Poll::Ready(Ok(_)) => {
                        self.waiting = false;
                        last_read.now();
                        continue;
                    }
                    // The connection is ending: its own poll reports why.
                    Poll::Ready(Err(_)) => return Poll::Pending,
                    Poll::Pending => {}
                }
                return self.sleep.as_mut().poll(cx);
            }
            let due = last_read.get() + PING_INTERVAL;
            if self.sleep.deadline() != due {
                self.sleep.as_mut().reset(due);
            }
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if self.ping_pong.send_ping(::h2::Ping::opaque()).is_err() {
                return Poll::Pending;
            }
            self.waiting = true;
            self.sleep.as_mut().reset(Instant::now() + PING_TIMEOUT);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    /// hyper's `strip_connection_headers` and `H2Stream::poll2`: connection-specific
    /// fields (and those `Connection` names) go, a `date` and a body's known length come.
    #[test]
    fn a_head_gets_hypers_fields() {
        let mut h = head(&[
            ("content-type", "application/json"),
            ("connection", "x-hop, keep-alive"),
            ("x-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-connection", "close"),
            ("te", "trailers"),
        ]);
        prepare_head(&mut h, &crate::body::full("four"), false);
        let names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["content-type", "date", "content-length"]);
        assert_eq!(h["content-length"], "4");
        let date = h["date"].to_str().unwrap();
        assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
        assert!(date.ends_with(" GMT"), "{date}");
    }

    /// A response's own `date` and `content-length` stay; an empty body gets no
    /// `content-length: 0` (hyper adds it only to a body that has frames to send).
    #[test]
    fn a_heads_own_fields_stay_and_an_empty_body_gets_no_length() {
        let mut h = head(&[
            ("date", "Sat, 28 Nov 2026 06:00:00 GMT"),
            ("content-length", "9"),
        ]);
        prepare_head(&mut h, &crate::body::full("four"), false);
        assert_eq!(h["date"], "Sat, 28 Nov 2026 06:00:00 GMT");
        assert_eq!(h["content-length"], "9");
        let mut h = HeaderMap::new();
        prepare_head(&mut h, &crate::body::empty(), true);
        assert!(!h.contains_key("content-length"));
        assert!(h.contains_key("date"));
    }

    /// A stream's task lives as long as its watch: its size counts against the memory per
    /// idle watcher (docs/watch.md), so it must not hold the request or the call's state.
    #[tokio::test]
    async fn a_streams_task_is_small() {
        let (c, s) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move {
            let mut conn = ::h2::server::Builder::new()
                .handshake::<_, OutBuf>(s)
                .await
                .unwrap();
            let (_req, respond) = conn.accept().await.unwrap().unwrap();
            (conn, respond)
        });
        let (client, client_conn) = ::h2::client::handshake(c).await.unwrap();
        tokio::spawn(client_conn);
        let mut client = client.ready().await.unwrap();
        let req = Request::get("http://x/").body(()).unwrap();
        let (_resp, _) = client.send_request(req, true).unwrap();
        let (_conn, respond) = server.await.unwrap();
        let call: HandlerFuture = Box::pin(async { Response::new(crate::body::empty()) });
        let task = serve_stream(call, respond, 1);
        let size = std::mem::size_of_val(&task);
        println!("a stream's task: {size} bytes");
        assert!(size <= 352, "a stream's task takes {size} bytes");
    }

    type Pipe = tokio::io::DuplexStream;

    /// A connection `serve`d over an in-memory pipe (buffered as `wrap` sets it up, as a
    /// plain or a TLS connection is): the client's end, the serving task, and the drain
    /// (dropping it stops the connection).
    fn served(
        handler: Handler,
        wrap: fn(Pipe) -> (Coalesced<Pipe>, Flusher<Pipe>),
    ) -> (Pipe, tokio::task::JoinHandle<()>, crate::drain::Drain) {
        let (client, server) = tokio::io::duplex(1 << 20);
        let (io, flusher) = wrap(server);
        let drain = crate::drain::Drain::new();
        let stall = super::super::stall::StallGuard::new((), None).state();
        let task = tokio::spawn(serve(
            Rewind::new(io, &[]),
            flusher,
            "127.0.0.1:1".parse().unwrap(),
            Settings {
                max_concurrent_streams: 100,
            },
            handler,
            drain.watcher(),
            stall,
            None,
        ));
        (client, task, drain)
    }

    fn empty_handler() -> Handler {
        Arc::new(|_| Box::pin(async { Response::new(crate::body::empty()) }))
    }

    /// The next frame of `type` from the server, skipping others: its payload and when it
    /// came. `None` when the connection closes first.
    async fn next_frame(io: &mut Pipe, ty: u8) -> Option<(Vec<u8>, Instant)> {
        use tokio::io::AsyncReadExt;
        // Bounded (on paused time), so a server that never sends it fails the test.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let mut head = [0u8; 9];
            tokio::time::timeout_at(deadline, io.read_exact(&mut head))
                .await
                .expect("the frame within 120 s")
                .ok()?;
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0; len];
            io.read_exact(&mut payload).await.ok()?;
            if head[3] == ty {
                return Some((payload, Instant::now()));
            }
        }
    }

    /// hyper's keep-alive, on paused time: a PING (h2's opaque payload) 30 s after the
    /// client last sent something, and GOAWAY and the end of the connection when it is
    /// not answered within 20 s.
    #[tokio::test(start_paused = true)]
    async fn an_unanswered_keep_alive_ping_closes_the_connection() {
        use tokio::io::AsyncWriteExt;
        let start = Instant::now();
        let (mut client, served, _drain) = served(empty_handler(), super::super::coalesce::wrap);
        client
            .write_all(super::super::coalesce::H2_PREFACE)
            .await
            .unwrap();
        // An empty SETTINGS frame.
        client
            .write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0])
            .await
            .unwrap();
        let (payload, pinged) = next_frame(&mut client, 6).await.expect("a PING");
        assert_eq!(payload, [0x3b, 0x7c, 0xdb, 0x7a, 0x0b, 0x87, 0x16, 0xb4]);
        let after = pinged - start;
        assert!(
            after >= PING_INTERVAL && after < PING_INTERVAL + Duration::from_secs(1),
            "the PING came {after:?} after the connection's start"
        );
        let (_, closed) = next_frame(&mut client, 7).await.expect("a GOAWAY");
        let waited = closed - pinged;
        assert!(
            waited >= PING_TIMEOUT && waited < PING_TIMEOUT + Duration::from_secs(1),
            "GOAWAY {waited:?} after the unanswered PING"
        );
        served.await.unwrap();
        assert_eq!(
            next_frame(&mut client, 6).await,
            None,
            "the connection is closed"
        );
    }

    /// A client that says nothing after ALPN chose h2 (or stops inside its preface) is
    /// let go after 10 s, on paused time, as kube-apiserver lets it go.
    #[tokio::test(start_paused = true)]
    async fn a_client_without_its_preface_is_let_go_after_ten_seconds() {
        use tokio::io::AsyncWriteExt;
        for sent in [&b""[..], &super::super::coalesce::H2_PREFACE[..10]] {
            let start = Instant::now();
            let (mut client, served, _drain) =
                served(empty_handler(), super::super::coalesce::wrap_flushing);
            client.write_all(sent).await.unwrap();
            tokio::time::timeout(PREFACE_TIMEOUT * 4, served)
                .await
                .unwrap_or_else(|_| panic!("still waiting for the preface after {sent:?}"))
                .unwrap();
            let after = start.elapsed();
            assert!(
                after >= PREFACE_TIMEOUT && after < PREFACE_TIMEOUT + Duration::from_secs(1),
                "let go {after:?} after {sent:?}"
            );
        }
    }

    /// One raw HTTP/2 frame.
    fn raw_frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = (payload.len() as u32).to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], ty, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// A GET's HEADERS (END_STREAM, END_HEADERS): `:method GET` and `:scheme http` from
    /// HPACK's static table, `:authority` and `:path` as literals.
    fn raw_get(stream: u32, path: &str) -> Vec<u8> {
        let mut block = vec![0x82, 0x86, 0x01, 1, b'x', 0x04, path.len() as u8];
        block.extend_from_slice(path.as_bytes());
        raw_frame(1, 0x5, stream, &block)
    }

    /// A body that never yields a frame: a watch with nothing to say.
    struct Idle;

    impl http_body::Body for Idle {
        type Data = Bytes;
        type Error = crate::body::BoxError;
        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            Poll::Pending
        }
    }

    /// hyper #4003: a client that gives the connection window back only once it is used
    /// up (as some do) must get a whole window's worth of DATA even while other streams
    /// are idle. A stream that asked for send capacity before it had a frame would hold a
    /// byte of that window for as long as it stays idle, and the busy stream would stop one
    /// byte short of the update forever.
    #[tokio::test(start_paused = true)]
    async fn idle_streams_hold_none_of_the_connection_window() {
        use tokio::io::AsyncWriteExt;
        const BIG: usize = 70_000;
        const WINDOW: usize = 65_535;
        let handler: Handler = Arc::new(|req: Request<RequestBody>| {
            let body = match req.uri().path() {
                "/big" => crate::body::full(vec![b'x'; BIG]),
                _ => crate::body::boxed(Idle),
            };
            Box::pin(async move { Response::new(body) })
        });
        let (mut client, _served, _drain) = served(handler, super::super::coalesce::wrap);
        client
            .write_all(super::super::coalesce::H2_PREFACE)
            .await
            .unwrap();
        // The default windows: 65,535 bytes for the connection and for each stream.
        client.write_all(&raw_frame(4, 0, 0, &[])).await.unwrap();
        // Three idle streams, each answered (so each stream's task is running)...
        for id in [1, 3, 5] {
            client.write_all(&raw_get(id, "/idle")).await.unwrap();
            next_frame(&mut client, 1)
                .await
                .expect("the idle stream's head");
        }
        // ...then one with more to send than the connection window holds.
        client.write_all(&raw_get(7, "/big")).await.unwrap();
        let mut got = 0;
        let mut updated = false;
        while got < BIG {
            let Some((payload, _)) = next_frame(&mut client, 0).await else {
                panic!("the connection closed with {got} of {BIG} bytes sent");
            };
            got += payload.len();
            if got == WINDOW && !updated {
                // The whole window is used: only now give it back (connection, stream).
                let inc = (WINDOW as u32).to_be_bytes();
                client.write_all(&raw_frame(8, 0, 0, &inc)).await.unwrap();
                client.write_all(&raw_frame(8, 0, 7, &inc)).await.unwrap();
                updated = true;
            }
            assert!(
                got <= WINDOW || updated,
                "{got} bytes sent into a window of {WINDOW}"
            );
        }
        assert_eq!(got, BIG);
    }

    /// A connection's spare write-buffer capacity goes once it has written nothing for a
    /// whole trim period (on paused time): kept through the period of its last write,
    /// released at the end of the next.
    #[tokio::test(start_paused = true)]
    async fn a_quiet_connections_spare_buffer_is_released() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let (mut io, flusher) = super::super::coalesce::wrap(server);
        client
            .write_all(super::super::coalesce::H2_PREFACE)
            .await
            .unwrap();
        let mut preface = [0u8; 24];
        io.read_exact(&mut preface).await.unwrap();
        for _ in 0..100 {
            io.write_all(&[1u8; 1300]).await.unwrap();
        }
        poll_fn(|cx| flusher.poll_flush_buffer(cx)).await.unwrap();
        assert!(flusher.holds_spare());
        let start = Instant::now();
        let mut trim = Trim::default();
        tokio::time::timeout(
            TRIM_PERIOD * 4,
            poll_fn(|cx| {
                trim.poll(cx, &flusher);
                match flusher.holds_spare() {
                    true => Poll::Pending,
                    false => Poll::Ready(()),
                }
            }),
        )
        .await
        .expect("the spare capacity is released");
        let after = start.elapsed();
        assert!(
            after >= TRIM_PERIOD * 2 && after < TRIM_PERIOD * 3,
            "released {after:?} after the last write"
        );
    }

    /// A failed body's stream is reset with the reason of an h2 error in the failure's
    /// chain (a forwarded stream the upstream reset), else INTERNAL_ERROR, as hyper does.
    #[test]
    fn a_failed_bodys_reset_reason_is_hypers() {
        #[derive(Debug, thiserror::Error)]
        #[error("upstream body failed")]
        struct Wrapped(#[source] ::h2::Error);
        let upstream_reset = Wrapped(::h2::Error::from(Reason::CANCEL));
        assert_eq!(reset_reason(&upstream_reset), Reason::CANCEL);
        let other = std::io::Error::other("gone");
        assert_eq!(reset_reason(&other), Reason::INTERNAL_ERROR);
    }

    /// The lane's bytes in flight are counted until h2 drops the frame's buffer, however
    /// it is consumed.
    #[test]
    fn a_counted_buffer_is_in_flight_until_dropped() {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let mut a = OutBuf::counted(Bytes::from_static(b"hello"), &in_flight);
        let b = OutBuf::counted(Bytes::from_static(b"hi"), &in_flight);
        assert_eq!(in_flight.load(Ordering::Acquire), 7);
        a.advance(5);
        assert_eq!(a.remaining(), 0);
        assert_eq!(
            in_flight.load(Ordering::Acquire),
            7,
            "counted until dropped"
        );
        drop(a);
        assert_eq!(in_flight.load(Ordering::Acquire), 2);
        drop(b);
        drop(OutBuf::plain(Bytes::from_static(b"x")));
        assert_eq!(in_flight.load(Ordering::Acquire), 0);
    }
}

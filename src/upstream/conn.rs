//! Opening upstream connections: TCP and TLS from kube's config (ALPN decides HTTP/2 or
//! HTTP/1.1), hyper's client handshakes, and the count of open connections that
//! `--upstream-max-connections` bounds.
//!
//! A connection's place in the count ([`Slot`]) lives inside its socket ([`Counted`]):
//! whoever owns the socket (hyper's connection task, or an upgraded tunnel after a `101`)
//! keeps the place until the socket is dropped, so a tunnel counts as long as it lasts.

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::{Connection as _, HttpConnector};
use hyper_util::rt::TokioIo;
use kube::client::ConfigExt;
use pin_project_lite::pin_project;
use tokio::net::TcpStream;
use tower::Service;

use super::class::Class;
use super::error::{error_chain, UpstreamError};
use crate::metrics as m;

/// The socket of one upstream connection.
pub type Socket = Counted<MaybeHttpsStream<TokioIo<TcpStream>>>;

/// Which ALPN protocols a connector offers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Alpn {
    /// `h2` and `http/1.1`: HTTP/2 whenever the apiserver agrees (it always does over TLS).
    Any,
    /// `http/1.1` only, for requests that switch protocols (exec, attach, port-forward).
    Http1,
}

/// TCP + TLS from kube's config, for every endpoint (each keeps its own host name for
/// SNI and certificate checks, unless the kubeconfig sets `tls-server-name`).
pub struct Connector {
    any: HttpsConnector<HttpConnector>,
    http1: HttpsConnector<HttpConnector>,
    /// TCP connect and TLS handshake together.
    timeout: Duration,
}

impl Connector {
    pub fn new(config: &kube::Config, connect_timeout: Duration) -> anyhow::Result<Self> {
        let timeout = config
            .connect_timeout
            .map_or(connect_timeout, |t| t.min(connect_timeout));
        Ok(Self {
            any: https(config, timeout, Alpn::Any)?,
            http1: https(config, timeout, Alpn::Http1)?,
            timeout,
        })
    }

    /// A connected socket (TLS done) and whether ALPN chose HTTP/2. The slot is the
    /// socket's from now on.
    pub async fn connect(
        &self,
        uri: &Uri,
        alpn: Alpn,
        slot: Slot,
    ) -> Result<(Socket, bool), UpstreamError> {
        let mut svc = match alpn {
            Alpn::Any => self.any.clone(),
            Alpn::Http1 => self.http1.clone(),
        };
        let connecting = async {
            std::future::poll_fn(|cx| svc.poll_ready(cx))
                .await
                .map_err(|e| UpstreamError::Connect(error_chain(e.as_ref())))?;
            svc.call(uri.clone())
                .await
                .map_err(|e| UpstreamError::Connect(error_chain(e.as_ref())))
        };
        let stream = match tokio::time::timeout(self.timeout, connecting).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(UpstreamError::Connect(format!(
                    "no connection within {:?}",
                    self.timeout
                )))
            }
        };
        let h2 = stream.connected().is_negotiated_h2();
        Ok((
            Counted {
                inner: stream,
                slot,
            },
            h2,
        ))
    }
}

fn https(
    config: &kube::Config,
    timeout: Duration,
    alpn: Alpn,
) -> anyhow::Result<HttpsConnector<HttpConnector>> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(timeout));
    // kube's rustls config carries the CA bundle, client certificates (also those an
    // exec plugin returns) and insecure-skip-tls-verify.
    let tls = config.rustls_client_config()?;
    let mut builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        builder = builder
            .with_server_name_resolver(FixedServerNameResolver::new(name.clone().try_into()?));
    }
    Ok(match alpn {
        Alpn::Any => builder.enable_all_versions().wrap_connector(http),
        Alpn::Http1 => builder.enable_http1().wrap_connector(http),
    })
}

/// The bound on open connections, shared by every endpoint: `max` in all, of which
/// long-running requests from clients may hold `max - reserve`, so that short requests
/// (and the gateway's own watches) always find room.
pub struct Limits {
    max: usize,
    reserve: usize,
    counts: Mutex<[usize; 2]>,
}

impl Limits {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            reserve: reserve_for(max),
            counts: Mutex::new([0, 0]),
        })
    }

    /// The connections long-running requests from clients may hold.
    pub fn long_running_max(&self) -> usize {
        self.max - self.reserve
    }

    /// Connections open (or being opened) now, by class.
    pub fn open(&self) -> [usize; 2] {
        *self.counts.lock().expect("limits lock")
    }

    /// A place for one more connection of `class`, or which bound stands in the way.
    /// `internal` requests (the gateway's own) may use the reserve.
    pub fn reserve(
        self: &Arc<Self>,
        class: Class,
        internal: bool,
        endpoint: &str,
    ) -> Result<Slot, Full> {
        let mut counts = self.counts.lock().expect("limits lock");
        let total = counts[0] + counts[1];
        if total >= self.max {
            return Err(Full::Total);
        }
        if class == Class::LongRunning && !internal && counts[1] >= self.long_running_max() {
            return Err(Full::LongRunning);
        }
        counts[class.index()] += 1;
        drop(counts);
        metrics::gauge!(m::UPSTREAM_CONNECTIONS, "class" => class.as_str(), "endpoint" => endpoint.to_owned())
            .increment(1.0);
        Ok(Slot(Arc::new(SlotInner {
            limits: self.clone(),
            class,
            endpoint: endpoint.to_owned(),
            released: AtomicBool::new(false),
        })))
    }
}

/// Which bound refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// `--upstream-max-connections`: any idle connection may make room.
    Total,
    /// The long-running share: only an idle long-running connection makes room.
    LongRunning,
}

/// A tenth of the bound, at least one connection, is kept for short requests: enough for
/// a thousand short requests in flight over HTTP/2 when the bound is 100.
fn reserve_for(max: usize) -> usize {
    (max / 10).max(1).min(max.saturating_sub(1))
}

/// One connection's place in [`Limits`]. Clones share the place; it is given back once,
/// by [`Slot::release`] or when the last clone is dropped.
#[derive(Clone)]
pub struct Slot(Arc<SlotInner>);

struct SlotInner {
    limits: Arc<Limits>,
    class: Class,
    endpoint: String,
    released: AtomicBool,
}

impl Slot {
    /// Gives the place back now: an evicted idle connection that hyper is still closing
    /// no longer counts.
    pub fn release(&self) {
        self.0.release();
    }
}

impl SlotInner {
    fn release(&self) {
        if self.released.swap(true, Ordering::AcqRel) {
            return;
        }
        self.limits.counts.lock().expect("limits lock")[self.class.index()] -= 1;
        metrics::gauge!(m::UPSTREAM_CONNECTIONS, "class" => self.class.as_str(), "endpoint" => self.endpoint.clone())
            .decrement(1.0);
    }
}

impl Drop for SlotInner {
    fn drop(&mut self) {
        self.release();
    }
}

pin_project! {
    /// A socket that holds its connection's [`Slot`] for as long as it exists.
    pub struct Counted<T> {
        #[pin]
        inner: T,
        slot: Slot,
    }
}

impl<T: Read> Read for Counted<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.project().inner.poll_read(cx, buf)
    }
}

impl<T: Write> Write for Counted<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.project().inner.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.project().inner.poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_running_requests_leave_room_for_short_ones() {
        let limits = Limits::new(10);
        assert_eq!(limits.long_running_max(), 9);
        let long: Vec<_> = (0..9)
            .map(|_| {
                limits
                    .reserve(Class::LongRunning, false, "e")
                    .expect("room")
            })
            .collect();
        assert_eq!(
            limits.reserve(Class::LongRunning, false, "e").err(),
            Some(Full::LongRunning)
        );
        // The gateway's own watch may take the reserve; then nothing is left.
        let internal = limits
            .reserve(Class::LongRunning, true, "e")
            .expect("reserve");
        assert_eq!(
            limits.reserve(Class::Short, false, "e").err(),
            Some(Full::Total)
        );
        drop(internal);
        let short = limits
            .reserve(Class::Short, false, "e")
            .expect("short room");
        assert_eq!(limits.open(), [1, 9]);
        // Released once, however many clones and calls.
        let clone = short.clone();
        short.release();
        clone.release();
        drop(short);
        drop(clone);
        drop(long);
        assert_eq!(limits.open(), [0, 0]);
    }

    #[test]
    fn the_reserve_is_a_tenth_and_never_all() {
        assert_eq!(reserve_for(2), 1);
        assert_eq!(reserve_for(10), 1);
        assert_eq!(reserve_for(256), 25);
        assert_eq!(reserve_for(1000), 100);
    }
}

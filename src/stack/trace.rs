//! The request's span and log lines: tower-http's `Trace`, except that a watch the cache
//! serves is not wrapped in its response body.
//!
//! tower-http's trace body enters the request's span, times the frame and calls its
//! `on_body_chunk` for every frame it passes on. A watch's stream is nothing but frames,
//! for minutes: on a lone HTTP/2 delivery that wrapper (and the box around it) was about
//! 7 % of the instructions (docs/benchmarks.md, "Lone deliveries"). So for watches
//! ([`crate::request::Verb::Watch`], known before the call from the parsed request) this
//! layer does what `Trace` does around the call itself, with the same span (`span`), the
//! same events and the same targets, so that filters and log lines stay as they were:
//!
//! - `started processing request` (target `tower_http::trace::on_request`),
//! - `finished processing request`, with `latency` and `status`, when the head is ready
//!   (`tower_http::trace::on_response`),
//! - `end of stream`, with `stream_duration`, when the stream ends
//!   (`tower_http::trace::on_eos`): for a watch the cache serves, written by the watch's
//!   own body when it ends, with the reason it ended (`timeout`, `client_gone`, …; see
//!   `watch::body`), at no cost per frame; for a watch the gateway forwards (or answers
//!   itself), by [`EndOfStream`], a thin wrapper that only looks for the end.
//!
//! Every other request goes through tower-http's `Trace` unchanged.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tower::{Layer, Service};
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::{
    DefaultOnBodyChunk, DefaultOnEos, DefaultOnFailure, DefaultOnRequest, DefaultOnResponse, Trace,
};
use tracing::Instrument;

use super::BoxFuture;
use crate::body::{self, Body, BoxError};
use crate::proxy::headers::Source;
use crate::request::{Parsed, Verb};

type MakeSpan<B> = fn(&Request<B>) -> tracing::Span;

/// tower-http's `Trace` as the stack configures it.
type Traced<S, B> = Trace<
    S,
    SharedClassifier<ServerErrorsAsFailures>,
    MakeSpan<B>,
    DefaultOnRequest,
    DefaultOnResponse,
    DefaultOnBodyChunk,
    DefaultOnEos,
    DefaultOnFailure,
>;

/// The trace layer of the API stack (see the module's docs).
#[derive(Clone, Copy, Default)]
pub struct TraceLayer;

impl<S: Clone> Layer<S> for TraceLayer {
    type Service = TraceService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TraceService { inner }
    }
}

#[derive(Clone)]
pub struct TraceService<S> {
    inner: S,
}

/// tower-http's `Trace` around `inner`, as the stack had it.
fn traced<S, B>(inner: S) -> Traced<S, B> {
    tower_http::trace::TraceLayer::new_for_http()
        .make_span_with(super::span as MakeSpan<B>)
        // A 5xx is an answer like any other here (the upstream's 503, a panic's 500,
        // already logged where it happens): not an ERROR line per request.
        .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG))
        .layer(inner)
}

impl<S, B> Service<Request<B>> for TraceService<S>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: HttpBody + Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> BoxFuture {
        let inner = super::take(&mut self.inner);
        let watch = Parsed::of(&req).is_some_and(|p| p.api.verb == Verb::Watch);
        if !watch {
            let fut = traced(inner).call(req);
            return Box::pin(async move { fut.await.map(|resp| resp.map(body::boxed)) });
        }
        let span = super::span(&req);
        let start = Instant::now();
        span.in_scope(|| {
            tracing::debug!(target: "tower_http::trace::on_request", "started processing request")
        });
        let mut inner = inner;
        let fut = inner.call(req).instrument(span.clone());
        Box::pin(async move {
            let resp = fut.await?;
            span.in_scope(|| {
                tracing::debug!(
                    target: "tower_http::trace::on_response",
                    latency = %format_args!("{} ms", start.elapsed().as_millis()),
                    status = resp.status().as_u16(),
                    "finished processing request"
                )
            });
            let from_cache = Source::of(resp.headers()) == Some(Source::Cache);
            if from_cache {
                // The watch's body logs its own end (`watch::body`).
                return Ok(resp);
            }
            Ok(resp.map(|body| {
                body::boxed(EndOfStream {
                    inner: body,
                    span,
                    start,
                })
            }))
        })
    }
}

/// A forwarded watch's body: logs `end of stream` in the request's span when it ends,
/// as tower-http's trace body does, and nothing per frame.
struct EndOfStream {
    inner: Body,
    span: tracing::Span,
    start: Instant,
}

impl HttpBody for EndOfStream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            crate::logging::end_of_stream(&self.span, self.start.elapsed(), None);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::{Arc, Mutex};
    use tower::ServiceExt;

    /// A log sink for the test's subscriber.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A streamed body of two frames that records whether a span was entered while it
    /// was polled (tower-http's trace body enters the request's span for every frame).
    struct Frames {
        left: usize,
        polled_in_span: Arc<Mutex<Vec<bool>>>,
    }

    impl HttpBody for Frames {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            self.polled_in_span
                .lock()
                .unwrap()
                .push(!tracing::Span::current().is_none());
            if self.left == 0 {
                return Poll::Ready(None);
            }
            self.left -= 1;
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"{}\n")))))
        }
    }

    async fn watch_through_the_stack(source: Source) -> (String, Vec<bool>) {
        let polled = Arc::new(Mutex::new(Vec::new()));
        let p = polled.clone();
        let svc = tower::service_fn(move |_req: Request<String>| {
            let p = p.clone();
            async move {
                let mut resp = Response::new(body::boxed(Frames {
                    left: 2,
                    polled_in_span: p,
                }));
                source.mark(resp.headers_mut());
                Ok::<_, Infallible>(resp)
            }
        });
        let logs = Captured::default();
        let sub = tracing_subscriber::fmt()
            .with_env_filter("debug")
            .with_writer({
                let logs = logs.clone();
                move || logs.clone()
            })
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(sub);
        let stack = super::super::layers(svc, super::super::Options::default());
        let req = Request::get("/api/v1/pods?watch=true")
            .header(super::super::AUDIT_ID, "a-b-c")
            .body(String::new())
            .unwrap();
        let resp = stack.oneshot(req).await.unwrap();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"{}\n{}\n");
        let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
        let polled = polled.lock().unwrap().clone();
        (text, polled)
    }

    /// Issue 18: a watch the cache serves keeps its request's span and log lines (the
    /// request, its head; its end comes from the watch's body, `watch::body`) but its
    /// frames do not go through tower-http's trace body, which entered the span for each.
    #[tokio::test]
    async fn a_cached_watch_keeps_its_log_lines_without_the_trace_body() {
        let (logs, polled_in_span) = watch_through_the_stack(Source::Cache).await;
        for line in ["started processing request", "finished processing request"] {
            assert!(logs.contains(line), "{line:?} in\n{logs}");
        }
        assert!(
            logs.contains("audit_id=\"a-b-c\""),
            "the span is the request's:\n{logs}"
        );
        assert!(logs.contains("status=200"), "{logs}");
        assert_eq!(
            polled_in_span,
            vec![false; 3],
            "no frame went through a span"
        );
    }

    /// A forwarded watch's body is not the cache's: a thin wrapper logs its end.
    #[tokio::test]
    async fn a_forwarded_watch_logs_its_end_of_stream() {
        let (logs, polled_in_span) = watch_through_the_stack(Source::Upstream).await;
        for line in [
            "started processing request",
            "finished processing request",
            "end of stream",
        ] {
            assert!(logs.contains(line), "{line:?} in\n{logs}");
        }
        assert_eq!(polled_in_span, vec![false; 3]);
    }
}

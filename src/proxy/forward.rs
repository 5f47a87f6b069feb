//! The forwarding service: one downstream request becomes one upstream request, and the
//! upstream's answer comes back frame by frame. Nothing is buffered: bodies are streams
//! in both directions, so a 100 MB list or an endless watch costs a few buffers.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::body::RequestBody;
use http::{header, Request, Response, Version};

use super::gather::GatheredBody;
use super::headers;
use super::stream::{DrainingBody, TrackedBody};
use super::upgrade;
use crate::body::{self, Body};
use crate::drain::DrainWatch;
use crate::error_response::negotiated_as;
use crate::request::Parsed;
use crate::status::Status;
use crate::upstream::{Class, Upstream, UpstreamError, UpstreamResponse};

/// Forwards requests to the upstream apiserver.
#[derive(Clone)]
pub struct Proxy {
    upstream: Upstream,
    drain: DrainWatch,
    response_timeout: Duration,
}

impl Proxy {
    pub fn new(upstream: Upstream, drain: DrainWatch) -> Self {
        Self {
            upstream,
            drain,
            response_timeout: Duration::from_secs(70),
        }
    }

    /// How long a non-streaming request waits for the upstream's response head.
    pub fn with_response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// Forward one request. Never fails: problems become a `metav1.Status` response.
    /// Responses are marked `X-Watchgate-Source: upstream`; a Status the gateway makes
    /// itself (the upstream unreachable or too slow) is left unmarked, and the stack marks
    /// it `gateway` (`stack::source`).
    pub async fn forward(&self, req: Request<RequestBody>) -> Response<Body> {
        if req.version() == Version::HTTP_11 && headers::is_upgrade(req.headers()) {
            return upgrade::forward(&self.upstream, &self.drain, req).await;
        }

        // Everything about the request was decided when the stack parsed it; the parse
        // layer runs before this, so a request without it is not one of the stack's (a
        // test's): it is forwarded as a short request with the defaults.
        let parsed = Parsed::of(&req);
        let long_running = parsed.as_ref().is_some_and(|p| p.long_running);
        let class = parsed.as_deref().map_or(Class::Short, Class::of);
        // Long-running requests (watches, logs, exec…) legitimately wait for their first
        // bytes.
        let requested = parsed.as_ref().and_then(|p| p.timeout);
        let head_deadline =
            (!long_running).then(|| self.response_timeout.max(requested_timeout(requested)));
        // The gateway's own Statuses (upstream down, timed out, at its bound) are written
        // in the encoding the client negotiated for errors, as the apiserver writes them.
        let error_form = match &parsed {
            Some(p) => p.accept.for_errors(),
            None => Some(crate::negotiate::Negotiated::JSON),
        };
        let (mut parts, incoming) = req.into_parts();
        parts.extensions.insert(class);
        headers::upstream_request(&mut parts.headers, false);
        // The client picks the upstream protocol (h2 when ALPN agrees); the request
        // must not carry the downstream connection's version into that choice.
        parts.version = Version::HTTP_11;
        let (tracked, body_failed) = TrackedBody::new(incoming);
        let upstream_req = Request::from_parts(parts, body::boxed(tracked));

        let sent = self.upstream.send(upstream_req);
        let result = match head_deadline {
            None => sent.await,
            Some(limit) => tokio::time::timeout(limit, sent)
                .await
                .unwrap_or(Err(UpstreamError::Timeout(limit))),
        };
        match result {
            Ok(resp) => self.respond(resp, long_running),
            Err(err) if body_failed.load(Ordering::Acquire) => {
                tracing::debug!(error = %err, "request body ended early");
                negotiated_as(
                    Status::bad_request("the request body ended before it was complete"),
                    error_form,
                )
            }
            // A refusal at the connection bound is load, not a failure: one line per
            // refused request at warn would flood the log exactly when it is busiest
            // (watchgate_upstream_refusals_total counts them).
            Err(err @ UpstreamError::TooManyRequests(_)) => {
                tracing::debug!(error = %err, "upstream connection bound reached");
                negotiated_as(err.to_status(), error_form)
            }
            Err(err) => {
                tracing::warn!(error = %err, upstream = %self.upstream.url(), "upstream failed");
                negotiated_as(err.to_status(), error_form)
            }
        }
    }

    fn respond(&self, resp: UpstreamResponse, long_running: bool) -> Response<Body> {
        let (mut parts, incoming) = resp.into_parts();
        headers::downstream_response(&mut parts.headers, false);
        parts.version = Version::HTTP_11;
        let body = if long_running && !parts.headers.contains_key(header::CONTENT_LENGTH) {
            let line_delimited = parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|ct| {
                    ct.starts_with("application/json") || ct.starts_with("text/plain")
                });
            body::boxed(DrainingBody::new(
                incoming,
                self.drain.draining(),
                line_delimited,
            ))
        } else if long_running {
            body::boxed(incoming)
        } else {
            // An answer that ends on its own: passed on in 64 KiB pieces, not in the
            // upstream's 2 KiB chunks (gather.rs).
            body::boxed(GatheredBody::new(incoming))
        };
        Response::from_parts(parts, body)
    }
}

/// A request's own `?timeout=` (kube-apiserver honours it for non-streaming requests), plus
/// slack for the apiserver's answer to travel; zero when absent or unparsable.
fn requested_timeout(timeout: Option<Duration>) -> Duration {
    timeout.map_or(Duration::ZERO, |t| t + Duration::from_secs(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requested_timeout_extends_the_wait() {
        let t = |u: &str| {
            let uri: http::Uri = u.parse().unwrap();
            let p = Parsed::new(&http::Method::GET, &uri, &Default::default());
            requested_timeout(p.timeout)
        };
        assert_eq!(t("/api/v1/pods?timeout=120s"), Duration::from_secs(130));
        assert_eq!(t("/api/v1/pods?limit=1"), Duration::ZERO);
        assert_eq!(t("/api/v1/pods?timeout=bogus"), Duration::ZERO);
    }
}

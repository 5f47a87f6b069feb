//! The gateway's own GETs (a reflector's lists and watches, discovery, the consistency
//! probe): built, marked and read in one place, so that every caller sees the failure as
//! the pool classified it ([`UpstreamError`]) and can tell "our own pool is full"
//! ([`UpstreamError::is_pool_full`]) from "the upstream is down or broke off".

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};

use super::class::{Class, Internal};
use super::client::{ResponseFuture, Served, Upstream, UpstreamResponse};
use super::error::{error_chain, UpstreamError};

/// The whole answer to an internal GET.
#[derive(Debug, Clone)]
pub struct Collected {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Which endpoint answered ([`Served`]), for the callers that mark a lagging one.
    pub endpoint: Option<usize>,
}

impl Collected {
    /// The start of the body, for a log line or an error message about a failed answer.
    pub fn body_head(&self, max: usize) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.body[..self.body.len().min(max)])
    }
}

/// Which endpoint served `resp`, if the pool said.
pub fn served_by<B>(resp: &http::Response<B>) -> Option<usize> {
    resp.extensions().get::<Served>().map(|s| s.endpoint)
}

impl Upstream {
    /// Sends a GET of the gateway's own, in `class` (a watch is [`Class::LongRunning`]),
    /// and returns the answer's head with its body still streaming. Marked [`Internal`]:
    /// the cache serves every client of a resource from one such request, so it may use
    /// the connections kept back for short requests when forwarded watches hold the rest.
    pub fn open_internal(
        &self,
        path_and_query: &str,
        accept: &'static str,
        class: Class,
    ) -> ResponseFuture {
        let built = Request::builder()
            .method(Method::GET)
            .uri(path_and_query)
            .header(header::ACCEPT, HeaderValue::from_static(accept))
            .body(crate::body::empty());
        let mut req = match built {
            Ok(req) => req,
            Err(e) => {
                let err = UpstreamError::InvalidRequest(format!("GET {path_and_query}: {e}"));
                return Box::pin(std::future::ready(Err(err)));
            }
        };
        req.extensions_mut().insert(Internal);
        req.extensions_mut().insert(class);
        self.send(req)
    }

    /// A short GET of the gateway's own ([`Upstream::open_internal`]), its body read whole
    /// up to `max_body` bytes (an answer that is larger is
    /// [`UpstreamError::TooLarge`]: a cache must not hold an unbounded answer to decide).
    pub async fn get_internal(
        &self,
        path_and_query: &str,
        accept: &'static str,
        max_body: usize,
    ) -> Result<Collected, UpstreamError> {
        let resp = self
            .open_internal(path_and_query, accept, Class::Short)
            .await?;
        collect(resp, max_body).await
    }
}

/// Reads an answer's body whole, up to `max_body` bytes.
pub async fn collect(resp: UpstreamResponse, max_body: usize) -> Result<Collected, UpstreamError> {
    let endpoint = served_by(&resp);
    let (parts, body) = resp.into_parts();
    let body = Limited::new(body, max_body)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                UpstreamError::TooLarge(max_body)
            } else {
                UpstreamError::Body(error_chain(e.as_ref()))
            }
        })?
        .to_bytes();
    Ok(Collected {
        status: parts.status,
        headers: parts.headers,
        body,
        endpoint,
    })
}

//! Why a request could not be forwarded, and the `metav1.Status` a client gets for it.

use super::class::Class;
use crate::body::BoxError;
use crate::status::Status;

/// kube-apiserver's max-in-flight filter's words and `Retry-After` (filters/maxinflight.go).
pub const TOO_MANY_REQUESTS_MESSAGE: &str = "Too many requests, please try again later.";
const RETRY_AFTER_SECONDS: u32 = 1;

/// A failure to get a response head from the upstream.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// No connection could be made (refused, unreachable, timed out, TLS failed).
    #[error("unable to connect to the upstream apiserver: {0}")]
    Connect(String),
    /// Credentials could not be obtained (exec plugin failed, token file unreadable).
    #[error("unable to obtain credentials for the upstream apiserver: {0}")]
    Credentials(String),
    /// The upstream accepted the request but sent no response head in time.
    #[error("no response from the upstream apiserver within {0:?}")]
    Timeout(std::time::Duration),
    /// The connection broke or the upstream answered with something that is not HTTP.
    #[error("the upstream apiserver failed to answer: {0}")]
    Broken(String),
    /// Every upstream connection this request's class may use is open and full
    /// (`--upstream-max-connections`): refused at once rather than queued.
    #[error("no upstream connection is free for a {} request (--upstream-max-connections)", .0.as_str())]
    TooManyRequests(Class),
    /// The answer's body broke off while the gateway read it for itself
    /// ([`super::Upstream::get_internal`]).
    #[error("the upstream apiserver's answer broke off: {0}")]
    Body(String),
    /// The answer to one of the gateway's own requests is larger than its caller reads.
    #[error("the upstream apiserver's answer is larger than {0} bytes")]
    TooLarge(usize),
    /// The gateway built a request the HTTP library refuses (a path it should not have
    /// made); never sent.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

impl UpstreamError {
    pub(crate) fn from_client(err: BoxError) -> Self {
        let err = match err.downcast::<UpstreamError>() {
            Ok(own) => return *own,
            Err(other) => other,
        };
        let chain = error_chain(err.as_ref());
        if let Some(e) = err.downcast_ref::<hyper_util::client::legacy::Error>() {
            if e.is_connect() {
                return Self::Connect(chain);
            }
            return Self::Broken(chain);
        }
        if err.downcast_ref::<kube::client::AuthError>().is_some() {
            return Self::Credentials(chain);
        }
        Self::Broken(chain)
    }

    /// Our own pool refused the request: local load, not a sign that the upstream is down,
    /// so a caller that retries need not back off as from a failing apiserver.
    pub fn is_pool_full(&self) -> bool {
        matches!(self, Self::TooManyRequests(_))
    }

    /// What a client-go user expects when the apiserver behind a proxy is unavailable:
    /// 503 `ServiceUnavailable`, as kube-aggregator answers for an unreachable backend.
    /// A refusal at the connection bound is a 429 `TooManyRequests` with `Retry-After: 1`:
    /// the max-in-flight filter's message and delay, in the `metav1.Status` form
    /// (`errors.NewTooManyRequests`) kube-apiserver's watch cache also answers with, so
    /// client-go retries it after a second (docs/proxy.md).
    pub fn to_status(&self) -> Status {
        match self {
            Self::TooManyRequests(_) => {
                let mut s = Status::new(429, "TooManyRequests", TOO_MANY_REQUESTS_MESSAGE);
                s.with_details = true;
                s.retry_after_seconds = Some(RETRY_AFTER_SECONDS);
                s
            }
            _ => Status::service_unavailable(format!(
                "the server is currently unable to handle the request ({self})"
            )),
        }
    }
}

/// `outer: inner: root` — hyper's errors keep the useful part (e.g. "Connection
/// refused") in their sources.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        let s = e.to_string();
        if !out.ends_with(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        source = e.source();
    }
    out
}

//! Why a request could not be forwarded, and the `metav1.Status` a client gets for it.

use crate::body::BoxError;
use crate::status::Status;

/// A failure to get a response head from the upstream.
#[derive(Debug, thiserror::Error)]
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
}

impl UpstreamError {
    pub(crate) fn from_client(err: BoxError) -> Self {
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

    /// What a client-go user expects when the apiserver behind a proxy is unavailable:
    /// 503 `ServiceUnavailable`, as kube-aggregator answers for an unreachable backend.
    pub fn to_status(&self) -> Status {
        Status::service_unavailable(format!(
            "the server is currently unable to handle the request ({self})"
        ))
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

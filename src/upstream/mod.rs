//! The upstream apiserver client: kube config inference, TLS, auth, pooling.

mod client;
mod error;

pub use client::{Upstream, UpstreamResponse};
pub use error::UpstreamError;

//! The upstream apiserver client: kube config inference, TLS, auth, and watchgate's own
//! connection pool over one or several apiservers. See docs/proxy.md.
//!
//! - [`client`]: [`Upstream`], the one entry point (`send`, `send_upgrade`);
//! - `endpoint`: several apiservers, their health and the order they are tried in;
//! - `pool` and `conn`: HTTP/2 and HTTP/1.1 connections per endpoint and class, and the
//!   bound on how many are open;
//! - `internal`: the gateway's own GETs ([`Upstream::get_internal`], `open_internal`),
//!   their failures kept typed;
//! - [`class`]: short versus long-running requests;
//! - [`error`]: failures and the `metav1.Status` each becomes.

pub mod class;
mod client;
mod conn;
mod endpoint;
mod error;
mod internal;
mod pool;

pub use class::{Class, Internal};
pub use client::{Served, Upstream, UpstreamOptions, UpstreamResponse, DEFAULT_MAX_CONNECTIONS};
pub use error::{UpstreamError, TOO_MANY_REQUESTS_MESSAGE};
pub use internal::{collect, served_by, Collected};
pub use pool::UpstreamBody;

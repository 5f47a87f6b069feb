//! What a listener serves, in its own module: the listener and the two protocol servers it
//! hands connections to (`h1.rs`, `http2.rs`) all take it, and the listener imports
//! those, so it cannot live in any of them without a cycle.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http::{Request, Response};

use crate::body::{Body, RequestBody};

/// What a listener serves: one request in, one response out (errors are responses too).
pub type Handler = Arc<dyn Fn(Request<RequestBody>) -> HandlerFuture + Send + Sync>;

/// A [`Handler`]'s answer to come.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

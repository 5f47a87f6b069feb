//! The shape the security layers share (`authn`, `impersonate`, `authz`): look at a request
//! before the rest of the stack, then either let it on (its extensions or headers changed)
//! or answer it. A [`Guard`] says what to do; [`GuardLayer`] is the tower plumbing, written
//! once: the inner service is taken ready (`super::take`) and called only for requests the
//! guard lets on.

use std::convert::Infallible;
use std::future::Future;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::{Layer, Service};

use super::BoxFuture;
use crate::body::Body;

/// The form a guard's refusal (401, 403) is written in: what the request's Accept header
/// negotiated for errors when the parse layer read it (`Accept::for_errors`), so that no
/// layer reads the header again. `None` (indented JSON) only for a request the parse layer
/// did not see, which the stack never makes.
pub fn error_form<B>(req: &Request<B>) -> Option<crate::negotiate::Negotiated> {
    crate::request::Parsed::of(req).and_then(|p| p.accept.for_errors())
}

/// What a guard decided about a request.
pub enum Verdict<B> {
    /// Go on with the rest of the stack.
    Pass(Request<B>),
    /// Answer with this (a 401 or 403 Status) instead.
    Answer(Response<Body>),
}

/// One check of the request path. Cloned per request (guards hold `Arc`s).
pub trait Guard: Clone + Send + Sync + 'static {
    fn check<B: Send + 'static>(self, req: Request<B>) -> impl Future<Output = Verdict<B>> + Send;
}

#[derive(Clone)]
pub struct GuardLayer<G>(pub G);

impl<S, G: Clone> Layer<S> for GuardLayer<G> {
    type Service = Guarded<S, G>;

    fn layer(&self, inner: S) -> Guarded<S, G> {
        Guarded {
            inner,
            guard: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Guarded<S, G> {
    inner: S,
    guard: G,
}

impl<S, G, B> Service<Request<B>> for Guarded<S, G>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    G: Guard,
    B: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> BoxFuture {
        let guard = self.guard.clone();
        let mut inner = super::take(&mut self.inner);
        Box::pin(async move {
            match guard.check(req).await {
                Verdict::Pass(req) => inner.call(req).await,
                Verdict::Answer(resp) => Ok(resp),
            }
        })
    }
}

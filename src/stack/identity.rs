//! `identity`: a forwarded request reaches the upstream as the client. The client's
//! credential (`Authorization`, already verified) and any `Impersonate-*` header it sent
//! (already checked by `impersonate`) are removed, and the user's impersonation headers
//! are added; watchgate's own credentials authenticate the request upstream (kube's auth
//! layer), and the apiserver then authorizes and audits it as the impersonated client.
//! See docs/security.md ("Identity on forwarded requests").

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{header, Request, Response};
use tower::{Layer, Service};

use crate::auth::User;
use crate::body::Body;

#[derive(Clone, Copy, Default)]
pub struct IdentityLayer;

impl<S> Layer<S> for IdentityLayer {
    type Service = Identity<S>;

    fn layer(&self, inner: S) -> Identity<S> {
        Identity { inner }
    }
}

#[derive(Clone)]
pub struct Identity<S> {
    inner: S,
}

/// Rewrites `req`'s identity headers for `user`.
pub fn as_user<B>(req: &mut Request<B>, user: &User) {
    let headers = req.headers_mut();
    headers.remove(header::AUTHORIZATION);
    let stale: Vec<_> = headers
        .keys()
        .filter(|k| k.as_str().starts_with("impersonate-"))
        .cloned()
        .collect();
    for k in stale {
        headers.remove(k);
    }
    for (name, value) in user.impersonation_headers() {
        headers.append(name.clone(), value.clone());
    }
}

impl<S, B> Service<Request<B>> for Identity<S>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> S::Future {
        if let Some(user) = req.extensions().get::<Arc<User>>().cloned() {
            as_user(&mut req, &user);
        }
        self.inner.call(req)
    }
}

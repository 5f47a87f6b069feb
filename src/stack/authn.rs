//! `authn`: who is asking. A front proxy's headers and an x509 client certificate are
//! taken from the connection's verified certificate, bearer tokens are reviewed by the
//! upstream (cached), requests without credentials are anonymous only with `--anonymous-auth`; anything else is the
//! apiserver's 401 Status (`auth::answers::unauthorized`). The user goes into the
//! request's extensions as `Arc<auth::User>` for the layers after this one.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::{Layer, Service};

use super::BoxFuture;
use crate::auth::x509::PeerCert;
use crate::auth::{answers, Security};
use crate::body::Body;

#[derive(Clone)]
pub struct AuthnLayer(pub Arc<Security>);

impl<S> Layer<S> for AuthnLayer {
    type Service = Authn<S>;

    fn layer(&self, inner: S) -> Authn<S> {
        Authn {
            inner,
            security: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Authn<S> {
    inner: S,
    security: Arc<Security>,
}

impl<S, B> Service<Request<B>> for Authn<S>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> BoxFuture {
        let security = self.security.clone();
        let mut inner = super::take(&mut self.inner);
        Box::pin(async move {
            // The connection's client certificate, verified at the handshake (`server::tls`).
            let cert = req.extensions().get::<Arc<PeerCert>>().cloned();
            match security
                .authn
                .authenticate(req.headers_mut(), cert.as_deref())
                .await
            {
                Ok(user) => {
                    req.extensions_mut().insert(user);
                    inner.call(req).await
                }
                Err(err) => {
                    tracing::debug!(error = %err, uri = %req.uri(), "unauthenticated request");
                    Ok(answers::unauthorized())
                }
            }
        })
    }
}

//! `impersonate`: a client's own `Impersonate-*` headers (`kubectl --as`), checked and
//! applied as kube-apiserver's impersonation filter does (`auth::impersonation`). After
//! this layer the request's user is the impersonated one.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::{Layer, Service};

use super::BoxFuture;
use crate::auth::{impersonation, Security, User};
use crate::body::Body;

#[derive(Clone)]
pub struct ImpersonateLayer(pub Arc<Security>);

impl<S> Layer<S> for ImpersonateLayer {
    type Service = Impersonate<S>;

    fn layer(&self, inner: S) -> Impersonate<S> {
        Impersonate {
            inner,
            security: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Impersonate<S> {
    inner: S,
    security: Arc<Security>,
}

impl<S, B> Service<Request<B>> for Impersonate<S>
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
            // No impersonation header (the common case): nothing to do.
            let asks = req
                .headers()
                .keys()
                .any(|k| k.as_str().starts_with("impersonate-"));
            if asks {
                if let Some(requestor) = req.extensions().get::<Arc<User>>().cloned() {
                    match impersonation::impersonate(&security.authz, &requestor, req.headers_mut())
                        .await
                    {
                        Ok(Some(user)) => {
                            req.extensions_mut().insert(user);
                        }
                        Ok(None) => {}
                        Err(refused) => return Ok(refused),
                    }
                }
            }
            inner.call(req).await
        })
    }
}

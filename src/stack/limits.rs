//! `limits`: fair limits per user (`auth::limits`). Beyond them, the max-in-flight
//! filter's 429 with `Retry-After`. The permit rides in the response body, so a list
//! counts until it is written and a watch until its stream ends.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tower::{Layer, Service};

use super::BoxFuture;
use crate::auth::limits::Permit;
use crate::auth::{answers, Security, User};
use crate::body::{self, Body, BoxError};
use crate::request::Parsed;

#[derive(Clone)]
pub struct LimitsLayer(pub Arc<Security>);

impl<S> Layer<S> for LimitsLayer {
    type Service = Limit<S>;

    fn layer(&self, inner: S) -> Limit<S> {
        Limit {
            inner,
            security: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Limit<S> {
    inner: S,
    security: Arc<Security>,
}

impl<S, B> Service<Request<B>> for Limit<S>
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

    fn call(&mut self, req: Request<B>) -> BoxFuture {
        let permit = match (
            req.extensions().get::<Arc<User>>(),
            req.extensions().get::<Arc<Parsed>>(),
        ) {
            (Some(user), Some(parsed)) => {
                // Long-running requests have their own budget, as kube-apiserver's
                // max-in-flight filter leaves them out (`request::Parsed::long_running`).
                match self.security.limits.admit(user, parsed.long_running) {
                    Some(permit) => permit,
                    None => {
                        tracing::debug!(user = user.name(), uri = %req.uri(), "per-user limit reached");
                        return Box::pin(async { Ok(answers::too_many_requests()) });
                    }
                }
            }
            _ => None,
        };
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            Ok(match permit {
                None => resp,
                Some(permit) => resp.map(|inner| {
                    body::boxed(Permitted {
                        inner,
                        _permit: permit,
                    })
                }),
            })
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body holding its request's place in the user's budget.
    struct Permitted {
        #[pin]
        inner: Body,
        _permit: Permit,
    }
}

impl HttpBody for Permitted {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

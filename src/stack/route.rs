//! The innermost service: where a request is answered.
//!
//! In order: requests that must never be forwarded are refused; gets and lists the cache
//! can answer exactly come from it and watches it can serve from the fan-out (`serve`: the
//! routing decision, then its handler); everything else is forwarded unchanged (`proxy::Proxy`), and
//! a write's answer sets its resource's read-your-writes fence (`cache::writes`).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::body::RequestBody;
use http::{Method, Request, Response};
use tower::Service;

use crate::auth::Authorized;
use crate::body::Body;
use crate::cache::forward::Forward;
use crate::cache::registry::{Lookup, Registry};
use crate::proxy::Proxy;
use crate::request::{ApiPath, Parsed};
use crate::serve::{
    self,
    route::{self, Known, Route, Standing},
};
use crate::status::Status;

/// Routes each request to the cache, the fan-out or the upstream.
#[derive(Clone)]
pub struct Router {
    proxy: Proxy,
    cache: Option<Arc<Registry>>,
    /// Only requests the `authz` layer marked [`Authorized`] may be answered from the
    /// cache or the fan-out (security on); the rest are forwarded.
    require_authorized: bool,
}

impl Router {
    pub fn new(proxy: Proxy, cache: Option<Arc<Registry>>) -> Self {
        Self {
            proxy,
            cache,
            require_authorized: false,
        }
    }

    /// With security on, the cache and the fan-out answer authorized requests only.
    pub fn require_authorization(mut self, on: bool) -> Self {
        self.require_authorized = on;
        self
    }

    async fn answer(self, req: Request<RequestBody>) -> Response<Body> {
        if let Some(status) = reject(&req) {
            return status.into_response();
        }
        let parsed = Parsed::of(&req);
        let may_answer = !self.require_authorized || req.extensions().get::<Authorized>().is_some();
        let why = match (&self.cache, &parsed) {
            (None, _) => Forward::NoCache,
            (Some(_), None) => Forward::NotARead,
            (Some(cache), Some(parsed)) => {
                match self.answer_from_cache(cache, parsed, may_answer).await {
                    Ok(resp) => return resp,
                    Err(why) => why,
                }
            }
        };
        forwarded(why, &req);
        let resp = self.proxy.forward(req).await;
        if why == Forward::LoneRead {
            // Its answer is here: it no longer counts as a lone read in flight.
            if let (Some(cache), Some(parsed)) = (&self.cache, &parsed) {
                cache.lone_read_done(parsed);
            }
        }
        match (&self.cache, &parsed) {
            // Read-your-writes: a write's resourceVersion becomes its resource's fence
            // before the answer leaves (`cache::writes`).
            (Some(cache), Some(parsed)) => {
                crate::cache::writes::observe(cache.writes(), parsed, resp).await
            }
            _ => resp,
        }
    }
}

impl Router {
    /// The cache's or the fan-out's answer, or why the request is forwarded: the routing
    /// decision (`serve::route`), then the handler it names.
    async fn answer_from_cache(
        &self,
        registry: &Arc<Registry>,
        parsed: &Parsed,
        may_answer: bool,
    ) -> Result<Response<Body>, Forward> {
        let lookup = match &parsed.api.path {
            ApiPath::Resource(rp) => registry.lookup(&rp.group, &rp.version, &rp.resource),
            _ => Lookup::NotYet,
        };
        let known = Known {
            authorized: may_answer,
            consistent_reads: registry.consistent_reads(),
            resource: Standing::of(&lookup),
        };
        let looked_up = match &lookup {
            Lookup::Ready(c) => Some(c.clone()),
            _ => None,
        };
        match route::decide(parsed, &known) {
            Route::Read(target) => serve::read::answer(registry, parsed, target, looked_up).await,
            Route::Watch(target) => serve::watch::answer(registry, parsed, target, looked_up).await,
            Route::Forward(why) => Err(why),
        }
    }
}

/// Records why a request goes upstream: a debug line and
/// `watchgate_forwarded_requests_total{reason}`.
fn forwarded<B>(why: Forward, req: &Request<B>) {
    crate::metrics::forwarded(why.label());
    tracing::debug!(reason = why.label(), method = %req.method(), uri = %req.uri(), "forwarded: {why}");
}

impl Service<Request<RequestBody>> for Router {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<RequestBody>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.answer(req).await) })
    }
}

/// Requests that must not be forwarded at all. The target must be a path: an
/// absolute-form URI naming another host must never turn the gateway into an open proxy
/// (only its path is used), and CONNECT or `*` have no meaning for the Kubernetes API.
fn reject<B>(req: &Request<B>) -> Option<Status> {
    if req.method() == Method::CONNECT {
        return Some(Status::new(
            405,
            "MethodNotAllowed",
            "CONNECT is not supported by this server",
        ));
    }
    match req.uri().path_and_query() {
        Some(pq) if pq.path().starts_with('/') => None,
        _ => Some(Status::bad_request(format!(
            "the request target {:?} is not an absolute path",
            req.uri().to_string()
        ))),
    }
}

//! The API request path as a tower stack, composed here and nowhere else.
//!
//! ```text
//! request ─▶ parse ─▶ audit-id ─▶ trace ─▶ instrument ─▶ source ─▶ catch-panic ─┐
//!            typed     request     span     metrics       default    500 Status  │
//!            request   id                                 X-Watch-               │
//!            (once)                                       gate-Source            │
//!   ┌────────────────────────────────────────────────────────────────────────────┘
//!   └▶ authn ─▶ impersonate ─▶ limits ─▶ authz ─▶ identity ─▶ route ─┬▶ cache (get/list)
//!      401      kubectl --as   429 per   403 for  impersonation      ├▶ fan-out (watch)
//!               (checked)      user      cached   headers upstream   └▶ upstream (forward)
//!                                        reads
//! ```
//!
//! - `parse` (tower's `MapRequest`): the request is parsed once into
//!   [`crate::request::Parsed`] and stored in its extensions; nothing after it parses the
//!   path, the query or the Accept header again (`request::parsed_count` proves it in
//!   `tests/stack.rs`).
//! - `audit-id` (tower-http's `SetRequestId` + `PropagateRequestId`): every request has an
//!   `Audit-ID` (the client's, or a new UUID), which goes upstream with a forwarded request
//!   (the apiserver adopts it for its audit events) and comes back on every answer, as
//!   kube-apiserver's `WithAuditInit` answers.
//! - `trace` (tower-http's `Trace`, [`trace::TraceLayer`]): one debug span per request,
//!   with its audit id; a watch the cache serves keeps the span and the log lines but not
//!   tower-http's per-frame body wrapper (its body logs its own end).
//! - `instrument` ([`instrument::InstrumentLayer`]): request metrics from the typed request.
//! - `source` (a `map_response`): an answer neither the cache nor the upstream marked is one
//!   the gateway made itself (`X-Watchgate-Source: gateway`; `proxy::headers::Source` is
//!   the one reader and writer of the header).
//! - `catch-panic` (tower-http's `CatchPanic`): a panic while serving becomes a 500
//!   `metav1.Status` instead of a dropped connection.
//! - With `--auth=delegated` ([`crate::auth`], docs/security.md): `authn`
//!   ([`authn::Authn`]), `impersonate` ([`impersonate::Impersonate`]), `limits`
//!   ([`limits::LimitsLayer`]), `authz` ([`authz::Authz`]), the first three as [`guard::Guard`]s, and `identity`
//!   ([`identity::IdentityLayer`]), in kube-apiserver's filter order (authentication,
//!   impersonation, max-in-flight/APF, authorization).
//! - `route` ([`route::Router`]): refused requests, then the cache, the fan-out, and the
//!   upstream, in that order. With security on, only requests `authz` marked
//!   [`crate::auth::Authorized`] may be answered by the cache or the fan-out.
//!
//! Ordering: `instrument` sits outside `source`, `catch-panic` and the security layers so
//! that the source label, the 500s, 401s, 403s and 429s are counted like any other
//! answer. Timeouts are not a layer: a cached answer does not wait, and forwarded requests
//! have the upstream client's own deadlines (`--upstream-response-timeout`), which answer
//! with a Status rather than tower-http's bare 408.

pub mod authn;
pub mod authz;
pub mod guard;
pub mod identity;
pub mod impersonate;
pub mod instrument;
pub mod limits;
mod panic;
pub mod route;
pub mod trace;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::body::RequestBody;
use http::{HeaderName, HeaderValue, Request, Response};
use tower::util::BoxCloneSyncService;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};

use crate::auth::Security;
use crate::body::Body;
use crate::proxy::headers::Source;
use crate::request::Parsed;
use guard::GuardLayer;

/// The composed API service: one request in, one response out (errors are responses).
pub type ApiService = BoxCloneSyncService<Request<RequestBody>, Response<Body>, Infallible>;

/// The stack over any request body (benches and tests drive it with their own bodies).
pub type ApiServiceOf<B> = BoxCloneSyncService<Request<B>, Response<Body>, Infallible>;

/// The future of the stack's own async layers.
pub type BoxFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

/// kube-apiserver's audit id header (`auditinternal.HeaderAuditID`).
pub const AUDIT_ID: HeaderName = HeaderName::from_static("audit-id");

/// What the stack adds around the router.
#[derive(Clone, Default)]
pub struct Options {
    /// The request-metrics layer.
    pub metrics: bool,
    /// Client authentication, authorization and limits (`--auth=delegated`).
    pub security: Option<Arc<Security>>,
}

/// Builds the API stack around `router`.
pub fn api(router: route::Router, opts: Options) -> ApiService {
    let router = router.require_authorization(opts.security.is_some());
    layers(router, opts)
}

/// The layers around any innermost service (the tests put a panicking one there).
pub fn layers<S, B>(
    router: S,
    opts: Options,
) -> BoxCloneSyncService<Request<B>, Response<Body>, Infallible>
where
    S: tower::Service<Request<B>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
{
    let security = opts.security.clone();
    let inner = ServiceBuilder::new()
        .map_response(cache_control)
        .map_response(|mut resp: Response<Body>| {
            Source::Gateway.mark_unmarked(resp.headers_mut());
            resp
        })
        // tower-http's CatchPanic wraps the body in its own box type; back to ours.
        .map_response(|resp: Response<_>| resp.map(crate::body::boxed))
        .layer(CatchPanicLayer::custom(panic::into_status))
        .option_layer(security.clone().map(|s| GuardLayer(authn::Authn(s))))
        .option_layer(
            security
                .clone()
                .map(|s| GuardLayer(impersonate::Impersonate(s))),
        )
        .option_layer(security.clone().map(limits::LimitsLayer))
        .option_layer(security.clone().map(|s| GuardLayer(authz::Authz(s))))
        .option_layer(security.map(|_| identity::IdentityLayer))
        .service(router);
    let instrumented = ServiceBuilder::new()
        .option_layer(opts.metrics.then_some(instrument::InstrumentLayer))
        .service(inner);
    let outer = ServiceBuilder::new()
        .map_request(parse)
        .layer(SetRequestIdLayer::new(AUDIT_ID, NewAuditId))
        .layer(PropagateRequestIdLayer::new(AUDIT_ID))
        .map_response(|resp: Response<_>| resp.map(crate::body::boxed))
        .layer(trace::TraceLayer)
        .service(instrumented);
    BoxCloneSyncService::new(outer)
}

/// A random (version 4) UUID for each request without an `Audit-ID`, as kube-apiserver
/// makes one. From the thread's random generator rather than tower-http's
/// `MakeRequestUuid`, whose `Uuid::new_v4` asks the kernel (a system call) each time.
#[derive(Clone, Copy, Default)]
pub struct NewAuditId;

impl MakeRequestId for NewAuditId {
    fn make_request_id<B>(&mut self, _req: &Request<B>) -> Option<RequestId> {
        let id = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
        let text = id
            .hyphenated()
            .encode_lower(&mut uuid::Uuid::encode_buffer())
            .to_owned();
        HeaderValue::from_str(&text).ok().map(RequestId::new)
    }
}

/// `Cache-Control: no-cache, private` on the answers the gateway made (from the cache, or
/// its own Statuses), as kube-apiserver's `WithCacheControl` filter sets it on all of its
/// answers unless a handler set its own. Forwarded answers keep the upstream's headers as
/// they are.
fn cache_control(mut resp: Response<Body>) -> Response<Body> {
    let forwarded = Source::of(resp.headers()) == Some(Source::Upstream);
    if !forwarded && resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        resp.headers_mut()
            .entry(http::header::CACHE_CONTROL)
            .or_insert(HeaderValue::from_static("no-cache, private"));
    }
    resp
}

/// The parse layer's function.
fn parse<B>(mut req: Request<B>) -> Request<B> {
    let parsed = Parsed::new(req.method(), req.uri(), req.headers());
    req.extensions_mut().insert(std::sync::Arc::new(parsed));
    req
}

/// The trace layer's span: method, target and audit id (debug level, so it costs a
/// disabled-callsite check unless `--v=2` or more asks for it).
fn span<B>(req: &Request<B>) -> tracing::Span {
    tracing::debug_span!(
        "request",
        method = %req.method(),
        uri = %req.uri(),
        audit_id = req.headers().get(AUDIT_ID).and_then(|v| v.to_str().ok()).unwrap_or(""),
    )
}

/// Takes the service a layer's `poll_ready` readied and leaves a clone in its place (the
/// tower idiom for a future that must own the service).
pub(crate) fn take<S: Clone>(slot: &mut S) -> S {
    let clone = slot.clone();
    std::mem::replace(slot, clone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    async fn call(
        svc: BoxCloneSyncService<Request<String>, Response<Body>, Infallible>,
        uri: &str,
    ) -> (Response<()>, serde_json::Value) {
        let resp = svc
            .oneshot(Request::get(uri).body(String::new()).unwrap())
            .await
            .unwrap();
        let (parts, body) = resp.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        let v = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        (Response::from_parts(parts, ()), v)
    }

    #[test]
    fn audit_ids_are_version_4_uuids() {
        let req = Request::get("/").body(()).unwrap();
        let a = NewAuditId.make_request_id(&req).unwrap();
        let b = NewAuditId.make_request_id(&req).unwrap();
        let a = a.header_value().to_str().unwrap().to_string();
        assert_ne!(a, b.header_value().to_str().unwrap());
        let id = uuid::Uuid::parse_str(&a).unwrap();
        assert_eq!((a.len(), id.get_version_num()), (36, 4));
        assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
    }

    #[tokio::test]
    async fn a_panic_becomes_a_500_status_marked_gateway() {
        let panicking = tower::service_fn(|_req: Request<String>| async move {
            if true {
                panic!("boom");
            }
            Ok::<_, Infallible>(Response::new(crate::body::empty()))
        });
        let (resp, status) = call(layers(panicking, Options::default()), "/api/v1/pods").await;
        assert_eq!(resp.status(), 500);
        assert_eq!(Source::of(resp.headers()), Some(Source::Gateway));
        assert_eq!(
            resp.headers()[http::header::CACHE_CONTROL],
            "no-cache, private"
        );
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "InternalError");
        assert_eq!(status["code"], 500);
    }

    #[tokio::test]
    async fn every_layer_sees_the_one_parsed_request() {
        let seen = tower::service_fn(|req: Request<String>| async move {
            let parsed = Parsed::of(&req).expect("the parse layer stored the typed request");
            let mut resp = Response::new(crate::body::full(format!(
                "{{\"verb\":\"{}\"}}",
                parsed.api.verb.as_str()
            )));
            Source::Cache.mark(resp.headers_mut());
            Ok::<_, Infallible>(resp)
        });
        let (resp, v) = call(layers(seen, Options::default()), "/api/v1/pods?watch=1").await;
        assert_eq!(v["verb"], "watch");
        // A source the service set is kept.
        assert_eq!(Source::of(resp.headers()), Some(Source::Cache));
    }
}

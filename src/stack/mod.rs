//! The API request path as a tower stack, composed here and nowhere else.
//!
//! ```text
//! request ─▶ parse ─▶ instrument ─▶ source ─▶ catch-panic ─▶ route ─┬▶ cache (get/list)
//!            typed     metrics      default    500 Status          ├▶ fan-out (watch)
//!            request   per request  X-Watch-                       └▶ upstream (forward)
//!            (once)                 gate-Source
//! ```
//!
//! - `parse` (tower's `MapRequest`): the request is parsed once into
//!   [`crate::request::Parsed`] and stored in its extensions; nothing after it parses the
//!   path, the query or the Accept header again (`request::parsed_count` proves it in
//!   `tests/stack.rs`).
//! - `instrument` ([`instrument::InstrumentLayer`]): request metrics from the typed request.
//! - `source` (tower-http's `SetResponseHeader`): an answer neither the cache nor the
//!   upstream marked is one the gateway made itself (`X-Watchgate-Source: gateway`).
//! - `catch-panic` (tower-http's `CatchPanic`): a panic while serving becomes a 500
//!   `metav1.Status` instead of a dropped connection.
//! - `route` ([`route::Router`]): refused requests, then the cache, the fan-out, and the
//!   upstream, in that order.
//!
//! Ordering: `instrument` sits outside `source` and `catch-panic` so that the source label
//! and the 500s are counted like any other answer.

pub mod instrument;
mod panic;
pub mod route;

use std::convert::Infallible;

use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use tower::util::BoxCloneSyncService;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::set_header::SetResponseHeaderLayer;

use crate::body::Body;
use crate::proxy::headers::SOURCE_HEADER;
use crate::request::Parsed;

/// The composed API service: one request in, one response out (errors are responses).
pub type ApiService = BoxCloneSyncService<Request<Incoming>, Response<Body>, Infallible>;

/// Builds the API stack around `router`. `metrics` adds the request-metrics layer.
pub fn api(router: route::Router, metrics: bool) -> ApiService {
    layers(router, metrics)
}

/// The layers around any innermost service (the tests put a panicking one there).
pub fn layers<S, B>(
    router: S,
    metrics: bool,
) -> BoxCloneSyncService<Request<B>, Response<Body>, Infallible>
where
    S: tower::Service<Request<B>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    let inner = ServiceBuilder::new()
        .layer(SetResponseHeaderLayer::if_not_present(
            SOURCE_HEADER,
            HeaderValue::from_static("gateway"),
        ))
        // tower-http's CatchPanic wraps the body in its own box type; back to ours.
        .map_response(|resp: Response<_>| resp.map(crate::body::boxed))
        .layer(CatchPanicLayer::custom(panic::into_status))
        .service(router);
    let parse = ServiceBuilder::new().map_request(parse);
    if metrics {
        BoxCloneSyncService::new(parse.layer(instrument::InstrumentLayer).service(inner))
    } else {
        BoxCloneSyncService::new(parse.service(inner))
    }
}

/// The parse layer's function.
fn parse<B>(mut req: Request<B>) -> Request<B> {
    let parsed = Parsed::new(req.method(), req.uri(), req.headers());
    req.extensions_mut().insert(std::sync::Arc::new(parsed));
    req
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

    #[tokio::test]
    async fn a_panic_becomes_a_500_status_marked_gateway() {
        let panicking = tower::service_fn(|_req: Request<String>| async move {
            if true {
                panic!("boom");
            }
            Ok::<_, Infallible>(Response::new(crate::body::empty()))
        });
        let (resp, status) = call(layers(panicking, false), "/api/v1/pods").await;
        assert_eq!(resp.status(), 500);
        assert_eq!(resp.headers()[SOURCE_HEADER], "gateway");
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
            resp.headers_mut()
                .insert(SOURCE_HEADER, HeaderValue::from_static("cache"));
            Ok::<_, Infallible>(resp)
        });
        let (resp, v) = call(layers(seen, false), "/api/v1/pods?watch=1").await;
        assert_eq!(v["verb"], "watch");
        // A source the service set is kept.
        assert_eq!(resp.headers()[SOURCE_HEADER], "cache");
    }
}

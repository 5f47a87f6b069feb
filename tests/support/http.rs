//! A tiny raw HTTP client for tests: JSON requests and watch streams, nothing hidden.
//!
//! Deliberately not kube-rs or any other typed client: tests that check wire behaviour
//! (status codes, exact bodies, event framing) must see the bytes as they are.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// The bound for one plain request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

pub const JSON: &str = "application/json";
pub const MERGE_PATCH: &str = "application/merge-patch+json";
pub const JSON_PATCH: &str = "application/json-patch+json";
pub const STRATEGIC_MERGE_PATCH: &str = "application/strategic-merge-patch+json";

#[derive(Clone)]
pub struct Http {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
    /// Sent with every request (e.g. a bearer token).
    headers: Vec<(String, String)>,
}

/// A complete response.
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// The gateway's `x-watchgate-source` header: `cache` or `upstream` (or none, for an
/// answer the gateway did not give).
pub fn source(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("x-watchgate-source")
        .and_then(|v| v.to_str().ok())
}

impl Resp {
    /// Who answered, by the gateway's `x-watchgate-source` header; see [`source`].
    pub fn source(&self) -> Option<&str> {
        source(&self.headers)
    }

    /// The body parsed as JSON; panics with the body text if it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "response ({}) is not JSON: {e}\n{}",
                self.status,
                self.text()
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Asserts the status and returns the JSON body.
    #[track_caller]
    pub fn expect(&self, status: u16) -> Value {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected status; body: {}",
            self.text()
        );
        self.json()
    }
}

impl Http {
    /// A client for `base`, e.g. `http://127.0.0.1:8080`.
    pub fn new(base: &str) -> Self {
        Self {
            base: base.trim_end_matches('/').to_string(),
            client: Client::builder(TokioExecutor::new()).build_http(),
            headers: Vec::new(),
        }
    }

    /// A client for `base` that sends `Authorization: Bearer <token>` with every request.
    pub fn with_token(base: &str, token: &str) -> Self {
        let mut http = Self::new(base);
        http.headers
            .push(("authorization".into(), format!("Bearer {token}")));
        http
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn build(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Request<Full<Bytes>> {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{}", self.base, path));
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.body(Full::new(body)).expect("valid request")
    }

    /// Sends a request and reads the whole response (bounded by a timeout).
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Resp {
        let req = self.build(method.clone(), path, headers, body.into());
        let fut = async {
            let resp = self
                .client
                .request(req)
                .await
                .unwrap_or_else(|e| panic!("{method} {path}: {e:?}"));
            let (parts, body) = resp.into_parts();
            let body = body
                .collect()
                .await
                .unwrap_or_else(|e| panic!("{method} {path}: reading body: {e}"))
                .to_bytes();
            Resp {
                status: parts.status,
                headers: parts.headers,
                body,
            }
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
            Ok(r) => r,
            Err(_) => panic!("{method} {path}: no complete response within {REQUEST_TIMEOUT:?}"),
        }
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.request(Method::GET, path, &[("accept", JSON)], Bytes::new())
            .await
    }

    /// GET, asserting 200, returning the JSON body.
    pub async fn get_json(&self, path: &str) -> Value {
        self.get(path).await.expect(200)
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Resp {
        self.request(
            Method::POST,
            path,
            &[("content-type", JSON), ("accept", JSON)],
            serde_json::to_vec(body).unwrap(),
        )
        .await
    }

    pub async fn put_json(&self, path: &str, body: &Value) -> Resp {
        self.request(
            Method::PUT,
            path,
            &[("content-type", JSON), ("accept", JSON)],
            serde_json::to_vec(body).unwrap(),
        )
        .await
    }

    /// PATCH with the given patch content type (see the constants above).
    pub async fn patch(&self, path: &str, content_type: &str, body: &Value) -> Resp {
        self.request(
            Method::PATCH,
            path,
            &[("content-type", content_type), ("accept", JSON)],
            serde_json::to_vec(body).unwrap(),
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        self.request(Method::DELETE, path, &[("accept", JSON)], Bytes::new())
            .await
    }

    /// Opens a watch (`path` must carry `watch=true` or be a legacy `/watch/` path) and
    /// asserts that it answers 200 with a stream, read event by event.
    pub async fn watch(&self, path: &str) -> super::watch::Watch {
        super::watch::open_ok_with(&self.base, path, &self.watch_headers()).await
    }

    /// Opens a watch and returns once its response head is in, whatever the status.
    pub async fn watch_any(&self, path: &str) -> super::watch::Watch {
        super::watch::open_with(&self.base, path, &self.watch_headers()).await
    }

    /// A watch's headers: JSON, and this client's own (its token).
    fn watch_headers(&self) -> Vec<(&str, &str)> {
        std::iter::once(("accept", JSON))
            .chain(self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .collect()
    }
}

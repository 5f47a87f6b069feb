//! A tiny raw HTTP client for tests: JSON requests and watch streams, nothing hidden.
//!
//! Deliberately not kube-rs or any other typed client: tests that check wire behaviour
//! (status codes, exact bodies, event framing) must see the bytes as they are.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::EVENT_TIMEOUT;

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
        }
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
    /// asserts that it answers 200 with a stream.
    pub async fn watch(&self, path: &str) -> WatchStream {
        let req = self.build(Method::GET, path, &[("accept", JSON)], Bytes::new());
        let resp = match tokio::time::timeout(REQUEST_TIMEOUT, self.client.request(req)).await {
            Ok(r) => r.unwrap_or_else(|e| panic!("watch {path}: {e:?}")),
            Err(_) => panic!("watch {path}: no response headers within {REQUEST_TIMEOUT:?}"),
        };
        let status = resp.status();
        if status != StatusCode::OK {
            let body = resp.into_body().collect().await.map(|c| c.to_bytes());
            panic!("watch {path}: status {status}, body {body:?}");
        }
        let content_type = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        WatchStream {
            path: path.to_string(),
            content_type,
            body: resp.into_body(),
            buf: BytesMut::new(),
            ended: false,
        }
    }
}

/// A watch response read one newline-delimited JSON event at a time.
pub struct WatchStream {
    path: String,
    pub content_type: String,
    body: Incoming,
    buf: BytesMut,
    ended: bool,
}

impl WatchStream {
    /// The next event, or `None` at a clean end of stream. Panics after `timeout`.
    pub async fn next_event_within(&mut self, timeout: Duration) -> Option<Value> {
        match tokio::time::timeout(timeout, self.next_raw()).await {
            Ok(ev) => ev,
            Err(_) => panic!(
                "watch {}: no event within {timeout:?} (buffered: {:?})",
                self.path,
                String::from_utf8_lossy(&self.buf)
            ),
        }
    }

    /// The next event, panicking if none comes within the default event timeout or the
    /// stream ends.
    pub async fn next_event(&mut self) -> Value {
        let path = self.path.clone();
        self.next_event_within(EVENT_TIMEOUT)
            .await
            .unwrap_or_else(|| panic!("watch {path}: stream ended, expected an event"))
    }

    async fn next_raw(&mut self) -> Option<Value> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line = self.buf.split_to(pos + 1);
                let line = &line[..line.len() - 1];
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Some(serde_json::from_slice(line).unwrap_or_else(|e| {
                    panic!(
                        "watch {}: event is not JSON: {e}: {:?}",
                        self.path,
                        String::from_utf8_lossy(line)
                    )
                }));
            }
            if self.ended {
                assert!(
                    self.buf.iter().all(u8::is_ascii_whitespace),
                    "watch {}: stream ended inside an event: {:?}",
                    self.path,
                    String::from_utf8_lossy(&self.buf)
                );
                return None;
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => panic!("watch {}: stream error: {e}", self.path),
                None => self.ended = true,
            }
        }
    }
}

//! TokenReview and SubjectAccessReview, asked of the upstream apiserver with watchgate's
//! own credentials: the delegated authentication and authorization of aggregated API
//! servers (k8s.io/apiserver `authenticatorfactory` and `authorizerfactory`).
//!
//! [`Reviews`] is the seam: the gateway uses [`UpstreamReviews`]; benches and unit tests
//! plug in answers of their own.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request};
use http_body_util::{BodyExt, Limited};
use serde::Deserialize;
use serde_json::{json, Value};

use super::attributes::Attributes;
use super::user::UserInfo;
use crate::upstream::Upstream;

/// Why a review could not be had. Cloned: one failed fetch answers every request that
/// waited for it.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ReviewError {
    #[error("{kind} failed: {reason}")]
    Failed { kind: &'static str, reason: String },
    #[error("{kind}: no answer within {0:?}", .timeout)]
    Timeout {
        kind: &'static str,
        timeout: Duration,
    },
    #[error("{kind}: the upstream answered {code}: {body}")]
    Refused {
        kind: &'static str,
        code: u16,
        body: String,
    },
}

/// A TokenReview's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenVerdict {
    Authenticated(UserInfo),
    /// Not authenticated; the reviewer's `status.error`, if any (logged, never shown).
    Rejected(String),
}

/// A SubjectAccessReview's verdict: allowed, or not with the authorizer's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny(String),
}

pub type ReviewFuture<T> = Pin<Box<dyn Future<Output = Result<T, ReviewError>> + Send>>;

/// Who answers the reviews.
pub trait Reviews: Send + Sync + 'static {
    fn token_review(&self, token: &str) -> ReviewFuture<TokenVerdict>;
    fn access_review(&self, user: &UserInfo, attrs: &Attributes) -> ReviewFuture<Decision>;
}

/// How long one review may take (the webhook authenticator's and authorizer's default
/// request timeout in k8s.io/apiserver is 10 s).
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// A review's answer is small; anything larger is not an answer.
const MAX_REVIEW_BYTES: usize = 1 << 20;

/// Reviews sent to the upstream apiserver through the gateway's upstream client.
pub struct UpstreamReviews {
    upstream: Upstream,
    timeout: Duration,
}

impl UpstreamReviews {
    pub fn new(upstream: Upstream) -> Self {
        Self {
            upstream,
            timeout: REVIEW_TIMEOUT,
        }
    }

    fn post(&self, kind: &'static str, path: &'static str, body: Value) -> ReviewFuture<Value> {
        let upstream = self.upstream.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            let mut req = Request::builder()
                .method(Method::POST)
                .uri(path)
                .body(crate::body::full(
                    serde_json::to_vec(&body).expect("a review serialises"),
                ))
                .expect("a valid review request");
            let h = req.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            h.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
            let exchange = async {
                let resp = upstream.send(req).await.map_err(|e| ReviewError::Failed {
                    kind,
                    reason: e.to_string(),
                })?;
                let code = resp.status();
                let bytes: Bytes = Limited::new(resp.into_body(), MAX_REVIEW_BYTES)
                    .collect()
                    .await
                    .map_err(|e| ReviewError::Failed {
                        kind,
                        reason: format!("reading the answer: {e}"),
                    })?
                    .to_bytes();
                if !code.is_success() {
                    return Err(ReviewError::Refused {
                        kind,
                        code: code.as_u16(),
                        body: String::from_utf8_lossy(&bytes).trim_end().to_string(),
                    });
                }
                serde_json::from_slice::<Value>(&bytes).map_err(|e| ReviewError::Failed {
                    kind,
                    reason: format!("the answer is not JSON: {e}"),
                })
            };
            tokio::time::timeout(timeout, exchange)
                .await
                .unwrap_or(Err(ReviewError::Timeout { kind, timeout }))
        })
    }
}

impl Reviews for UpstreamReviews {
    fn token_review(&self, token: &str) -> ReviewFuture<TokenVerdict> {
        let body = token_review_request(token);
        let fut = self.post(
            "TokenReview",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            body,
        );
        Box::pin(async move { parse_token_review(&fut.await?) })
    }

    fn access_review(&self, user: &UserInfo, attrs: &Attributes) -> ReviewFuture<Decision> {
        let body = access_review_request(user, attrs);
        let fut = self.post(
            "SubjectAccessReview",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            body,
        );
        Box::pin(async move { parse_access_review(&fut.await?) })
    }
}

pub fn token_review_request(token: &str) -> Value {
    json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    })
}

/// The webhook authorizer's request: the resource attributes, then the user's identity.
pub fn access_review_request(user: &UserInfo, attrs: &Attributes) -> Value {
    let mut spec = serde_json::Map::new();
    spec.insert("resourceAttributes".into(), attrs.to_json());
    spec.insert("user".into(), json!(user.name));
    if !user.groups.is_empty() {
        spec.insert("groups".into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        spec.insert("extra".into(), json!(user.extra));
    }
    if !user.uid.is_empty() {
        spec.insert("uid".into(), json!(user.uid));
    }
    json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": Value::Object(spec),
    })
}

#[derive(Deserialize, Default)]
struct TokenReviewStatus {
    #[serde(default)]
    authenticated: bool,
    #[serde(default)]
    user: ReviewUser,
    #[serde(default)]
    error: String,
}

#[derive(Deserialize, Default)]
struct ReviewUser {
    #[serde(default)]
    username: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    extra: BTreeMap<String, Vec<String>>,
}

pub fn parse_token_review(v: &Value) -> Result<TokenVerdict, ReviewError> {
    let status: TokenReviewStatus =
        serde_json::from_value(v["status"].clone()).map_err(|e| ReviewError::Failed {
            kind: "TokenReview",
            reason: format!("unexpected status: {e}"),
        })?;
    if !status.authenticated || status.user.username.is_empty() {
        return Ok(TokenVerdict::Rejected(status.error));
    }
    let u = status.user;
    Ok(TokenVerdict::Authenticated(UserInfo {
        name: u.username,
        uid: u.uid,
        groups: u.groups,
        extra: u.extra,
    }))
}

pub fn parse_access_review(v: &Value) -> Result<Decision, ReviewError> {
    let status = v.get("status").ok_or_else(|| ReviewError::Failed {
        kind: "SubjectAccessReview",
        reason: "no status in the answer".into(),
    })?;
    let reason = status["reason"].as_str().unwrap_or_default().to_string();
    if status["allowed"].as_bool() == Some(true) {
        Ok(Decision::Allow)
    } else {
        Ok(Decision::Deny(reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_are_read_as_the_webhooks_read_them() {
        let v = json!({"status": {"authenticated": true, "user": {"username": "alice",
            "uid": "1", "groups": ["dev", "system:authenticated"]}}});
        let TokenVerdict::Authenticated(u) = parse_token_review(&v).unwrap() else {
            panic!()
        };
        assert_eq!((u.name.as_str(), u.groups.len()), ("alice", 2));
        let v = json!({"status": {"authenticated": false, "error": "token expired"}});
        assert_eq!(
            parse_token_review(&v).unwrap(),
            TokenVerdict::Rejected("token expired".into())
        );
        let v = json!({"status": {"allowed": false, "reason": "no"}});
        assert_eq!(
            parse_access_review(&v).unwrap(),
            Decision::Deny("no".into())
        );
        let v = json!({"status": {"allowed": true}});
        assert_eq!(parse_access_review(&v).unwrap(), Decision::Allow);
    }
}

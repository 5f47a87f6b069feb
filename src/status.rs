//! `metav1.Status`: the one place where errors become API responses.
//!
//! The constructors mirror k8s.io/apimachinery/pkg/api/errors (NewNotFound, NewConflict,
//! NewBadRequest, …) so that message texts, reasons and codes match kube-apiserver byte
//! for byte. Field order follows the Go struct (kind, apiVersion, metadata, status,
//! message, reason, details, code), which serde_json's `preserve_order` keeps.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use serde_json::{json, Map, Value};

use crate::body::{self, Body};

/// A group + resource pair, printed the way apimachinery's `GroupResource.String()` does:
/// `pods` for the core group, `deployments.apps` otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn new(group: impl Into<String>, resource: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            resource: resource.into(),
        }
    }
}

impl std::fmt::Display for GroupResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// One entry of `details.causes`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    pub reason: String,
    pub message: String,
    pub field: Option<String>,
}

/// A `metav1.Status` with `status: Failure` (or `Success` for delete answers).
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub code: u16,
    pub reason: String,
    pub message: String,
    /// `details.name`, `details.group`, `details.kind`.
    pub name: Option<String>,
    pub group: Option<String>,
    pub kind: Option<String>,
    pub uid: Option<String>,
    pub causes: Vec<Cause>,
    pub retry_after_seconds: Option<u32>,
    /// Whether `details` is present at all. apimachinery omits it for BadRequest and a
    /// few others but sends `"details":{}` for a bare NotFound.
    pub with_details: bool,
    pub success: bool,
    /// `metadata.continue` (ListMeta) — set on the 410 for a compacted continue token,
    /// which carries a fresh token to continue inconsistently.
    pub list_continue: Option<String>,
}

impl Status {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.to_string(),
            message: message.into(),
            name: None,
            group: None,
            kind: None,
            uid: None,
            causes: Vec::new(),
            retry_after_seconds: None,
            with_details: false,
            success: false,
            list_continue: None,
        }
    }

    fn with_gr(mut self, gr: &GroupResource, name: &str) -> Self {
        self.with_details = true;
        if !name.is_empty() {
            self.name = Some(name.to_string());
        }
        if !gr.group.is_empty() {
            self.group = Some(gr.group.clone());
        }
        if !gr.resource.is_empty() {
            self.kind = Some(gr.resource.clone());
        }
        self
    }

    /// `errors.NewNotFound`: `pods "x" not found`.
    pub fn not_found(gr: &GroupResource, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{gr} {name:?} not found")).with_gr(gr, name)
    }

    /// The apiserver's answer for a path it does not serve.
    pub fn path_not_found() -> Self {
        let mut s = Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
        s.with_details = true;
        s
    }

    /// `errors.NewAlreadyExists`.
    pub fn already_exists(gr: &GroupResource, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{gr} {name:?} already exists"),
        )
        .with_gr(gr, name)
    }

    /// `errors.NewConflict`: `Operation cannot be fulfilled on pods "x": <err>`.
    pub fn conflict(gr: &GroupResource, name: &str, err: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {gr} {name:?}: {err}"),
        )
        .with_gr(gr, name)
    }

    /// `errors.NewBadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// `errors.NewResourceExpired`: 410 with reason `Expired`.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// The watch cache's answer to a watch from before its history
    /// (watch_cache.go `getAllEventsSinceLocked`).
    pub fn too_old_resource_version(requested: u64, oldest: u64) -> Self {
        Self::expired(format!("too old resource version: {requested} ({oldest})"))
    }

    /// `errors.NewGone`: 410 with reason `Gone`.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Gone", message)
    }

    /// `errors.NewMethodNotSupported`.
    pub fn method_not_supported(gr: &GroupResource, action: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!(
                "{action} is not supported on resources of kind {:?}",
                gr.to_string()
            ),
        )
        .with_gr(gr, "")
    }

    /// `errors.NewServiceUnavailable`.
    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// `errors.NewInternalError`.
    pub fn internal(err: impl std::fmt::Display) -> Self {
        let mut s = Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {err}"),
        );
        s.with_details = true;
        s.causes.push(Cause {
            reason: String::new(),
            message: err.to_string(),
            field: None,
        });
        s
    }

    /// `storage.NewTooLargeResourceVersionError`: `errors.NewTimeoutError` (which prefixes
    /// "Timeout: ") with the `ResourceVersionTooLarge` cause. kube-apiserver's watch cache
    /// passes `resourceVersionTooHighRetrySeconds = 1`.
    pub fn too_large_resource_version(requested: u64, current: u64, retry_seconds: u32) -> Self {
        let mut s = Self::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
        );
        s.with_details = true;
        s.retry_after_seconds = Some(retry_seconds);
        s.causes.push(Cause {
            reason: "ResourceVersionTooLarge".into(),
            message: "Too large resource version".into(),
            field: None,
        });
        s
    }

    /// The JSON object, in apimachinery's field order.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), json!("Status"));
        m.insert("apiVersion".into(), json!("v1"));
        match &self.list_continue {
            Some(c) => m.insert("metadata".into(), json!({ "continue": c })),
            None => m.insert("metadata".into(), json!({})),
        };
        m.insert(
            "status".into(),
            json!(if self.success { "Success" } else { "Failure" }),
        );
        if !self.message.is_empty() {
            m.insert("message".into(), json!(self.message));
        }
        if !self.reason.is_empty() {
            m.insert("reason".into(), json!(self.reason));
        }
        if self.with_details {
            let mut d = Map::new();
            if let Some(n) = &self.name {
                d.insert("name".into(), json!(n));
            }
            if let Some(g) = &self.group {
                d.insert("group".into(), json!(g));
            }
            if let Some(k) = &self.kind {
                d.insert("kind".into(), json!(k));
            }
            if let Some(u) = &self.uid {
                d.insert("uid".into(), json!(u));
            }
            if !self.causes.is_empty() {
                let causes: Vec<Value> = self
                    .causes
                    .iter()
                    .map(|c| {
                        let mut cm = Map::new();
                        if !c.reason.is_empty() {
                            cm.insert("reason".into(), json!(c.reason));
                        }
                        if !c.message.is_empty() {
                            cm.insert("message".into(), json!(c.message));
                        }
                        if let Some(f) = &c.field {
                            cm.insert("field".into(), json!(f));
                        }
                        Value::Object(cm)
                    })
                    .collect();
                d.insert("causes".into(), Value::Array(causes));
            }
            if let Some(r) = self.retry_after_seconds {
                d.insert("retryAfterSeconds".into(), json!(r));
            }
            m.insert("details".into(), Value::Object(d));
        }
        m.insert("code".into(), json!(self.code));
        Value::Object(m)
    }

    /// Serialised the way the apiserver writes it: compact JSON plus a newline.
    pub fn to_bytes(&self) -> Bytes {
        let mut v = serde_json::to_vec(&self.to_value()).expect("status serialises");
        v.push(b'\n');
        Bytes::from(v)
    }

    /// A complete HTTP response carrying this Status.
    pub fn into_response(self) -> Response<Body> {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = Response::new(body::full(self.to_bytes()));
        *resp.status_mut() = code;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(r) = self.retry_after_seconds {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(r));
        }
        resp
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for Status {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_matches_apimachinery_shape() {
        let s = Status::not_found(&GroupResource::new("", "pods"), "web-1");
        assert_eq!(
            String::from_utf8(s.to_bytes().to_vec()).unwrap(),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
             \"message\":\"pods \\\"web-1\\\" not found\",\"reason\":\"NotFound\",\
             \"details\":{\"name\":\"web-1\",\"kind\":\"pods\"},\"code\":404}\n"
        );
    }

    #[test]
    fn group_resource_prints_like_go() {
        assert_eq!(
            GroupResource::new("apps", "deployments").to_string(),
            "deployments.apps"
        );
        assert_eq!(GroupResource::new("", "pods").to_string(), "pods");
    }
}

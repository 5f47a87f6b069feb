//! The answers kube-apiserver gives when it refuses a request before any handler runs,
//! reproduced byte for byte:
//!
//! - 401: `filters.Unauthorized` → `apierrors.NewUnauthorized("Unauthorized")`;
//! - 403: `responsewriters.Forbidden` (message from `forbiddenMessage`, HTML-sanitised,
//!   the authorizer's reason after `": "`) → `apierrors.NewForbidden`, plus
//!   `X-Content-Type-Options: nosniff`;
//! - 429: the max-in-flight and APF filters' `tooManyRequests`: Go's `http.Error`, a plain
//!   text body (not a Status), `Retry-After`.
//!
//! 401 and 403 are written by `responsewriters.ErrorNegotiated`: in protobuf to a client
//! whose `Accept` negotiates protobuf (client-go's typed clients), in JSON otherwise, and as
//! `WriteRawJSON` (indented) when nothing in `Accept` is acceptable.

use http::{header, HeaderValue, Response, StatusCode};

use super::attributes::Attributes;
use crate::body::{self, Body};
use crate::selector::validation::go_quote;
use crate::status::Status;

/// The 401 Status, in the form the request's Accept header negotiated for errors (its
/// `request::Parsed::accept`, `Accept::for_errors`; `None`: nothing acceptable).
pub fn unauthorized(form: Option<Negotiated>) -> Response<Body> {
    negotiated_as(Status::new(401, "Unauthorized", "Unauthorized"), form)
}

/// The 403 Status for `user` asking for `attrs`, with the authorizer's `reason`, in the
/// form the request's Accept header negotiated for errors.
pub fn forbidden(
    user: &str,
    attrs: &Attributes,
    reason: &str,
    form: Option<Negotiated>,
) -> Response<Body> {
    let mut resp = negotiated_as(forbidden_status(user, attrs, reason), form);
    resp.headers_mut().insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    resp
}

use http::HeaderName;

use crate::error_response::negotiated_as;
use crate::negotiate::Negotiated;

/// `apierrors.NewForbidden(gr, name, forbiddenMessage(...))`.
pub fn forbidden_status(user: &str, attrs: &Attributes, reason: &str) -> Status {
    let msg = sanitize(&forbidden_message(user, attrs));
    let err = if reason.is_empty() {
        msg
    } else {
        format!("{msg}: {reason}")
    };
    let gr = if attrs.group.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}.{}", attrs.resource, attrs.group)
    };
    let message = if gr.is_empty() {
        format!("forbidden: {err}")
    } else if attrs.name.is_empty() {
        format!("{gr} is forbidden: {err}")
    } else {
        format!("{gr} {} is forbidden: {err}", go_quote(&attrs.name))
    };
    let mut s = Status::new(403, "Forbidden", message);
    s.with_details = true;
    s.name = Some(attrs.name.clone()).filter(|n| !n.is_empty());
    s.group = Some(attrs.group.clone()).filter(|g| !g.is_empty());
    s.kind = Some(attrs.resource.clone()).filter(|r| !r.is_empty());
    s
}

/// `forbiddenMessage` for a resource request.
fn forbidden_message(user: &str, a: &Attributes) -> String {
    let mut resource = a.resource.clone();
    if !a.subresource.is_empty() {
        resource.push('/');
        resource.push_str(&a.subresource);
    }
    if a.namespace.is_empty() {
        format!(
            "User {} cannot {} resource {} in API group {} at the cluster scope",
            go_quote(user),
            a.verb,
            go_quote(&resource),
            go_quote(&a.group)
        )
    } else {
        format!(
            "User {} cannot {} resource {} in API group {} in the namespace {}",
            go_quote(user),
            a.verb,
            go_quote(&resource),
            go_quote(&a.group),
            go_quote(&a.namespace)
        )
    }
}

/// responsewriters' `sanitizer`: no text that looks like HTML.
fn sanitize(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The seconds a 429 asks the client to wait (the max-in-flight filter's "1").
pub const RETRY_AFTER_SECONDS: u32 = 1;

/// The 429 of kube-apiserver's max-in-flight and APF filters.
pub fn too_many_requests() -> Response<Body> {
    let mut resp = Response::new(body::full("Too many requests, please try again later.\n"));
    *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(verb: &str, group: &str, resource: &str, ns: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
            namespace: ns.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_403_is_the_apiservers() {
        let s = forbidden_status("bob", &attrs("list", "", "secrets", "default", ""), "");
        assert_eq!(
            String::from_utf8(s.to_bytes().to_vec()).unwrap(),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
             \"message\":\"secrets is forbidden: User \\\"bob\\\" cannot list resource \\\"secrets\\\" \
             in API group \\\"\\\" in the namespace \\\"default\\\"\",\"reason\":\"Forbidden\",\
             \"details\":{\"kind\":\"secrets\"},\"code\":403}\n"
        );
        let s = forbidden_status(
            "system:serviceaccount:a:b",
            &attrs("get", "apps", "deployments", "", "web"),
            "RBAC: role not found",
        );
        assert_eq!(
            s.message,
            "deployments.apps \"web\" is forbidden: User \"system:serviceaccount:a:b\" cannot \
             get resource \"deployments\" in API group \"apps\" at the cluster scope: RBAC: role not found"
        );
        assert_eq!(
            (s.name.as_deref(), s.group.as_deref(), s.kind.as_deref()),
            (Some("web"), Some("apps"), Some("deployments"))
        );
    }

    #[test]
    fn the_401_is_the_apiservers() {
        let s = Status::new(401, "Unauthorized", "Unauthorized");
        assert_eq!(
            String::from_utf8(s.to_bytes().to_vec()).unwrap(),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
             \"message\":\"Unauthorized\",\"reason\":\"Unauthorized\",\"code\":401}\n"
        );
    }
}

//! The simulator's write path: POST (create), PUT (update), PATCH (merge, JSON,
//! strategic, apply), DELETE, deletecollection, the `status` and `scale` subresources,
//! `dryRun=All`, finalizers and namespace lifecycle.
//!
//! Order of checks and error texts follow k8s.io/apiserver `pkg/endpoints/handlers`,
//! `pkg/registry/generic/registry/store.go`, `pkg/registry/rest/{create,update,delete}.go`
//! and the NamespaceLifecycle admission plugin. See docs/simulator.md ("Writes"). One
//! module per handler file, so that a change to one verb's rules touches one file:
//!
//! - this file: the verb → handler table (the apiserver's `installer.go` routes) and the
//!   scope every handler shares (`rest.go`: the negotiated answer, options, field
//!   manager, dry-run);
//! - [`decode`]: the request body (`NegotiateInputSerializer`, the decode and
//!   `transformDecodeError` of `create.go`/`update.go`);
//! - [`create`], [`update`], [`patch`], [`delete`]: `create.go`, `update.go`,
//!   `patch.go`, `delete.go` with the generic store's part of each;
//! - [`scale`]: the `scale` subresource (the apps registry's `ScaleREST`);
//! - [`namespace`]: NamespaceLifecycle admission, the namespace controller's cleanup and
//!   the built-in namespaces.
//!
//! Contract with the router (src/sim/mod.rs): `handle(sim, api, rt, req)`; the router has
//! resolved the type, checked the path shape and read the body (≤ 3 MiB).

// metav1.Status is the error type of every write step (as in the store API); boxing it
// would only add noise to the happy path, which it never slows.
#![allow(clippy::result_large_err)]

mod create;
mod decode;
mod delete;
mod namespace;
mod patch;
mod scale;
mod update;

pub use create::generate_name;
pub use namespace::{bootstrap, BUILTIN_NAMESPACES};

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode};
use serde_json::{json, Map, Value};

use crate::body::{self, Body};
use crate::request::{ApiRequest, Verb};
use crate::sim::answer as negotiated;
use crate::sim::apply::Writer;
use crate::sim::objects::{self, now_rfc3339};
use crate::sim::resources::ResourceType;
use crate::sim::store::Store;
use crate::sim::validate::{self, FieldError};
use crate::sim::{convert, Sim};
use crate::status::{GroupResource, Status};

/// `OptimisticLockErrorMsg` (k8s.io/apiserver pkg/registry/generic/registry/store.go).
pub const OPTIMISTIC_LOCK_MSG: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// The answer of a write handler.
type Answer = Result<Response<Body>, Status>;

/// Entry point from the router.
pub async fn handle(
    sim: &Arc<Sim>,
    api: &ApiRequest,
    rt: &'static ResourceType,
    req: Request<Bytes>,
) -> Response<Body> {
    let Some(rp) = api.resource() else {
        return Status::path_not_found().into_response();
    };
    let (parts, body) = req.into_parts();
    // create.go, update.go, patch.go, delete.go negotiate the answer before reading the
    // body; the scale subresource (another scope) is answered in plain JSON.
    let answer = if rp.subresource.as_deref() == Some("scale") {
        None
    } else {
        match negotiated::Answer::negotiate(rt, &parts.headers, api) {
            Ok(a) => Some(a),
            Err(s) => return negotiated::error(&s, &parts.headers, api),
        }
    };
    let w = Write {
        answer,
        sim,
        store: &sim.store,
        api,
        rt,
        ns: rp.namespace.clone().unwrap_or_default(),
        name: rp.name.clone(),
        sub: rp.subresource.clone(),
        headers: parts.headers,
        body,
        now: now_rfc3339(),
    };
    let res = match (api.verb, w.sub.as_deref(), w.name.is_some()) {
        (Verb::Create, None, false) => w.create(),
        (Verb::Update, None | Some("status"), true) => w.update(),
        (Verb::Update, Some("finalize"), true) if rt.resource == "namespaces" => w.update(),
        (Verb::Patch, None | Some("status"), true) => w.patch(),
        (Verb::Get, Some("scale"), true) if is_scalable(rt) => w.get_scale(),
        (Verb::Update, Some("scale"), true) if is_scalable(rt) => w.update_scale(),
        (Verb::Patch, Some("scale"), true) if is_scalable(rt) => w.patch_scale(),
        (Verb::Delete, None, true) => w.delete(),
        (Verb::DeleteCollection, None, false) if !rt.namespaced || !w.ns.is_empty() => {
            w.delete_collection()
        }
        _ => Err(Status::method_not_supported(
            &rt.group_resource(),
            api.verb.as_str(),
        )),
    };
    res.unwrap_or_else(|s| negotiated::error(&s, &w.headers, api))
}

fn is_scalable(rt: &ResourceType) -> bool {
    rt.subresources.contains(&"scale")
}

/// A JSON response the way the apiserver writes objects (compact JSON + newline): the
/// scale subresource's answers, which are not negotiated (docs/simulator.md).
fn plain_json(code: u16, v: &Value) -> Response<Body> {
    let mut bytes = serde_json::to_vec(v).unwrap_or_default();
    bytes.push(b'\n');
    let mut resp = Response::new(body::full(bytes));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// `prefixFromUserAgent`: the User-Agent up to the first '/', printable characters
/// only, at most 128 bytes (create.go `managerOrUserAgent`).
pub fn manager_from_user_agent(ua: &str) -> String {
    let head = ua.split('/').next().unwrap_or_default();
    let mut out = String::new();
    for c in head.chars() {
        if c.is_control() {
            continue;
        }
        if out.len() + c.len_utf8() > 128 {
            break;
        }
        out.push(c);
    }
    out
}

fn meta_str<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get("metadata")
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    let m = v.as_object_mut().expect("objects are JSON objects");
    let e = m.entry("metadata").or_insert_with(|| json!({}));
    if !e.is_object() {
        *e = json!({});
    }
    e.as_object_mut().expect("object")
}

fn finalizers(v: &Value) -> Vec<String> {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

fn is_deleting(v: &Value) -> bool {
    v.pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// `GroupKind.String()`-qualified kind of a type for Invalid errors: `Pod`, `Deployment.apps`.
fn kind_group(rt: &ResourceType) -> (&'static str, &'static str) {
    (rt.group, rt.kind)
}

/// Everything one write request needs.
struct Write<'a> {
    sim: &'a Arc<Sim>,
    /// The negotiated answer (None: the scale subresource, plain JSON).
    answer: Option<negotiated::Answer>,
    store: &'a Store,
    api: &'a ApiRequest,
    rt: &'static ResourceType,
    ns: String,
    name: Option<String>,
    sub: Option<String>,
    headers: HeaderMap,
    body: Bytes,
    now: String,
}

impl Write<'_> {
    /// The write's answer in the negotiated form: Table / PartialObjectMetadata when asked
    /// (a Status is never converted), pretty-printed when asked.
    fn respond(&self, code: u16, v: &Value) -> Answer {
        let Some(answer) = &self.answer else {
            return Ok(plain_json(code, v));
        };
        let code = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
        match convert::write_result(self.sim, self.rt, answer, self.api, v)? {
            Some(converted) => Ok(answer.object(code, &converted)),
            None => Ok(answer.object(code, v)),
        }
    }

    fn gr(&self) -> GroupResource {
        self.rt.group_resource()
    }

    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    /// The field manager: `fieldManager`, else the User-Agent's program name.
    fn manager(&self) -> String {
        match self.api.field_manager() {
            Some(m) if !m.is_empty() => m.to_string(),
            _ => manager_from_user_agent(
                self.headers
                    .get(header::USER_AGENT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or(""),
            ),
        }
    }

    fn dry_run_values(&self) -> Vec<String> {
        self.api
            .query_all("dryRun")
            .into_iter()
            .map(String::from)
            .collect()
    }

    /// Validates CreateOptions / UpdateOptions / PatchOptions query parameters.
    fn validate_options(&self, kind: &str, apply: bool) -> Result<bool, Status> {
        let dry = self.dry_run_values();
        let mut errs = Vec::new();
        if kind == "PatchOptions" {
            if !apply && self.api.query_get("force").is_some() {
                errs.push(FieldError::forbidden(
                    "force",
                    "may not be specified for non-apply patch",
                ));
            }
            if apply && self.api.field_manager().unwrap_or("").is_empty() {
                errs.push(FieldError::required(
                    "fieldManager",
                    "is required for apply patch",
                ));
            }
        }
        errs.extend(validate::validate_field_manager(
            self.api.field_manager().unwrap_or(""),
        ));
        errs.extend(validate::validate_dry_run(&dry));
        errs.extend(validate::validate_field_validation(
            self.api.query_get("fieldValidation").unwrap_or(""),
        ));
        if !errs.is_empty() {
            return Err(validate::invalid_options(kind, &errs));
        }
        Ok(!dry.is_empty())
    }

    fn writer<'w>(&'w self, manager: &'w str, subresource: Option<&'w str>) -> Writer<'w> {
        Writer {
            manager,
            api_version: API_VERSIONS
                .iter()
                .find(|(g, _)| *g == self.rt.group)
                .map(|(_, v)| *v)
                .unwrap_or("v1"),
            time: &self.now,
            subresource,
            with_status: !objects::has_status_subresource(self.rt),
        }
    }

    fn clone_shallow(&self) -> Self {
        Write {
            sim: self.sim,
            answer: self.answer.clone(),
            store: self.store,
            api: self.api,
            rt: self.rt,
            ns: self.ns.clone(),
            name: self.name.clone(),
            sub: self.sub.clone(),
            headers: self.headers.clone(),
            body: self.body.clone(),
            now: self.now.clone(),
        }
    }
}

/// apiVersion recorded in managedFields per group.
const API_VERSIONS: &[(&str, &str)] = &[
    ("", "v1"),
    ("apps", "apps/v1"),
    ("apiextensions.k8s.io", "apiextensions.k8s.io/v1"),
    ("discovery.k8s.io", "discovery.k8s.io/v1"),
    ("example.com", "example.com/v1"),
];

trait WithMessage {
    fn with_message(self, m: String) -> Self;
}

impl WithMessage for Status {
    fn with_message(mut self, m: String) -> Self {
        self.message = m;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_agent_prefix() {
        assert_eq!(
            manager_from_user_agent("kubectl/v1.37.1 (linux/amd64) kubernetes/abc"),
            "kubectl"
        );
        assert_eq!(manager_from_user_agent(""), "");
    }
}

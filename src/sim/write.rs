//! The simulator's write path: POST (create), PUT (update), PATCH (merge, JSON,
//! strategic, apply), DELETE, deletecollection, the `status` and `scale` subresources,
//! `dryRun=All`, finalizers and namespace lifecycle.
//!
//! Order of checks and error texts follow k8s.io/apiserver `pkg/endpoints/handlers`
//! (`create.go`, `update.go`, `patch.go`, `delete.go`, `rest.go`),
//! `pkg/registry/generic/registry/store.go`, `pkg/registry/rest/{create,update,delete}.go`
//! and the NamespaceLifecycle admission plugin. See docs/simulator.md ("Writes").
//!
//! Contract with the router (src/sim/mod.rs): `handle(sim, api, rt, req)`; the router has
//! resolved the type, checked the path shape and read the body (≤ 3 MiB).

// metav1.Status is the error type of every write step (as in the store API); boxing it
// would only add noise to the happy path, which it never slows.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode};
use serde_json::{json, Map, Value};

use crate::body::{self, Body};
use crate::request::{ApiRequest, Verb};
use crate::sim::answer as negotiated;
use crate::sim::apply::{self, Writer};
use crate::sim::objects;
use crate::sim::patch::{self, JsonPatchError};
use crate::sim::protobuf::BodyError;
use crate::sim::resources::{self, ResourceType};
use crate::sim::store::{Mutation, Store};
use crate::sim::validate::{self, go_quote, go_string_slice, FieldError, NameRule};
use crate::sim::{convert, Sim};
use crate::status::{Cause, GroupResource, Status};

/// `OptimisticLockErrorMsg` (k8s.io/apiserver pkg/registry/generic/registry/store.go).
pub const OPTIMISTIC_LOCK_MSG: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// Namespaces the NamespaceLifecycle plugin refuses to delete (`immortalNamespaces`).
const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// The built-in namespaces a fresh kube-apiserver has.
pub const BUILTIN_NAMESPACES: &[&str] =
    &["default", "kube-node-lease", "kube-public", "kube-system"];

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

/// `metav1.Time` as the apiserver writes it (RFC 3339, seconds, UTC).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
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

/// `names.SimpleNameGenerator`: base (cut to 58 bytes) + 5 random characters from
/// `utilrand`'s alphabet (no vowels, no confusable digits).
pub fn generate_name(base: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut base = base.to_string();
    if base.len() > 58 {
        let mut cut = 58;
        while !base.is_char_boundary(cut) {
            cut -= 1;
        }
        base.truncate(cut);
    }
    let mut rng = rand::rng();
    for _ in 0..5 {
        let i = rand::Rng::random_range(&mut rng, 0..ALPHANUMS.len());
        base.push(ALPHANUMS[i] as char);
    }
    base
}

/// `summarizeData` (create.go's transformDecodeError): JSON objects print as text,
/// anything else as hex, cut at 30 bytes.
fn summarize(data: &[u8]) -> String {
    const MAX: usize = 30;
    if data.is_empty() {
        return "<empty>".into();
    }
    let (head, more) = if data.len() > MAX {
        (&data[..MAX], " ...")
    } else {
        (data, "")
    };
    if data[0] == b'{' {
        format!("{}{more}", String::from_utf8_lossy(head))
    } else {
        let hex: String = head.iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}{more}")
    }
}

const TYPE_META_STRUCT: &str =
    "struct { APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }";

/// The accepted request body media types (`NegotiateInputSerializer`): built-in types also
/// list protobuf; custom resources only JSON and YAML.
fn accepted_media_types(rt: &ResourceType) -> &'static [&'static str] {
    if rt.group == "example.com" {
        &["application/json", "application/yaml"]
    } else {
        &[
            "application/json",
            "application/yaml",
            "application/vnd.kubernetes.protobuf",
        ]
    }
}

/// The patch types a type accepts (patch.go; custom resources have no strategic merge).
fn patch_types(rt: &ResourceType) -> &'static [&'static str] {
    if rt.group == "example.com" {
        &[
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ]
    } else {
        &[
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/apply-patch+yaml",
        ]
    }
}

/// `negotiation.NewUnsupportedMediaTypeError`.
fn unsupported_media_type(accepted: &[&str]) -> Status {
    Status::new(
        415,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format - accepted media types include: {}",
            accepted.join(", ")
        ),
    )
}

/// The media type of the request body, parameters dropped, lower-cased.
fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// YAML → JSON value (sigs.k8s.io/yaml semantics for the documents clients send).
fn yaml_to_json(data: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(data).map_err(|e| e.to_string())?;
    serde_saphyr::from_str::<Value>(text).map_err(|e| e.to_string())
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

/// The object part of a `metav1.Status` Success answer to a delete (store.go
/// `finalizeDelete`): details carry the resource (not the kind), name and uid.
fn delete_success(rt: &ResourceType, obj: &Value) -> Value {
    let mut details = Map::new();
    details.insert("name".into(), json!(meta_str(obj, "name")));
    if !rt.group.is_empty() {
        details.insert("group".into(), json!(rt.group));
    }
    details.insert("kind".into(), json!(rt.resource));
    details.insert("uid".into(), json!(meta_str(obj, "uid")));
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
           "details": Value::Object(details)})
}

/// Creates the built-in namespaces (default, kube-node-lease, kube-public, kube-system)
/// the way a real create would; existing ones are left alone. Idempotent.
pub fn bootstrap(store: &Store) {
    let rt = resources::find("", "v1", "namespaces").expect("namespaces are served");
    let now = now_rfc3339();
    for name in BUILTIN_NAMESPACES {
        let mut obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        fill_create_meta(rt, &mut obj, &now);
        let w = Writer {
            manager: "kube-apiserver",
            api_version: "v1",
            time: &now,
            subresource: None,
            with_status: false,
        };
        apply::record_update(None, &mut obj, &w, "Update");
        objects::canonical_order(&mut obj);
        let _ = store.mutate(rt, "", name, |cur| {
            Ok(if cur.is_some() {
                Mutation::NoOp
            } else {
                Mutation::Put(obj)
            })
        });
    }
}

/// System metadata and defaults of a new object (`FillObjectMetaSystemFields`,
/// `BeforeCreate`, the strategy's `PrepareForCreate`).
fn fill_create_meta(rt: &ResourceType, obj: &mut Value, now: &str) {
    {
        let m = meta_mut(obj);
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        // The store fills this in; the placeholder keeps the Go field order.
        m.insert("resourceVersion".into(), json!(""));
        m.insert("creationTimestamp".into(), json!(now));
        m.shift_remove("deletionTimestamp");
        m.shift_remove("deletionGracePeriodSeconds");
        m.shift_remove("selfLink");
        if objects::tracks_generation(rt) {
            m.insert("generation".into(), json!(1));
        } else {
            m.shift_remove("generation");
        }
    }
    objects::prepare_for_create(rt, obj);
    objects::canonical_order(obj);
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

    /// Decodes a create/update body into a JSON object of this type (create.go /
    /// update.go decode + transformDecodeError + the GroupVersion check).
    fn decode_object(&self) -> Result<Value, Status> {
        let ct = content_type(&self.headers);
        let accepted = accepted_media_types(self.rt);
        let ct = if ct.is_empty() {
            "application/json".to_string()
        } else {
            ct
        };
        let unrecognized = |err: String| {
            Status::bad_request(format!(
                "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: {err} ({})",
                self.rt.kind,
                summarize(&self.body)
            ))
        };
        let mut obj: Value = match ct.as_str() {
            "application/json" => {
                if let Some(e) = crate::sim::gojson::syntax_error(&self.body) {
                    return Err(unrecognized(e));
                }
                serde_json::from_slice(&self.body).map_err(|e| unrecognized(e.to_string()))?
            }
            "application/yaml" => yaml_to_json(&self.body).map_err(|e| {
                Status::bad_request(format!(
                    "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: error converting YAML to JSON: {e} ({})",
                    self.rt.kind,
                    summarize(&self.body)
                ))
            })?,
            "application/vnd.kubernetes.protobuf" if accepted.contains(&ct.as_str()) => {
                // client-go's typed clients (kubectl's `create configmap|secret|namespace`
                // among them) send protobuf.
                crate::sim::protobuf::decode_body(self.rt, &self.body).map_err(|e| match e {
                    BodyError::Unrecognized(why) => Status::bad_request(format!(
                        "the object provided is unrecognized (must be of type {}): {why} ({})",
                        self.rt.kind,
                        summarize(&self.body)
                    )),
                    BodyError::CannotHandle { kind, version, why } => {
                        Status::bad_request(format!(
                            "{kind} in version {} cannot be handled as a {}: {why}",
                            go_quote(&version),
                            self.rt.kind
                        ))
                    }
                })?
            }
            _ => return Err(unsupported_media_type(accepted)),
        };
        if obj.is_null() {
            obj = json!({});
        }
        if !obj.is_object() {
            return Err(unrecognized(format!(
                "json: cannot unmarshal {} into Go value of type {TYPE_META_STRUCT}",
                patch::go_json_type(&obj)
            )));
        }
        // Decoding into the Go struct drops the fields it lacks; the strict decoder names
        // them instead. Built-in kinds: at every level, from the struct's fields (the
        // protobuf table); the custom resource: the simulator's own top-level list.
        let strict = self.api.query_get("fieldValidation") == Some("Strict");
        let unknown = if crate::sim::protobuf::message_type(self.rt).is_some() {
            crate::sim::protobuf::prune(self.rt, &mut obj)
        } else if strict {
            objects::unknown_fields(self.rt, &obj)
        } else {
            Vec::new()
        };
        if strict && !unknown.is_empty() {
            let list: Vec<String> = unknown
                .iter()
                .map(|f| format!("unknown field {}", go_quote(f)))
                .collect();
            let version = self.rt.version;
            return Err(Status::bad_request(format!(
                "{} in version {} cannot be handled as a {}: strict decoding error: {}",
                self.rt.kind,
                go_quote(version),
                self.rt.kind,
                list.join(", ")
            )));
        }
        self.check_type(&mut obj)?;
        Ok(obj)
    }

    /// kind/apiVersion defaulting and checks, plus the ObjectMeta shapes the typed decoder
    /// would reject.
    fn check_type(&self, obj: &mut Value) -> Result<(), Status> {
        let want_av = self.rt.api_version();
        let m = obj.as_object_mut().expect("object");
        for k in ["apiVersion", "kind"] {
            if let Some(v) = m.get(k) {
                if !v.is_string() && !v.is_null() {
                    return Err(Status::bad_request(format!(
                        "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go struct field .{k} of type string ({})",
                        self.rt.kind,
                        patch::go_json_type(v),
                        summarize(&self.body)
                    )));
                }
            }
        }
        let av = m
            .get("apiVersion")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or(&want_av)
            .to_string();
        let kind = m
            .get("kind")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or(self.rt.kind)
            .to_string();
        let version = av.rsplit('/').next().unwrap_or("").to_string();
        if kind != self.rt.kind {
            let known = resources::RESOURCES
                .iter()
                .any(|r| r.kind == kind && r.api_version() == av);
            let why = if known {
                format!(
                    "converting ({}.{kind}) to ({}.{}): unknown conversion",
                    go_package(&av),
                    internal_package(self.rt),
                    self.rt.kind
                )
            } else {
                format!(
                    "no kind {} is registered for version {} in scheme \"pkg/api/legacyscheme/scheme.go:30\"",
                    go_quote(&kind),
                    go_quote(&av)
                )
            };
            return Err(Status::bad_request(format!(
                "{kind} in version {} cannot be handled as a {}: {why}",
                go_quote(&version),
                self.rt.kind
            )));
        }
        if av != want_av {
            return Err(Status::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
        m.insert("apiVersion".into(), json!(want_av));
        m.insert("kind".into(), json!(self.rt.kind));
        let cannot = |what: &str, field: &str, go_type: &str| {
            Status::bad_request(format!(
                "{} in version {} cannot be handled as a {}: json: cannot unmarshal {what} into Go struct field {field} of type {go_type}",
                self.rt.kind,
                go_quote(&version),
                self.rt.kind
            ))
        };
        match m.get("metadata") {
            None | Some(Value::Null) => {
                m.insert("metadata".into(), json!({}));
            }
            Some(Value::Object(meta)) => {
                for k in [
                    "name",
                    "generateName",
                    "namespace",
                    "resourceVersion",
                    "uid",
                ] {
                    if let Some(v) = meta.get(k).filter(|v| !v.is_string() && !v.is_null()) {
                        return Err(cannot(
                            patch::go_json_type(v),
                            &format!("ObjectMeta.metadata.{k}"),
                            "string",
                        ));
                    }
                }
                for k in ["labels", "annotations"] {
                    match meta.get(k) {
                        None | Some(Value::Null) => {}
                        Some(Value::Object(map)) => {
                            if let Some(v) = map.values().find(|v| !v.is_string()) {
                                return Err(cannot(
                                    patch::go_json_type(v),
                                    &format!("ObjectMeta.metadata.{k}"),
                                    "string",
                                ));
                            }
                        }
                        Some(v) => {
                            return Err(cannot(
                                patch::go_json_type(v),
                                &format!("ObjectMeta.metadata.{k}"),
                                "map[string]string",
                            ))
                        }
                    }
                }
            }
            Some(v) => {
                return Err(cannot(
                    patch::go_json_type(v),
                    &format!("{}.metadata", self.rt.kind),
                    "v1.ObjectMeta",
                ))
            }
        }
        // Nulls in ObjectMeta decode to zero values.
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.retain(|_, v| !v.is_null());
        }
        Ok(())
    }

    /// `rest.EnsureObjectNamespaceMatchesRequestNamespace`.
    fn ensure_namespace(&self, obj: &mut Value) -> Result<(), Status> {
        let m = meta_mut(obj);
        if !self.rt.namespaced {
            m.shift_remove("namespace");
            return Ok(());
        }
        match m.get("namespace").and_then(Value::as_str).unwrap_or("") {
            "" => {
                m.insert("namespace".into(), json!(self.ns));
                Ok(())
            }
            ns if ns == self.ns => Ok(()),
            _ => Err(Status::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            )),
        }
    }

    /// NamespaceLifecycle admission for creates: the namespace must exist and must not
    /// be terminating.
    fn admit_namespace(&self, name: &str) -> Result<(), Status> {
        if !self.rt.namespaced {
            return Ok(());
        }
        let ns_rt = resources::find("", "v1", "namespaces").expect("namespaces are served");
        match self.store.get(ns_rt, "", &self.ns) {
            // `--seed 0` starts with an empty store (tests count RVs from 1), but the
            // system namespaces always exist on a real cluster: writes into them pass.
            None if BUILTIN_NAMESPACES.contains(&self.ns.as_str()) => Ok(()),
            None => Err(Status::not_found(
                &GroupResource::new("", "namespaces"),
                &self.ns,
            )),
            Some(ns)
                if ns.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating") =>
            {
                let gr = self.gr();
                let msg = format!(
                    "unable to create new content in namespace {} because it is being terminated",
                    self.ns
                );
                let mut s = if name.is_empty() {
                    Status::new(403, "Forbidden", format!("{gr} is forbidden: {msg}"))
                } else {
                    Status::new(
                        403,
                        "Forbidden",
                        format!("{gr} {} is forbidden: {msg}", go_quote(name)),
                    )
                };
                s.with_details = true;
                s.name = (!name.is_empty()).then(|| name.to_string());
                s.group = (!gr.group.is_empty()).then(|| gr.group.clone());
                s.kind = Some(gr.resource.clone());
                s.causes.push(Cause {
                    reason: "NamespaceTerminating".into(),
                    message: format!("namespace {} is being terminated", self.ns),
                    field: Some("metadata.namespace".into()),
                });
                Err(s)
            }
            Some(_) => Ok(()),
        }
    }

    /// The create pipeline after decoding: namespace, admission, generateName, validation,
    /// system fields, defaults, managedFields. `op` is the managedFields operation.
    fn prepare_create(
        &self,
        mut obj: Value,
        manager: &str,
        applied: Option<&Value>,
    ) -> Result<Value, Status> {
        self.ensure_namespace(&mut obj)?;
        let mut name = meta_str(&obj, "name").to_string();
        self.admit_namespace(&name)?;
        let generate = meta_str(&obj, "generateName").to_string();
        if name.is_empty() && !generate.is_empty() {
            name = generate_name(&generate);
            meta_mut(&mut obj).insert("name".into(), json!(name));
        }
        let (group, kind) = kind_group(self.rt);
        let errs = validate::validate_object_meta_names(
            NameRule::for_resource(self.rt.group, self.rt.resource),
            &name,
            &generate,
        );
        if !errs.is_empty() {
            return Err(validate::invalid(group, kind, &name, &errs));
        }
        if !meta_str(&obj, "resourceVersion").is_empty() {
            // etcd3 store.Create refuses it; the error is not a typed API error.
            return Err(Status::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let mut obj = match applied {
            Some(cfg) => {
                let w = self.writer(manager, None);
                let mut o = apply::apply(None, cfg, &w, false)?;
                // Identity and defaults from the decoded object.
                let mm = meta_mut(&mut o);
                mm.insert("name".into(), json!(name));
                if self.rt.namespaced {
                    mm.insert("namespace".into(), json!(self.ns));
                }
                o
            }
            None => obj,
        };
        fill_create_meta(self.rt, &mut obj, &self.now);
        if applied.is_none() {
            let w = self.writer(manager, None);
            apply::record_update(None, &mut obj, &w, "Update");
        }
        objects::canonical_order(&mut obj);
        Ok(obj)
    }

    /// POST.
    fn create(&self) -> Answer {
        let dry = self.validate_options("CreateOptions", false)?;
        let obj = self.decode_object()?;
        let manager = self.manager();
        let generated = meta_str(&obj, "name").is_empty();
        // store.go retries a generated name that is taken (RetryGenerateName: up to 8
        // attempts) before answering AlreadyExists.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let prepared = self.prepare_create(obj.clone(), &manager, None)?;
            let name = meta_str(&prepared, "name").to_string();
            match self.commit_create(prepared, &name, dry, 201) {
                Err(e) if generated && e.reason == "AlreadyExists" && attempts < 8 => continue,
                other => return other,
            }
        }
    }

    /// Stores a prepared new object (AlreadyExists if taken) and answers `code`.
    fn commit_create(&self, obj: Value, name: &str, dry: bool, code: u16) -> Answer {
        let gr = self.gr();
        if dry {
            if self.store.get(self.rt, &self.ns, name).is_some() {
                return Err(Status::already_exists(&gr, name));
            }
            let mut out = obj;
            meta_mut(&mut out).shift_remove("resourceVersion");
            return self.respond(code, &out);
        }
        let stored = self.store.mutate(self.rt, &self.ns, name, |cur| {
            if cur.is_some() {
                Err(Status::already_exists(&gr, name))
            } else {
                Ok(Mutation::Put(obj))
            }
        })?;
        let stored = stored.ok_or_else(|| Status::internal("object vanished after create"))?;
        if self.rt.group.is_empty()
            && self.rt.resource == "pods"
            && stored
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
        {
            crate::sim::lifecycle::spawn_pod_start(
                self.sim.clone(),
                self.ns.clone(),
                name.to_string(),
                meta_str(&stored, "uid").to_string(),
            );
        }
        self.respond(code, &stored)
    }

    /// `checkName` (rest.go) for PUT bodies.
    fn check_name(&self, obj: &Value) -> Result<(), Status> {
        let url_name = self.name();
        let obj_name = meta_str(obj, "name");
        if obj_name.is_empty() {
            return Err(Status::bad_request(format!(
                "the name of the object ({url_name} based on URL) was undeterminable: name must be provided"
            )));
        }
        if obj_name != url_name {
            return Err(Status::bad_request(format!(
                "the name of the object ({obj_name}) does not match the name on the URL ({url_name})"
            )));
        }
        let obj_ns = meta_str(obj, "namespace");
        if self.rt.namespaced && !self.ns.is_empty() && !obj_ns.is_empty() && obj_ns != self.ns {
            return Err(Status::bad_request(format!(
                "the namespace of the object ({obj_ns}) does not match the namespace on the request ({})",
                self.ns
            )));
        }
        Ok(())
    }

    /// The optimistic concurrency check of store.go `Update`.
    fn check_rv(&self, old: &Value, new: &Value) -> Result<(), Status> {
        let rv = meta_str(new, "resourceVersion");
        if rv.is_empty() {
            if !objects::allow_unconditional_update(self.rt) {
                let gr = self.gr();
                return Err(validate::invalid(
                    &gr.group,
                    &gr.resource,
                    self.name(),
                    &[FieldError::invalid_raw(
                        "metadata.resourceVersion",
                        "0x0".into(),
                        "must be specified for an update",
                    )],
                ));
            }
            return Ok(());
        }
        if crate::request::parse_uint(rv).is_err() {
            let (group, kind) = kind_group(self.rt);
            return Err(validate::invalid(
                group,
                kind,
                self.name(),
                &[FieldError::invalid(
                    "metadata.resourceVersion",
                    rv,
                    "must be a valid resource version",
                )],
            ));
        }
        if rv != meta_str(old, "resourceVersion") {
            return Err(Status::conflict(
                &self.gr(),
                self.name(),
                OPTIMISTIC_LOCK_MSG,
            ));
        }
        Ok(())
    }

    /// `rest.BeforeUpdate` + the strategy's `PrepareForUpdate` + `ValidateObjectMetaUpdate`
    /// + managedFields: turns a client's new object into what would be stored.
    ///
    /// `op` is "Update" or "Apply" (apply has recorded its managed fields already).
    fn prepare_update(
        &self,
        old: &Value,
        new: Value,
        manager: &str,
        op: &str,
    ) -> Result<Value, Status> {
        let status_sub = self.sub.as_deref() == Some("status");
        let mut new = if self.sub.as_deref() == Some("finalize") {
            // namespaces/finalize changes only spec.finalizers (namespace
            // finalizeStrategy.PrepareForUpdate).
            let mut out = old.clone();
            let fin = new
                .pointer("/spec/finalizers")
                .cloned()
                .unwrap_or_else(|| json!([]));
            let om = out.as_object_mut().expect("object");
            let spec = om.entry("spec").or_insert_with(|| json!({}));
            if let Some(spec) = spec.as_object_mut() {
                spec.insert("finalizers".into(), fin);
            }
            out
        } else if status_sub {
            // Status updates change only .status (ResetObjectMetaForStatus + strategy).
            let mut out = old.clone();
            let om = out.as_object_mut().expect("object");
            match new.get("status") {
                Some(s) => om.insert("status".into(), s.clone()),
                None => om.shift_remove("status"),
            };
            // managedFields travel with the request for apply.
            if op == "Apply" {
                if let Some(mf) = new.pointer("/metadata/managedFields") {
                    meta_mut(&mut out).insert("managedFields".into(), mf.clone());
                }
            }
            out
        } else {
            let mut new = new;
            if objects::has_status_subresource(self.rt) {
                let nm = new.as_object_mut().expect("object");
                match old.get("status") {
                    Some(s) => nm.insert("status".into(), s.clone()),
                    None => nm.shift_remove("status"),
                };
            }
            new
        };
        // System fields are the server's (BeforeUpdate).
        let new_uid = meta_str(&new, "uid").to_string();
        let old_uid = meta_str(old, "uid").to_string();
        let (group, kind) = kind_group(self.rt);
        if !new_uid.is_empty() && new_uid != old_uid {
            return Err(validate::invalid(
                group,
                kind,
                self.name(),
                &[FieldError::invalid(
                    "metadata.uid",
                    &new_uid,
                    "field is immutable",
                )],
            ));
        }
        if is_deleting(old) {
            let old_f = finalizers(old);
            let mut extra: Vec<String> = finalizers(&new)
                .into_iter()
                .filter(|f| !old_f.contains(f))
                .collect();
            extra.sort();
            extra.dedup();
            if !extra.is_empty() {
                return Err(validate::invalid(
                    group,
                    kind,
                    self.name(),
                    &[FieldError::forbidden(
                        "metadata.finalizers",
                        &format!(
                            "no new finalizers can be added if the object is being deleted, found new finalizers {}",
                            go_string_slice(&extra)
                        ),
                    )],
                ));
            }
        }
        {
            let om = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
            let m = meta_mut(&mut new);
            m.insert("name".into(), om["name"].clone());
            if self.rt.namespaced {
                m.insert("namespace".into(), om["namespace"].clone());
            } else {
                m.shift_remove("namespace");
            }
            for k in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match om.get(k) {
                    Some(v) => m.insert(k.into(), v.clone()),
                    None => m.shift_remove(k),
                };
            }
            m.insert("resourceVersion".into(), om["resourceVersion"].clone());
            m.retain(|_, v| !v.is_null());
        }
        if objects::tracks_generation(self.rt) && objects::generation_changed(self.rt, old, &new) {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        if op == "Update" {
            // Omitted managedFields keep the stored ones; a client that sends its own
            // (e.g. `[]` to reset them) has them taken as the base, as in the apiserver.
            let mut base = old.clone();
            if let Some(mf) = new.pointer("/metadata/managedFields").cloned() {
                meta_mut(&mut base).insert("managedFields".into(), mf);
            }
            let sub = self.sub.as_deref();
            let w = self.writer(manager, sub);
            apply::record_update(Some(&base), &mut new, &w, "Update");
        }
        objects::canonical_order(&mut new);
        Ok(new)
    }

    /// Stores an update prepared by `prepare_update` against `old` (deleting the object
    /// when its last finalizer is gone during deletion) and answers.
    fn commit_update(
        &self,
        prepare: impl FnOnce(&Value) -> Result<Value, Status>,
        dry: bool,
    ) -> Answer {
        let gr = self.gr();
        let name = self.name().to_string();
        let mut outcome: Option<Value> = None;
        let result = self.store.mutate(self.rt, &self.ns, &name, |cur| {
            let Some(cur) = cur else {
                return Err(Status::not_found(&gr, &name));
            };
            let mut new = prepare(cur)?;
            // A patch's result is decoded into the Go struct too.
            crate::sim::protobuf::prune(self.rt, &mut new);
            let delete_now = is_deleting(&new) && finalizers(&new).is_empty();
            outcome = Some(new.clone());
            if dry {
                return Ok(Mutation::NoOp);
            }
            Ok(if delete_now {
                Mutation::Delete
            } else {
                Mutation::Put(new)
            })
        });
        let stored = result?;
        let code = 200;
        match (dry, outcome) {
            (true, Some(v)) => self.respond(code, &v),
            (_, Some(v)) if is_deleting(&v) && finalizers(&v).is_empty() => {
                // The update removed the last finalizer: the object is gone; the answer is
                // its final state.
                self.respond(code, &stored.map(|s| (*s).clone()).unwrap_or(v))
            }
            _ => self.respond(code, &stored.map(|s| (*s).clone()).unwrap_or(Value::Null)),
        }
    }

    /// PUT (main resource or /status).
    fn update(&self) -> Answer {
        let dry = self.validate_options("UpdateOptions", false)?;
        let obj = self.decode_object()?;
        self.check_name(&obj)?;
        let manager = self.manager();
        if self.sub.is_none()
            && objects::allow_create_on_update(self.rt)
            && self.store.get(self.rt, &self.ns, self.name()).is_none()
        {
            let obj = self.prepare_create(obj, &manager, None)?;
            return self.commit_create(obj, self.name(), dry, 201);
        }
        self.commit_update(
            |cur| {
                self.check_rv(cur, &obj)?;
                self.prepare_update(cur, obj.clone(), &manager, "Update")
            },
            dry,
        )
    }

    /// The patch type of the request, or 415.
    fn patch_type(&self) -> Result<String, Status> {
        let ct = content_type(&self.headers);
        let types = patch_types(self.rt);
        if types.contains(&ct.as_str()) {
            Ok(ct)
        } else {
            Err(unsupported_media_type(types))
        }
    }

    /// Applies a non-apply patch body to `cur` (patch.go's patchers and their errors).
    fn apply_patch_body(&self, pt: &str, cur: &Value) -> Result<Value, Status> {
        let mut doc = cur.clone();
        match pt {
            "application/json-patch+json" => match patch::json_patch(&mut doc, &self.body) {
                Ok(()) => {}
                Err(JsonPatchError::Decode(e)) => return Err(Status::bad_request(e)),
                Err(JsonPatchError::Apply(e)) => {
                    // errors.NewGenericServerResponse(422, "", GroupResource{}, "", err, 0, false)
                    let mut s = Status::new(
                        422,
                        "Invalid",
                        "the server rejected our request due to an error in our request",
                    );
                    s.with_details = true;
                    s.causes.push(Cause {
                        reason: "UnexpectedServerResponse".into(),
                        message: e,
                        field: None,
                    });
                    return Err(s);
                }
            },
            "application/merge-patch+json" => {
                let p: Value = match crate::sim::gojson::syntax_error(&self.body) {
                    Some(_) => return Err(Status::bad_request("Invalid JSON Patch")),
                    None => serde_json::from_slice(&self.body)
                        .map_err(|_| Status::bad_request("Invalid JSON Patch"))?,
                };
                if !p.is_object() {
                    return Err(Status::bad_request("Invalid JSON Patch"));
                }
                patch::merge_patch(&mut doc, &p);
            }
            _ => {
                // strategic merge patch
                if let Some(e) = crate::sim::gojson::syntax_error(&self.body) {
                    return Err(Status::bad_request(e));
                }
                let p: Value = serde_json::from_slice(&self.body)
                    .map_err(|e| Status::bad_request(e.to_string()))?;
                if !p.is_object() && !p.is_null() {
                    return Err(Status::bad_request(format!(
                        "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                        patch::go_json_type(&p)
                    )));
                }
                if p.is_object() {
                    patch::strategic_merge(&mut doc, &p).map_err(|e| {
                        let (group, kind) = kind_group(self.rt);
                        validate::invalid(group, kind, self.name(), &[]).with_message(e)
                    })?;
                }
            }
        }
        if !doc.is_object() {
            return Err(Status::bad_request(format!(
                "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                patch::go_json_type(&doc)
            )));
        }
        Ok(doc)
    }

    /// Decodes an apply body (YAML or JSON) into the applied configuration.
    fn decode_apply(&self) -> Result<Value, Status> {
        let v = match serde_json::from_slice::<Value>(&self.body) {
            Ok(v) => v,
            Err(_) => yaml_to_json(&self.body)
                .map_err(|e| Status::bad_request(format!("error decoding YAML: {e}")))?,
        };
        let Value::Object(_) = v else {
            return Err(Status::bad_request(format!(
                "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                patch::go_json_type(&v)
            )));
        };
        let mut v = v;
        let av = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
        if av.is_empty() || kind.is_empty() {
            // managedfields: the applied object must say what it is.
            return Err(Status::bad_request(format!(
                "Object 'Kind' is missing in '{}'",
                String::from_utf8_lossy(&self.body).trim()
            )));
        }
        self.check_type(&mut v)?;
        let name = meta_str(&v, "name");
        if !name.is_empty() && name != self.name() {
            return Err(Status::bad_request(format!(
                "the name of the object ({name}) does not match the name on the URL ({})",
                self.name()
            )));
        }
        Ok(v)
    }

    /// PATCH (main resource or /status).
    fn patch(&self) -> Answer {
        let pt = self.patch_type()?;
        let is_apply = pt == "application/apply-patch+yaml";
        let dry = self.validate_options("PatchOptions", is_apply)?;
        let manager = self.manager();
        if is_apply {
            let cfg = self.decode_apply()?;
            let force = self
                .api
                .query_get("force")
                .is_some_and(|v| v == "true" || v == "1" || v.eq_ignore_ascii_case("true"));
            if self.store.get(self.rt, &self.ns, self.name()).is_none() && self.sub.is_none() {
                let mut obj = cfg.clone();
                meta_mut(&mut obj).insert("name".into(), json!(self.name()));
                let mut cfgn = cfg;
                meta_mut(&mut cfgn).insert("name".into(), json!(self.name()));
                let obj = self.prepare_create(obj, &manager, Some(&cfgn))?;
                return self.commit_create(obj, self.name(), dry, 201);
            }
            let sub = self.sub.clone();
            return self.commit_update(
                |cur| {
                    let w = self.writer(&manager, sub.as_deref());
                    let mut cfg = cfg.clone();
                    if self.rt.namespaced {
                        meta_mut(&mut cfg).insert("namespace".into(), json!(self.ns));
                    }
                    let merged = apply::apply(Some(cur), &cfg, &w, force)?;
                    self.check_rv(cur, &merged).or_else(|e| {
                        if e.code == 422 {
                            Ok(())
                        } else {
                            Err(e)
                        }
                    })?;
                    self.prepare_update(cur, merged, &manager, "Apply")
                },
                dry,
            );
        }
        self.commit_update(
            |cur| {
                let patched = self.apply_patch_body(&pt, cur)?;
                let mut patched = patched;
                self.check_type(&mut patched)?;
                let rv = meta_str(&patched, "resourceVersion");
                if !rv.is_empty() && rv != meta_str(cur, "resourceVersion") {
                    return Err(Status::conflict(
                        &self.gr(),
                        self.name(),
                        OPTIMISTIC_LOCK_MSG,
                    ));
                }
                self.prepare_update(cur, patched, &manager, "Update")
            },
            dry,
        )
    }

    // ---- scale ----------------------------------------------------------------------

    /// The autoscaling/v1 Scale of a deployment (`scaleFromDeployment`).
    fn scale_of(&self, d: &Value) -> Value {
        let m = &d["metadata"];
        let mut meta = Map::new();
        for k in [
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "creationTimestamp",
        ] {
            if let Some(v) = m.get(k) {
                meta.insert(k.into(), v.clone());
            }
        }
        let replicas = d
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let mut spec = Map::new();
        if replicas != 0 {
            spec.insert("replicas".into(), json!(replicas));
        }
        let mut status = Map::new();
        status.insert(
            "replicas".into(),
            json!(d
                .pointer("/status/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(0)),
        );
        if let Some(Value::Object(ml)) = d.pointer("/spec/selector/matchLabels") {
            let mut pairs: Vec<String> = ml
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect();
            pairs.sort();
            if !pairs.is_empty() {
                status.insert("selector".into(), json!(pairs.join(",")));
            }
        }
        json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": Value::Object(meta),
               "spec": Value::Object(spec), "status": Value::Object(status)})
    }

    fn get_scale(&self) -> Answer {
        let d = self
            .store
            .get(self.rt, &self.ns, self.name())
            .ok_or_else(|| Status::not_found(&self.gr(), self.name()))?;
        Ok(plain_json(200, &self.scale_of(&d)))
    }

    /// Checks a Scale the client sent (`ValidateScale`) and writes its replicas.
    fn write_scale(&self, dry: bool, to_scale: impl Fn(&Value) -> Result<Value, Status>) -> Answer {
        let manager = self.manager();
        let gr = self.gr();
        let name = self.name().to_string();
        let mut outcome: Option<Value> = None;
        let stored = self.store.mutate(self.rt, &self.ns, &name, |cur| {
            let Some(cur) = cur else {
                return Err(Status::not_found(&gr, &name));
            };
            let scale = to_scale(cur)?;
            let rv = meta_str(&scale, "resourceVersion");
            if !rv.is_empty() && rv != meta_str(cur, "resourceVersion") {
                return Err(Status::conflict(&gr, &name, OPTIMISTIC_LOCK_MSG));
            }
            let replicas = match scale.pointer("/spec/replicas") {
                None | Some(Value::Null) => 0,
                Some(v) => v.as_i64().ok_or_else(|| {
                    Status::bad_request(format!(
                        "Scale in version \"v1\" cannot be handled as a Scale: json: cannot unmarshal {} into Go struct field ScaleSpec.spec.replicas of type int32",
                        patch::go_json_type(v)
                    ))
                })?,
            };
            if replicas < 0 {
                return Err(validate::invalid(
                    "autoscaling",
                    "Scale",
                    &name,
                    &[FieldError::invalid_raw(
                        "spec.replicas",
                        replicas.to_string(),
                        "must be greater than or equal to 0",
                    )],
                ));
            }
            let mut new = (**cur).clone();
            if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("replicas".into(), json!(replicas));
            } else {
                new.as_object_mut()
                    .expect("object")
                    .insert("spec".into(), json!({"replicas": replicas}));
            }
            let mut new = new;
            {
                let old = cur.as_ref();
                if objects::generation_changed(self.rt, old, &new) {
                    let g = old
                        .pointer("/metadata/generation")
                        .and_then(Value::as_i64)
                        .unwrap_or(0);
                    meta_mut(&mut new).insert("generation".into(), json!(g + 1));
                }
                let w = self.writer(&manager, Some("scale"));
                apply::record_update(Some(old), &mut new, &w, "Update");
            }
            objects::canonical_order(&mut new);
            outcome = Some(new.clone());
            Ok(if dry { Mutation::NoOp } else { Mutation::Put(new) })
        })?;
        let d = if dry {
            outcome.unwrap_or(Value::Null)
        } else {
            stored.map(|s| (*s).clone()).unwrap_or(Value::Null)
        };
        Ok(plain_json(200, &self.scale_of(&d)))
    }

    fn update_scale(&self) -> Answer {
        let dry = self.validate_options("UpdateOptions", false)?;
        let ct = content_type(&self.headers);
        let body: Value = match ct.as_str() {
            "" | "application/json" => {
                if let Some(e) = crate::sim::gojson::syntax_error(&self.body) {
                    return Err(Status::bad_request(format!(
                        "the object provided is unrecognized (must be of type Scale): couldn't get version/kind; json parse error: {e} ({})",
                        summarize(&self.body)
                    )));
                }
                serde_json::from_slice(&self.body).unwrap_or(Value::Null)
            }
            "application/yaml" => yaml_to_json(&self.body).map_err(Status::bad_request)?,
            _ => return Err(unsupported_media_type(accepted_media_types(self.rt))),
        };
        let obj_name = meta_str(&body, "name");
        if obj_name != self.name() {
            return Err(Status::bad_request(format!(
                "the name of the object ({obj_name}) does not match the name on the URL ({})",
                self.name()
            )));
        }
        self.write_scale(dry, |_| Ok(body.clone()))
    }

    fn patch_scale(&self) -> Answer {
        let pt = self.patch_type()?;
        let is_apply = pt == "application/apply-patch+yaml";
        let dry = self.validate_options("PatchOptions", is_apply)?;
        self.write_scale(dry, |cur| {
            let scale = self.scale_of(cur);
            if is_apply {
                let mut s = scale;
                let cfg = serde_json::from_slice::<Value>(&self.body)
                    .or_else(|_| yaml_to_json(&self.body))
                    .map_err(|e| Status::bad_request(format!("error decoding YAML: {e}")))?;
                patch::merge_patch(&mut s, &cfg);
                Ok(s)
            } else {
                self.apply_patch_body(&pt, &scale)
            }
        })
    }

    // ---- delete ---------------------------------------------------------------------

    /// DeleteOptions from the body and the query (delete.go).
    fn delete_options(&self) -> Result<DeleteOpts, Status> {
        let mut o = DeleteOpts::default();
        if !self.body.is_empty() {
            let ct = content_type(&self.headers);
            let v: Value = match ct.as_str() {
                "" | "application/json" => {
                    if let Some(e) = crate::sim::gojson::syntax_error(&self.body) {
                        // A decode error that is not an API status: 500 without a reason.
                        return Err(Status::new(
                            500,
                            "",
                            format!("couldn't get version/kind; json parse error: {e}"),
                        ));
                    }
                    serde_json::from_slice(&self.body).unwrap_or(Value::Null)
                }
                "application/yaml" => {
                    yaml_to_json(&self.body).map_err(|e| Status::new(500, "", e))?
                }
                _ => return Err(unsupported_media_type(accepted_media_types(self.rt))),
            };
            if let Some(m) = v.as_object() {
                o.propagation = m
                    .get("propagationPolicy")
                    .and_then(Value::as_str)
                    .map(String::from);
                o.grace = m.get("gracePeriodSeconds").and_then(Value::as_i64);
                o.pre_uid = v
                    .pointer("/preconditions/uid")
                    .and_then(Value::as_str)
                    .map(String::from);
                o.pre_rv = v
                    .pointer("/preconditions/resourceVersion")
                    .and_then(Value::as_str)
                    .map(String::from);
                o.orphan = m.get("orphanDependents").and_then(Value::as_bool);
                if let Some(Value::Array(d)) = m.get("dryRun") {
                    o.dry_run = d
                        .iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect();
                }
            }
        }
        if let Some(p) = self.api.query_get("propagationPolicy") {
            o.propagation = Some(p.to_string());
        }
        if let Some(g) = self.api.query_get("gracePeriodSeconds") {
            o.grace = g.parse().ok();
        }
        if let Some(b) = self.api.query_get("orphanDependents") {
            o.orphan = Some(b == "true");
        }
        let q = self.dry_run_values();
        if !q.is_empty() {
            o.dry_run = q;
        }
        let mut errs = Vec::new();
        if o.orphan.is_some() && o.propagation.is_some() {
            errs.push(FieldError::invalid(
                "propagationPolicy",
                o.propagation.as_deref().unwrap_or(""),
                "orphanDependents and deletionPropagation cannot be both set",
            ));
        }
        errs.extend(validate::validate_propagation_policy(
            o.propagation.as_deref(),
        ));
        errs.extend(validate::validate_dry_run(&o.dry_run));
        if !errs.is_empty() {
            return Err(validate::invalid_options("DeleteOptions", &errs));
        }
        Ok(o)
    }

    /// `rest.BeforeDelete`'s precondition checks (409 with the Kind as resource).
    fn check_preconditions(&self, o: &DeleteOpts, cur: &Value) -> Result<(), Status> {
        let gr = GroupResource::new(self.rt.group, self.rt.kind);
        let name = meta_str(cur, "name");
        if let Some(uid) = &o.pre_uid {
            let have = meta_str(cur, "uid");
            if uid != have {
                return Err(Status::conflict(&gr, name, &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({have}). The object might have been deleted and then recreated"
                )));
            }
        }
        if let Some(rv) = &o.pre_rv {
            let have = meta_str(cur, "resourceVersion");
            if rv != have {
                return Err(Status::conflict(&gr, name, &format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({have}). The object might have been modified"
                )));
            }
        }
        Ok(())
    }

    /// DELETE of one object.
    fn delete(&self) -> Answer {
        let o = self.delete_options()?;
        let dry = !o.dry_run.is_empty();
        if self.rt.resource == "namespaces" && IMMORTAL_NAMESPACES.contains(&self.name()) {
            let gr = self.gr();
            let mut s = Status::new(
                403,
                "Forbidden",
                format!(
                    "{gr} {} is forbidden: this namespace may not be deleted",
                    go_quote(self.name())
                ),
            );
            s.with_details = true;
            s.name = Some(self.name().into());
            s.kind = Some(gr.resource);
            return Err(s);
        }
        let (code, body, terminating) = self.delete_one(self.name(), &o, dry)?;
        if terminating && !dry {
            spawn_namespace_cleanup(self.sim.clone(), self.name().to_string());
        }
        self.respond(code, &body)
    }

    /// Deletes (or marks for deletion) one object; returns the answer's code and body and
    /// whether a namespace entered Terminating.
    fn delete_one(
        &self,
        name: &str,
        o: &DeleteOpts,
        dry: bool,
    ) -> Result<(u16, Value, bool), Status> {
        let gr = self.gr();
        let now = self.now.clone();
        let is_ns = self.rt.resource == "namespaces";
        let mut before: Option<Value> = None;
        let mut after: Option<Value> = None;
        let mut immediate = false;
        let res = self.store.mutate(self.rt, &self.ns, name, |cur| {
            let Some(cur) = cur else {
                return Err(Status::not_found(&gr, name));
            };
            self.check_preconditions(o, cur)?;
            before = Some((**cur).clone());
            let pending = !finalizers(cur).is_empty() || is_ns;
            if !pending {
                immediate = true;
                return Ok(if dry {
                    Mutation::NoOp
                } else {
                    Mutation::Delete
                });
            }
            if is_deleting(cur) {
                // Already being deleted: nothing changes.
                after = Some((**cur).clone());
                return Ok(Mutation::NoOp);
            }
            let mut new = (**cur).clone();
            {
                let m = meta_mut(&mut new);
                m.insert("deletionTimestamp".into(), json!(now));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
            }
            if is_ns {
                if let Some(s) = new.as_object_mut() {
                    s.insert("status".into(), json!({"phase": "Terminating"}));
                }
            }
            objects::canonical_order(&mut new);
            after = Some(new.clone());
            Ok(if dry {
                Mutation::NoOp
            } else {
                Mutation::Put(new)
            })
        });
        let stored = res?;
        let before = before.unwrap_or(Value::Null);
        if immediate {
            // The answer carries the object as it was before the delete (etcd3 returns the
            // previous state); watchers see the DELETED event at the deletion's RV.
            let body = if objects::returns_deleted_object(self.rt) {
                before
            } else {
                delete_success(self.rt, &before)
            };
            return Ok((200, body, false));
        }
        let obj = if dry {
            after.unwrap_or(before)
        } else {
            stored.map(|s| (*s).clone()).unwrap_or(before)
        };
        let code = if o.orphan == Some(false) { 202 } else { 200 };
        Ok((code, obj, is_ns))
    }

    /// DELETE on a collection: deletes every matching object, answers the list as it was.
    fn delete_collection(&self) -> Answer {
        let o = self.delete_options()?;
        let dry = !o.dry_run.is_empty();
        let lo = self.api.list_options()?;
        crate::sim::list::check_field_labels(self.rt, &lo.field_selector)?;
        let ns = (!self.ns.is_empty()).then_some(self.ns.as_str());
        let (rv, items) = self.store.list(self.rt, ns);
        let rt = self.rt;
        let matching: Vec<Arc<Value>> = items
            .into_iter()
            .filter(|i| crate::sim::list::matches(rt, &lo, i))
            .collect();
        for item in &matching {
            let name = meta_str(item, "name").to_string();
            let item_ns = meta_str(item, "namespace").to_string();
            let w = Write {
                ns: item_ns,
                name: Some(name.clone()),
                ..self.clone_shallow()
            };
            match w.delete_one(&name, &o, dry) {
                Ok(_) => {}
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let list = json!({
            "kind": rt.list_kind,
            "apiVersion": rt.api_version(),
            "metadata": {"resourceVersion": rv.to_string()},
            "items": matching.iter().map(|i| (**i).clone()).collect::<Vec<_>>(),
        });
        self.respond(200, &list)
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

/// The Go package alias used in conversion errors.
fn go_package(api_version: &str) -> String {
    match api_version.split_once('/') {
        Some((g, v)) => format!("{v}.{}", g.split('.').next().unwrap_or(g)),
        None => api_version.to_string(),
    }
}

fn internal_package(rt: &ResourceType) -> &'static str {
    match rt.group {
        "" => "core",
        _ if rt.is_custom() => "unstructured",
        g => g.split('.').next().unwrap_or(g),
    }
}

#[derive(Debug, Default, Clone)]
struct DeleteOpts {
    propagation: Option<String>,
    grace: Option<i64>,
    orphan: Option<bool>,
    pre_uid: Option<String>,
    pre_rv: Option<String>,
    dry_run: Vec<String>,
}

/// The namespace controller, reduced to what is observable: once a namespace is
/// Terminating, every object in it is deleted (objects with finalizers are marked and
/// waited for), then the namespace itself goes away.
fn spawn_namespace_cleanup(sim: Arc<Sim>, ns: String) {
    tokio::spawn(async move {
        let ns_rt = resources::find("", "v1", "namespaces").expect("namespaces are served");
        let mut shutdown = sim.shutdown.clone();
        loop {
            if *shutdown.borrow() {
                return;
            }
            let mut remaining = 0usize;
            for rt in resources::RESOURCES.iter().filter(|r| r.namespaced) {
                let (_, items) = sim.store.list(rt, Some(&ns));
                for item in items {
                    let name = meta_str(&item, "name").to_string();
                    let now = now_rfc3339();
                    let _ = sim.store.mutate(rt, &ns, &name, |cur| {
                        let Some(cur) = cur else {
                            return Ok(Mutation::NoOp);
                        };
                        if finalizers(cur).is_empty() {
                            return Ok(Mutation::Delete);
                        }
                        remaining += 1;
                        if is_deleting(cur) {
                            return Ok(Mutation::NoOp);
                        }
                        let mut new = (**cur).clone();
                        let m = meta_mut(&mut new);
                        m.insert("deletionTimestamp".into(), json!(now));
                        m.insert("deletionGracePeriodSeconds".into(), json!(0));
                        objects::canonical_order(&mut new);
                        Ok(Mutation::Put(new))
                    });
                }
            }
            if remaining == 0 {
                let _ = sim.store.mutate(ns_rt, "", &ns, |cur| {
                    let Some(cur) = cur else {
                        return Ok(Mutation::NoOp);
                    };
                    if !is_deleting(cur) {
                        return Ok(Mutation::NoOp);
                    }
                    if finalizers(cur).is_empty() {
                        Ok(Mutation::Delete)
                    } else {
                        // Only spec.finalizers are the controller's to clear.
                        let mut new = (**cur).clone();
                        if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
                            spec.insert("finalizers".into(), json!([]));
                        }
                        Ok(Mutation::Put(new))
                    }
                });
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
                _ = shutdown.changed() => return,
            }
        }
    });
}

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

    #[test]
    fn generated_names() {
        let n = generate_name("web-");
        assert_eq!(n.len(), 9);
        assert!(n.starts_with("web-"));
        assert_eq!(generate_name(&"a".repeat(70)).len(), 63);
    }

    #[test]
    fn summaries() {
        assert_eq!(summarize(b"{not json"), "{not json");
        assert_eq!(summarize(b"[]"), "5b5d");
        assert_eq!(summarize(b""), "<empty>");
    }
}

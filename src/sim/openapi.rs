//! Minimal but valid OpenAPI documents, generated from the resource registry.
//!
//! What kubectl 1.37 reads from them (k8s.io/kubectl `pkg/cmd/apply/patcher.go`,
//! cli-runtime `pkg/resource/query_param_verifier_v3.go`, client-go `openapi3/root.go`):
//! - `GET /openapi/v3` → `{"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=…"}, …}}`;
//!   client-go follows `serverRelativeURL` for one group/version.
//! - In a group/version document, the PATCH operation whose
//!   `x-kubernetes-group-version-kind` matches the object's GVK: if it lists a `query`
//!   parameter named `fieldValidation`, kubectl `create`/`apply`/`edit` send
//!   `fieldValidation=Strict` instead of validating client side (which would need the
//!   protobuf-only `/openapi/v2`). If its request body lists
//!   `application/strategic-merge-patch+json`, client-side apply computes the patch from
//!   the schema in `components.schemas` (found by `x-kubernetes-group-version-kind`).
//!   The schemas here are deliberately shallow (no patch merge keys); built-in kinds
//!   component schemas therefore carry no `x-kubernetes-group-version-kind`, so that
//!   lookup finds nothing and kubectl silently uses the strategic merge patch metadata
//!   compiled into it — what a full schema would have given (with a GVK, kubectl would
//!   try the shallow schema, fail on the first nested field and print a warning). The
//!   operations keep their GVKs, which is what the field-validation and patch-type
//!   checks read. The custom group advertises no strategic merge patch, like a CRD, so
//!   kubectl uses a JSON merge patch for widgets. `kubectl explain` of built-in kinds
//!   is not supported for the same reason.
//! - `/openapi/v2` is served as JSON only. client-go asks for the gnostic protobuf
//!   encoding (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`), which the
//!   simulator does not implement: such requests get 406 NotAcceptable, and kubectl
//!   treats the schema as unavailable (it only falls back to v2 when v3 does not answer).
// metav1.Status is the crate's error type (large by design; see status.rs).
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, Uri};
use serde_json::{json, Map, Value};

use super::discovery::{self, etag_hash, subresource_info, GIT_VERSION};
use super::resources::{self, ResourceType, RESOURCES};
use crate::body::{self, Body};
use crate::status::Status;

/// The definition name of a kind, as kube-openapi names Go types.
pub fn definition_name(group: &str, version: &str, kind: &str) -> String {
    match group {
        "" => format!("io.k8s.api.core.{version}.{kind}"),
        "apps" | "policy" | "autoscaling" => format!("io.k8s.api.{group}.{version}.{kind}"),
        // Built-in `*.k8s.io` groups are named after their Go package (k8s.io/api/discovery).
        "discovery.k8s.io" => format!("io.k8s.api.discovery.{version}.{kind}"),
        "apiextensions.k8s.io" => {
            format!("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{version}.{kind}")
        }
        g => {
            // CRDs are named after the reversed group, e.g. com.example.v1.Widget.
            let rev: Vec<&str> = g.split('.').rev().collect();
            format!("{}.{version}.{kind}", rev.join("."))
        }
    }
}

const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";

fn is_builtin(rt: &ResourceType) -> bool {
    !rt.is_custom()
}

fn gvk_one(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "kind": kind, "version": version})
}

fn query_param(name: &str, description: &str, ty: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": ty, "uniqueItems": true}})
}

fn write_params(v3: bool) -> Vec<Value> {
    let mut p = vec![
        query_param(
            "dryRun",
            "When present, indicates that modifications should not be persisted.",
            "string",
        ),
        query_param(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
            "string",
        ),
        query_param(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: Ignore, Warn, Strict.",
            "string",
        ),
    ];
    if !v3 {
        for q in &mut p {
            // Swagger 2.0 puts the type on the parameter itself.
            let o = q.as_object_mut().expect("object");
            o.remove("schema");
            o.insert("type".into(), json!("string"));
            o.insert("uniqueItems".into(), json!(true));
        }
    }
    p
}

fn path_params(namespaced: bool, named: bool, v3: bool) -> Vec<Value> {
    let mk = |name: &str, desc: &str| {
        if v3 {
            json!({"name": name, "in": "path", "description": desc, "required": true, "schema": {"type": "string", "uniqueItems": true}})
        } else {
            json!({"name": name, "in": "path", "description": desc, "required": true, "type": "string", "uniqueItems": true})
        }
    };
    let mut out = Vec::new();
    if named {
        out.push(mk("name", "name of the resource"));
    }
    if namespaced {
        out.push(mk(
            "namespace",
            "object name and auth scope, such as for teams and projects",
        ));
    }
    out
}

fn ref_to(def: &str, v3: bool) -> Value {
    if v3 {
        json!({"$ref": format!("#/components/schemas/{def}")})
    } else {
        json!({"$ref": format!("#/definitions/{def}")})
    }
}

fn response(def: &str, v3: bool) -> Value {
    if v3 {
        json!({"200": {"description": "OK", "content": {
            "application/json": {"schema": ref_to(def, true)},
            "application/yaml": {"schema": ref_to(def, true)},
            "application/vnd.kubernetes.protobuf": {"schema": ref_to(def, true)}
        }}})
    } else {
        json!({"200": {"description": "OK", "schema": ref_to(def, false)}})
    }
}

fn op_id(verb: &str, rt: &ResourceType, suffix: &str) -> String {
    let gv = if rt.group.is_empty() {
        format!("Core{}", capitalise(rt.version))
    } else {
        let g: String = rt
            .group
            .split('.')
            .next()
            .map(capitalise)
            .unwrap_or_default();
        format!("{g}{}", capitalise(rt.version))
    };
    let ns = if rt.namespaced { "Namespaced" } else { "" };
    format!("{verb}{gv}{ns}{}{suffix}", rt.kind)
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

#[allow(clippy::too_many_arguments)]
fn operation(
    action: &str,
    op: String,
    gvk: &Value,
    def: &str,
    body: Option<Vec<&str>>,
    params: Vec<Value>,
    v3: bool,
) -> Value {
    let mut m = Map::new();
    m.insert("operationId".into(), json!(op));
    if !params.is_empty() {
        m.insert("parameters".into(), Value::Array(params));
    }
    if let Some(types) = body {
        if v3 {
            let mut content = Map::new();
            for t in types {
                let schema = if t == "application/json" || t == "application/yaml" {
                    ref_to(def, true)
                } else {
                    ref_to(&format!("{META}.Patch"), true)
                };
                content.insert(t.to_string(), json!({"schema": schema}));
            }
            m.insert(
                "requestBody".into(),
                json!({"content": content, "required": true}),
            );
        } else {
            m.insert("consumes".into(), json!(types));
        }
    }
    m.insert("responses".into(), response(def, v3));
    m.insert("x-kubernetes-action".into(), json!(action));
    m.insert("x-kubernetes-group-version-kind".into(), gvk.clone());
    Value::Object(m)
}

fn patch_types(rt: &ResourceType) -> Vec<&'static str> {
    let mut t = vec![
        "application/apply-patch+yaml",
        "application/json-patch+json",
        "application/merge-patch+json",
    ];
    if is_builtin(rt) {
        t.push("application/strategic-merge-patch+json");
    }
    t
}

fn prefix(rt: &ResourceType) -> String {
    if rt.group.is_empty() {
        format!("/api/{}", rt.version)
    } else {
        format!("/apis/{}/{}", rt.group, rt.version)
    }
}

/// Paths for one type: collection, item, and the subresources with a body kind.
fn paths_for(rt: &ResourceType, v3: bool, out: &mut BTreeMap<String, Value>) {
    let def = definition_name(rt.group, rt.version, rt.kind);
    let list_def = definition_name(rt.group, rt.version, rt.list_kind);
    let gvk = gvk_one(rt.group, rt.version, rt.kind);
    let base = if rt.namespaced {
        format!("{}/namespaces/{{namespace}}/{}", prefix(rt), rt.resource)
    } else {
        format!("{}/{}", prefix(rt), rt.resource)
    };
    let body_types = vec!["application/json", "application/yaml"];

    let mut coll = Map::new();
    coll.insert(
        "get".into(),
        operation(
            "list",
            op_id("list", rt, ""),
            &gvk,
            &list_def,
            None,
            vec![],
            v3,
        ),
    );
    coll.insert(
        "post".into(),
        operation(
            "post",
            op_id("create", rt, ""),
            &gvk,
            &def,
            Some(body_types.clone()),
            write_params(v3),
            v3,
        ),
    );
    coll.insert(
        "parameters".into(),
        Value::Array(path_params(rt.namespaced, false, v3)),
    );
    out.insert(base.clone(), Value::Object(coll));

    let mut item = Map::new();
    item.insert(
        "get".into(),
        operation("get", op_id("read", rt, ""), &gvk, &def, None, vec![], v3),
    );
    item.insert(
        "put".into(),
        operation(
            "put",
            op_id("replace", rt, ""),
            &gvk,
            &def,
            Some(body_types.clone()),
            write_params(v3),
            v3,
        ),
    );
    item.insert(
        "patch".into(),
        operation(
            "patch",
            op_id("patch", rt, ""),
            &gvk,
            &def,
            Some(patch_types(rt)),
            write_params(v3),
            v3,
        ),
    );
    item.insert(
        "delete".into(),
        operation(
            "delete",
            op_id("delete", rt, ""),
            &gvk,
            &format!("{META}.Status"),
            None,
            vec![],
            v3,
        ),
    );
    item.insert(
        "parameters".into(),
        Value::Array(path_params(rt.namespaced, true, v3)),
    );
    out.insert(format!("{base}/{{name}}"), Value::Object(item));

    if rt.namespaced {
        let mut all = Map::new();
        all.insert(
            "get".into(),
            operation(
                "list",
                format!("{}ForAllNamespaces", op_id("list", rt, "")),
                &gvk,
                &list_def,
                None,
                vec![],
                v3,
            ),
        );
        out.insert(
            format!("{}/{}", prefix(rt), rt.resource),
            Value::Object(all),
        );
    }

    for sub in rt.subresources {
        if !matches!(*sub, "status" | "scale") {
            continue;
        }
        let info = subresource_info(rt, sub);
        let sub_def = definition_name(info.group, info.version, info.kind);
        let sub_gvk = gvk_one(info.group, info.version, info.kind);
        let suffix = capitalise(sub);
        let mut m = Map::new();
        m.insert(
            "get".into(),
            operation(
                "get",
                op_id("read", rt, &suffix),
                &sub_gvk,
                &sub_def,
                None,
                vec![],
                v3,
            ),
        );
        m.insert(
            "put".into(),
            operation(
                "put",
                op_id("replace", rt, &suffix),
                &sub_gvk,
                &sub_def,
                Some(body_types.clone()),
                write_params(v3),
                v3,
            ),
        );
        m.insert(
            "patch".into(),
            operation(
                "patch",
                op_id("patch", rt, &suffix),
                &sub_gvk,
                &sub_def,
                Some(patch_types(rt)),
                write_params(v3),
                v3,
            ),
        );
        m.insert(
            "parameters".into(),
            Value::Array(path_params(rt.namespaced, true, v3)),
        );
        out.insert(format!("{base}/{{name}}/{sub}"), Value::Object(m));
    }
}

fn object_meta_schema() -> Value {
    let map = json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}});
    json!({
        "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
        "type": "object",
        "properties": {
            "annotations": map,
            "creationTimestamp": {"type": "string", "format": "date-time"},
            "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
            "deletionTimestamp": {"type": "string", "format": "date-time"},
            "finalizers": {"type": "array", "items": {"type": "string", "default": ""}, "x-kubernetes-list-type": "set", "x-kubernetes-patch-strategy": "merge"},
            "generateName": {"type": "string"},
            "generation": {"type": "integer", "format": "int64"},
            "labels": map,
            "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}, "x-kubernetes-list-type": "atomic"},
            "name": {"type": "string"},
            "namespace": {"type": "string"},
            "ownerReferences": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}, "x-kubernetes-list-map-keys": ["uid"], "x-kubernetes-list-type": "map", "x-kubernetes-patch-merge-key": "uid", "x-kubernetes-patch-strategy": "merge"},
            "resourceVersion": {"type": "string"},
            "selfLink": {"type": "string"},
            "uid": {"type": "string"}
        }
    })
}

fn kind_schema(group: &str, version: &str, kind: &str, list: bool) -> Value {
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let mut props = Map::new();
    props.insert(
        "apiVersion".into(),
        json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
    );
    props.insert(
        "kind".into(),
        json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
    );
    if list {
        props.insert(
            "items".into(),
            json!({"type": "array", "items": ref_to(&definition_name(group, version, kind.trim_end_matches("List")), true)}),
        );
        props.insert(
            "metadata".into(),
            json!({"allOf": [ref_to(&format!("{META}.ListMeta"), true)], "default": {}}),
        );
    } else {
        props.insert(
            "metadata".into(),
            json!({"allOf": [ref_to(&format!("{META}.ObjectMeta"), true)], "default": {}}),
        );
        // ConfigMaps and Secrets carry data at the top level; everything else has a
        // spec and a status.
        match kind {
            "ConfigMap" | "Secret" => {
                let m = json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}});
                props.insert("data".into(), m.clone());
                if kind == "ConfigMap" {
                    props.insert("binaryData".into(), m);
                } else {
                    props.insert("stringData".into(), m);
                    props.insert("type".into(), json!({"type": "string"}));
                }
                props.insert("immutable".into(), json!({"type": "boolean"}));
            }
            "Endpoints" => {
                props.insert(
                    "subsets".into(),
                    json!({"type": "array", "items": open, "x-kubernetes-list-type": "atomic"}),
                );
            }
            "EndpointSlice" => {
                props.insert("addressType".into(), json!({"type": "string"}));
                for f in ["endpoints", "ports"] {
                    props.insert(
                        f.into(),
                        json!({"type": "array", "items": open, "x-kubernetes-list-type": "atomic"}),
                    );
                }
            }
            "Event" => {
                for f in [
                    "involvedObject",
                    "source",
                    "series",
                    "related",
                    "eventTime",
                    "firstTimestamp",
                    "lastTimestamp",
                    "reason",
                    "message",
                    "type",
                    "count",
                    "action",
                    "reportingComponent",
                    "reportingInstance",
                ] {
                    props.insert(
                        f.into(),
                        json!({"x-kubernetes-preserve-unknown-fields": true}),
                    );
                }
            }
            _ => {
                props.insert("spec".into(), open.clone());
                props.insert("status".into(), open);
            }
        }
    }
    let mut schema = json!({"type": "object", "properties": props});
    // Built-in kinds carry no GVK on their (shallow) component schema: client-side apply
    // looks the schema up by GVK and would fail on the first field the shallow schema
    // does not describe, printing "warning: error calculating patch from openapi v3
    // spec". Without a match it silently uses the patch metadata compiled into kubectl,
    // which is exactly what kube-apiserver's full schema describes. Custom kinds keep it
    // (kubectl never computes a strategic merge patch for them).
    if group.contains('.') {
        schema["x-kubernetes-group-version-kind"] = json!([gvk_one(group, version, kind)]);
    }
    schema
}

fn schemas_for(group: &str, version: &str) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    out.insert(format!("{META}.ObjectMeta"), object_meta_schema());
    out.insert(
        format!("{META}.ListMeta"),
        json!({"type": "object", "properties": {
            "continue": {"type": "string"},
            "remainingItemCount": {"type": "integer", "format": "int64"},
            "resourceVersion": {"type": "string"},
            "selfLink": {"type": "string"}
        }}),
    );
    out.insert(
        format!("{META}.Patch"),
        json!({"type": "object", "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body."}),
    );
    out.insert(
        format!("{META}.Status"),
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
               "x-kubernetes-group-version-kind": [gvk_one("", "v1", "Status")]}),
    );
    for rt in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        out.insert(
            definition_name(rt.group, rt.version, rt.kind),
            kind_schema(rt.group, rt.version, rt.kind, false),
        );
        out.insert(
            definition_name(rt.group, rt.version, rt.list_kind),
            kind_schema(rt.group, rt.version, rt.list_kind, true),
        );
        for sub in rt.subresources {
            if *sub == "scale" {
                let info = subresource_info(rt, sub);
                out.insert(
                    definition_name(info.group, info.version, info.kind),
                    kind_schema(info.group, info.version, info.kind, false),
                );
            }
        }
    }
    out
}

/// The OpenAPI v3 document of one group/version, or None if not served.
pub fn v3_document(group: &str, version: &str) -> Option<Value> {
    let types: Vec<&ResourceType> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if types.is_empty() {
        return None;
    }
    let mut paths = BTreeMap::new();
    for rt in types {
        paths_for(rt, true, &mut paths);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": schemas_for(group, version)}
    }))
}

/// The swagger 2.0 document covering every served type.
pub fn v2_document() -> Value {
    let mut paths = BTreeMap::new();
    let mut defs = BTreeMap::new();
    for (g, v) in resources::group_versions() {
        for rt in RESOURCES.iter().filter(|r| r.group == g && r.version == v) {
            paths_for(rt, false, &mut paths);
        }
        defs.extend(schemas_for(g, v));
    }
    // Swagger 2.0 references live under #/definitions.
    let text = serde_json::to_string(&defs)
        .expect("json")
        .replace("#/components/schemas/", "#/definitions/");
    let defs: Value = serde_json::from_str(&text).expect("json");
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "definitions": defs
    })
}

fn gv_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

struct Doc {
    bytes: Bytes,
    hash: String,
}

fn docs() -> &'static BTreeMap<String, Doc> {
    static DOCS: OnceLock<BTreeMap<String, Doc>> = OnceLock::new();
    DOCS.get_or_init(|| {
        let mut out = BTreeMap::new();
        for (g, v) in resources::group_versions() {
            let doc = v3_document(g, v).expect("served group version");
            let bytes = serde_json::to_vec(&doc).expect("json");
            let hash = etag_hash(&bytes);
            out.insert(
                gv_key(g, v),
                Doc {
                    bytes: Bytes::from(bytes),
                    hash,
                },
            );
        }
        out
    })
}

/// `GET /openapi/v3`: the index of group/version documents.
pub fn v3_index() -> Value {
    let mut paths = Map::new();
    for (k, d) in docs() {
        paths.insert(
            k.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{k}?hash={}", d.hash)}),
        );
    }
    json!({ "paths": paths })
}

fn json_bytes(bytes: Bytes, etag: Option<&str>) -> Response<Body> {
    let mut resp = Response::new(body::full(bytes));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(e) = etag {
        if let Ok(v) = HeaderValue::from_str(&format!("\"{e}\"")) {
            h.insert(header::ETAG, v);
        }
    }
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    resp
}

/// Accepts JSON (or anything) but not only protobuf.
fn accepts_json(accept: Option<&str>) -> bool {
    let Some(a) = accept else { return true };
    a.split(',').any(|r| {
        let mt = r.split(';').next().unwrap_or("").trim();
        mt == "application/json" || mt == "*/*" || mt == "application/*" || mt.is_empty()
    })
}

/// Serves `/openapi/v2`, `/openapi/v3` and `/openapi/v3/{api/v1|apis/g/v}`.
/// Answers GET and HEAD requests under `/openapi`; None for any other. The simulator's
/// router asks it after discovery: the documents are built from discovery's tables, so
/// discovery does not route to them (it would import this module back).
pub fn handle(head: &http::request::Parts) -> Option<Response<Body>> {
    if head.method != http::Method::GET && head.method != http::Method::HEAD {
        return None;
    }
    // The segments as discovery splits them: one trailing slash is no segment.
    let path = head.uri.path();
    let path = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    };
    if path.trim_start_matches('/').split('/').next() != Some("openapi") {
        return None;
    }
    respond(&head.uri, &head.headers)
}

pub fn respond(uri: &Uri, headers: &HeaderMap) -> Option<Response<Body>> {
    let path = uri.path().trim_end_matches('/');
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    match path {
        "/openapi/v2" => {
            if !accepts_json(accept) {
                return Some(
                    Status::new(
                        406,
                        "NotAcceptable",
                        "only the following media types are accepted: application/json",
                    )
                    .into_response(),
                );
            }
            static V2: OnceLock<Bytes> = OnceLock::new();
            let bytes = V2
                .get_or_init(|| Bytes::from(serde_json::to_vec(&v2_document()).expect("json")))
                .clone();
            Some(json_bytes(bytes, None))
        }
        "/openapi/v3" => Some(discovery::json_response(&v3_index())),
        p => {
            let key = p.strip_prefix("/openapi/v3/")?;
            let d = docs().get(key)?;
            Some(json_bytes(d.bytes.clone(), Some(&d.hash)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_patch_operation_has_gvk_and_field_validation() {
        for (g, v) in resources::group_versions() {
            let doc = v3_document(g, v).unwrap();
            for (path, item) in doc["paths"].as_object().unwrap() {
                if let Some(p) = item.get("patch") {
                    assert!(p["x-kubernetes-group-version-kind"].is_object(), "{path}");
                    assert!(
                        p["parameters"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|q| q["name"] == "fieldValidation" && q["in"] == "query"),
                        "{path}"
                    );
                }
            }
        }
    }

    #[test]
    fn definition_names() {
        assert_eq!(definition_name("", "v1", "Pod"), "io.k8s.api.core.v1.Pod");
        assert_eq!(
            definition_name("apps", "v1", "Deployment"),
            "io.k8s.api.apps.v1.Deployment"
        );
        assert_eq!(
            definition_name("example.com", "v1", "Widget"),
            "com.example.v1.Widget"
        );
        assert_eq!(
            definition_name("discovery.k8s.io", "v1", "EndpointSlice"),
            "io.k8s.api.discovery.v1.EndpointSlice"
        );
    }
}

//! Discovery, version and health endpoints of the simulated apiserver.
//!
//! Shapes follow what kube-apiserver 1.36 writes:
//! - `/api` → `APIVersions`, `/apis` → `APIGroupList`, `/apis/{g}` → `APIGroup`,
//!   `/api/v1` and `/apis/{g}/{v}` → `APIResourceList` (k8s.io/apiserver
//!   `pkg/endpoints/discovery` and the installer in `pkg/endpoints/installer.go`, which
//!   lists resources and their subresources sorted by name; subresources carry an empty
//!   `singularName` and `group`/`version` only when their kind lives elsewhere, e.g.
//!   `pods/eviction` → policy/v1 `Eviction`, `deployments/scale` → autoscaling/v1 `Scale`).
//! - Aggregated discovery (`pkg/endpoints/discovery/aggregated`): when the Accept header
//!   asks for `application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`,
//!   `/api` and `/apis` answer an `APIGroupDiscoveryList` with that media type as
//!   Content-Type, plus `Vary: Accept` and an `ETag`; `If-None-Match` gets 304. kubectl
//!   1.37 sends exactly `application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json`
//!   (checked with a recording server), so with aggregated discovery it needs two
//!   requests instead of one per group/version.
//! - `storageVersionHash` is base64(sha256("{group}/{version}/{kind}")[:8]) as computed by
//!   `discovery.StorageVersionHash`; the values are precomputed below.
//! - `/healthz`, `/livez`, `/readyz` answer `ok`, and with `?verbose` the per-check list
//!   (`k8s.io/apiserver/pkg/server/healthz`).
//!
//! OpenAPI documents live in `super::openapi`, built from these tables; the router asks
//! it after [`handle`].
// metav1.Status is the crate's error type (large by design; see status.rs).
#![allow(clippy::result_large_err)]

use std::sync::OnceLock;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri};
use serde_json::{json, Map, Value};

use super::resources::{self, ResourceType, RESOURCES};
use crate::body::{self, Body};
use crate::request::ApiRequest;

/// The media type of aggregated discovery v2.
pub const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// The Kubernetes version the simulator claims to be.
pub const GIT_VERSION: &str = "v1.36.0";

/// Facts about one subresource: the kind it answers with and its verbs.
pub struct SubresourceInfo {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub verbs: &'static [&'static str],
}

/// What kube-apiserver reports for each subresource the simulator lists.
pub fn subresource_info(rt: &ResourceType, sub: &str) -> SubresourceInfo {
    const GPU: &[&str] = &["get", "patch", "update"];
    const CG: &[&str] = &["create", "get"];
    const PROXY: &[&str] = &["create", "delete", "get", "patch", "update"];
    let own = |kind: &'static str, verbs: &'static [&'static str]| SubresourceInfo {
        group: rt.group,
        version: rt.version,
        kind,
        verbs,
    };
    match sub {
        "status" => own(rt.kind, GPU),
        "log" => own("Pod", &["get"]),
        "exec" => own("PodExecOptions", CG),
        "attach" => own("PodAttachOptions", CG),
        "portforward" => own("PodPortForwardOptions", CG),
        "binding" => own("Binding", &["create"]),
        "eviction" => SubresourceInfo {
            group: "policy",
            version: "v1",
            kind: "Eviction",
            verbs: &["create"],
        },
        "proxy" => own(
            match rt.kind {
                "Node" => "NodeProxyOptions",
                "Service" => "ServiceProxyOptions",
                _ => "PodProxyOptions",
            },
            PROXY,
        ),
        "finalize" => own(rt.kind, &["update"]),
        "scale" => SubresourceInfo {
            group: "autoscaling",
            version: "v1",
            kind: "Scale",
            verbs: GPU,
        },
        _ => own(rt.kind, GPU),
    }
}

/// `base64(sha256("{group}/{version}/{kind}")[..8])`, precomputed (the simulator has no
/// storage version migration, so these never change).
pub fn storage_version_hash(rt: &ResourceType) -> &'static str {
    match (rt.group, rt.kind) {
        ("", "Namespace") => "Q3oi5N2YM8M=",
        ("", "Node") => "XwShjMxG9Fs=",
        ("", "Pod") => "xPOwRZ+Yhw8=",
        ("", "ConfigMap") => "qFsyl6wFWjQ=",
        ("", "Secret") => "S6u1pOWzb84=",
        ("", "Service") => "0/CO1lhkEBI=",
        ("", "Endpoints") => "fWeeMqaN/OA=",
        ("", "Event") => "r2yiGXH7wu8=",
        ("apps", "Deployment") => "8aSe+NMegvE=",
        ("apiextensions.k8s.io", "CustomResourceDefinition") => "M5uH+AlWATY=",
        ("discovery.k8s.io", "EndpointSlice") => "qgS0xkrxYAI=",
        ("example.com", "Widget") => "gIwvi5rymmg=",
        _ => "",
    }
}

fn strs(v: &[&str]) -> Value {
    Value::Array(v.iter().map(|s| json!(s)).collect())
}

/// Types served in one group/version, sorted by resource name like the installer does.
fn types_in(group: &str, version: &str) -> Vec<&'static ResourceType> {
    let mut v: Vec<_> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    v.sort_by_key(|r| r.resource);
    v
}

/// The legacy `APIResourceList` for one group/version, or None if not served.
pub fn api_resource_list(group: &str, version: &str) -> Option<Value> {
    let types = types_in(group, version);
    if types.is_empty() {
        return None;
    }
    let mut entries: Vec<(String, Value)> = Vec::new();
    for rt in &types {
        let mut m = Map::new();
        m.insert("name".into(), json!(rt.resource));
        m.insert("singularName".into(), json!(rt.singular));
        m.insert("namespaced".into(), json!(rt.namespaced));
        m.insert("kind".into(), json!(rt.kind));
        m.insert("verbs".into(), strs(rt.verbs));
        if !rt.short_names.is_empty() {
            m.insert("shortNames".into(), strs(rt.short_names));
        }
        if !rt.categories.is_empty() {
            m.insert("categories".into(), strs(rt.categories));
        }
        m.insert("storageVersionHash".into(), json!(storage_version_hash(rt)));
        entries.push((rt.resource.to_string(), Value::Object(m)));
        for sub in rt.subresources {
            let info = subresource_info(rt, sub);
            let mut m = Map::new();
            let name = format!("{}/{}", rt.resource, sub);
            m.insert("name".into(), json!(name));
            m.insert("singularName".into(), json!(""));
            m.insert("namespaced".into(), json!(rt.namespaced));
            if info.group != rt.group || info.version != rt.version {
                m.insert("group".into(), json!(info.group));
                m.insert("version".into(), json!(info.version));
            }
            m.insert("kind".into(), json!(info.kind));
            m.insert("verbs".into(), strs(info.verbs));
            entries.push((name, Value::Object(m)));
        }
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let gv = types[0].api_version();
    let mut out = Map::new();
    out.insert("kind".into(), json!("APIResourceList"));
    // The core list is written without apiVersion; group lists carry "v1".
    if !group.is_empty() {
        out.insert("apiVersion".into(), json!("v1"));
    }
    out.insert("groupVersion".into(), json!(gv));
    out.insert(
        "resources".into(),
        Value::Array(entries.into_iter().map(|(_, v)| v).collect()),
    );
    Some(Value::Object(out))
}

/// `/api`: the legacy core versions.
pub fn api_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]
    })
}

fn group_entry(group: &str) -> Value {
    let versions: Vec<Value> = resources::group_versions()
        .into_iter()
        .filter(|(g, _)| *g == group)
        .map(|(g, v)| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    let preferred = versions[0].clone();
    json!({"name": group, "versions": versions, "preferredVersion": preferred})
}

fn named_groups() -> Vec<&'static str> {
    let mut out: Vec<&str> = Vec::new();
    for (g, _) in resources::group_versions() {
        if !g.is_empty() && !out.contains(&g) {
            out.push(g);
        }
    }
    out
}

/// `/apis`: the named groups.
pub fn api_group_list() -> Value {
    let groups: Vec<Value> = named_groups().into_iter().map(group_entry).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`: one named group, or None.
pub fn api_group(group: &str) -> Option<Value> {
    if group.is_empty() || !named_groups().contains(&group) {
        return None;
    }
    let mut v = group_entry(group);
    let m = v.as_object_mut().expect("object");
    let mut out = Map::new();
    out.insert("kind".into(), json!("APIGroup"));
    out.insert("apiVersion".into(), json!("v1"));
    out.append(m);
    Some(Value::Object(out))
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

fn aggregated_version(group: &str, version: &str) -> Value {
    let resources: Vec<Value> = types_in(group, version)
        .into_iter()
        .map(|rt| {
            let mut m = Map::new();
            m.insert("resource".into(), json!(rt.resource));
            m.insert("responseKind".into(), gvk(rt.group, rt.version, rt.kind));
            m.insert(
                "scope".into(),
                json!(if rt.namespaced {
                    "Namespaced"
                } else {
                    "Cluster"
                }),
            );
            m.insert("singularResource".into(), json!(rt.singular));
            m.insert("verbs".into(), strs(rt.verbs));
            if !rt.short_names.is_empty() {
                m.insert("shortNames".into(), strs(rt.short_names));
            }
            if !rt.categories.is_empty() {
                m.insert("categories".into(), strs(rt.categories));
            }
            if !rt.subresources.is_empty() {
                let mut subs: Vec<&str> = rt.subresources.to_vec();
                subs.sort();
                let subs: Vec<Value> = subs
                    .into_iter()
                    .map(|s| {
                        let info = subresource_info(rt, s);
                        json!({
                            "subresource": s,
                            "responseKind": gvk(info.group, info.version, info.kind),
                            "verbs": strs(info.verbs),
                        })
                    })
                    .collect();
                m.insert("subresources".into(), Value::Array(subs));
            }
            Value::Object(m)
        })
        .collect();
    json!({"version": version, "resources": resources, "freshness": "Current"})
}

/// The aggregated `APIGroupDiscoveryList` for `/api` (core) or `/apis` (named groups).
pub fn aggregated(core: bool) -> Value {
    let mut items = Vec::new();
    if core {
        items.push(json!({
            "metadata": {"creationTimestamp": null},
            "versions": [aggregated_version("", "v1")],
        }));
    } else {
        for g in named_groups() {
            let versions: Vec<Value> = resources::group_versions()
                .into_iter()
                .filter(|(gg, _)| *gg == g)
                .map(|(gg, v)| aggregated_version(gg, v))
                .collect();
            items.push(json!({
                "metadata": {"name": g, "creationTimestamp": null},
                "versions": versions,
            }));
        }
    }
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// `/version`, indented like the apiserver writes it.
pub fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "36",
        "emulationMajor": "1",
        "emulationMinor": "36",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "35",
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-04-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// Whether an Accept header asks for aggregated discovery v2 in JSON.
pub fn wants_aggregated(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    accept.split(',').any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let mt = parts.next().unwrap_or("");
        if !(mt.eq_ignore_ascii_case("application/json") || mt == "*/*") {
            return false;
        }
        let (mut g, mut v, mut as_) = (false, false, false);
        for p in parts {
            match p.split_once('=') {
                Some(("g", "apidiscovery.k8s.io")) => g = true,
                Some(("v", "v2")) => v = true,
                Some(("as", "APIGroupDiscoveryList")) => as_ = true,
                _ => {}
            }
        }
        g && v && as_
    })
}

/// A cheap stable hash (FNV-1a, 64 bit) for ETags and openapi `?hash=` values. Not a
/// security boundary: clients only compare it for equality.
pub fn etag_hash(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016X}")
}

/// A JSON response as the apiserver writes it (compact JSON plus newline).
pub fn json_response(v: &Value) -> Response<Body> {
    let mut bytes = serde_json::to_vec(v).expect("json serialises");
    bytes.push(b'\n');
    bytes_response(Bytes::from(bytes), "application/json")
}

fn bytes_response(bytes: Bytes, content_type: &str) -> Response<Body> {
    let mut resp = Response::new(body::full(bytes));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(content_type).expect("valid content type"),
    );
    resp
}

struct Cached {
    bytes: Bytes,
    etag: String,
}

fn cached_aggregated(core: bool) -> &'static Cached {
    static CORE: OnceLock<Cached> = OnceLock::new();
    static GROUPS: OnceLock<Cached> = OnceLock::new();
    let cell = if core { &CORE } else { &GROUPS };
    cell.get_or_init(|| {
        let mut bytes = serde_json::to_vec(&aggregated(core)).expect("json serialises");
        bytes.push(b'\n');
        let etag = format!("\"{}\"", etag_hash(&bytes));
        Cached {
            bytes: Bytes::from(bytes),
            etag,
        }
    })
}

fn aggregated_response(headers: &HeaderMap, core: bool) -> Response<Body> {
    let c = cached_aggregated(core);
    let not_modified = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == c.etag);
    let mut resp = if not_modified {
        let mut r = Response::new(body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        bytes_response(c.bytes.clone(), AGGREGATED_V2)
    };
    let h = resp.headers_mut();
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    h.insert(
        header::ETAG,
        HeaderValue::from_str(&c.etag).expect("valid etag"),
    );
    if not_modified {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(AGGREGATED_V2),
        );
    }
    resp
}

/// Names of the health checks reported by `?verbose`, in the apiserver's order.
const HEALTH_CHECKS: &[&str] = &[
    "ping",
    "log",
    "etcd",
    "poststarthook/start-apiserver-admission-initializer",
    "poststarthook/generic-apiserver-start-informers",
];

fn health(uri: &Uri, endpoint: &str, check: Option<&str>) -> Option<Response<Body>> {
    let text = match check {
        Some(c) => {
            if !HEALTH_CHECKS.contains(&c) {
                return None;
            }
            "ok".to_string()
        }
        None => {
            let verbose = uri.query().is_some_and(|q| {
                q.split('&')
                    .any(|p| p == "verbose" || p.starts_with("verbose="))
            });
            if verbose {
                let mut s = String::new();
                for c in HEALTH_CHECKS {
                    s.push_str(&format!("[+]{c} ok\n"));
                }
                s.push_str(&format!("{endpoint} check passed\n"));
                s
            } else {
                "ok".to_string()
            }
        }
    };
    let mut resp = bytes_response(Bytes::from(text), "text/plain; charset=utf-8");
    resp.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    Some(resp)
}

/// Answers discovery, version and health requests; None for any other path (the router
/// then tries the OpenAPI documents, then answers 404).
pub fn handle(head: &http::request::Parts, _api: &ApiRequest) -> Option<Response<Body>> {
    respond(&head.method, &head.uri, &head.headers)
}

/// [`handle`] for a whole request.
pub fn handle_request<B>(req: &Request<B>) -> Option<Response<Body>> {
    respond(req.method(), req.uri(), req.headers())
}

/// The routing behind [`handle`].
pub fn respond(method: &Method, uri: &Uri, headers: &HeaderMap) -> Option<Response<Body>> {
    if method != Method::GET && method != Method::HEAD {
        return None;
    }
    let path = uri.path();
    let path = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    };
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segs.as_slice() {
        ["api"] => Some(if wants_aggregated(accept) {
            aggregated_response(headers, true)
        } else {
            json_response(&api_versions())
        }),
        ["apis"] => Some(if wants_aggregated(accept) {
            aggregated_response(headers, false)
        } else {
            json_response(&api_group_list())
        }),
        ["api", v] => api_resource_list("", v).map(|v| json_response(&v)),
        ["apis", g] => api_group(g).map(|v| json_response(&v)),
        ["apis", g, v] => api_resource_list(g, v).map(|v| json_response(&v)),
        ["version"] => {
            let mut bytes = serde_json::to_vec_pretty(&version_info()).expect("json");
            bytes.push(b'\n');
            Some(bytes_response(Bytes::from(bytes), "application/json"))
        }
        [ep @ ("healthz" | "livez" | "readyz")] => health(uri, ep, None),
        [ep @ ("healthz" | "livez" | "readyz"), rest @ ..] => {
            let check = rest.join("/");
            health(uri, ep, Some(&check))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregated_accept_detection() {
        assert!(wants_aggregated(Some(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
        )));
        assert!(!wants_aggregated(Some("application/json")));
        assert!(!wants_aggregated(Some(
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
        )));
        assert!(!wants_aggregated(None));
    }

    #[test]
    fn core_list_includes_subresources_sorted() {
        let v = api_resource_list("", "v1").unwrap();
        assert!(v.get("apiVersion").is_none());
        let names: Vec<&str> = v["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert!(names.contains(&"pods/exec"));
        assert!(names.contains(&"pods/log"));
    }
}

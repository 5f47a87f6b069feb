//! Discovery, version, health and OpenAPI endpoints of the simulator, over HTTP, plus
//! kubectl 1.37 itself (`api-resources`, `get --raw`).

mod support;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use watchgate::sim::{start, SimConfig, SimHandle};

const AGG: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const KUBECTL_DISCOVERY_ACCEPT: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";

async fn sim() -> SimHandle {
    start(SimConfig::default()).await.expect("sim starts")
}

async fn get(
    h: &SimHandle,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, Bytes) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut b = Request::get(format!("{}{path}", h.url()));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let resp = client.request(b.body(Empty::new()).unwrap()).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, bytes)
}

async fn get_json(
    h: &SimHandle,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, Value) {
    let (s, hm, b) = get(h, path, headers).await;
    let v = serde_json::from_slice(&b)
        .unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {}", String::from_utf8_lossy(&b)));
    (s, hm, v)
}

fn content_type(h: &HeaderMap) -> &str {
    h.get("content-type").unwrap().to_str().unwrap()
}

fn names(list: &Value) -> Vec<String> {
    list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

fn entry<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("{name} missing from {list}"))
}

#[tokio::test]
async fn legacy_api_and_group_list() {
    let h = sim().await;
    let (s, hm, v) = get_json(&h, "/api", &[("accept", "application/json")]).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(content_type(&hm), "application/json");
    assert_eq!(v["kind"], "APIVersions");
    assert_eq!(v["versions"], json!(["v1"]));
    assert!(v.get("apiVersion").is_none());

    let (s, _, v) = get_json(&h, "/apis", &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        v,
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
             "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}},
            {"name": "apiextensions.k8s.io",
             "versions": [{"groupVersion": "apiextensions.k8s.io/v1", "version": "v1"}],
             "preferredVersion": {"groupVersion": "apiextensions.k8s.io/v1", "version": "v1"}},
            {"name": "discovery.k8s.io",
             "versions": [{"groupVersion": "discovery.k8s.io/v1", "version": "v1"}],
             "preferredVersion": {"groupVersion": "discovery.k8s.io/v1", "version": "v1"}},
            {"name": "example.com", "versions": [{"groupVersion": "example.com/v1", "version": "v1"}],
             "preferredVersion": {"groupVersion": "example.com/v1", "version": "v1"}}
        ]})
    );

    let (s, _, v) = get_json(&h, "/apis/apps", &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["kind"], "APIGroup");
    assert_eq!(v["name"], "apps");
    assert_eq!(v["preferredVersion"]["groupVersion"], "apps/v1");
    h.shutdown().await;
}

#[tokio::test]
async fn resource_lists_carry_kinds_verbs_and_subresources() {
    let h = sim().await;
    let (s, _, core) = get_json(&h, "/api/v1", &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(core["kind"], "APIResourceList");
    assert_eq!(core["groupVersion"], "v1");
    let n = names(&core);
    let mut sorted = n.clone();
    sorted.sort();
    assert_eq!(n, sorted, "the installer lists resources sorted by name");
    for want in [
        "configmaps",
        "endpoints",
        "events",
        "namespaces",
        "namespaces/finalize",
        "namespaces/status",
        "nodes",
        "nodes/proxy",
        "nodes/status",
        "pods",
        "pods/attach",
        "pods/binding",
        "pods/eviction",
        "pods/exec",
        "pods/log",
        "pods/portforward",
        "pods/status",
        "secrets",
        "services",
        "services/proxy",
        "services/status",
    ] {
        assert!(n.contains(&want.to_string()), "{want} missing: {n:?}");
    }
    assert_eq!(
        entry(&core, "pods"),
        &json!({"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
                "shortNames": ["po"], "categories": ["all"], "storageVersionHash": "xPOwRZ+Yhw8="})
    );
    assert_eq!(
        entry(&core, "pods/exec"),
        &json!({"name": "pods/exec", "singularName": "", "namespaced": true,
                "kind": "PodExecOptions", "verbs": ["create", "get"]})
    );
    assert_eq!(
        entry(&core, "pods/eviction"),
        &json!({"name": "pods/eviction", "singularName": "", "namespaced": true, "group": "policy",
                "version": "v1", "kind": "Eviction", "verbs": ["create"]})
    );
    assert_eq!(entry(&core, "pods/log")["kind"], "Pod");
    assert_eq!(entry(&core, "namespaces")["namespaced"], false);

    let (_, _, apps) = get_json(&h, "/apis/apps/v1", &[]).await;
    assert_eq!(apps["apiVersion"], "v1");
    assert_eq!(apps["groupVersion"], "apps/v1");
    assert_eq!(
        entry(&apps, "deployments/scale"),
        &json!({"name": "deployments/scale", "singularName": "", "namespaced": true,
                "group": "autoscaling", "version": "v1", "kind": "Scale",
                "verbs": ["get", "patch", "update"]})
    );
    assert_eq!(
        entry(&apps, "deployments")["storageVersionHash"],
        "8aSe+NMegvE="
    );

    let (_, _, w) = get_json(&h, "/apis/example.com/v1", &[]).await;
    assert_eq!(names(&w), vec!["widgets"]);
    h.shutdown().await;
}

#[tokio::test]
async fn aggregated_discovery_as_kubectl_asks_for_it() {
    let h = sim().await;
    let (s, hm, v) = get_json(&h, "/api", &[("accept", KUBECTL_DISCOVERY_ACCEPT)]).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(content_type(&hm), AGG);
    assert_eq!(hm.get("vary").unwrap(), "Accept");
    assert_eq!(v["kind"], "APIGroupDiscoveryList");
    assert_eq!(v["apiVersion"], "apidiscovery.k8s.io/v2");
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    let v1 = &items[0]["versions"][0];
    assert_eq!(v1["version"], "v1");
    assert_eq!(v1["freshness"], "Current");
    let pods = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "pods")
        .unwrap();
    assert_eq!(
        pods["responseKind"],
        json!({"group": "", "version": "v1", "kind": "Pod"})
    );
    assert_eq!(pods["scope"], "Namespaced");
    assert_eq!(pods["singularResource"], "pod");
    let subs: Vec<&str> = pods["subresources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["subresource"].as_str().unwrap())
        .collect();
    assert_eq!(
        subs,
        vec![
            "attach",
            "binding",
            "eviction",
            "exec",
            "log",
            "portforward",
            "status"
        ]
    );

    // The ETag is honoured.
    let etag = hm.get("etag").unwrap().to_str().unwrap().to_string();
    let (s, _, body) = get(
        &h,
        "/api",
        &[
            ("accept", KUBECTL_DISCOVERY_ACCEPT),
            ("if-none-match", &etag),
        ],
    )
    .await;
    assert_eq!(s, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());

    let (_, hm, v) = get_json(&h, "/apis", &[("accept", KUBECTL_DISCOVERY_ACCEPT)]).await;
    assert_eq!(content_type(&hm), AGG);
    let groups: Vec<&str> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["metadata"]["name"].as_str().unwrap())
        .collect();
    // kube-apiserver's order: by the APIService's group priority (apps 17800,
    // apiextensions.k8s.io 16700, discovery.k8s.io 16200), CRD groups last.
    assert_eq!(
        groups,
        vec![
            "apps",
            "apiextensions.k8s.io",
            "discovery.k8s.io",
            "example.com"
        ]
    );
    let deploy = &v["items"][0]["versions"][0]["resources"][0];
    assert_eq!(deploy["resource"], "deployments");
    assert_eq!(
        deploy["subresources"][0],
        json!({"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
               "verbs": ["get", "patch", "update"]})
    );

    // Only v2beta1 asked for (with a JSON fallback): the legacy shape.
    let (_, hm, v) = get_json(
        &h,
        "/api",
        &[("accept", "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json")],
    )
    .await;
    assert_eq!(content_type(&hm), "application/json");
    assert_eq!(v["kind"], "APIVersions");
    h.shutdown().await;
}

#[tokio::test]
async fn unknown_discovery_paths_are_404_status() {
    let h = sim().await;
    // No go-restful WebService claims an unknown group, nor a custom resource group's
    // unknown version: apiextensions-apiserver's discovery handlers pass them down the
    // delegation chain to Go's http.NotFound (src/apipath.rs).
    for path in ["/apis/nope", "/apis/example.com/v9"] {
        let (s, hm, b) = get(&h, path, &[]).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(content_type(&hm), "text/plain; charset=utf-8", "{path}");
        assert_eq!(b, "404 page not found\n", "{path}");
    }
    for path in ["/apis/apps/v2", "/api/v2", "/openapi/v3/apis/nope/v1"] {
        let (s, _, v) = get_json(&h, path, &[]).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(v["kind"], "Status", "{path}");
        assert_eq!(v["reason"], "NotFound", "{path}");
        assert_eq!(
            v["message"], "the server could not find the requested resource",
            "{path}"
        );
    }
    h.shutdown().await;
}

#[tokio::test]
async fn version_and_health() {
    let h = sim().await;
    let (s, _, v) = get_json(&h, "/version", &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["major"], "1");
    assert_eq!(v["minor"], "36");
    assert_eq!(v["gitVersion"], "v1.36.0");
    assert_eq!(v["platform"], "linux/amd64");

    for ep in ["healthz", "livez", "readyz"] {
        let (s, hm, b) = get(&h, &format!("/{ep}"), &[]).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(&b[..], b"ok");
        assert_eq!(content_type(&hm), "text/plain; charset=utf-8");
        let (s, _, b) = get(&h, &format!("/{ep}?verbose"), &[]).await;
        assert_eq!(s, StatusCode::OK);
        let text = String::from_utf8(b.to_vec()).unwrap();
        assert!(
            text.starts_with("[+]ping ok\n[+]log ok\n[+]etcd ok\n"),
            "{text}"
        );
        assert!(text.ends_with(&format!("{ep} check passed\n")), "{text}");
        let (s, _, b) = get(&h, &format!("/{ep}/ping"), &[]).await;
        assert_eq!((s, &b[..]), (StatusCode::OK, &b"ok"[..]));
    }
    let (s, _, _) = get(&h, "/readyz/nonsense", &[]).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    h.shutdown().await;
}

#[tokio::test]
async fn openapi_v3_advertises_gvks_patch_types_and_field_validation() {
    let h = sim().await;
    let (s, _, idx) = get_json(&h, "/openapi/v3", &[]).await;
    assert_eq!(s, StatusCode::OK);
    let paths = idx["paths"].as_object().unwrap();
    let keys: Vec<&String> = paths.keys().collect();
    assert_eq!(
        keys,
        vec![
            "api/v1",
            "apis/apiextensions.k8s.io/v1",
            "apis/apps/v1",
            "apis/discovery.k8s.io/v1",
            "apis/example.com/v1"
        ]
    );
    let url = paths["api/v1"]["serverRelativeURL"].as_str().unwrap();
    assert!(url.starts_with("/openapi/v3/api/v1?hash="), "{url}");

    let (s, hm, doc) = get_json(&h, url, &[("accept", "application/json")]).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(content_type(&hm), "application/json");
    assert_eq!(doc["openapi"], "3.0.0");
    let item = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"];
    let patch = &item["patch"];
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        json!({"group": "", "kind": "Pod", "version": "v1"})
    );
    let content = patch["requestBody"]["content"].as_object().unwrap();
    for t in [
        "application/apply-patch+yaml",
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
    ] {
        assert!(content.contains_key(t), "{t}");
    }
    assert!(patch["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"));
    assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"].is_object());

    // The custom group: merge patches only, like a CRD, and a GVK on its schema.
    let url = paths["apis/example.com/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap();
    let (_, _, doc) = get_json(&h, url, &[]).await;
    let patch =
        &doc["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"];
    assert!(!patch["requestBody"]["content"]
        .as_object()
        .unwrap()
        .contains_key("application/strategic-merge-patch+json"));
    assert_eq!(
        doc["components"]["schemas"]["com.example.v1.Widget"]["x-kubernetes-group-version-kind"],
        json!([{"group": "example.com", "kind": "Widget", "version": "v1"}])
    );

    // deployments/scale is described with the autoscaling/v1 Scale kind.
    let url = paths["apis/apps/v1"]["serverRelativeURL"].as_str().unwrap();
    let (_, _, doc) = get_json(&h, url, &[]).await;
    assert_eq!(
        doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]["get"]
            ["x-kubernetes-group-version-kind"],
        json!({"group": "autoscaling", "kind": "Scale", "version": "v1"})
    );

    // v2: JSON only; the protobuf client-go asks for is 406.
    let (s, _, v2) = get_json(&h, "/openapi/v2", &[("accept", "application/json")]).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v2["swagger"], "2.0");
    assert!(
        v2["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]["consumes"]
            .as_array()
            .unwrap()
            .contains(&json!("application/strategic-merge-patch+json"))
    );
    let (s, _, v) = get_json(
        &h,
        "/openapi/v2",
        &[(
            "accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )],
    )
    .await;
    assert_eq!(s, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(v["reason"], "NotAcceptable");
    h.shutdown().await;
}

async fn run_kubectl(h: &SimHandle, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(support::tools::kubectl())
        .arg("--server")
        .arg(h.url())
        .args(args)
        .env("KUBECONFIG", "/dev/null")
        .output()
        .await
        .expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn kubectl_api_resources_and_raw_discovery() {
    let h = sim().await;
    let (ok, out, err) = run_kubectl(&h, &["api-resources", "--no-headers"]).await;
    assert!(ok, "{err}");
    assert!(err.is_empty(), "kubectl complained: {err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let find = |name: &str| rows.iter().find(|r| r[0] == name).cloned();
    assert_eq!(
        find("pods").unwrap(),
        vec!["pods", "po", "v1", "true", "Pod"]
    );
    assert_eq!(
        find("deployments").unwrap(),
        vec!["deployments", "deploy", "apps/v1", "true", "Deployment"]
    );
    assert_eq!(
        find("widgets").unwrap(),
        vec!["widgets", "wg", "example.com/v1", "true", "Widget"]
    );
    assert_eq!(
        find("secrets").unwrap(),
        vec!["secrets", "v1", "true", "Secret"]
    );
    assert_eq!(
        find("customresourcedefinitions").unwrap(),
        vec![
            "customresourcedefinitions",
            "crd,crds",
            "apiextensions.k8s.io/v1",
            "false",
            "CustomResourceDefinition"
        ]
    );
    assert_eq!(
        find("endpointslices").unwrap(),
        vec![
            "endpointslices",
            "discovery.k8s.io/v1",
            "true",
            "EndpointSlice"
        ]
    );
    assert_eq!(rows.len(), 12, "{out}");

    let (ok, out, err) = run_kubectl(&h, &["get", "--raw", "/apis/apps/v1"]).await;
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["groupVersion"], "apps/v1");
    let (ok, out, _) = run_kubectl(&h, &["version", "-o", "json"]).await;
    assert!(ok);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["serverVersion"]["gitVersion"], "v1.36.0");
    h.shutdown().await;
}

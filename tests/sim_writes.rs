//! The simulator's write path over HTTP: create/update/patch/delete, dryRun, finalizers,
//! subresources and the exact Status answers for bad input (see docs/simulator.md,
//! "Writes").

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use support::objects::pod;
use support::wait::wait_for;
use watchgate::sim::resources::find;
use watchgate::sim::store::{EventType, Store};
use watchgate::sim::{self, SimConfig, SimHandle};

struct Api {
    sim: SimHandle,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
}

impl Api {
    async fn new() -> Self {
        let sim = sim::start(SimConfig::default()).await.expect("sim starts");
        // Built-in namespaces (idempotent if seeding already made them).
        sim::write::bootstrap(sim.store());
        Self {
            sim,
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    fn store(&self) -> &Arc<Store> {
        self.sim.store()
    }

    async fn send(&self, method: Method, path: &str, ct: &str, body: &str) -> (u16, Value) {
        let mut b = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.sim.url()))
            .header("user-agent", "sim-writes-test/1.0 (linux)");
        if !ct.is_empty() {
            b = b.header("content-type", ct);
        }
        let req = b
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("request");
        let resp = self.client.request(req).await.expect("response");
        let code = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("non-JSON answer {e}: {}", String::from_utf8_lossy(&bytes)));
        (code, v)
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(Method::POST, path, "application/json", &body.to_string())
            .await
    }

    async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(Method::PUT, path, "application/json", &body.to_string())
            .await
    }

    async fn patch(&self, path: &str, ct: &str, body: Value) -> (u16, Value) {
        self.send(Method::PATCH, path, ct, &body.to_string()).await
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(Method::GET, path, "", "").await
    }

    async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(Method::DELETE, path, "", "").await
    }

    /// Events of one type recorded after `after` (what watchers are served).
    fn events(&self, group: &str, resource: &str, after: u64) -> Vec<(EventType, String, u64)> {
        let rt = find(group, "v1", resource).expect("type");
        let (evs, _) = self.store().events_since(rt, after, 1000).expect("history");
        evs.iter().map(|e| (e.kind, e.name.clone(), e.rv)).collect()
    }
}

const PODS: &str = "/api/v1/namespaces/default/pods";
const CMS: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";

/// A pod already bound to a node, so the simulated scheduler/kubelet leave it alone and
/// event sequences stay deterministic (see `unbound_pods_are_scheduled_and_started`); without
/// a namespace, which the URL gives.
fn bound_pod(name: &str) -> Value {
    pod("", name)
        .label("app", "web")
        .node("node-a")
        .image("nginx:1.27")
        .build()
}

fn deploy(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}})
}

fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .expect("resourceVersion")
        .parse()
        .expect("numeric RV")
}

#[tokio::test]
async fn create_get_round_trip_fills_system_fields() {
    let api = Api::new().await;
    let before = api.store().current_rv();
    let (code, created) = api.post(PODS, bound_pod("web-1")).await;
    assert_eq!(code, 201, "{created}");
    let m = &created["metadata"];
    assert_eq!(m["namespace"], "default");
    assert_eq!(m["uid"].as_str().unwrap().len(), 36);
    assert!(m["creationTimestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(rv(&created), before + 1);
    assert_eq!(m["generation"], 1);
    assert_eq!(created["status"]["phase"], "Pending");
    let mf = &m["managedFields"][0];
    assert_eq!(mf["manager"], "sim-writes-test");
    assert_eq!(mf["operation"], "Update");
    assert_eq!(mf["fieldsType"], "FieldsV1");
    assert!(mf["fieldsV1"]["f:spec"]["f:containers"].is_object(), "{mf}");
    let (code, got) = api.get(&format!("{PODS}/web-1")).await;
    assert_eq!(code, 200);
    assert_eq!(got, created);
    assert_eq!(
        api.events("", "pods", before),
        vec![(EventType::Added, "web-1".into(), before + 1)]
    );
    // configmaps have no generation.
    let (code, cm) = api
        .post(CMS, json!({"metadata": {"name": "c"}, "data": {"a": "1"}}))
        .await;
    assert_eq!(code, 201);
    assert!(cm["metadata"].get("generation").is_none());
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(cm["apiVersion"], "v1");
}

#[tokio::test]
async fn generate_name_and_already_exists() {
    let api = Api::new().await;
    let (code, a) = api
        .post(CMS, json!({"metadata": {"generateName": "gen-"}}))
        .await;
    assert_eq!(code, 201);
    let name = a["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    let (code, s) = api.post(CMS, json!({"metadata": {"name": name}})).await;
    assert_eq!(code, 409);
    assert_eq!(s["reason"], "AlreadyExists");
    assert_eq!(
        s["message"],
        format!("configmaps \"{name}\" already exists")
    );
    assert_eq!(s["details"], json!({"name": name, "kind": "configmaps"}));
}

#[tokio::test]
async fn invalid_names_are_422_with_causes() {
    let api = Api::new().await;
    let (code, s) = api.post(PODS, bound_pod("Bad_Name")).await;
    assert_eq!(code, 422);
    assert_eq!(s["reason"], "Invalid");
    assert_eq!(
        s["message"],
        "Pod \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    );
    assert_eq!(s["details"]["kind"], "Pod");
    assert_eq!(s["details"]["causes"][0]["reason"], "FieldValueInvalid");
    assert_eq!(s["details"]["causes"][0]["field"], "metadata.name");
    let (code, s) = api.post(CMS, json!({"metadata": {}})).await;
    assert_eq!(code, 422);
    assert_eq!(
        s["message"],
        "ConfigMap \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );
    assert_eq!(s["details"]["causes"][0]["reason"], "FieldValueRequired");
    // Services use DNS-1035 labels.
    let (code, s) = api
        .post(
            "/api/v1/namespaces/default/services",
            json!({"metadata": {"name": "1svc"}, "spec": {"ports": [{"port": 80}]}}),
        )
        .await;
    assert_eq!(code, 422);
    assert!(s["message"]
        .as_str()
        .unwrap()
        .contains("a DNS-1035 label must consist"));
}

#[tokio::test]
async fn namespace_checks_on_create() {
    let api = Api::new().await;
    let (code, s) = api
        .post(
            CMS,
            json!({"metadata": {"name": "x", "namespace": "other"}}),
        )
        .await;
    assert_eq!(code, 400);
    assert_eq!(
        s["message"],
        "the namespace of the provided object does not match the namespace sent on the request"
    );
    let (code, s) = api
        .post(
            "/api/v1/namespaces/nope/configmaps",
            json!({"metadata": {"name": "x"}}),
        )
        .await;
    assert_eq!(code, 404);
    assert_eq!(s["message"], "namespaces \"nope\" not found");
    assert_eq!(s["details"], json!({"name": "nope", "kind": "namespaces"}));
    // Namespaces get the Active phase and the metadata.name label.
    let (code, ns) = api
        .post(
            "/api/v1/namespaces",
            json!({"metadata": {"name": "team-a"}}),
        )
        .await;
    assert_eq!(code, 201);
    assert_eq!(ns["status"]["phase"], "Active");
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team-a"
    );
}

#[tokio::test]
async fn update_conflict_noop_and_generation() {
    let api = Api::new().await;
    let (_, d) = api.post(DEPLOYS, deploy("d", 1)).await;
    let rv1 = rv(&d);
    // Label change: new RV, same generation.
    let mut upd = d.clone();
    upd["metadata"]["labels"] = json!({"tier": "front"});
    let (code, d2) = api.put(&format!("{DEPLOYS}/d"), upd.clone()).await;
    assert_eq!(code, 200, "{d2}");
    assert!(rv(&d2) > rv1);
    assert_eq!(d2["metadata"]["generation"], 1);
    // Stale RV: 409 with the apiserver's message.
    let (code, s) = api.put(&format!("{DEPLOYS}/d"), upd).await;
    assert_eq!(code, 409);
    assert_eq!(s["reason"], "Conflict");
    assert_eq!(
        s["message"],
        "Operation cannot be fulfilled on deployments.apps \"d\": the object has been modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(
        s["details"],
        json!({"name": "d", "group": "apps", "kind": "deployments"})
    );
    // Spec change: generation 2.
    let mut upd = d2.clone();
    upd["spec"]["replicas"] = json!(3);
    let (code, d3) = api.put(&format!("{DEPLOYS}/d"), upd).await;
    assert_eq!(code, 200);
    assert_eq!(d3["metadata"]["generation"], 2);
    // Identical PUT: no new RV, no event.
    let at = api.store().current_rv();
    let (code, d4) = api.put(&format!("{DEPLOYS}/d"), d3.clone()).await;
    assert_eq!(code, 200);
    assert_eq!(rv(&d4), rv(&d3));
    assert_eq!(api.store().current_rv(), at);
    assert!(api.events("apps", "deployments", at).is_empty());
    // Missing RV = unconditional update; name mismatch 400; absent 404.
    let mut upd = d4.clone();
    upd["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    upd["spec"]["replicas"] = json!(4);
    let (code, _) = api.put(&format!("{DEPLOYS}/d"), upd.clone()).await;
    assert_eq!(code, 200);
    let (code, s) = api.put(&format!("{DEPLOYS}/other"), upd.clone()).await;
    assert_eq!(code, 400);
    assert_eq!(
        s["message"],
        "the name of the object (d) does not match the name on the URL (other)"
    );
    upd["metadata"]["name"] = json!("ghost");
    let (code, s) = api.put(&format!("{DEPLOYS}/ghost"), upd).await;
    assert_eq!(code, 404);
    assert_eq!(s["message"], "deployments.apps \"ghost\" not found");
}

#[tokio::test]
async fn patch_types() {
    let api = Api::new().await;
    api.post(PODS, bound_pod("p")).await;
    let path = format!("{PODS}/p");
    let (code, p) = api
        .patch(
            &path,
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"app": null, "m": "1"}}}),
        )
        .await;
    assert_eq!(code, 200, "{p}");
    assert_eq!(p["metadata"]["labels"], json!({"m": "1"}));
    let (code, p) = api
        .patch(
            &path,
            "application/json-patch+json",
            json!([{"op": "add", "path": "/metadata/labels/j", "value": "2"},
                   {"op": "test", "path": "/metadata/labels/m", "value": "1"}]),
        )
        .await;
    assert_eq!(code, 200, "{p}");
    assert_eq!(p["metadata"]["labels"], json!({"m": "1", "j": "2"}));
    // Strategic merge: keyed container list merged by name, directives honoured.
    let (code, p) = api
        .patch(
            &path,
            "application/strategic-merge-patch+json",
            json!({"metadata": {"labels": {"s": "3"}},
                   "spec": {"$setElementOrder/containers": [{"name": "c"}],
                            "containers": [{"name": "c", "image": "nginx:1.28"}]}}),
        )
        .await;
    assert_eq!(code, 200, "{p}");
    assert_eq!(
        p["metadata"]["labels"],
        json!({"m": "1", "j": "2", "s": "3"})
    );
    assert_eq!(p["spec"]["containers"][0]["image"], "nginx:1.28");
    assert_eq!(
        p["spec"]["containers"][0]["terminationMessagePath"],
        "/dev/termination-log"
    );
    assert_eq!(p["metadata"]["generation"], 2);
    // Failing JSON patch test op: 422 with the json-patch text as a cause.
    let (code, s) = api
        .patch(
            &path,
            "application/json-patch+json",
            json!([{"op": "test", "path": "/metadata/labels/m", "value": "x"}]),
        )
        .await;
    assert_eq!(code, 422);
    assert_eq!(
        s["message"],
        "the server rejected our request due to an error in our request"
    );
    assert_eq!(
        s["details"]["causes"][0],
        json!({"reason": "UnexpectedServerResponse", "message": "testing value /metadata/labels/m failed: test failed"})
    );
    // Patch of a missing object.
    let (code, s) = api
        .patch(
            &format!("{PODS}/ghost"),
            "application/merge-patch+json",
            json!({}),
        )
        .await;
    assert_eq!(code, 404);
    assert_eq!(s["message"], "pods \"ghost\" not found");
}

#[tokio::test]
async fn unsupported_patch_type_is_415() {
    let api = Api::new().await;
    api.post(PODS, bound_pod("p")).await;
    let (code, s) = api
        .patch(&format!("{PODS}/p"), "text/plain", json!({}))
        .await;
    assert_eq!(code, 415);
    assert_eq!(s["reason"], "UnsupportedMediaType");
    assert_eq!(
        s["message"],
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
    );
    // Custom resources have no strategic merge patch.
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    let (code, _) = api
        .post(widgets, json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}}))
        .await;
    assert_eq!(code, 201);
    let (code, s) = api
        .patch(
            &format!("{widgets}/w"),
            "application/strategic-merge-patch+json",
            json!({}),
        )
        .await;
    assert_eq!(code, 415);
    assert_eq!(
        s["message"],
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
}

#[tokio::test]
async fn server_side_apply_creates_merges_and_is_idempotent() {
    let api = Api::new().await;
    let path = format!("{CMS}/sa?fieldManager=tester");
    let cfg = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "sa"}, "data": {"a": "1", "b": "2"}});
    let (code, c) = api
        .patch(&path, "application/apply-patch+yaml", cfg.clone())
        .await;
    assert_eq!(code, 201, "{c}");
    assert_eq!(c["metadata"]["managedFields"][0]["operation"], "Apply");
    assert_eq!(c["metadata"]["managedFields"][0]["manager"], "tester");
    let (code, again) = api.patch(&path, "application/apply-patch+yaml", cfg).await;
    assert_eq!(code, 200);
    assert_eq!(rv(&again), rv(&c), "re-applying the same config is a no-op");
    // Dropping a field the manager owned removes it.
    let (code, c2) = api
        .patch(
            &path,
            "application/apply-patch+yaml",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "sa"}, "data": {"a": "1"}}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(c2["data"], json!({"a": "1"}));
    // YAML body works too.
    let (code, c3) = api
        .send(
            Method::PATCH,
            &path,
            "application/apply-patch+yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: sa\ndata:\n  a: \"9\"\n",
        )
        .await;
    assert_eq!(code, 200, "{c3}");
    assert_eq!(c3["data"], json!({"a": "9"}));
    // fieldManager is required for apply.
    let (code, s) = api
        .patch(
            &format!("{CMS}/sa"),
            "application/apply-patch+yaml",
            json!({"apiVersion": "v1", "kind": "ConfigMap"}),
        )
        .await;
    assert_eq!(code, 422);
    assert_eq!(
        s["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
}

#[tokio::test]
async fn apply_conflicts_with_other_managers() {
    let api = Api::new().await;
    api.post(&format!("{DEPLOYS}?fieldManager=creator"), deploy("d", 1))
        .await;
    let cfg = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 5}});
    let (code, s) = api
        .patch(
            &format!("{DEPLOYS}/d?fieldManager=applier"),
            "application/apply-patch+yaml",
            cfg.clone(),
        )
        .await;
    assert_eq!(code, 409, "{s}");
    assert!(s["message"]
        .as_str()
        .unwrap()
        .starts_with("Apply failed with 1 conflict: conflict with \"creator\" using apps/v1 at "));
    assert!(s["message"].as_str().unwrap().ends_with(": .spec.replicas"));
    assert_eq!(s["details"]["causes"][0]["reason"], "FieldManagerConflict");
    let (code, d) = api
        .patch(
            &format!("{DEPLOYS}/d?fieldManager=applier&force=true"),
            "application/apply-patch+yaml",
            cfg,
        )
        .await;
    assert_eq!(code, 200, "{d}");
    assert_eq!(d["spec"]["replicas"], 5);
    assert_eq!(d["metadata"]["generation"], 2);
}

#[tokio::test]
async fn finalizers_delay_deletion_until_removed() {
    let api = Api::new().await;
    let (_, cm) = api
        .post(
            CMS,
            json!({"metadata": {"name": "f", "finalizers": ["example.com/hold"]}}),
        )
        .await;
    let start = rv(&cm);
    let (code, deleting) = api.delete(&format!("{CMS}/f")).await;
    assert_eq!(code, 200);
    assert_eq!(
        deleting["kind"], "ConfigMap",
        "object kept, not a Status: {deleting}"
    );
    assert!(deleting["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(deleting["metadata"]["deletionGracePeriodSeconds"], 0);
    // Deleting again changes nothing.
    let (code, again) = api.delete(&format!("{CMS}/f")).await;
    assert_eq!(code, 200);
    assert_eq!(rv(&again), rv(&deleting));
    // No new finalizers while deleting.
    let (code, s) = api
        .patch(
            &format!("{CMS}/f"),
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": ["example.com/hold", "x/y"]}}),
        )
        .await;
    assert_eq!(code, 422);
    assert_eq!(
        s["message"],
        "ConfigMap \"f\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"x/y\"}"
    );
    // Removing the last finalizer deletes it.
    let (code, last) = api
        .patch(
            &format!("{CMS}/f"),
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(code, 200, "{last}");
    let (code, _) = api.get(&format!("{CMS}/f")).await;
    assert_eq!(code, 404);
    let evs: Vec<EventType> = api
        .events("", "configmaps", start)
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(evs, vec![EventType::Modified, EventType::Deleted]);
}

#[tokio::test]
async fn delete_answers_and_preconditions() {
    let api = Api::new().await;
    let (_, cm) = api.post(CMS, json!({"metadata": {"name": "c"}})).await;
    let (_, p) = api.post(PODS, bound_pod("p")).await;
    // Precondition mismatch: 409 naming the Kind.
    let (code, s) = api
        .send(
            Method::DELETE,
            &format!("{CMS}/c"),
            "application/json",
            r#"{"preconditions":{"uid":"nope"}}"#,
        )
        .await;
    assert_eq!(code, 409);
    assert_eq!(
        s["message"],
        format!("Operation cannot be fulfilled on ConfigMap \"c\": the UID in the precondition (nope) does not match the UID in record ({}). The object might have been deleted and then recreated", cm["metadata"]["uid"].as_str().unwrap())
    );
    // ConfigMaps answer with a Success Status; pods with the object.
    let at = api.store().current_rv();
    let (code, s) = api.delete(&format!("{CMS}/c")).await;
    assert_eq!(code, 200);
    assert_eq!(
        s,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
               "details": {"name": "c", "kind": "configmaps", "uid": cm["metadata"]["uid"]}})
    );
    let (code, gone) = api.delete(&format!("{PODS}/p")).await;
    assert_eq!(code, 200);
    assert_eq!(gone["metadata"]["uid"], p["metadata"]["uid"]);
    assert_eq!(api.events("", "configmaps", at)[0].0, EventType::Deleted);
    let (code, s) = api.delete(&format!("{PODS}/p")).await;
    assert_eq!(code, 404);
    assert_eq!(s["message"], "pods \"p\" not found");
    // Bad propagationPolicy.
    let (code, s) = api
        .delete(&format!("{PODS}/p?propagationPolicy=Sideways"))
        .await;
    assert_eq!(code, 422);
    assert_eq!(
        s["message"],
        "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Sideways\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
    );
    // The default namespace cannot be deleted.
    let (code, s) = api.delete("/api/v1/namespaces/default").await;
    assert_eq!(code, 403);
    assert_eq!(
        s["message"],
        "namespaces \"default\" is forbidden: this namespace may not be deleted"
    );
}

#[tokio::test]
async fn delete_collection_returns_the_list() {
    let api = Api::new().await;
    for n in ["a", "b", "c"] {
        let mut p = bound_pod(n);
        if n == "c" {
            p["metadata"]["labels"] = json!({"app": "db"});
        }
        api.post(PODS, p).await;
    }
    let (code, list) = api.delete(&format!("{PODS}?labelSelector=app%3Dweb")).await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["kind"], "PodList");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    let (_, left) = api
        .store()
        .list(find("", "v1", "pods").unwrap(), Some("default"));
    let names: Vec<&str> = left
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c"]);
}

#[tokio::test]
async fn dry_run_leaves_no_trace() {
    let api = Api::new().await;
    let (_, d) = api.post(DEPLOYS, deploy("d", 1)).await;
    let at = api.store().current_rv();
    let (code, created) = api
        .post(&format!("{DEPLOYS}?dryRun=All"), deploy("dry", 1))
        .await;
    assert_eq!(code, 201);
    assert_eq!(created["metadata"]["name"], "dry");
    assert!(created["metadata"].get("resourceVersion").is_none());
    let mut upd = d.clone();
    upd["spec"]["replicas"] = json!(7);
    let (code, u) = api.put(&format!("{DEPLOYS}/d?dryRun=All"), upd).await;
    assert_eq!(code, 200);
    assert_eq!(u["spec"]["replicas"], 7);
    assert_eq!(u["metadata"]["generation"], 2);
    let (code, _) = api
        .patch(
            &format!("{DEPLOYS}/d?dryRun=All"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 9}}),
        )
        .await;
    assert_eq!(code, 200);
    let (code, _) = api.delete(&format!("{DEPLOYS}/d?dryRun=All")).await;
    assert_eq!(code, 200);
    assert_eq!(api.store().current_rv(), at, "no RV consumed");
    assert!(
        api.events("apps", "deployments", at).is_empty(),
        "no events"
    );
    let (_, now) = api.get(&format!("{DEPLOYS}/d")).await;
    assert_eq!(now, d);
    let (code, _) = api.get(&format!("{DEPLOYS}/dry")).await;
    assert_eq!(code, 404);
    // Validation still runs, and unknown dryRun values are refused.
    let (code, _) = api
        .post(&format!("{DEPLOYS}?dryRun=All"), deploy("d", 1))
        .await;
    assert_eq!(code, 409);
    let (code, s) = api
        .post(&format!("{DEPLOYS}?dryRun=Some"), deploy("x", 1))
        .await;
    assert_eq!(code, 422);
    assert_eq!(
        s["message"],
        "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Some\"}: supported values: \"All\""
    );
}

#[tokio::test]
async fn scale_subresource() {
    let api = Api::new().await;
    api.post(DEPLOYS, deploy("d", 2)).await;
    let (code, s) = api.get(&format!("{DEPLOYS}/d/scale")).await;
    assert_eq!(code, 200, "{s}");
    assert_eq!(s["kind"], "Scale");
    assert_eq!(s["apiVersion"], "autoscaling/v1");
    assert_eq!(s["spec"]["replicas"], 2);
    assert_eq!(s["status"], json!({"replicas": 0, "selector": "app=d"}));
    // kubectl scale: merge patch on /scale.
    let (code, s2) = api
        .patch(
            &format!("{DEPLOYS}/d/scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 4}}),
        )
        .await;
    assert_eq!(code, 200, "{s2}");
    assert_eq!(s2["spec"]["replicas"], 4);
    let (_, d) = api.get(&format!("{DEPLOYS}/d")).await;
    assert_eq!(d["spec"]["replicas"], 4);
    assert_eq!(d["metadata"]["generation"], 2);
    // PUT with a stale RV conflicts; negative replicas are invalid.
    let (code, _) = api
        .put(&format!("{DEPLOYS}/d/scale"), json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": {"name": "d", "resourceVersion": s["metadata"]["resourceVersion"]}, "spec": {"replicas": 1}}))
        .await;
    assert_eq!(code, 409);
    let (code, e) = api
        .put(
            &format!("{DEPLOYS}/d/scale"),
            json!({"metadata": {"name": "d"}, "spec": {"replicas": -1}}),
        )
        .await;
    assert_eq!(code, 422);
    assert_eq!(
        e["message"],
        "Scale.autoscaling \"d\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0"
    );
}

#[tokio::test]
async fn status_subresource_only_touches_status() {
    let api = Api::new().await;
    let (_, p) = api.post(PODS, bound_pod("p")).await;
    // Main resource ignores status.
    let (_, p2) = api
        .patch(
            &format!("{PODS}/p"),
            "application/merge-patch+json",
            json!({"status": {"phase": "Running"}}),
        )
        .await;
    assert_eq!(p2["status"]["phase"], "Pending");
    assert_eq!(rv(&p2), rv(&p), "ignored change is a no-op");
    // /status ignores everything else.
    let (code, p3) = api
        .patch(
            &format!("{PODS}/p/status"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"x": "y"}}, "status": {"phase": "Running"}}),
        )
        .await;
    assert_eq!(code, 200, "{p3}");
    assert_eq!(p3["status"]["phase"], "Running");
    assert_eq!(p3["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(p3["metadata"]["generation"], 1);
}

#[tokio::test]
async fn namespace_deletion_terminates_then_removes_contents() {
    let api = Api::new().await;
    api.post("/api/v1/namespaces", json!({"metadata": {"name": "tmp"}}))
        .await;
    api.post(
        "/api/v1/namespaces/tmp/configmaps",
        json!({"metadata": {"name": "c"}}),
    )
    .await;
    let (code, ns) = api.delete("/api/v1/namespaces/tmp").await;
    assert_eq!(code, 200);
    assert_eq!(ns["status"]["phase"], "Terminating");
    // The simulated namespace controller removes it.
    wait_for(
        "the namespace controller removes namespace tmp",
        Duration::from_secs(2),
        || api.get("/api/v1/namespaces/tmp"),
        |(code, _)| *code == 404,
    )
    .await;
    let (code, _) = api.get("/api/v1/namespaces/tmp/configmaps/c").await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn malformed_bodies_get_apiserver_statuses() {
    let api = Api::new().await;
    api.post(PODS, bound_pod("p")).await;
    let cases: Vec<(Method, String, &str, &str, u16, &str)> = vec![
        (Method::POST, PODS.into(), "application/json", "{not json", 400,
         "the object provided is unrecognized (must be of type Pod): couldn't get version/kind; json parse error: invalid character 'n' looking for beginning of object key string ({not json)"),
        (Method::POST, PODS.into(), "application/json", "[]", 400,
         "the object provided is unrecognized (must be of type Pod): couldn't get version/kind; json parse error: json: cannot unmarshal array into Go value of type struct { APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" } (5b5d)"),
        (Method::POST, PODS.into(), "text/plain", "{}", 415,
         "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf"),
        (Method::POST, PODS.into(), "application/json", r#"{"apiVersion":"v1","kind":"Pod","metadata":"x"}"#, 400,
         "Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field Pod.metadata of type v1.ObjectMeta"),
        (Method::POST, PODS.into(), "application/json", r#"{"apiVersion":"apps/v1","kind":"Pod","metadata":{"name":"q"}}"#, 400,
         "the API version in the data (apps/v1) does not match the expected API version (v1)"),
        (Method::PATCH, format!("{PODS}/p"), "application/merge-patch+json", "{", 400, "Invalid JSON Patch"),
        (Method::PATCH, format!("{PODS}/p"), "application/json-patch+json", "{\"op\":1}", 400,
         "json: cannot unmarshal object into Go value of type jsonpatch.Patch"),
        (Method::PATCH, format!("{PODS}/p"), "application/strategic-merge-patch+json", "[1]", 400,
         "json: cannot unmarshal array into Go value of type map[string]interface {}"),
        (Method::PATCH, format!("{PODS}/p?force=true"), "application/merge-patch+json", "{}", 422,
         "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"),
        (Method::POST, format!("{CMS}?fieldValidation=Strict"), "application/json", r#"{"metadata":{"name":"s","nmae":"x"},"dat":{}}"#, 400,
         "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"metadata.nmae\", unknown field \"dat\""),
        (Method::PUT, format!("{PODS}/p"), "application/json", r#"{"metadata":{}}"#, 400,
         "the name of the object (p based on URL) was undeterminable: name must be provided"),
    ];
    for (method, path, ct, body, code, msg) in cases {
        let (got, s) = api.send(method.clone(), &path, ct, body).await;
        assert_eq!(got, code, "{method} {path} {ct} {body}: {s}");
        assert_eq!(s["kind"], "Status");
        assert_eq!(s["message"], msg, "{method} {path} {ct} {body}");
    }
}

#[tokio::test]
async fn unbound_pods_are_scheduled_and_started() {
    let api = Api::new().await;
    let start = api.store().current_rv();
    let mut p = bound_pod("run");
    p["spec"].as_object_mut().unwrap().remove("nodeName");
    let (code, created) = api.post(PODS, p).await;
    assert_eq!(code, 201);
    assert_eq!(created["status"]["phase"], "Pending");
    // The two follow-up writes (binding, kubelet status).
    let evs = wait_for(
        "the pod is scheduled and started (three events)",
        Duration::from_secs(2),
        || std::future::ready(api.events("", "pods", start)),
        |evs| evs.len() >= 3,
    )
    .await;
    let kinds: Vec<EventType> = evs.iter().map(|e| e.0).collect();
    assert_eq!(
        kinds,
        vec![EventType::Added, EventType::Modified, EventType::Modified],
        "pod was not scheduled and started within 2s"
    );
    let (_, got) = api.get(&format!("{PODS}/run")).await;
    assert_eq!(got["spec"]["nodeName"], "sim-node-0");
    assert_eq!(got["status"]["phase"], "Running");
    assert_eq!(got["status"]["containerStatuses"][0]["ready"], true);
    assert_eq!(got["metadata"]["generation"], 1);
}

#[tokio::test]
async fn update_rules_per_type() {
    let api = Api::new().await;
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    let (_, w) = api
        .post(widgets, json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}}))
        .await;
    assert_eq!(w["metadata"]["generation"], 1);
    // Custom resources refuse unconditional updates (AllowUnconditionalUpdate false).
    let mut upd = w.clone();
    upd["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let (code, s) = api.put(&format!("{widgets}/w"), upd).await;
    assert_eq!(code, 422);
    assert_eq!(
        s["message"],
        "widgets.example.com \"w\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    );
    // Any non-metadata change bumps a custom resource's generation.
    let mut upd = w.clone();
    upd["spec"]["size"] = json!(2);
    let (code, w2) = api.put(&format!("{widgets}/w"), upd).await;
    assert_eq!(code, 200);
    assert_eq!(w2["metadata"]["generation"], 2);
    // Endpoints are created by PUT (AllowCreateOnUpdate); configmaps are not.
    let (code, ep) = api
        .put(
            "/api/v1/namespaces/default/endpoints/e",
            json!({"metadata": {"name": "e"}, "subsets": []}),
        )
        .await;
    assert_eq!(code, 201, "{ep}");
    let (code, _) = api
        .put(
            &format!("{CMS}/nope"),
            json!({"metadata": {"name": "nope"}}),
        )
        .await;
    assert_eq!(code, 404);
    // namespaces/finalize changes spec.finalizers and nothing else.
    let (_, ns) = api
        .post("/api/v1/namespaces", json!({"metadata": {"name": "fz"}}))
        .await;
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    let mut upd = ns.clone();
    upd["spec"]["finalizers"] = json!([]);
    upd["metadata"]["labels"]["extra"] = json!("x");
    let (code, fin) = api.put("/api/v1/namespaces/fz/finalize", upd).await;
    assert_eq!(code, 200, "{fin}");
    // An empty list is omitted (`finalizers,omitempty`), as the apiserver writes it.
    assert_eq!(fin["spec"], json!({}));
    assert!(fin["metadata"]["labels"].get("extra").is_none());
}

#[tokio::test]
async fn protobuf_bodies_of_kubectl_generators() {
    fn ld(num: u8, b: &[u8]) -> Vec<u8> {
        let mut out = vec![(num << 3) | 2, b.len() as u8];
        out.extend_from_slice(b);
        out
    }
    let api = Api::new().await;
    let tm = [ld(1, b"v1"), ld(2, b"ConfigMap")].concat();
    let raw = [
        ld(1, &ld(1, b"pb")),
        ld(2, &[ld(1, b"k"), ld(2, b"v")].concat()),
    ]
    .concat();
    let body = [b"k8s\0".to_vec(), ld(1, &tm), ld(2, &raw)].concat();
    let req = Request::builder()
        .method(Method::POST)
        .uri(format!("{}{CMS}", api.sim.url()))
        .header("content-type", "application/vnd.kubernetes.protobuf")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = api.client.request(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let (_, got) = api.get(&format!("{CMS}/pb")).await;
    assert_eq!(got["data"], json!({"k": "v"}));
    // A malformed envelope: the protobuf serializer's error through
    // `transformDecodeError` (gogo's `Unknown.Unmarshal`: field 13's length runs past the
    // end), with the body summarised in hex.
    let (code, s) = api
        .send(
            Method::POST,
            DEPLOYS,
            "application/vnd.kubernetes.protobuf",
            "k8s\0junk",
        )
        .await;
    assert_eq!(code, 400, "{s}");
    assert_eq!(s["reason"], "BadRequest");
    assert_eq!(
        s["message"],
        "the object provided is unrecognized (must be of type Deployment): unexpected EOF (6b3873006a756e6b)"
    );
}

/// Decoding a write into the Go struct drops the fields it lacks, at every level; the
/// strict decoder (`fieldValidation=Strict`, what kubectl sends) names them in document
/// order instead. What is stored is the struct's own JSON (Go field order, `omitempty`).
#[tokio::test]
async fn unknown_fields_are_dropped_or_named_at_every_level() {
    let api = Api::new().await;
    let body = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "u", "bogus": 1},
        "spec": {"containers": [{"image": "i", "name": "c", "imagee": "x"}], "extra": {}}});
    let (code, s) = api
        .post(&format!("{PODS}?fieldValidation=Strict"), body.clone())
        .await;
    assert_eq!(code, 400, "{s}");
    assert_eq!(
        s["message"],
        "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field \"metadata.bogus\", unknown field \"spec.containers[0].imagee\", unknown field \"spec.extra\""
    );
    let (code, pod) = api.post(PODS, body).await;
    assert_eq!(code, 201, "{pod}");
    assert!(pod["metadata"].get("bogus").is_none());
    assert!(pod["spec"].get("extra").is_none());
    // The container in Go field order, defaults in place (an untagged image: `Always`).
    assert_eq!(
        serde_json::to_string(&pod["spec"]["containers"]).unwrap(),
        r#"[{"name":"c","image":"i","resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"Always"}]"#
    );
    // A patch's result is decoded into the struct too.
    let (code, pod) = api
        .patch(
            &format!("{PODS}/u"),
            "application/merge-patch+json",
            json!({"spec": {"nope": true}, "metadata": {"labels": {"a": "b"}}}),
        )
        .await;
    assert_eq!(code, 200, "{pod}");
    assert!(pod["spec"].get("nope").is_none());
    assert_eq!(pod["metadata"]["labels"]["a"], "b");
}

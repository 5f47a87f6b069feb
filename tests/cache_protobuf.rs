//! Protobuf answers from the cache (issue 14): gets, lists and watches of built-in types,
//! and PartialObjectMetadata, with client-go's exact Accept headers, carry
//! `X-Watchgate-Source: cache`, and decode with `k8s-pb` (prost types generated from the
//! upstream .proto files, an independent decoder) into the same objects as the JSON answer
//! to the same request, field by field.
//!
//! "The same objects": the k8s-pb message is re-encoded by prost and turned back into JSON
//! by `proto::decode` (Go's `encoding/json` form); the JSON answer goes through the same
//! normalisation (`proto::encode` then `decode`). Any field k8s-pb put elsewhere, dropped,
//! or read differently makes the two differ.

mod support;

use prost::Message;
use serde_json::{json, Value};
use support::metrics::sample;
use support::objects::pod;
use support::protobuf::{same_object, CLIENT_GO, METADATA, METADATA_LIST};
use support::servers::Env;
use support::watch::{open_with, put_object, resource, rv_at_least, wait_until_cached};
use watchgate::proto;

use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;

async fn get(env: &Env, path: &str, accept: &str) -> support::http::Resp {
    let r = env
        .http
        .request(http::Method::GET, path, &[("accept", accept)], Vec::new())
        .await;
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    assert_eq!(r.source(), Some("cache"), "{path}");
    r
}

/// A running pod with a field of every kind the transcoder handles: maps, nested messages,
/// repeated messages, quantities, int-or-string, negative numbers, escapes.
fn rich_pod(name: &str, node: &str) -> Value {
    pod("default", name)
        .label("app", "web")
        .running_on(node)
        .merge(json!({
            "metadata": {"annotations": {"note": "a<b"}, "creationTimestamp": "2026-01-02T03:04:05Z",
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                              "uid": "3f0b3c4e-1111-2222-3333-444455556666", "controller": true}]},
            "spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                     "containers": [{"name": "c", "image": "nginx:1.27",
                                     "ports": [{"containerPort": 80, "protocol": "TCP"}],
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                                     "livenessProbe": {"httpGet": {"path": "/", "port": "http"}}}],
                     "tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": -1}]},
            "status": {"podIP": "10.0.0.5",
                       "conditions": [{"type": "Ready", "status": "True",
                                       "lastTransitionTime": "2026-01-02T03:04:06Z"}]},
        }))
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_gets_lists_and_watches_of_built_in_types_come_from_the_cache() {
    let env = Env::gateway().await;
    let gw = env.url().to_string();
    let sim = env.sim.handle();
    let pods = resource("", "v1", "pods");
    put_object(sim, pods, "default", rich_pod("a", "n1"));
    let start = put_object(sim, pods, "default", rich_pod("b", "n2"));
    let others = [
        (
            "configmaps",
            json!({"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": "cm", "namespace": "default"}, "data": {"k": "v"}, "binaryData": {"b": "AAEC"}}),
        ),
        (
            "services",
            json!({"kind": "Service", "apiVersion": "v1",
            "metadata": {"name": "svc", "namespace": "default"},
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "selector": {"app": "web"},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}),
        ),
        (
            "nodes",
            json!({"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                       "addresses": [{"type": "InternalIP", "address": "10.1.0.1"}]}}),
        ),
    ];
    // Each cache is caught up to its own type's last write (a quiet type does not learn
    // the global resourceVersion).
    let mut caught = vec![("/api/v1/pods".to_string(), start)];
    for (resource_name, obj) in &others {
        let ns = if *resource_name == "nodes" {
            ""
        } else {
            "default"
        };
        let rv = put_object(sim, resource("", "v1", resource_name), ns, obj.clone());
        caught.push((format!("/api/v1/{resource_name}"), rv));
    }
    for (path, rv) in &caught {
        wait_until_cached(&gw, &format!("{path}?resourceVersion=0"), rv_at_least(*rv)).await;
    }
    // A resourceVersion the pods cache's history holds (its list came after the writes
    // above: watching from before it is the apiserver's 410).
    let start = put_object(sim, pods, "default", rich_pod("b", "n5"));
    wait_until_cached(&gw, "/api/v1/pods?resourceVersion=0", rv_at_least(start)).await;

    // Lists, RV=0 and RV=N (NotOlderThan), and a first page: the PodList decodes with
    // k8s-pb into the JSON list's objects, item by item.
    for q in [
        "resourceVersion=0".to_string(),
        format!("resourceVersion={start}"),
        format!("resourceVersion={start}&resourceVersionMatch=NotOlderThan&limit=1"),
    ] {
        let path = format!("/api/v1/namespaces/default/pods?{q}");
        let pb = get(&env, &path, CLIENT_GO).await;
        assert_eq!(
            pb.headers["content-type"],
            "application/vnd.kubernetes.protobuf"
        );
        let js = get(&env, &path, "application/json").await.json();
        let list: core::PodList = same_object(&pb.body, "v1", "PodList", &js);
        assert_eq!(
            list.items.len(),
            js["items"].as_array().unwrap().len(),
            "{path}"
        );
        let meta = list.metadata.as_ref().unwrap();
        assert_eq!(
            meta.resource_version.as_deref(),
            js["metadata"]["resourceVersion"].as_str()
        );
        assert_eq!(
            meta.r#continue.as_deref().unwrap_or(""),
            js["metadata"]["continue"].as_str().unwrap_or("")
        );
        // Typed fields read straight from k8s-pb's structs.
        let first = &list.items[0];
        let spec = first.spec.as_ref().unwrap();
        assert_eq!(first.metadata.as_ref().unwrap().name.as_deref(), Some("a"));
        assert_eq!(spec.containers[0].image.as_deref(), Some("nginx:1.27"));
        assert_eq!(spec.containers[0].ports[0].container_port, Some(80));
        let probe_port = spec.containers[0]
            .liveness_probe
            .as_ref()
            .unwrap()
            .handler
            .as_ref()
            .and_then(|h| h.http_get.as_ref())
            .and_then(|g| g.port.as_ref())
            .unwrap();
        assert_eq!(probe_port.str_val.as_deref(), Some("http"));
        assert_eq!(spec.tolerations[0].toleration_seconds, Some(-1));
        let cpu = &spec.containers[0].resources.as_ref().unwrap().requests["cpu"];
        assert_eq!(cpu.string.as_deref(), Some("100m"));
        let created = first
            .metadata
            .as_ref()
            .unwrap()
            .creation_timestamp
            .as_ref()
            .unwrap();
        assert_eq!(created.seconds, Some(1_767_323_045));
    }
    // Gets of each type.
    for (path, kind) in [
        ("/api/v1/namespaces/default/pods/b?resourceVersion=0", "Pod"),
        (
            "/api/v1/namespaces/default/configmaps/cm?resourceVersion=0",
            "ConfigMap",
        ),
        (
            "/api/v1/namespaces/default/services/svc?resourceVersion=0",
            "Service",
        ),
        ("/api/v1/nodes/n1?resourceVersion=0", "Node"),
    ] {
        let pb = get(&env, path, CLIENT_GO).await;
        let js = get(&env, path, "application/json").await.json();
        match kind {
            "Pod" => drop(same_object::<core::Pod>(&pb.body, "v1", kind, &js)),
            "ConfigMap" => {
                let cm: core::ConfigMap = same_object(&pb.body, "v1", kind, &js);
                assert_eq!(cm.binary_data["b"], vec![0, 1, 2]);
            }
            "Service" => {
                let s: core::Service = same_object(&pb.body, "v1", kind, &js);
                let tp = s.spec.unwrap().ports[0].target_port.clone().unwrap();
                assert_eq!(tp.int_val, Some(8080));
            }
            _ => {
                let n: core::Node = same_object(&pb.body, "v1", kind, &js);
                assert_eq!(
                    n.status.unwrap().capacity["memory"].string.as_deref(),
                    Some("16Gi")
                );
            }
        }
    }
    // Lists of the other types.
    for (path, kind) in [
        ("/api/v1/configmaps?resourceVersion=0", "ConfigMapList"),
        ("/api/v1/services?resourceVersion=0", "ServiceList"),
        ("/api/v1/nodes?resourceVersion=0", "NodeList"),
    ] {
        let pb = get(&env, path, CLIENT_GO).await;
        let js = get(&env, path, "application/json").await.json();
        match kind {
            "ConfigMapList" => drop(same_object::<core::ConfigMapList>(
                &pb.body, "v1", kind, &js,
            )),
            "ServiceList" => drop(same_object::<core::ServiceList>(&pb.body, "v1", kind, &js)),
            _ => drop(same_object::<core::NodeList>(&pb.body, "v1", kind, &js)),
        }
    }

    // Watches: RV=0, RV=N, and a watch-list from N; each protobuf frame's object is the
    // JSON event's object, in the same order, with the initial-events-end bookmark.
    let paths = [
        "/api/v1/namespaces/default/pods?watch=true&resourceVersion=0".to_string(),
        format!("/api/v1/namespaces/default/pods?watch=true&resourceVersion={start}"),
        format!("/api/v1/namespaces/default/pods?watch=true&resourceVersion={start}&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"),
    ];
    let mut watches = Vec::new();
    for p in &paths {
        let pb = open_with(&gw, p, &[("accept", CLIENT_GO)]).await;
        pb.assert_from_cache();
        assert_eq!(
            pb.headers["content-type"],
            "application/vnd.kubernetes.protobuf;stream=watch"
        );
        let js = open_with(&gw, p, &[("accept", "application/json")]).await;
        watches.push((pb, js));
    }
    put_object(sim, pods, "default", rich_pod("c", "n3"));
    put_object(sim, pods, "default", rich_pod("a", "n4"));
    // RV=0: a, b (initial), c, a; RV=N: c, a; watch-list: a, b, bookmark, c, a.
    for ((pb, js), n) in watches.iter_mut().zip([4, 2, 5]) {
        for _ in 0..n {
            let (ty, env) = pb.next_proto("a protobuf event").await;
            let ev = js.next("the JSON event").await;
            assert_eq!(ty, ev.ty());
            if ty == "BOOKMARK" {
                let b: core::Pod =
                    Message::decode(proto::decode_unknown(&env).unwrap().raw).unwrap();
                let m = b.metadata.unwrap();
                assert_eq!(
                    m.resource_version.as_deref(),
                    ev.object()["metadata"]["resourceVersion"].as_str()
                );
                assert_eq!(m.annotations["k8s.io/initial-events-end"], "true");
                continue;
            }
            same_object::<core::Pod>(&env, "v1", "Pod", ev.object());
        }
    }

    // The protobuf messages built for these answers are kept with their objects, and the
    // memory they hold is reported.
    let admin = support::http::Http::new(&format!(
        "http://{}",
        env.gateway.as_ref().unwrap().handle().admin_addr()
    ));
    let metrics = admin.get("/metrics").await.text();
    let derived = sample(
        &metrics,
        "watchgate_cache_derived_bytes",
        &[("representation", "protobuf")],
    );
    assert!(derived > 0.0, "protobuf bytes reported: {derived}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_metadata_lists_gets_and_watches_come_from_the_cache() {
    let env = Env::gateway().await;
    let gw = env.url().to_string();
    let sim = env.sim.handle();
    let pods = resource("", "v1", "pods");
    let start = put_object(sim, pods, "default", rich_pod("a", "n1"));
    let widgets = resource("example.com", "v1", "widgets");
    let wrv = put_object(
        sim,
        widgets,
        "default",
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default", "labels": {"x": "1"}}, "spec": {"size": 2}}),
    );
    wait_until_cached(&gw, "/api/v1/pods?resourceVersion=0", rv_at_least(start)).await;
    let wpath = "/apis/example.com/v1/namespaces/default/widgets";
    wait_until_cached(&gw, &format!("{wpath}?resourceVersion=0"), rv_at_least(wrv)).await;
    let start = put_object(sim, pods, "default", rich_pod("a", "n2"));
    wait_until_cached(&gw, "/api/v1/pods?resourceVersion=0", rv_at_least(start)).await;

    // The metadata informer's list, for a built-in type and a custom resource: each item
    // is exactly the object's metadata.
    for path in [
        "/api/v1/namespaces/default/pods?resourceVersion=0".to_string(),
        format!("{wpath}?resourceVersion=0"),
    ] {
        let pb = get(&env, &path, METADATA_LIST).await;
        assert_eq!(
            pb.headers["content-type"],
            "application/vnd.kubernetes.protobuf"
        );
        let js = get(&env, &path, "application/json").await.json();
        let u = proto::decode_unknown(&pb.body).unwrap();
        assert_eq!(
            (u.api_version, u.kind),
            ("meta.k8s.io/v1", "PartialObjectMetadataList")
        );
        let list = meta::PartialObjectMetadataList::decode(u.raw).unwrap();
        let items = js["items"].as_array().unwrap();
        assert_eq!(list.items.len(), items.len());
        for (m, obj) in list.items.iter().zip(items) {
            let om = m.metadata.as_ref().unwrap();
            assert_eq!(om.name.as_deref(), obj["metadata"]["name"].as_str());
            assert_eq!(
                om.resource_version.as_deref(),
                obj["metadata"]["resourceVersion"].as_str()
            );
            // A value string in Go: written even when empty.
            assert_eq!(
                om.uid.as_deref().unwrap_or(""),
                obj["metadata"]["uid"].as_str().unwrap_or("")
            );
            let labels: std::collections::BTreeMap<String, String> =
                serde_json::from_value(obj["metadata"]["labels"].clone()).unwrap_or_default();
            assert_eq!(
                om.labels
                    .clone()
                    .into_iter()
                    .collect::<std::collections::BTreeMap<_, _>>(),
                labels
            );
        }
        assert_eq!(
            list.metadata.unwrap().resource_version.as_deref(),
            js["metadata"]["resourceVersion"].as_str()
        );
    }
    // A get.
    let pb = get(
        &env,
        "/api/v1/namespaces/default/pods/a?resourceVersion=0",
        METADATA,
    )
    .await;
    let u = proto::decode_unknown(&pb.body).unwrap();
    assert_eq!(
        (u.api_version, u.kind),
        ("meta.k8s.io/v1", "PartialObjectMetadata")
    );
    let m = meta::PartialObjectMetadata::decode(u.raw).unwrap();
    assert_eq!(m.metadata.unwrap().annotations["note"], "a<b");

    // The metadata informer's watch.
    let path = format!("/api/v1/namespaces/default/pods?watch=true&resourceVersion={start}");
    let mut w = open_with(&gw, &path, &[("accept", METADATA)]).await;
    w.assert_from_cache();
    put_object(sim, pods, "default", rich_pod("b", "n2"));
    let (ty, env_bytes) = w.next_proto("the ADDED event").await;
    assert_eq!(ty, "ADDED");
    let u = proto::decode_unknown(&env_bytes).unwrap();
    assert_eq!(u.kind, "PartialObjectMetadata");
    let m = meta::PartialObjectMetadata::decode(u.raw).unwrap();
    assert_eq!(m.metadata.unwrap().name.as_deref(), Some("b"));
}

/// An object with a field watchgate's protobuf schema does not know (a newer apiserver)
/// is never encoded with that field dropped: the type's protobuf requests go upstream from
/// then on, and its JSON answers still come from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_newer_than_the_schema_sends_protobuf_requests_upstream() {
    let env = Env::gateway().await;
    let gw = env.url().to_string();
    let sim = env.sim.handle();
    let pods = resource("", "v1", "pods");
    put_object(sim, pods, "default", rich_pod("a", "n1"));
    let mut future = rich_pod("z", "n1");
    future["spec"]["fieldFromTheFuture"] = json!(true);
    let rv = put_object(sim, pods, "default", future);
    wait_until_cached(&gw, "/api/v1/pods?resourceVersion=0", rv_at_least(rv)).await;

    let path = "/api/v1/namespaces/default/pods?resourceVersion=0";
    let pb = env
        .http
        .request(
            http::Method::GET,
            path,
            &[("accept", CLIENT_GO)],
            Vec::new(),
        )
        .await;
    assert_eq!(
        pb.source(),
        Some("upstream"),
        "forwarded, not served without the field"
    );
    // Even a get of an object that would encode: the type is marked.
    let one = env
        .http
        .request(
            http::Method::GET,
            "/api/v1/namespaces/default/pods/a?resourceVersion=0",
            &[("accept", CLIENT_GO)],
            Vec::new(),
        )
        .await;
    assert_eq!(one.source(), Some("upstream"));
    assert_eq!(
        get(&env, path, "application/json").await.source(),
        Some("cache")
    );
    let admin = support::http::Http::new(&format!(
        "http://{}",
        env.gateway.as_ref().unwrap().handle().admin_addr()
    ));
    let metrics = admin.get("/metrics").await.text();
    assert_eq!(
        sample(
            &metrics,
            "watchgate_cache_protobuf_unavailable",
            &[("resource", "pods")]
        ),
        1.0
    );
}

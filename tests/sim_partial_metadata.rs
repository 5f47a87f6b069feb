//! `as=PartialObjectMetadata` / `as=PartialObjectMetadataList` in JSON from the simulator,
//! as kube-apiserver builds them (handlers/response.go, handlers/watch.go): exact bytes of
//! gets and lists (ObjectMeta in Go field order, sorted maps, list metadata, `items: null`
//! when empty), v1 and v1beta1, built-in types and the custom resource, the 406s for the
//! wrong shape, watches carrying PartialObjectMetadata (bookmarks too), and kube-rs's
//! metadata API as a real client.

mod support;

use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use serde_json::{json, Value};

use futures_util::StreamExt;
use support::http::{Http, Resp};
use support::sim::sim;
use support::watch::{delete_pod, open_with, put_object, put_pod};
use watchgate::sim::resources::find;

const POM_V1: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const POM_V1BETA1: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1";
const POML_V1: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const POML_V1BETA1: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1";

async fn get(h: &Http, path: &str, accept: &str) -> Resp {
    h.request(Method::GET, path, &[("accept", accept)], Bytes::new())
        .await
}

/// A pod whose metadata is stored in an order that is not Go's, with unsorted maps.
fn scrambled_pod(name: &str) -> Value {
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {
            "finalizers": ["example.com/keep"],
            "labels": {"tier": "web", "app": "shop"},
            "ownerReferences": [{"uid": "rs-uid", "name": "shop-rs", "kind": "ReplicaSet",
                                 "apiVersion": "apps/v1", "blockOwnerDeletion": true,
                                 "controller": true}],
            "annotations": {"z": "last", "a": "first"},
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "uid": "pod-uid",
            "generateName": "shop-",
            "namespace": "ns",
            "name": name
        },
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"}
    })
}

fn expected_meta(name: &str, rv: u64) -> String {
    format!(
        r#"{{"name":"{name}","generateName":"shop-","namespace":"ns","uid":"pod-uid","resourceVersion":"{rv}","creationTimestamp":"2024-05-01T10:00:00Z","labels":{{"app":"shop","tier":"web"}},"annotations":{{"a":"first","z":"last"}},"ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"shop-rs","uid":"rs-uid","controller":true,"blockOwnerDeletion":true}}],"finalizers":["example.com/keep"]}}"#
    )
}

#[tokio::test]
async fn get_and_list_bytes_for_a_builtin_type() {
    let h = sim().await;
    let pods = find("", "v1", "pods").unwrap();
    let rv1 = put_object(&h, pods, "ns", scrambled_pod("a"));
    let rv2 = put_object(&h, pods, "ns", scrambled_pod("b"));
    let http = Http::new(&h.url());

    for (accept, version) in [(POM_V1, "v1"), (POM_V1BETA1, "v1beta1")] {
        let r = get(&http, "/api/v1/namespaces/ns/pods/a", accept).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.headers["content-type"], "application/json");
        assert_eq!(
            r.text(),
            format!(
                "{{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/{version}\",\"metadata\":{}}}\n",
                expected_meta("a", rv1)
            )
        );
    }
    // A list (the items carry their TypeMeta); a page with continue and
    // remainingItemCount.
    for (accept, version) in [(POML_V1, "v1"), (POML_V1BETA1, "v1beta1")] {
        let r = get(&http, "/api/v1/namespaces/ns/pods", accept).await;
        assert_eq!(r.status, StatusCode::OK);
        let item = |name, rv| {
            format!(
                "{{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/{version}\",\"metadata\":{}}}",
                expected_meta(name, rv)
            )
        };
        assert_eq!(
            r.text(),
            format!(
                "{{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/{version}\",\"metadata\":{{\"resourceVersion\":\"{rv2}\"}},\"items\":[{},{}]}}\n",
                item("a", rv1),
                item("b", rv2)
            )
        );
    }
    let page = get(&http, "/api/v1/namespaces/ns/pods?limit=1", POML_V1)
        .await
        .json();
    let plain = get(
        &http,
        "/api/v1/namespaces/ns/pods?limit=1",
        "application/json",
    )
    .await
    .json();
    assert_eq!(page["metadata"], plain["metadata"]);
    assert_eq!(page["metadata"]["remainingItemCount"], 1);
    assert!(page["metadata"]["continue"].is_string());
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    // An empty list: `"items":null` (a nil Go slice; the field is not omitempty).
    let r = get(&http, "/api/v1/namespaces/empty/pods", POML_V1).await;
    assert_eq!(
        r.text(),
        format!(
            "{{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{{\"resourceVersion\":\"{rv2}\"}},\"items\":null}}\n"
        )
    );
    h.shutdown().await;
}

#[tokio::test]
async fn custom_resources_get_the_same_shape() {
    let h = sim().await;
    let widgets = find("example.com", "v1", "widgets").unwrap();
    let rv = put_object(
        &h,
        widgets,
        "ns",
        json!({"spec": {"color": "red"}, "metadata": {"labels": {"b": "2", "a": "1"},
               "generation": 3, "namespace": "ns", "name": "w",
               "creationTimestamp": "2024-05-01T10:00:00Z", "uid": "w-uid"},
               "apiVersion": "example.com/v1", "kind": "Widget"}),
    );
    let http = Http::new(&h.url());
    let meta = format!(
        r#"{{"name":"w","namespace":"ns","uid":"w-uid","resourceVersion":"{rv}","generation":3,"creationTimestamp":"2024-05-01T10:00:00Z","labels":{{"a":"1","b":"2"}}}}"#
    );
    let r = get(
        &http,
        "/apis/example.com/v1/namespaces/ns/widgets/w",
        POM_V1,
    )
    .await;
    assert_eq!(
        r.text(),
        format!("{{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{meta}}}\n")
    );
    let r = get(&http, "/apis/example.com/v1/widgets", POML_V1).await;
    assert_eq!(
        r.text(),
        format!("{{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{{\"resourceVersion\":\"{rv}\"}},\"items\":[{{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{meta}}}]}}\n")
    );
    h.shutdown().await;
}

#[tokio::test]
async fn the_wrong_shape_is_406_naming_the_registry_type() {
    let h = sim().await;
    put_pod(&h, "ns", "p", json!({}), "n", "Running");
    let widgets = find("example.com", "v1", "widgets").unwrap();
    put_object(
        &h,
        widgets,
        "ns",
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "w", "namespace": "ns"}}),
    );
    let http = Http::new(&h.url());
    let cases = [
        ("/api/v1/namespaces/ns/pods", POM_V1, "you requested PartialObjectMetadata, but the requested object is a list (*core.PodList)"),
        ("/api/v1/namespaces/ns/pods/p", POML_V1, "you requested PartialObjectMetadataList, but the requested object is not a list (*core.Pod)"),
        ("/api/v1/nodes", POM_V1BETA1, "you requested PartialObjectMetadata, but the requested object is a list (*core.NodeList)"),
        ("/apis/example.com/v1/namespaces/ns/widgets", POM_V1, "you requested PartialObjectMetadata, but the requested object is a list (*unstructured.UnstructuredList)"),
        ("/apis/example.com/v1/namespaces/ns/widgets/w", POML_V1, "you requested PartialObjectMetadataList, but the requested object is not a list (*unstructured.Unstructured)"),
        ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", POM_V1, "you requested PartialObjectMetadata, but the requested object is a list (*apiextensions.CustomResourceDefinitionList)"),
    ];
    for (path, accept, message) in cases {
        let r = get(&http, path, accept).await;
        assert_eq!(r.status, StatusCode::NOT_ACCEPTABLE, "{path}");
        // The error writer cannot negotiate a conversion-only Accept: WriteRawJSON.
        let want = format!(
            "{{\n  \"kind\": \"Status\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {{}},\n  \"status\": \"Failure\",\n  \"message\": \"{message}\",\n  \"reason\": \"NotAcceptable\",\n  \"code\": 406\n}}"
        );
        assert_eq!(r.text(), want, "{path}");
    }
    // A missing object is a 404 before any conversion.
    let r = get(&http, "/api/v1/namespaces/ns/pods/missing", POML_V1).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    h.shutdown().await;
}

#[tokio::test]
async fn watch_events_carry_partial_object_metadata() {
    let h = sim().await;
    let rv0 = put_pod(&h, "ns", "a", json!({"x": "1"}), "n", "Pending");
    let mut w = open_with(
        &h.url(),
        "/api/v1/namespaces/ns/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan",
        &[("accept", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json")],
    )
    .await;
    assert_eq!(w.status, StatusCode::OK);
    assert_eq!(w.headers["content-type"], "application/json");
    let added = w.next("initial ADDED").await;
    assert_eq!(added.ty(), "ADDED");
    assert_eq!(
        added.object()["kind"],
        "PartialObjectMetadata",
        "{:?}",
        added
    );
    assert!(added.object().get("spec").is_none());
    // The initial-events-end bookmark is a PartialObjectMetadata too: only
    // resourceVersion and the annotation (no creationTimestamp since 1.33).
    let bm = w.next("initial-events-end BOOKMARK").await;
    assert_eq!(
        String::from_utf8(bm.raw.to_vec()).unwrap(),
        format!("{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{{\"resourceVersion\":\"{rv0}\",\"annotations\":{{\"k8s.io/initial-events-end\":\"true\"}}}}}}}}")
    );
    let rv1 = put_pod(&h, "ns", "a", json!({"x": "2"}), "n", "Running");
    let m = w.next("MODIFIED").await;
    assert_eq!((m.ty(), m.rv()), ("MODIFIED", rv1));
    assert_eq!(m.object()["metadata"]["labels"], json!({"x": "2"}));
    assert_eq!(m.object()["apiVersion"], "meta.k8s.io/v1");
    let rv2 = delete_pod(&h, "ns", "a");
    let d = w.next("DELETED").await;
    assert_eq!(
        (d.ty(), d.rv(), d.object()["kind"].as_str()),
        ("DELETED", rv2, Some("PartialObjectMetadata"))
    );

    // An ERROR event carries its Status unchanged.
    h.store().compact_now();
    let mut w = open_with(
        &h.url(),
        &format!("/api/v1/namespaces/ns/pods?watch=1&resourceVersion={rv0}"),
        &[("accept", POM_V1)],
    )
    .await;
    let e = w.next("ERROR").await;
    assert_eq!(e.ty(), "ERROR");
    assert_eq!(e.object()["kind"], "Status");
    assert_eq!(e.object()["code"], 410);
    h.shutdown().await;
}

#[tokio::test]
async fn a_watch_asked_as_a_list_ends_at_its_first_event() {
    let h = sim().await;
    put_pod(&h, "ns", "a", json!({}), "n", "Running");
    let mut w = open_with(
        &h.url(),
        "/api/v1/namespaces/ns/pods?watch=1",
        &[("accept", POML_V1)],
    )
    .await;
    // 200 and the headers, then the embedded encoder fails on the pod (the meta.k8s.io
    // codec cannot encode it) and the server ends the stream without an event.
    assert_eq!(w.status, StatusCode::OK);
    assert!(w.next_within(Duration::from_secs(10)).await.is_none());
    h.shutdown().await;
}

#[tokio::test]
async fn kube_rs_metadata_api_reads_the_simulator() {
    let h = sim().await;
    let pods = find("", "v1", "pods").unwrap();
    put_object(&h, pods, "ns", scrambled_pod("a"));
    let client = Client::try_from(kube::Config::new(h.url().parse().unwrap()))
        .expect("kube client for the simulator");
    let api: Api<Pod> = Api::namespaced(client, "ns");
    let list = api
        .list_metadata(&ListParams::default())
        .await
        .expect("list_metadata");
    assert_eq!(list.items.len(), 1);
    let meta = &list.items[0].metadata;
    assert_eq!(meta.name.as_deref(), Some("a"));
    assert_eq!(
        meta.finalizers.as_deref(),
        Some(&["example.com/keep".to_string()][..])
    );
    let one = api.get_metadata("a").await.expect("get_metadata");
    assert_eq!(one.metadata.uid.as_deref(), Some("pod-uid"));
    let rv = list.metadata.resource_version.clone().unwrap();
    let mut stream = api
        .watch_metadata(&WatchParams::default().timeout(10), &rv)
        .await
        .expect("watch_metadata")
        .boxed();
    put_pod(&h, "ns", "b", json!({"k": "v"}), "n", "Running");
    let ev = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .expect("an event within 20 s")
        .expect("the stream goes on")
        .expect("a decodable event");
    match ev {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("b")),
        other => panic!("expected ADDED b, got {other:?}"),
    }
    h.shutdown().await;
}

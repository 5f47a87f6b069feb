//! Metadata-only answers (`as=PartialObjectMetadata` / `PartialObjectMetadataList`, the
//! media types of client-go's metadata client) served from the cache in JSON: shapes as
//! k8s.io/apiserver `handlers/response.go` builds them (docs/cache.md, "Representations").

mod support;

use serde_json::{json, Value};
use support::servers::Env;
use support::watch::{put_object, put_pod, resource, rv_at_least, wait_until_cached};

const META_LIST_V1: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const META_V1: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const META_LIST_V1BETA1: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1";

async fn get_as(env: &Env, path: &str, accept: &str) -> support::http::Resp {
    env.http
        .request(http::Method::GET, path, &[("accept", accept)], Vec::new())
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_lists_and_gets_of_built_in_types_come_from_the_cache() {
    let env = Env::gateway().await;
    let gw = env.url().to_string();
    let sim = env.sim.handle();
    put_pod(sim, "default", "a", json!({"app": "x"}), "n1", "Running");
    let rv = put_pod(sim, "default", "b", json!({"app": "y"}), "n2", "Pending");
    wait_until_cached(&gw, "/api/v1/pods?resourceVersion=0", rv_at_least(rv)).await;

    let full = env
        .http
        .get_json("/api/v1/namespaces/default/pods?resourceVersion=0");
    let full = full.await;
    let resp = get_as(
        &env,
        "/api/v1/namespaces/default/pods?resourceVersion=0",
        META_LIST_V1,
    )
    .await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.source(), Some("cache"));
    assert_eq!(resp.headers["content-type"], "application/json");
    let list = resp.json();
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(list["metadata"], full["metadata"]);
    let items = list["items"].as_array().unwrap();
    let full_items = full["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    for (item, obj) in items.iter().zip(full_items) {
        // Exactly the object's metadata, under PartialObjectMetadata's TypeMeta; nothing
        // else of the object.
        assert_eq!(
            item,
            &json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
        );
    }
    // Byte for byte: the metadata is the cached bytes (Go wrote both the same way).
    let text = resp.text();
    assert!(text.contains(r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","#), "{text}");

    let beta = get_as(&env, "/api/v1/pods?resourceVersion=0", META_LIST_V1BETA1).await;
    assert_eq!(beta.source(), Some("cache"));
    let beta = beta.json();
    assert_eq!(beta["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(beta["items"][0]["apiVersion"], "meta.k8s.io/v1beta1");

    let one = get_as(
        &env,
        "/api/v1/namespaces/default/pods/b?resourceVersion=0",
        META_V1,
    )
    .await;
    assert_eq!(one.status, 200);
    assert_eq!(one.source(), Some("cache"));
    assert_eq!(
        one.json(),
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": full_items[1]["metadata"]})
    );

    // An empty PartialObjectMetadataList has `"items":null` (a nil slice in Go).
    let empty = get_as(
        &env,
        "/api/v1/namespaces/nothing-here/pods?resourceVersion=0",
        META_LIST_V1,
    )
    .await;
    assert_eq!(empty.source(), Some("cache"));
    assert!(
        empty.text().trim_end().ends_with(r#""items":null}"#),
        "{}",
        empty.text()
    );

    // What the apiserver refuses is the upstream's answer.
    let wrong = get_as(&env, "/api/v1/pods?resourceVersion=0", META_V1).await;
    assert_eq!(wrong.source(), Some("upstream"));
    let wrong = get_as(
        &env,
        "/api/v1/namespaces/default/pods/b?resourceVersion=0",
        META_LIST_V1,
    )
    .await;
    assert_eq!(wrong.source(), Some("upstream"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resource_metadata_takes_object_meta_go_order() {
    let env = Env::gateway().await;
    let gw = env.url().to_string();
    let widgets = resource("example.com", "v1", "widgets");
    let rv = put_object(
        env.sim.handle(),
        widgets,
        "default",
        json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w1", "namespace": "default", "labels": {"b": "2", "a": "1"},
                         "annotations": {"note": "x<y"}, "finalizers": ["f"]},
            "spec": {"size": 3}
        }),
    );
    let path = "/apis/example.com/v1/namespaces/default/widgets";
    wait_until_cached(&gw, &format!("{path}?resourceVersion=0"), rv_at_least(rv)).await;

    let resp = get_as(&env, &format!("{path}/w1?resourceVersion=0"), META_V1).await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.source(), Some("cache"));
    let v: Value = resp.json();
    let keys: Vec<&str> = v["metadata"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    // ObjectMeta's Go field order (meta.AsPartialObjectMetadata copies each field through
    // its getter), whatever order the stored object has.
    let go_order = [
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    ];
    let positions: Vec<usize> = keys
        .iter()
        .map(|k| {
            go_order
                .iter()
                .position(|g| g == k)
                .unwrap_or_else(|| panic!("{k} is not an ObjectMeta field"))
        })
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
    assert_eq!(v["metadata"]["labels"], json!({"a": "1", "b": "2"}));
    assert_eq!(v["metadata"]["finalizers"], json!(["f"]));

    // client-go's typed Accept on a custom resource: no protobuf, so JSON from the cache.
    let typed = get_as(
        &env,
        &format!("{path}?resourceVersion=0"),
        "application/vnd.kubernetes.protobuf,application/json",
    )
    .await;
    assert_eq!(typed.status, 200);
    assert_eq!(typed.source(), Some("cache"));
    assert_eq!(typed.json()["kind"], "WidgetList");
}

/// client-go's metadata informer watches with `as=PartialObjectMetadata` (its JSON
/// fallback here; protobuf is the first choice). The watch from a resourceVersion, and a
/// watch-list from one, give the same events through the gateway's cache as from the
/// simulator, byte for byte, bookmarks included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_watches_come_from_the_cache_and_match_the_simulator() {
    use support::watch::{delete_pod, open_with};
    let env = Env::gateway().await;
    let gw = env.url().to_string();
    let sim = env.sim.handle();
    let start = put_pod(sim, "default", "a", json!({"app": "x"}), "n1", "Running");
    wait_until_cached(&gw, "/api/v1/pods?resourceVersion=0", rv_at_least(start)).await;

    let accept = [("accept", META_V1)];
    let paths = [
        format!("/api/v1/namespaces/default/pods?watch=true&resourceVersion={start}"),
        format!("/api/v1/namespaces/default/pods?watch=true&resourceVersion={start}&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"),
    ];
    let mut direct = Vec::new();
    let mut through = Vec::new();
    for p in &paths {
        direct.push(open_with(env.direct_http.base(), p, &accept).await);
        let w = open_with(&gw, p, &accept).await;
        w.assert_from_cache();
        assert_eq!(w.headers["content-type"], "application/json");
        through.push(w);
    }
    put_pod(sim, "default", "b", json!({"app": "y"}), "n1", "Pending");
    put_pod(sim, "default", "a", json!({"app": "x2"}), "n1", "Running");
    delete_pod(sim, "default", "b");
    let want = [3, 5]; // the watch-list also gets "a" and its initial-events-end bookmark
    for ((d, t), n) in direct.iter_mut().zip(through.iter_mut()).zip(want) {
        let de = d.take(n, "the simulator's events").await;
        let te = t.take(n, "the gateway's events").await;
        for (x, y) in de.iter().zip(&te) {
            assert_eq!(x.raw, y.raw, "event bytes differ");
            if x.ty() != "BOOKMARK" {
                assert_eq!(y.object()["kind"], "PartialObjectMetadata");
                assert!(y.object().get("spec").is_none());
            }
        }
    }
}

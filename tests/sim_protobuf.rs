//! The simulator speaks protobuf as kube-apiserver does (issue 14 item 5): gets, lists and
//! watches of pods, configmaps, nodes, services and endpointslices, PartialObjectMetadata,
//! error Statuses, and protobuf request bodies (kubectl 1.37's typed generators send
//! them). Requests use client-go's exact Accept headers (no client-go here); answers are
//! decoded with `k8s-pb` and compared field by field with the JSON answer to the same
//! request (`support::protobuf`).
//!
//! The differential test at the end puts the gateway in front: the same protobuf request
//! to the simulator and through the gateway's cache gives the same bytes.

mod support;

use std::time::Duration;

use bytes::Bytes;
use http::Method;
use serde_json::{json, Value};

use k8s_pb::api::core::v1 as core;
use k8s_pb::api::discovery::v1 as discovery;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use prost::Message;
use support::http::{Http, Resp};
use support::protobuf::{
    envelope_json, normalised, same_object, ty, CLIENT_GO, METADATA, METADATA_LIST,
};
use support::servers::{cluster_config, Env};
use support::watch::{open_with, put_object, resource, rv_at_least, wait_until_cached};
use watchgate::proto;
use watchgate::sim::SimConfig;

const PB: &str = "application/vnd.kubernetes.protobuf";
const PB_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// The five types issue 14 names: (group, resource, apiVersion, kind).
const TYPES: [(&str, &str, &str, &str); 5] = [
    ("", "pods", "v1", "Pod"),
    ("", "configmaps", "v1", "ConfigMap"),
    ("", "nodes", "v1", "Node"),
    ("", "services", "v1", "Service"),
    (
        "discovery.k8s.io",
        "endpointslices",
        "discovery.k8s.io/v1",
        "EndpointSlice",
    ),
];

fn collection(group: &str, resource: &str) -> String {
    if group.is_empty() {
        format!("/api/v1/{resource}")
    } else {
        format!("/apis/{group}/v1/{resource}")
    }
}

/// The path of one object of a list's items.
fn object_path(group: &str, resource: &str, obj: &Value) -> String {
    let name = obj["metadata"]["name"].as_str().unwrap();
    let base = collection(group, resource);
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) => {
            let (root, res) = base.rsplit_once('/').unwrap();
            format!("{root}/namespaces/{ns}/{res}/{name}")
        }
        None => format!("{base}/{name}"),
    }
}

/// `envelope` holds the object (or list) `json` is, by k8s-pb's message for `kind`.
fn same(envelope: &[u8], av: &str, kind: &str, json: &Value) {
    match kind {
        "Pod" => drop(same_object::<core::Pod>(envelope, av, kind, json)),
        "PodList" => drop(same_object::<core::PodList>(envelope, av, kind, json)),
        "ConfigMap" => drop(same_object::<core::ConfigMap>(envelope, av, kind, json)),
        "ConfigMapList" => drop(same_object::<core::ConfigMapList>(envelope, av, kind, json)),
        "Node" => drop(same_object::<core::Node>(envelope, av, kind, json)),
        "NodeList" => drop(same_object::<core::NodeList>(envelope, av, kind, json)),
        "Service" => drop(same_object::<core::Service>(envelope, av, kind, json)),
        "ServiceList" => drop(same_object::<core::ServiceList>(envelope, av, kind, json)),
        "EndpointSlice" => drop(same_object::<discovery::EndpointSlice>(
            envelope, av, kind, json,
        )),
        "EndpointSliceList" => drop(same_object::<discovery::EndpointSliceList>(
            envelope, av, kind, json,
        )),
        other => panic!("no k8s-pb type for {other}"),
    }
}

async fn get(http: &Http, path: &str, accept: &str) -> Resp {
    http.request(Method::GET, path, &[("accept", accept)], Bytes::new())
        .await
}

/// A protobuf answer: 200 and the protobuf Content-Type.
async fn get_pb(http: &Http, path: &str, accept: &str) -> Resp {
    let r = get(http, path, accept).await;
    assert_eq!(r.status, 200, "{path}: {:?}", r.body);
    assert_eq!(r.headers["content-type"], PB, "{path}");
    r
}

async fn get_json(http: &Http, path: &str) -> Value {
    let r = get(http, path, "application/json").await;
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    r.json()
}

fn seeded(n: usize) -> SimConfig {
    SimConfig {
        seed_per_type: n,
        pod_size: 1024,
        ..cluster_config()
    }
}

/// The first item of a JSON list.
fn first(list: &Value) -> Value {
    list["items"][0].clone()
}

/// Writes `obj` back with one more label (a MODIFIED event); returns the RV.
fn touch(env: &Env, group: &str, resource_name: &str, obj: &Value, label: &str) -> u64 {
    let mut obj = obj.clone();
    obj["metadata"]["labels"]["touched"] = json!(label);
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    put_object(
        env.sim.handle(),
        resource(group, "v1", resource_name),
        &ns,
        obj,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gets_and_lists_in_protobuf_are_the_json_answers() {
    let env = Env::sim_with(seeded(3)).await;
    let http = &env.http;
    for (group, res, av, kind) in TYPES {
        let list_kind = format!("{kind}List");
        let coll = collection(group, res);
        let js = get_json(http, &format!("{coll}?resourceVersion=0")).await;
        let items = js["items"].as_array().unwrap();
        assert!(items.len() >= 3, "{res}: seeded");
        // Stored as the apiserver stores: the Go struct's own JSON.
        for item in items {
            let with_type = {
                let mut o = item.clone();
                o["kind"] = json!(kind);
                o["apiVersion"] = json!(av);
                o
            };
            assert_eq!(with_type, normalised(ty(av, kind), av, kind, &with_type));
        }
        let rv = js["metadata"]["resourceVersion"].as_str().unwrap();
        // Lists: RV=0, RV=N, a first page and the page after it (continue token).
        let page = format!("{coll}?limit=2&resourceVersion={rv}&resourceVersionMatch=NotOlderThan");
        let mut paths = vec![
            format!("{coll}?resourceVersion=0"),
            format!("{coll}?resourceVersion={rv}"),
            format!("{coll}?limit=2"),
            page,
        ];
        let page_js = get_json(http, &format!("{coll}?limit=2")).await;
        let token = page_js["metadata"]["continue"]
            .as_str()
            .expect("a continue token");
        paths.push(format!("{coll}?limit=2&continue={token}"));
        for path in &paths {
            let pb = get_pb(http, path, CLIENT_GO).await;
            let js = get_json(http, path).await;
            same(&pb.body, av, &list_kind, &js);
            let got = envelope_json(&pb.body);
            assert_eq!(got["metadata"], js["metadata"], "{path}: ListMeta");
            assert_eq!(got["items"], js["items"], "{path}: items");
        }
        // Gets, by client-go's Accept and by protobuf alone.
        let path = object_path(group, res, &first(&js));
        for accept in [CLIENT_GO, PB] {
            let pb = get_pb(http, &path, accept).await;
            same(&pb.body, av, kind, &get_json(http, &path).await);
        }
    }
    // Typed fields read straight from k8s-pb's structs.
    let path = object_path(
        "discovery.k8s.io",
        "endpointslices",
        &first(&get_json(http, "/apis/discovery.k8s.io/v1/endpointslices").await),
    );
    let pb = get_pb(http, &path, CLIENT_GO).await;
    let slice =
        discovery::EndpointSlice::decode(proto::decode_unknown(&pb.body).unwrap().raw).unwrap();
    assert_eq!(slice.address_type.as_deref(), Some("IPv4"));
    assert_eq!(slice.endpoints.len(), 3);
    let ep = &slice.endpoints[0];
    assert_eq!(ep.conditions.as_ref().unwrap().ready, Some(true));
    assert_eq!(ep.target_ref.as_ref().unwrap().kind.as_deref(), Some("Pod"));
    assert_eq!(slice.ports[0].port, Some(8080));
    let m = slice.metadata.unwrap();
    assert_eq!(
        m.labels["endpointslice.kubernetes.io/managed-by"],
        "endpointslice-controller.k8s.io"
    );
    assert_eq!(m.owner_references[0].kind.as_deref(), Some("Service"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_in_protobuf_are_the_json_streams() {
    let env = Env::sim_with(seeded(2)).await;
    let (base, http) = (env.url().to_string(), &env.http);
    for (group, res, av, kind) in TYPES {
        let coll = collection(group, res);
        let js = get_json(http, &coll).await;
        let n = js["items"].as_array().unwrap().len();
        let rv = js["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        // RV=0 (the current state, then changes), RV=N (changes after N), and a
        // watch-list from N (initial events, the initial-events-end bookmark, changes).
        let queries = [
            ("resourceVersion=0".to_string(), n),
            (format!("resourceVersion={rv}"), 0),
            (
                format!("resourceVersion={rv}&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"),
                n + 1,
            ),
        ];
        let mut watches = Vec::new();
        for (q, before) in &queries {
            let path = format!("{coll}?watch=true&{q}");
            let pb = open_with(&base, &path, &[("accept", CLIENT_GO)]).await;
            assert_eq!(pb.headers["content-type"], PB_WATCH, "{path}");
            let js = open_with(&base, &path, &[("accept", "application/json")]).await;
            assert_eq!(js.headers["content-type"], "application/json", "{path}");
            watches.push((path, pb, js, *before));
        }
        // What each stream sends before the write (so that the write comes after the
        // initial state whenever the stream started), then the write's event.
        for (path, pb, js, before) in &mut watches {
            compare_events(path, pb, js, *before, av, kind, &rv).await;
        }
        touch(&env, group, res, &first(&js), "1");
        for (path, pb, js, _) in &mut watches {
            compare_events(path, pb, js, 1, av, kind, &rv).await;
        }
    }
}

/// The next `n` events of a protobuf and a JSON watch of the same request are the same
/// events (bookmarks: the encoded zero object at `rv`).
async fn compare_events(
    path: &str,
    pb: &mut support::watch::Watch,
    js: &mut support::watch::Watch,
    n: usize,
    av: &str,
    kind: &str,
    rv: &str,
) {
    for _ in 0..n {
        let (ty_, envelope) = pb.next_proto(path).await;
        let ev = js.next(path).await;
        assert_eq!(ty_, ev.ty(), "{path}");
        if ty_ == "BOOKMARK" {
            // The type's zero object with only the RV and the annotation: every Go
            // value field written, as the apiserver's `newFunc()` object encodes.
            assert_eq!(
                envelope,
                proto::encode_object(av, kind, &serde_json::to_vec(ev.object()).unwrap()).unwrap(),
                "{path}: the bookmark is the encoded zero object"
            );
            let obj = envelope_json(&envelope);
            assert_eq!(
                obj["metadata"],
                json!({"resourceVersion": rv, "annotations": {"k8s.io/initial-events-end": "true"}}),
                "{path}"
            );
            continue;
        }
        same(&envelope, av, kind, ev.object());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_in_protobuf() {
    let env = Env::sim_with(seeded(2)).await;
    let (base, http) = (env.url().to_string(), &env.http);
    let paths = [
        "/api/v1/pods".to_string(),
        "/apis/discovery.k8s.io/v1/endpointslices".to_string(),
        // A custom resource has no protobuf, its metadata has.
        "/apis/example.com/v1/widgets".to_string(),
    ];
    for path in &paths {
        // The metadata informer's list.
        let pb = get_pb(http, path, METADATA_LIST).await;
        let as_json = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        let js = get(http, path, as_json).await.json();
        let u = proto::decode_unknown(&pb.body).unwrap();
        assert_eq!(
            (u.api_version, u.kind),
            ("meta.k8s.io/v1", "PartialObjectMetadataList")
        );
        let list = meta::PartialObjectMetadataList::decode(u.raw).unwrap();
        let items = js["items"].as_array().unwrap();
        assert!(!items.is_empty(), "{path}");
        assert_eq!(list.items.len(), items.len(), "{path}");
        let got = envelope_json(&pb.body);
        for (pb_item, js_item) in got["items"].as_array().unwrap().iter().zip(items) {
            // Protobuf items carry no TypeMeta; the metadata is the same.
            assert_eq!(pb_item, &json!({"metadata": js_item["metadata"]}), "{path}");
        }
        assert_eq!(got["metadata"], js["metadata"], "{path}");

        // A get, in v1 and v1beta1 (the same Go type under another apiVersion).
        let one = object_path(
            if path.contains("discovery") {
                "discovery.k8s.io"
            } else if path.contains("example") {
                "example.com"
            } else {
                ""
            },
            path.rsplit('/').next().unwrap(),
            &items[0],
        );
        for (v, accept) in [
            ("v1", METADATA.to_string()),
            (
                "v1beta1",
                format!("{PB};as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1"),
            ),
        ] {
            let pb = get_pb(http, &one, &accept).await;
            let u = proto::decode_unknown(&pb.body).unwrap();
            assert_eq!(
                (u.api_version, u.kind),
                (format!("meta.k8s.io/{v}").as_str(), "PartialObjectMetadata")
            );
            let m = meta::PartialObjectMetadata::decode(u.raw).unwrap();
            assert_eq!(
                m.metadata.unwrap().name.as_deref(),
                items[0]["metadata"]["name"].as_str()
            );
            let pom = ty("meta.k8s.io/v1", "PartialObjectMetadata");
            let got: Value =
                serde_json::from_slice(&proto::decode(pom, u.raw, None).unwrap()).unwrap();
            assert_eq!(got["metadata"], items[0]["metadata"], "{one} ({v})");
        }
    }
    // The metadata informer's watch.
    let pods = get_json(http, "/api/v1/pods").await;
    let rv = pods["metadata"]["resourceVersion"].as_str().unwrap();
    let path = format!("/api/v1/pods?watch=true&resourceVersion={rv}");
    let mut w = open_with(&base, &path, &[("accept", METADATA)]).await;
    assert_eq!(w.headers["content-type"], PB_WATCH);
    let pod = first(&pods);
    touch(&env, "", "pods", &pod, "1");
    let (ty_, envelope) = w.next_proto("the MODIFIED event").await;
    assert_eq!(ty_, "MODIFIED");
    let u = proto::decode_unknown(&envelope).unwrap();
    assert_eq!(
        (u.api_version, u.kind),
        ("meta.k8s.io/v1", "PartialObjectMetadata")
    );
    let m = meta::PartialObjectMetadata::decode(u.raw)
        .unwrap()
        .metadata
        .unwrap();
    assert_eq!(m.name.as_deref(), pod["metadata"]["name"].as_str());
    assert_eq!(m.labels["touched"], "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_statuses_in_protobuf() {
    let mut cfg = seeded(1);
    cfg.store.history_events = 2;
    let env = Env::sim_with(cfg).await;
    let (base, http) = (env.url().to_string(), &env.http);
    // A get of nothing: the 404 Status in protobuf, as client-go decodes it.
    let r = get(http, "/api/v1/namespaces/default/pods/nope", CLIENT_GO).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.headers["content-type"], PB);
    let u = proto::decode_unknown(&r.body).unwrap();
    assert_eq!((u.api_version, u.kind), ("v1", "Status"));
    let s = meta::Status::decode(u.raw).unwrap();
    assert_eq!(s.status.as_deref(), Some("Failure"));
    assert_eq!(s.reason.as_deref(), Some("NotFound"));
    assert_eq!(s.code, Some(404));
    assert_eq!(s.message.as_deref(), Some("pods \"nope\" not found"));
    let d = s.details.unwrap();
    assert_eq!(
        (d.name.as_deref(), d.kind.as_deref()),
        (Some("nope"), Some("pods"))
    );
    // The same request in JSON gives the same Status.
    let js = get(
        http,
        "/api/v1/namespaces/default/pods/nope",
        "application/json",
    )
    .await;
    assert_eq!(envelope_json(&r.body), js.json());

    // A bad selector: 400 in protobuf.
    let r = get(http, "/api/v1/pods?labelSelector=a%20in", CLIENT_GO).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.headers["content-type"], PB);
    let js = get(
        http,
        "/api/v1/pods?labelSelector=a%20in",
        "application/json",
    )
    .await;
    assert_eq!(envelope_json(&r.body), js.json());

    // A watch from a compacted RV: a 200 stream with one ERROR event carrying the 410.
    let cms = get_json(http, "/api/v1/configmaps").await;
    let cm = first(&cms);
    for i in 0..4 {
        touch(&env, "", "configmaps", &cm, &i.to_string());
    }
    let path = "/api/v1/configmaps?watch=true&resourceVersion=2";
    let mut pb = open_with(&base, path, &[("accept", CLIENT_GO)]).await;
    assert_eq!(pb.status, 200);
    assert_eq!(pb.headers["content-type"], PB_WATCH);
    let mut js = open_with(&base, path, &[("accept", "application/json")]).await;
    let (ty_, envelope) = pb.next_proto("the ERROR event").await;
    let ev = js.next("the ERROR event").await;
    assert_eq!((ty_.as_str(), ev.ty()), ("ERROR", "ERROR"));
    let u = proto::decode_unknown(&envelope).unwrap();
    assert_eq!((u.api_version, u.kind), ("v1", "Status"));
    let s = meta::Status::decode(u.raw).unwrap();
    assert_eq!((s.code, s.reason.as_deref()), (Some(410), Some("Expired")));
    assert_eq!(envelope_json(&envelope), *ev.object());
    pb.expect_end(Duration::from_secs(5)).await;
}

/// A protobuf envelope of `obj` as client-go's protobuf serializer writes a request body.
fn pb_body(obj: &Value) -> Vec<u8> {
    let av = obj["apiVersion"].as_str().unwrap();
    let kind = obj["kind"].as_str().unwrap();
    proto::encode_object(av, kind, &serde_json::to_vec(obj).unwrap()).unwrap()
}

async fn send_pb(http: &Http, method: Method, path: &str, body: Vec<u8>) -> Resp {
    http.request(
        method,
        path,
        &[("content-type", PB), ("accept", CLIENT_GO)],
        Bytes::from(body),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_request_bodies() {
    let env = Env::sim_with(cluster_config()).await;
    let http = &env.http;
    // kubectl 1.37's typed generators send protobuf (its -v=8 log shows the request's
    // Content-Type); the objects arrive whole.
    for args in [
        vec!["create", "configmap", "pb-cm", "--from-literal=k=v"],
        vec![
            "create",
            "secret",
            "generic",
            "pb-secret",
            "--from-literal=k=v",
        ],
        vec!["create", "namespace", "pb-ns"],
    ] {
        let mut with_log = args.clone();
        with_log.push("-v=8");
        let out = env.kubectl.run(&with_log).await;
        assert!(out.success(), "{args:?}: {}", out.stderr);
        assert!(
            out.stderr
                .contains("Content-Type: application/vnd.kubernetes.protobuf"),
            "{args:?} sent protobuf: {}",
            out.stderr
        );
    }
    let cm = get_json(http, "/api/v1/namespaces/default/configmaps/pb-cm").await;
    assert_eq!(cm["data"], json!({"k": "v"}));
    let secret = get_json(http, "/api/v1/namespaces/default/secrets/pb-secret").await;
    assert_eq!(secret["data"], json!({"k": "dg=="}));
    assert_eq!(secret["type"], "Opaque");
    let ns = get_json(http, "/api/v1/namespaces/pb-ns").await;
    assert_eq!(ns["status"]["phase"], "Active");

    // An endpointslice created and updated in protobuf, answered in protobuf.
    let slice = json!({"kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
        "metadata": {"name": "s", "namespace": "default", "labels": {"kubernetes.io/service-name": "svc"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true}}],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]});
    let coll = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices";
    let r = send_pb(http, Method::POST, coll, pb_body(&slice)).await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    assert_eq!(r.headers["content-type"], PB);
    let created = envelope_json(&r.body);
    assert_eq!(created["endpoints"], slice["endpoints"]);
    assert_eq!(created["metadata"]["generation"], 1);
    let mut update = created.clone();
    update["endpoints"][0]["addresses"] = json!(["10.0.0.2"]);
    let r = send_pb(http, Method::PUT, &format!("{coll}/s"), pb_body(&update)).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let updated = envelope_json(&r.body);
    assert_eq!(updated["endpoints"][0]["addresses"], json!(["10.0.0.2"]));
    assert_eq!(updated["metadata"]["generation"], 2);
    assert_eq!(
        get_json(http, &format!("{coll}/s")).await["endpoints"],
        updated["endpoints"]
    );

    // Malformed bodies: the protobuf serializer's errors through `transformDecodeError`,
    // as a 400 Status in the negotiated encoding (protobuf).
    let cms = "/api/v1/namespaces/default/configmaps";
    let whole = pb_body(&json!({"kind": "ConfigMap", "apiVersion": "v1",
        "metadata": {"name": "bad"}, "data": {"k": "v"}}));
    let cut = {
        let u = proto::decode_unknown(&whole).unwrap();
        proto::encode_unknown("v1", "ConfigMap", &u.raw[..u.raw.len() - 1])
    };
    for (body, message) in [
        (
            cut,
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: unexpected EOF"
                .to_string(),
        ),
        (
            b"{\"kind\":\"ConfigMap\"}".to_vec(),
            "the object provided is unrecognized (must be of type ConfigMap): provided data does not appear to be a protobuf message, expected prefix [107 56 115 0] ({\"kind\":\"ConfigMap\"})".to_string(),
        ),
        (
            b"k8s\0".to_vec(),
            "the object provided is unrecognized (must be of type ConfigMap): empty body (6b387300)".to_string(),
        ),
    ] {
        let r = send_pb(http, Method::POST, cms, body).await;
        assert_eq!(r.status, 400);
        assert_eq!(r.headers["content-type"], PB);
        let s = envelope_json(&r.body);
        assert_eq!(s["reason"], "BadRequest");
        assert_eq!(s["message"], message);
    }
    assert_eq!(
        get(http, &format!("{cms}/bad"), "application/json")
            .await
            .status,
        404
    );
}

/// The same protobuf requests to the simulator and through the gateway (its cache) give
/// the same bytes: gets, lists, metadata-only answers and watch frames of the five types.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_protobuf_is_the_simulators_byte_for_byte() {
    let env = Env::gateway_with(seeded(2)).await;
    let gw = env.url().to_string();
    let sim = env.sim.url().to_string();
    for (group, res, _, _) in TYPES {
        let coll = collection(group, res);
        // The type's last write is the newest RV of all (no other type writes after it),
        // so the simulator's and the cache's list RVs agree.
        let obj = first(&get_json(&env.direct_http, &coll).await);
        let rv = touch(&env, group, res, &obj, "1");
        wait_until_cached(&gw, &format!("{coll}?resourceVersion=0"), rv_at_least(rv)).await;
        // Watches opened on both before the next write.
        let watch_paths = [
            format!("{coll}?watch=true&resourceVersion={rv}"),
            format!("{coll}?watch=true&resourceVersion={rv}&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"),
        ];
        let mut watches = Vec::new();
        for path in &watch_paths {
            for accept in [CLIENT_GO, METADATA] {
                let g = open_with(&gw, path, &[("accept", accept)]).await;
                g.assert_from_cache();
                let s = open_with(&sim, path, &[("accept", accept)]).await;
                assert_eq!(
                    g.headers["content-type"], s.headers["content-type"],
                    "{path}"
                );
                watches.push((format!("{path} ({accept})"), s, g));
            }
        }
        let one = object_path(group, res, &obj);
        for (path, accept) in [
            (format!("{coll}?resourceVersion=0"), CLIENT_GO),
            (format!("{coll}?resourceVersion={rv}"), CLIENT_GO),
            (format!("{coll}?resourceVersion=0"), METADATA_LIST),
            (format!("{one}?resourceVersion=0"), CLIENT_GO),
            (format!("{one}?resourceVersion=0"), METADATA),
        ] {
            let s = get_pb(&env.direct_http, &path, accept).await;
            let g = get_pb(&env.http, &path, accept).await;
            assert_eq!(g.source(), Some("cache"), "{path}");
            assert_eq!(
                s.body,
                g.body,
                "{path} ({accept}): the simulator's {} vs the gateway's {}",
                envelope_json(&s.body),
                envelope_json(&g.body)
            );
        }
        let n = get_json(&env.direct_http, &coll).await["items"]
            .as_array()
            .unwrap()
            .len();
        // Watch-lists: the items and the bookmark; then every stream: the change.
        for (what, s, g) in &mut watches {
            let initial = if what.contains("sendInitialEvents") {
                n + 1
            } else {
                0
            };
            same_frames(what, s, g, initial).await;
        }
        touch(&env, group, res, &obj, "2");
        for (what, s, g) in &mut watches {
            same_frames(what, s, g, 1).await;
        }
    }
}

/// The next `n` frames of the simulator's and the gateway's streams are the same bytes.
async fn same_frames(
    what: &str,
    s: &mut support::watch::Watch,
    g: &mut support::watch::Watch,
    n: usize,
) {
    for _ in 0..n {
        let (sty, senv) = s.next_proto(what).await;
        let (gty, genv) = g.next_proto(what).await;
        assert_eq!(
            (&sty, &senv),
            (&gty, &genv),
            "{what}: the simulator's {sty} {} vs the gateway's {gty} {}",
            envelope_json(&senv),
            envelope_json(&genv)
        );
    }
}

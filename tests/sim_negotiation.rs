//! The simulator negotiates `Accept` as kube-apiserver does (src/negotiate.rs, src/sim/answer.rs):
//! which requests are refused with 406, how error Statuses are written (re-negotiated with
//! the default endpoint restrictions, else `WriteRawJSON`'s indented JSON without a
//! newline), where the 406 comes in the order of checks, pretty output, and the answers of
//! writes. Bodies are compared byte for byte where the apiserver's bytes are known, so the
//! same assertions can run against the gateway (differential tests).

mod support;

use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use support::http::{Http, Resp};
use support::sim::{sim, sim_with};
use support::watch::{open_with, put_object, put_pod};
use watchgate::negotiate::{negotiate, Conversion, Encoding, Endpoint, MetaVersion};
use watchgate::sim::resources::find;

const TABLE_ONLY: &str = "application/json;as=Table;g=meta.k8s.io;v=v1";
const KUBECTL_TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
/// client-go's metadata informers (k8s.io/client-go/metadata), list requests.
const METADATA_INFORMER_LIST: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
/// client-go's generated clients for built-in types.
const CLIENT_GO_PROTOBUF: &str = "application/vnd.kubernetes.protobuf,application/json";

const BUILTIN_TYPES: &str =
    "application/json, application/yaml, application/vnd.kubernetes.protobuf";

async fn req(h: &Http, method: Method, path: &str, headers: &[(&str, &str)]) -> Resp {
    h.request(method, path, headers, Bytes::new()).await
}

async fn get(h: &Http, path: &str, accept: &str) -> Resp {
    req(h, Method::GET, path, &[("accept", accept)]).await
}

/// A protobuf answer (`k8s\0` + `runtime.Unknown`) as Go's JSON of the same object.
fn proto_json(r: &Resp) -> Value {
    let json = watchgate::proto::decode_object(&r.body)
        .unwrap_or_else(|e| panic!("not a protobuf answer ({e}): {:?}", r.body));
    serde_json::from_slice(&json).unwrap()
}

fn content_type(r: &Resp) -> &str {
    r.headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// `json.MarshalIndent(status, "", "  ")` as WriteRawJSON writes it: no trailing newline.
fn raw_status(code: u16, reason: &str, message: &str, details: Option<Value>) -> String {
    let mut s = format!(
        "{{\n  \"kind\": \"Status\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {{}},\n  \"status\": \"Failure\",\n  \"message\": {},\n  \"reason\": \"{reason}\",\n",
        serde_json::to_string(message).unwrap()
    );
    if let Some(d) = details {
        let d = serde_json::to_string_pretty(&d)
            .unwrap()
            .replace('\n', "\n  ");
        s.push_str(&format!("  \"details\": {d},\n"));
    }
    s.push_str(&format!("  \"code\": {code}\n}}"));
    s
}

/// The compact Status as the JSON serializer writes it (with a newline).
fn compact_status(code: u16, reason: &str, message: &str) -> String {
    format!(
        "{{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{{}},\"status\":\"Failure\",\"message\":{},\"reason\":\"{reason}\",\"code\":{code}}}\n",
        serde_json::to_string(message).unwrap()
    )
}

#[tokio::test]
async fn unservable_accept_is_406_written_as_raw_indented_json() {
    let h = sim().await;
    let http = Http::new(&h.url());
    let not_acceptable = format!("only the following media types are accepted: {BUILTIN_TYPES}");
    // Nothing serves text/html; the error writer cannot negotiate it either, so the Status
    // is WriteRawJSON'd. Same on get, list, watch and a write.
    for (method, path) in [
        (Method::GET, "/api/v1/namespaces/ns/pods"),
        (Method::GET, "/api/v1/namespaces/ns/pods/p"),
        (Method::GET, "/api/v1/pods?watch=1"),
        (Method::POST, "/api/v1/namespaces/ns/configmaps"),
        (Method::DELETE, "/api/v1/namespaces/ns/configmaps/c"),
    ] {
        let r = req(&http, method.clone(), path, &[("accept", "text/html")]).await;
        assert_eq!(r.status, StatusCode::NOT_ACCEPTABLE, "{method} {path}");
        assert_eq!(content_type(&r), "application/json", "{method} {path}");
        assert_eq!(
            r.text(),
            raw_status(406, "NotAcceptable", &not_acceptable, None),
            "{method} {path}"
        );
    }
    // Unknown conversions, groups and versions, Table in protobuf, a bad sv or stream.
    for accept in [
        "application/json;as=Foo;g=meta.k8s.io;v=v1",
        "application/json;as=Table;g=meta.k8s.io;v=v2",
        "application/json;as=Table;g=example.com;v=v1",
        "application/json;as=Table",
        "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1",
        "application/json;sv=v2",
        "application/json;stream=other",
    ] {
        let r = get(&http, "/api/v1/namespaces/ns/pods", accept).await;
        assert_eq!(r.status, StatusCode::NOT_ACCEPTABLE, "{accept}");
        assert_eq!(
            r.text(),
            raw_status(406, "NotAcceptable", &not_acceptable, None),
            "{accept}"
        );
    }
    h.shutdown().await;
}

#[tokio::test]
async fn a_refusal_the_error_writer_can_negotiate_is_written_in_that_form() {
    let h = sim().await;
    let http = Http::new(&h.url());
    // `sv=v1` is allowed by the request scope but not by the default restrictions; a
    // following plain clause is what the error writer picks: compact JSON.
    let r = get(
        &http,
        "/api/v1/namespaces/ns/pods",
        "application/json;as=Foo;g=meta.k8s.io;v=v1, application/json",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "the plain clause serves the list");
    // A custom resource has no protobuf: 406, but the default restrictions allow protobuf
    // (the CRD scope's serializer has it), so the Status is negotiated, not raw.
    let r = get(
        &http,
        "/apis/example.com/v1/namespaces/ns/widgets",
        "application/vnd.kubernetes.protobuf",
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_ACCEPTABLE);
    // Written in protobuf, as kube-apiserver writes it.
    assert_eq!(content_type(&r), "application/vnd.kubernetes.protobuf");
    let st = proto_json(&r);
    assert_eq!(st["kind"], "Status");
    assert_eq!(st["reason"], "NotAcceptable");
    assert_eq!(
        st["message"],
        format!("only the following media types are accepted: {BUILTIN_TYPES}")
    );
    // client-go's protobuf-first Accept on a custom resource: JSON is served.
    let r = get(
        &http,
        "/apis/example.com/v1/namespaces/ns/widgets",
        CLIENT_GO_PROTOBUF,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["kind"], "WidgetList");
    h.shutdown().await;
}

#[tokio::test]
async fn other_errors_follow_the_same_writer() {
    let h = sim_with(|c| c.too_large_rv_wait = Duration::from_millis(50)).await;
    let http = Http::new(&h.url());
    // A Table-only Accept: the 404 cannot be written as a Table, nor negotiated without a
    // conversion: raw indented JSON.
    let r = get(&http, "/api/v1/namespaces/ns/pods/missing", TABLE_ONLY).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(content_type(&r), "application/json");
    assert_eq!(
        r.text(),
        raw_status(
            404,
            "NotFound",
            "pods \"missing\" not found",
            Some(json!({"name": "missing", "kind": "pods"}))
        )
    );
    // kubectl's Table Accept ends with plain JSON: the same 404, compact.
    let r = get(&http, "/api/v1/namespaces/ns/pods/missing", KUBECTL_TABLE).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(
        r.text(),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"pods \\\"missing\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"missing\",\"kind\":\"pods\"},\"code\":404}\n"
    );
    // Retry-After comes with the Status whichever way it is written.
    let r = get(
        &http,
        "/api/v1/namespaces/ns/pods/missing?resourceVersion=999",
        TABLE_ONLY,
    )
    .await;
    assert_eq!(r.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(r.headers["retry-after"], "1");
    assert!(
        r.text().starts_with("{\n  \"kind\": \"Status\""),
        "{}",
        r.text()
    );
    assert!(!r.text().ends_with('\n'));
    h.shutdown().await;
}

#[tokio::test]
async fn the_406_comes_before_the_options_are_decoded() {
    let h = sim().await;
    let http = Http::new(&h.url());
    // ListResource negotiates before DecodeParameters: a bad selector loses to the 406.
    let r = get(
        &http,
        "/api/v1/namespaces/ns/pods?labelSelector=a%3D%3D%3Db",
        "text/html",
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_ACCEPTABLE);
    // A create negotiates before it reads its (here malformed) body.
    let r = http
        .request(
            Method::POST,
            "/api/v1/namespaces/ns/configmaps",
            &[
                ("accept", "text/html"),
                ("content-type", "application/json"),
            ],
            Bytes::from_static(b"{not json"),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_ACCEPTABLE);
    h.shutdown().await;
}

#[tokio::test]
async fn a_yaml_watch_is_refused_by_the_stream_negotiation() {
    let h = sim().await;
    let stream_types = "only the following media types are accepted: application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch";
    // The list negotiation takes YAML; the watch then finds no stream serializer for it.
    for accept in [
        "application/yaml",
        "application/yaml, application/json",
        "application/yaml;stream=watch, application/json;q=0.5",
    ] {
        let mut w = open_with(&h.url(), "/api/v1/pods?watch=1", &[("accept", accept)]).await;
        // `application/yaml;stream=watch` is not even a list candidate (YAML cannot
        // stream): JSON serves that watch.
        if accept.starts_with("application/yaml;stream") {
            assert_eq!(w.status, StatusCode::OK, "{accept}");
            continue;
        }
        assert_eq!(w.status, StatusCode::NOT_ACCEPTABLE, "{accept}");
        let st = w.body_json().await;
        assert_eq!(st["reason"], "NotAcceptable", "{accept}");
        assert_eq!(st["message"], stream_types, "{accept}");
    }
    // The stream negotiation runs after the options are validated and the watch is
    // made: a bad selector is a 400 first.
    let mut w = open_with(
        &h.url(),
        "/api/v1/pods?watch=1&labelSelector=a%3D%3D%3Db",
        &[("accept", "application/yaml")],
    )
    .await;
    assert_eq!(w.status, StatusCode::BAD_REQUEST);
    assert_eq!(w.body_json().await["reason"], "BadRequest");
    h.shutdown().await;
}

#[tokio::test]
async fn pretty_output_is_indented_without_a_newline() {
    let h = sim().await;
    put_pod(&h, "ns", "p", json!({"app": "web"}), "node-1", "Running");
    let http = Http::new(&h.url());
    let compact = get(&http, "/api/v1/namespaces/ns/pods/p", "application/json").await;
    assert!(compact.text().ends_with("}\n"));
    let obj = compact.json();
    let indented = String::from_utf8(serde_json::to_vec_pretty(&obj).unwrap()).unwrap();
    for (path, headers) in [
        (
            "/api/v1/namespaces/ns/pods/p?pretty=true",
            vec![("accept", "application/json")],
        ),
        (
            "/api/v1/namespaces/ns/pods/p",
            vec![("accept", "application/json;pretty=1")],
        ),
        (
            "/api/v1/namespaces/ns/pods/p",
            vec![("accept", "application/json"), ("user-agent", "curl/8.5.0")],
        ),
    ] {
        let r = req(&http, Method::GET, path, &headers).await;
        assert_eq!(r.status, StatusCode::OK, "{path} {headers:?}");
        assert_eq!(r.text(), indented, "{path} {headers:?}");
    }
    // pretty=false wins over the User-Agent.
    let r = req(
        &http,
        Method::GET,
        "/api/v1/namespaces/ns/pods/p?pretty=false",
        &[("accept", "application/json"), ("user-agent", "curl/8.5.0")],
    )
    .await;
    assert_eq!(r.text(), compact.text());
    // A pretty list keeps the typed list's item shape (no kind/apiVersion on items).
    let r = get(
        &http,
        "/api/v1/namespaces/ns/pods?pretty=1",
        "application/json",
    )
    .await;
    let list = r.json();
    assert!(list["items"][0].get("kind").is_none());
    assert!(r.text().starts_with("{\n  \"kind\": \"PodList\""));
    h.shutdown().await;
}

#[tokio::test]
async fn writes_answer_in_the_negotiated_form() {
    let h = sim().await;
    watchgate::sim::write::bootstrap(h.store());
    let http = Http::new(&h.url());
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "c", "namespace": "default", "labels": {"z": "1", "a": "2"}},
                    "data": {"k": "v"}});
    // create → a one-row Table (the ConfigMap printer).
    let r = http
        .request(
            Method::POST,
            "/api/v1/namespaces/default/configmaps",
            &[
                ("accept", KUBECTL_TABLE),
                ("content-type", "application/json"),
            ],
            serde_json::to_vec(&cm).unwrap(),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let t = r.json();
    assert_eq!(t["kind"], "Table");
    assert_eq!(
        t["rows"][0]["cells"].as_array().unwrap()[0..2],
        [json!("c"), json!(1)]
    );
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    // update → PartialObjectMetadata, labels in sorted order.
    let mut cm2 = cm.clone();
    cm2["data"]["k"] = json!("w");
    let r = http
        .request(
            Method::PUT,
            "/api/v1/namespaces/default/configmaps/c",
            &[
                (
                    "accept",
                    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
                ),
                ("content-type", "application/json"),
            ],
            serde_json::to_vec(&cm2).unwrap(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let p = r.json();
    assert_eq!(p["kind"], "PartialObjectMetadata");
    assert_eq!(p["apiVersion"], "meta.k8s.io/v1");
    assert!(p.get("data").is_none());
    let keys: Vec<&String> = p["metadata"]["labels"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys, ["a", "z"]);
    // PartialObjectMetadataList of one object: the 406 names the internal Go type.
    let r = http
        .request(
            Method::PUT,
            "/api/v1/namespaces/default/configmaps/c",
            &[
                (
                    "accept",
                    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
                ),
                ("content-type", "application/json"),
            ],
            serde_json::to_vec(&cm2).unwrap(),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(
        r.text(),
        raw_status(
            406,
            "NotAcceptable",
            "you requested PartialObjectMetadataList, but the requested object is not a list (*core.ConfigMap)",
            None
        )
    );
    // delete → a Status, which is never converted.
    let r = req(
        &http,
        Method::DELETE,
        "/api/v1/namespaces/default/configmaps/c",
        &[(
            "accept",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        )],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["kind"], "Status");
    assert_eq!(r.json()["status"], "Success");
    h.shutdown().await;
}

#[tokio::test]
async fn metadata_informer_accept_negotiates_protobuf() {
    // client-go's metadata informer asks protobuf first; kube-apiserver answers a protobuf
    // PartialObjectMetadataList (built-in or custom resource alike).
    for ep in [Endpoint::BUILTIN, Endpoint::CUSTOM] {
        let n = negotiate(Some(METADATA_INFORMER_LIST), ep).unwrap();
        assert_eq!(n.encoding, Encoding::Protobuf);
        assert_eq!(
            n.conversion,
            Some(Conversion::PartialObjectMetadataList(MetaVersion::V1))
        );
    }
    let h = sim().await;
    put_pod(&h, "ns", "p", json!({}), "node-1", "Running");
    put_object(
        &h,
        find("example.com", "v1", "widgets").unwrap(),
        "ns",
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "w", "namespace": "ns"}, "spec": {}}),
    );
    let http = Http::new(&h.url());
    for path in [
        "/api/v1/namespaces/ns/pods",
        "/apis/example.com/v1/namespaces/ns/widgets",
    ] {
        let r = get(&http, path, METADATA_INFORMER_LIST).await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        // A custom resource has no protobuf of its own, but its metadata does.
        assert_eq!(
            content_type(&r),
            "application/vnd.kubernetes.protobuf",
            "{path}"
        );
        let l = proto_json(&r);
        assert_eq!(l["kind"], "PartialObjectMetadataList", "{path}");
        // Items in protobuf carry no TypeMeta (the message has only `metadata`).
        let item = &l["items"][0];
        assert_eq!(item.get("kind"), None, "{path}");
        assert!(
            ["p", "w"].contains(&item["metadata"]["name"].as_str().unwrap()),
            "{path}"
        );
    }
    h.shutdown().await;
}

#[tokio::test]
async fn compact_406_when_a_plain_clause_follows() {
    let h = sim().await;
    let http = Http::new(&h.url());
    // A list asked as PartialObjectMetadata by a client that also takes plain JSON: the
    // 406 is written in JSON, compact.
    let r = get(
        &http,
        "/apis/apps/v1/namespaces/ns/deployments",
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(
        r.text(),
        compact_status(
            406,
            "NotAcceptable",
            "you requested PartialObjectMetadata, but the requested object is a list (*apps.DeploymentList)"
        )
    );
    h.shutdown().await;
}

//! Server-side Table output (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`):
//! column definitions, cells, row objects, the watch form, and `kubectl get`.

mod support;

use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use jiff::{SignedDuration, Timestamp};
use serde_json::{json, Value};
use watchgate::sim::resources::find;
use watchgate::sim::seed::{self, SeedSpec};
use watchgate::sim::{start, Mutation, SimConfig, SimHandle};

const KUBECTL_TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

async fn sim() -> SimHandle {
    start(SimConfig::default()).await.expect("sim starts")
}

async fn get(h: &SimHandle, path: &str, accept: &str) -> (StatusCode, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let req = Request::get(format!("{}{path}", h.url()))
        .header("accept", accept)
        .body(Empty::new())
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status();
    let b = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&b).unwrap())
}

fn ago(mins: i64) -> String {
    Timestamp::now()
        .checked_sub(SignedDuration::from_mins(mins))
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn put(h: &SimHandle, resource: &str, obj: Value) -> Value {
    let rt = watchgate::sim::resources::RESOURCES
        .iter()
        .find(|r| r.resource == resource)
        .unwrap();
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let out = h
        .store()
        .mutate(rt, &ns, &name, |_| Ok(Mutation::Put(obj)))
        .unwrap()
        .unwrap();
    out.as_ref().clone()
}

fn col_names(t: &Value) -> Vec<(String, i64)> {
    t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["priority"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn running_pod(name: &str) -> Value {
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "ns1", "creationTimestamp": ago(10), "uid": "u-1",
                     "labels": {"app": "web"}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "a", "image": "img:1"}, {"name": "b", "image": "img:2"}],
                 "readinessGates": [{"conditionType": "example.com/gate"}]},
        "status": {"phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}],
                   "conditions": [{"type": "Ready", "status": "True"}, {"type": "example.com/gate", "status": "True"}],
                   "containerStatuses": [
                       {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {"startedAt": ago(9)}},
                        "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(15)}}},
                       {"name": "b", "ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
                   ]}
    })
}

#[tokio::test]
async fn pod_list_table_columns_cells_and_metadata_objects() {
    let h = sim().await;
    let stored = put(&h, "pods", running_pod("p1"));
    let p2 = put(
        &h,
        "pods",
        json!({"kind": "Pod", "apiVersion": "v1",
               "metadata": {"name": "p2", "namespace": "ns1", "creationTimestamp": ago(30)},
               "spec": {"containers": [{"name": "a", "image": "x"}]},
               "status": {"phase": "Succeeded"}}),
    );
    let (s, t) = get(&h, "/api/v1/namespaces/ns1/pods", KUBECTL_TABLE).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(
        t["metadata"]["resourceVersion"],
        p2["metadata"]["resourceVersion"]
    );
    assert_eq!(
        col_names(&t),
        [
            ("Name", 0),
            ("Ready", 0),
            ("Status", 0),
            ("Restarts", 0),
            ("Age", 0),
            ("IP", 1),
            ("Node", 1),
            ("Nominated Node", 1),
            ("Readiness Gates", 1)
        ]
        .iter()
        .map(|(n, p)| (n.to_string(), *p))
        .collect::<Vec<_>>()
    );
    assert_eq!(t["columnDefinitions"][0]["format"], "name");
    assert_eq!(t["columnDefinitions"][0]["type"], "string");
    let rows = t["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        rows[0]["cells"],
        json!([
            "p1",
            "1/2",
            "CrashLoopBackOff",
            "3 (15m ago)",
            "10m",
            "10.0.0.5",
            "node-1",
            "<none>",
            "1/1"
        ])
    );
    assert_eq!(
        rows[0]["object"],
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": stored["metadata"]})
    );
    assert!(rows[0].get("conditions").is_none());
    assert_eq!(
        rows[1]["cells"],
        json!([
            "p2",
            "0/1",
            "Succeeded",
            "0",
            "30m",
            "<none>",
            "<none>",
            "<none>",
            "<none>"
        ])
    );
    assert_eq!(
        rows[1]["conditions"],
        json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}])
    );
    h.shutdown().await;
}

#[tokio::test]
async fn include_object_variants_and_bad_value() {
    let h = sim().await;
    let stored = put(&h, "pods", running_pod("p1"));
    let path = "/api/v1/namespaces/ns1/pods";
    let (_, t) = get(&h, &format!("{path}?includeObject=None"), KUBECTL_TABLE).await;
    assert_eq!(t["rows"][0]["object"], Value::Null);
    let (_, t) = get(&h, &format!("{path}?includeObject=Object"), KUBECTL_TABLE).await;
    assert_eq!(t["rows"][0]["object"], stored);
    let (_, t) = get(&h, &format!("{path}?includeObject=Metadata"), KUBECTL_TABLE).await;
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    let (s, st) = get(
        &h,
        &format!("{path}?includeObject=Everything"),
        KUBECTL_TABLE,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(st["reason"], "BadRequest");
    // optionsForTransform's ValidateTableOptions.
    assert_eq!(
        st["message"],
        "Unable to convert to Table as requested: includeObject: Invalid value: \"Everything\": must be 'Metadata', 'Object', 'None', or empty"
    );

    // v1beta1 when only that is acceptable; plain JSON without an `as=Table` range.
    let (_, t) = get(
        &h,
        path,
        "application/json;as=Table;v=v1beta1;g=meta.k8s.io",
    )
    .await;
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(t["rows"][0]["object"]["apiVersion"], "meta.k8s.io/v1beta1");
    let (_, l) = get(&h, path, "application/json").await;
    assert_eq!(l["kind"], "PodList");

    // A single object is a one-row Table with the object's resourceVersion.
    let (s, t) = get(&h, &format!("{path}/p1"), KUBECTL_TABLE).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(t["kind"], "Table");
    assert_eq!(
        t["metadata"],
        json!({"resourceVersion": stored["metadata"]["resourceVersion"]})
    );
    assert_eq!(t["rows"].as_array().unwrap().len(), 1);
    assert_eq!(t["rows"][0]["cells"][0], "p1");
    h.shutdown().await;
}

#[tokio::test]
async fn default_columns_for_every_served_type() {
    let h = sim().await;
    let spec = SeedSpec::per_type(3, 4096);
    seed::seed_store(h.store(), &spec);
    let cases: &[(&str, &[&str])] = &[
        ("/api/v1/namespaces", &["Name", "Status", "Age"]),
        (
            "/api/v1/nodes",
            &[
                "Name",
                "Status",
                "Roles",
                "Age",
                "Version",
                "Internal-IP",
                "External-IP",
                "OS-Image",
                "Kernel-Version",
                "Container-Runtime",
            ],
        ),
        (
            "/api/v1/namespaces/ns-1/configmaps",
            &["Name", "Data", "Age"],
        ),
        (
            "/api/v1/namespaces/ns-1/secrets",
            &["Name", "Type", "Data", "Age"],
        ),
        (
            "/api/v1/namespaces/ns-1/services",
            &[
                "Name",
                "Type",
                "Cluster-IP",
                "External-IP",
                "Port(s)",
                "Age",
                "Selector",
            ],
        ),
        (
            "/api/v1/namespaces/ns-1/endpoints",
            &["Name", "Endpoints", "Age"],
        ),
        (
            "/api/v1/namespaces/ns-1/events",
            &[
                "Last Seen",
                "Type",
                "Reason",
                "Object",
                "Subobject",
                "Source",
                "Message",
                "First Seen",
                "Count",
                "Name",
            ],
        ),
        (
            "/apis/apps/v1/namespaces/ns-1/deployments",
            &[
                "Name",
                "Ready",
                "Up-to-date",
                "Available",
                "Age",
                "Containers",
                "Images",
                "Selector",
            ],
        ),
        // The seeded widgets CRD's additionalPrinterColumns.
        (
            "/apis/example.com/v1/namespaces/ns-1/widgets",
            &["Name", "Color", "Size", "Ready", "Age"],
        ),
        (
            "/apis/discovery.k8s.io/v1/namespaces/ns-1/endpointslices",
            &["Name", "AddressType", "Ports", "Endpoints", "Age"],
        ),
        // No printer: rest.NewDefaultTableConvertor.
        (
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &["Name", "Created At"],
        ),
    ];
    for (path, want) in cases {
        let (s, t) = get(&h, path, KUBECTL_TABLE).await;
        assert_eq!(s, StatusCode::OK, "{path}");
        let got: Vec<String> = col_names(&t).into_iter().map(|c| c.0).collect();
        assert_eq!(&got, want, "{path}");
        let rows = t["rows"].as_array().unwrap();
        assert!(!rows.is_empty(), "{path}");
        for r in rows {
            assert_eq!(r["cells"].as_array().unwrap().len(), want.len(), "{path}");
        }
    }
    // A few exact rows.
    let (_, t) = get(&h, "/api/v1/namespaces/ns-1/configmaps", KUBECTL_TABLE).await;
    assert_eq!(
        t["rows"][0]["cells"].as_array().unwrap()[0..2],
        [json!("configmap-1"), json!(3)]
    );
    let (_, t) = get(&h, "/api/v1/namespaces/ns-1/secrets", KUBECTL_TABLE).await;
    assert_eq!(
        t["rows"][0]["cells"].as_array().unwrap()[0..3],
        [json!("secret-1"), json!("Opaque"), json!(2)]
    );
    let (_, t) = get(&h, "/api/v1/namespaces/ns-1/services", KUBECTL_TABLE).await;
    let cells = &t["rows"][0]["cells"];
    assert_eq!(cells[1], "ClusterIP");
    assert_eq!(cells[3], "<none>");
    assert_eq!(cells[4], "80/TCP");
    assert_eq!(cells[6], "app=app-1");
    let (_, t) = get(
        &h,
        "/apis/apps/v1/namespaces/ns-1/deployments",
        KUBECTL_TABLE,
    )
    .await;
    let cells = &t["rows"][0]["cells"];
    assert_eq!(cells[1], "3/3");
    assert_eq!(cells[2], 3);
    assert_eq!(cells[7], "app=deployment-1");
    let (_, t) = get(&h, "/api/v1/nodes", KUBECTL_TABLE).await;
    let node0 = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == "node-0")
        .unwrap();
    assert_eq!(node0["cells"][1], "Ready");
    assert_eq!(node0["cells"][2], "control-plane");
    assert_eq!(node0["cells"][4], "v1.36.0");
    let (_, t) = get(
        &h,
        "/apis/example.com/v1/namespaces/ns-1/widgets",
        KUBECTL_TABLE,
    )
    .await;
    // The CRD's columns: Color (string), Size (integer), Ready (priority 1, no status in
    // the seed: null), Age (date).
    let types: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["string", "string", "integer", "string", "date"]);
    assert_eq!(t["columnDefinitions"][3]["priority"], 1);
    let w1 = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == "widget-1")
        .unwrap();
    assert_eq!(
        w1["cells"].as_array().unwrap()[..4],
        [json!("widget-1"), json!("green"), json!(2), Value::Null]
    );
    h.shutdown().await;
}

/// Reads watch events (one JSON object per line) until `n` have arrived.
async fn read_events(body: &mut hyper::body::Incoming, buf: &mut Vec<u8>, n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            out.push(serde_json::from_slice(&line).unwrap());
            if out.len() == n {
                return out;
            }
        }
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("watch event within 10s")
            .expect("stream open")
            .unwrap();
        if let Ok(d) = frame.into_data() {
            buf.extend_from_slice(&d);
        }
    }
}

#[tokio::test]
async fn watch_as_table_sends_column_definitions_only_first() {
    let h = sim().await;
    let p1 = put(&h, "pods", running_pod("p1"));
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let req = Request::get(format!("{}/api/v1/namespaces/ns1/pods?watch=1", h.url()))
        .header("accept", KUBECTL_TABLE)
        .body(Empty::new())
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    let first = read_events(&mut body, &mut buf, 1).await;
    assert_eq!(first[0]["type"], "ADDED");
    let t = &first[0]["object"];
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["columnDefinitions"].as_array().unwrap().len(), 9);
    assert_eq!(t["rows"][0]["cells"][0], "p1");
    assert_eq!(
        t["metadata"]["resourceVersion"],
        p1["metadata"]["resourceVersion"]
    );

    put(&h, "pods", running_pod("p2"));
    let pods = find("", "v1", "pods").unwrap();
    let deleted = h
        .store()
        .mutate(pods, "ns1", "p1", |_| Ok(Mutation::Delete))
        .unwrap()
        .unwrap();
    let later = read_events(&mut body, &mut buf, 2).await;
    assert_eq!(later[0]["type"], "ADDED");
    assert_eq!(later[0]["object"]["columnDefinitions"], Value::Null);
    assert_eq!(later[0]["object"]["rows"][0]["cells"][0], "p2");
    assert_eq!(later[1]["type"], "DELETED");
    assert_eq!(later[1]["object"]["columnDefinitions"], Value::Null);
    assert_eq!(
        later[1]["object"]["rows"][0]["object"]["kind"],
        "PartialObjectMetadata"
    );
    assert_eq!(
        later[1]["object"]["metadata"]["resourceVersion"],
        deleted["metadata"]["resourceVersion"]
    );
    h.shutdown().await;
}

#[tokio::test]
async fn kubectl_get_prints_server_side_columns() {
    let h = sim().await;
    put(&h, "pods", running_pod("p1"));
    let out = tokio::process::Command::new(support::tools::kubectl())
        .args([
            "--server",
            &h.url(),
            "get",
            "pods",
            "-n",
            "ns1",
            "-o",
            "wide",
        ])
        .env("KUBECONFIG", "/dev/null")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.is_empty(), "kubectl complained: {stderr}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(
        lines[0],
        vec![
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED NODE",
            "READINESS GATES"
        ]
    );
    assert_eq!(
        lines[1],
        vec![
            "p1",
            "1/2",
            "CrashLoopBackOff",
            "3 (15m ago)",
            "10m",
            "10.0.0.5",
            "node-1",
            "<none>",
            "1/1"
        ]
    );
    h.shutdown().await;
}

#[tokio::test]
async fn kubectl_get_endpointslices() {
    let h = sim().await;
    seed::seed_store(h.store(), &SeedSpec::per_type(2, 1024));
    let rows = kubectl_rows(&h, &["get", "endpointslices", "-n", "ns-1"]).await;
    assert_eq!(
        rows[0],
        ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    );
    // service-1's slice: its three pods' addresses (pods 3, 4, 5: 10.244.0.{i + 2}), port 8080.
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows[1][0].starts_with("service-1-"), "{rows:?}");
    assert_eq!(
        rows[1][1..4],
        ["IPv4", "8080", "10.244.0.5,10.244.0.6,10.244.0.7"]
    );
    h.shutdown().await;
}

/// Runs kubectl 1.37 against the simulator and returns stdout's rows split on runs of
/// spaces.
async fn kubectl_rows(h: &SimHandle, args: &[&str]) -> Vec<Vec<String>> {
    let out = tokio::process::Command::new(support::tools::kubectl())
        .args(["--server", &h.url()])
        .args(args)
        .env("KUBECONFIG", "/dev/null")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kubectl {args:?}: {stderr}");
    assert!(stderr.is_empty(), "kubectl {args:?} complained: {stderr}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .collect()
}

fn widget(name: &str, mins: i64, spec: Value, status: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget",
           "metadata": {"name": name, "namespace": "ns1", "creationTimestamp": ago(mins)},
           "spec": spec, "status": status})
}

#[tokio::test]
async fn crd_printer_columns_through_kubectl() {
    let h = sim().await;
    // The CRD the simulator bootstraps (Color, Size, Ready¹, Age).
    seed::bootstrap_crds(h.store());
    put(
        &h,
        "widgets",
        widget(
            "w1",
            15,
            json!({"color": "blue", "size": 7}),
            json!({"conditions": [{"type": "Synced", "status": "False"},
                                  {"type": "Ready", "status": "True"}]}),
        ),
    );
    put(
        &h,
        "widgets",
        widget("w2", 90, json!({"color": "red"}), json!({})),
    );
    let rows = kubectl_rows(&h, &["get", "widgets", "-n", "ns1"]).await;
    assert_eq!(rows[0], ["NAME", "COLOR", "SIZE", "AGE"]);
    assert_eq!(rows[1], ["w1", "blue", "7", "15m"]);
    // A missing value is a null cell, which kubectl prints blank.
    assert_eq!(rows[2], ["w2", "red", "90m"]);
    let rows = kubectl_rows(&h, &["get", "widgets", "-n", "ns1", "-o", "wide"]).await;
    assert_eq!(rows[0], ["NAME", "COLOR", "SIZE", "READY", "AGE"]);
    assert_eq!(rows[1], ["w1", "blue", "7", "True", "15m"]);
    // The CRDs themselves: no printer, so Name and Created At.
    let rows = kubectl_rows(&h, &["get", "crd"]).await;
    assert_eq!(rows[0], ["NAME", "CREATED AT"]);
    assert_eq!(rows[1][0], "widgets.example.com");

    // The columns follow the CRD in the store: a new column set is served at once.
    let crds = find("apiextensions.k8s.io", "v1", "customresourcedefinitions").unwrap();
    let mut crd = h
        .store()
        .get(crds, "", "widgets.example.com")
        .unwrap()
        .as_ref()
        .clone();
    crd["spec"]["versions"][0]["additionalPrinterColumns"] = json!([
        {"name": "Shade", "type": "string", "jsonPath": ".spec.color"},
        {"name": "Conditions", "type": "string", "jsonPath": ".status.conditions[*].type"},
        {"name": "Whole", "type": "string", "jsonPath": ".spec"},
        {"name": "Big", "type": "boolean", "jsonPath": ".spec.size"}
    ]);
    put(&h, "customresourcedefinitions", crd);
    let rows = kubectl_rows(&h, &["get", "widgets", "-n", "ns1"]).await;
    assert_eq!(rows[0], ["NAME", "SHADE", "CONDITIONS", "WHOLE", "BIG"]);
    // A list result prints its first value; a map prints as Go's json.Marshal; an
    // integer in a boolean column is null (blank).
    assert_eq!(
        rows[1],
        ["w1", "blue", "Synced", r#"{"color":"blue","size":7}"#]
    );
    let (_, t) = get(
        &h,
        "/apis/example.com/v1/namespaces/ns1/widgets/w1",
        KUBECTL_TABLE,
    )
    .await;
    assert_eq!(t["rows"][0]["cells"][4], Value::Null);
    h.shutdown().await;
}

#[tokio::test]
async fn crd_columns_at_the_api() {
    let h = sim().await;
    // Without a CRD in the store: what a CRD without columns serves.
    put(&h, "widgets", widget("w", 30, json!({}), json!({})));
    let (_, t) = get(
        &h,
        "/apis/example.com/v1/namespaces/ns1/widgets",
        KUBECTL_TABLE,
    )
    .await;
    assert_eq!(
        col_names(&t),
        [("Name".to_string(), 0), ("Age".to_string(), 0)]
    );
    assert_eq!(t["columnDefinitions"][1]["type"], "date");
    assert_eq!(t["rows"][0]["cells"], json!(["w", "30m"]));
    // A column whose JSONPath does not parse ends the column list there, as
    // tableconvertor.New returns what it built so far.
    put(
        &h,
        "customresourcedefinitions",
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "widgets.example.com"},
               "spec": {"group": "example.com", "versions": [{"name": "v1",
                   "additionalPrinterColumns": [
                       {"name": "Color", "type": "string", "jsonPath": ".spec.color",
                        "format": "byte", "priority": 2},
                       {"name": "Broken", "type": "string", "jsonPath": ".spec.x["},
                       {"name": "Never", "type": "string", "jsonPath": ".spec.y"}]}]}}),
    );
    let (_, t) = get(
        &h,
        "/apis/example.com/v1/namespaces/ns1/widgets/w",
        KUBECTL_TABLE,
    )
    .await;
    assert_eq!(
        t["columnDefinitions"][1],
        json!({"name": "Color", "type": "string", "format": "byte",
               "description": "Custom resource definition column (in JSONPath format): .spec.color",
               "priority": 2})
    );
    assert_eq!(t["columnDefinitions"].as_array().unwrap().len(), 2);
    assert_eq!(t["rows"][0]["cells"], json!(["w", null]));
    h.shutdown().await;
}

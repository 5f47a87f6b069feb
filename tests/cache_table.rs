//! Table answers (`as=Table`, kubectl's server-side printing) from the cache: the same
//! request to the simulator and through the gateway gives the same Table, with
//! `X-Watchgate-Source: cache` (docs/cache.md, "Representations").
//!
//! Ages are printed relative to the time of the answer, so the objects are created far in
//! the past: `HumanDuration` prints whole years beyond 8 years, which cannot change between
//! the two requests.

mod support;

use serde_json::{json, Value};
use support::objects::pod;
use support::servers::Env;
use support::watch::{put_object, resource, rv_at_least, wait_until_cached};

/// kubectl 1.37's `get` Accept header.
const KUBECTL_TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
const OLD: &str = "2010-01-01T00:00:00Z";

async fn both(env: &Env, path: &str, accept: &str) -> (Value, Value) {
    let headers = [("accept", accept)];
    let direct = env
        .direct_http
        .request(http::Method::GET, path, &headers, Vec::new())
        .await;
    let through = env
        .http
        .request(http::Method::GET, path, &headers, Vec::new())
        .await;
    assert_eq!(direct.status, 200, "{path}: {}", direct.text());
    assert_eq!(through.status, 200, "{path}: {}", through.text());
    assert_eq!(through.source(), Some("cache"), "{path}");
    assert_eq!(
        through.headers["content-type"], direct.headers["content-type"],
        "{path}"
    );
    (direct.json(), through.json())
}

/// A running pod with what a Table prints (age, IP, readiness, restarts).
fn printed_pod(name: &str, node: &str) -> Value {
    pod("default", name)
        .label("app", "t")
        .running_on(node)
        .merge(json!({
            "metadata": {"creationTimestamp": OLD},
            "status": {"podIP": "10.0.0.1",
                       "containerStatuses": [{"name": "c", "ready": true, "restartCount": 2,
                                              "image": "busybox", "imageID": "", "started": true,
                                              "state": {"running": {"startedAt": OLD}}}]},
        }))
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_of_built_in_types_match_the_simulator() {
    let env = Env::gateway().await;
    let gw = env.url().to_string();
    let pods = resource("", "v1", "pods");
    put_object(env.sim.handle(), pods, "default", printed_pod("a", "n1"));
    let rv = put_object(env.sim.handle(), pods, "default", printed_pod("b", "n2"));
    wait_until_cached(&gw, "/api/v1/pods?resourceVersion=0", rv_at_least(rv)).await;

    for path in [
        "/api/v1/namespaces/default/pods?resourceVersion=0",
        "/api/v1/namespaces/default/pods?resourceVersion=0&includeObject=Object",
        "/api/v1/namespaces/default/pods?resourceVersion=0&includeObject=None",
        "/api/v1/pods?resourceVersion=0&labelSelector=app%3Dt",
        "/api/v1/namespaces/default/pods/b?resourceVersion=0",
        "/api/v1/namespaces/default/pods?resourceVersion=1&resourceVersionMatch=NotOlderThan&limit=1",
    ] {
        let (direct, through) = both(&env, path, KUBECTL_TABLE).await;
        assert_eq!(through["kind"], "Table", "{path}");
        assert_eq!(direct, through, "{path}");
    }
    let (direct, through) = both(
        &env,
        "/api/v1/namespaces/default/pods?resourceVersion=0",
        "application/json;as=Table;v=v1beta1;g=meta.k8s.io",
    )
    .await;
    assert_eq!(through["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(direct, through);

    // The apiserver's 400 for a bad includeObject is the upstream's to give.
    let bad = env
        .http
        .request(
            http::Method::GET,
            "/api/v1/pods?resourceVersion=0&includeObject=All",
            &[("accept", KUBECTL_TABLE)],
            Vec::new(),
        )
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.source(), Some("upstream"));
}

/// Every built-in printer's column definitions, through the cache and from the simulator,
/// equal kube-apiserver 1.36's: printers.go `AddHandlers`, whose descriptions are the
/// fields' OpenAPI texts (`X{}.SwaggerDoc()["field"]`, k8s.io/api release-1.36), recorded
/// in tests/fixtures/printer-columns-1.36.json (its `source` says where each part is from).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_built_in_printers_columns_are_kube_apiserver_1_36s() {
    use watchgate::table::builtin::Printer;
    let fixture: Value =
        serde_json::from_str(include_str!("fixtures/printer-columns-1.36.json")).unwrap();
    let printers = fixture["printers"].as_array().unwrap();
    let group_of = |path: &str| -> String {
        match path.strip_prefix("/apis/") {
            Some(rest) => rest.split('/').next().unwrap().to_string(),
            None => String::new(),
        }
    };
    // The fixture covers every printer watchgate has.
    for p in Printer::ALL {
        assert!(
            printers.iter().any(|e| Printer::for_kind(
                &group_of(e["path"].as_str().unwrap()),
                e["kind"].as_str().unwrap()
            ) == Some(p)),
            "{p:?} has no recorded columns"
        );
    }
    let env = Env::gateway().await;
    let gw = env.url().to_string();
    for e in printers {
        let path = format!("{}?resourceVersion=0", e["path"].as_str().unwrap());
        wait_until_cached(&gw, &path, |_| true).await;
        let (direct, through) = both(&env, &path, KUBECTL_TABLE).await;
        assert_eq!(through["kind"], "Table", "{path}");
        let expected = &e["columnDefinitions"];
        assert_eq!(
            direct["columnDefinitions"], *expected,
            "{path}: the simulator's"
        );
        assert_eq!(
            through["columnDefinitions"], *expected,
            "{path}: the cache's"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resource_tables_follow_the_crd_columns() {
    let env = Env::gateway().await;
    let gw = env.url().to_string();
    let widgets = resource("example.com", "v1", "widgets");
    let rv = put_object(
        env.sim.handle(),
        widgets,
        "default",
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "w1", "namespace": "default", "creationTimestamp": OLD},
               "spec": {"color": "red", "size": 3},
               "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    let path = "/apis/example.com/v1/namespaces/default/widgets";
    wait_until_cached(&gw, &format!("{path}?resourceVersion=0"), rv_at_least(rv)).await;
    // The first Table request starts the gateway's cache of CRDs; until it has synced,
    // Tables of custom resources are forwarded.
    let list = format!("{path}?resourceVersion=0");
    support::wait_until(
        "the widgets Table is served from the cache",
        support::EVENT_TIMEOUT,
        || async {
            env.http
                .request(
                    http::Method::GET,
                    &list,
                    &[("accept", KUBECTL_TABLE)],
                    Vec::new(),
                )
                .await
                .source()
                == Some("cache")
        },
    )
    .await;
    let (direct, through) = both(&env, &list, KUBECTL_TABLE).await;
    assert_eq!(direct, through);
    let names: Vec<&str> = through["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Name", "Color", "Size", "Ready", "Age"]);

    // The CRD's columns change: the gateway's Tables follow as soon as its CRD cache sees
    // the update.
    let crds = resource("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    let mut crd = env
        .sim
        .handle()
        .store()
        .get(crds, "", "widgets.example.com")
        .expect("the simulator has the widgets CRD")
        .as_ref()
        .clone();
    crd["spec"]["versions"][0]["additionalPrinterColumns"] =
        json!([{"name": "Shade", "type": "string", "jsonPath": ".spec.color"}]);
    put_object(env.sim.handle(), crds, "", crd);
    support::wait_until(
        "the gateway's widgets Table has the CRD's new column",
        support::EVENT_TIMEOUT,
        || async {
            let resp = env
                .http
                .request(
                    http::Method::GET,
                    &list,
                    &[("accept", KUBECTL_TABLE)],
                    Vec::new(),
                )
                .await;
            resp.source() == Some("cache") && resp.json()["columnDefinitions"][1]["name"] == "Shade"
        },
    )
    .await;
    // A quiet resource's cache does not learn the global resourceVersion the CRD write
    // moved (docs/consistency.md): a widget write brings both answers to the same RV.
    let rv = put_object(
        env.sim.handle(),
        widgets,
        "default",
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "w2", "namespace": "default", "creationTimestamp": OLD},
               "spec": {"color": "blue", "size": 1}}),
    );
    wait_until_cached(&gw, &format!("{path}?resourceVersion=0"), rv_at_least(rv)).await;
    let (direct, through) = both(&env, &list, KUBECTL_TABLE).await;
    assert_eq!(direct, through);
}

/// `kubectl get -w`'s watch (from the list's resourceVersion, as Table rows) is served from
/// the cache with the simulator's events: the first carries the column definitions, the
/// later ones `"columnDefinitions": null`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_watches_match_the_simulator() {
    use support::watch::open_with;
    let env = Env::gateway().await;
    let gw = env.url().to_string();
    let pods = resource("", "v1", "pods");
    let start = put_object(env.sim.handle(), pods, "default", printed_pod("a", "n1"));
    wait_until_cached(&gw, "/api/v1/pods?resourceVersion=0", rv_at_least(start)).await;

    let path = format!("/api/v1/namespaces/default/pods?watch=true&resourceVersion={start}");
    let accept = [("accept", KUBECTL_TABLE)];
    let mut direct = open_with(env.direct_http.base(), &path, &accept).await;
    let mut through = open_with(&gw, &path, &accept).await;
    through.assert_from_cache();
    put_object(env.sim.handle(), pods, "default", printed_pod("b", "n2"));
    put_object(env.sim.handle(), pods, "default", printed_pod("a", "n3"));
    let de = direct.take(2, "the simulator's Table events").await;
    let te = through.take(2, "the gateway's Table events").await;
    for (x, y) in de.iter().zip(&te) {
        assert_eq!(x.json, y.json);
    }
    assert!(te[0].object()["columnDefinitions"].is_array());
    assert!(te[1].object()["columnDefinitions"].is_null());
    assert_eq!(te[1].object()["rows"][0]["cells"][0], "a");
}

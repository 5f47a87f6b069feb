//! Request paths as kube-apiserver matches them (issue 16 item 7, src/apipath.rs): the
//! gateway answers from its cache only paths whose meaning cannot depend on how they are
//! routed, forwards every other one, and the answer is the simulator's own, byte for byte.

mod support;

use std::net::SocketAddr;

use bytes::Bytes;
use http::StatusCode;
use serde_json::json;

use support::raw;
use support::servers::{cluster_config, gateway};
use support::watch::{put_pod, wait_until_cached};

struct Answer {
    status: StatusCode,
    content_type: String,
    source: Option<String>,
    body: Bytes,
}

async fn get(addr: SocketAddr, path: &str) -> Answer {
    let (parts, body) = raw::get(addr, path).await;
    let header = |n: &str| {
        parts
            .headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    Answer {
        status: parts.status,
        content_type: header("content-type").unwrap_or_default(),
        source: header("x-watchgate-source"),
        body,
    }
}

fn addr(url: &str) -> SocketAddr {
    url.trim_start_matches("http://").parse().unwrap()
}

#[tokio::test]
async fn paths_are_matched_as_the_apiserver_matches_them() {
    let sim = watchgate::sim::start(cluster_config()).await.unwrap();
    put_pod(&sim, "ns1", "a", json!({"app": "web"}), "node-1", "Running");
    put_pod(&sim, "ns2", "b", json!({"app": "db"}), "node-1", "Running");
    let gw = gateway(&sim.url()).await;
    wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", |_| true).await;
    let (sim_addr, gw_addr) = (addr(&sim.url()), addr(&gw.url()));

    // (path, status, where the gateway's answer comes from, what it must contain)
    let cases: &[(&str, u16, &str, &str)] = &[
        (
            "/api/v1/pods?resourceVersion=0",
            200,
            "cache",
            "\"name\":\"b\"",
        ),
        // go-restful and RequestInfo both trim trailing slashes.
        (
            "/api/v1/pods/?resourceVersion=0",
            200,
            "cache",
            "\"name\":\"b\"",
        ),
        (
            "/api/v1/namespaces/ns1/pods//?resourceVersion=0",
            200,
            "cache",
            "\"name\":\"a\"",
        ),
        // Go decodes the whole path before it is split: %2F separates segments.
        (
            "/api/v1/namespaces%2Fns1%2Fpods?resourceVersion=0",
            200,
            "cache",
            "\"name\":\"a\"",
        ),
        (
            "/api/v1/namespaces/ns1/pods/%61?resourceVersion=0",
            200,
            "cache",
            "\"name\":\"a\"",
        ),
        // The case: the director gives `//api/...` to the non-API mux, whose
        // end is Go's http.NotFound.
        (
            "//api/v1/pods?resourceVersion=0",
            404,
            "upstream",
            "404 page not found\n",
        ),
        (
            "//api/v1/namespaces/ns1/pods/a?resourceVersion=0",
            404,
            "upstream",
            "404 page not found\n",
        ),
        (
            "/./api/v1/pods?resourceVersion=0",
            404,
            "upstream",
            "404 page not found\n",
        ),
        // go-restful: an empty segment never matches a static route segment.
        (
            "/api//v1/pods?resourceVersion=0",
            404,
            "upstream",
            "the server could not find the requested resource",
        ),
        (
            "/api/v1//pods?resourceVersion=0",
            404,
            "upstream",
            "the server could not find the requested resource",
        ),
        (
            "/api/v1/namespaces/ns1//pods?resourceVersion=0",
            404,
            "upstream",
            "the server could not find the requested resource",
        ),
        (
            "/api/v1/pods/../nodes?resourceVersion=0",
            404,
            "upstream",
            "the server could not find the requested resource",
        ),
        // ... but it does match a parameter: an empty {namespace} is no namespace at all.
        (
            "/api/v1/namespaces//pods?resourceVersion=0",
            200,
            "upstream",
            "\"name\":\"b\"",
        ),
        // A namespaced type has no route by name outside a namespace.
        (
            "/api/v1/pods/a?resourceVersion=0",
            404,
            "upstream",
            "the server could not find the requested resource",
        ),
        (
            "/api/v1/watch/pods/a?resourceVersion=0",
            404,
            "upstream",
            "the server could not find the requested resource",
        ),
        // Names the storage layer refuses, and an empty {name}.
        (
            "/api/v1/namespaces/ns1/pods/..?resourceVersion=0",
            400,
            "upstream",
            "Name parameter invalid: \\\"..\\\": may not be '..'",
        ),
        (
            "/api/v1/namespaces/ns1/pods/a%25b?resourceVersion=0",
            400,
            "upstream",
            "Name parameter invalid: \\\"a%b\\\": may not contain '%'",
        ),
        (
            "/api/v1/namespaces/ns1/pods//status?resourceVersion=0",
            400,
            "upstream",
            "name must be provided",
        ),
        // A `%` that is not an escape: Go's server refuses the request line itself.
        (
            "/api/v1/pods%zz?resourceVersion=0",
            400,
            "upstream",
            "400 Bad Request",
        ),
    ];
    for &(path, status, source, needle) in cases {
        let direct = get(sim_addr, path).await;
        let through = get(gw_addr, path).await;
        let body = String::from_utf8_lossy(&through.body);
        assert_eq!(through.status.as_u16(), status, "{path}: {body}");
        assert_eq!(through.source.as_deref(), Some(source), "{path}");
        assert!(body.contains(needle), "{path}: {needle:?} not in {body}");
        assert_eq!(direct.status, through.status, "{path}");
        assert_eq!(direct.content_type, through.content_type, "{path}");
        if status == 200 {
            let items = |b: &Bytes| {
                serde_json::from_slice::<serde_json::Value>(b).unwrap()["items"].clone()
            };
            assert_eq!(items(&direct.body), items(&through.body), "{path}");
        } else {
            assert_eq!(direct.body, through.body, "{path}");
        }
    }

    // Watches: the fan-out serves only canonical paths too.
    let resp = raw::h1_get(gw_addr, "//api/v1/pods?watch=1&resourceVersion=0").await;
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.headers()["x-watchgate-source"], "upstream");
    let resp = raw::h1_get(gw_addr, "/api/v1/pods/?watch=1&resourceVersion=0").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-watchgate-source"], "cache");
}

#[tokio::test]
async fn the_all_namespaces_path_takes_only_list_and_watch() {
    let sim = watchgate::sim::start(cluster_config()).await.unwrap();
    let gw = gateway(&sim.url()).await;
    for base in [sim.url(), gw.url()] {
        let http = support::Http::new(&base);
        for resp in [
            http.post_json(
                "/api/v1/pods",
                &json!({"metadata": {"name": "x", "namespace": "ns1"}}),
            )
            .await,
            http.delete("/api/v1/pods").await,
        ] {
            assert_eq!(resp.status, 405, "{base}");
            assert_eq!(
                resp.json(),
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": "the server does not allow this method on the requested resource",
                       "reason": "MethodNotAllowed", "details": {}, "code": 405})
            );
        }
    }
}

#[tokio::test]
async fn unknown_paths_are_404_as_their_handler_writes_it() {
    let sim = watchgate::sim::start(cluster_config()).await.unwrap();
    let a = addr(&sim.url());
    // A go-restful WebService claims these: its 404 is a Status.
    for path in [
        "/api/v2/pods",
        "/api/v1/foos",
        "/apis/apps/v2/deployments",
        "/apis/apps/v2",
    ] {
        let r = get(a, path).await;
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.content_type, "application/json", "{path}");
    }
    // Nothing claims these but the end of the delegation chain.
    for path in [
        "/random/path",
        "/apis/nope.io/v1/things",
        "/apis/nope",
        "/apix",
        "//api",
    ] {
        let r = get(a, path).await;
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.content_type, "text/plain; charset=utf-8", "{path}");
        assert_eq!(r.body, "404 page not found\n", "{path}");
    }
}

//! Malformed requests to the simulator's read paths: each gets kube-apiserver's Status
//! code, reason and message (and nothing panics or hangs).

mod support;

use serde_json::json;
use support::sim::*;
use support::watch::put_pod;

const NOT_FOUND: &str = "the server could not find the requested resource";

#[tokio::test]
async fn unknown_paths_and_resources_are_404_status() {
    let h = sim().await;
    for path in [
        "/api/v1/namespaces/ns1/foos",
        "/api/v1/foos",
        "/api/v2/pods",
        "/apis/apps/v2/deployments",
        "/api/v1/namespaces/ns1/pods/a/log/extra",
        "/api/v1/namespaces/x/nodes",
        "/api/v1/namespaces/ns1/pods/a/bogus",
        "/api/v1/namespaces/ns1/configmaps/a/status",
    ] {
        let (code, v) = get(&h, path).await;
        assert_eq!(code.as_u16(), 404, "{path}: {v}");
        assert_eq!(
            v,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": NOT_FOUND, "reason": "NotFound", "details": {}, "code": 404}),
            "{path}"
        );
    }
    // Paths no go-restful WebService claims (src/apipath.rs): an unknown group, a custom
    // resource the cluster does not define, anything outside /api and /apis. They reach
    // the end of the delegation chain, Go's http.NotFound.
    for path in [
        "/random/path",
        "/apis/nope.io/v1/things",
        "/apis/example.com/v1/namespaces/ns1/gadgets",
    ] {
        let resp = support::Http::new(&h.url()).get(path).await;
        assert_eq!(resp.status.as_u16(), 404, "{path}");
        assert_eq!(resp.text(), "404 page not found\n", "{path}");
    }
}

#[tokio::test]
async fn malformed_queries_get_the_apiservers_status() {
    let h = sim().await;
    put_pod(&h, "ns1", "a", json!({"app": "web"}), "node-1", "Running");
    let pods = "/api/v1/namespaces/ns1/pods";
    let cms = "/api/v1/namespaces/ns1/configmaps";
    let nodes = "/api/v1/nodes";
    let cases: Vec<(String, u16, &str, String)> = vec![
        (format!("{pods}?labelSelector=app%3D%3D%3D"), 400, "BadRequest",
         "unable to parse requirement: found '=', expected: identifier".into()),
        (format!("{pods}?labelSelector=a%20b"), 400, "BadRequest",
         "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt".into()),
        (format!("{pods}?labelSelector=app%20in%20(a"), 400, "BadRequest",
         "unable to parse requirement: found '', expected: ',' or ')'".into()),
        (format!("{pods}?labelSelector=,"), 400, "BadRequest",
         "found ',', expected: !, identifier, or 'end of string'".into()),
        (format!("{pods}?fieldSelector=foo"), 400, "BadRequest",
         "invalid selector: 'foo'; can't understand 'foo'".into()),
        (format!("{pods}?fieldSelector=spec.bogus%3Dx"), 400, "BadRequest",
         "field label not supported: spec.bogus".into()),
        (format!("{nodes}?fieldSelector=metadata.namespace%3Dx"), 400, "BadRequest",
         "field label not supported: metadata.namespace".into()),
        (format!("{cms}?fieldSelector=spec.x%3Dy"), 400, "BadRequest",
         "\"spec.x\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"".into()),
        // discovery.k8s.io registers no field label conversion either.
        ("/apis/discovery.k8s.io/v1/endpointslices?fieldSelector=addressType%3DIPv4".into(), 400, "BadRequest",
         "\"addressType\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"".into()),
        (format!("{pods}?resourceVersion=abc"), 400, "BadRequest",
         "invalid resource version: resourceVersion: Invalid value: \"abc\": strconv.ParseUint: parsing \"abc\": invalid syntax".into()),
        (format!("{pods}?resourceVersion=-1"), 400, "BadRequest",
         "invalid resource version: resourceVersion: Invalid value: \"-1\": strconv.ParseUint: parsing \"-1\": invalid syntax".into()),
        (format!("{pods}?resourceVersionMatch=NotOlderThan"), 422, "Invalid",
         "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided".into()),
        (format!("{pods}?resourceVersionMatch=Foo&resourceVersion=1"), 422, "Invalid",
         "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Unsupported value: \"Foo\": supported values: \"Exact\", \"NotOlderThan\", \"\"".into()),
        (format!("{pods}?resourceVersionMatch=Foo"), 422, "Invalid",
         "ListOptions.meta.k8s.io \"\" is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided, resourceVersionMatch: Unsupported value: \"Foo\": supported values: \"Exact\", \"NotOlderThan\", \"\"]".into()),
        (format!("{pods}?limit=1&continue=garbage!!"), 400, "BadRequest",
         "invalid continue token: continue key is not valid: illegal base64 data at input byte 7".into()),
        (format!("{pods}?limit=1&continue=aGVsbG8"), 400, "BadRequest",
         "invalid continue token: continue key is not valid: invalid character 'h' looking for beginning of value".into()),
        // storage.DecodeContinue's path-traversal defence and version check.
        (format!("{pods}?limit=1&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiIuLi9vdGhlci94In0"), 400, "BadRequest",
         "invalid continue token: continue key is not valid: ../other/x".into()),
        (format!("{pods}?limit=1&continue=eyJ2IjoidjEiLCJydiI6MSwic3RhcnQiOiJhIn0"), 400, "BadRequest",
         "invalid continue token: continue key is not valid: server does not recognize this encoded version v1".into()),
        (format!("{pods}?limit=abc"), 400, "BadRequest",
         "strconv.ParseInt: parsing \"abc\": invalid syntax".into()),
        (format!("{pods}?watch=1&timeoutSeconds=soon"), 400, "BadRequest",
         "strconv.ParseInt: parsing \"soon\": invalid syntax".into()),
        (format!("{pods}?watch=1&resourceVersion=abc"), 500, "",
         "resourceVersion: Invalid value: \"abc\": strconv.ParseUint: parsing \"abc\": invalid syntax".into()),
        (format!("{pods}/a?resourceVersion=x1"), 500, "",
         "resourceVersion: Invalid value: \"x1\": strconv.ParseUint: parsing \"x1\": invalid syntax".into()),
    ];
    for (path, code, reason, msg) in cases {
        let (c, v) = get(&h, &path).await;
        assert_eq!(c.as_u16(), code, "{path}: {v}");
        assert_eq!(v["kind"], "Status", "{path}");
        assert_eq!(v["status"], "Failure", "{path}");
        assert_eq!(v["code"], code, "{path}");
        assert_eq!(
            v.get("reason").and_then(|r| r.as_str()).unwrap_or(""),
            reason,
            "{path}"
        );
        assert_eq!(v["message"], msg.as_str(), "{path}");
    }
}

#[tokio::test]
async fn odd_requests_never_panic_or_hang() {
    let h = sim().await;
    for (path, want) in [
        // go-restful matches the empty {namespace}; RequestInfo names no namespace, so
        // this lists (and here watches) every namespace (src/apipath.rs).
        ("/api/v1/namespaces//pods", 200),
        // Go's lexer stops at NUL: an empty selector.
        ("/api/v1/namespaces/ns1/pods?labelSelector=%00", 200),
        ("/api/v1/namespaces/ns1/pods?fieldSelector=a%3Db%5C", 400),
        (
            "/api/v1/namespaces/ns1/pods?limit=99999999999999999999",
            400,
        ),
        ("/api/v1/namespaces/ns1/pods?limit=-5", 200),
        ("/api/v1/pods?watch=1&timeoutSeconds=-1", 200),
        ("/api/v1/pods?resourceVersion=18446744073709551616", 400),
    ] {
        let mut resp = watch(&h, path).await;
        assert_eq!(resp.status.as_u16(), want, "{path}");
        let body = resp.rest(std::time::Duration::from_secs(5)).await;
        if want >= 400 {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["kind"], "Status", "{path}");
            assert_eq!(v["code"], want, "{path}");
        }
    }
    // A `%` that is no escape: Go's server refuses the request before any handler.
    let resp = support::Http::new(&h.url())
        .get("/api/v1/namespaces/%ZZ/pods")
        .await;
    assert_eq!(resp.status.as_u16(), 400);
    assert_eq!(resp.text(), "400 Bad Request");
    // The server is still healthy.
    let (code, _) = get(&h, "/api/v1/namespaces/ns1/pods").await;
    assert_eq!(code.as_u16(), 200);
}

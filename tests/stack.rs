//! The API request path is a tower stack that parses each request exactly once
//! (`src/stack/`, `request::Parsed`).
//!
//! One test in this binary on purpose: it reads a process-wide counter of parses, which
//! other tests running in the same process (under `cargo test`) would move.

mod support;

use http::Method;
use support::servers::Env;
use support::watch::wait_until_cached;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_parsed_exactly_once_whatever_answers_it() {
    let env = Env::gateway().await;
    let gw = env.url().to_string();
    // Warm the pods cache first: its first reads are forwarded while it syncs.
    wait_until_cached(&gw, "/api/v1/pods?resourceVersion=0", |_| true).await;

    let before = watchgate::request::parsed_count();
    let mut sent = 0;
    let mut expect = |resp: support::http::Resp, code: u16, source: &str| {
        sent += 1;
        assert_eq!(resp.status.as_u16(), code, "{}", resp.text());
        assert_eq!(resp.source(), Some(source), "{}", resp.text());
    };
    // From the cache.
    expect(
        env.http.get("/api/v1/pods?resourceVersion=0").await,
        200,
        "cache",
    );
    expect(
        env.http
            .get("/api/v1/namespaces/default/pods/missing?resourceVersion=0")
            .await,
        404,
        "cache",
    );
    // A consistent read: from the cache once a probe of the upstream proves it fresh.
    expect(env.http.get("/api/v1/pods").await, 200, "cache");
    // Forwarded: a write, discovery, a bad option.
    expect(
        env.http
            .post_json(
                "/api/v1/namespaces/default/configmaps",
                &serde_json::json!({"metadata": {"name": "c1"}, "data": {"a": "b"}}),
            )
            .await,
        201,
        "upstream",
    );
    expect(env.http.get("/version").await, 200, "upstream");
    expect(
        env.http.get("/api/v1/pods?labelSelector=a%20in").await,
        400,
        "upstream",
    );
    // Refused by the gateway itself.
    let resp = env
        .http
        .request(Method::CONNECT, "/api/v1/pods", &[], Vec::new())
        .await;
    expect(resp, 405, "gateway");
    // A cached watch: its head is enough.
    let w = env
        .http
        .watch("/api/v1/pods?watch=true&resourceVersion=0")
        .await;
    assert_eq!(w.source(), Some("cache"));
    sent += 1;
    drop(w);

    assert_eq!(
        watchgate::request::parsed_count() - before,
        sent,
        "each request is parsed once by the stack's parse layer, and never again"
    );
}

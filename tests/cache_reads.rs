//! The watch cache (issue 4): RV="0" and NotOlderThan reads through the gateway are served
//! from one upstream list+watch per resource, and answer exactly what the simulator does.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use support::objects::{configmap, pod};
use support::servers::{cluster_config, gateway};
use support::wait::wait_for;
use support::watch::{delete_pod, put_pod, wait_until_cached};
use support::Http;
use watchgate::server::GatewayHandle;
use watchgate::sim::{start, SimHandle};

struct Answer {
    status: StatusCode,
    source: Option<String>,
    body: Value,
}

async fn call(base: &str, method: Method, path: &str, body: Option<Value>) -> Answer {
    let mut headers = vec![("accept", "application/json")];
    if body.is_some() {
        headers.push(("content-type", "application/json"));
    }
    let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let resp = Http::new(base).request(method, path, &headers, body).await;
    Answer {
        status: resp.status,
        source: resp.source().map(str::to_string),
        body: resp.json(),
    }
}

async fn get(base: &str, path: &str) -> Answer {
    call(base, Method::GET, path, None).await
}

/// Namespaces whose names are prefixes of each other, so that ordering and namespace
/// scoping are really exercised.
async fn seeded() -> (SimHandle, GatewayHandle) {
    let sim = start(cluster_config()).await.unwrap();
    let mut i = 0;
    for ns in ["a", "a-b", "ab", "default"] {
        for (name, app, tier, phase) in [
            ("web-1", "web", "fe", "Running"),
            ("web-2", "web", "be", "Pending"),
            ("db-1", "db", "be", "Running"),
        ] {
            i += 1;
            put_pod(
                &sim,
                ns,
                name,
                json!({"app": app, "tier": tier}),
                &format!("node-{}", i % 3),
                phase,
            );
        }
    }
    let gw = gateway(&sim.url()).await;
    (sim, gw)
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_reads_match_the_simulator() {
    let (sim, gw) = seeded().await;
    wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", |_| true).await;
    let current = sim.store().current_rv();

    let cases = [
        "/api/v1/pods?resourceVersion=0",
        "/api/v1/namespaces/a/pods?resourceVersion=0",
        "/api/v1/namespaces/a-b/pods?resourceVersion=0",
        "/api/v1/namespaces/empty/pods?resourceVersion=0",
        "/api/v1/pods?resourceVersion=0&labelSelector=app%3Dweb",
        "/api/v1/pods?resourceVersion=0&labelSelector=app+in+(web,db),tier!%3Dfe",
        "/api/v1/pods?resourceVersion=0&labelSelector=!tier",
        "/api/v1/pods?resourceVersion=0&labelSelector=app%3Dnothing",
        "/api/v1/pods?resourceVersion=0&fieldSelector=spec.nodeName%3Dnode-1",
        "/api/v1/pods?resourceVersion=0&fieldSelector=status.phase!%3DRunning",
        "/api/v1/namespaces/ab/pods?resourceVersion=0&fieldSelector=metadata.name%3Ddb-1",
        "/api/v1/pods?resourceVersion=0&resourceVersionMatch=NotOlderThan",
        &format!("/api/v1/pods?resourceVersion={current}"),
        &format!("/api/v1/pods?resourceVersion={current}&resourceVersionMatch=NotOlderThan"),
        "/api/v1/pods?resourceVersion=0&limit=2",
        "/api/v1/namespaces/a/pods?resourceVersion=0&limit=1&resourceVersionMatch=NotOlderThan",
        // NotOlderThan with a limit: the first page, its continue token (kube-apiserver's
        // format, relative to the list's prefix) and remainingItemCount, as the cacher cuts them.
        &format!("/api/v1/pods?resourceVersion={current}&resourceVersionMatch=NotOlderThan&limit=5"),
        &format!("/api/v1/namespaces/a/pods?resourceVersion={current}&resourceVersionMatch=NotOlderThan&limit=2"),
        // A page that holds everything has no token.
        &format!("/api/v1/namespaces/a/pods?resourceVersion={current}&resourceVersionMatch=NotOlderThan&limit=3"),
        "/api/v1/pods?resourceVersion=1&resourceVersionMatch=NotOlderThan&limit=100",
        // With a selector: no remainingItemCount; a token as soon as any item follows a
        // full page, even if none of them match (the next page is then empty).
        &format!("/api/v1/pods?resourceVersion={current}&resourceVersionMatch=NotOlderThan&limit=3&labelSelector=app%3Dweb"),
        &format!("/api/v1/pods?resourceVersion={current}&resourceVersionMatch=NotOlderThan&limit=4&labelSelector=app%3Ddb"),
        &format!("/api/v1/pods?resourceVersion={current}&resourceVersionMatch=NotOlderThan&limit=2&fieldSelector=spec.nodeName%3Dnode-1"),
        // Consistent reads (docs/consistency.md), paged or not: nothing was written since
        // the cache synced, so it is at the simulator's current RV.
        "/api/v1/pods",
        "/api/v1/pods?limit=2",
        "/api/v1/namespaces/a/pods?limit=2&labelSelector=app%3Dweb",
        // Exact, and the legacy Exact (RV=N with a limit), at the cache's own RV.
        &format!("/api/v1/pods?resourceVersion={current}&resourceVersionMatch=Exact"),
        &format!("/api/v1/pods?resourceVersion={current}&limit=2"),
    ];
    for path in cases {
        let direct = get(&sim.url(), path).await;
        let through = get(&gw.url(), path).await;
        assert_eq!(through.source.as_deref(), Some("cache"), "{path}");
        assert_eq!(direct.status, StatusCode::OK, "{path}: {}", direct.body);
        assert_eq!(through.status, direct.status, "{path}");
        assert_eq!(names(&through.body), names(&direct.body), "{path}");
        assert_eq!(through.body["kind"], direct.body["kind"], "{path}");
        assert_eq!(
            through.body["apiVersion"], direct.body["apiVersion"],
            "{path}"
        );
        assert_eq!(
            through.body["metadata"]["resourceVersion"], direct.body["metadata"]["resourceVersion"],
            "{path}"
        );
        // Items are the upstream's objects, byte for byte in content.
        assert_eq!(through.body["items"], direct.body["items"], "{path}");
        // The whole ListMeta: resourceVersion, continue, remainingItemCount.
        assert_eq!(through.body["metadata"], direct.body["metadata"], "{path}");
    }

    // Gets, including one that does not exist, and a cluster-scoped one.
    wait_until_cached(&gw.url(), "/api/v1/namespaces?resourceVersion=0", |_| true).await;
    for path in [
        "/api/v1/namespaces/default?resourceVersion=0",
        "/api/v1/namespaces/missing?resourceVersion=0",
        "/api/v1/namespaces/a/pods/web-1?resourceVersion=0",
        "/api/v1/namespaces/a/pods/missing?resourceVersion=0",
        "/api/v1/namespaces/b/pods/web-1?resourceVersion=0",
    ] {
        let direct = get(&sim.url(), path).await;
        let through = get(&gw.url(), path).await;
        assert_eq!(through.source.as_deref(), Some("cache"), "{path}");
        assert_eq!(
            (through.status, &through.body),
            (direct.status, &direct.body),
            "{path}"
        );
    }

    // What the cache must not answer goes upstream, and errors are the upstream's.
    for path in [
        // Exact states from before the cache's first list: no history to rebuild them.
        "/api/v1/pods?resourceVersion=1&limit=2",
        "/api/v1/pods?resourceVersion=2&resourceVersionMatch=Exact",
        "/api/v1/pods?resourceVersion=0&labelSelector=a%3D%3D%3Db",
        "/api/v1/pods?resourceVersion=0&fieldSelector=spec.bogus%3Dx",
        "/api/v1/pods?resourceVersion=abc",
        "/api/v1/pods?resourceVersionMatch=NotOlderThan",
        "/api/v1/pods?resourceVersion=0&resourceVersionMatch=Bogus",
        // Go's ParseUint takes no sign: the apiserver's 400 (tests/bad_input_properties.rs).
        "/api/v1/pods?resourceVersion=%2B1",
        // metadata.namespace is no field of a cluster-scoped type: the apiserver's 400.
        "/api/v1/namespaces?resourceVersion=0&fieldSelector=metadata.namespace%3Da",
    ] {
        let direct = get(&sim.url(), path).await;
        let through = get(&gw.url(), path).await;
        assert_eq!(through.source.as_deref(), Some("upstream"), "{path}");
        assert_eq!(through.status, direct.status, "{path}");
        if direct.status.is_success() {
            assert_eq!(names(&through.body), names(&direct.body), "{path}");
        } else {
            assert_eq!(through.body, direct.body, "{path}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_upstream_list_serves_many_readers_and_survives_the_upstream() {
    let (sim, gw) = seeded().await;
    wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", |_| true).await;
    let lists_before = sim.stats().lists("pods");
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let url = gw.url();
        tasks.push(tokio::spawn(async move {
            let a = get(&url, "/api/v1/pods?resourceVersion=0").await;
            assert_eq!(a.status, StatusCode::OK);
            assert_eq!(a.source.as_deref(), Some("cache"));
            names(&a.body).len()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 12);
    }
    assert_eq!(
        sim.stats().lists("pods"),
        lists_before,
        "100 cached lists must not reach the upstream"
    );

    // Stop the upstream: cached reads still answer, writes get a 503 Status.
    let url = gw.url();
    sim.shutdown().await;
    let a = get(&url, "/api/v1/namespaces/a/pods?resourceVersion=0").await;
    assert_eq!(
        (a.status, a.source.as_deref()),
        (StatusCode::OK, Some("cache"))
    );
    assert_eq!(names(&a.body), ["a/db-1", "a/web-1", "a/web-2"]);
    let w = call(
        &url,
        Method::POST,
        "/api/v1/namespaces/a/configmaps",
        Some(configmap("", "x").build()),
    )
    .await;
    assert_eq!(w.status, StatusCode::SERVICE_UNAVAILABLE, "{}", w.body);
    assert_eq!(w.body["reason"], "ServiceUnavailable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_older_than_reads_see_a_write_and_too_new_rvs_time_out() {
    let (sim, gw) = seeded().await;
    wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", |_| true).await;
    let created = call(
        &gw.url(),
        Method::POST,
        "/api/v1/namespaces/default/pods",
        Some(pod("", "fresh").build()),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let rv = created.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let a = get(
        &gw.url(),
        &format!(
            "/api/v1/namespaces/default/pods?resourceVersion={rv}&resourceVersionMatch=NotOlderThan"
        ),
    )
    .await;
    assert_eq!(
        (a.status, a.source.as_deref()),
        (StatusCode::OK, Some("cache"))
    );
    assert!(
        names(&a.body).contains(&"default/fresh".to_string()),
        "{:?}",
        names(&a.body)
    );
    let got = get(
        &gw.url(),
        &format!("/api/v1/namespaces/default/pods/fresh?resourceVersion={rv}"),
    )
    .await;
    assert_eq!(
        (got.status, got.source.as_deref()),
        (StatusCode::OK, Some("cache"))
    );
    assert_eq!(got.body["kind"], "Pod");
    // The simulator's scheduler stand-in may have bound and started the pod since: the
    // answer is not older than the write.
    let got_rv: u64 = got.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        got_rv >= rv.parse::<u64>().unwrap(),
        "{got_rv} older than {rv}"
    );

    let future = sim.store().current_rv() + 1_000_000;
    let started = Instant::now();
    let a = get(
        &gw.url(),
        &format!("/api/v1/pods?resourceVersion={future}&resourceVersionMatch=NotOlderThan"),
    )
    .await;
    let waited = started.elapsed();
    // The cache waits briefly for its own watch, then lets the upstream answer: an RV it
    // has not reached may belong to another resource's write (cache::serve::CATCH_UP_WAIT).
    assert_eq!(
        (a.status, a.source.as_deref()),
        (StatusCode::GATEWAY_TIMEOUT, Some("upstream"))
    );
    assert!(
        waited >= Duration::from_millis(2900),
        "answered after {waited:?}"
    );
    assert_eq!(a.body["reason"], "Timeout");
    assert_eq!(
        a.body["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    assert_eq!(a.body["details"]["retryAfterSeconds"], 1);
    assert!(a.body["message"].as_str().unwrap().starts_with(&format!(
        "Timeout: Too large resource version: {future}, current: "
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_on_the_upstream_watch_relists_and_the_cache_matches_the_simulator() {
    let (sim, gw) = seeded().await;
    wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", |_| true).await;
    // The reflector's upstream requests: a resync after the 410 is a list or a watch-list.
    let requests = || sim.stats().lists("pods") + sim.stats().watches("pods");
    let requests_before = requests();
    // The next watch the reflector opens gets 410; end the current one to make it reconnect.
    sim.faults().force_410_next_watch(1);
    sim.faults().drop_watches_now();
    // Meanwhile the world changes: one update, one delete, one create.
    put_pod(
        &sim,
        "a",
        "web-1",
        json!({"app": "web", "tier": "changed"}),
        "node-9",
        "Failed",
    );
    delete_pod(&sim, "ab", "db-1");
    put_pod(
        &sim,
        "zz",
        "new-1",
        json!({"app": "new"}),
        "node-1",
        "Running",
    );

    // The watch that got the 410, then the resync; then the cache has the simulator's items.
    let path = "/api/v1/pods?resourceVersion=0";
    wait_for(
        "the cache converges after the 410 (gateway's names, simulator's names, requests)",
        Duration::from_secs(20),
        || async {
            let direct = get(&sim.url(), path).await;
            let through = get(&gw.url(), path).await;
            let same = through.body["items"] == direct.body["items"];
            let after = requests() - requests_before;
            (same, names(&through.body), names(&direct.body), after)
        },
        |(same, _, _, after)| *same && *after >= 2,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_clients_read_the_cache_and_see_what_the_simulator_has() {
    let (sim, gw) = seeded().await;
    wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", |_| true).await;
    let direct = get(&sim.url(), "/api/v1/pods?resourceVersion=0").await;
    let lists_before = sim.stats().lists("pods");

    // kubectl get --raw sends `Accept: application/json, */*`: served from the cache.
    let kubectl = support::Kubectl::new(&gw.url());
    let raw = kubectl
        .ok(&["get", "--raw", "/api/v1/pods?resourceVersion=0"])
        .await;
    let raw: Value = serde_json::from_str(&raw).expect("kubectl printed JSON");
    assert_eq!(raw["items"], direct.body["items"]);
    assert_eq!(
        raw["metadata"]["resourceVersion"],
        direct.body["metadata"]["resourceVersion"]
    );
    assert_eq!(
        sim.stats().lists("pods"),
        lists_before,
        "kubectl reached the upstream"
    );

    // The Python client's list_pod_for_all_namespaces(resource_version="0").
    let out = support::python::run(
        "list_rv0.py",
        &[kubectl.kubeconfig().to_str().unwrap()],
        Duration::from_secs(60),
    )
    .await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    let py: Value = serde_json::from_str(out.stdout.trim()).expect("python printed JSON");
    assert_eq!(py["names"], json!(names(&direct.body)));
    assert_eq!(
        py["resourceVersion"],
        direct.body["metadata"]["resourceVersion"]
    );

    assert_eq!(
        sim.stats().lists("pods"),
        lists_before,
        "both clients must have been answered by the cache"
    );
}

/// NotOlderThan with `limit` is a first page from the cache, as kube-apiserver's cacher
/// serves it; its continue token is the apiserver's, and the pages after it come from the
/// snapshot the first page was cut from, as kube-apiserver 1.34+ serves them
/// (`ListFromCacheSnapshot`; docs/cache.md, "Paged lists"), even after writes. A token the
/// upstream issued continues from the cache too, and one the cache issued continues on
/// the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paged_lists_continue_from_the_first_pages_snapshot() {
    let (sim, gw) = seeded().await;
    wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", |_| true).await;
    let rv = sim.store().current_rv();
    let first =
        format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=NotOlderThan&limit=5");
    let lists_before = sim.stats().lists("pods");
    let through = get(&gw.url(), &first).await;
    assert_eq!(through.status, StatusCode::OK, "{}", through.body);
    assert_eq!(through.source.as_deref(), Some("cache"), "{first}");
    assert_eq!(
        sim.stats().lists("pods"),
        lists_before,
        "{first} must not reach the simulator"
    );
    let direct = get(&sim.url(), &first).await;
    assert_eq!(names(&through.body).len(), 5);
    assert_eq!(through.body["items"], direct.body["items"]);
    assert_eq!(through.body["metadata"], direct.body["metadata"]);
    assert_eq!(through.body["metadata"]["remainingItemCount"], 7);

    // The next page, with the token the cache issued: the cache serves it from the first
    // page's snapshot, even after writes.
    let token = through.body["metadata"]["continue"].as_str().unwrap();
    let all_then = get(&sim.url(), "/api/v1/pods?resourceVersion=0").await;
    put_pod(
        &sim,
        "a-b",
        "web-1",
        json!({"app": "changed"}),
        "node-9",
        "Failed",
    );
    put_pod(&sim, "ab", "aaa", json!({}), "node-9", "Running");
    let next = format!("/api/v1/pods?limit=5&continue={token}");
    let lists_before = sim.stats().lists("pods");
    let page2 = get(&gw.url(), &next).await;
    assert_eq!(page2.status, StatusCode::OK, "{}", page2.body);
    assert_eq!(page2.source.as_deref(), Some("cache"), "{next}");
    assert_eq!(
        page2.body["items"],
        Value::Array(all_then.body["items"].as_array().unwrap()[5..10].to_vec()),
        "the second page is consistent with the first"
    );
    assert_eq!(page2.body["metadata"]["resourceVersion"], rv.to_string());
    // The simulator (the cacher's paging) answers the same token with the same page.
    let direct2 = get(&sim.url(), &next).await;
    assert_eq!(page2.body, direct2.body, "{next}");
    // Even with resourceVersion=0 ("treated as Continue Token, Exact").
    let next0 = format!("/api/v1/pods?resourceVersion=0&limit=5&continue={token}");
    let page2b = get(&gw.url(), &next0).await;
    assert_eq!(page2b.source.as_deref(), Some("cache"), "{next0}");
    assert_eq!(names(&page2b.body), names(&page2.body));
    // The last page ends the list.
    let token2 = page2.body["metadata"]["continue"].as_str().unwrap();
    let page3 = get(
        &gw.url(),
        &format!("/api/v1/pods?limit=5&continue={token2}"),
    )
    .await;
    assert_eq!(page3.source.as_deref(), Some("cache"));
    assert_eq!(names(&page3.body), names(&all_then.body)[10..].to_vec());
    assert!(page3.body["metadata"].get("continue").is_none());
    assert_eq!(
        sim.stats().lists("pods"),
        lists_before + 1,
        "only the differential read of page 2 reached the simulator"
    );

    // A first page the upstream cut, at a state between the two writes that the cache
    // never served, continues from the cache, which rebuilds that state from its history.
    let between = rv + 1;
    let upstream_first = get(
        &sim.url(),
        &format!("/api/v1/pods?resourceVersion={between}&resourceVersionMatch=Exact&limit=5"),
    )
    .await;
    let token = upstream_first.body["metadata"]["continue"]
        .as_str()
        .unwrap();
    let next = format!("/api/v1/pods?limit=5&continue={token}");
    let ours = get(&gw.url(), &next).await;
    let theirs = get(&sim.url(), &next).await;
    assert_eq!(ours.source.as_deref(), Some("cache"));
    assert_eq!(
        ours.body["metadata"]["resourceVersion"],
        between.to_string()
    );
    assert_eq!(ours.body, theirs.body, "{next}");
}

/// The headers of an answer, without those that differ between any two answers (date,
/// framing) or that name the gateway's source.
fn header_names(h: &http::HeaderMap) -> Vec<String> {
    let mut names: Vec<String> = h
        .keys()
        .map(|k| k.as_str().to_string())
        .filter(|k| {
            !matches!(
                k.as_str(),
                "date" | "content-length" | "transfer-encoding" | "x-watchgate-source"
            )
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Answers from the cache carry the apiserver's headers: `Cache-Control: no-cache,
/// private` (`WithCacheControl`), an `Audit-Id` (`WithAuditInit`), the same Content-Type,
/// and nothing else: gets, lists, protobuf, a watch's head, and the 404 Status in the
/// encoding the client negotiated (protobuf for client-go's typed clients).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_answers_carry_the_apiservers_headers() {
    let (sim, gw) = seeded().await;
    wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", |_| true).await;
    let rv = sim.store().current_rv();
    let json = "application/json";
    let pb = "application/vnd.kubernetes.protobuf,application/json";
    for (path, accept) in [
        ("/api/v1/namespaces/a/pods/web-1?resourceVersion=0", json),
        ("/api/v1/namespaces/a/pods/nope?resourceVersion=0", json),
        ("/api/v1/pods?resourceVersion=0", json),
        ("/api/v1/namespaces/ab/pods?resourceVersion=0&limit=1", json),
        ("/api/v1/pods?resourceVersion=0", pb),
        ("/api/v1/namespaces/a/pods/nope?resourceVersion=0", pb),
        // Only `as=Table` acceptable: the Status is written as indented JSON (WriteRawJSON).
        (
            "/api/v1/namespaces/a/pods/nope?resourceVersion=0",
            "application/json;as=Table;g=meta.k8s.io;v=v1",
        ),
    ] {
        let headers = [("accept", accept)];
        let s = Http::new(&sim.url())
            .request(Method::GET, path, &headers, Bytes::new())
            .await;
        let g = Http::new(&gw.url())
            .request(Method::GET, path, &headers, Bytes::new())
            .await;
        assert_eq!(g.source(), Some("cache"), "{path} ({accept})");
        assert_eq!(g.status, s.status, "{path}");
        assert_eq!(
            g.headers["content-type"], s.headers["content-type"],
            "{path} ({accept})"
        );
        if !s.status.is_success() {
            assert_eq!(g.body, s.body, "{path} ({accept}): the Status");
        }
        assert_eq!(
            header_names(&g.headers),
            header_names(&s.headers),
            "{path} ({accept})"
        );
        for h in [&s.headers, &g.headers] {
            assert_eq!(h["cache-control"], "no-cache, private", "{path}");
            assert_eq!(h["audit-id"].len(), 36, "{path}: a UUID");
        }
    }
    let path = format!("/api/v1/namespaces/a/pods?watch=1&resourceVersion={rv}");
    let s = support::watch::open_ok(&sim.url(), &path).await;
    let g = support::watch::open_ok(&gw.url(), &path).await;
    assert_eq!(support::http::source(&g.headers), Some("cache"));
    assert_eq!(header_names(&g.headers), header_names(&s.headers), "{path}");
    assert_eq!(g.headers["cache-control"], "no-cache, private");
}

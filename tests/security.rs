//! A shared gateway (`--auth=delegated`, issue 17): clients are authenticated with the
//! upstream's TokenReview, reads the gateway answers itself are authorized with
//! SubjectAccessReview before any cache is read, forwarded requests impersonate the
//! client, and each user has its own limits. The upstream is the simulator enforcing the
//! demo policy (`support::secure`), so every refusal can be compared byte for byte with the
//! one the "apiserver" gives itself.

mod support;

use std::time::Duration;

use http::Method;
use serde_json::json;
use support::objects::configmap;
use support::secure::{Secure, ADMIN, ALICE, BOB, GATEWAY_USER};
use support::wait::wait_until;
use support::watch::{put_object, put_pod};
use watchgate::auth::SecurityConfig;
use watchgate::sim::resources::find;

const SECRETS_RV0: &str = "/api/v1/secrets?resourceVersion=0";

fn secret(ns: &str, name: &str) -> serde_json::Value {
    json!({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": name, "namespace": ns},
           "data": {"password": "aHVudGVyMg=="}})
}

/// Waits until `path`, read with `token`, is answered 200 from the gateway's cache.
async fn warm(env: &Secure, token: &str, path: &str) {
    let http = env.http(Some(token));
    wait_until(
        &format!("{path} is served from the cache"),
        Duration::from_secs(20),
        || async {
            let r = http.get(path).await;
            r.status == 200 && r.source() == Some("cache")
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_a_token_get_the_apiservers_401() {
    let env = Secure::start().await;
    let expected =
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
                    \"message\":\"Unauthorized\",\"reason\":\"Unauthorized\",\"code\":401}\n";
    for path in [
        "/api/v1/pods?resourceVersion=0",
        "/api/v1/pods",
        "/api/v1/namespaces/default/pods/x",
        "/version",
        "/apis",
    ] {
        for token in [None, Some("not-a-token")] {
            let r = env.http(token).get(path).await;
            assert_eq!(r.status, 401, "{path} with {token:?}: {}", r.text());
            assert_eq!(r.text(), expected, "{path}");
            assert_eq!(r.source(), Some("gateway"));
            assert_eq!(r.headers["content-type"], "application/json");
            // The apiserver's own answer, byte for byte.
            let direct = env.direct(token).get(path).await;
            assert_eq!(
                (direct.status, direct.text()),
                (r.status, r.text()),
                "{path}"
            );
        }
    }
    // A malformed Authorization header is no credential: 401 too, never a 500.
    let r = env
        .http(None)
        .request(
            Method::GET,
            "/api/v1/pods",
            &[("authorization", "Bearer")],
            Vec::new(),
        )
        .await;
    assert_eq!(r.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_requests_are_served_only_with_anonymous_auth() {
    let env = Secure::start_with(SecurityConfig {
        anonymous: true,
        ..Default::default()
    })
    .await;
    // No token: system:anonymous, which the policy allows /version and nothing else.
    let r = env.http(None).get("/version").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = env.http(None).get("/api/v1/pods?resourceVersion=0").await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(
        r.json()["message"],
        "pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" at the cluster scope"
    );
    // A bad token is not anonymous (kube's FailOnError union): 401.
    let r = env.http(Some("forged")).get("/version").await;
    assert_eq!(r.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_read_gets_the_apiservers_403_also_when_the_cache_holds_it() {
    let env = Secure::start().await;
    let secrets = find("", "v1", "secrets").unwrap();
    put_object(
        env.sim.handle(),
        secrets,
        "default",
        secret("default", "db"),
    );
    // The admin warms the secrets cache.
    warm(&env, ADMIN, SECRETS_RV0).await;
    let cached = env.http(Some(ADMIN)).get(SECRETS_RV0).await;
    assert!(
        cached.text().contains("aHVudGVyMg=="),
        "the cache holds the secret"
    );

    for path in [
        SECRETS_RV0,
        "/api/v1/namespaces/default/secrets?resourceVersion=0",
        "/api/v1/namespaces/default/secrets/db?resourceVersion=0",
        "/api/v1/namespaces/default/secrets/missing?resourceVersion=0",
        "/api/v1/namespaces/default/secrets?resourceVersion=0&fieldSelector=metadata.name%3Ddb",
        // Forwarded (a consistent read): the apiserver refuses it itself.
        "/api/v1/secrets",
    ] {
        let r = env.http(Some(ALICE)).get(path).await;
        let direct = env.direct(Some(ALICE)).get(path).await;
        assert_eq!(r.status, 403, "{path}: {}", r.text());
        assert_eq!(
            r.text(),
            direct.text(),
            "{path}: the apiserver's 403, byte for byte"
        );
        assert!(!r.text().contains("aHVudGVyMg=="));
        assert_eq!(r.headers["x-content-type-options"], "nosniff");
    }
    let r = env
        .http(Some(ALICE))
        .get("/api/v1/namespaces/default/secrets/db?resourceVersion=0")
        .await;
    assert_eq!(r.source(), Some("gateway"), "refused before the cache");
    assert_eq!(
        r.text(),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
         \"message\":\"secrets \\\"db\\\" is forbidden: User \\\"alice\\\" cannot get resource \
         \\\"secrets\\\" in API group \\\"\\\" in the namespace \\\"default\\\"\",\
         \"reason\":\"Forbidden\",\"details\":{\"name\":\"db\",\"kind\":\"secrets\"},\"code\":403}\n"
    );
    // A watch: the same 403, and not one event byte.
    let mut w = env
        .http(Some(ALICE))
        .watch_any("/api/v1/secrets?watch=true&resourceVersion=0")
        .await;
    assert_eq!(w.status, 403);
    let body = w.body_json().await;
    assert_eq!(body["reason"], "Forbidden");
    assert_eq!(
        body["message"],
        "secrets is forbidden: User \"alice\" cannot watch resource \"secrets\" in API group \"\" at the cluster scope"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_never_receives_an_event_of_a_watch_it_may_not_make() {
    let env = Secure::start().await;
    let sim = env.sim.handle();
    put_pod(sim, "team-a", "a1", json!({}), "n1", "Running");
    put_pod(sim, "team-b", "b1", json!({}), "n1", "Running");
    warm(&env, ALICE, "/api/v1/pods?resourceVersion=0").await;

    // Alice watches team-a from the cache.
    let path = "/api/v1/namespaces/team-a/pods?watch=true&resourceVersion=0";
    let mut alice = env.http(Some(ALICE)).watch(path).await;
    alice.assert_from_cache();
    assert_eq!(alice.next("a1 ADDED").await.name(), "a1");

    // Bob may read team-b only: the same watch is a 403 and its body is the Status alone.
    let mut bob = env.http(Some(BOB)).watch_any(path).await;
    assert_eq!(bob.status, 403);
    put_pod(sim, "team-a", "a2", json!({}), "n1", "Running");
    assert_eq!(alice.next("a2 ADDED").await.name(), "a2");
    let rest = bob.rest(Duration::from_secs(5)).await;
    let text = String::from_utf8_lossy(&rest);
    assert_eq!(
        text,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
         \"message\":\"pods is forbidden: User \\\"bob\\\" cannot watch resource \\\"pods\\\" in API \
         group \\\"\\\" in the namespace \\\"team-a\\\"\",\"reason\":\"Forbidden\",\
         \"details\":{\"kind\":\"pods\"},\"code\":403}\n"
    );
    assert!(!text.contains("a1") && !text.contains("a2"));

    // Bob's own namespace is served to him from the same cache, with only its objects.
    let mut own = env
        .http(Some(BOB))
        .watch("/api/v1/namespaces/team-b/pods?watch=true&resourceVersion=0")
        .await;
    own.assert_from_cache();
    assert_eq!(own.next("b1 ADDED").await.name(), "b1");
    put_pod(sim, "team-a", "a3", json!({}), "n1", "Running");
    put_pod(sim, "team-b", "b2", json!({}), "n1", "Running");
    assert_eq!(
        own.next("b2 ADDED").await.name(),
        "b2",
        "no team-a event in between"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_user_is_never_answered_from_a_cache_another_user_warmed() {
    let env = Secure::start().await;
    put_pod(env.sim.handle(), "team-a", "a1", json!({}), "n1", "Running");
    put_pod(env.sim.handle(), "team-b", "b1", json!({}), "n1", "Running");
    warm(&env, ADMIN, "/api/v1/pods?resourceVersion=0").await;
    let bob = env.http(Some(BOB));
    for path in [
        "/api/v1/pods?resourceVersion=0",
        "/api/v1/namespaces/team-a/pods?resourceVersion=0",
        "/api/v1/namespaces/team-a/pods/a1?resourceVersion=0",
        "/api/v1/pods?watch=1&resourceVersion=0",
    ] {
        let r = bob.get(path).await;
        assert_eq!(r.status, 403, "{path}: {}", r.text());
        assert!(!r.text().contains("\"a1\"") || r.text().contains("is forbidden"));
    }
    let r = bob
        .get("/api/v1/namespaces/team-b/pods?resourceVersion=0")
        .await;
    assert_eq!((r.status.as_u16(), r.source()), (200, Some("cache")));
    let names: Vec<String> = r.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["b1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_writes_are_made_as_the_client() {
    let env = Secure::start().await;
    let cm = configmap("", "made-by-alice")
        .data(json!({"a": "b"}))
        .build();
    let r = env
        .http(Some(ALICE))
        .post_json("/api/v1/namespaces/default/configmaps", &cm)
        .await;
    assert_eq!(r.status, 201, "{}", r.text());
    let audit = env.sim.handle().sim().audit.records();
    let write = audit
        .iter()
        .find(|w| w.path == "/api/v1/namespaces/default/configmaps")
        .expect("the write is recorded");
    assert_eq!(
        write.user, "alice",
        "made as the client, not as the gateway"
    );
    assert_eq!(write.impersonator.as_deref(), Some(GATEWAY_USER));
    assert_eq!(write.groups, ["developers", "system:authenticated"]);
    assert_eq!(write.verb, "create");

    // Bob may not write: the apiserver refuses it as bob.
    let cm = configmap("", "by-bob").build();
    let r = env
        .http(Some(BOB))
        .post_json("/api/v1/namespaces/default/configmaps", &cm)
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(r.source(), Some("upstream"));
    assert_eq!(
        r.json()["message"],
        "configmaps is forbidden: User \"bob\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_own_impersonation_is_checked_then_applied() {
    let env = Secure::start().await;
    put_pod(env.sim.handle(), "team-a", "a1", json!({}), "n1", "Running");
    warm(&env, ADMIN, "/api/v1/pods?resourceVersion=0").await;
    // Alice may not impersonate.
    let r = env
        .http(Some(ALICE))
        .request(
            Method::GET,
            "/api/v1/pods?resourceVersion=0",
            &[("impersonate-user", "bob")],
            Vec::new(),
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        "users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    // The admin may (kubectl --as=bob): the read is then authorized as bob.
    let r = env
        .http(Some(ADMIN))
        .request(
            Method::GET,
            "/api/v1/pods?resourceVersion=0",
            &[("impersonate-user", "bob")],
            Vec::new(),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("User \"bob\""));
    // And a forwarded write as bob is made as bob.
    let cm = configmap("", "as-bob").build();
    let r = env
        .http(Some(ADMIN))
        .request(
            Method::POST,
            "/api/v1/namespaces/default/configmaps",
            &[
                ("impersonate-user", "bob"),
                ("content-type", "application/json"),
            ],
            serde_json::to_vec(&cm).unwrap(),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("User \"bob\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_are_cached_per_user_and_request() {
    let env = Secure::start().await;
    put_pod(env.sim.handle(), "team-b", "b1", json!({}), "n1", "Running");
    warm(&env, ADMIN, "/api/v1/pods?resourceVersion=0").await;
    let before = env.reviews();
    let bob = env.http(Some(BOB));
    for _ in 0..20 {
        let r = bob
            .get("/api/v1/namespaces/team-b/pods?resourceVersion=0")
            .await;
        assert_eq!((r.status.as_u16(), r.source()), (200, Some("cache")));
        let r = bob.get("/api/v1/pods?resourceVersion=0").await;
        assert_eq!(r.status, 403);
    }
    let after = env.reviews();
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1, 2),
        "one TokenReview for bob's token, one SubjectAccessReview per distinct request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_user_has_its_own_watch_limit() {
    let env = Secure::start_with(SecurityConfig {
        max_watches_per_user: 2,
        ..Default::default()
    })
    .await;
    put_pod(env.sim.handle(), "team-b", "b1", json!({}), "n1", "Running");
    warm(&env, ADMIN, "/api/v1/pods?resourceVersion=0").await;
    let path = "/api/v1/namespaces/team-b/pods?watch=true&resourceVersion=0";
    let bob = env.http(Some(BOB));
    let w1 = bob.watch(path).await;
    let _w2 = bob.watch(path).await;
    let r = bob.get(path).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.text(), "Too many requests, please try again later.\n");
    assert_eq!(r.headers["retry-after"], "1");
    assert_eq!(r.headers["content-type"], "text/plain; charset=utf-8");
    // Another user is not affected.
    let _alice = env.http(Some(ALICE)).watch(path).await;
    // Closing a watch frees its place.
    drop(w1);
    wait_until("bob may watch again", Duration::from_secs(10), || async {
        bob.watch_any(path).await.status == 200
    })
    .await;
}

/// A watch however `watch` is spelt is long-running to the per-user limits, as to
/// kube-apiserver's max-in-flight filter: it counts against the watch limit, never the
/// in-flight one (here 1, which a second open "short" request would exceed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_watch_counts_against_the_watch_limit() {
    let env = Secure::start_with(SecurityConfig {
        max_in_flight_per_user: 1,
        max_watches_per_user: 3,
        ..Default::default()
    })
    .await;
    warm(&env, ADMIN, "/api/v1/pods?resourceVersion=0").await;
    let bob = env.http(Some(BOB));
    let path = |w: &str| format!("/api/v1/namespaces/team-b/pods?resourceVersion=0&{w}");
    let mut open = Vec::new();
    for w in ["watch", "watch=", "watch=t"] {
        let watch = bob.watch_any(&path(w)).await;
        assert_eq!(watch.status, 200, "{w}");
        open.push(watch);
    }
    // The fourth watch is over the watch limit.
    let r = bob.get(&path("watch=True")).await;
    assert_eq!(r.status, 429);
    // Short requests still have their own place.
    assert_eq!(
        bob.get("/api/v1/namespaces/team-b/pods?resourceVersion=0")
            .await
            .status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_carries_an_audit_id() {
    let env = Secure::start().await;
    let http = env.http(Some(ALICE));
    let r = http.get("/api/v1/pods").await;
    assert!(r.headers.contains_key("audit-id"), "forwarded");
    let r = env.http(None).get("/api/v1/pods").await;
    let id = r.headers["audit-id"].to_str().unwrap();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let r = http
        .request(
            Method::GET,
            "/version",
            &[("audit-id", "client-chosen")],
            Vec::new(),
        )
        .await;
    assert_eq!(r.headers["audit-id"], "client-chosen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_decision_the_cache_does_not_answer() {
    // The gateway's identity may review tokens and impersonate, but not create
    // SubjectAccessReviews: every review fails, so reads are forwarded and the upstream
    // decides (as the client), never the cache.
    let policy = watchgate::sim::auth::DEMO_POLICY.replacen(
        "    impersonate: true\n    rules:\n      - verbs: [\"*\"]\n        resources: [\"*\"]",
        "    impersonate: true\n    rules:\n      - verbs: [\"*\"]\n        resources: [tokenreviews.authentication.k8s.io, pods, secrets]",
        1,
    );
    assert_ne!(
        policy,
        watchgate::sim::auth::DEMO_POLICY,
        "the policy was edited"
    );
    let policy = std::sync::Arc::new(watchgate::sim::auth::Policy::parse(&policy).unwrap());
    let env = Secure::start_with_policy(policy, SecurityConfig::default()).await;
    put_pod(env.sim.handle(), "team-a", "a1", json!({}), "n1", "Running");
    let path = "/api/v1/pods?resourceVersion=0";
    // An unauthorized read does not even start a cache; start it as `--cache pods`
    // would. It syncs (the gateway's own reads), but no read is authorized.
    let registry = env.gateway.handle().cache().unwrap().clone();
    registry.ensure_started("", "v1", "pods");
    wait_until("the pods cache syncs", Duration::from_secs(20), || {
        let synced = registry
            .get("", "v1", "pods")
            .is_some_and(|c| c.is_synced());
        async move { synced }
    })
    .await;
    let r = env.http(Some(ALICE)).get(path).await;
    assert_eq!((r.status.as_u16(), r.source()), (200, Some("upstream")));
    let r = env.http(Some(BOB)).get(path).await;
    assert_eq!((r.status.as_u16(), r.source()), (403, Some("upstream")));
    let r = env.direct(Some(BOB)).get(path).await;
    assert_eq!(r.status, 403, "the same answer as the apiserver's own");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_user_has_its_own_in_flight_limit() {
    let env = Secure::start_with(SecurityConfig {
        max_in_flight_per_user: 1,
        ..Default::default()
    })
    .await;
    let (alice, bob) = (env.http(Some(ALICE)), env.http(Some(BOB)));
    // Tokens reviewed first, so that only the requests themselves are slow below.
    assert_eq!(alice.get("/version").await.status, 200);
    assert_eq!(bob.get("/version").await.status, 200);
    // The upstream now takes 1.5 s per request: two requests sent together are both in
    // flight at the gateway (they arrive within that window), so alice's second is refused
    // at once, whichever it is, while bob's is not.
    env.sim
        .handle()
        .faults()
        .set_latency(Duration::from_millis(1500));
    let (a, b, c) = tokio::join!(
        alice.get("/version"),
        alice.get("/apis"),
        bob.get("/version")
    );
    let mut codes = [a.status.as_u16(), b.status.as_u16()];
    codes.sort();
    assert_eq!(codes, [200, 429], "one of alice's two is refused");
    assert_eq!(c.status, 200, "bob has his own budget");
    let r = if a.status == 429 { a } else { b };
    assert_eq!(r.text(), "Too many requests, please try again later.\n");
    assert_eq!(r.headers["retry-after"], "1");
    assert_eq!(r.source(), Some("gateway"));
    env.sim.handle().faults().set_latency(Duration::ZERO);
    assert_eq!(
        alice.get("/version").await.status,
        200,
        "her place was freed"
    );
}

/// kube-apiserver writes its 401 and 403 with `responsewriters.ErrorNegotiated`: a
/// client-go typed client (protobuf first in its Accept) gets the Status in protobuf.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_clients_get_the_401_and_403_in_protobuf() {
    use prost::Message;
    const CLIENT_GO: &str = "application/vnd.kubernetes.protobuf,application/json";
    let env = Secure::start().await;
    let secrets = find("", "v1", "secrets").unwrap();
    put_object(
        env.sim.handle(),
        secrets,
        "default",
        secret("default", "db"),
    );
    warm(&env, ADMIN, SECRETS_RV0).await;
    for (token, code, reason) in [(None, 401, "Unauthorized"), (Some(ALICE), 403, "Forbidden")] {
        let get = |http: support::Http| async move {
            http.request(
                Method::GET,
                SECRETS_RV0,
                &[("accept", CLIENT_GO)],
                Vec::new(),
            )
            .await
        };
        let through = get(env.http(token)).await;
        let direct = get(env.direct(token)).await;
        assert_eq!(through.status, code);
        assert_eq!(
            through.headers["content-type"],
            "application/vnd.kubernetes.protobuf"
        );
        assert_eq!(through.body, direct.body, "the apiserver's own bytes");
        let unknown = watchgate::proto::decode_unknown(&through.body).expect("a k8s envelope");
        let status = k8s_pb::apimachinery::pkg::apis::meta::v1::Status::decode(unknown.raw)
            .expect("a protobuf Status");
        assert_eq!(status.code, Some(code as i32));
        assert_eq!(status.reason.as_deref(), Some(reason));
        // The same Status as a JSON client's.
        let json = env.http(token).get(SECRETS_RV0).await.json();
        assert_eq!(status.message.as_deref(), json["message"].as_str());
    }
}

//! Real clients through a shared gateway (`--auth=delegated`) with bearer tokens (issue
//! 17's acceptance): a client with a token works, without one it gets the apiserver's 401,
//! and with a user that may not list Secrets the apiserver's 403, also when the gateway's
//! cache holds them.
//!
//! This gateway serves plain HTTP. kubectl 1.37 attaches a kubeconfig's credentials only
//! to TLS connections (clientcmd reads the user's auth info only when the transport is
//! TLS), so kubectl is used here for the 401 only; the authenticated cases use kube-rs and
//! the Python client, which send their token on any transport. kubectl with tokens and
//! client certificates through an HTTPS gateway: `tests/security_tls.rs`.

mod support;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use serde_json::json;
use support::secure::{Secure, ADMIN, ALICE};
use support::watch::{put_object, put_pod};
use support::EVENT_TIMEOUT;
use watchgate::sim::resources::find;

fn kube_client(env: &Secure, token: &str) -> Client {
    let mut config = kube::Config::new(env.gateway.url().parse().unwrap());
    config.auth_info.token = Some(token.to_string().into());
    Client::try_from(config).expect("a kube client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_without_a_token_gets_the_apiservers_401() {
    let env = Secure::start().await;
    let out = env.kubectl(None).run(&["get", "pods"]).await;
    let last = |s: &str| s.trim().lines().last().unwrap_or_default().to_string();
    let err = last(out.assert_failure());
    // client-go's words for a 401 on discovery.
    assert_eq!(
        err,
        "error: You must be logged in to the server (the server has asked for the client to provide credentials)"
    );
    // The same as against the apiserver itself.
    let direct = support::Kubectl::new(env.sim.url())
        .run(&["get", "pods"])
        .await;
    assert_eq!(last(direct.assert_failure()), err);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_with_a_token_works_through_the_gateway() {
    let env = Secure::start().await;
    put_pod(env.sim.handle(), "team-a", "a1", json!({}), "n1", "Running");
    let client = kube_client(&env, ALICE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "team-a");
    let list = pods
        .list(&ListParams::default())
        .await
        .expect("alice lists pods");
    assert_eq!(list.items.len(), 1);
    // A watch from the list's resourceVersion (served by the cache once it has synced).
    let rv = list.metadata.resource_version.unwrap();
    let mut events = pods
        .watch(&WatchParams::default().timeout(30), &rv)
        .await
        .expect("alice watches pods")
        .boxed();
    put_pod(env.sim.handle(), "team-a", "a2", json!({}), "n1", "Running");
    let ev = tokio::time::timeout(EVENT_TIMEOUT, events.next())
        .await
        .expect("an event in time")
        .expect("the stream is open")
        .expect("a decodable event");
    match ev {
        WatchEvent::Added(p) => assert_eq!(p.metadata.name.as_deref(), Some("a2")),
        other => panic!("expected ADDED a2, got {other:?}"),
    }
    // A write, made as alice.
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "k"}})).unwrap();
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("alice creates a configmap");
    let records = env.sim.handle().sim().audit.records();
    assert!(records
        .iter()
        .any(|r| r.user == "alice" && r.verb == "create"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_gets_the_apiservers_403_for_secrets_also_when_they_are_cached() {
    let env = Secure::start().await;
    let secrets = find("", "v1", "secrets").unwrap();
    put_object(
        env.sim.handle(),
        secrets,
        "default",
        json!({"kind": "Secret", "apiVersion": "v1",
               "metadata": {"name": "db", "namespace": "default"}, "data": {"p": "eA=="}}),
    );
    // The admin's read warms the gateway's secrets cache.
    support::wait::wait_until("secrets are cached", EVENT_TIMEOUT, || async {
        let r = env
            .http(Some(ADMIN))
            .get("/api/v1/secrets?resourceVersion=0")
            .await;
        r.status == 200 && r.source() == Some("cache")
    })
    .await;
    let admin: Api<Secret> = Api::namespaced(kube_client(&env, ADMIN), "default");
    let any = ListParams::default().match_any();
    assert_eq!(admin.list(&any).await.unwrap().items.len(), 1);

    let alice: Api<Secret> = Api::namespaced(kube_client(&env, ALICE), "default");
    let want = "secrets is forbidden: User \"alice\" cannot list resource \"secrets\" in API \
                group \"\" in the namespace \"default\"";
    // Forwarded (a consistent list), then from the cache (resourceVersion=0).
    for params in [ListParams::default(), any] {
        match alice.list(&params).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
                assert_eq!(status.message, want);
            }
            other => panic!("expected a 403, got {other:?}"),
        }
    }
    match alice.get("db").await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403),
        other => panic!("expected a 403, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_with_a_token_reads_what_its_user_may() {
    let env = Secure::start().await;
    put_pod(env.sim.handle(), "team-a", "a1", json!({}), "n1", "Running");
    let secrets = find("", "v1", "secrets").unwrap();
    put_object(
        env.sim.handle(),
        secrets,
        "default",
        json!({"kind": "Secret", "apiVersion": "v1",
               "metadata": {"name": "db", "namespace": "default"}, "data": {"p": "eA=="}}),
    );
    for path in [
        "/api/v1/secrets?resourceVersion=0",
        "/api/v1/pods?resourceVersion=0",
    ] {
        support::wait::wait_until("cached", EVENT_TIMEOUT, || async {
            let r = env.http(Some(ADMIN)).get(path).await;
            r.status == 200 && r.source() == Some("cache")
        })
        .await;
    }
    let alice = env.kubectl(Some(ALICE));
    let kubeconfig = alice.kubeconfig().to_str().unwrap().to_string();
    let out =
        support::python::run("secure_reads.py", &[&kubeconfig], support::COMMAND_TIMEOUT).await;
    let v: serde_json::Value = serde_json::from_str(out.assert_success()).unwrap();
    assert_eq!(
        v,
        json!({"pods": ["a1"], "secrets": {"status": 403, "reason": "Forbidden",
            "message": "secrets is forbidden: User \"alice\" cannot list resource \"secrets\" in API group \"\" at the cluster scope"}})
    );
}

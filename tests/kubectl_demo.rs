//! `watchgate demo` works as the README promises: kubectl pointed at the gateway sees a
//! seeded cluster, and `get -w` shows the churn.

mod support;

use std::net::IpAddr;

use support::{Kubectl, EVENT_TIMEOUT};
use watchgate::demo::{self, DemoArgs};

fn args(pods: usize, churn: f64) -> DemoArgs {
    DemoArgs {
        address: IpAddr::from([127, 0, 0, 1]),
        port: 0,
        namespaces: 3,
        nodes: 5,
        pods,
        pod_size: 4096,
        churn,
        secure: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_serves_a_seeded_cluster_through_the_gateway() {
    let demo = demo::start(&args(50, 0.0)).await.expect("demo starts");
    let kubectl = Kubectl::new(&demo.url());

    let out = kubectl.ok(&["get", "pods", "-A", "-o", "name"]).await;
    let pods = out.lines().filter(|l| l.starts_with("pod/")).count();
    assert_eq!(
        pods, 50,
        "the seeded pods, listed through the gateway:\n{out}"
    );
    let out = kubectl.ok(&["get", "nodes", "-o", "name"]).await;
    assert_eq!(out.lines().count(), 5, "seeded nodes:\n{out}");

    // Seeded pods are about the size asked for (the realistic-size promise of the demo).
    let http = support::Http::new(&demo.url());
    let list = http.get("/api/v1/pods?limit=10").await;
    let items = list.expect(200)["items"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(items.len(), 10);
    for item in &items {
        let size = serde_json::to_vec(item).unwrap().len();
        assert!(
            (2048..=8192).contains(&size),
            "a seeded pod should be ~4 KiB of JSON, this one is {size} B"
        );
    }

    for kind in ["namespaces", "deployments", "services", "configmaps"] {
        let out = kubectl.ok(&["get", kind, "-A", "-o", "name"]).await;
        assert!(!out.trim().is_empty(), "the demo seeds {kind}");
    }
    demo.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_churn_shows_up_in_kubectl_get_watch() {
    let demo = demo::start(&args(20, 20.0)).await.expect("demo starts");
    let kubectl = Kubectl::new(&demo.url());
    let mut watch = kubectl.spawn(&["get", "pods", "-A", "-w", "--output-watch-events"]);
    // The initial list comes as ADDED; churn then produces MODIFIED (or ADDED/DELETED)
    // events past the initial 20+ pods.
    let mut initial = 0;
    loop {
        let line = watch
            .expect_line("a watch line", EVENT_TIMEOUT, |_| true)
            .await;
        if line.starts_with("EVENT") {
            continue;
        }
        if line.starts_with("MODIFIED") || line.starts_with("DELETED") {
            break;
        }
        initial += 1;
        assert!(initial < 10_000, "no churn seen: {:?}", watch.seen());
    }
    watch.kill().await;
    demo.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secure_demo_authenticates_and_authorizes_its_clients() {
    let mut a = args(12, 0.0);
    a.secure = true;
    let demo = demo::start(&a).await.expect("the secure demo starts");
    let path = "/api/v1/pods?limit=1";
    let r = support::Http::new(&demo.url()).get(path).await;
    assert_eq!(r.status, 401, "no token: {}", r.text());
    let r = support::Http::with_token(&demo.url(), demo::ADMIN_TOKEN)
        .get(path)
        .await;
    assert_eq!(r.status, 200, "the admin: {}", r.text());
    let r = support::Http::with_token(&demo.url(), "alice-token")
        .get("/api/v1/secrets?resourceVersion=0")
        .await;
    assert_eq!(r.status, 403, "alice may not read secrets: {}", r.text());
    demo.shutdown().await;
}

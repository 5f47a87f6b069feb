//! Real clients watching through the gateway (issue 5, "What must be shown" 5): the Python
//! client's `watch.Watch().stream(..., resource_version=RV)` resumes from RV and receives
//! exactly the changes after it; `kubectl get pods -w` shows changes made after it started.
//! The Python watch and kubectl's JSON watch (`-o name`) carry a resourceVersion, so the
//! gateway must serve them from its cache: the simulator's watch count must not move (the
//! gateway's own upstream watch is the only one). kubectl's default output watches Table
//! rows, which the gateway may forward; that test checks only what the user sees.

mod support;

use serde_json::{json, Value};

use support::watch::{delete_pod, put_pod, rv_at_least, wait_until_cached};
use support::{python, Env, COMMAND_TIMEOUT, EVENT_TIMEOUT};

/// Env::gateway() with the gateway's pods cache synced up to the simulator's current RV.
async fn env() -> Env {
    let env = Env::gateway().await;
    wait_until_cached(
        env.url(),
        "/api/v1/pods?resourceVersion=0",
        rv_at_least(env.sim.handle().store().current_rv()),
    )
    .await;
    env
}

fn event(line: &str) -> (String, String, u64, String) {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    (
        v["event"].as_str().unwrap_or("").to_string(),
        v["name"].as_str().unwrap_or("").to_string(),
        v["rv"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0),
        v["phase"].as_str().unwrap_or("").to_string(),
    )
}

fn ev(t: &str, name: &str, rv: u64, phase: &str) -> (String, String, u64, String) {
    (t.to_string(), name.to_string(), rv, phase.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_watch_stream_resumes_from_a_resource_version() {
    let env = env().await;
    let h = env.sim.handle();
    let resume = put_pod(h, "ns1", "a", json!({}), "node-1", "Pending");
    let b = put_pod(h, "ns1", "b", json!({}), "node-1", "Pending");
    put_pod(h, "ns2", "elsewhere", json!({}), "node-1", "Pending");
    let a2 = put_pod(h, "ns1", "a", json!({}), "node-1", "Running");
    wait_until_cached(env.url(), "/api/v1/pods?resourceVersion=0", rv_at_least(a2)).await;
    let watches = h.stats().watches("pods");

    let kubeconfig = env.kubectl.kubeconfig().to_str().unwrap().to_string();
    let mut script = python::spawn(
        "watch_resume.py",
        &[&kubeconfig, "ns1", &resume.to_string(), "4"],
    );
    // From the history: exactly the changes after `resume`, in order.
    let mut got = Vec::new();
    for what in ["ADDED b (history)", "MODIFIED a (history)"] {
        let line = script
            .expect_line(what, COMMAND_TIMEOUT, |l| l.starts_with('{'))
            .await;
        got.push(event(&line));
    }
    assert_eq!(
        got,
        [
            ev("ADDED", "b", b, "Pending"),
            ev("MODIFIED", "a", a2, "Running")
        ]
    );
    // Then live changes.
    let d = delete_pod(h, "ns1", "b");
    let c = put_pod(h, "ns1", "c", json!({}), "node-1", "Running");
    for what in ["DELETED b (live)", "ADDED c (live)"] {
        let line = script
            .expect_line(what, EVENT_TIMEOUT, |l| l.starts_with('{'))
            .await;
        got.push(event(&line));
    }
    assert_eq!(
        got[2..],
        [
            ev("DELETED", "b", d, "Pending"),
            ev("ADDED", "c", c, "Running")
        ]
    );
    let out = script.wait(COMMAND_TIMEOUT).await;
    assert!(out.success(), "the script exits cleanly: {out}");
    assert_eq!(
        h.stats().watches("pods"),
        watches,
        "the Python watch (resource_version={resume}) must be served from the gateway's cache, \
         not forwarded to the simulator"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_pods_watch_shows_changes() {
    let env = env().await;
    let h = env.sim.handle();
    let rv = put_pod(h, "default", "first", json!({}), "node-1", "Pending");
    wait_until_cached(env.url(), "/api/v1/pods?resourceVersion=0", rv_at_least(rv)).await;
    let watches = h.stats().watches("pods");

    // The default output asks for Table rows (`Accept: application/json;as=Table;..`).
    let mut watch = env.kubectl.spawn(&[
        "get",
        "pods",
        "-n",
        "default",
        "-w",
        "--output-watch-events",
    ]);
    let header = watch
        .expect_line("the header", COMMAND_TIMEOUT, |_| true)
        .await;
    assert!(header.starts_with("EVENT"), "header: {header:?}");
    let line = watch
        .expect_line("ADDED first", EVENT_TIMEOUT, |_| true)
        .await;
    assert_eq!(cols(&line), ["ADDED", "first"], "{line:?}");

    // Changes made after kubectl started, by another client.
    put_pod(h, "default", "second", json!({}), "node-1", "Pending");
    let line = watch
        .expect_line("ADDED second", EVENT_TIMEOUT, |_| true)
        .await;
    assert_eq!(cols(&line), ["ADDED", "second"], "{line:?}");
    put_pod(h, "default", "first", json!({}), "node-1", "Running");
    let line = watch
        .expect_line("MODIFIED first", EVENT_TIMEOUT, |_| true)
        .await;
    assert_eq!(cols(&line), ["MODIFIED", "first"], "{line:?}");
    assert!(line.contains("Running"), "{line:?}");
    delete_pod(h, "default", "second");
    let line = watch
        .expect_line("DELETED second", EVENT_TIMEOUT, |_| true)
        .await;
    assert_eq!(cols(&line), ["DELETED", "second"], "{line:?}");
    assert!(
        watch.is_running(),
        "kubectl get -w keeps watching: {:?}",
        watch.seen()
    );
    watch.kill().await;
    // Its watch (from the list's resourceVersion, in Table rows) came from the cache.
    assert_eq!(
        h.stats().watches("pods"),
        watches,
        "kubectl get -w's Table watch must be served from the gateway's cache"
    );
}

/// `kubectl get -w -o name` asks for plain JSON (`Accept: application/json`, not a Table),
/// so its watch (from the list's RV) must be served from the gateway's cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_pods_watch_json_is_served_from_the_cache() {
    let env = env().await;
    let h = env.sim.handle();
    let rv = put_pod(h, "default", "first", json!({}), "node-1", "Pending");
    wait_until_cached(env.url(), "/api/v1/pods?resourceVersion=0", rv_at_least(rv)).await;
    let watches = h.stats().watches("pods");

    let mut watch = env
        .kubectl
        .spawn(&["get", "pods", "-n", "default", "-w", "-o", "name", "-v=6"]);
    let line = watch
        .expect_line("pod/first", COMMAND_TIMEOUT, |_| true)
        .await;
    assert_eq!(line, "pod/first");
    put_pod(h, "default", "second", json!({}), "node-1", "Pending");
    let line = watch
        .expect_line("pod/second", EVENT_TIMEOUT, |_| true)
        .await;
    assert_eq!(line, "pod/second");
    assert!(
        watch.is_running(),
        "kubectl get -w keeps watching: {:?}",
        watch.seen()
    );
    let stderr = watch.stderr();
    watch.kill().await;
    assert_eq!(
        h.stats().watches("pods"),
        watches,
        "kubectl's JSON watch must be served from the gateway's cache, not forwarded; its requests:\n{}",
        stderr
            .lines()
            .filter(|l| l.contains("GET"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// EVENT and NAME columns of a `get -w --output-watch-events` line.
fn cols(line: &str) -> Vec<&str> {
    line.split_whitespace().take(2).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_watch_stream_from_a_too_old_rv_raises_410_expired() {
    // The simulator's history is compacted past `old` before the gateway starts, so `old`
    // is too old for both; the client (timeout_seconds set: no retry) raises ApiException
    // with the ERROR event's code and "reason: message".
    let sim = support::servers::start_sim_with(support::servers::cluster_config()).await;
    let h = sim.handle();
    let old = put_pod(h, "ns1", "a", json!({}), "node-1", "Pending");
    let compacted = put_pod(h, "ns1", "a", json!({}), "node-1", "Running");
    h.store().compact(compacted);
    let gw = support::servers::start_gateway(sim.url()).await;
    wait_until_cached(
        gw.url(),
        "/api/v1/pods?resourceVersion=0",
        rv_at_least(compacted),
    )
    .await;
    let watches = h.stats().watches("pods");
    let want = json!({"error": 410,
                      "reason": format!("Expired: too old resource version: {old} ({compacted})")});
    for (url, who) in [(sim.url(), "simulator"), (gw.url(), "gateway")] {
        let kubectl = support::Kubectl::new(url);
        let kubeconfig = kubectl.kubeconfig().to_str().unwrap().to_string();
        let out = python::run(
            "watch_resume.py",
            &[&kubeconfig, "ns1", &old.to_string(), "1"],
            COMMAND_TIMEOUT,
        )
        .await;
        let line = out.stdout.lines().last().unwrap_or("").to_string();
        let got: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{who}: {e}: {out}"));
        assert_eq!(got, want, "{who}: {out}");
        assert_eq!(out.status.code(), Some(2), "{who}: {out}");
    }
    assert_eq!(
        h.stats().watches("pods"),
        watches + 1,
        "only the direct watch reached the simulator; the gateway answered from its cache"
    );
}

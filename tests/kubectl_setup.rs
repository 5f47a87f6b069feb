//! The test set-up itself: the venv's tools are the pinned versions, and the support
//! helpers the end-to-end tests rely on behave (timeouts fire, lines stream, kubeconfigs
//! are valid). If these fail, every end-to-end failure after them is suspect.

mod support;

use std::time::Duration;

use support::process::{self, Spawned};
use support::{tools, wait, Kubectl};
use tokio::process::Command;

#[tokio::test]
async fn kubectl_is_1_37_and_reads_our_kubeconfig() {
    tools::kubectl();
    let k = Kubectl::with_namespace("http://127.0.0.1:1", "ns-x");
    let out = k
        .ok(&[
            "config",
            "view",
            "--minify",
            "-o",
            "jsonpath={.clusters[0].cluster.server} {.contexts[0].context.namespace}",
        ])
        .await;
    assert_eq!(out, "http://127.0.0.1:1 ns-x");
}

#[tokio::test]
async fn kubectl_against_a_closed_port_fails_quickly_with_a_connection_error() {
    // Port 1 on loopback is closed: kubectl must fail (not hang) and say why.
    let k = Kubectl::new("http://127.0.0.1:1");
    let out = k.run(&["get", "pods", "--request-timeout=5s"]).await;
    let err = out.assert_failure();
    assert!(err.contains("connection refused"), "{out}");
}

#[tokio::test]
async fn python_client_is_pinned_version() {
    let out = process::run(
        {
            let mut c = Command::new(tools::python());
            c.args(["-c", "import kubernetes; print(kubernetes.__version__)"]);
            c
        },
        None,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(out.assert_success().trim(), "37.0.2");
    assert!(tools::python_scripts().join("list_watch.py").is_file());
}

#[tokio::test]
async fn spawned_lines_arrive_as_printed_and_stdin_round_trips() {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "echo ready; while read l; do echo \"got $l\"; done"]);
    let mut p = Spawned::start(cmd);
    assert_eq!(
        p.next_line(Duration::from_secs(10)).await.as_deref(),
        Some("ready")
    );
    p.write_stdin(b"one\n").await;
    p.expect_line("the echo", Duration::from_secs(10), |l| l == "got one")
        .await;
    assert!(p.is_running());
    p.close_stdin();
    let out = p.wait(Duration::from_secs(10)).await;
    assert!(out.success(), "{out}");
    assert_eq!(out.stdout, "ready\ngot one\n");
}

#[tokio::test]
#[should_panic(expected = "did not finish within")]
async fn run_times_out_instead_of_hanging() {
    let mut cmd = Command::new("sleep");
    cmd.arg("30");
    process::run(cmd, None, Duration::from_millis(200)).await;
}

#[tokio::test]
#[should_panic(expected = "timed out after")]
async fn wait_until_fails_with_its_description() {
    wait::wait_until("never", Duration::from_millis(100), || async { false }).await;
}

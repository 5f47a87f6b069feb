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
    let url = demo.url();
    assert!(url.starts_with("https://"), "{url}");
    let ca = demo.certs.as_ref().expect("its own CA").ca.clone();
    // Every kubectl line it prints runs as printed (a watch without -w), with the outcome
    // its comment announces.
    let text = demo::instructions(&a, &demo);
    let prefix = format!(
        "kubectl --server {url} --certificate-authority {} ",
        ca.display()
    );
    let kubectl = Kubectl::new(&url);
    let mut ran = 0;
    for line in text.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let (command, comment) = rest.split_once('#').unwrap_or((rest, ""));
        let mut argv: Vec<&str> = prefix.split_whitespace().skip(1).collect();
        argv.extend(command.split_whitespace());
        argv.retain(|a| *a != "-w");
        let out = kubectl.run(&argv).await;
        if comment.contains("403") {
            let err = out.assert_failure();
            assert!(
                err.contains("Error from server (Forbidden)"),
                "{line}: {err}"
            );
        } else {
            out.assert_success();
        }
        ran += 1;
    }
    assert_eq!(ran, 4, "{text}");
    // The curl line: no token, the 401.
    assert!(text.contains(&format!(
        "curl -s --cacert {} {url}/api/v1/pods",
        ca.display()
    )));
    let cfg = support::tls::client_config(&ca, &[b"http/1.1"], None);
    let mut send = support::tls::h1(demo.gateway.addr(), cfg).await;
    let resp = send
        .send_request(support::tls::get("/api/v1/pods", None))
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let dir = ca.parent().unwrap().to_path_buf();
    demo.shutdown().await;
    assert!(!dir.exists(), "the demo's certificates are removed");
}

/// Every command the demo prints works as printed, while churn creates and deletes pods
/// around the one the examples name (issue 16 item 7: they named a `churn-N` pod, which
/// was gone by the time a newcomer typed the command).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_commands_work() {
    let a = args(30, 30.0);
    let demo = demo::start(&a).await.expect("demo starts");
    let text = demo::instructions(&a, &demo);
    // Churn creates and deletes `churn-N` pods: the examples must name a pod it leaves.
    assert!(!text.contains("churn-"), "{text}");
    let kubectl = Kubectl::new(&demo.url());
    let prefix = format!("kubectl --server {} ", demo.url());
    let mut forwarded: Option<u16> = None;
    let mut forwarder = None;
    let mut ran = 0;
    for line in text.lines().map(str::trim) {
        let (stdin, command) = match line.split_once(&prefix) {
            Some(("", rest)) => (None, rest),
            Some(("echo hello | ", rest)) => (Some("hello\n"), rest),
            _ if line.starts_with("curl ") => {
                // The local port is the demo's fixed 18080; the test forwarded a free one.
                let port = forwarded.expect("the port-forward line comes before curl");
                let answer = support::kubectl_scenarios::http_get_local(port, "/").await;
                assert!(
                    answer.ends_with(
                        "hello from pod ns-0/pod-0, container app, port 8080 (watchgate sim)\n"
                    ),
                    "{line}: {answer:?}"
                );
                ran += 1;
                continue;
            }
            _ => continue,
        };
        ran += 1;
        let argv: Vec<String> = command.split_whitespace().map(str::to_string).collect();
        match (
            argv[0].as_str(),
            argv.iter().any(|a| a == "-w" || a == "-f"),
        ) {
            ("port-forward", _) => {
                let local = format!("{}:8080", demo::EXAMPLE_LOCAL_PORT);
                let argv: Vec<String> = argv
                    .iter()
                    .map(|a| {
                        if *a == local {
                            ":8080".to_string()
                        } else {
                            a.clone()
                        }
                    })
                    .collect();
                let mut pf = kubectl.spawn(&argv);
                let l = pf
                    .expect_line("Forwarding from 127.0.0.1", support::EVENT_TIMEOUT, |l| {
                        l.starts_with("Forwarding from 127.0.0.1:")
                    })
                    .await;
                forwarded = l
                    .split(['-', ':', ' '])
                    .filter_map(|p| p.parse().ok())
                    .next();
                forwarder = Some(pf);
            }
            (_, true) => {
                // `get -w` and `logs -f`: they print, and keep running.
                let mut p = kubectl.spawn(&argv);
                p.expect_line(
                    &format!("output of `{line}`"),
                    support::EVENT_TIMEOUT,
                    |l| !l.is_empty(),
                )
                .await;
                assert!(
                    p.is_running(),
                    "{line} should keep following: {}",
                    p.stderr()
                );
                p.kill().await;
            }
            _ => {
                let out = match stdin {
                    Some(input) => kubectl.run_stdin(&argv, input.as_bytes()).await,
                    None => kubectl.run(&argv).await,
                };
                assert!(out.success(), "{line}: {out}");
                if stdin.is_some() {
                    assert_eq!(out.stdout, "hello\n", "{line}");
                } else {
                    assert!(!out.stdout.trim().is_empty(), "{line}");
                }
            }
        }
    }
    assert_eq!(ran, 8, "the demo prints eight example commands:\n{text}");
    if let Some(pf) = forwarder {
        pf.kill().await;
    }
    demo.shutdown().await;
}

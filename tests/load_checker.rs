//! Issue 7, "what must be shown" 2: the checker can fail. A deliberately broken relay sits
//! between `watchgate load` and the simulator and corrupts every watch stream in one way:
//! it drops an event (gap), repeats one (duplicate) or swaps two (reordering). Each run
//! must fail with that violation; the same relay passing streams through untouched must
//! pass (so the failures come from the faults, not from the relay). The binary exits
//! non-zero on a violation.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use watchgate::body::{self, Body};
use watchgate::load::checker::Violation;
use watchgate::load::{self, Plan};
use watchgate::sim::{start, SimConfig, SimHandle};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    None,
    Gap,
    Duplicate,
    Reorder,
}

/// The Nth event on the load tool's objects is the one the fault hits.
const HIT: usize = 3;

/// Applies the fault to the lines of one watch stream.
struct Corrupter {
    fault: Fault,
    seen: usize,
    held: Option<Bytes>,
}

impl Corrupter {
    fn line(&mut self, line: Bytes) -> Vec<Bytes> {
        if !line.windows(25).any(|w| w == b"watchgate.io/load-written") {
            return vec![line];
        }
        self.seen += 1;
        match (self.fault, self.seen) {
            (Fault::Gap, HIT) => vec![],
            (Fault::Duplicate, HIT) => vec![line.clone(), line],
            (Fault::Reorder, HIT) => {
                self.held = Some(line);
                vec![]
            }
            (Fault::Reorder, n) if n == HIT + 1 => vec![line, self.held.take().unwrap()],
            _ => vec![line],
        }
    }
}

type HttpClient = Client<HttpConnector, Body>;

async fn relay(
    client: HttpClient,
    upstream: String,
    fault: Fault,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (parts, incoming) = req.into_parts();
    let is_watch = parts.uri.query().unwrap_or("").contains("watch=1");
    let bytes = incoming.collect().await.unwrap().to_bytes();
    let mut up = Request::builder()
        .method(parts.method)
        .uri(format!("{upstream}{}", parts.uri.path_and_query().unwrap()));
    for (k, v) in parts.headers.iter() {
        if k != http::header::HOST {
            up = up.header(k, v);
        }
    }
    let resp = client
        .request(up.body(body::full(bytes)).unwrap())
        .await
        .unwrap();
    let (parts, mut incoming) = resp.into_parts();
    if !is_watch {
        let bytes = incoming.collect().await.unwrap().to_bytes();
        return Ok(Response::from_parts(parts, body::boxed(Full::new(bytes))));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(64);
    tokio::spawn(async move {
        let mut c = Corrupter {
            fault,
            seen: 0,
            held: None,
        };
        let mut buf = Vec::new();
        while let Some(Ok(frame)) = incoming.frame().await {
            let Ok(data) = frame.into_data() else {
                continue;
            };
            buf.extend_from_slice(&data);
            while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                let line = Bytes::from(buf.drain(..=nl).collect::<Vec<u8>>());
                for out in c.line(line) {
                    if tx.send(Ok(Frame::data(out))).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|x| (x, rx)) });
    Ok(Response::from_parts(
        parts,
        body::boxed(StreamBody::new(stream)),
    ))
}

/// A relay in front of `upstream` on a free loopback port.
async fn start_relay(upstream: String, fault: Fault) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (client, upstream) = (client.clone(), upstream.clone());
            tokio::spawn(async move {
                let svc =
                    service_fn(move |req| relay(client.clone(), upstream.clone(), fault, req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

async fn sim() -> SimHandle {
    start(SimConfig {
        bootstrap_namespaces: true,
        ..SimConfig::default()
    })
    .await
    .unwrap()
}

fn args(server: &str, namespace: &str) -> Vec<String> {
    [
        "watch-fanout",
        "--server",
        server,
        "--namespace",
        namespace,
        "--watchers",
        "4",
        "--rate",
        "20",
        "--duration",
        "1s",
        "--drain-timeout",
        "3s",
        "--no-progress",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

async fn run_through(fault: Fault) -> load::Summary {
    let sim = sim().await;
    let relay = start_relay(sim.url().trim_end_matches('/').to_string(), fault).await;
    let a = load::parse(args(&format!("http://{relay}"), "load-check")).unwrap();
    let summary = load::execute(&Plan::from_scenario(&a.scenario))
        .await
        .unwrap();
    eprintln!("{fault:?}: {}", summary.table());
    sim.shutdown().await;
    summary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untouched_stream_passes() {
    let s = run_through(Fault::None).await;
    assert!(s.ok, "{:?}", s.violations);
    assert_eq!(s.violation_count, 0);
    assert!(
        s.writes >= HIT as u64 + 2,
        "too few writes to hit: {}",
        s.writes
    );
    assert_eq!(s.checked_events, s.writes * 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_event_is_a_gap() {
    let s = run_through(Fault::Gap).await;
    assert!(!s.ok);
    assert_eq!(
        s.violation_count, 4,
        "one gap per watcher: {:?}",
        s.violations
    );
    assert!(
        s.violations.iter().all(|v| matches!(
            v,
            Violation::Gap { expected, received, first_missing: Some(_), .. } if *received + 1 == *expected
        )),
        "{:?}",
        s.violations
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_event_is_a_duplicate() {
    let s = run_through(Fault::Duplicate).await;
    assert!(!s.ok);
    assert_eq!(s.violation_count, 4, "{:?}", s.violations);
    assert!(
        s.violations
            .iter()
            .all(|v| matches!(v, Violation::Duplicate { .. })),
        "{:?}",
        s.violations
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapped_events_are_a_reordering() {
    let s = run_through(Fault::Reorder).await;
    assert!(!s.ok);
    // The late event arrives after a newer one: reordered, and it is not counted as
    // received (so the span also misses it).
    assert!(
        s.violations
            .iter()
            .any(|v| matches!(v, Violation::Reordered { .. })),
        "{:?}",
        s.violations
    );
    assert!(
        s.violations
            .iter()
            .filter(|v| matches!(v, Violation::Reordered { .. }))
            .count()
            == 4,
        "{:?}",
        s.violations
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_exits_non_zero_on_a_violation() {
    let sim = sim().await;
    let relay = start_relay(sim.url().trim_end_matches('/').to_string(), Fault::Gap).await;
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_watchgate"));
    cmd.arg("load")
        .args(args(&format!("http://{relay}"), "load-exit"));
    let out = cmd.output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "exit 0 despite a gap:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("gap: expected"), "{stdout}");
    assert!(stdout.contains("FAILED"), "{stdout}");
    assert!(stderr.contains("stream violation"), "{stderr}");
    sim.shutdown().await;
}

//! No secrets in logs (issue 6), in both log formats at the most verbose level (trace for
//! every crate): a client's `Authorization: Bearer …`, watchgate's own upstream credential
//! (a kubeconfig bearer token), and the data of a Secret the gateway caches and serves
//! (get, list and watch from the cache) never appear in a log line.
//!
//! The upstream is a recording relay in front of the simulator, which shows that the
//! upstream token is really sent (so the checks are not vacuous).
//!
//! - JSON: the gateway in-process, every log line captured through the process-global
//!   subscriber (one in-process test in this binary). The same capture checks the
//!   start-up progress lines: "listing pods…", then "synced 1,200 pods (N MB) in T".
//! - Text: the `watchgate serve` binary, with `--kubeconfig` and `-v 9`, its stderr
//!   captured to the end.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use http::{Method, Request, Response};
use serde_json::json;
use support::stub::{handler, Stub};
use watchgate::cache::registry::CachePolicy;
use watchgate::config::GatewayConfig;
use watchgate::logging::{self, LogArgs, LogFormat};

use support::serve::Served;
use support::servers::{start_gateway_with, start_sim, SimServer};
use support::wait::wait_until;
use support::{Http, EVENT_TIMEOUT};

/// A client's token, sent through the gateway.
const TOKEN: &str = "secret-token-123";
/// watchgate's own upstream credential.
const UPSTREAM_TOKEN: &str = "upstream-token-7c1e9";
/// The Secret's data, before and after base64.
const SECRET_VALUE: &str = "hunter2-distinctive-4b8d";

fn secret_b64() -> String {
    base64::engine::general_purpose::STANDARD.encode(SECRET_VALUE)
}

/// Every string that must never be logged.
fn forbidden() -> [String; 4] {
    [
        TOKEN.to_string(),
        UPSTREAM_TOKEN.to_string(),
        SECRET_VALUE.to_string(),
        secret_b64(),
    ]
}

#[track_caller]
fn assert_no_secrets(logs: &str) {
    for needle in forbidden() {
        if let Some(line) = logs.lines().find(|l| l.contains(&needle)) {
            panic!("{needle:?} was logged: {line}");
        }
    }
}

/// A relay between the gateway and the simulator that records every `Authorization` it
/// sees and forwards the request unchanged (watch streams included).
async fn recording_relay(sim: &SimServer) -> (Stub, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let to = watchgate::upstream::Upstream::new(
        &kube::Config::new(sim.url().parse().unwrap()),
        Duration::from_secs(5),
    )
    .unwrap();
    let stub = Stub::start(handler(move |req: Request<hyper::body::Incoming>| {
        let (log, to) = (log.clone(), to.clone());
        async move {
            if let Some(v) = req.headers().get("authorization") {
                log.lock().unwrap().push(v.to_str().unwrap().to_string());
            }
            let (mut parts, body) = req.into_parts();
            parts.headers.remove("host");
            parts.version = http::Version::HTTP_11;
            // A relay, not the gateway's stack: it says the request's class itself, as
            // the gateway's forwarder does from its parsed request.
            let parsed = watchgate::request::Parsed::new(&parts.method, &parts.uri, &parts.headers);
            parts
                .extensions
                .insert(watchgate::upstream::Class::of(&parsed));
            match to
                .send(Request::from_parts(parts, watchgate::body::boxed(body)))
                .await
            {
                Ok(resp) => resp.map(watchgate::body::boxed),
                Err(e) => Response::builder()
                    .status(502)
                    .body(watchgate::body::full(e.to_string()))
                    .unwrap(),
            }
        }
    }))
    .await;
    (stub, seen)
}

/// A Secret with [`SECRET_VALUE`] in its data, written straight into the simulator.
async fn put_secret(sim: &SimServer) {
    let resp = Http::new(sim.url())
        .post_json(
            "/api/v1/namespaces/default/secrets",
            &json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "db-password"},
                    "data": {"password": secret_b64()}}),
        )
        .await;
    assert_eq!(resp.status, 201, "{}", resp.text());
}

/// Reads the Secret through `http` from the cache: a get, a list and a watch, each
/// carrying the client's bearer token, and each checked to hold the Secret's data.
async fn serve_the_secret_from_the_cache(http: &Http) {
    let bearer = format!("Bearer {TOKEN}");
    let headers = [
        ("authorization", bearer.as_str()),
        ("accept", "application/json"),
    ];
    let get = "/api/v1/namespaces/default/secrets/db-password?resourceVersion=0";
    let http_ref = http;
    let headers_ref = &headers;
    wait_until(
        "the Secret is served from the cache",
        EVENT_TIMEOUT,
        || async move {
            let resp = http_ref.request(Method::GET, get, headers_ref, "").await;
            resp.status == 200 && resp.source() == Some("cache")
        },
    )
    .await;
    let resp = http.request(Method::GET, get, &headers, "").await;
    assert_eq!(resp.json()["data"]["password"], secret_b64());
    let resp = http
        .request(
            Method::GET,
            "/api/v1/namespaces/default/secrets?resourceVersion=0",
            &headers,
            "",
        )
        .await;
    assert_eq!(
        resp.headers["x-watchgate-source"],
        "cache",
        "{}",
        resp.text()
    );
    assert_eq!(resp.json()["items"][0]["data"]["password"], secret_b64());
    let mut watch = http
        .watch("/api/v1/namespaces/default/secrets?watch=true&resourceVersion=0")
        .await;
    let event = watch.next("an event").await.json;
    assert_eq!(event["type"], "ADDED", "{event}");
    assert_eq!(event["object"]["data"]["password"], secret_b64());
}

/// The relay saw watchgate's own token on the upstream requests.
#[track_caller]
fn assert_upstream_token_sent(seen: &Mutex<Vec<String>>) {
    let seen = seen.lock().unwrap();
    let want = format!("Bearer {UPSTREAM_TOKEN}");
    assert!(
        !seen.is_empty() && seen.iter().all(|a| *a == want),
        "upstream requests carry {want:?}: {seen:?}"
    );
}

/// Collects everything the subscriber writes.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

impl Capture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_secret_data_never_reach_the_json_logs() {
    // The flags' most verbose level (trace for every crate), not an ambient RUST_LOG.
    std::env::remove_var("RUST_LOG");
    let capture = Capture::default();
    let args = LogArgs {
        log_format: LogFormat::Json,
        verbosity: 9,
    };
    tracing::subscriber::set_global_default(logging::subscriber(&args, capture.clone()))
        .expect("the only subscriber of this test binary");

    let sim = start_sim().await;
    let mut spec = watchgate::sim::seed::SeedSpec::per_type(0, 1024);
    spec.namespaces = 3;
    spec.pods = 1200;
    watchgate::sim::seed::seed_store(sim.handle().store(), &spec);
    put_secret(&sim).await;
    let (relay, seen) = recording_relay(&sim).await;
    let mut cfg = GatewayConfig::for_upstream_url(&relay.url()).unwrap();
    cfg.upstream.auth_info.token = Some(UPSTREAM_TOKEN.to_string().into());
    cfg.cache = Some(CachePolicy {
        prewarm: vec!["pods".into(), "secrets".into()],
        exclude: vec![],
    });
    let gw = start_gateway_with(cfg).await;
    let admin = Http::new(&format!("http://{}", gw.handle().admin_addr()));
    wait_until("the gateway is ready", EVENT_TIMEOUT, || {
        let admin = admin.clone();
        async move { admin.get("/readyz").await.status == 200 }
    })
    .await;

    let http = Http::new(gw.url());
    let bearer = format!("Bearer {TOKEN}");
    let auth = [
        ("authorization", bearer.as_str()),
        ("accept", "application/json"),
    ];
    // Forwarded, served from the cache, a write, and an error answer.
    for (method, path, body) in [
        (Method::GET, "/api/v1/namespaces/default/configmaps", ""),
        (Method::GET, "/api/v1/pods?resourceVersion=0", ""),
        (
            Method::POST,
            "/api/v1/namespaces/default/configmaps",
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1"}}"#,
        ),
        (Method::GET, "/api/v1/namespaces/default/nosuchthings", ""),
    ] {
        let mut headers = auth.to_vec();
        if !body.is_empty() {
            headers.push(("content-type", "application/json"));
        }
        let resp = http
            .request(method.clone(), path, &headers, body.to_string())
            .await;
        assert!(
            resp.status.as_u16() < 500,
            "{method} {path}: {}",
            resp.text()
        );
    }
    // And one to an upstream that is gone, which the gateway logs as a warning.
    let gone =
        start_gateway_with(GatewayConfig::for_upstream_url("http://127.0.0.1:1").unwrap()).await;
    let resp = Http::new(gone.url())
        .request(
            Method::GET,
            "/api/v1/namespaces/default/configmaps",
            &auth,
            "",
        )
        .await;
    assert!(resp.status.as_u16() >= 500, "{}", resp.text());

    serve_the_secret_from_the_cache(&http).await;
    assert_upstream_token_sent(&seen);

    let logs = capture.text();
    // Start-up progress, one line per step, counts with thousands separators.
    assert!(
        logs.contains("\"message\":\"listing pods…\""),
        "no 'listing pods…' line"
    );
    let synced = logs
        .lines()
        .find(|l| l.contains("\"message\":\"synced 1,200 pods ("))
        .unwrap_or_else(|| panic!("no 'synced 1,200 pods' line in:\n{logs}"));
    let message = synced
        .split("\"message\":\"")
        .nth(1)
        .and_then(|m| m.split('"').next())
        .unwrap();
    let rest = message.strip_prefix("synced 1,200 pods (").unwrap();
    let (size, time) = rest.split_once(") in ").expect("(size) in time");
    assert!(size.ends_with(" MB"), "{message}");
    assert!(time.ends_with(" ms") || time.ends_with(" s"), "{message}");
    // The capture saw the requests at trace level, so the check below is not vacuous.
    assert!(
        logs.contains("\"level\":\"TRACE\""),
        "no trace lines captured"
    );
    assert!(
        logs.contains("upstream failed"),
        "the upstream failure was not logged"
    );
    assert!(logs.lines().count() > 50, "too few log lines: {logs}");
    assert_no_secrets(&logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_secret_data_never_reach_the_text_logs() {
    let sim = start_sim().await;
    put_secret(&sim).await;
    let (relay, seen) = recording_relay(&sim).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters: [{{name: c, cluster: {{server: \"{}\"}}}}]\n\
             users: [{{name: u, user: {{token: {UPSTREAM_TOKEN}}}}}]\n\
             contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n",
            relay.url()
        ),
    )
    .unwrap();
    let gw = Served::start(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--cache=secrets",
        "-v",
        "9",
    ])
    .await;
    let admin = gw.admin();
    let admin_ref = &admin;
    wait_until("the gateway is ready", EVENT_TIMEOUT, || async move {
        admin_ref.get("/readyz").await.status == 200
    })
    .await;
    serve_the_secret_from_the_cache(&gw.http()).await;
    assert_upstream_token_sent(&seen);

    let logs = gw.terminate().await;
    // Text lines at trace level for every crate, so the check below is not vacuous.
    assert!(
        logs.lines()
            .any(|l| l.contains(" TRACE ") && l.contains("hyper")),
        "no trace lines from the HTTP stack:\n{logs}"
    );
    assert!(
        logs.lines()
            .any(|l| l.contains(" INFO ") && l.contains("synced 1 secrets (")),
        "no 'synced 1 secrets' line in text format:\n{logs}"
    );
    assert!(
        !logs.trim_start().starts_with('{'),
        "text format, not JSON:\n{logs}"
    );
    // Plain text in a pipe: no terminal colour codes.
    assert!(!logs.contains('\x1b'), "ANSI escapes in piped logs");
    assert_no_secrets(&logs);
}

//! No secrets in logs (issue 6): a request carrying `Authorization: Bearer …` goes through
//! the gateway (forwarded, cache-served, and to a failing upstream) while every log line,
//! at the most verbose level and in both formats' JSON variant, is captured; the token
//! never appears.
//!
//! The same capture checks the start-up progress lines: "listing pods…", then
//! "synced 1,200 pods (N MB) in T".
//!
//! One test in this binary: it installs the process-global tracing subscriber.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use http::Method;
use watchgate::cache::registry::CachePolicy;
use watchgate::config::GatewayConfig;
use watchgate::logging::{self, LogArgs, LogFormat};

use support::servers::{start_gateway_with, start_sim};
use support::wait::wait_until;
use support::{Http, EVENT_TIMEOUT};

const TOKEN: &str = "secret-token-123";

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
async fn bearer_tokens_never_reach_the_logs() {
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
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).unwrap();
    cfg.cache = Some(CachePolicy {
        prewarm: vec!["pods".into()],
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
    if let Some(line) = logs.lines().find(|l| l.contains(TOKEN)) {
        panic!("the bearer token was logged: {line}");
    }
    assert!(!logs.contains(TOKEN));
}

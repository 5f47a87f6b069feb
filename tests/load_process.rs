//! The `watchgate load` binary as users run it, against the `watchgate demo` binary.
//!
//! - Issue 7, "what must be shown" 1: `watchgate load watch-fanout --watchers 2000 --rate
//!   50 --duration 30s` against `watchgate demo` finishes with a correct summary, zero
//!   stream violations and a plot file. Here it runs scaled down to 200 watchers for 5 s
//!   (the rate is the issue's): the full size is ~2.5 million checked deliveries, which
//!   on CI's 2 shared cores, with debug builds, would take minutes of the whole machine.
//!   Every part of the path is the same (two real processes, loopback HTTP, the same
//!   checker, summary and plot); only the counts shrink. The full-size run is
//!   `scripts/bench acceptance`, whose figures are in docs/benchmarks.md.
//! - `--json` prints the summary as JSON with the documented fields, and `--metrics-url`
//!   fills in the target's CPU seconds and RSS from its `/metrics`.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::process::{run, Output, Spawned};
use support::Http;
use tokio::process::Command;

/// A `watchgate demo` process on free ports (killed when dropped).
struct Demo {
    _proc: Spawned,
    /// The gateway's URL, where kubectl (and the load tool) talk.
    url: String,
    /// The gateway's admin listener's base URL (`/metrics` is under it).
    admin: String,
}

impl Demo {
    /// Starts `watchgate demo --port 0` and waits for the line that prints the gateway's
    /// address, which the demo prints only once a list through the gateway succeeded.
    async fn start() -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_watchgate"));
        cmd.args(["demo", "--port", "0"])
            .env("RUST_LOG", "warn")
            .env("KUBECONFIG", "/nonexistent");
        let mut proc = Spawned::start(cmd);
        // `  gateway              http://127.0.0.1:PORT (admin: http://127.0.0.1:PORT/healthz)`
        let line = proc
            .expect_line("the demo's gateway address", Duration::from_secs(60), |l| {
                l.trim_start().starts_with("gateway ")
            })
            .await;
        let mut words = line.split_whitespace();
        let url = words.nth(1).expect("a URL after `gateway`").to_string();
        let admin = line
            .split("(admin: ")
            .nth(1)
            .and_then(|rest| rest.strip_suffix("/healthz)"))
            .unwrap_or_else(|| panic!("no admin address in {line:?}"))
            .to_string();
        Demo {
            _proc: proc,
            url,
            admin,
        }
    }
}

/// Runs the `watchgate load` binary with `args` (bounded: a hung run fails the test).
async fn load(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_watchgate"));
    cmd.arg("load").args(args).env("KUBECONFIG", "/nonexistent");
    run(cmd, None, Duration::from_secs(120)).await
}

/// The value after `key` in the summary table (`  stream violations          0`).
fn table_value<'a>(table: &'a str, key: &str) -> &'a str {
    table
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(key))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {key:?} line in the summary:\n{table}"))
}

/// What an XML parser (Python's, from the test venv) finds in an SVG: the root element,
/// every text, and the number of points of every polyline. Fails on a file that is not
/// well-formed XML.
async fn svg_contents(path: &Path) -> Value {
    let script = r#"
import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
texts = ["".join(t.itertext()).strip() for t in root.iter(ns + "text")]
lines = [len(p.get("points", "").split()) for p in root.iter(ns + "polyline")]
print(json.dumps({"root": root.tag, "texts": texts, "polylines": lines}))
"#;
    let mut cmd = Command::new(support::tools::python());
    cmd.args(["-c", script]).arg(path);
    let out = run(cmd, None, support::COMMAND_TIMEOUT).await;
    serde_json::from_str(out.assert_success()).expect("the script prints JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acceptance_watch_fanout_against_the_demo_binary_is_correct_and_plotted() {
    let demo = Demo::start().await;
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("fanout.svg");
    let out = load(&[
        "watch-fanout",
        "--server",
        &demo.url,
        "--watchers",
        "200",
        "--rate",
        "50",
        "--duration",
        "5s",
        "--no-progress",
        "--plot",
        plot.to_str().unwrap(),
    ])
    .await;
    let table = out.assert_success();

    assert_eq!(table_value(table, "stream violations"), "0", "{out}");
    assert_eq!(table_value(table, "result"), "ok");
    assert_eq!(table_value(table, "watchers"), "200");
    assert_eq!(table_value(table, "410 Gone"), "0");
    assert_eq!(table_value(table, "errors"), "none");
    // `N at 50/s (0 skipped: writer behind)`: 50 writes/s for 5 s; a loaded machine may
    // delay a few ticks, never most.
    let writes: u64 = table_value(table, "writes")
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a write count");
    assert!((150..=260).contains(&writes), "writes: {writes}");
    // Every watcher received every write: `events delivered  N (N checked), ...`.
    let delivered = table_value(table, "events delivered");
    let want = format!("{n} ({n} checked),", n = writes * 200);
    assert!(delivered.starts_with(&want), "{delivered:?}, want {want:?}");

    // The plot: well-formed SVG with both panels, each with its curves drawn.
    let svg = svg_contents(&plot).await;
    assert_eq!(svg["root"], "{http://www.w3.org/2000/svg}svg", "{svg}");
    let texts: Vec<&str> = svg["texts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for panel in ["delivery latency over the run", "delivery latency CDF"] {
        assert!(texts.contains(&panel), "no {panel:?} panel in {texts:?}");
    }
    // p50, p99 and max over the run (one point per second), and the CDF: four curves of
    // several points each (plotters draws a series as one polyline).
    let curves = svg["polylines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n.as_u64().unwrap() >= 3)
        .count();
    assert!(curves >= 4, "curves drawn: {}", svg["polylines"]);

    // The writer's pods were deleted at the end.
    let pods = Http::new(&demo.url)
        .get_json("/api/v1/namespaces/watchgate-load/pods")
        .await;
    assert_eq!(pods["items"].as_array().map(Vec::len), Some(0), "{pods}");
}

/// The keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    k.sort_unstable();
    k
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_has_the_documented_fields_and_metrics_url_fills_in_the_target_cost() {
    let demo = Demo::start().await;
    let metrics = format!("{}/metrics", demo.admin);
    let out = load(&[
        "watch-fanout",
        "--server",
        &demo.url,
        "--watchers",
        "20",
        "--rate",
        "20",
        "--duration",
        "3s",
        "--no-progress",
        "--json",
        "--metrics-url",
        &metrics,
    ])
    .await;
    // stdout is the JSON alone (for `| jq`); the table goes to stderr.
    let j: Value = serde_json::from_str(out.assert_success())
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {out}"));
    assert_eq!(table_value(&out.stderr, "result"), "ok", "{out}");

    // The schema, as docs/benchmarks.md documents it.
    let mut want = vec![
        "bookmarks",
        "checked_events",
        "delivery",
        "duration_s",
        "encoding",
        "errors",
        "events",
        "events_per_s",
        "gone_410",
        "h2_connections",
        "list_items",
        "list_items_max",
        "list_items_min",
        "list_latency",
        "list_mb_per_s",
        "list_pages",
        "list_workers",
        "lists",
        "lists_per_s",
        "load_cost",
        "ok",
        "protobuf_frames",
        "protobuf_lists",
        "protocol",
        "scenario",
        "sync_latency",
        "synced",
        "target",
        "target_cost",
        "target_samples",
        "upstream_requests_during_sync",
        "violation_count",
        "violations",
        "watch_connect_latency",
        "watch_list_informers",
        "watch_mb_per_s",
        "watch_requests",
        "watchers",
        "watchers_terminated",
        "write_latency",
        "write_rate",
        "writes",
        "writes_behind",
    ];
    want.sort_unstable();
    assert_eq!(keys(&j), want, "{j:#}");
    for latency in [
        "delivery",
        "list_latency",
        "write_latency",
        "watch_connect_latency",
    ] {
        assert_eq!(
            keys(&j[latency]),
            ["count", "max_ms", "mean_ms", "p50_ms", "p90_ms", "p99_ms"],
            "{latency}"
        );
    }
    assert_eq!(
        keys(&j["target_cost"]),
        [
            "cpu_seconds",
            "cpu_us_per_delivery",
            "cpu_us_per_write",
            "rss_end_bytes",
            "rss_peak_bytes",
            "rss_per_watcher_bytes",
            "rss_start_bytes",
        ]
    );

    assert_eq!(keys(&j["load_cost"]), ["cpu_seconds", "cpu_us_per_event"]);
    // The tool's own CPU over the window, from /proc/self: it received every event.
    assert!(
        j["load_cost"]["cpu_seconds"].as_f64().unwrap() > 0.0,
        "{j:#}"
    );
    assert!(j["load_cost"]["cpu_us_per_event"].as_f64().unwrap() > 0.0);

    // The run itself.
    assert_eq!(j["scenario"], "watch-fanout");
    assert_eq!(j["protocol"], "http1");
    assert_eq!(j["watchers"], 20);
    assert_eq!(j["ok"], true);
    assert_eq!(j["violation_count"], 0);
    assert_eq!(j["violations"], serde_json::json!([]));
    assert_eq!(j["errors"], serde_json::json!({}));
    let writes = j["writes"].as_u64().unwrap();
    assert!(writes > 0);
    assert_eq!(j["checked_events"].as_u64(), Some(20 * writes));
    assert_eq!(j["delivery"]["count"].as_u64(), Some(20 * writes));

    // --metrics-url: the demo's CPU seconds over the window and its RSS, from its
    // process_cpu_seconds_total and process_resident_memory_bytes. Without the flag
    // these are null (tests/load_scenarios.rs).
    let cost = &j["target_cost"];
    let num = |k: &str| {
        cost[k]
            .as_f64()
            .unwrap_or_else(|| panic!("target_cost.{k} is not a number: {cost}"))
    };
    // The exporter's process_cpu_seconds_total counts whole seconds (the metrics crate's
    // counters are integers), so over this 3 s window it may well read 0: a number, not
    // n/a, is what the flag adds. (--target-pid reads /proc to the tick.)
    assert!(num("cpu_seconds") >= 0.0, "{cost}");
    assert!(num("cpu_us_per_delivery") >= 0.0 && num("cpu_us_per_write") >= 0.0);
    for rss in ["rss_start_bytes", "rss_end_bytes", "rss_peak_bytes"] {
        assert!(num(rss) > 1e6, "{rss}: {cost}");
    }
    assert!(num("rss_peak_bytes") >= num("rss_end_bytes"));
    num("rss_per_watcher_bytes");
    // One sample a second during the window, each seeing the 20 watchers connected
    // (`watchgate_watchers`).
    let samples = j["target_samples"].as_array().expect("samples");
    assert!(samples.len() >= 2, "{samples:?}");
    for s in samples {
        assert_eq!(keys(s), ["cpu_seconds", "rss_bytes", "watchers"]);
        assert_eq!(s["watchers"].as_f64(), Some(20.0), "{s}");
    }
    assert!(
        !table_value(&out.stderr, "target CPU").starts_with("n/a"),
        "{}",
        out.stderr
    );
}

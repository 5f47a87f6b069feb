//! The Grafana dashboard and the alert rules query only series that exist (issue 6): every
//! metric name in every query of deploy/grafana/watchgate.json and
//! deploy/prometheus/alerts.yaml must appear in a real `/metrics` scrape taken after a
//! scenario that exercises cached lists and gets, a forwarded request, a write, and watches
//! served from the cache (with bookmarks and a client that goes away). The dashboard is
//! also checked for the structure Grafana's importer requires.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use watchgate::cache::registry::CachePolicy;
use watchgate::config::GatewayConfig;

use support::objects::pod;
use support::servers::{start_gateway_with, start_sim, GatewayServer};
use support::wait::wait_until;
use support::{Http, EVENT_TIMEOUT};

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(repo("deploy/grafana/watchgate.json")).unwrap();
    serde_json::from_str(&text).expect("the dashboard is valid JSON")
}

/// Every PromQL expression of the dashboard: panel targets and template variable queries.
fn dashboard_queries(d: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push(
                t["expr"]
                    .as_str()
                    .expect("a target without expr")
                    .to_string(),
            );
        }
    }
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            out.push(v["definition"].as_str().unwrap().to_string());
        }
    }
    out
}

fn alert_queries() -> Vec<String> {
    let text = std::fs::read_to_string(repo("deploy/prometheus/alerts.yaml")).unwrap();
    let rule: Value = serde_saphyr::from_str(&text).expect("alerts.yaml is YAML");
    let mut out = Vec::new();
    for g in rule["spec"]["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            out.push(r["expr"].as_str().unwrap().to_string());
        }
    }
    assert!(!out.is_empty());
    out
}

/// Removes the spans between `open` and its matching `close` (with nesting).
fn strip_spans(s: &str, open: char, close: char) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in s.chars() {
        if c == open {
            depth += 1;
        } else if c == close && depth > 0 {
            depth -= 1;
        } else if depth == 0 {
            out.push(c);
        }
    }
    out
}

/// The metric names a PromQL expression reads: identifiers that are not functions,
/// aggregations, keywords, label names or values.
fn metric_names(expr: &str) -> BTreeSet<String> {
    // Strings, label matchers and range selectors carry no metric names.
    let mut s = String::new();
    let mut quote: Option<char> = None;
    for c in expr.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' || c == '`' => quote = Some(c),
            None => s.push(c),
        }
    }
    let s = strip_spans(&strip_spans(&s, '{', '}'), '[', ']');
    // Grouping clauses: `by (a, b)`, `without (…)`, `on (…)`, `ignoring (…)`,
    // `group_left (…)`, `group_right (…)` list label names.
    let mut cleaned = String::new();
    let mut rest = s.as_str();
    'outer: while !rest.is_empty() {
        for kw in [
            "by",
            "without",
            "on",
            "ignoring",
            "group_left",
            "group_right",
        ] {
            if let Some(after) = rest.strip_prefix(kw) {
                let boundary_before = cleaned
                    .chars()
                    .last()
                    .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':'));
                let t = after.trim_start();
                if boundary_before && t.starts_with('(') {
                    let close = t.find(')').expect("unbalanced grouping clause");
                    rest = &t[close + 1..];
                    cleaned.push(' ');
                    continue 'outer;
                }
            }
        }
        let c = rest.chars().next().unwrap();
        cleaned.push(c);
        rest = &rest[c.len_utf8()..];
    }
    let keywords = ["and", "or", "unless", "bool", "offset"];
    let mut names = BTreeSet::new();
    let chars: Vec<char> = cleaned.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_digit() || c == '.' {
            // A number (0.99, 1e3): skip it whole.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' || c == ':' || c == '$' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                || (i == start && chars[i] == '$')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            let is_call = j < chars.len() && chars[j] == '(';
            if !is_call && !keywords.contains(&word.as_str()) && !word.starts_with('$') {
                names.insert(word);
            }
            continue;
        }
        i += 1;
    }
    names
}

#[test]
fn metric_names_are_extracted_from_promql() {
    let names = metric_names(
        "histogram_quantile(0.99, sum by (le, source) (rate(a_seconds_bucket{x=~\"$pod\", y=\"b\"}[$__rate_interval])))\n / on (pod) group_left (node) b_total > 0.5 and c offset 5m",
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["a_seconds_bucket", "b_total", "c"]
    );
    let names = metric_names("label_values(watchgate_requests_total{namespace=~\"$ns\"}, pod)");
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["pod", "watchgate_requests_total"],
        "label_values' label argument is read as a name; the test filters it"
    );
}

/// The label argument of `label_values(metric, label)` is not a metric.
fn query_metric_names(q: &str) -> BTreeSet<String> {
    let mut names = metric_names(q);
    if let Some(inner) = q.strip_prefix("label_values(") {
        let label = inner
            .trim_end_matches(')')
            .rsplit(',')
            .next()
            .unwrap()
            .trim();
        names.remove(label);
    }
    names
}

#[test]
fn the_dashboard_is_valid_grafana_json() {
    let d = dashboard();
    assert_eq!(d["uid"], "watchgate");
    assert!(d["title"].is_string() && d["schemaVersion"].as_u64().unwrap() >= 30);
    let vars: BTreeMap<&str, &Value> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v))
        .collect();
    assert_eq!(vars["datasource"]["type"], "datasource");
    assert_eq!(vars["datasource"]["query"], "prometheus");
    let mut ids = BTreeSet::new();
    let mut titles = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        let id = p["id"].as_u64().expect("panel id");
        assert!(ids.insert(id), "duplicate panel id {id}");
        let g = &p["gridPos"];
        let (x, w) = (g["x"].as_u64().unwrap(), g["w"].as_u64().unwrap());
        assert!(x + w <= 24 && g["h"].as_u64().unwrap() > 0, "gridPos {g}");
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["type"], "timeseries");
        assert!(
            titles.insert(p["title"].as_str().unwrap()),
            "duplicate title"
        );
        assert_eq!(p["datasource"]["uid"], "${datasource}");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{} has no query", p["title"]);
        let refs: BTreeSet<&str> = targets
            .iter()
            .map(|t| t["refId"].as_str().unwrap())
            .collect();
        assert_eq!(refs.len(), targets.len(), "refIds unique in {}", p["title"]);
        // Only the template variables that exist are used.
        for t in targets {
            let expr = t["expr"].as_str().unwrap();
            for (i, _) in expr.match_indices('$') {
                let name: String = expr[i + 1..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    name == "__rate_interval" || vars.contains_key(name.as_str()),
                    "unknown variable ${name} in {expr}"
                );
            }
        }
    }
    // The panels the issue names.
    for wanted in [
        "Request rate by source",
        "Cache hit ratio",
        "Request latency",
        "Watchers",
        "Delivery (dispatch) latency",
        "Terminated watchers",
        "Upstream watches",
        "Reflector restarts",
        "Cache size",
        // What still reaches the apiserver and why (issue 26), and the consistency
        // check's verdicts (issue 27).
        "Forwarded requests by reason",
        "Consistency checks",
    ] {
        assert!(
            titles.iter().any(|t| t.starts_with(wanted)),
            "no panel {wanted:?} in {titles:?}"
        );
    }
}

async fn scenario_gateway(upstream: &str) -> GatewayServer {
    let mut cfg = GatewayConfig::for_upstream_url(upstream).expect("gateway config");
    cfg.cache = Some(CachePolicy {
        prewarm: vec!["pods".into()],
        exclude: vec![],
    });
    cfg.watch.bookmark_interval = Duration::from_millis(500);
    start_gateway_with(cfg).await
}

const PODS: &str = "/api/v1/namespaces/default/pods";

fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_and_alert_query_names_existing_metrics() {
    let mut wanted: BTreeMap<String, String> = BTreeMap::new();
    for q in dashboard_queries(&dashboard()) {
        for n in query_metric_names(&q) {
            wanted.entry(n).or_insert_with(|| format!("dashboard: {q}"));
        }
    }
    for q in alert_queries() {
        for n in metric_names(&q) {
            wanted
                .entry(n)
                .or_insert_with(|| format!("alerts.yaml: {q}"));
        }
    }
    assert!(wanted.len() > 20, "too few names extracted: {wanted:?}");

    let sim = start_sim().await;
    let direct = Http::new(sim.url());
    let resp = direct
        .post_json(PODS, &pod("default", "first").build())
        .await;
    assert_eq!(resp.status, 201, "{}", resp.text());
    let gw = scenario_gateway(sim.url()).await;
    let admin = Http::new(&format!("http://{}", gw.handle().admin_addr()));
    wait_until("/readyz answers 200", EVENT_TIMEOUT, || {
        let admin = admin.clone();
        async move { admin.get("/readyz").await.status == 200 }
    })
    .await;
    let http = Http::new(gw.url());

    // Lists and gets from the cache, a forwarded list, a forwarded write.
    let list = http.get(&format!("{PODS}?resourceVersion=0")).await;
    assert_eq!(list.status, 200);
    let rv = list.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        http.get(&format!("{PODS}/first?resourceVersion=0"))
            .await
            .status,
        200
    );
    assert_eq!(http.get(PODS).await.status, 200);
    assert_eq!(
        http.post_json(PODS, &pod("default", "second").build())
            .await
            .status,
        201
    );
    // Watches served from the cache, with bookmarks; one client goes away.
    let path = format!("{PODS}?watch=true&resourceVersion={rv}&allowWatchBookmarks=true");
    let mut staying = http.watch(&path).await;
    let leaving = http.watch(&path).await;
    let ev = staying.next("an event").await.json;
    assert_eq!(ev["object"]["metadata"]["name"], "second", "{ev}");
    drop(leaving);
    assert_eq!(
        direct
            .post_json(PODS, &pod("default", "third").build())
            .await
            .status,
        201
    );
    // The simulator schedules new pods (a MODIFIED follows each ADDED): read up to "third".
    while staying.next("an event").await.json["object"]["metadata"]["name"] != "third" {}

    // Every name must show up; series such as the bookmark counter appear when the first
    // bookmark is sent, so poll (bounded) and report what is missing.
    let missing = |text: &str| -> Vec<String> {
        let have = sample_names(text);
        wanted
            .iter()
            .filter(|(n, _)| !have.contains(*n))
            .map(|(n, q)| format!("{n}  (from {q})"))
            .collect()
    };
    support::wait::wait_for(
        "every metric name the dashboard queries is in /metrics (names missing)",
        EVENT_TIMEOUT,
        || async { missing(&admin.get("/metrics").await.text()) },
        |now_missing| now_missing.is_empty(),
    )
    .await;
    drop(staying);
}

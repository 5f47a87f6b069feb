//! The upstream side under faults (issue 6), through a `watchgate serve` process of its own
//! (so that `watchgate_upstream_up`, which is process-wide, is this gateway's alone):
//!
//! - `watchgate_upstream_watches` counts the reflector's open upstream watch stream: 1
//!   while it follows it, back to 1 after each reconnect, 0 once the upstream is gone;
//! - `watchgate_reflector_restarts_total` and `watchgate_reflector_relists_total` move by
//!   reason for a stream end, a failed watch (503) and a 410;
//! - `watchgate_upstream_up` is 1 while the upstream answers and 0 once it does not;
//! - each reconnect is one log line with its reason, and each relist one line with its
//!   reason (no second "listing …"/"synced …" pair after start-up).

mod support;

use serde_json::Value;

use support::metrics::sample;
use support::objects::configmap;
use support::serve::Served;
use support::servers::cluster_config;
use support::wait::wait_until;
use support::{Http, EVENT_TIMEOUT};

const CMS: &[(&str, &str)] = &[("group", ""), ("resource", "configmaps")];

async fn scrape(admin: &Http) -> String {
    let resp = admin.get("/metrics").await;
    assert_eq!(resp.status, 200, "/metrics: {}", resp.text());
    resp.text()
}

/// Waits until `name{CMS…, extra…}` equals `want`.
async fn wait_for_metric(admin: &Http, name: &str, extra: &[(&str, &str)], want: f64) {
    let labels: Vec<(&str, &str)> = CMS.iter().chain(extra).copied().collect();
    let labels = &labels;
    wait_until(
        &format!("{name}{labels:?} is {want}"),
        EVENT_TIMEOUT,
        || async move { sample(&scrape(admin).await, name, labels) == want },
    )
    .await;
}

/// The configmaps reflector's log lines at info and above, as (level, message).
fn reflector_lines(stderr: &str) -> Vec<(String, String)> {
    stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["resource"] == "configmaps" && v["level"] != "DEBUG" && v["level"] != "TRACE")
        .map(|v| {
            (
                v["level"].as_str().unwrap_or("").to_string(),
                v["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_and_relists_are_counted_by_reason_and_logged_once_each() {
    // A handle of its own, to shut the upstream down at the end.
    let sim = watchgate::sim::start(cluster_config()).await.unwrap();
    let direct = Http::new(&sim.url());
    for name in ["a", "b"] {
        let resp = direct
            .post_json(
                "/api/v1/namespaces/default/configmaps",
                &configmap("", name).build(),
            )
            .await;
        assert_eq!(resp.status, 201, "{}", resp.text());
    }
    let gw = Served::start(&[
        "--server",
        &sim.url(),
        "--cache=configmaps",
        "--log-format=json",
    ])
    .await;
    let admin = gw.admin();
    let admin_ref = &admin;
    wait_until("/readyz answers 200", EVENT_TIMEOUT, || async move {
        admin_ref.get("/readyz").await.status == 200
    })
    .await;

    // Synced: the watch-list's stream is the one upstream watch.
    wait_for_metric(&admin, "watchgate_upstream_watches", &[], 1.0).await;
    let text = scrape(&admin).await;
    assert_eq!(sample(&text, "watchgate_upstream_up", &[]), 1.0, "{text}");
    assert_eq!(sim.stats().watches("configmaps"), 1);
    let restarts = "watchgate_reflector_restarts_total";
    let relists = "watchgate_reflector_relists_total";
    for (name, reason) in [
        (restarts, "stream_end"),
        (restarts, "error"),
        (relists, "expired"),
    ] {
        assert_eq!(sample(&text, name, &[("reason", reason)]), 0.0, "{text}");
    }

    // 1. The upstream ends the stream: resume from the last resourceVersion.
    let faults = sim.faults();
    faults.drop_watches_now();
    wait_for_metric(&admin, restarts, &[("reason", "stream_end")], 1.0).await;
    wait_for_metric(&admin, "watchgate_upstream_watches", &[], 1.0).await;
    let sim_ref = &sim;
    wait_until(
        "the reflector watches again",
        EVENT_TIMEOUT,
        || async move { sim_ref.stats().watches("configmaps") == 2 },
    )
    .await;

    // 2. The stream ends and the next watch fails (503): back off, then resume.
    faults.fail_next_watch(1);
    faults.drop_watches_now();
    wait_for_metric(&admin, restarts, &[("reason", "error")], 1.0).await;
    wait_for_metric(&admin, restarts, &[("reason", "stream_end")], 2.0).await;
    wait_until(
        "the reflector watches again after the 503",
        EVENT_TIMEOUT,
        || async move { sim_ref.stats().watches("configmaps") == 3 },
    )
    .await;
    wait_for_metric(&admin, "watchgate_upstream_watches", &[], 1.0).await;

    // 3. The stream ends and the next watch gets 410 Expired: relist (a new watch-list).
    faults.force_410_next_watch(1);
    faults.drop_watches_now();
    wait_for_metric(&admin, relists, &[("reason", "expired")], 1.0).await;
    wait_for_metric(&admin, "watchgate_reflector_lists_total", &[], 2.0).await;
    wait_for_metric(&admin, "watchgate_upstream_watches", &[], 1.0).await;
    let text = scrape(&admin).await;
    assert_eq!(sample(&text, restarts, &cms("stream_end")), 3.0, "{text}");
    assert_eq!(sample(&text, restarts, &cms("error")), 1.0, "{text}");

    // One line per reconnect and per relist, each with its reason, in order.
    let lines = reflector_lines(&gw.stderr());
    let shown = format!("{lines:#?}");
    let expected: &[(&str, &str, &str)] = &[
        ("INFO", "listing configmaps…", ""),
        ("INFO", "synced 2 configmaps (", ""),
        (
            "INFO",
            "watch ended (the upstream closed it after ",
            "); resuming from ",
        ),
        (
            "INFO",
            "watch ended (the upstream closed it after ",
            "); resuming from ",
        ),
        (
            "WARN",
            "watch failed (watch returned 503 Service Unavailable); resuming in ",
            "",
        ),
        (
            "INFO",
            "watch ended (the upstream closed it after ",
            "); resuming from ",
        ),
        (
            "INFO",
            "relisted 2 configmaps (",
            " after the watch expired (too old resource version: ",
        ),
    ];
    assert_eq!(lines.len(), expected.len(), "{shown}");
    for ((level, message), (want_level, starts, contains)) in lines.iter().zip(expected) {
        assert_eq!(level, want_level, "{message}\n{shown}");
        assert!(
            message.starts_with(starts) && message.contains(contains),
            "{message:?} is not {starts:?}…{contains:?}\n{shown}"
        );
    }

    // 4. The upstream goes away: no upstream watch, and the upstream is down.
    sim.shutdown().await;
    wait_for_metric(&admin, "watchgate_upstream_watches", &[], 0.0).await;
    let admin_ref = &admin;
    wait_until(
        "watchgate_upstream_up drops to 0",
        EVENT_TIMEOUT,
        || async move { sample(&scrape(admin_ref).await, "watchgate_upstream_up", &[]) == 0.0 },
    )
    .await;
    let text = scrape(&admin).await;
    assert!(
        sample(&text, restarts, &cms("error")) >= 2.0,
        "the failed reconnects are counted:\n{text}"
    );
    // Cached reads keep answering meanwhile.
    let resp = gw
        .http()
        .get("/api/v1/namespaces/default/configmaps?resourceVersion=0")
        .await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["items"].as_array().unwrap().len(), 2);
    gw.terminate().await;
}

fn cms(reason: &str) -> [(&str, &str); 3] {
    [
        ("group", ""),
        ("resource", "configmaps"),
        ("reason", reason),
    ]
}

//! Issue 26's acceptance scenarios: herds on a cold gateway ([`cold`]), consistent reads
//! of a large quiet resource ([`quiet`]) and a gateway restart under thousands of
//! watchers ([`restart`]). Each one starts its own simulator (seeded straight into its
//! store) and gateway process ([`super::cluster`]), and reports what reached the
//! simulator — its request counts for the resource, by verb and by shape — next to
//! what the clients got.
//!
//! This module: what they share (per-kind client reports, the gateway's metric deltas,
//! the contexts their watchers share, the drain and check of every stream).

pub mod cold;
pub mod quiet;
pub mod restart;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::checker::{Violation, WriterLog};
use super::cluster::{self, Gateway};
use super::harness::check_outcomes;
use super::pool::Pool;
use super::report::Latency;
use super::stats::Stats;
use super::target::Target;
use super::track::Track;
use super::watcher::{Ctx, Outcome};
use crate::sim::SimHandle;

/// What one kind of client (RV=0 watches, watch-list informers, lists) got.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KindReport {
    pub kind: String,
    pub clients: usize,
    /// Clients that got their whole initial state (an informer its initial-events-end
    /// bookmark, an RV=0 watch every object, a list its response).
    pub done: u64,
    /// Time from the herd's start until each got it.
    pub time_to_state: Latency,
    /// Requests sent (first tries and retries).
    pub requests: u64,
    pub status_429: u64,
    /// Answers other than 2xx and 429 (an ERROR event counts as one).
    pub other_non_2xx: u64,
    /// Every error, by kind (`watch 429`, `list: connection`, …).
    pub errors: BTreeMap<String, u64>,
}

/// The HTTP status in an error key (`watch 429`, `list 503`, `watch ERROR 500`).
fn status_of(key: &str) -> Option<u16> {
    let code = key.rsplit(' ').next()?;
    (code.len() == 3).then(|| code.parse().ok()).flatten()
}

impl KindReport {
    pub fn of(kind: &str, clients: usize, stats: &Stats) -> Self {
        let errors = stats.errors();
        let mut status_429 = 0;
        let mut other = 0;
        for (k, n) in &errors {
            match status_of(k) {
                Some(429) => status_429 += n,
                Some(_) => other += n,
                None => {}
            }
        }
        Self {
            kind: kind.into(),
            clients,
            done: Stats::get(&stats.c.synced),
            time_to_state: Latency::of(&stats.sync_latency()),
            requests: Stats::get(&stats.c.watch_requests)
                + Stats::get(&stats.c.lists)
                + errors
                    .iter()
                    .filter(|(k, _)| k.starts_with("list"))
                    .map(|(_, n)| n)
                    .sum::<u64>(),
            status_429,
            other_non_2xx: other,
            errors,
        }
    }

    pub fn row(&self) -> String {
        let l = &self.time_to_state;
        format!(
            "  {:<22} {:>7} {:>7} {:>9.0} {:>9.0} {:>9.0} {:>8} {:>6} {:>9}",
            self.kind,
            self.clients,
            self.done,
            l.p50_ms,
            l.p99_ms,
            l.max_ms,
            self.requests,
            self.status_429,
            self.other_non_2xx
        )
    }

    pub fn header() -> String {
        format!(
            "  {:<22} {:>7} {:>7} {:>9} {:>9} {:>9} {:>8} {:>6} {:>9}",
            "client kind",
            "clients",
            "done",
            "p50 ms",
            "p99 ms",
            "max ms",
            "requests",
            "429s",
            "other!2xx"
        )
    }
}

/// Metric families of the gateway worth a look after a herd (each series' change over
/// it), besides any series with a `reason` label (why requests were forwarded).
const GATEWAY_FAMILIES: &[&str] = &[
    "watchgate_requests_total",
    "watchgate_upstream_requests_total",
    "watchgate_upstream_refusals_total",
    "watchgate_consistent_reads_total",
    "watchgate_consistency_probes_total",
    "watchgate_reflector_lists_total",
    "watchgate_reflector_relists_total",
];

/// Each series of [`GATEWAY_FAMILIES`] (or with a `reason` label) that changed between
/// two scrapes, by its full name with labels; series of other resources are left out.
pub fn metric_deltas(before: &str, after: &str, resource: &str) -> BTreeMap<String, f64> {
    let parse = |text: &str| -> BTreeMap<String, f64> {
        let own = format!("resource=\"{resource}\"");
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let name = series.split('{').next()?;
                let wanted = GATEWAY_FAMILIES.contains(&name) || series.contains("reason=\"");
                let other_resource = series.contains("resource=\"") && !series.contains(&own);
                (wanted && !other_resource)
                    .then(|| Some((series.to_string(), value.parse().ok()?)))
                    .flatten()
            })
            .collect()
    };
    let b = parse(before);
    parse(after)
        .into_iter()
        .map(|(k, v)| {
            let d = v - b.get(&k).copied().unwrap_or(0.0);
            (k, d)
        })
        .filter(|(_, d)| *d != 0.0)
        .collect()
}

/// The contexts of one run's watchers: each kind has its own stats, all share the stop
/// and drain signals and the connect gate.
pub struct Watchers {
    pub stop: CancellationToken,
    pub draining: CancellationToken,
    pub gate: Arc<tokio::sync::Semaphore>,
    pub set: JoinSet<Outcome>,
    pub ctxs: Vec<Arc<Ctx>>,
}

impl Watchers {
    pub fn new(connect_concurrency: usize) -> Self {
        Self {
            stop: CancellationToken::new(),
            draining: CancellationToken::new(),
            gate: Arc::new(tokio::sync::Semaphore::new(connect_concurrency.max(1))),
            set: JoinSet::new(),
            ctxs: Vec::new(),
        }
    }

    /// A context for one kind of watcher.
    pub fn ctx(
        &mut self,
        target: &Target,
        stats: Arc<Stats>,
        pool: &Arc<Pool>,
        spawned: Instant,
        track: Option<Arc<Track>>,
    ) -> Arc<Ctx> {
        let ctx = Arc::new(Ctx {
            target: target.clone(),
            stats,
            pool: pool.clone(),
            stop: self.stop.clone(),
            drain_log: Default::default(),
            draining: self.draining.clone(),
            connect_gate: self.gate.clone(),
            spawned,
            track,
        });
        self.ctxs.push(ctx.clone());
        ctx
    }

    /// Lets every watcher receive the writer's last write it must see (bounded by
    /// `timeout`), then checks every stream against the log. Outcomes are returned by
    /// group: the `group` of each watcher is the index of its kind.
    pub async fn drain_and_check(
        mut self,
        log: &WriterLog,
        pool: &Pool,
        kinds: usize,
        timeout: Duration,
    ) -> anyhow::Result<Checked> {
        let log = Arc::new(log.clone());
        for c in &self.ctxs {
            let _ = c.drain_log.set(log.clone());
        }
        self.draining.cancel();
        let mut outcomes = Vec::new();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            tokio::select! {
                r = self.set.join_next() => match r {
                    Some(Ok(o)) => outcomes.push(o),
                    Some(Err(e)) => anyhow::bail!("a watcher panicked: {e}"),
                    None => break,
                },
                _ = tokio::time::sleep_until(deadline), if !self.stop.is_cancelled() => {
                    self.stop.cancel()
                }
            }
        }
        self.stop.cancel();
        // A watcher that never had its initial state (a herd that was not served in time)
        // has no stream to check: it is counted apart.
        let (outcomes, never): (Vec<Outcome>, Vec<Outcome>) =
            outcomes.into_iter().partition(|o| o.initial_done);
        // No selectors: every watcher must see every write of the pool.
        let selectors = vec![(None, None); kinds.max(1)];
        let (violations, violation_count) = check_outcomes(&outcomes, &selectors, &log, pool);
        Ok(Checked {
            watchers: outcomes.len(),
            without_state: never.len(),
            violations,
            violation_count,
        })
    }
}

/// The streams' check after a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Checked {
    /// Watchers whose streams were checked.
    pub watchers: usize,
    /// Watchers that never had their initial state (not checked).
    pub without_state: usize,
    pub violations: Vec<Violation>,
    pub violation_count: u64,
}

/// Waits until `done()` or the deadline, updating the progress bar with `msg()`.
pub async fn wait_until(
    deadline: Instant,
    progress: &indicatif::ProgressBar,
    mut done: impl FnMut() -> bool,
    mut msg: impl FnMut() -> String,
) -> bool {
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        progress.set_message(msg());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What a herd's window cost the simulator and changed in the gateway, as every herd
/// reports it: the simulator's requests for the resource since its counters were reset
/// (`GET /debug/sim/stats/shapes`: `{verb: n}` and `{verb: {shape: n}}`), and the gateway's
/// metrics that moved over the window ([`metric_deltas`]).
pub struct WindowCost {
    pub upstream_requests: u64,
    pub by_verb: serde_json::Value,
    pub by_shape: serde_json::Value,
    pub gateway_metrics: BTreeMap<String, f64>,
}

impl WindowCost {
    /// Reads both now. `metrics_before` is the gateway's metrics at the window's start
    /// (empty for a gateway that started within it: its counters start at zero).
    pub async fn measure(
        sim: &SimHandle,
        gw: &Gateway,
        resource: &str,
        metrics_before: &str,
    ) -> WindowCost {
        let (by_verb, by_shape) = cluster::sim_requests(sim, resource);
        let metrics_after = gw.metrics().await.unwrap_or_default();
        WindowCost {
            upstream_requests: cluster::total(&by_verb),
            by_verb,
            by_shape,
            gateway_metrics: metric_deltas(metrics_before, &metrics_after, resource),
        }
    }
}

/// The report's lines of a window's upstream requests: their count by verb, then by shape.
pub fn upstream_lines(
    t: &mut String,
    resource: &str,
    during: &str,
    n: u64,
    by_verb: &serde_json::Value,
    by_shape: &serde_json::Value,
) {
    let _ = writeln!(
        t,
        "  upstream requests for {resource} during {during}: {n} ({})",
        verbs_line(by_verb)
    );
    t.push_str(&shapes_lines(by_shape));
}

/// The report's lines of the gateway's metrics over a window, under `title`; none when no
/// metric moved (or the gateway gave none).
pub fn metrics_lines(t: &mut String, title: &str, metrics: &BTreeMap<String, f64>) {
    if metrics.is_empty() {
        return;
    }
    let _ = writeln!(t, "  {title}:");
    for (k, v) in metrics {
        let _ = writeln!(t, "    {k} {v}");
    }
}

/// `{verb: count}` as `list 3, watch 1`.
pub fn verbs_line(counts: &serde_json::Value) -> String {
    counts
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// `{verb: {shape: count}}` as indented lines.
pub fn shapes_lines(shapes: &serde_json::Value) -> String {
    let mut out = String::new();
    if let Some(m) = shapes.as_object() {
        for (verb, per) in m {
            if let Some(per) = per.as_object() {
                for (shape, n) in per {
                    out.push_str(&format!("      {verb} {shape}: {n}\n"));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_keys_give_their_status() {
        assert_eq!(status_of("watch 429"), Some(429));
        assert_eq!(status_of("watch ERROR 500"), Some(500));
        assert_eq!(status_of("list 503"), Some(503));
        assert_eq!(status_of("list: connection"), None);
        assert_eq!(status_of("watch: stream broken"), None);
    }

    #[test]
    fn metric_deltas_keep_the_resources_changed_series() {
        let before = "# HELP x\n\
            watchgate_requests_total{verb=\"list\",resource=\"configmaps\",code=\"200\"} 2\n\
            watchgate_requests_total{verb=\"list\",resource=\"pods\",code=\"200\"} 5\n\
            watchgate_upstream_requests_total{code=\"200\"} 10\n\
            watchgate_watchers{resource=\"configmaps\"} 3\n";
        let after =
            "watchgate_requests_total{verb=\"list\",resource=\"configmaps\",code=\"200\"} 7\n\
            watchgate_requests_total{verb=\"list\",resource=\"pods\",code=\"200\"} 9\n\
            watchgate_upstream_requests_total{code=\"200\"} 10\n\
            watchgate_upstream_requests_total{code=\"429\"} 4\n\
            watchgate_forwarded_total{resource=\"configmaps\",reason=\"not_synced\"} 6\n\
            watchgate_watchers{resource=\"configmaps\"} 9\n";
        let d = metric_deltas(before, after, "configmaps");
        let want: BTreeMap<String, f64> = [
            (
                "watchgate_requests_total{verb=\"list\",resource=\"configmaps\",code=\"200\"}",
                5.0,
            ),
            ("watchgate_upstream_requests_total{code=\"429\"}", 4.0),
            (
                "watchgate_forwarded_total{resource=\"configmaps\",reason=\"not_synced\"}",
                6.0,
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(d, want);
    }
}

//! `watchgate load quiet-large` (issue 26, acceptance "quiet large resource"): a
//! resource of M objects that receives no writes while a writer moves the global
//! resourceVersion with writes to another resource. Consistent reads of it (a get of
//! one object, a full list, the first page of a paged list), one at a time, direct to
//! the simulator and through the gateway in pairs, each pair in the other order than the
//! last, so that both sides of a comparison see the same machine (a block of reads each
//! way drifted by ±10 ms between the blocks on the shared 2-core VM, more than the
//! gateway's own cost); then a herd of watch-list informers through the
//! gateway and what it cost the upstream. Each gateway figure is printed next to the
//! direct one and the target, with PASS or FAIL.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context as _;
use hdrhistogram::Histogram;
use http::Method;
use http_body_util::BodyExt as _;
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{
    metric_deltas, metrics_lines, shapes_lines, verbs_line, wait_until, KindReport, Watchers,
    WindowCost,
};
use crate::load::args::QuietLargeArgs;
use crate::load::checker::WriterLog;
use crate::load::cluster::{self, gateway_bin, GatewaySpec};
use crate::load::harness::{progress_bar, raise_fd_limit, run_id, warm_up};
use crate::load::pool::{Pool, PoolResource};
use crate::load::report::Latency;
use crate::load::stats::{histogram, Stats};
use crate::load::target::Target;
use crate::load::watcher::{self, WatchSpec};
use crate::load::writer;
use crate::sim::SimHandle;

/// One read, direct and through the gateway.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Measure {
    pub what: String,
    pub request: String,
    pub direct: Latency,
    pub gateway: Latency,
    /// The median of gateway minus direct over the pairs both answered (ms): the
    /// gateway's own cost, with the machine's drift taken out.
    pub paired_diff_p50_ms: f64,
    /// Answers other than 2xx (each is left out of the latencies).
    pub direct_failures: u64,
    pub gateway_failures: u64,
}

/// A target of the issue, met or not.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub what: String,
    pub direct: f64,
    pub gateway: f64,
    pub limit: f64,
    pub pass: bool,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct QuietLargeSummary {
    pub scenario: String,
    pub resource: String,
    pub encoding: String,
    pub objects: u64,
    pub gateway: String,
    pub rounds: usize,
    /// Writes to the other resource over the run (the global resourceVersion moved by
    /// as many).
    pub writes_elsewhere: u64,
    pub write_rate: f64,
    pub measures: Vec<Measure>,
    /// What the simulator saw for the resource while the gateway was measured:
    /// `"verb shape"` → requests.
    pub upstream_during_gateway_reads: BTreeMap<String, u64>,
    /// The gateway's metrics that changed over its measurements.
    pub gateway_metrics_reads: BTreeMap<String, f64>,
    pub informers: KindReport,
    /// Initial events the informers received, and the number expected (informers ×
    /// objects).
    pub informer_initial_events: u64,
    pub informer_initial_events_expected: u64,
    pub upstream_during_informers: u64,
    pub upstream_during_informers_by_verb: Value,
    pub upstream_during_informers_by_shape: Value,
    pub gateway_metrics_informers: BTreeMap<String, f64>,
    pub checks: Vec<Check>,
    /// Every target met.
    pub pass: bool,
    /// The run itself went through (every informer synced, no read failed).
    pub ok: bool,
}

impl QuietLargeSummary {
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "quiet-large: {} {} ({} encoding), no writes to them; {} writes elsewhere at \
             {}/s; gateway {}; {} rounds",
            self.objects,
            self.resource,
            self.encoding,
            self.writes_elsewhere,
            self.write_rate,
            self.gateway,
            self.rounds
        );
        let _ = writeln!(
            t,
            "  {:<34} {:>6} {:>9} {:>9} {:>6} {:>9} {:>9} {:>6} {:>11}",
            "consistent read",
            "direct",
            "p50 ms",
            "p99 ms",
            "fail",
            "gateway",
            "p50 ms",
            "p99 ms",
            "paired Δ ms"
        );
        for m in &self.measures {
            let _ = writeln!(
                t,
                "  {:<34} {:>6} {:>9.2} {:>9.2} {:>6} {:>9} {:>9.2} {:>6.2} {:>+11.2}  (gateway failures {})",
                m.what,
                m.direct.count,
                m.direct.p50_ms,
                m.direct.p99_ms,
                m.direct_failures,
                m.gateway.count,
                m.gateway.p50_ms,
                m.gateway.p99_ms,
                m.paired_diff_p50_ms,
                m.gateway_failures
            );
        }
        let _ = writeln!(
            t,
            "  upstream requests for {} during the gateway's reads:",
            self.resource
        );
        for (k, n) in &self.upstream_during_gateway_reads {
            let _ = writeln!(t, "      {k}: {n}");
        }
        metrics_lines(
            &mut t,
            "gateway metrics, change over its reads",
            &self.gateway_metrics_reads,
        );
        let _ = writeln!(
            t,
            "  {} watch-list informers at once through the gateway: {} upstream requests for \
             {} ({}); {} initial events of {} expected",
            self.informers.clients,
            self.upstream_during_informers,
            self.resource,
            verbs_line(&self.upstream_during_informers_by_verb),
            self.informer_initial_events,
            self.informer_initial_events_expected
        );
        t.push_str(&shapes_lines(&self.upstream_during_informers_by_shape));
        let _ = writeln!(t, "{}", KindReport::header());
        let _ = writeln!(t, "{}", self.informers.row());
        for (e, n) in &self.informers.errors {
            let _ = writeln!(t, "  informers: {e}: {n}");
        }
        metrics_lines(
            &mut t,
            "gateway metrics, change over the informers' herd",
            &self.gateway_metrics_informers,
        );
        let _ = writeln!(t, "  issue 26's targets:");
        for c in &self.checks {
            let _ = writeln!(
                t,
                "    {:<44} direct {:>9.2}  gateway {:>9.2}  limit {:>9.2}  {}",
                c.what,
                c.direct,
                c.gateway,
                c.limit,
                if c.pass { "PASS" } else { "FAIL" }
            );
        }
        let _ = writeln!(
            t,
            "  {}{}",
            if self.ok { "OK" } else { "FAILED" },
            if self.pass {
                ", every target met"
            } else {
                ", targets not met"
            }
        );
        t
    }
}

pub async fn run(args: QuietLargeArgs) -> anyhow::Result<()> {
    let s = execute(&args).await?;
    if args.common.json {
        eprint!("{}", s.table());
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{}", s.table());
    }
    // Missed targets are the figures to report, not a failure of the run.
    anyhow::ensure!(
        s.ok,
        "quiet-large FAILED: a read failed or an informer never synced"
    );
    Ok(())
}

/// One read in full; its time in microseconds, or its status if not 2xx.
async fn timed(target: &Target, path: &str, accept: &str) -> Result<u64, u16> {
    let t0 = Instant::now();
    let resp = target
        .send_accepting(Method::GET, path, None, accept)
        .await
        .map_err(|_| 0u16)?;
    let status = resp.status();
    let body = resp.into_body().collect().await;
    match (status.is_success(), body) {
        (true, Ok(_)) => Ok(t0.elapsed().as_micros() as u64),
        _ => Err(status.as_u16()),
    }
}

/// The median of `diffs` (µs) in milliseconds; 0 without any.
fn median_ms(diffs: &mut [i64]) -> f64 {
    if diffs.is_empty() {
        return 0.0;
    }
    diffs.sort_unstable();
    let n = diffs.len();
    let mid = if n % 2 == 1 {
        diffs[n / 2] as f64
    } else {
        (diffs[n / 2 - 1] + diffs[n / 2]) as f64 / 2.0
    };
    mid / 1000.0
}

/// The simulator's counts for `resource` by `"verb shape"`.
fn shape_counts(sim: &SimHandle, resource: &str) -> BTreeMap<String, u64> {
    let (_, shapes) = cluster::sim_requests(sim, resource);
    let mut out = BTreeMap::new();
    if let Some(m) = shapes.as_object() {
        for (verb, per) in m {
            for (shape, n) in per.as_object().into_iter().flatten() {
                out.insert(format!("{verb} {shape}"), n.as_u64().unwrap_or(0));
            }
        }
    }
    out
}

pub async fn execute(a: &QuietLargeArgs) -> anyhow::Result<QuietLargeSummary> {
    let c = &a.common;
    let h = &a.herd;
    anyhow::ensure!(
        c.server.is_none() && c.kubeconfig.is_none() && c.write_server.is_none(),
        "quiet-large starts its own simulator and gateway: --server, --kubeconfig and \
         --write-server do not apply"
    );
    raise_fd_limit(a.informers + c.write_concurrency + 64);
    let res = h.resource.as_str();
    let sim = cluster::start_sim().await?;
    cluster::seed_objects(&sim, h.resource, h.objects, h.seed_size);
    let objects = cluster::object_count(&sim, h.resource);
    let direct = Target::resolve(Some(&sim.url()), None, None, 1).await?;
    // The writer writes the other resource: this one stays quiet.
    let pool = Arc::new(Pool {
        run: run_id(),
        resource: h.resource.other(),
        namespace: c.namespace.clone(),
        size: c.pool.max(1),
        nodes: 10,
        node_prefix: "load-node".into(),
        shards: c.shards.max(1),
        object_size: c.object_size,
    });
    let log = Arc::new(Mutex::new(WriterLog::default()));
    writer::create_pool(&direct, &pool, 32, &log)
        .await
        .context("creating the writer's pool")?;
    let mut gw = GatewaySpec {
        bin: gateway_bin(h.gateway_bin.as_deref())?,
        upstreams: vec![sim.url()],
        extra: h.gateway_args.clone(),
        log: h.gateway_log.clone(),
    }
    .start()
    .await?;
    let gateway = Target::resolve(Some(&gw.url), None, None, c.streams_per_connection).await?;
    let collection = format!("/api/v1/{res}");
    // The gateway caches the resource before it is measured: what is measured is how it
    // proves a synced cache fresh, not its first sync.
    warm_up(&gateway, &collection).await;

    let writer_stats = Arc::new(Stats::new());
    let writer_stop = CancellationToken::new();
    let writer_task = tokio::spawn(writer::run(
        direct.clone(),
        pool.clone(),
        c.rate,
        c.write_concurrency,
        writer_stats.clone(),
        log.clone(),
        writer_stop.clone(),
    ));

    let name = match h.resource {
        PoolResource::Pods => "pod-0",
        PoolResource::Configmaps => "configmap-0",
    };
    let reads = [
        (
            "get of one object",
            format!("/api/v1/namespaces/ns-0/{res}/{name}"),
            a.gets,
        ),
        ("full list", collection.clone(), a.full_lists),
        (
            "first page of a paged list (limit=500)",
            format!("{collection}?limit=500"),
            a.pages,
        ),
    ];
    let accept = c.encoding.accept();
    let mut hist: Vec<[Histogram<u64>; 2]> =
        reads.iter().map(|_| [histogram(), histogram()]).collect();
    let mut failures = vec![[0u64; 2]; reads.len()];
    let mut upstream_gw: BTreeMap<String, u64> = BTreeMap::new();
    let progress = progress_bar(c.no_progress, 0);
    let metrics0 = gw.metrics().await.unwrap_or_default();
    let mut diffs: Vec<Vec<i64>> = reads.iter().map(|_| Vec::new()).collect();
    for round in 0..a.rounds.max(1) {
        for (i, (what, path, n)) in reads.iter().enumerate() {
            progress.set_message(format!("round {}: {what}", round + 1));
            let end = Instant::now() + a.measure_budget;
            for j in 0..*n {
                if Instant::now() >= end {
                    break;
                }
                // Direct first in every other pair: neither side always follows the
                // other's read (a list leaves the simulator's allocator warm).
                let mut pair = [None, None];
                for k in 0..2 {
                    let via = (round + j + k) % 2;
                    let target = if via == 0 { &direct } else { &gateway };
                    let before = (via == 1).then(|| shape_counts(&sim, res));
                    match timed(target, path, accept).await {
                        Ok(us) => {
                            hist[i][via].saturating_record(us.max(1));
                            pair[via] = Some(us);
                        }
                        Err(_) => failures[i][via] += 1,
                    }
                    if let Some(before) = before {
                        for (key, n) in shape_counts(&sim, res) {
                            let d = n - before.get(&key).copied().unwrap_or(0);
                            if d > 0 {
                                *upstream_gw.entry(key).or_default() += d;
                            }
                        }
                    }
                }
                if let [Some(d), Some(g)] = pair {
                    diffs[i].push(g as i64 - d as i64);
                }
            }
        }
    }
    let metrics1 = gw.metrics().await.unwrap_or_default();
    let measures: Vec<Measure> = reads
        .iter()
        .zip(&hist)
        .zip(&failures)
        .zip(&mut diffs)
        .map(|((((what, path, _), h), f), diffs)| Measure {
            what: what.to_string(),
            request: format!("GET {path}"),
            direct: Latency::of(&h[0]),
            gateway: Latency::of(&h[1]),
            paired_diff_p50_ms: median_ms(diffs),
            direct_failures: f[0],
            gateway_failures: f[1],
        })
        .collect();

    // The informers' herd, through the gateway.
    progress.set_message("informers: watch-lists through the gateway");
    sim.stats().reset();
    let t0 = Instant::now();
    let stats = Arc::new(Stats::new());
    let mut w = Watchers::new(c.connect_concurrency);
    let ctx = w.ctx(&gateway, stats.clone(), &pool, t0, None);
    let spec = Arc::new(WatchSpec {
        path: collection.clone(),
        label_selector: None,
        field_selector: None,
        list_first: false,
        watch_list: true,
        rv0: None,
        protocol: c.protocol,
        reconnect_every: None,
        lifetime: None,
        encoding: c.encoding,
    });
    for id in 0..a.informers {
        w.set
            .spawn(watcher::run(ctx.clone(), id, 0, spec.clone(), 0));
    }
    let synced = wait_until(
        t0 + h.herd_timeout,
        &progress,
        || Stats::get(&stats.c.synced) as usize >= a.informers,
        || {
            format!(
                "informers: {}/{} synced",
                Stats::get(&stats.c.synced),
                a.informers
            )
        },
    )
    .await;
    let cost = WindowCost::measure(&sim, &gw, res, &metrics1).await;
    w.stop.cancel();
    while w.set.join_next().await.is_some() {}
    writer_stop.cancel();
    let _ = writer_task.await;
    progress.finish_and_clear();
    gw.kill().await;
    sim.shutdown().await;

    let informers = KindReport::of("watch-list informers", a.informers, &stats);
    let upstream_informers = cost.upstream_requests;
    let m = |i: usize| &measures[i];
    let check = |what: &str, d: f64, g: f64, limit: f64| Check {
        what: what.into(),
        direct: d,
        gateway: g,
        limit,
        pass: g <= limit,
    };
    let checks = vec![
        check(
            "get p50 (ms) <= 1.3 x direct + 2",
            m(0).direct.p50_ms,
            m(0).gateway.p50_ms,
            1.3 * m(0).direct.p50_ms + 2.0,
        ),
        check(
            "get p99 (ms) <= 2 x direct + 5",
            m(0).direct.p99_ms,
            m(0).gateway.p99_ms,
            2.0 * m(0).direct.p99_ms + 5.0,
        ),
        check(
            "full list p50 (ms) <= direct + 2",
            m(1).direct.p50_ms,
            m(1).gateway.p50_ms,
            m(1).direct.p50_ms + 2.0,
        ),
        check(
            "first page p50 (ms) <= direct + 2",
            m(2).direct.p50_ms,
            m(2).gateway.p50_ms,
            m(2).direct.p50_ms + 2.0,
        ),
        check(
            "informers' upstream requests <= 5",
            0.0,
            upstream_informers as f64,
            5.0,
        ),
    ];
    let no_failures = failures.iter().all(|f| f[0] == 0 && f[1] == 0);
    Ok(QuietLargeSummary {
        scenario: "quiet-large".into(),
        resource: res.into(),
        encoding: format!("{:?}", c.encoding).to_lowercase(),
        objects,
        gateway: gw.url.clone(),
        rounds: a.rounds.max(1),
        writes_elsewhere: Stats::get(&writer_stats.c.writes),
        write_rate: c.rate,
        pass: checks.iter().all(|c| c.pass),
        ok: synced && no_failures,
        checks,
        measures,
        upstream_during_gateway_reads: upstream_gw,
        gateway_metrics_reads: metric_deltas(&metrics0, &metrics1, res),
        informer_initial_events: Stats::get(&stats.c.events),
        informer_initial_events_expected: a.informers as u64 * objects,
        informers,
        upstream_during_informers: upstream_informers,
        upstream_during_informers_by_verb: cost.by_verb,
        upstream_during_informers_by_shape: cost.by_shape,
        gateway_metrics_informers: cost.gateway_metrics,
    })
}

#[cfg(test)]
mod tests {
    use super::median_ms;

    #[test]
    fn the_median_of_paired_differences_is_in_milliseconds_and_keeps_its_sign() {
        assert_eq!(median_ms(&mut []), 0.0);
        assert_eq!(median_ms(&mut [3000, -1000, 500]), 0.5);
        assert_eq!(median_ms(&mut [-4000, -2000, 1000, 9000]), -0.5);
    }
}

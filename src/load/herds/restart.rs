//! `watchgate load restart` (issue 26, acceptance "restart"): W watchers on one
//! resource through the gateway, each a plain watch from resourceVersion=0 that then
//! follows its stream as client-go's reflector does (a broken stream is resumed from
//! the last resourceVersion seen; only a 410 Gone makes it relist). With writes going
//! on (straight to the simulator, so that they go on while the gateway is down), the
//! gateway is killed with SIGKILL and started again on the same port. Reported: what
//! the upstream saw for the resource while the watchers reconnected, how many resumed
//! and how many had to relist, how long each took, and every stream checked across
//! the restart (nothing lost, repeated or reordered).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{metrics_lines, upstream_lines, wait_until, Checked, KindReport, Watchers, WindowCost};
use crate::load::args::RestartArgs;
use crate::load::checker::WriterLog;
use crate::load::cluster::{self, gateway_bin, GatewaySpec};
use crate::load::harness::{progress_bar, raise_fd_limit, run_id, warm_up};
use crate::load::pool::Pool;
use crate::load::report::Latency;
use crate::load::stats::{histogram, Stats};
use crate::load::target::Target;
use crate::load::track::Track;
use crate::load::watcher::{self, WatchSpec};
use crate::load::writer;

#[derive(Debug, Clone, Default, Serialize)]
pub struct RestartSummary {
    pub scenario: String,
    pub resource: String,
    pub encoding: String,
    pub objects: u64,
    pub gateway: String,
    pub watchers: usize,
    /// Watchers that had their initial state before the restart.
    pub watchers_synced: u64,
    pub initial_state: Latency,
    pub down_s: f64,
    /// From the kill until every watcher streamed again (or the bound).
    pub reconnect_window_s: f64,
    pub reconnect_complete: bool,
    /// Watchers streaming again without having relisted, those that got 410 Gone and
    /// relisted, and those not streaming again by the bound.
    pub resumed: u64,
    pub relisted: u64,
    pub not_reconnected: u64,
    /// From the kill to each watcher's first stream after it (after its relist, if any).
    pub reconnect: Latency,
    /// The simulator's requests for the resource over the reconnect window.
    pub upstream_requests: u64,
    pub upstream_by_verb: Value,
    pub upstream_by_shape: Value,
    /// The restarted gateway's metrics at the end of the window (it starts from zero).
    pub gateway_metrics: BTreeMap<String, f64>,
    pub client: KindReport,
    pub writes: u64,
    pub write_rate: f64,
    pub checked_events: u64,
    pub checked: Checked,
    pub ok: bool,
}

impl RestartSummary {
    pub fn table(&self) -> String {
        let mut t = String::new();
        let l = |l: &Latency| {
            format!(
                "p50 {:.0} ms  p99 {:.0} ms  max {:.0} ms",
                l.p50_ms, l.p99_ms, l.max_ms
            )
        };
        let _ = writeln!(
            t,
            "restart: {} watchers on {} {} ({} encoding) through {}",
            self.watchers, self.objects, self.resource, self.encoding, self.gateway
        );
        let _ = writeln!(
            t,
            "  before: {}/{} watchers had their initial state ({})",
            self.watchers_synced,
            self.watchers,
            l(&self.initial_state)
        );
        let _ = writeln!(
            t,
            "  gateway killed (SIGKILL), down {:.2} s, started again on its port; every \
             watcher streaming again after {:.2} s{}",
            self.down_s,
            self.reconnect_window_s,
            if self.reconnect_complete {
                ""
            } else {
                " (NOT every watcher by --herd-timeout)"
            }
        );
        let _ = writeln!(
            t,
            "  resumed from their last RV: {}, relisted after 410: {}, not reconnected: {}",
            self.resumed, self.relisted, self.not_reconnected
        );
        let _ = writeln!(t, "  reconnect time: {}", l(&self.reconnect));
        upstream_lines(
            &mut t,
            &self.resource,
            "the reconnect",
            self.upstream_requests,
            &self.upstream_by_verb,
            &self.upstream_by_shape,
        );
        for (e, n) in &self.client.errors {
            let _ = writeln!(t, "  watchers: {e}: {n}");
        }
        metrics_lines(
            &mut t,
            "the restarted gateway's metrics at the window's end",
            &self.gateway_metrics,
        );
        let _ = writeln!(
            t,
            "  {} writes at {}/s across the restart: {} watchers checked, {} events checked, \
             {} stream violations",
            self.writes,
            self.write_rate,
            self.checked.watchers,
            self.checked_events,
            self.checked.violation_count
        );
        for v in self.checked.violations.iter().take(20) {
            let _ = writeln!(t, "    {v}");
        }
        let _ = writeln!(t, "  {}", if self.ok { "OK" } else { "FAILED" });
        t
    }
}

pub async fn run(args: RestartArgs) -> anyhow::Result<()> {
    let s = execute(&args).await?;
    if args.common.json {
        eprint!("{}", s.table());
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{}", s.table());
    }
    anyhow::ensure!(
        s.ok,
        "restart FAILED: {} stream violation(s), {} watcher(s) not reconnected",
        s.checked.violation_count,
        s.not_reconnected
    );
    Ok(())
}

pub async fn execute(a: &RestartArgs) -> anyhow::Result<RestartSummary> {
    let c = &a.common;
    let h = &a.herd;
    anyhow::ensure!(
        c.server.is_none() && c.kubeconfig.is_none() && c.write_server.is_none(),
        "restart starts its own simulator and gateway: --server, --kubeconfig and \
         --write-server do not apply"
    );
    raise_fd_limit(a.watchers + c.write_concurrency + 64);
    let res = h.resource.as_str();
    let sim = cluster::start_sim().await?;
    cluster::seed_objects(&sim, h.resource, h.objects, h.seed_size);
    let direct = Target::resolve(Some(&sim.url()), None, None, 1).await?;
    let pool = Arc::new(Pool {
        run: run_id(),
        resource: h.resource,
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
    let start_rv = sim.store().current_rv();
    let objects = cluster::object_count(&sim, h.resource);
    let spec_gw = GatewaySpec {
        bin: gateway_bin(h.gateway_bin.as_deref())?,
        upstreams: vec![sim.url()],
        extra: h.gateway_args.clone(),
        log: h.gateway_log.clone(),
    };
    let mut gw = spec_gw.start().await?;
    let target = Target::resolve(Some(&gw.url), None, None, c.streams_per_connection).await?;
    let collection = format!("/api/v1/{res}");
    warm_up(&target, &collection).await;
    writer::wait_until_seen(&target, &pool, start_rv, Duration::from_secs(60)).await;

    // The watchers, each with its initial state.
    let progress = progress_bar(c.no_progress, a.watchers);
    let t0 = Instant::now();
    let track = Arc::new(Track::new(a.watchers));
    let stats = Arc::new(Stats::new());
    let mut w = Watchers::new(c.connect_concurrency);
    let ctx = w.ctx(&target, stats.clone(), &pool, t0, Some(track.clone()));
    let spec = Arc::new(WatchSpec {
        path: collection.clone(),
        label_selector: None,
        field_selector: None,
        list_first: false,
        watch_list: false,
        rv0: Some(objects),
        protocol: c.protocol,
        reconnect_every: None,
        lifetime: None,
        encoding: c.encoding,
    });
    for id in 0..a.watchers {
        w.set
            .spawn(watcher::run(ctx.clone(), id, 0, spec.clone(), start_rv));
    }
    wait_until(
        t0 + h.herd_timeout,
        &progress,
        || Stats::get(&stats.c.synced) as usize >= a.watchers,
        || {
            format!(
                "connecting: {}/{} watchers have their state",
                Stats::get(&stats.c.synced),
                a.watchers
            )
        },
    )
    .await;
    let watchers_synced = Stats::get(&stats.c.synced);
    let initial_state = Latency::of(&stats.sync_latency());

    // Writes, then the kill and the restart.
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
    progress.set_message("writes before the kill");
    tokio::time::sleep(a.before_kill).await;
    sim.stats().reset();
    let killed = Instant::now();
    track.restarted();
    gw.kill().await;
    tokio::time::sleep(a.down_for).await;
    let (port, admin_port) = (gw.port, gw.admin_port);
    let mut gw = spec_gw
        .start_on(port, admin_port)
        .await
        .context("starting the gateway again on its port")?;
    let down_s = killed.elapsed().as_secs_f64();
    let complete = wait_until(
        killed + h.herd_timeout,
        &progress,
        || track.reconnects().missing == 0,
        || {
            let r = track.reconnects();
            format!(
                "reconnecting: {} resumed, {} relisted, {} to go",
                r.resumed, r.relisted, r.missing
            )
        },
    )
    .await;
    let window_s = killed.elapsed().as_secs_f64();
    // The restarted gateway's counters start at zero: all of them are the window's.
    let cost = WindowCost::measure(&sim, &gw, res, "").await;
    let r = track.reconnects();
    let mut hist = histogram();
    for us in &r.times_us {
        hist.saturating_record((*us).max(1));
    }

    // Writes go on a little after the reconnect, then every stream is checked.
    progress.set_message("writes after the reconnect");
    tokio::time::sleep(c.duration).await;
    writer_stop.cancel();
    let _ = writer_task.await;
    let final_log = log.lock().unwrap().clone();
    let checked = w
        .drain_and_check(&final_log, &pool, 1, c.drain_timeout)
        .await?;
    progress.finish_and_clear();
    gw.kill().await;
    sim.shutdown().await;

    let ok = complete && checked.violation_count == 0;
    Ok(RestartSummary {
        scenario: "restart".into(),
        resource: res.into(),
        encoding: format!("{:?}", c.encoding).to_lowercase(),
        objects,
        gateway: gw.url.clone(),
        watchers: a.watchers,
        watchers_synced,
        initial_state,
        down_s,
        reconnect_window_s: window_s,
        reconnect_complete: complete,
        resumed: r.resumed,
        relisted: r.relisted,
        not_reconnected: r.missing,
        reconnect: Latency::of(&hist),
        upstream_requests: cost.upstream_requests,
        upstream_by_verb: cost.by_verb,
        upstream_by_shape: cost.by_shape,
        gateway_metrics: cost.gateway_metrics,
        client: KindReport::of("watchers", a.watchers, &stats),
        writes: Stats::get(&writer_stats.c.writes),
        write_rate: c.rate,
        checked_events: Stats::get(&stats.c.checked),
        checked,
        ok,
    })
}

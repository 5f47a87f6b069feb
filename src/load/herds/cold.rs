//! `watchgate load cold-herd` (issue 26, acceptance "cold herd"): a gateway that just
//! started, with nothing cached, and at once N1 plain watches from resourceVersion=0, N2
//! informers starting with client-go 1.36's watch-list and N3 RV=0 lists, all on one
//! resource of M objects. What the upstream (the simulator) saw for the resource
//! during the herd, what each kind of client got (429s, other failures, time until it
//! had its initial state), then a short window of writes through which every stream is
//! checked. `--warm` runs the same herd against a gateway whose cache of the resource
//! is already synced: the baseline the cold herd's times are compared with.
//!
//! The writes start once every client has its initial state, or at --herd-timeout;
//! a client still without it then is reported, and its stream not checked (an RV=0
//! watch's state is its first ADDED event of every object, see `WatchSpec::rv0`).
//! Clients retry a 429 as client-go's reflector does, backing off from 800 ms to 30 s.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{metrics_lines, upstream_lines, wait_until, Checked, KindReport, Watchers, WindowCost};
use crate::load::args::ColdHerdArgs;
use crate::load::checker::WriterLog;
use crate::load::cluster::{self, gateway_bin, GatewaySpec};
use crate::load::harness::{progress_bar, raise_fd_limit, run_id, warm_up};
use crate::load::lister::{list_once, ListSpec};
use crate::load::pool::Pool;
use crate::load::stats::Stats;
use crate::load::target::Target;
use crate::load::watcher::{self, WatchSpec};
use crate::load::writer;

#[derive(Debug, Clone, Default, Serialize)]
pub struct ColdHerdSummary {
    pub scenario: String,
    /// `cold` or `warm`.
    pub gateway_state: String,
    pub resource: String,
    pub encoding: String,
    /// Objects of the resource during the herd (seeded, the writer's pool and any other).
    pub objects: u64,
    pub gateway: String,
    /// From the herd's start until every client had its initial state (or the bound).
    pub herd_s: f64,
    pub herd_complete: bool,
    /// The simulator's requests for the resource during the herd: `{verb: n}`, and
    /// `{verb: {shape: n}}` (a gateway's freshness probes are `consistent,limit=1` lists
    /// today; see docs/simulator.md for every shape).
    pub upstream_requests: u64,
    pub upstream_by_verb: Value,
    pub upstream_by_shape: Value,
    pub clients: Vec<KindReport>,
    /// The gateway's metrics that changed during the herd.
    pub gateway_metrics: BTreeMap<String, f64>,
    pub writes: u64,
    pub write_rate: f64,
    pub checked_events: u64,
    pub checked: Checked,
    pub ok: bool,
}

impl ColdHerdSummary {
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "cold-herd ({} gateway {}): {} {} ({} encoding)",
            self.gateway_state, self.gateway, self.objects, self.resource, self.encoding
        );
        let _ = writeln!(
            t,
            "  herd served in {:.2} s{}",
            self.herd_s,
            if self.herd_complete {
                ""
            } else {
                " (NOT every client had its state by --herd-timeout)"
            }
        );
        upstream_lines(
            &mut t,
            &self.resource,
            "the herd",
            self.upstream_requests,
            &self.upstream_by_verb,
            &self.upstream_by_shape,
        );
        let _ = writeln!(t, "{}", KindReport::header());
        for k in &self.clients {
            let _ = writeln!(t, "{}", k.row());
        }
        for k in &self.clients {
            for (e, n) in &k.errors {
                let _ = writeln!(t, "  {}: {e}: {n}", k.kind);
            }
        }
        metrics_lines(
            &mut t,
            "gateway metrics, change over the herd",
            &self.gateway_metrics,
        );
        let _ = writeln!(
            t,
            "  then {} writes at {}/s: {} watchers checked ({} never had their state), {} \
             events checked, {} stream violations",
            self.writes,
            self.write_rate,
            self.checked.watchers,
            self.checked.without_state,
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

pub async fn run(args: ColdHerdArgs) -> anyhow::Result<()> {
    let s = execute(&args).await?;
    if args.common.json {
        eprint!("{}", s.table());
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{}", s.table());
    }
    anyhow::ensure!(
        s.ok,
        "cold-herd FAILED: {} stream violation(s), herd complete: {}",
        s.checked.violation_count,
        s.herd_complete
    );
    Ok(())
}

/// One RV=0 list, retried with client-go's reflector backoff until it succeeds or
/// `stop`; its time to state is recorded when it does.
async fn list_client(
    target: Target,
    spec: Arc<ListSpec>,
    stats: Arc<Stats>,
    t0: Instant,
    stop: CancellationToken,
) {
    let mut backoff = watcher::BACKOFF_FIRST;
    while !stop.is_cancelled() {
        let r = tokio::select! {
            _ = stop.cancelled() => return,
            r = list_once(&target, &spec, &stats) => r,
        };
        if r.is_ok() {
            stats.record_sync(t0.elapsed().as_micros() as u64);
            return;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = watcher::back_off(&mut backoff) => {}
        }
    }
}

pub async fn execute(a: &ColdHerdArgs) -> anyhow::Result<ColdHerdSummary> {
    let c = &a.common;
    let h = &a.herd;
    anyhow::ensure!(
        c.server.is_none() && c.kubeconfig.is_none() && c.write_server.is_none(),
        "cold-herd starts its own simulator and gateway: --server, --kubeconfig and \
         --write-server do not apply"
    );
    raise_fd_limit(a.watches + a.informers + a.lists + c.write_concurrency + 64);
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

    let mut gw = GatewaySpec {
        bin: gateway_bin(h.gateway_bin.as_deref())?,
        upstreams: vec![sim.url()],
        extra: h.gateway_args.clone(),
        log: h.gateway_log.clone(),
    }
    .start()
    .await?;
    let target = Target::resolve(Some(&gw.url), None, None, c.streams_per_connection).await?;
    let collection = format!("/api/v1/{res}");
    if a.warm {
        // Its cache of the resource synced, and at the start RV.
        warm_up(&target, &collection).await;
        anyhow::ensure!(
            writer::wait_until_seen(&target, &pool, start_rv, Duration::from_secs(60)).await,
            "the gateway's cache did not reach the start RV {start_rv} within 60 s"
        );
    }
    let metrics_before = gw.metrics().await.unwrap_or_default();
    sim.stats().reset();

    // The herd, at once.
    let t0 = Instant::now();
    let progress = progress_bar(c.no_progress, a.watches + a.informers);
    let mut w = Watchers::new(c.connect_concurrency);
    let kinds = [
        ("RV=0 watches", a.watches),
        ("watch-list informers", a.informers),
        ("RV=0 lists", a.lists),
    ];
    let stats: Vec<Arc<Stats>> = kinds.iter().map(|_| Arc::new(Stats::new())).collect();
    let spec = |watch_list: bool, rv0: Option<u64>| {
        Arc::new(WatchSpec {
            path: collection.clone(),
            label_selector: None,
            field_selector: None,
            list_first: false,
            watch_list,
            rv0,
            protocol: c.protocol,
            reconnect_every: None,
            lifetime: None,
            encoding: c.encoding,
        })
    };
    let rv0_ctx = w.ctx(&target, stats[0].clone(), &pool, t0, None);
    let wl_ctx = w.ctx(&target, stats[1].clone(), &pool, t0, None);
    let (rv0_spec, wl_spec) = (spec(false, Some(objects)), spec(true, None));
    // Interleaved, so that neither kind gets the head of the queue.
    let mut id = 0;
    for i in 0..a.watches.max(a.informers) {
        if i < a.watches {
            w.set.spawn(watcher::run(
                rv0_ctx.clone(),
                id,
                0,
                rv0_spec.clone(),
                start_rv,
            ));
            id += 1;
        }
        if i < a.informers {
            w.set.spawn(watcher::run(
                wl_ctx.clone(),
                id,
                1,
                wl_spec.clone(),
                start_rv,
            ));
            id += 1;
        }
    }
    let list_spec = Arc::new(ListSpec {
        path: collection.clone(),
        query: String::new(),
        limit: 0,
        resource_version: "0".into(),
        encoding: c.encoding,
    });
    let list_stop = CancellationToken::new();
    let mut lists = tokio::task::JoinSet::new();
    for _ in 0..a.lists {
        lists.spawn(list_client(
            target.clone(),
            list_spec.clone(),
            stats[2].clone(),
            t0,
            list_stop.clone(),
        ));
    }
    let done = |i: usize| Stats::get(&stats[i].c.synced) as usize >= kinds[i].1;
    let complete = wait_until(
        t0 + h.herd_timeout,
        &progress,
        || (0..3).all(done),
        || {
            format!(
                "herd: {}/{} RV=0 watches, {}/{} informers, {}/{} lists have their state",
                Stats::get(&stats[0].c.synced),
                a.watches,
                Stats::get(&stats[1].c.synced),
                a.informers,
                Stats::get(&stats[2].c.synced),
                a.lists
            )
        },
    )
    .await;
    let herd_s = t0.elapsed().as_secs_f64();
    list_stop.cancel();
    while lists.join_next().await.is_some() {}
    let cost = WindowCost::measure(&sim, &gw, res, &metrics_before).await;
    let clients: Vec<KindReport> = kinds
        .iter()
        .zip(&stats)
        .map(|((k, n), s)| KindReport::of(k, *n, s))
        .collect();

    // Then writes, and every stream checked.
    progress.set_message("writes: every stream is checked");
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
    tokio::time::sleep(c.duration).await;
    writer_stop.cancel();
    let _ = writer_task.await;
    let final_log = log.lock().unwrap().clone();
    let checked = w
        .drain_and_check(&final_log, &pool, 2, c.drain_timeout)
        .await?;
    progress.finish_and_clear();
    gw.kill().await;
    sim.shutdown().await;

    let checked_events = Stats::get(&stats[0].c.checked) + Stats::get(&stats[1].c.checked);
    let ok = complete && checked.violation_count == 0;
    Ok(ColdHerdSummary {
        scenario: "cold-herd".into(),
        gateway_state: if a.warm { "warm" } else { "cold" }.into(),
        resource: res.into(),
        encoding: format!("{:?}", c.encoding).to_lowercase(),
        objects,
        gateway: gw.url.clone(),
        herd_s,
        herd_complete: complete,
        upstream_requests: cost.upstream_requests,
        upstream_by_verb: cost.by_verb,
        upstream_by_shape: cost.by_shape,
        clients,
        gateway_metrics: cost.gateway_metrics,
        writes: Stats::get(&writer_stats.c.writes),
        write_rate: c.rate,
        checked_events,
        checked,
        ok,
    })
}

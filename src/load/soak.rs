//! `watchgate load soak`: the fault soak (issue 16 item 5, docs/reliability.md).
//!
//! It needs to kill and restart apiservers, so it does not drive an external target: it
//! starts two simulator replicas sharing one store in this process (two kube-apiservers
//! on one etcd) and a gateway as a child process in front of both (`serve --server A,B`),
//! so that the gateway's RSS is its own (read from /proc). Then, for `--duration`:
//!
//! - the writer patches the pool's pods through the gateway at `--rate`;
//! - `--watchers` healthy watchers read everything and are checked;
//! - every `--drop-watches-every`, every upstream watch stream is ended;
//! - every `--fault-cycle`: a burst of 410s on both replicas, replica A killed and
//!   restarted, replica B killed and restarted, a window of added upstream latency;
//! - every `--storm-every`, `--storm-clients` informers list, watch for a while and leave;
//! - halfway, `--stalled` watchers connect and stop reading: the first half measures
//!   delivery without them, the second half with them.
//!
//! At the end every healthy and storm watcher's stream is checked against the writer's
//! log (0 gaps, duplicates, reorderings), and the gateway's RSS against `--max-rss`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use http::Method;
use serde::Serialize;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::args::{Scenario, SoakArgs};
use super::checker::{Violation, WriterLog};
use super::cluster::{gateway_bin, Gateway, GatewaySpec};
use super::harness::{check_outcomes, progress_bar, raise_fd_limit, run_id, warm_up};
use super::plan::Plan;
use super::plot::{write_rss_svg, write_svg, PlotData, PlotKind};
use super::pool::Pool;
use super::probe::proc_sample;
use super::report::Latency;
use super::stats::{histogram, Stats};
use super::target::Target;
use super::watcher::{self, Ctx, Outcome, WatchSpec};
use super::writer;
use crate::sim::faults::WatchBegin;
use crate::sim::{self, SimConfig, SimHandle, Store};

/// `watchgate load soak`: runs, prints, fails on any violation or on too much memory.
pub async fn run(args: SoakArgs) -> anyhow::Result<()> {
    let s = execute(&args).await?;
    if args.common.json {
        eprint!("{}", s.table());
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{}", s.table());
    }
    if !s.ok {
        anyhow::bail!(
            "the soak FAILED: {} stream violation(s), {}/{} healthy watchers connected, \
             gateway RSS peak {:.0} MiB (limit {:.0} MiB)",
            s.violation_count,
            s.watchers_connected,
            s.watchers,
            s.rss_peak_bytes.unwrap_or(0.0) / MIB,
            s.rss_limit_bytes / MIB
        );
    }
    Ok(())
}

const MIB: f64 = 1024.0 * 1024.0;

/// One fault applied, at this second of the measured window.
#[derive(Debug, Clone, Serialize)]
pub struct FaultEvent {
    pub at_s: f64,
    pub what: String,
}

/// How many of each fault the run applied.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FaultCounts {
    /// Rounds of "every upstream watch stream ended".
    pub watch_drops: u64,
    pub bursts_410: u64,
    pub kills: u64,
    pub restarts: u64,
    pub latency_windows: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct SoakSummary {
    pub gateway: String,
    pub upstreams: Vec<String>,
    pub duration_s: f64,
    pub write_rate: f64,
    pub writes: u64,
    pub writes_behind: u64,
    pub watchers: usize,
    pub watchers_connected: usize,
    pub stalled: usize,
    pub stalled_connected: u64,
    /// Second of the window at which the stalled watchers were all connected (or gave up).
    pub stalled_joined_at_s: f64,
    pub storm_clients: u64,
    pub storm_watch_requests: u64,
    pub storm_checked_events: u64,
    pub events: u64,
    pub checked_events: u64,
    pub watch_requests: u64,
    pub watchers_terminated: u64,
    pub gone_410: u64,
    /// Healthy watchers' delivery latency (write to watcher), by write time: the first
    /// half (no stalled watchers), the second half once the stalled ones are connected,
    /// and the whole window.
    pub delivery_without_stalled: Latency,
    pub delivery_with_stalled: Latency,
    pub delivery: Latency,
    pub storm_delivery: Latency,
    pub write_latency: Latency,
    /// Errors seen by the writer and the healthy watchers (by kind), and by storm clients.
    pub errors: BTreeMap<String, u64>,
    pub storm_errors: BTreeMap<String, u64>,
    pub faults: FaultCounts,
    pub fault_log: Vec<FaultEvent>,
    pub rss_connected_bytes: Option<f64>,
    pub rss_peak_without_stalled_bytes: Option<f64>,
    pub rss_peak_with_stalled_bytes: Option<f64>,
    pub rss_peak_bytes: Option<f64>,
    pub rss_end_bytes: Option<f64>,
    pub rss_limit_bytes: f64,
    /// (second since the gateway started, bytes), one a second.
    pub rss_samples: Vec<(f64, f64)>,
    /// Second (since the gateway started) at which the measured window began.
    pub window_start_s: f64,
    /// Forced 410s the simulators served (to the gateway's reflector).
    pub upstream_410s: usize,
    /// (RV asked, the relist's RV) of each of them.
    pub relist_windows: Vec<(u64, u64)>,
    /// Writes excluded from what watchers must see: superseded within a relist window.
    pub superseded_by_relist: usize,
    pub violations: Vec<Violation>,
    pub violation_count: u64,
    pub ok: bool,
}

impl SoakSummary {
    pub fn table(&self) -> String {
        let mut t = String::new();
        let mib = |b: Option<f64>| b.map_or("n/a".into(), |b| format!("{:.1} MiB", b / MIB));
        let lat = |l: &Latency| {
            format!(
                "p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms  ({} deliveries)",
                l.p50_ms, l.p99_ms, l.max_ms, l.count
            )
        };
        let _ = writeln!(
            t,
            "soak: gateway {} over {:?}",
            self.gateway, self.upstreams
        );
        let _ = writeln!(
            t,
            "  window {:.0} s, {} writes ({:.1}/s asked, {} skipped), write {}",
            self.duration_s,
            self.writes,
            self.write_rate,
            self.writes_behind,
            lat(&self.write_latency)
        );
        let _ = writeln!(
            t,
            "  healthy watchers {}/{} connected; {} events ({} checked), {} watch requests, \
             {} streams ended by the server, {} x 410",
            self.watchers_connected,
            self.watchers,
            self.events,
            self.checked_events,
            self.watch_requests,
            self.watchers_terminated,
            self.gone_410
        );
        let _ = writeln!(
            t,
            "  stalled watchers {}/{} connected at {:.0} s; storm clients {} ({} watch \
             requests, {} events checked)",
            self.stalled_connected,
            self.stalled,
            self.stalled_joined_at_s,
            self.storm_clients,
            self.storm_watch_requests,
            self.storm_checked_events
        );
        let _ = writeln!(
            t,
            "  delivery without stalled: {}",
            lat(&self.delivery_without_stalled)
        );
        let _ = writeln!(
            t,
            "  delivery with stalled:    {}",
            lat(&self.delivery_with_stalled)
        );
        let _ = writeln!(t, "  delivery (whole window): {}", lat(&self.delivery));
        let _ = writeln!(
            t,
            "  storm clients' delivery: {}",
            lat(&self.storm_delivery)
        );
        let f = &self.faults;
        let _ = writeln!(
            t,
            "  faults: {} watch drops, {} 410 bursts, {} kills, {} restarts, {} latency windows",
            f.watch_drops, f.bursts_410, f.kills, f.restarts, f.latency_windows
        );
        let _ = writeln!(
            t,
            "  gateway RSS: {} with the watchers connected, peak {} without stalled, {} with; \
             peak {}, end {} (limit {:.0} MiB)",
            mib(self.rss_connected_bytes),
            mib(self.rss_peak_without_stalled_bytes),
            mib(self.rss_peak_with_stalled_bytes),
            mib(self.rss_peak_bytes),
            mib(self.rss_end_bytes),
            self.rss_limit_bytes / MIB
        );
        for (k, v) in &self.errors {
            let _ = writeln!(t, "  error: {k}: {v}");
        }
        for (k, v) in &self.storm_errors {
            let _ = writeln!(t, "  storm error: {k}: {v}");
        }
        let _ = writeln!(
            t,
            "  upstream 410s served: {}; writes superseded within a relist (not expected one \
             by one): {}",
            self.upstream_410s, self.superseded_by_relist
        );
        let _ = writeln!(t, "  violations: {}", self.violation_count);
        for v in self.violations.iter().take(20) {
            let _ = writeln!(t, "    {v:?}");
        }
        let _ = writeln!(t, "  {}", if self.ok { "OK" } else { "FAILED" });
        t
    }
}

/// Two simulator replicas over one store; each can be killed and restarted on its port.
struct Replicas {
    store: Arc<Store>,
    /// The watches the replicas began (from those killed, collected at the kill).
    watch_begins: Mutex<Vec<WatchBegin>>,
    addrs: [SocketAddr; 2],
    slots: [Mutex<Option<SimHandle>>; 2],
}

impl Replicas {
    async fn start() -> anyhow::Result<Self> {
        let a = sim::start(SimConfig {
            bootstrap_namespaces: true,
            ..SimConfig::default()
        })
        .await
        .context("starting simulator A")?;
        let store = a.store().clone();
        let b = sim::start_replica(SimConfig::default(), store.clone())
            .await
            .context("starting simulator B")?;
        Ok(Self {
            store,
            watch_begins: Mutex::default(),
            addrs: [a.addr(), b.addr()],
            slots: [Mutex::new(Some(a)), Mutex::new(Some(b))],
        })
    }

    fn urls(&self) -> Vec<String> {
        self.addrs.iter().map(|a| format!("http://{a}")).collect()
    }

    /// Applies `f` to the faults of every replica that is up.
    fn each(&self, f: impl Fn(&sim::faults::Faults)) {
        for s in &self.slots {
            if let Some(h) = s.lock().unwrap().as_ref() {
                f(h.faults());
            }
        }
    }

    /// Dies like a killed process (every connection dropped mid-stream).
    async fn kill(&self, i: usize) -> bool {
        let h = self.slots[i].lock().unwrap().take();
        match h {
            Some(h) => {
                self.watch_begins
                    .lock()
                    .unwrap()
                    .extend(h.faults().watch_begins());
                h.kill().await;
                true
            }
            None => false,
        }
    }

    /// Starts replica `i` again on its port (retrying while the port is not free yet).
    async fn restart(&self, i: usize) -> anyhow::Result<bool> {
        if self.slots[i].lock().unwrap().is_some() {
            return Ok(false);
        }
        let cfg = SimConfig {
            addr: self.addrs[i],
            ..SimConfig::default()
        };
        let mut tries = 0;
        let h = loop {
            match sim::start_replica(cfg.clone(), self.store.clone()).await {
                Ok(h) => break h,
                Err(e) if tries < 100 => {
                    tries += 1;
                    tracing::debug!("restarting replica {i}: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e).context("restarting a simulator replica"),
            }
        };
        *self.slots[i].lock().unwrap() = Some(h);
        Ok(true)
    }

    /// The relist windows so far (see [`relist_windows`]), from replicas up or killed.
    fn relist_windows(&self) -> Vec<(u64, u64)> {
        let mut all = self.watch_begins.lock().unwrap().clone();
        for s in &self.slots {
            if let Some(h) = s.lock().unwrap().as_ref() {
                all.extend(h.faults().watch_begins());
            }
        }
        relist_windows(all)
    }

    async fn stop(&self) {
        for i in 0..2 {
            let h = self.slots[i].lock().unwrap().take();
            if let Some(h) = h {
                h.shutdown().await;
            }
        }
    }
}

/// The RV windows the gateway's reflector relisted over: every watch from an RV > 0
/// answered with a forced 410, from the RV it asked to the RV of the relist — the RV the
/// next watch asked, or, when that is a watch-list (RV 0 or unset), the store's RV when it
/// began (its initial state); a watch-list answered 410 falls back to a list and is
/// skipped. Only the reflector watches the simulators in the soak (clients are served from
/// the cache) and it runs one watch at a time, so the next watch any replica began is its
/// next one. Without a next watch: the store's RV at the 410.
fn relist_windows(mut begins: Vec<WatchBegin>) -> Vec<(u64, u64)> {
    begins.sort_by_key(|b| b.at);
    begins
        .iter()
        .enumerate()
        .filter(|(_, b)| b.gone && b.asked > 0)
        .map(|(i, b)| {
            let relist = begins[i + 1..]
                .iter()
                .find_map(|n| match (n.asked, n.gone) {
                    (0, true) => None,
                    (0, false) => Some(n.current),
                    (asked, _) => Some(asked),
                })
                .unwrap_or(b.current);
            (b.asked, relist.max(b.current))
        })
        .collect()
}

/// The fault schedule's shape.
#[derive(Debug, Clone)]
struct FaultPlan {
    cycle: Duration,
    burst_410: u32,
    latency: Duration,
}

#[derive(Default)]
struct FaultLog {
    events: Mutex<Vec<FaultEvent>>,
    counts: Mutex<FaultCounts>,
}

impl FaultLog {
    fn record(&self, t0: Instant, what: impl Into<String>, count: impl FnOnce(&mut FaultCounts)) {
        let what = what.into();
        tracing::debug!("soak fault: {what}");
        self.events.lock().unwrap().push(FaultEvent {
            at_s: t0.elapsed().as_secs_f64(),
            what,
        });
        count(&mut self.counts.lock().unwrap());
    }
}

/// Sleeps until `t`; false if `stop` came first.
async fn until(t: Instant, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = stop.cancelled() => false,
        _ = tokio::time::sleep_until(t.into()) => true,
    }
}

/// Ends every upstream watch stream every `drop_every`, until `stop`.
async fn drop_watches(
    rep: Arc<Replicas>,
    every: Duration,
    t0: Instant,
    stop: CancellationToken,
    log: Arc<FaultLog>,
) {
    let mut next = t0 + every;
    while until(next, &stop).await {
        rep.each(|f| f.drop_watches_now());
        log.record(t0, "upstream watches dropped", |c| c.watch_drops += 1);
        next += every;
    }
}

/// The cycle: at 10% a 410 burst, 25% kill A, 40% restart A, 55% kill B, 70% restart B,
/// 80-95% added latency. One replica is always up. On `stop` every replica is restarted
/// and the latency removed, so that the drain runs against a healthy cluster.
async fn fault_cycles(
    rep: Arc<Replicas>,
    plan: FaultPlan,
    t0: Instant,
    stop: CancellationToken,
    log: Arc<FaultLog>,
) -> anyhow::Result<()> {
    let mut cycle_start = t0;
    'cycles: loop {
        let at = |f: f64| cycle_start + plan.cycle.mul_f64(f);
        let steps: [(f64, u8); 7] = [
            (0.10, 0),
            (0.25, 1),
            (0.40, 2),
            (0.55, 3),
            (0.70, 4),
            (0.80, 5),
            (0.95, 6),
        ];
        for (f, step) in steps {
            if !until(at(f), &stop).await {
                break 'cycles;
            }
            match step {
                0 => {
                    let n = plan.burst_410;
                    rep.each(|f| {
                        f.force_410_next_watch(n);
                        f.drop_watches_now();
                    });
                    log.record(t0, format!("410 burst ({n} per replica)"), |c| {
                        c.bursts_410 += 1
                    });
                }
                1 | 3 => {
                    let i = usize::from(step == 3);
                    if rep.kill(i).await {
                        log.record(t0, format!("replica {} killed", ["A", "B"][i]), |c| {
                            c.kills += 1
                        });
                    }
                }
                2 | 4 => {
                    let i = usize::from(step == 4);
                    if rep.restart(i).await? {
                        log.record(t0, format!("replica {} restarted", ["A", "B"][i]), |c| {
                            c.restarts += 1
                        });
                    }
                }
                5 => {
                    let l = plan.latency;
                    rep.each(|f| f.set_latency(l));
                    log.record(t0, format!("latency {} ms on", l.as_millis()), |c| {
                        c.latency_windows += 1
                    });
                }
                _ => {
                    rep.each(|f| f.set_latency(Duration::ZERO));
                    log.record(t0, "latency off", |_| {});
                }
            }
        }
        cycle_start += plan.cycle;
    }
    for i in 0..2 {
        if rep.restart(i).await? {
            log.record(
                t0,
                format!("replica {} restarted (end)", ["A", "B"][i]),
                |c| c.restarts += 1,
            );
        }
    }
    rep.each(|f| f.set_latency(Duration::ZERO));
    Ok(())
}

/// The storms' shape: `clients` informers every `every`, each staying a random part of
/// `lifetime`.
#[derive(Debug, Clone, Copy)]
struct StormPlan {
    clients: usize,
    every: Duration,
    lifetime: Duration,
}

/// Storms: every `every`, `clients` informers (list, then watch) that leave after a
/// random part of `lifetime`. Returns their outcomes once `stop` came and they all left.
async fn storms(
    ctx: Arc<Ctx>,
    base: WatchSpec,
    plan: StormPlan,
    start_rv: u64,
    stop: CancellationToken,
    spawned: Arc<AtomicU64>,
) -> Vec<Outcome> {
    let StormPlan {
        clients,
        every,
        lifetime,
    } = plan;
    let mut set = JoinSet::new();
    let mut outcomes = Vec::new();
    let mut id = 1_000_000usize;
    let mut next = Instant::now() + every;
    if clients > 0 && !every.is_zero() {
        while until(next, &stop).await {
            for _ in 0..clients {
                let stay = lifetime.mul_f64(0.25 + 0.75 * rand::random::<f64>());
                let spec = Arc::new(WatchSpec {
                    lifetime: Some(stay),
                    ..base.clone()
                });
                set.spawn(watcher::run(ctx.clone(), id, 0, spec, start_rv));
                id += 1;
            }
            spawned.fetch_add(clients as u64, Ordering::Relaxed);
            next += every;
            // Reap those that left, so that the set stays small.
            while let Some(r) = set.try_join_next() {
                if let Ok(o) = r {
                    outcomes.push(o);
                }
            }
        }
    }
    while let Some(r) = set.join_next().await {
        if let Ok(o) = r {
            outcomes.push(o);
        }
    }
    outcomes
}

/// A watcher that connects and then never reads (its TCP window fills, the gateway's
/// writes to it block): held until `stop`.
async fn stalled(target: Target, path: String, stop: CancellationToken, connected: Arc<AtomicU64>) {
    while !stop.is_cancelled() {
        let resp = tokio::select! {
            _ = stop.cancelled() => return,
            r = target.send(Method::GET, &path, None) => r,
        };
        match resp {
            Ok(resp) if resp.status().is_success() => {
                connected.fetch_add(1, Ordering::Relaxed);
                stop.cancelled().await;
                drop(resp);
                return;
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// The gateway's RSS once a second, with the second since `t0`.
async fn sample_rss(pid: u32, t0: Instant, stop: CancellationToken) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {
                if let Some((_, rss)) = proc_sample(pid) {
                    out.push((t0.elapsed().as_secs_f64(), rss));
                }
            }
        }
    }
    out
}

fn merged(per_second: &[Histogram<u64>], from: usize, to: usize) -> Histogram<u64> {
    let mut h = histogram();
    for s in per_second.iter().take(to).skip(from) {
        h.add(s).expect("same bounds");
    }
    h
}

/// The soak, in its phases: [`set_up`] (two simulator replicas, the gateway, the
/// writer's pool), [`connect`] (the healthy watchers, before the clock starts), [`drive`]
/// (the measured window: writes, every fault, storms, the stalled watchers joining
/// halfway), [`drain`] (every watcher gets the last write it must see, against a healthy
/// cluster) and [`report`] (every stream checked, the cluster stopped, the summary).
pub async fn execute(a: &SoakArgs) -> anyhow::Result<SoakSummary> {
    let c = &a.common;
    anyhow::ensure!(
        c.server.is_none() && c.kubeconfig.is_none() && c.write_server.is_none(),
        "the soak starts its own simulators and gateway: --server, --kubeconfig and \
         --write-server do not apply"
    );
    anyhow::ensure!(c.rate.is_finite() && c.rate >= 0.0, "--rate must be >= 0");
    anyhow::ensure!(!a.fault_cycle.is_zero(), "--fault-cycle must be > 0");
    raise_fd_limit(a.watchers + a.stalled + 2 * a.storm_clients + c.write_concurrency + 64);

    let mut setup = set_up(a).await?;
    let mut watchers = connect(a, &setup).await;
    let window = drive(a, &setup, &watchers).await?;
    let drained = drain(a, &mut setup, &mut watchers, window).await?;
    report(a, setup, watchers, drained).await
}

/// What [`set_up`] started and prepared.
struct SoakSetup {
    rep: Arc<Replicas>,
    upstreams: Vec<String>,
    gw: Gateway,
    /// When the gateway started: the RSS samples' clock.
    t_gw: Instant,
    rss_stop: CancellationToken,
    rss_task: Option<tokio::task::JoinHandle<Vec<(f64, f64)>>>,
    target: Target,
    plan: Plan,
    pool: Arc<Pool>,
    log: Arc<Mutex<WriterLog>>,
    start_rv: u64,
}

async fn set_up(a: &SoakArgs) -> anyhow::Result<SoakSetup> {
    let c = &a.common;
    let rep = Arc::new(Replicas::start().await?);
    let upstreams = rep.urls();
    let gw = GatewaySpec {
        bin: gateway_bin(a.gateway_bin.as_deref())?,
        upstreams: upstreams.clone(),
        extra: a.gateway_args.clone(),
        log: a.gateway_log.clone(),
    }
    .start()
    .await?;
    let t_gw = Instant::now();
    let rss_stop = CancellationToken::new();
    let rss_task = tokio::spawn(sample_rss(gw.pid, t_gw, rss_stop.clone()));

    let target = Target::resolve(Some(&gw.url), None, None, c.streams_per_connection).await?;
    let plan = Plan::from_scenario(&Scenario::Soak(a.clone()));
    let pool = Arc::new(Pool {
        run: run_id(),
        resource: Default::default(),
        namespace: c.namespace.clone(),
        size: c.pool.max(1),
        nodes: plan.nodes,
        node_prefix: plan.node_prefix.clone(),
        shards: c.shards.max(1),
        object_size: c.object_size,
    });
    warm_up(&target, "/api/v1/pods").await;
    let log = Arc::new(Mutex::new(WriterLog::default()));
    let start_rv = writer::create_pool(&target, &pool, 32, &log)
        .await
        .context("creating the writer's pool")?;
    writer::wait_until_seen(&target, &pool, start_rv, Duration::from_secs(15)).await;

    Ok(SoakSetup {
        rep,
        upstreams,
        gw,
        t_gw,
        rss_stop,
        rss_task: Some(rss_task),
        target,
        plan,
        pool,
        log,
        start_rv,
    })
}

/// The healthy watchers, once [`connect`] has connected them (or given up at its
/// deadline), and the contexts the storm clients use.
struct SoakWatchers {
    stop: CancellationToken,
    draining: CancellationToken,
    stats: Arc<Stats>,
    storm_stats: Arc<Stats>,
    ctx: Arc<Ctx>,
    storm_ctx: Arc<Ctx>,
    spec: Arc<WatchSpec>,
    /// Healthy watchers, and how many connected.
    n: usize,
    connected: usize,
    watchers: JoinSet<Outcome>,
    progress: indicatif::ProgressBar,
    rss_connected: Option<f64>,
}

/// Healthy watchers connect before the clock starts.
async fn connect(a: &SoakArgs, setup: &SoakSetup) -> SoakWatchers {
    let c = &a.common;
    let SoakSetup {
        gw,
        target,
        plan,
        pool,
        start_rv,
        ..
    } = setup;
    let start_rv = *start_rv;
    let stop = CancellationToken::new();
    let draining = CancellationToken::new();
    let gate = Arc::new(tokio::sync::Semaphore::new(c.connect_concurrency.max(1)));
    let ctx_with = |stats: Arc<Stats>| {
        Arc::new(Ctx {
            target: target.clone(),
            stats,
            pool: pool.clone(),
            stop: stop.clone(),
            drain_log: Default::default(),
            draining: draining.clone(),
            connect_gate: gate.clone(),
            spawned: Instant::now(),
            track: None,
        })
    };
    let stats = Arc::new(Stats::new());
    let storm_stats = Arc::new(Stats::new());
    let ctx = ctx_with(stats.clone());
    let storm_ctx = ctx_with(storm_stats.clone());

    // Healthy watchers connect before the clock starts.
    let (spec, n) = plan.groups[0].clone();
    let mut watchers = JoinSet::new();
    for id in 0..n {
        watchers.spawn(watcher::run(ctx.clone(), id, 0, spec.clone(), start_rv));
    }
    let progress = progress_bar(c.no_progress, n);
    let deadline =
        Instant::now() + Duration::from_secs(30).max(Duration::from_millis(20 * n as u64));
    while (Stats::get(&stats.c.watching) as usize) < n && Instant::now() < deadline {
        progress.set_message(format!(
            "connecting: {}/{n} watching",
            Stats::get(&stats.c.watching)
        ));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let connected = Stats::get(&stats.c.watching) as usize;
    let rss_connected = proc_sample(gw.pid).map(|s| s.1);

    SoakWatchers {
        stop,
        draining,
        stats,
        storm_stats,
        ctx,
        storm_ctx,
        spec,
        n,
        connected,
        watchers,
        progress,
        rss_connected,
    }
}

/// What [`drive`] measured, and what is still running when it ends (the storms, the
/// stalled watchers).
struct SoakWindow {
    window: Duration,
    window_start_s: f64,
    flog: Arc<FaultLog>,
    /// Taken by [`drain`], which waits for the storms' outcomes.
    storm_task: Option<tokio::task::JoinHandle<Vec<Outcome>>>,
    storm_spawned: Arc<AtomicU64>,
    stalled_connected: Arc<AtomicU64>,
    stalled_set: JoinSet<()>,
    stalled_joined_at: Option<f64>,
}

/// The measured window: the writer, every fault, connect/disconnect storms, and the
/// stalled watchers joining halfway.
async fn drive(a: &SoakArgs, setup: &SoakSetup, w: &SoakWatchers) -> anyhow::Result<SoakWindow> {
    let c = &a.common;
    let SoakSetup {
        rep,
        t_gw,
        target,
        pool,
        log,
        start_rv,
        ..
    } = setup;
    let start_rv = *start_rv;
    let SoakWatchers {
        stop,
        stats,
        storm_stats,
        storm_ctx,
        spec,
        progress,
        ..
    } = w;
    // The measured window.
    let started = Instant::now();
    let window_start_s = t_gw.elapsed().as_secs_f64();
    stats.mark_start();
    storm_stats.mark_start();
    let writer_stop = CancellationToken::new();
    let fault_stop = CancellationToken::new();
    let flog = Arc::new(FaultLog::default());
    let writer_task = tokio::spawn(writer::run(
        target.clone(),
        pool.clone(),
        c.rate,
        c.write_concurrency,
        stats.clone(),
        log.clone(),
        writer_stop.clone(),
    ));
    let drops_task = tokio::spawn(drop_watches(
        rep.clone(),
        a.drop_watches_every.max(Duration::from_millis(100)),
        started,
        fault_stop.clone(),
        flog.clone(),
    ));
    let cycle_task = tokio::spawn(fault_cycles(
        rep.clone(),
        FaultPlan {
            cycle: a.fault_cycle,
            burst_410: a.burst_410,
            latency: Duration::from_millis(a.latency_ms),
        },
        started,
        fault_stop.clone(),
        flog.clone(),
    ));
    let storm_spawned = Arc::new(AtomicU64::new(0));
    let storm_task = tokio::spawn(storms(
        storm_ctx.clone(),
        WatchSpec {
            list_first: true,
            ..(**spec).clone()
        },
        StormPlan {
            clients: a.storm_clients,
            every: a.storm_every,
            lifetime: a.storm_lifetime,
        },
        start_rv,
        writer_stop.clone(),
        storm_spawned.clone(),
    ));

    let end = started + c.duration;
    let half = started + c.duration / 2;
    let stalled_connected = Arc::new(AtomicU64::new(0));
    let mut stalled_set = JoinSet::new();
    let mut stalled_joined_at: Option<f64> = None;
    let stalled_path = format!(
        "{}?watch=1&resourceVersion=0&allowWatchBookmarks=true",
        spec.path
    );
    progress.set_length(c.duration.as_millis() as u64);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(250).min(end - Instant::now())).await;
        let now = Instant::now();
        if now >= half && stalled_set.is_empty() && a.stalled > 0 {
            for _ in 0..a.stalled {
                stalled_set.spawn(stalled(
                    target.clone(),
                    stalled_path.clone(),
                    stop.clone(),
                    stalled_connected.clone(),
                ));
            }
        }
        if now >= half
            && stalled_joined_at.is_none()
            && (stalled_connected.load(Ordering::Relaxed) as usize >= a.stalled
                || now >= half + Duration::from_secs(30))
        {
            stalled_joined_at = Some(started.elapsed().as_secs_f64());
        }
        progress.set_message(format!(
            "{} watching | {} stalled | {} writes | {} errors | faults {}",
            Stats::get(&stats.c.watching),
            stalled_connected.load(Ordering::Relaxed),
            Stats::get(&stats.c.writes),
            stats.errors().values().sum::<u64>(),
            flog.events.lock().unwrap().len()
        ));
        progress.set_position(started.elapsed().as_millis() as u64);
    }
    writer_stop.cancel();
    fault_stop.cancel();
    let _ = writer_task.await;
    let _ = drops_task.await;
    cycle_task.await.context("the fault schedule panicked")??;
    let window = started.elapsed();

    Ok(SoakWindow {
        window,
        window_start_s,
        flog,
        storm_task: Some(storm_task),
        storm_spawned,
        stalled_connected,
        stalled_set,
        stalled_joined_at,
    })
}

/// What [`drain`] collected.
struct Drained {
    window: SoakWindow,
    final_log: Arc<WriterLog>,
    outcomes: Vec<Outcome>,
    storm_outcomes: Vec<Outcome>,
    rss_end: Option<f64>,
    rss_samples: Vec<(f64, f64)>,
}

/// Drain against a healthy cluster: every watcher receives the last write it must see.
async fn drain(
    a: &SoakArgs,
    setup: &mut SoakSetup,
    w: &mut SoakWatchers,
    mut window: SoakWindow,
) -> anyhow::Result<Drained> {
    let c = &a.common;
    let SoakWatchers {
        stop,
        draining,
        ctx,
        storm_ctx,
        n,
        watchers,
        progress,
        ..
    } = w;
    let n = *n;
    let log = &setup.log;
    let gw = &setup.gw;
    let rss_stop = &setup.rss_stop;
    let rss_task = setup.rss_task.take().expect("drained once");
    let storm_task = window.storm_task.take().expect("drained once");
    let stalled_set = &mut window.stalled_set;
    // Drain against a healthy cluster: every watcher receives the last write it must see.
    let final_log = Arc::new(log.lock().unwrap().clone());
    let _ = ctx.drain_log.set(final_log.clone());
    let _ = storm_ctx.drain_log.set(final_log.clone());
    draining.cancel();
    progress.set_message("draining: waiting for the last writes to arrive");
    let mut outcomes = Vec::with_capacity(n);
    let drain_deadline = tokio::time::Instant::now() + c.drain_timeout;
    loop {
        tokio::select! {
            r = watchers.join_next() => match r {
                Some(Ok(o)) => outcomes.push(o),
                Some(Err(e)) => anyhow::bail!("a watcher panicked: {e}"),
                None => break,
            },
            _ = tokio::time::sleep_until(drain_deadline), if !stop.is_cancelled() => stop.cancel(),
        }
    }
    let storm_outcomes = tokio::select! {
        o = storm_task => o.context("the storm task panicked")?,
        _ = tokio::time::sleep_until(drain_deadline + a.storm_lifetime) => {
            stop.cancel();
            Vec::new()
        }
    };
    stop.cancel();
    while stalled_set.join_next().await.is_some() {}
    progress.finish_and_clear();
    let rss_end = proc_sample(gw.pid).map(|s| s.1);
    rss_stop.cancel();
    let rss_samples = rss_task.await.unwrap_or_default();

    Ok(Drained {
        window,
        final_log,
        outcomes,
        storm_outcomes,
        rss_end,
        rss_samples,
    })
}

/// Every stream checked against what it must have received, the cluster stopped, the
/// summary and the plots made.
async fn report(
    a: &SoakArgs,
    setup: SoakSetup,
    w: SoakWatchers,
    drained: Drained,
) -> anyhow::Result<SoakSummary> {
    let c = &a.common;
    let SoakSetup {
        rep,
        upstreams,
        mut gw,
        target,
        pool,
        ..
    } = setup;
    let SoakWatchers {
        stats,
        storm_stats,
        spec,
        n,
        connected,
        rss_connected,
        ..
    } = w;
    let Drained {
        window:
            SoakWindow {
                window,
                window_start_s,
                flog,
                storm_spawned,
                stalled_connected,
                stalled_joined_at,
                ..
            },
        final_log,
        outcomes,
        storm_outcomes,
        rss_end,
        rss_samples,
    } = drained;
    // What watchers must have received: the writer's log less the writes a relist of the
    // gateway's reflector superseded (docs/reliability.md, "What is a violation").
    let windows_410 = rep.relist_windows();
    let superseded = final_log.superseded_in(&windows_410);
    let must_see = final_log.without(&superseded);
    let sel = spec.selectors()?;
    let (mut violations, mut violation_count) =
        check_outcomes(&outcomes, std::slice::from_ref(&sel), &must_see, &pool);
    let (sv, sc) = check_outcomes(
        &storm_outcomes,
        std::slice::from_ref(&sel),
        &must_see,
        &pool,
    );
    violation_count += sc;
    violations.extend(sv);
    violations.truncate(100);

    writer::delete_pool(&target, &pool, 32).await;
    gw.kill().await;
    rep.stop().await;

    // Phases by write time: the stalled watchers are in from `stalled_joined_at` on.
    let per_second = stats.delivery_per_second();
    let half_s = (c.duration.as_secs_f64() / 2.0).floor() as usize;
    let joined_s = stalled_joined_at.map_or(per_second.len(), |t| t.ceil() as usize);
    let peak = |from: f64, to: f64| {
        rss_samples
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|s| s.1)
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    };
    let half_gw_s = window_start_s + c.duration.as_secs_f64() / 2.0;
    let rss_peak = peak(0.0, f64::MAX);
    let rss_limit = a.max_rss as f64;
    let faults = flog.counts.lock().unwrap().clone();
    let fault_log = flog.events.lock().unwrap().clone();
    let summary = SoakSummary {
        gateway: gw.url.clone(),
        upstreams,
        duration_s: window.as_secs_f64(),
        write_rate: c.rate,
        writes: Stats::get(&stats.c.writes),
        writes_behind: Stats::get(&stats.c.writes_behind),
        watchers: n,
        watchers_connected: connected,
        stalled: a.stalled,
        stalled_connected: stalled_connected.load(Ordering::Relaxed),
        stalled_joined_at_s: stalled_joined_at.unwrap_or(0.0),
        storm_clients: storm_spawned.load(Ordering::Relaxed),
        storm_watch_requests: Stats::get(&storm_stats.c.watch_requests),
        storm_checked_events: Stats::get(&storm_stats.c.checked),
        events: Stats::get(&stats.c.events),
        checked_events: Stats::get(&stats.c.checked),
        watch_requests: Stats::get(&stats.c.watch_requests),
        watchers_terminated: Stats::get(&stats.c.terminated),
        gone_410: Stats::get(&stats.c.gone),
        delivery_without_stalled: Latency::of(&merged(&per_second, 0, half_s)),
        delivery_with_stalled: Latency::of(&merged(&per_second, joined_s, usize::MAX)),
        delivery: Latency::of(&stats.delivery()),
        storm_delivery: Latency::of(&storm_stats.delivery()),
        write_latency: Latency::of(&stats.write_latency()),
        errors: stats.errors(),
        storm_errors: storm_stats.errors(),
        faults,
        fault_log,
        rss_connected_bytes: rss_connected,
        rss_peak_without_stalled_bytes: peak(window_start_s, half_gw_s),
        rss_peak_with_stalled_bytes: peak(half_gw_s, f64::MAX),
        rss_peak_bytes: rss_peak,
        rss_end_bytes: rss_end,
        rss_limit_bytes: rss_limit,
        window_start_s,
        upstream_410s: windows_410.len(),
        relist_windows: windows_410.clone(),
        superseded_by_relist: superseded.len(),
        violations,
        violation_count,
        ok: violation_count == 0 && connected >= n && rss_peak.is_none_or(|p| p <= rss_limit),
        rss_samples,
    };
    if let Some(path) = &a.rss_plot {
        let pts: Vec<(f64, f64)> = summary
            .rss_samples
            .iter()
            .map(|(t, b)| (*t, b / MIB))
            .collect();
        let markers = vec![
            (window_start_s, "writes, faults start".to_string()),
            (half_gw_s, format!("{} stalled join", a.stalled)),
            (window_start_s + window.as_secs_f64(), "drain".to_string()),
        ];
        let title = format!(
            "watchgate load soak: gateway RSS, {} healthy + {} stalled watchers, {} storm \
             clients, {} writes/s, {:.0} s",
            n,
            a.stalled,
            summary.storm_clients,
            c.rate,
            window.as_secs_f64()
        );
        write_rss_svg(path, &title, &pts, &markers)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &c.plot {
        let data = PlotData::from_histograms(
            PlotKind::Delivery,
            format!(
                "watchgate load soak: {n} healthy watchers, {} stalled from second {:.0}, \
                 {} writes/s",
                a.stalled, summary.stalled_joined_at_s, c.rate
            ),
            &per_second,
            &stats.delivery(),
        );
        write_svg(path, &data).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(summary)
}

//! One run, start to finish (see the module docs of `load`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::args::LoadArgs;
use super::checker::WriterLog;
use super::harness::{check_outcomes, progress_bar, raise_fd_limit, run_id, warm_up};
use super::plan::Plan;
use super::plot::{write_svg, PlotData, PlotKind};
use super::pool::Pool;
use super::probe::{Probe, Sample};
use super::report::{Latency, LoadCost, Summary, TargetCost};
use super::stats::Stats;
use super::target::Target;
use super::watcher::{self, Ctx, WatchSpec};
use super::{lister, writer};

/// `watchgate load <scenario>`: runs, prints, and fails on any stream violation.
pub async fn run(args: LoadArgs) -> anyhow::Result<()> {
    use super::args::Scenario;
    match &args.scenario {
        Scenario::Soak(a) => return super::soak::run(a.clone()).await,
        Scenario::ColdHerd(a) => return super::herds::cold::run(a.clone()).await,
        Scenario::QuietLarge(a) => return super::herds::quiet::run(a.clone()).await,
        Scenario::Restart(a) => return super::herds::restart::run(a.clone()).await,
        _ => {}
    }
    let plan = Plan::from_scenario(&args.scenario);
    let summary = execute(&plan).await?;
    if plan.common.json {
        eprint!("{}", summary.table());
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", summary.table());
    }
    if !summary.ok {
        anyhow::bail!(
            "the run FAILED: {} stream violation(s), {} watcher(s) never connected",
            summary.violation_count,
            summary
                .watchers
                .saturating_sub(summary.watch_requests as usize)
                .min(summary.watchers)
        );
    }
    Ok(())
}

/// A watch or list scenario, in its phases: [`set_up`] (targets, the writer's pool),
/// [`connect`] (every watcher connected and synced before the clock starts), [`drive`]
/// (the measured window: writes and lists at their rates), [`drain`] (every watcher gets
/// the last write it must see) and [`report`] (every stream checked, the summary).
pub async fn execute(plan: &Plan) -> anyhow::Result<Summary> {
    let setup = set_up(plan).await?;
    let mut connected = connect(plan, &setup).await;
    let window = drive(plan, &setup, &connected).await;
    let (final_log, outcomes) = drain(plan, &setup, &mut connected).await?;
    report(plan, &setup, &connected, &window, &final_log, outcomes).await
}

/// What [`set_up`] prepared: the targets, the writer's pool (created, and seen by the
/// target's lists), and the target's memory before any watcher.
struct Setup {
    target: Target,
    write_target: Target,
    pool: Arc<Pool>,
    probe: Probe,
    stats: Arc<Stats>,
    log: Arc<Mutex<WriterLog>>,
    start_rv: u64,
    before: Sample,
}

async fn set_up(plan: &Plan) -> anyhow::Result<Setup> {
    let c = &plan.common;
    anyhow::ensure!(c.rate.is_finite() && c.rate >= 0.0, "--rate must be >= 0");
    raise_fd_limit(plan.watchers() + c.write_concurrency + 16);

    let target = Target::resolve(
        c.server.as_deref(),
        c.kubeconfig.as_ref(),
        c.context.as_deref(),
        c.streams_per_connection,
    )
    .await?;
    let write_target = match &c.write_server {
        Some(url) => Target::resolve(Some(url), None, None, 1).await?,
        None => target.clone(),
    };
    let pool = Arc::new(Pool {
        run: run_id(),
        resource: Default::default(),
        namespace: c.namespace.clone(),
        size: c.pool.max(plan.kubelets).max(1),
        nodes: plan.nodes.max(1),
        node_prefix: plan.node_prefix.clone(),
        shards: c.shards.max(1),
        object_size: c.object_size,
    });
    let probe = Probe {
        metrics_url: c.metrics_url.clone(),
        pid: c.target_pid,
    };
    let stats = Arc::new(Stats::new());

    warm_up(&target, "/api/v1/pods").await;
    let log = Arc::new(Mutex::new(WriterLog::default()));
    let start_rv = writer::create_pool(&write_target, &pool, 32, &log)
        .await
        .context("creating the writer's pool")?;
    if !writer::wait_until_seen(&target, &pool, start_rv, Duration::from_secs(15)).await {
        eprintln!(
            "warning: the target's RV=0 lists did not reach the pool's last creation (RV \
             {start_rv}) within 15 s; informers may start from an older list"
        );
    }
    // After the pool: its objects in the target's cache are not watcher memory.
    let before = probe.sample().await;
    Ok(Setup {
        target,
        write_target,
        pool,
        probe,
        stats,
        log,
        start_rv,
        before,
    })
}

/// The watchers, once [`connect`] has connected them (or given up at its deadline).
struct Connected {
    stop: CancellationToken,
    ctx: Arc<Ctx>,
    groups: Vec<(Arc<WatchSpec>, usize)>,
    watchers: JoinSet<watcher::Outcome>,
    progress: indicatif::ProgressBar,
    /// Watchers connected by the deadline.
    connected: usize,
    /// Watch-list informers among them, and the upstream requests while they synced.
    watch_lists: usize,
    upstream_during_sync: Option<f64>,
    /// The target with every watcher idle.
    idle: Sample,
}

/// Watchers connect before the clock starts.
async fn connect(plan: &Plan, setup: &Setup) -> Connected {
    let c = &plan.common;
    let total_watchers = plan.watchers();
    let Setup {
        target,
        pool,
        probe,
        stats,
        start_rv,
        ..
    } = setup;
    let stop = CancellationToken::new();
    let ctx = Arc::new(Ctx {
        target: target.clone(),
        stats: stats.clone(),
        pool: pool.clone(),
        stop: stop.clone(),
        drain_log: Default::default(),
        draining: CancellationToken::new(),
        connect_gate: Arc::new(tokio::sync::Semaphore::new(c.connect_concurrency.max(1))),
        spawned: Instant::now(),
        track: None,
    });
    let upstream_before = probe.upstream_requests().await;
    let groups = plan.watcher_groups();
    let mut watchers = JoinSet::new();
    let mut id = 0usize;
    for (gi, (spec, n)) in groups.iter().enumerate() {
        for _ in 0..*n {
            watchers.spawn(watcher::run(ctx.clone(), id, gi, spec.clone(), *start_rv));
            id += 1;
        }
    }
    let progress = progress_bar(c.no_progress, total_watchers);
    let connect_deadline = Instant::now()
        + Duration::from_secs(30).max(Duration::from_millis(20 * total_watchers as u64));
    while (Stats::get(&stats.c.watching) as usize) < total_watchers
        && Instant::now() < connect_deadline
    {
        progress.set_message(format!(
            "connecting: {}/{total_watchers} watching",
            Stats::get(&stats.c.watching)
        ));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let connected = Stats::get(&stats.c.watching) as usize;
    // Watch-list informers: until every one has its initial state (its bookmark).
    let watch_lists: usize = groups
        .iter()
        .filter(|(s, _)| s.watch_list)
        .map(|(_, n)| *n)
        .sum();
    while (Stats::get(&stats.c.synced) as usize) < watch_lists && Instant::now() < connect_deadline
    {
        progress.set_message(format!(
            "syncing: {}/{watch_lists} watch-lists synced",
            Stats::get(&stats.c.synced)
        ));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let upstream_during_sync = match (upstream_before, probe.upstream_requests().await) {
        (Some(a), Some(b)) if watch_lists > 0 => Some(b - a),
        _ => None,
    };
    let idle = probe.sample().await;
    Connected {
        stop,
        ctx,
        groups,
        watchers,
        progress,
        connected,
        watch_lists,
        upstream_during_sync,
        idle,
    }
}

/// What [`drive`] measured over its window.
struct Window {
    window: Duration,
    events_in_window: u64,
    /// The target's CPU and RSS at the window's ends, and samples in between.
    cpu0: Sample,
    cpu1: Sample,
    samples: Vec<Sample>,
    /// The load tool's own CPU at the window's ends.
    own0: Option<(f64, f64)>,
    own1: Option<(f64, f64)>,
}

/// The measured window: the writer (and the list workers) at their rates for --duration.
async fn drive(plan: &Plan, setup: &Setup, connected: &Connected) -> Window {
    let c = &plan.common;
    let Setup {
        target,
        write_target,
        pool,
        probe,
        stats,
        log,
        ..
    } = setup;
    let progress = &connected.progress;
    let writer_stop = CancellationToken::new();
    let started = Instant::now();
    stats.mark_start();
    let events0 = Stats::get(&stats.c.events);
    let cpu0 = probe.sample().await;
    let own0 = super::probe::proc_sample(std::process::id());
    let probe_stop = CancellationToken::new();
    let sampler = probe
        .is_set()
        .then(|| tokio::spawn(probe.clone().watch(probe_stop.clone())));
    let writer_task = tokio::spawn(writer::run(
        write_target.clone(),
        pool.clone(),
        c.rate,
        c.write_concurrency,
        stats.clone(),
        log.clone(),
        writer_stop.clone(),
    ));
    let list_task = plan.lists.clone().map(|lp| {
        let (t, s, st) = (target.clone(), stats.clone(), writer_stop.clone());
        if lp.rate > 0.0 {
            tokio::spawn(lister::at_rate(t, lp.spec, lp.rate, lp.concurrency, s, st))
        } else {
            tokio::spawn(lister::closed_loop(t, lp.spec, lp.concurrency, s, st))
        }
    });
    let end = started + c.duration;
    progress.set_length(c.duration.as_millis() as u64);
    let mut last = (Instant::now(), 0u64, 0u64, 0u64);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(250).min(end - Instant::now())).await;
        let now = Instant::now();
        let (ev, wr, li) = (
            Stats::get(&stats.c.events),
            Stats::get(&stats.c.writes),
            Stats::get(&stats.c.lists),
        );
        let dt = now.duration_since(last.0).as_secs_f64().max(1e-3);
        if dt >= 1.0 {
            progress.set_message(format!(
                "{} watching | {:.0} events/s | {:.0} writes/s | {:.1} lists/s | {} errors",
                Stats::get(&stats.c.watching),
                (ev - last.1) as f64 / dt,
                (wr - last.2) as f64 / dt,
                (li - last.3) as f64 / dt,
                stats.errors().values().sum::<u64>()
            ));
            last = (now, ev, wr, li);
        }
        progress.set_position(started.elapsed().as_millis() as u64);
    }
    writer_stop.cancel();
    let _ = writer_task.await;
    if let Some(t) = list_task {
        let _ = t.await;
    }
    let window = started.elapsed();
    let events_in_window = Stats::get(&stats.c.events) - events0;
    let cpu1 = probe.sample().await;
    let own1 = super::probe::proc_sample(std::process::id());
    probe_stop.cancel();
    let samples = match sampler {
        Some(t) => t.await.unwrap_or_default(),
        None => Vec::new(),
    };
    Window {
        window,
        events_in_window,
        cpu0,
        cpu1,
        samples,
        own0,
        own1,
    }
}

/// Every watcher receives the last write it must see, or the drain timeout ends it: the
/// writer's final log and every watcher's outcome.
async fn drain(
    plan: &Plan,
    setup: &Setup,
    connected: &mut Connected,
) -> anyhow::Result<(Arc<WriterLog>, Vec<watcher::Outcome>)> {
    let final_log = Arc::new(setup.log.lock().unwrap().clone());
    let _ = connected.ctx.drain_log.set(final_log.clone());
    connected.ctx.draining.cancel();
    connected
        .progress
        .set_message("draining: waiting for the last writes to arrive");
    let stop = &connected.stop;
    let mut outcomes = Vec::with_capacity(plan.watchers());
    let drain_deadline = tokio::time::Instant::now() + plan.common.drain_timeout;
    loop {
        tokio::select! {
            r = connected.watchers.join_next() => match r {
                Some(Ok(o)) => outcomes.push(o),
                Some(Err(e)) => anyhow::bail!("a watcher panicked: {e}"),
                None => break,
            },
            _ = tokio::time::sleep_until(drain_deadline), if !stop.is_cancelled() => stop.cancel(),
        }
    }
    stop.cancel();
    connected.progress.finish_and_clear();
    Ok((final_log, outcomes))
}

/// Every stream checked against the writer's log, the pool deleted, the summary (and the
/// plot) made.
async fn report(
    plan: &Plan,
    setup: &Setup,
    connected: &Connected,
    w: &Window,
    final_log: &WriterLog,
    outcomes: Vec<watcher::Outcome>,
) -> anyhow::Result<Summary> {
    let c = &plan.common;
    let total_watchers = plan.watchers();
    let Setup {
        target,
        write_target,
        pool,
        stats,
        before,
        ..
    } = setup;
    let Connected {
        groups,
        connected,
        watch_lists,
        upstream_during_sync,
        idle,
        ..
    } = connected;
    let (connected, watch_lists) = (*connected, *watch_lists);
    let selectors: Vec<_> = groups
        .iter()
        .map(|(s, _)| s.selectors())
        .collect::<anyhow::Result<_>>()?;
    let (violations, violation_count) = check_outcomes(&outcomes, &selectors, final_log, pool);

    if !c.keep_objects {
        writer::delete_pool(write_target, pool, 32).await;
    }

    let secs = w.window.as_secs_f64();
    let events_in_window = w.events_in_window;
    let writes = Stats::get(&stats.c.writes);
    let cost = target_cost(
        before,
        idle,
        &w.cpu0,
        &w.cpu1,
        &w.samples,
        events_in_window,
        writes,
        connected,
    );
    let summary = Summary {
        scenario: plan.name.into(),
        target: target.url().to_string(),
        protocol: format!("{:?}", c.protocol).to_lowercase(),
        watchers: total_watchers,
        list_workers: plan.lists.as_ref().map_or(0, |l| l.concurrency),
        duration_s: secs,
        write_rate: c.rate,
        writes,
        writes_behind: Stats::get(&stats.c.writes_behind),
        events: Stats::get(&stats.c.events),
        checked_events: Stats::get(&stats.c.checked),
        events_per_s: events_in_window as f64 / secs,
        bookmarks: Stats::get(&stats.c.bookmarks),
        watch_requests: Stats::get(&stats.c.watch_requests),
        h2_connections: target.h2_connections().await,
        encoding: format!("{:?}", c.encoding).to_lowercase(),
        protobuf_frames: Stats::get(&stats.c.protobuf_frames),
        protobuf_lists: Stats::get(&stats.c.protobuf_lists),
        watch_mb_per_s: Stats::get(&stats.c.watch_bytes) as f64 / 1e6 / secs,
        lists: Stats::get(&stats.c.lists),
        lists_per_s: Stats::get(&stats.c.lists) as f64 / secs,
        list_mb_per_s: Stats::get(&stats.c.list_bytes) as f64 / 1e6 / secs,
        list_pages: Stats::get(&stats.c.list_pages),
        list_items: Stats::get(&stats.c.list_items),
        list_items_min: stats.list_items_range().0,
        list_items_max: stats.list_items_range().1,
        delivery: Latency::of(&stats.delivery()),
        list_latency: Latency::of(&stats.list_latency()),
        write_latency: Latency::of(&stats.write_latency()),
        watch_connect_latency: Latency::of(&stats.watch_connect_latency()),
        watch_list_informers: watch_lists,
        synced: Stats::get(&stats.c.synced),
        sync_latency: Latency::of(&stats.sync_latency()),
        upstream_requests_during_sync: *upstream_during_sync,
        errors: stats.errors(),
        watchers_terminated: Stats::get(&stats.c.terminated),
        gone_410: Stats::get(&stats.c.gone),
        violations,
        violation_count,
        target_cost: cost,
        load_cost: load_cost(w.own0, w.own1, events_in_window),
        target_samples: w.samples.clone(),
        ok: violation_count == 0
            && connected >= total_watchers
            && Stats::get(&stats.c.synced) as usize >= watch_lists,
    };
    if let Some(path) = &c.plot {
        // A run without watchers (`lists`) has no deliveries to draw: its plot shows what
        // it measured, list latency.
        let data = if total_watchers == 0 {
            PlotData::from_histograms(
                PlotKind::List,
                format!(
                    "watchgate load {}: {} list workers, {}",
                    plan.name,
                    plan.lists.as_ref().map_or(0, |l| l.concurrency),
                    target.url()
                ),
                &stats.list_latency_per_second(),
                &stats.list_latency(),
            )
        } else {
            PlotData::from_histograms(
                PlotKind::Delivery,
                format!(
                    "watchgate load {}: {} watchers, {} writes/s, {}",
                    plan.name,
                    total_watchers,
                    c.rate,
                    target.url()
                ),
                &stats.delivery_per_second(),
                &stats.delivery(),
            )
        };
        write_svg(path, &data).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(summary)
}

/// The load tool's own CPU over the window (from /proc/self, like `--target-pid`).
fn load_cost(start: Option<(f64, f64)>, end: Option<(f64, f64)>, events: u64) -> LoadCost {
    let cpu = match (start, end) {
        (Some((a, _)), Some((b, _))) => Some(b - a),
        _ => None,
    };
    LoadCost {
        cpu_seconds: cpu,
        cpu_us_per_event: cpu.filter(|_| events > 0).map(|s| s * 1e6 / events as f64),
    }
}

#[allow(clippy::too_many_arguments)]
fn target_cost(
    before: &Sample,
    idle: &Sample,
    cpu0: &Sample,
    cpu1: &Sample,
    samples: &[Sample],
    deliveries: u64,
    writes: u64,
    watchers: usize,
) -> TargetCost {
    let cpu = match (cpu0.cpu_seconds, cpu1.cpu_seconds) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let peak = samples
        .iter()
        .chain([cpu1])
        .filter_map(|s| s.rss_bytes)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    TargetCost {
        cpu_seconds: cpu,
        rss_start_bytes: before.rss_bytes,
        rss_end_bytes: cpu1.rss_bytes,
        rss_peak_bytes: peak,
        cpu_us_per_delivery: cpu
            .filter(|_| deliveries > 0)
            .map(|s| s * 1e6 / deliveries as f64),
        cpu_us_per_write: cpu.filter(|_| writes > 0).map(|s| s * 1e6 / writes as f64),
        rss_per_watcher_bytes: match (before.rss_bytes, idle.rss_bytes) {
            (Some(a), Some(b)) if watchers > 0 => Some((b - a) / watchers as f64),
            _ => None,
        },
    }
}

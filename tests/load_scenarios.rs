//! Every `watchgate load` scenario, run in-process against the simulator and the gateway in
//! front of it, with its summary asserted exactly where the run makes it exact.
//!
//! How the exact figures follow: the writer patches its pool round-robin (write k hits
//! object k mod pool), and object i is on node `load-node-(i mod nodes)` in shard
//! `i mod shards`. So, when every write succeeded (no errors), which watchers must see
//! write k is known, and `checked_events` (events on the writer's objects, summed over
//! watchers) must equal exactly the sum of what each one must see. The checker compares
//! every watcher's stream with the writer's log filtered by its own selectors, so `ok`
//! means no watcher missed, repeated, reordered or received an event it should not have.
//!
//! Each run is a couple of seconds of writes at a few dozen writes/s: small enough for CI's
//! two cores; the full-size figures come from scripts/bench.

mod support;

use support::servers::{cluster_config, start_gateway, start_sim_with, GatewayServer, SimServer};
use support::Http;
use watchgate::load::{self, Plan, Summary};

async fn servers() -> (SimServer, GatewayServer) {
    let sim = start_sim_with(cluster_config()).await;
    let gw = start_gateway(sim.url()).await;
    (sim, gw)
}

/// Runs `watchgate load <args> --no-progress` in-process and prints its table (shown when
/// a test fails).
async fn run(args: &[&str]) -> Summary {
    let mut argv: Vec<&str> = args.to_vec();
    argv.push("--no-progress");
    let parsed = load::parse(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let summary = load::execute(&Plan::from_scenario(&parsed.scenario))
        .await
        .unwrap_or_else(|e| panic!("{argv:?}: {e:#}"));
    eprintln!("{}", summary.table());
    summary
}

/// A run whose every write succeeded and whose every stream checked out.
#[track_caller]
fn assert_clean(s: &Summary) {
    assert!(s.ok, "the run failed: {:?}", s.violations);
    assert_eq!(s.violation_count, 0);
    assert!(s.errors.is_empty(), "errors: {:?}", s.errors);
    assert_eq!(s.gone_410, 0);
    assert_eq!(s.watchers_terminated, 0);
    assert!(s.writes > 0, "no writes were made");
}

/// How many of the writes 0..writes hit an object for which `pick(object)` holds.
fn writes_matching(writes: u64, pool: u64, pick: impl Fn(u64) -> bool) -> u64 {
    (0..writes).filter(|k| pick(k % pool)).count() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelets_each_see_only_their_own_nodes_pods() {
    let (sim, gw) = servers().await;
    let s = run(&[
        "kubelets",
        "--server",
        gw.url(),
        "--nodes",
        "20",
        "--pool",
        "40",
        "--rate",
        "40",
        "--duration",
        "2s",
    ])
    .await;
    assert_clean(&s);
    assert_eq!(s.scenario, "kubelets");
    assert_eq!(s.watchers, 20);
    assert_eq!(
        s.watch_requests, 20,
        "one watch per kubelet, never reopened"
    );
    // Each write is to one pod on one node: exactly one kubelet receives it. Without the
    // per-node field selector every kubelet would receive every write (20× as many), and
    // the checker would flag the other nodes' pods as unexpected.
    assert_eq!(s.checked_events, s.writes);
    assert_eq!(s.delivery.count, s.writes);
    // Every node was written to (80 writes over 40 pods on 20 nodes), so no kubelet passed
    // by receiving nothing.
    assert!(s.writes >= 40, "writes: {}", s.writes);
    // No --metrics-url or --target-pid: the target's cost is unknown, and says so.
    assert!(s.target_cost.cpu_seconds.is_none() && s.target_cost.rss_end_bytes.is_none());
    drop((gw, sim));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informers_list_then_watch_and_cost_the_upstream_one_list_and_one_watch() {
    let (sim, gw) = servers().await;
    let stats = sim.handle().stats().clone();
    let s = run(&[
        "informers",
        "--server",
        gw.url(),
        "--clients",
        "30",
        "--pool",
        "20",
        "--rate",
        "20",
        "--duration",
        "2s",
    ])
    .await;
    assert_clean(&s);
    assert_eq!(s.scenario, "informers");
    assert_eq!(s.watchers, 30);
    // Each informer listed once (RV=0: the whole namespace, the writer's 20 pods) and then
    // watched once from the list's resourceVersion.
    assert_eq!(s.lists, 30);
    assert_eq!((s.list_items_min, s.list_items_max), (20, 20));
    assert_eq!(s.list_items, 30 * 20);
    assert_eq!(s.watch_requests, 30);
    assert_eq!(s.checked_events, 30 * s.writes);
    // Through the gateway, the upstream saw the cache's own list and watch (a watch-list
    // sync would be the watch alone), however many informers started: the restart storm,
    // and the tool's own probes, stayed in the gateway.
    let (lists, watches) = (stats.lists("pods"), stats.watches("pods"));
    assert!(
        lists <= 1 && watches == 1,
        "30 informers through the gateway cost the upstream {lists} lists and {watches} watches"
    );

    // The same storm straight at the simulator costs one list and one watch per informer,
    // plus the tool's two probe lists (the cache warm-up, and the wait until RV=0 reads
    // show the whole pool): the figure the gateway saves.
    let before = (stats.lists("pods"), stats.watches("pods"));
    let s = run(&[
        "informers",
        "--server",
        sim.url(),
        "--clients",
        "30",
        "--pool",
        "20",
        "--rate",
        "20",
        "--duration",
        "1s",
    ])
    .await;
    assert_clean(&s);
    let lists = stats.lists("pods") - before.0;
    let watches = stats.watches("pods") - before.1;
    assert_eq!((lists, watches), (30 + 2, 30), "direct: lists, watches");
    drop((gw, sim));
}

/// client-go 1.35+ informers: one consistent watch-list each (no resourceVersion). Through
/// the gateway they are answered from the cache once a probe proves it fresh
/// (docs/consistency.md): the upstream sees the cache's own watch-list and a few probes,
/// however many informers start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_list_informers_sync_from_the_cache_at_the_cost_of_a_few_probes() {
    let (sim, gw) = servers().await;
    let stats = sim.handle().stats().clone();
    let metrics = format!("http://{}/metrics", gw.handle().admin_addr());
    let (lists0, watches0) = (stats.lists("pods"), stats.watches("pods"));
    let s = run(&[
        "informers",
        "--watch-list",
        "--server",
        gw.url(),
        "--metrics-url",
        &metrics,
        "--clients",
        "100",
        "--pool",
        "20",
        "--rate",
        "20",
        "--duration",
        "2s",
    ])
    .await;
    assert_clean(&s);
    assert_eq!((s.watch_list_informers, s.synced), (100, 100));
    assert_eq!(s.sync_latency.count, 100);
    // No list: each informer's initial state came with its watch.
    assert_eq!(s.lists, 0);
    assert_eq!(s.watch_requests, 100);
    assert_eq!(s.checked_events, 100 * s.writes);
    // Upstream: the cache's watch-list, the probes (limit=1 lists; a herd shares them), the
    // tool's two RV=0 probe lists and the writer's creations.
    let (lists, watches) = (
        stats.lists("pods") - lists0,
        stats.watches("pods") - watches0,
    );
    assert!(
        watches <= 2 && lists <= 20,
        "100 watch-list informers through the gateway cost the upstream {lists} lists and {watches} watches"
    );
    // (The run's `upstream_requests_during_sync` reads the gateway's
    // watchgate_upstream_requests_total, which in this one process also counts the load
    // tool's own requests: the simulator's counters are the measure here.)
    assert!(s.upstream_requests_during_sync.is_some());
    drop((gw, sim));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_in_a_closed_loop_read_every_page_and_report_their_throughput() {
    let (_sim, gw) = servers().await;
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("lists.svg");
    // A consistent list (no resourceVersion) honours --limit: 100 pods in pages of 30 is 4
    // pages, each list read to its last page.
    let s = run(&[
        "lists",
        "--server",
        gw.url(),
        "--path",
        "/api/v1/namespaces/watchgate-load/pods",
        "--resource-version=",
        "--limit",
        "30",
        "--concurrency",
        "2",
        "--pool",
        "100",
        "--rate",
        "0",
        "--duration",
        "2s",
        "--keep-objects",
        "--plot",
        plot.to_str().unwrap(),
    ])
    .await;
    assert!(s.ok && s.errors.is_empty(), "{:?}", s.errors);
    assert_eq!(s.scenario, "lists");
    assert_eq!((s.watchers, s.list_workers), (0, 2));
    assert!(s.lists >= 4, "only {} lists in 2 s of closed loop", s.lists);
    assert_eq!((s.list_items_min, s.list_items_max), (100, 100));
    assert_eq!(s.list_items, 100 * s.lists);
    assert_eq!(s.list_pages, 4 * s.lists);
    assert_eq!(s.list_latency.count, s.lists);
    let rate = s.lists as f64 / s.duration_s;
    assert!(
        (s.lists_per_s - rate).abs() < 1e-9,
        "lists/s {}",
        s.lists_per_s
    );
    // MB/s is the list bodies' bytes: about one whole list's JSON per list (its four
    // pages repeat the list's head; lists cut short by the end of the run add a little).
    let whole = Http::new(gw.url())
        .get("/api/v1/namespaces/watchgate-load/pods")
        .await
        .text()
        .len() as f64;
    let per_list = s.list_mb_per_s * 1e6 * s.duration_s / s.lists as f64;
    assert!(
        (whole..=whole * 1.05).contains(&per_list),
        "{per_list:.0} bytes per list, for a list of {whole} bytes"
    );
    // A closed loop keeps exactly --concurrency lists in flight: by Little's law the lists
    // in flight on average (throughput × mean latency) are at most 2, and close to it when
    // the workers never idle. An open loop or a single worker would be far below; more
    // workers, above.
    let in_flight = s.lists_per_s * s.list_latency.mean_ms / 1000.0;
    assert!(
        (1.0..=2.02).contains(&in_flight),
        "{in_flight:.2} lists in flight on average with --concurrency 2"
    );
    // A run without watchers plots what it measured: list latency, not an empty
    // delivery plot.
    let svg = std::fs::read_to_string(&plot).expect("the plot was written");
    assert!(
        svg.contains("list latency over the run") && svg.contains("list latency CDF"),
        "{svg}"
    );
    assert!(!svg.contains("delivery latency"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_at_a_rate_with_selectors_read_what_the_selectors_pick() {
    let (_sim, gw) = servers().await;
    // 100 pods: object i in shard i mod 4 and on node load-node-(i mod 10). Shard 1 and
    // node 3 together are i mod 20 = 13: 5 pods (shard alone 25, node alone 10).
    let s = run(&[
        "lists",
        "--server",
        gw.url(),
        "--path",
        "/api/v1/namespaces/watchgate-load/pods",
        "--label-selector",
        "load-shard=1",
        "--field-selector",
        "spec.nodeName=load-node-3",
        "--list-rate",
        "10",
        "--concurrency",
        "4",
        "--pool",
        "100",
        "--shards",
        "4",
        "--rate",
        "0",
        "--duration",
        "3s",
    ])
    .await;
    assert!(s.ok && s.errors.is_empty(), "{:?}", s.errors);
    assert_eq!((s.list_items_min, s.list_items_max), (5, 5));
    // RV=0 (the default) is served whole, one page per list.
    assert_eq!(s.list_pages, s.lists);
    // 10 lists/s for 3 s: the first tick is at once, so at most 31; a loaded machine may
    // delay ticks (they are not made up in a burst), never most of them. A closed loop
    // would run hundreds of these 5-item lists.
    assert!(
        (20..=31).contains(&s.lists),
        "{} lists at 10/s for 3 s",
        s.lists
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_runs_every_kind_of_client_at_once() {
    let (_sim, gw) = servers().await;
    let s = run(&[
        "mixed",
        "--server",
        gw.url(),
        "--watchers",
        "10",
        "--kubelets",
        "4",
        "--informers",
        "3",
        "--list-concurrency",
        "1",
        "--pool",
        "40",
        "--rate",
        "20",
        "--duration",
        "2s",
    ])
    .await;
    assert_clean(&s);
    assert_eq!(s.scenario, "mixed");
    assert_eq!((s.watchers, s.list_workers), (10 + 4 + 3, 1));
    assert_eq!(s.watch_requests, 17);
    // Every write reaches the 10 fan-out watchers, the 3 informers and exactly one of the
    // 4 kubelets (the pool's pods are spread over one node per kubelet).
    assert_eq!(s.checked_events, (10 + 3 + 1) * s.writes);
    // The informers' lists (the namespace) and the list worker's (all pods) both hold
    // the 40 pods and nothing else.
    assert!(
        s.lists > 3,
        "the list worker listed nothing: {} lists",
        s.lists
    );
    assert_eq!((s.list_items_min, s.list_items_max), (40, 40));
}

/// 20 selective watchers over a pool of 100 pods written at 40/s for 2 s: every watcher
/// gets every write to a pod `pick` selects, and nothing else.
async fn fanout_with_selector(selector: [&str; 4], pick: impl Fn(u64) -> bool) {
    let (_sim, gw) = servers().await;
    let mut args = vec!["watch-fanout", "--server", gw.url(), "--watchers", "20"];
    args.extend(selector);
    args.extend(["--pool", "100", "--rate", "40", "--duration", "2s"]);
    let s = run(&args).await;
    assert_clean(&s);
    let matching = writes_matching(s.writes, 100, pick);
    assert!(matching > 0);
    assert_eq!(s.checked_events, 20 * matching, "writes: {}", s.writes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_fanout_with_a_label_selector_sees_only_its_shard() {
    let selector = ["--label-selector", "load-shard=3", "--shards", "10"];
    fanout_with_selector(selector, |i| i % 10 == 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_fanout_with_a_field_selector_sees_only_its_node() {
    let selector = [
        "--field-selector",
        "spec.nodeName=load-node-2",
        "--nodes",
        "5",
    ];
    fanout_with_selector(selector, |i| i % 5 == 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_fanout_over_http2_multiplexes_the_asked_streams_per_connection() {
    let (_sim, gw) = servers().await;
    let s = run(&[
        "watch-fanout",
        "--server",
        gw.url(),
        "--watchers",
        "40",
        "--protocol",
        "http2",
        "--streams-per-connection",
        "10",
        "--rate",
        "20",
        "--duration",
        "2s",
    ])
    .await;
    assert_clean(&s);
    assert_eq!(s.protocol, "http2");
    // 40 watches, 10 per connection: 4 HTTP/2 connections (over HTTP/1.1 the count is 0,
    // one connection per watch).
    assert_eq!(s.h2_connections, 4);
    assert_eq!(s.watch_requests, 40);
    assert_eq!(s.checked_events, 40 * s.writes);
    assert_eq!(s.delivery.count, s.checked_events);
}

/// An informer whose RV=0 list came from a cache that had not yet seen the whole pool
/// watches from that older RV and receives the later creations as ADDED events. The runs
/// above wait until the target shows the whole pool, so here the case is built directly:
/// the pool's creations are in the writer's log, and a stream that starts before them and
/// receives them is correct (it would be "unexpected" events without them), while one that
/// misses a creation has a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_creations_are_in_the_writers_log_for_informers_that_start_before_them() {
    use std::sync::Mutex;
    use watchgate::load::checker::{EventType, StreamCheck, Violation, WriterLog};
    use watchgate::load::pool::Pool;
    use watchgate::load::target::Target;
    use watchgate::load::writer;

    let sim = start_sim_with(cluster_config()).await;
    let target = Target::resolve(Some(sim.url()), None, None, 1)
        .await
        .unwrap();
    let pool = Pool {
        run: "r1".into(),
        resource: Default::default(),
        namespace: "watchgate-load".into(),
        size: 5,
        nodes: 1,
        node_prefix: "load-node".into(),
        shards: 1,
        object_size: 0,
    };
    let log = Mutex::new(WriterLog::default());
    let last = writer::create_pool(&target, &pool, 2, &log).await.unwrap();
    let log = log.into_inner().unwrap();
    let created: Vec<u64> = log.range(0, None).map(|r| r.rv).collect();
    assert_eq!(created.len(), 5);
    assert_eq!(created.last(), Some(&last));
    assert!(log.range(0, None).all(|r| r.event == EventType::Added));

    // Listed after the first two creations, then watched from there.
    let from = created[1];
    let mut informer = StreamCheck::new(0, from);
    for &rv in &created[2..] {
        informer.observe(rv, EventType::Added);
    }
    assert_eq!(informer.verify(&log, |_| true), vec![]);
    let mut missed = StreamCheck::new(1, from);
    for &rv in &created[3..] {
        missed.observe(rv, EventType::Added);
    }
    assert!(
        matches!(missed.verify(&log, |_| true)[..], [Violation::Gap { .. }]),
        "{:?}",
        missed.verify(&log, |_| true)
    );
}

/// `--encoding protobuf|metadata`: the watchers send client-go's exact Accept headers, the
/// gateway answers `;stream=watch` protobuf frames from its cache, and the checker reads
/// them (event type, resourceVersion and the writer's stamp from ObjectMeta): every write
/// arrives once, in order, and every frame was protobuf.
async fn fanout_in(encoding: &str) -> Summary {
    let (_sim, gw) = servers().await;
    let s = run(&[
        "watch-fanout",
        "--server",
        gw.url(),
        "--encoding",
        encoding,
        "--watchers",
        "10",
        "--pool",
        "20",
        "--rate",
        "30",
        "--duration",
        "2s",
    ])
    .await;
    assert_clean(&s);
    assert_eq!(s.encoding, encoding);
    assert_eq!(
        s.checked_events,
        10 * s.writes,
        "every watcher saw every write"
    );
    assert!(
        s.protobuf_frames >= s.events + s.bookmarks && s.protobuf_frames > 0,
        "{} protobuf frames for {} events and {} bookmarks",
        s.protobuf_frames,
        s.events,
        s.bookmarks
    );
    assert!(s.delivery.count > 0, "stamps were read from the frames");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_fanout_in_protobuf_reads_and_checks_protobuf_frames() {
    fanout_in("protobuf").await;
}

/// client-go's metadata informers: lists ask for `PartialObjectMetadataList`, watches for
/// `PartialObjectMetadata`, both protobuf first; the checker reads PartialObjectMetadata
/// frames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_fanout_as_metadata_reads_partial_object_metadata_frames() {
    fanout_in("metadata").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelets_and_informers_in_protobuf_list_and_watch_in_protobuf() {
    let (_sim, gw) = servers().await;
    let s = run(&[
        "kubelets",
        "--server",
        gw.url(),
        "--encoding",
        "protobuf",
        "--nodes",
        "5",
        "--pool",
        "10",
        "--rate",
        "20",
        "--duration",
        "2s",
    ])
    .await;
    assert_clean(&s);
    assert!(s.protobuf_frames > 0 && s.checked_events == s.writes);
    for encoding in ["protobuf", "metadata"] {
        let s = run(&[
            "informers",
            "--server",
            gw.url(),
            "--encoding",
            encoding,
            "--clients",
            "5",
            "--pool",
            "10",
            "--rate",
            "20",
            "--duration",
            "2s",
        ])
        .await;
        assert_clean(&s);
        // Each informer's list was a protobuf list of the writer's 10 pods, its watch
        // protobuf frames.
        assert_eq!((s.lists, s.protobuf_lists), (5, 5), "{encoding}");
        assert_eq!((s.list_items_min, s.list_items_max), (10, 10), "{encoding}");
        assert!(s.protobuf_frames > 0 && s.checked_events == 5 * s.writes);
    }
    let s = run(&[
        "lists",
        "--server",
        gw.url(),
        "--encoding",
        "protobuf",
        "--path",
        "/api/v1/namespaces/watchgate-load/pods",
        "--concurrency",
        "1",
        "--pool",
        "10",
        "--rate",
        "0",
        "--duration",
        "1s",
    ])
    .await;
    assert!(s.ok && s.errors.is_empty(), "{:?}", s.errors);
    assert!(
        s.lists > 0 && s.protobuf_lists == s.lists,
        "{} of {}",
        s.protobuf_lists,
        s.lists
    );
    assert_eq!((s.list_items_min, s.list_items_max), (10, 10));
}

// Issue 26's scenarios, small: each starts its own simulator (seeded in its store) and
// the `watchgate serve` binary. What they assert holds for any correct gateway, before
// and after it learns to shield the upstream from herds: the report's structure, every
// client served, every stream checked exactly, the simulator's counts consistent.

/// Parses `watchgate load <argv>` for one of the self-contained scenarios.
fn herd_args(argv: &[&str]) -> load::Scenario {
    let mut all: Vec<&str> = argv.to_vec();
    all.extend([
        "--gateway-bin",
        env!("CARGO_BIN_EXE_watchgate"),
        "--no-progress",
    ]);
    load::parse(&all)
        .unwrap_or_else(|e| panic!("{all:?}: {e}"))
        .scenario
}

/// The total of `{verb: n}` equals the total of `{verb: {shape: n}}`, verb by verb.
#[track_caller]
fn shapes_add_up(by_verb: &serde_json::Value, by_shape: &serde_json::Value) {
    let verbs = by_verb.as_object().expect("{verb: n}");
    for (verb, n) in verbs {
        let shapes: u64 = by_shape[verb]
            .as_object()
            .unwrap_or_else(|| panic!("no shapes for {verb}: {by_shape}"))
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(Some(shapes), n.as_u64(), "{verb}: {by_verb} vs {by_shape}");
    }
    assert_eq!(verbs.len(), by_shape.as_object().unwrap().len());
}

async fn cold_herd(warm: bool) -> load::herds::cold::ColdHerdSummary {
    let mut argv = vec![
        "cold-herd",
        "--objects",
        "200",
        "--watches",
        "20",
        "--informers",
        "20",
        "--lists",
        "10",
        "--pool",
        "20",
        "--rate",
        "20",
        "--duration",
        "1s",
        "--herd-timeout",
        "60s",
    ];
    if warm {
        argv.push("--warm");
    }
    let load::Scenario::ColdHerd(a) = herd_args(&argv) else {
        panic!("not cold-herd");
    };
    let s = load::herds::cold::execute(&a).await.expect("cold-herd ran");
    eprintln!("{}", s.table());
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_herd_serves_every_client_and_reports_what_reached_the_simulator() {
    for warm in [false, true] {
        let s = cold_herd(warm).await;
        assert!(s.ok, "{}", s.table());
        assert_eq!(s.gateway_state, if warm { "warm" } else { "cold" });
        assert!(s.herd_complete);
        // 200 seeded configmaps and the writer's 20, nothing else in the store.
        assert_eq!((s.resource.as_str(), s.objects), ("configmaps", 220));
        let kinds: Vec<(&str, usize, u64)> = s
            .clients
            .iter()
            .map(|k| (k.kind.as_str(), k.clients, k.done))
            .collect();
        assert_eq!(
            kinds,
            [
                ("RV=0 watches", 20, 20),
                ("watch-list informers", 20, 20),
                ("RV=0 lists", 10, 10)
            ]
        );
        for k in &s.clients {
            assert_eq!(k.time_to_state.count, k.done, "{}", k.kind);
            assert!(k.requests >= k.clients as u64, "{}", k.kind);
        }
        shapes_add_up(&s.upstream_by_verb, &s.upstream_by_shape);
        assert_eq!(
            s.upstream_requests,
            s.upstream_by_verb
                .as_object()
                .unwrap()
                .values()
                .map(|v| v.as_u64().unwrap())
                .sum::<u64>()
        );
        if warm {
            // A synced cache answers RV=0 reads itself: none reaches the simulator.
            let rv0 = ["list", "watch"]
                .iter()
                .filter_map(|v| s.upstream_by_shape[v]["rv=0"].as_u64())
                .sum::<u64>();
            assert_eq!(rv0, 0, "{}", s.upstream_by_shape);
        } else {
            // A cold gateway has to read the resource from the upstream at least once.
            assert!(s.upstream_requests >= 1);
            assert!(!s.gateway_metrics.is_empty());
        }
        // Every one of the 40 watchers saw every write after the herd, exactly once.
        assert!(s.writes > 0);
        assert_eq!((s.checked.watchers, s.checked.without_state), (40, 0));
        assert_eq!(s.checked.violation_count, 0, "{:?}", s.checked.violations);
        assert_eq!(s.checked_events, 40 * s.writes);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_large_measures_both_ways_and_counts_the_informers_upstream_requests() {
    let load::Scenario::QuietLarge(a) = herd_args(&[
        "quiet-large",
        "--objects",
        "300",
        "--informers",
        "20",
        "--gets",
        "10",
        "--full-lists",
        "2",
        "--pages",
        "3",
        "--rounds",
        "2",
        "--measure-budget",
        "20s",
        "--pool",
        "10",
        "--herd-timeout",
        "60s",
    ]) else {
        panic!("not quiet-large");
    };
    let s = load::herds::quiet::execute(&a)
        .await
        .expect("quiet-large ran");
    eprintln!("{}", s.table());
    assert!(s.ok, "{}", s.table());
    assert_eq!(
        (s.resource.as_str(), s.objects, s.rounds),
        ("configmaps", 300, 2)
    );
    // The writer wrote pods, never the quiet configmaps.
    assert!(s.writes_elsewhere > 0);
    let counts: Vec<(u64, u64, u64, u64)> = s
        .measures
        .iter()
        .map(|m| {
            (
                m.direct.count,
                m.gateway.count,
                m.direct_failures,
                m.gateway_failures,
            )
        })
        .collect();
    // Every read answered, both ways, in both rounds.
    assert_eq!(counts, [(20, 20, 0, 0), (4, 4, 0, 0), (6, 6, 0, 0)]);
    assert_eq!(s.checks.len(), 5);
    assert_eq!(s.pass, s.checks.iter().all(|c| c.pass));
    // Every informer synced, with every object once.
    assert_eq!((s.informers.clients, s.informers.done), (20, 20));
    assert_eq!(s.informer_initial_events, 20 * 300);
    assert_eq!(s.informer_initial_events_expected, 20 * 300);
    shapes_add_up(
        &s.upstream_during_informers_by_verb,
        &s.upstream_during_informers_by_shape,
    );
    assert_eq!(s.checks[4].gateway, s.upstream_during_informers as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_reconnects_every_watcher_and_loses_nothing_across_the_kill() {
    let load::Scenario::Restart(a) = herd_args(&[
        "restart",
        "--objects",
        "100",
        "--watchers",
        "30",
        "--pool",
        "20",
        "--rate",
        "40",
        "--before-kill",
        "1s",
        "--down-for",
        "500ms",
        "--duration",
        "1s",
        "--herd-timeout",
        "60s",
    ]) else {
        panic!("not restart");
    };
    let s = load::herds::restart::execute(&a)
        .await
        .expect("restart ran");
    eprintln!("{}", s.table());
    assert!(s.ok, "{}", s.table());
    assert_eq!((s.watchers, s.watchers_synced, s.objects), (30, 30, 120));
    assert!(s.down_s >= 0.5, "down {} s", s.down_s);
    // Every watcher streams again, having resumed or relisted; each reconnect timed
    // from the kill, so none before the gateway was back.
    assert_eq!((s.resumed + s.relisted, s.not_reconnected), (30, 0));
    assert_eq!(s.reconnect.count, 30);
    assert!(s.reconnect.p50_ms >= 500.0, "{:?}", s.reconnect);
    // Their streams broke at the kill.
    assert!(
        s.client.errors.contains_key("watch: stream broken")
            || s.client.errors.contains_key("watch: connection")
    );
    // The restarted gateway read the resource from the upstream at least once.
    assert!(s.upstream_requests >= 1);
    shapes_add_up(&s.upstream_by_verb, &s.upstream_by_shape);
    // Writes went on across the kill, and every stream has every one it must have.
    assert!(s.writes > 40, "{} writes", s.writes);
    assert_eq!((s.checked.watchers, s.checked.without_state), (30, 0));
    assert_eq!(s.checked.violation_count, 0, "{:?}", s.checked.violations);
    assert!(s.checked_events > 0 && s.checked_events <= 30 * s.writes);
}

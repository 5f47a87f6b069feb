//! The fault soak (`watchgate load soak`, issue 16 item 5), short: two simulator replicas
//! sharing one store, the `watchgate serve` binary in front of both, and for 20 s every
//! fault at once — upstream watches dropped every 2 s, 410 bursts, each replica killed
//! and restarted in turn, added latency — with healthy watchers, stalled watchers (from
//! halfway), connect/disconnect storms and writes throughout. Every healthy and storm
//! watcher's stream must match the writer's log exactly (0 gaps, duplicates,
//! reorderings) and the gateway's RSS must stay under a bound. The full-size run and its
//! figures are in docs/reliability.md.

use watchgate::load::{self, soak, Scenario};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_under_every_fault_loses_nothing_and_stays_bounded() {
    let argv = [
        "soak",
        "--duration",
        "20s",
        "--watchers",
        "60",
        "--stalled",
        "20",
        "--storm-clients",
        "15",
        "--storm-every",
        "4s",
        "--storm-lifetime",
        "3s",
        "--fault-cycle",
        "10s",
        "--drop-watches-every",
        "2s",
        "--latency-ms",
        "50",
        "--rate",
        "25",
        "--pool",
        "20",
        "--drain-timeout",
        "20s",
        "--max-rss",
        "256Mi",
        "--gateway-bin",
        env!("CARGO_BIN_EXE_watchgate"),
        "--no-progress",
    ];
    let parsed = load::parse(argv).expect("soak arguments");
    let Scenario::Soak(args) = parsed.scenario else {
        panic!("not the soak scenario");
    };
    let s = soak::execute(&args).await.expect("the soak ran");
    eprintln!("{}", s.table());

    // Every fault happened, more than once.
    let f = &s.faults;
    assert!(f.watch_drops >= 8, "watch drops: {f:?}");
    assert_eq!(f.bursts_410, 2, "one 410 burst per 10 s cycle: {f:?}");
    assert_eq!(f.kills, 4, "A and B killed once per cycle: {f:?}");
    assert_eq!(f.restarts, 4, "every kill restarted: {f:?}");
    assert_eq!(f.latency_windows, 2, "{f:?}");

    // Every healthy watcher connected and received writes; the stalled ones connected;
    // storms came and their clients' streams were checked too.
    assert_eq!(s.watchers_connected, 60);
    assert!(s.writes >= 200, "writes: {}", s.writes);
    assert!(
        s.checked_events >= 60 * 100,
        "checked: {}",
        s.checked_events
    );
    assert_eq!(s.stalled_connected, 20);
    assert!(s.storm_clients >= 60, "storm clients: {}", s.storm_clients);
    assert!(s.storm_checked_events > 0);
    assert!(s.delivery_without_stalled.count > 0 && s.delivery_with_stalled.count > 0);

    // No stream violation, bounded memory.
    assert_eq!(s.violation_count, 0, "violations: {:#?}", s.violations);
    let peak = s.rss_peak_bytes.expect("the gateway's RSS was sampled");
    assert!(peak <= 256.0 * 1024.0 * 1024.0, "gateway RSS peak {peak}");
    assert!(s.rss_samples.len() >= 20, "one RSS sample a second");
    assert!(s.ok);
}

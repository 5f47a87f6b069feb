//! The benchmark harness itself works: `QUICK=1 scripts/bench` runs three small scenarios
//! (the issue 7 acceptance against `watchgate demo`, informers and lists, each through the
//! gateway and direct where it has both) with this build's binary, and writes its report
//! and plots under its own output folder, leaving docs/benchmarks.md and docs/bench/
//! untouched. About 20 s on an idle 2-core machine; the full harness (35+ minutes) is for
//! humans on a quiet machine.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use support::process::run;
use tokio::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Every file of a folder with its length and modification time.
fn listing(dir: &Path) -> BTreeMap<String, (u64, SystemTime)> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| {
                    let e = e.unwrap();
                    let m = e.metadata().unwrap();
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        (m.len(), m.modified().unwrap()),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_bench_reports_into_its_own_folder_and_leaves_the_docs_alone() {
    let docs = Path::new(ROOT).join("docs");
    let doc_before = std::fs::read(docs.join("benchmarks.md")).unwrap();
    let plots_before = listing(&docs.join("bench"));
    let out = tempfile::tempdir().unwrap();

    let mut cmd = Command::new(Path::new(ROOT).join("scripts/bench"));
    cmd.args(["acceptance", "informers", "lists"])
        .env("QUICK", "1")
        .env("ROUNDS", "1")
        .env("WATCHGATE_BIN", env!("CARGO_BIN_EXE_watchgate"))
        .env("BENCH_OUT", out.path())
        .env("KUBECONFIG", "/nonexistent")
        .current_dir(ROOT);
    let result = run(cmd, None, Duration::from_secs(170)).await;
    result.assert_success();

    let report = std::fs::read_to_string(out.path().join("report.md"))
        .unwrap_or_else(|e| panic!("no report.md ({e}): {result}"));
    let has = |s: &str| assert!(report.contains(s), "report.md lacks {s:?}:\n{report}");
    has("QUICK=1: scaled down, harness check only");
    for sc in ["acceptance", "informers", "lists"] {
        has(&format!("#### {sc}\n"));
    }
    // The headline rows this harness adds: the acceptance run, the RV=0 lists and the
    // upstream requests saved by the gateway for 50 informers.
    has("| issue 7: `watch-fanout --watchers 200 --rate 50` against `watchgate demo` (round 1) | correct summary, 0 violations, plot | 0 violations,");
    has("| RV=0 list of 500 pods, through watchgate vs the simulator direct, with the load tool on the same cores |");
    has("| upstream requests saved: 50 informers (list RV=0, then watch) | 1 list, 1 watch | through watchgate 0 lists and 1 watches; direct 52 lists and 50 watches");
    has("| gaps, duplicates, reorderings over every run of this report | 0 | 0 in 5 runs | met |");
    // Gateway/direct ratios under both scenarios that have a direct side.
    assert_eq!(
        report.matches("| ratio watchgate / direct |").count(),
        2,
        "{report}"
    );
    // The revision, dirty or not, as git describes it.
    let described = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .current_dir(ROOT)
        .output();
    if let Some(d) = described.ok().filter(|d| d.status.success()) {
        let rev = String::from_utf8_lossy(&d.stdout).trim().to_string();
        has(&format!(
            "watchgate builds of {rev} (acceptance, informers, lists)"
        ));
    }
    // The load average before and after each scenario, measured rather than assumed.
    has("- load average (1 min) before → after each scenario's runs: acceptance ");

    // Plots next to the report, linked from it.
    for plot in [
        "acceptance-fanout-2000.svg",
        "informers-gateway.svg",
        "informers-direct.svg",
        "lists-gateway.svg",
        "lists-direct.svg",
    ] {
        assert!(out.path().join("plots").join(plot).exists(), "no {plot}");
        has(&format!("(plots/{plot})"));
    }
    // And nothing of the quick run in docs/.
    assert!(
        std::fs::read(docs.join("benchmarks.md")).unwrap() == doc_before,
        "QUICK=1 rewrote docs/benchmarks.md"
    );
    assert_eq!(
        listing(&docs.join("bench")),
        plots_before,
        "docs/bench/ changed"
    );
}

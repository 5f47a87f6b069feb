//! The run's summary: one struct, printed as a table for people and as JSON for machines.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::checker::Violation;
use super::probe::Sample;

/// Percentiles of a latency histogram, in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            count: h.len(),
            mean_ms: h.mean() / 1000.0,
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
        }
    }
}

/// The target's cost over the run (when it could be read).
#[derive(Debug, Clone, Default, Serialize)]
pub struct TargetCost {
    pub cpu_seconds: Option<f64>,
    pub rss_start_bytes: Option<f64>,
    pub rss_end_bytes: Option<f64>,
    pub rss_peak_bytes: Option<f64>,
    /// CPU time of the target per event delivered to a watcher (µs).
    pub cpu_us_per_delivery: Option<f64>,
    /// CPU time of the target per write the writer made (µs): per upstream event.
    pub cpu_us_per_write: Option<f64>,
    /// RSS growth per watcher (bytes): from just before the watchers connect to the
    /// moment every watcher is connected, before any write. Idle watchers only, so that
    /// queued events and the writer's load do not count as the watchers' own memory.
    pub rss_per_watcher_bytes: Option<f64>,
}

/// What the load tool itself spent over the measured window: it shares the machine with
/// the target, so its share says how much of the CPU the target could have had.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadCost {
    pub cpu_seconds: Option<f64>,
    /// Its CPU time per event it received and checked (µs).
    pub cpu_us_per_event: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub scenario: String,
    pub target: String,
    pub protocol: String,
    pub watchers: usize,
    pub list_workers: usize,
    pub duration_s: f64,
    pub write_rate: f64,
    pub writes: u64,
    pub writes_behind: u64,
    pub events: u64,
    pub checked_events: u64,
    pub events_per_s: f64,
    pub bookmarks: u64,
    pub watch_requests: u64,
    /// HTTP/2 connections the watches were multiplexed on (`--protocol http2`; 0 over
    /// HTTP/1.1, where each watch has its own connection).
    pub h2_connections: usize,
    /// What watchers and lists asked for, and how many watch frames and list responses
    /// came back as protobuf.
    pub encoding: String,
    pub protobuf_frames: u64,
    pub protobuf_lists: u64,
    pub watch_mb_per_s: f64,
    /// Complete lists (all pages read), including informers' and relists.
    pub lists: u64,
    pub lists_per_s: f64,
    pub list_mb_per_s: f64,
    /// Pages (responses) of the complete lists. (`list_mb_per_s` counts every byte read,
    /// also of lists cut short by the end of the run.)
    pub list_pages: u64,
    /// Items of the complete lists, in all; and the fewest and most in one list.
    pub list_items: u64,
    pub list_items_min: u64,
    pub list_items_max: u64,
    pub delivery: Latency,
    pub list_latency: Latency,
    pub write_latency: Latency,
    pub watch_connect_latency: Latency,
    /// Informers started with a watch-list (`informers --watch-list`), how many received
    /// their initial state, and when (from the informers' start; `max_ms` is the time to
    /// sync them all).
    pub watch_list_informers: usize,
    pub synced: u64,
    pub sync_latency: Latency,
    /// Requests the target (a watchgate, with `--metrics-url`) sent upstream from the
    /// informers' start until the last one synced: its `watchgate_upstream_requests_total`,
    /// which counts every request of that process (run the load tool as its own process).
    pub upstream_requests_during_sync: Option<f64>,
    pub errors: BTreeMap<String, u64>,
    pub watchers_terminated: u64,
    pub gone_410: u64,
    pub violations: Vec<Violation>,
    pub violation_count: u64,
    pub target_cost: TargetCost,
    pub load_cost: LoadCost,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub target_samples: Vec<Sample>,
    pub ok: bool,
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| "n/a".into())
}

fn mib(b: f64) -> String {
    format!("{:.1} MiB", b / 1048576.0)
}

impl Summary {
    pub fn table(&self) -> String {
        let mut s = String::new();
        let l = |s: &mut String, k: &str, v: String| {
            let _ = writeln!(s, "  {k:<26} {v}");
        };
        let _ = writeln!(
            s,
            "\nwatchgate load {} against {} ({}, {:.1} s)",
            self.scenario, self.target, self.protocol, self.duration_s
        );
        l(&mut s, "watchers", self.watchers.to_string());
        if self.list_workers > 0 {
            l(&mut s, "list workers", self.list_workers.to_string());
        }
        l(
            &mut s,
            "writes",
            format!(
                "{} at {}/s ({} skipped: writer behind)",
                self.writes, self.write_rate, self.writes_behind
            ),
        );
        l(
            &mut s,
            "events delivered",
            format!(
                "{} ({} checked), {:.0} events/s, {:.2} MB/s",
                self.events, self.checked_events, self.events_per_s, self.watch_mb_per_s
            ),
        );
        let d = &self.delivery;
        l(
            &mut s,
            "delivery latency",
            format!(
                "p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms  (n={})",
                d.p50_ms, d.p90_ms, d.p99_ms, d.max_ms, d.count
            ),
        );
        if self.lists > 0 {
            let d = &self.list_latency;
            l(
                &mut s,
                "lists",
                format!(
                    "{} ({:.1} lists/s, {:.1} MB/s, {} pages, {} items per list); \
                     p50 {:.1} ms  p90 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
                    self.lists,
                    self.lists_per_s,
                    self.list_mb_per_s,
                    self.list_pages,
                    if self.list_items_min == self.list_items_max {
                        self.list_items_min.to_string()
                    } else {
                        format!("{}-{}", self.list_items_min, self.list_items_max)
                    },
                    d.p50_ms,
                    d.p90_ms,
                    d.p99_ms,
                    d.max_ms
                ),
            );
        }
        let w = &self.write_latency;
        l(
            &mut s,
            "write latency",
            format!("p50 {:.2} ms  p99 {:.2} ms", w.p50_ms, w.p99_ms),
        );
        let c = &self.watch_connect_latency;
        l(
            &mut s,
            "watch requests",
            format!(
                "{}{} (time to headers p50 {:.2} ms  p99 {:.2} ms)",
                self.watch_requests,
                if self.h2_connections > 0 {
                    format!(" on {} HTTP/2 connections", self.h2_connections)
                } else {
                    String::new()
                },
                c.p50_ms,
                c.p99_ms
            ),
        );
        if self.encoding != "json" && !self.encoding.is_empty() {
            l(
                &mut s,
                "encoding",
                format!(
                    "{}: {} protobuf watch frames, {} protobuf list responses",
                    self.encoding, self.protobuf_frames, self.protobuf_lists
                ),
            );
        }
        if self.watch_list_informers > 0 {
            let d = &self.sync_latency;
            l(
                &mut s,
                "watch-list syncs",
                format!(
                    "{}/{} synced; all within {:.1} ms (p50 {:.1} ms  p99 {:.1} ms); {} upstream requests meanwhile",
                    self.synced,
                    self.watch_list_informers,
                    d.max_ms,
                    d.p50_ms,
                    d.p99_ms,
                    opt(self.upstream_requests_during_sync, |v| format!("{v:.0}")),
                ),
            );
        }
        l(&mut s, "bookmarks", self.bookmarks.to_string());
        l(
            &mut s,
            "watchers terminated",
            self.watchers_terminated.to_string(),
        );
        l(&mut s, "410 Gone", self.gone_410.to_string());
        let errors = if self.errors.is_empty() {
            "none".to_string()
        } else {
            self.errors
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        l(&mut s, "errors", errors);
        let t = &self.target_cost;
        l(
            &mut s,
            "target CPU",
            format!(
                "{} ({} per delivery, {} per write)",
                opt(t.cpu_seconds, |v| format!("{v:.2} s")),
                opt(t.cpu_us_per_delivery, |v| format!("{v:.2} µs")),
                opt(t.cpu_us_per_write, |v| format!("{v:.0} µs")),
            ),
        );
        l(
            &mut s,
            "load tool CPU",
            format!(
                "{} ({} per event received)",
                opt(self.load_cost.cpu_seconds, |v| format!("{v:.2} s")),
                opt(self.load_cost.cpu_us_per_event, |v| format!("{v:.2} µs")),
            ),
        );
        l(
            &mut s,
            "target RSS",
            format!(
                "start {}, end {}, peak {} ({} per watcher)",
                opt(t.rss_start_bytes, mib),
                opt(t.rss_end_bytes, mib),
                opt(t.rss_peak_bytes, mib),
                opt(t.rss_per_watcher_bytes, |v| format!(
                    "{:.2} KiB",
                    v / 1024.0
                )),
            ),
        );
        l(
            &mut s,
            "stream violations",
            if self.violation_count == 0 {
                "0".into()
            } else {
                format!("{} (FAILED)", self.violation_count)
            },
        );
        for v in self.violations.iter().take(20) {
            let _ = writeln!(s, "    {v}");
        }
        let _ = writeln!(
            s,
            "  result                     {}",
            if self.ok { "ok" } else { "FAILED" }
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_every_list_percentile_and_the_list_shape() {
        let s = Summary {
            lists: 12,
            lists_per_s: 6.0,
            list_mb_per_s: 1.5,
            list_pages: 48,
            list_items: 1200,
            list_items_min: 100,
            list_items_max: 100,
            list_latency: Latency {
                count: 12,
                mean_ms: 3.0,
                p50_ms: 2.5,
                p90_ms: 7.5,
                p99_ms: 9.5,
                max_ms: 11.0,
            },
            ..Summary::default()
        };
        let table = s.table();
        let line = table
            .lines()
            .find(|l| l.trim_start().starts_with("lists "))
            .unwrap_or_else(|| panic!("no lists line in:\n{table}"));
        assert!(
            line.ends_with(
                "12 (6.0 lists/s, 1.5 MB/s, 48 pages, 100 items per list); \
                 p50 2.5 ms  p90 7.5 ms  p99 9.5 ms  max 11.0 ms"
            ),
            "{line}"
        );
        let varied = Summary {
            list_items_min: 90,
            ..s
        };
        assert!(varied.table().contains("90-100 items per list"));
    }
}

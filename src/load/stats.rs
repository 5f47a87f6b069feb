//! Shared counters and latency histograms of one run. Watchers batch their latencies per
//! body frame and record them into one of a few shards, so 10,000 watchers do not contend
//! on one lock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use hdrhistogram::Histogram;

/// Latencies are recorded in microseconds, up to a minute.
const MAX_US: u64 = 60_000_000;
/// Times until a client has its initial state, up to ten minutes: a herd on a cold
/// gateway takes longer than a minute, and a clamped figure would hide by how much.
const MAX_SYNC_US: u64 = 600_000_000;
const SHARDS: usize = 16;

pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 3).expect("valid histogram bounds")
}

/// One shard: the whole-run histogram and one per second of the run (for the plot).
struct Shard {
    total: Histogram<u64>,
    per_second: Vec<Histogram<u64>>,
}

#[derive(Default)]
pub struct Counters {
    /// Watch events received (every type but BOOKMARK and ERROR), including other
    /// clients' objects.
    pub events: AtomicU64,
    /// Events on the writer's objects (the checked ones).
    pub checked: AtomicU64,
    pub bookmarks: AtomicU64,
    /// Bytes of watch streams.
    pub watch_bytes: AtomicU64,
    /// Watch requests sent (first connects, resumes, reconnects).
    pub watch_requests: AtomicU64,
    /// Watches currently streaming.
    pub watching: AtomicU64,
    /// Streams that ended without the load tool asking (server timeout, slow-watcher
    /// termination, connection loss).
    pub terminated: AtomicU64,
    /// ERROR events or responses with 410 Gone (each is followed by a relist).
    pub gone: AtomicU64,
    /// Complete lists (every page read).
    pub lists: AtomicU64,
    pub list_bytes: AtomicU64,
    /// Pages (responses) of complete lists.
    pub list_pages: AtomicU64,
    /// Items of complete lists, summed over their pages.
    pub list_items: AtomicU64,
    /// Fewest and most items in one complete list (min starts at `u64::MAX`: no list yet).
    pub list_items_min: AtomicU64,
    pub list_items_max: AtomicU64,
    /// Watch frames (`;stream=watch`) and list responses that were protobuf.
    pub protobuf_frames: AtomicU64,
    pub protobuf_lists: AtomicU64,
    pub writes: AtomicU64,
    /// Writes the ticker could not start because too many were in flight.
    pub writes_behind: AtomicU64,
    /// Watch-list informers that received their `k8s.io/initial-events-end` bookmark.
    pub synced: AtomicU64,
}

pub struct Stats {
    pub started: Instant,
    /// Unix time (ns) of the measured window's start (set by [`Stats::mark_start`]), to
    /// turn stamps into run-relative seconds for the plot. `u64::MAX` until then, so that
    /// nothing before the window (informers' first lists) is placed in it.
    started_unix_ns: AtomicU64,
    pub c: Counters,
    delivery: Vec<Mutex<Shard>>,
    list_latency: Mutex<Histogram<u64>>,
    /// List latency per second of the run (by the list's start), for the plot of a run
    /// that only lists.
    list_per_second: Mutex<Vec<Histogram<u64>>>,
    write_latency: Mutex<Histogram<u64>>,
    watch_connect_latency: Mutex<Histogram<u64>>,
    /// Watch-list informers: time from their start to their initial-events-end bookmark.
    sync_latency: Mutex<Histogram<u64>>,
    errors: Mutex<BTreeMap<String, u64>>,
}

pub fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            started_unix_ns: AtomicU64::new(u64::MAX),
            c: Counters {
                list_items_min: AtomicU64::new(u64::MAX),
                ..Counters::default()
            },
            delivery: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        total: histogram(),
                        per_second: Vec::new(),
                    })
                })
                .collect(),
            list_latency: Mutex::new(histogram()),
            list_per_second: Mutex::new(Vec::new()),
            write_latency: Mutex::new(histogram()),
            watch_connect_latency: Mutex::new(histogram()),
            sync_latency: Mutex::new(
                Histogram::new_with_bounds(1, MAX_SYNC_US, 3).expect("valid histogram bounds"),
            ),
            errors: Mutex::new(BTreeMap::new()),
        }
    }

    /// Records a batch of (write time ns, delivery latency µs) of one watcher.
    pub fn record_deliveries(&self, watcher: usize, batch: &[(u64, u64)]) {
        if batch.is_empty() {
            return;
        }
        let origin = self.started_unix_ns.load(Ordering::Relaxed);
        let mut shard = self.delivery[watcher % SHARDS].lock().unwrap();
        for &(written_ns, us) in batch {
            let us = us.clamp(1, MAX_US);
            shard.total.saturating_record(us);
            let second = (written_ns.saturating_sub(origin) / 1_000_000_000) as usize;
            if second < 24 * 3600 {
                while shard.per_second.len() <= second {
                    shard.per_second.push(histogram());
                }
                shard.per_second[second].saturating_record(us);
            }
        }
    }

    /// The measured window starts now.
    pub fn mark_start(&self) {
        self.started_unix_ns.store(unix_ns(), Ordering::Relaxed);
    }

    /// Records one complete list: its latency, pages and items, and when it started (unix ns) so that the
    /// plot can show list latency over the run. Lists that started before the measured
    /// window (informers' first lists) count in the totals but not per second.
    pub fn record_list(&self, started_ns: u64, us: u64, pages: u64, items: u64) {
        let us = us.clamp(1, MAX_US);
        self.list_latency.lock().unwrap().saturating_record(us);
        let origin = self.started_unix_ns.load(Ordering::Relaxed);
        if let Some(since) = started_ns.checked_sub(origin) {
            let second = (since / 1_000_000_000) as usize;
            if second < 24 * 3600 {
                let mut per = self.list_per_second.lock().unwrap();
                while per.len() <= second {
                    per.push(histogram());
                }
                per[second].saturating_record(us);
            }
        }
        Self::add(&self.c.list_pages, pages);
        Self::add(&self.c.list_items, items);
        self.c.list_items_min.fetch_min(items, Ordering::Relaxed);
        self.c.list_items_max.fetch_max(items, Ordering::Relaxed);
        Self::add(&self.c.lists, 1);
    }

    pub fn record_write(&self, us: u64) {
        self.write_latency
            .lock()
            .unwrap()
            .saturating_record(us.clamp(1, MAX_US));
    }
    pub fn record_watch_connect(&self, us: u64) {
        self.watch_connect_latency
            .lock()
            .unwrap()
            .saturating_record(us.clamp(1, MAX_US));
    }

    /// A watch-list informer synced `us` after the informers started.
    pub fn record_sync(&self, us: u64) {
        self.sync_latency
            .lock()
            .unwrap()
            .saturating_record(us.clamp(1, MAX_SYNC_US));
        Self::add(&self.c.synced, 1);
    }
    pub fn sync_latency(&self) -> Histogram<u64> {
        self.sync_latency.lock().unwrap().clone()
    }

    /// Counts an error by HTTP code or kind ("410", "503", "connect", "stream").
    pub fn error(&self, what: impl Into<String>) {
        *self.errors.lock().unwrap().entry(what.into()).or_default() += 1;
    }

    pub fn errors(&self) -> BTreeMap<String, u64> {
        self.errors.lock().unwrap().clone()
    }

    pub fn delivery(&self) -> Histogram<u64> {
        let mut h = histogram();
        for s in &self.delivery {
            h.add(&s.lock().unwrap().total).expect("same bounds");
        }
        h
    }

    /// Per second of the run (by write time): the merged histogram of that second.
    pub fn delivery_per_second(&self) -> Vec<Histogram<u64>> {
        let mut out: Vec<Histogram<u64>> = Vec::new();
        for s in &self.delivery {
            let s = s.lock().unwrap();
            for (i, h) in s.per_second.iter().enumerate() {
                while out.len() <= i {
                    out.push(histogram());
                }
                out[i].add(h).expect("same bounds");
            }
        }
        out
    }

    pub fn list_latency(&self) -> Histogram<u64> {
        self.list_latency.lock().unwrap().clone()
    }
    pub fn list_latency_per_second(&self) -> Vec<Histogram<u64>> {
        self.list_per_second.lock().unwrap().clone()
    }
    /// (fewest, most) items in one complete list; (0, 0) before any list.
    pub fn list_items_range(&self) -> (u64, u64) {
        match Self::get(&self.c.list_items_min) {
            u64::MAX => (0, 0),
            min => (min, Self::get(&self.c.list_items_max)),
        }
    }
    pub fn write_latency(&self) -> Histogram<u64> {
        self.write_latency.lock().unwrap().clone()
    }
    pub fn watch_connect_latency(&self) -> Histogram<u64> {
        self.watch_connect_latency.lock().unwrap().clone()
    }

    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

//! The caches' and fan-outs' state, copied into the metrics recorder at scrape time
//! (`/metrics` calls [`refresh_metrics`] before `metrics::render`). Here rather than in
//! `metrics`, so that the metric names stay a leaf every layer may use and only the cache
//! knows its own insides.

use std::sync::atomic::Ordering;

use ::metrics::{counter, gauge};

use super::registry::Registry;
use crate::metrics::*;

/// Copies every cache's state into the recorder.
pub fn refresh_metrics(registry: &Registry) {
    refresh_cache_metrics(registry);
    refresh_fanout_metrics(registry);
}

/// Copies the caches' state and the reflectors' atomics into the recorder. Done at scrape
/// time so that the reflectors' and the request path's hot loops never touch a metric.
/// The counters are set to the reflectors' own totals with `absolute`, which the
/// exporter's atomic counter implements as `fetch_max`: a scrape never double-counts, and
/// a counter never goes backwards. With two gateways caching the same resource in one
/// process (tests) a counter shows the larger of their totals, and a gauge whatever the
/// last refresh set: such tests give each gateway its own resource.
fn refresh_cache_metrics(registry: &Registry) {
    for (r, n) in crate::model::object::derived_totals() {
        gauge!(CACHE_DERIVED_BYTES, "representation" => r.as_str()).set(n as f64);
    }
    let budget = registry.budget();
    gauge!(CACHE_BUDGET_LIMIT, "scope" => "total").set(budget.config.max_bytes as f64);
    gauge!(CACHE_BUDGET_LIMIT, "scope" => "resource").set(budget.config.max_resource_bytes as f64);
    for d in registry.dropped() {
        let (g, r) = (d.info.group.clone(), d.info.resource.clone());
        gauge!(CACHE_OVER_BUDGET, "group" => g.clone(), "resource" => r.clone()).set(1.0);
        gauge!(CACHE_BUDGET_USED, "group" => g, "resource" => r).set(0.0);
    }
    counter!(UPSTREAM_RESETS_TOTAL).absolute(registry.resets());
    for ((g, r, reason), n) in registry.drop_counts() {
        counter!(CACHE_DROPPED_TOTAL, "group" => g, "resource" => r, "reason" => reason)
            .absolute(n);
    }
    for c in registry.caches() {
        let g = c.info.group.clone();
        let r = c.info.resource.clone();
        let s = &c.stats;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        gauge!(UPSTREAM_WATCHES, "group" => g.clone(), "resource" => r.clone())
            .set(load(&s.watches_open) as f64);
        let snapshot = c.store.snapshot();
        gauge!(CACHE_OBJECTS, "group" => g.clone(), "resource" => r.clone())
            .set(snapshot.len() as f64);
        gauge!(CACHE_BYTES, "group" => g.clone(), "resource" => r.clone())
            .set(snapshot.bytes as f64);
        gauge!(CACHE_BUDGET_USED, "group" => g.clone(), "resource" => r.clone())
            .set(snapshot.heap as f64);
        gauge!(CACHE_OVER_BUDGET, "group" => g.clone(), "resource" => r.clone()).set(0.0);
        gauge!(CACHE_RESOURCE_VERSION, "group" => g.clone(), "resource" => r.clone())
            .set(c.store.resource_version() as f64);
        gauge!(CACHE_SYNCED, "group" => g.clone(), "resource" => r.clone()).set(if c.is_synced() {
            1.0
        } else {
            0.0
        });
        let sync_millis = load(&s.sync_millis);
        if sync_millis > 0 {
            gauge!(CACHE_SYNC_DURATION, "group" => g.clone(), "resource" => r.clone())
                .set(sync_millis as f64 / 1e3);
        }
        counter!(CACHE_EVENTS_TOTAL, "group" => g.clone(), "resource" => r.clone())
            .absolute(load(&s.events));
        counter!(REFLECTOR_LISTS_TOTAL, "group" => g.clone(), "resource" => r.clone())
            .absolute(load(&s.lists));
        counter!(REFLECTOR_RELISTS_TOTAL, "group" => g.clone(), "resource" => r.clone(), "reason" => "expired")
            .absolute(load(&s.relists_after_expired));
        counter!(REFLECTOR_RELISTS_TOTAL, "group" => g.clone(), "resource" => r.clone(), "reason" => "consistent_read")
            .absolute(load(&s.consistent_resyncs));
        counter!(REFLECTOR_PROGRESS_WATCHES_TOTAL, "group" => g.clone(), "resource" => r.clone())
            .absolute(load(&s.progress_watches));
        for (result, n) in [
            ("resumed", &s.backfills),
            ("fell_back", &s.backfill_fallbacks),
            ("other_cluster", &s.backfills_other_cluster),
        ] {
            counter!(REFLECTOR_BACKFILLS_TOTAL, "group" => g.clone(), "resource" => r.clone(), "result" => result)
                .absolute(load(n));
        }
        let f = &c.fresh.counters;
        for (result, n) in [
            ("fresh", &f.fresh),
            ("synced", &f.synced),
            ("waited", &f.waited),
            ("resynced", &f.resynced),
            ("forwarded", &f.forwarded),
        ] {
            counter!(CONSISTENT_READS_TOTAL, "group" => g.clone(), "resource" => r.clone(), "result" => result)
                .absolute(load(n));
        }
        let errors = load(&f.probe_errors);
        counter!(CONSISTENCY_PROBES_TOTAL, "group" => g.clone(), "resource" => r.clone(), "result" => "ok")
            .absolute(load(&f.probes).saturating_sub(errors));
        counter!(CONSISTENCY_PROBES_TOTAL, "group" => g.clone(), "resource" => r.clone(), "result" => "error")
            .absolute(errors);
        let k = &c.consistency.counters;
        for (result, n) in [
            ("success", &k.success),
            ("failure", &k.failure),
            ("error", &k.error),
        ] {
            counter!(CACHE_CONSISTENCY_CHECKS_TOTAL, "group" => g.clone(), "resource" => r.clone(), "result" => result)
                .absolute(load(n));
        }
        let (kept, kept_bytes) = c.store.retained_usage();
        gauge!(CACHE_SNAPSHOTS, "group" => g.clone(), "resource" => r.clone()).set(kept as f64);
        gauge!(CACHE_SNAPSHOT_BYTES, "group" => g.clone(), "resource" => r.clone())
            .set(kept_bytes as f64);
        let rs = c.store.retained_stats();
        for (result, n) in [
            ("retained", &rs.hits),
            ("rebuilt", &rs.rebuilt),
            ("missed", &rs.misses),
            ("evicted", &rs.evicted),
        ] {
            counter!(CACHE_SNAPSHOT_READS_TOTAL, "group" => g.clone(), "resource" => r.clone(), "result" => result)
                .absolute(load(n));
        }
        counter!(REFLECTOR_RESTARTS_TOTAL, "group" => g.clone(), "resource" => r.clone(), "reason" => "stream_end")
            .absolute(load(&s.watch_restarts));
        counter!(REFLECTOR_RESTARTS_TOTAL, "group" => g.clone(), "resource" => r.clone(), "reason" => "error")
            .absolute(load(&s.errors));
        counter!(REFLECTOR_RESTARTS_TOTAL, "group" => g.clone(), "resource" => r.clone(), "reason" => "upstream_behind")
            .absolute(load(&s.behind));
        counter!(REFLECTOR_MALFORMED_TOTAL, "group" => g, "resource" => r)
            .absolute(load(&s.malformed_objects));
    }
}

/// Copies the hubs' atomics and history sizes into the recorder, at scrape time.
fn refresh_fanout_metrics(registry: &Registry) {
    use crate::watch::stats::EndReason;
    for c in registry.caches() {
        let g = c.info.group.clone();
        let r = c.info.resource.clone();
        let hub = c.store.hub();
        let s = &hub.stats;
        gauge!(WATCHERS, "group" => g.clone(), "resource" => r.clone())
            .set(s.watchers.load(Ordering::Relaxed) as f64);
        gauge!(WATCHERS_LAGGING, "group" => g.clone(), "resource" => r.clone())
            .set(s.lagging.load(Ordering::Relaxed) as f64);
        counter!(WATCH_EVENTS_DELIVERED_TOTAL, "group" => g.clone(), "resource" => r.clone())
            .absolute(s.delivered.load(Ordering::Relaxed));
        counter!(WATCH_EVENTS_WRITTEN_DIRECTLY_TOTAL, "group" => g.clone(), "resource" => r.clone())
            .absolute(s.written_directly.load(Ordering::Relaxed));
        counter!(WATCH_BYTES_WRITTEN_TOTAL, "group" => g.clone(), "resource" => r.clone())
            .absolute(s.bytes.load(Ordering::Relaxed));
        counter!(WATCH_BOOKMARKS_TOTAL, "group" => g.clone(), "resource" => r.clone())
            .absolute(s.bookmarks.load(Ordering::Relaxed));
        counter!(WATCH_BOOKMARKS_WRITTEN_DIRECTLY_TOTAL, "group" => g.clone(), "resource" => r.clone())
            .absolute(s.bookmarks_written_directly.load(Ordering::Relaxed));
        for reason in EndReason::ALL {
            counter!(TERMINATED_WATCHERS_TOTAL, "group" => g.clone(), "resource" => r.clone(), "reason" => reason.as_str())
                .absolute(s.terminated(reason));
        }
        let h = hub.history_stats();
        gauge!(WATCH_HISTORY_EVENTS, "group" => g.clone(), "resource" => r.clone())
            .set(h.events as f64);
        gauge!(WATCH_HISTORY_BYTES, "group" => g.clone(), "resource" => r.clone())
            .set(h.bytes as f64);
        gauge!(WATCH_HISTORY_OLDEST_AGE, "group" => g, "resource" => r)
            .set(h.oldest_age.as_secs_f64());
    }
}

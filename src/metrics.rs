//! Every Prometheus metric watchgate exports: names, help texts and label sets, in one
//! place.
//!
//! Names follow kube-apiserver's (`apiserver_request_total`,
//! `apiserver_longrunning_requests`, `apiserver_watch_cache_*`) with a `watchgate_` prefix,
//! so operators recognise them. Labels are bounded on purpose: verb, group, resource,
//! scope, code, source, reason. Never namespace, name, user or resourceVersion: each of
//! those would create a series per object or per client. Group and resource, which come
//! from the client's URL, are kept only for resources served successfully
//! (`stack::instrument::KnownResources`).
//!
//! The recorder is process-global (the `metrics` facade allows one), installed lazily by
//! [`install`]. Tests start many gateways in one process, so every counter is cumulative
//! for the process and tests assert deltas.

use std::sync::OnceLock;

use ::metrics::{counter, describe_counter, describe_gauge, describe_histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

// Requests (the downstream API listener).
pub const REQUESTS_TOTAL: &str = "watchgate_requests_total";
pub const REQUEST_DURATION: &str = "watchgate_request_duration_seconds";
pub const REQUESTS_IN_FLIGHT: &str = "watchgate_requests_in_flight";
pub const LONG_RUNNING: &str = "watchgate_long_running_requests";
pub const FORWARDED_TOTAL: &str = "watchgate_forwarded_requests_total";

// Upstream (every request watchgate sends to the apiserver, the reflectors' included).
pub const UPSTREAM_REQUESTS_TOTAL: &str = "watchgate_upstream_requests_total";
pub const UPSTREAM_REQUEST_DURATION: &str = "watchgate_upstream_request_duration_seconds";
pub const UPSTREAM_WATCHES: &str = "watchgate_upstream_watches";
pub const UPSTREAM_UP: &str = "watchgate_upstream_up";
pub const UPSTREAM_CONNECTIONS: &str = "watchgate_upstream_connections";
pub const UPSTREAM_STREAMS: &str = "watchgate_upstream_streams";
pub const UPSTREAM_REFUSALS_TOTAL: &str = "watchgate_upstream_refusals_total";
pub const UPSTREAM_ENDPOINT_HEALTHY: &str = "watchgate_upstream_endpoint_healthy";
pub const UPSTREAM_EJECTIONS_TOTAL: &str = "watchgate_upstream_endpoint_ejections_total";

// Cache, per resource (refreshed at scrape time from the registry).
pub const CACHE_OBJECTS: &str = "watchgate_cache_objects";
pub const CACHE_BYTES: &str = "watchgate_cache_bytes";
pub const CACHE_SYNC_DURATION: &str = "watchgate_cache_sync_duration_seconds";
pub const CACHE_RESOURCE_VERSION: &str = "watchgate_cache_resource_version";
pub const CACHE_SYNCED: &str = "watchgate_cache_synced";
pub const CACHE_EVENTS_TOTAL: &str = "watchgate_cache_events_total";
pub const CACHE_BUDGET_USED: &str = "watchgate_cache_budget_used_bytes";
pub const CACHE_BUDGET_LIMIT: &str = "watchgate_cache_budget_limit_bytes";
pub const CACHE_OVER_BUDGET: &str = "watchgate_cache_over_budget";
pub const CACHE_DROPPED_TOTAL: &str = "watchgate_cache_dropped_total";
pub const UPSTREAM_RESETS_TOTAL: &str = "watchgate_upstream_resets_total";
pub const CACHE_PROTOBUF_UNAVAILABLE: &str = "watchgate_cache_protobuf_unavailable";
pub const CACHE_DERIVED_BYTES: &str = "watchgate_cache_derived_bytes";
pub const REFLECTOR_LISTS_TOTAL: &str = "watchgate_reflector_lists_total";
pub const REFLECTOR_RELISTS_TOTAL: &str = "watchgate_reflector_relists_total";
pub const REFLECTOR_RESTARTS_TOTAL: &str = "watchgate_reflector_restarts_total";
pub const REFLECTOR_MALFORMED_TOTAL: &str = "watchgate_reflector_malformed_objects_total";
pub const REFLECTOR_PROGRESS_WATCHES_TOTAL: &str = "watchgate_reflector_progress_watches_total";
pub const REFLECTOR_BACKFILLS_TOTAL: &str = "watchgate_reflector_backfills_total";

// Consistent reads and retained snapshots, per resource (docs/consistency.md).
pub const CONSISTENT_READS_TOTAL: &str = "watchgate_consistent_reads_total";
pub const CONSISTENCY_PROBES_TOTAL: &str = "watchgate_consistency_probes_total";
pub const CACHE_CONSISTENCY_CHECKS_TOTAL: &str = "watchgate_cache_consistency_checks_total";
pub const CACHE_SNAPSHOTS: &str = "watchgate_cache_snapshots";
pub const CACHE_SNAPSHOT_BYTES: &str = "watchgate_cache_snapshot_bytes";
pub const CACHE_SNAPSHOT_READS_TOTAL: &str = "watchgate_cache_snapshot_reads_total";

// Watch fan-out, per resource (downstream watches served from the cache).
pub const WATCHERS: &str = "watchgate_watchers";
pub const WATCHERS_LAGGING: &str = "watchgate_watchers_lagging";
pub const WATCH_EVENTS_DELIVERED_TOTAL: &str = "watchgate_watch_events_delivered_total";
pub const WATCH_BYTES_WRITTEN_TOTAL: &str = "watchgate_watch_bytes_written_total";
pub const WATCH_EVENTS_WRITTEN_DIRECTLY_TOTAL: &str =
    "watchgate_watch_events_written_directly_total";
pub const WATCH_BOOKMARKS_TOTAL: &str = "watchgate_watch_bookmarks_total";
pub const WATCH_BOOKMARKS_WRITTEN_DIRECTLY_TOTAL: &str =
    "watchgate_watch_bookmarks_written_directly_total";
pub const TERMINATED_WATCHERS_TOTAL: &str = "watchgate_terminated_watchers_total";
pub const WATCH_DISPATCH_DURATION: &str = "watchgate_watch_dispatch_duration_seconds";
pub const WATCH_HISTORY_EVENTS: &str = "watchgate_watch_cache_history_events";
pub const WATCH_HISTORY_BYTES: &str = "watchgate_watch_cache_history_bytes";
pub const WATCH_HISTORY_OLDEST_AGE: &str = "watchgate_watch_cache_history_oldest_age_seconds";

/// Label sets, documented here so the call sites cannot drift from the docs.
pub mod labels {
    pub const REQUEST: &[&str] = &["verb", "group", "resource", "scope", "code", "source"];
    pub const REQUEST_DURATION: &[&str] = &["verb", "group", "resource", "scope", "code", "source"];
    pub const LONG_RUNNING: &[&str] = &["group", "resource"];
    /// `UPSTREAM_REQUESTS_TOTAL` and `UPSTREAM_REQUEST_DURATION`.
    pub const UPSTREAM: &[&str] = &["code"];
    /// `UPSTREAM_CONNECTIONS` and `UPSTREAM_STREAMS`: class is `short` or `long_running`;
    /// endpoint is the apiserver's `host:port` (one per `--server`).
    pub const UPSTREAM_POOL: &[&str] = &["class", "endpoint"];
    pub const UPSTREAM_REFUSALS: &[&str] = &["class"];
    /// `UPSTREAM_ENDPOINT_HEALTHY` and `UPSTREAM_EJECTIONS_TOTAL` (several `--server`s).
    pub const UPSTREAM_ENDPOINT: &[&str] = &["endpoint"];
    pub const CACHE: &[&str] = &["group", "resource"];
    pub const UPSTREAM_WATCHES: &[&str] = &["group", "resource"];
    pub const REFLECTOR_LISTS: &[&str] = &["group", "resource"];
    pub const REFLECTOR_RELISTS: &[&str] = &["group", "resource", "reason"];
    pub const REFLECTOR_RESTARTS: &[&str] = &["group", "resource", "reason"];
    /// result: fresh (served at once), waited (after the cache's own stream brought the
    /// probe's RV), resynced (after a re-sync), forwarded (freshness not established).
    pub const CONSISTENT_READS: &[&str] = &["group", "resource", "result"];
    /// result: ok, error.
    pub const CONSISTENCY_PROBES: &[&str] = &["group", "resource", "result"];
    /// result: success (the same keys at the same resourceVersions), failure (they
    /// differ, or the upstream went back), error (no comparison was possible): the values
    /// of kube-apiserver's `storage_consistency_checks_total`.
    pub const CACHE_CONSISTENCY_CHECKS: &[&str] = &["group", "resource", "result"];
    /// `CACHE_SNAPSHOTS`, `CACHE_SNAPSHOT_BYTES`.
    pub const SNAPSHOTS: &[&str] = &["group", "resource"];
    /// result: retained (served from a kept snapshot), rebuilt (from the history), missed
    /// (not in the window: forwarded), evicted (dropped early by a bound).
    pub const SNAPSHOT_READS: &[&str] = &["group", "resource", "result"];
    /// `WATCHERS`, `WATCHERS_LAGGING`, the delivered/bytes/bookmark counters, the dispatch
    /// histogram and the history gauges.
    pub const FANOUT: &[&str] = &["group", "resource"];
    /// reason: slow (fell past the history window), timeout (timeoutSeconds reached),
    /// client_gone (the client disconnected), relist (the cache could not continue the
    /// stream after an upstream relist), shutdown.
    pub const TERMINATED_WATCHERS: &[&str] = &["group", "resource", "reason"];
}

/// Buckets of the request histograms (downstream and upstream): kube-apiserver's
/// `apiserver_request_duration_seconds` buckets, trimmed, so that dashboards built for one
/// read the other, with four below its 5 ms floor: a get or a small list served from the
/// cache takes tens to hundreds of microseconds, and without them every cache answer
/// would land in the first bucket.
pub const DURATION_BUCKETS: &[f64] = &[
    0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.5,
    2.0, 3.0, 5.0, 10.0, 30.0, 60.0,
];

/// Buckets of the dispatch histogram. Dispatching one event takes about 5 µs when an index
/// finds its one watcher and about 10 ms when 10,000 watchers all match
/// (docs/benchmarks.md): microseconds to tens of milliseconds, then up to the 1 s the
/// `WatchgateDispatchSlow` alert fires at.
pub const DISPATCH_BUCKETS: &[f64] = &[
    0.000_002, 0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001,
    0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process collector (`process_resident_memory_bytes`, `process_cpu_seconds_total`,
/// `process_open_fds`, …, the names every Prometheus client library exports), read from
/// /proc at scrape time.
static PROCESS: OnceLock<metrics_process::Collector> = OnceLock::new();

/// Installs the process-global recorder once; later calls return the same handle. `None`
/// when another recorder was installed first (an embedding program's): watchgate then
/// records into that one and has nothing to render itself.
pub fn install() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            // A `Full` matcher takes precedence over a `Suffix` one (the exporter sorts its
            // overrides by matcher kind); the suffix catches any later `_seconds` histogram.
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), DURATION_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(WATCH_DISPATCH_DURATION.into()),
                        DISPATCH_BUCKETS,
                    )
                })
                .expect("non-empty buckets")
                .build_recorder();
            let handle = recorder.handle();
            match ::metrics::set_global_recorder(recorder) {
                Ok(()) => {
                    describe();
                    PROCESS
                        .get_or_init(metrics_process::Collector::default)
                        .describe();
                    Some(handle)
                }
                Err(_) => {
                    tracing::warn!("a metrics recorder is already installed; /metrics is empty");
                    None
                }
            }
        })
        .as_ref()
}

fn describe() {
    describe_fanout();
    describe_counter!(
        FORWARDED_TOTAL,
        "Requests sent to the upstream instead of being answered by the cache or the fan-out, by reason (docs/operations.md, \"Why a request was forwarded\")."
    );
    describe_counter!(
        UPSTREAM_RESETS_TOTAL,
        "Times the upstream's resourceVersions went back (a restored or replaced cluster) and every cache was dropped and rebuilt, its watches ended with 410."
    );
    counter!(UPSTREAM_RESETS_TOTAL).absolute(0);
    describe_counter!(
        REQUESTS_TOTAL,
        "Requests served, by verb, group, resource, scope, HTTP code and source (cache, upstream, or gateway for a Status it made itself). Group and resource are empty until the resource has had a 2xx answer."
    );
    describe_histogram!(
        REQUEST_DURATION,
        Unit::Seconds,
        "Time to serve a non-long-running request, until its response body has been sent, by verb, group, resource, scope, HTTP code and source."
    );
    describe_gauge!(
        REQUESTS_IN_FLIGHT,
        "Non-long-running requests being served now."
    );
    describe_gauge!(
        LONG_RUNNING,
        "Long-running requests (watches, logs, exec, attach, port-forward, proxy) open now, by group and resource."
    );
    describe_counter!(
        UPSTREAM_REQUESTS_TOTAL,
        "Requests sent to the upstream apiserver (forwarded and the reflectors' own), by HTTP code; code=\"error\" when no response came."
    );
    describe_histogram!(
        UPSTREAM_REQUEST_DURATION,
        Unit::Seconds,
        "Time until the upstream's response headers arrived."
    );
    describe_gauge!(
        UPSTREAM_WATCHES,
        "Upstream watch streams open, per resource: 1 while its reflector's one watch (or watch-list) stream is open, however many downstream watchers it serves; 0 while it lists, backs off or cannot reach the upstream."
    );
    describe_gauge!(
        UPSTREAM_UP,
        "1 when the upstream's last response (any HTTP code) arrived, 0 when the last request got none."
    );
    describe_gauge!(
        UPSTREAM_CONNECTIONS,
        "Upstream connections open, by class (short or long_running: the two never share a connection) and endpoint. Bounded in all by --upstream-max-connections."
    );
    describe_gauge!(
        UPSTREAM_STREAMS,
        "Upstream requests in flight (HTTP/2 streams, or HTTP/1.1 connections in use), by class and endpoint, until their response body ends."
    );
    describe_counter!(
        UPSTREAM_REFUSALS_TOTAL,
        "Requests answered 429 because no upstream connection of their class had room and --upstream-max-connections allowed no other, by class."
    );
    describe_gauge!(
        UPSTREAM_ENDPOINT_HEALTHY,
        "With several --server endpoints: 1 while an endpoint takes requests, 0 while it is left out (a failed connection or /readyz check)."
    );
    describe_counter!(
        UPSTREAM_EJECTIONS_TOTAL,
        "With several --server endpoints: times an endpoint was left out after a failed connection or /readyz check."
    );
    describe_gauge!(CACHE_OBJECTS, "Objects in a resource's cache.");
    describe_gauge!(
        CACHE_BYTES,
        Unit::Bytes,
        "Bytes of the objects' JSON in a resource's cache (the memory they take is about 1.2x this)."
    );
    describe_gauge!(
        CACHE_SYNC_DURATION,
        Unit::Seconds,
        "How long a resource's last full list took, from its first request to the cache being replaced (absent until the first list completes)."
    );
    describe_gauge!(
        CACHE_RESOURCE_VERSION,
        "The resourceVersion a resource's cache is at."
    );
    describe_gauge!(
        CACHE_SYNCED,
        "1 once a resource's cache completed its first list."
    );
    describe_counter!(
        CACHE_EVENTS_TOTAL,
        "Watch events a resource's reflector applied to the cache."
    );
    describe_gauge!(
        CACHE_BUDGET_USED,
        Unit::Bytes,
        "What a resource's cache holds as the byte budget counts it (objects' JSON, parsed headers, map entries)."
    );
    describe_gauge!(
        CACHE_BUDGET_LIMIT,
        Unit::Bytes,
        "The byte budget: scope=total is --cache-max-bytes, scope=resource --cache-max-resource-bytes (0: no limit)."
    );
    describe_gauge!(
        CACHE_OVER_BUDGET,
        "1 while a resource is not cached because it did not fit the byte budget (its requests are forwarded), 0 while it is cached."
    );
    describe_counter!(
        CACHE_DROPPED_TOTAL,
        "Times a resource was not cached, or stopped being cached, for its size, by reason: resource_budget or total_budget."
    );
    describe_gauge!(
        CACHE_PROTOBUF_UNAVAILABLE,
        "1 once an object of a cached built-in type could not be encoded in protobuf (a field newer than watchgate's schema): the type's protobuf requests are forwarded."
    );
    describe_gauge!(
        CACHE_DERIVED_BYTES,
        "Bytes of representations built on demand from cached objects' JSON and kept with them (protobuf, metadata_protobuf, metadata_json), by representation; outside the cache byte budget, freed with the objects."
    );
    describe_counter!(
        REFLECTOR_LISTS_TOTAL,
        "Upstream lists a reflector made (the first one and every relist)."
    );
    describe_counter!(
        REFLECTOR_RELISTS_TOTAL,
        "Relists by reason: expired (the watch's resourceVersion was too old, 410 Gone), consistent_read (a consistent read needed a state newer than the stream had brought)."
    );
    describe_counter!(
        CONSISTENT_READS_TOTAL,
        "Reads with no resourceVersion (consistent reads) by result: fresh (the cache was at the upstream's RV), waited (its own stream brought it), resynced (after a re-sync), forwarded (freshness not established in time)."
    );
    describe_counter!(
        CONSISTENCY_PROBES_TOTAL,
        "limit=1 lists sent upstream to learn its current resourceVersion for consistent reads (shared by every read that arrived before it was sent), by result."
    );
    describe_counter!(
        CACHE_CONSISTENCY_CHECKS_TOTAL,
        "Comparisons of a cache with the upstream at one resourceVersion (--cache-consistency-check-interval, or an operator's POST /cache/consistency-check), by result: success, failure (they differed: the resource is re-synced; or the upstream went back), error (no comparison was possible)."
    );
    describe_gauge!(
        CACHE_SNAPSHOTS,
        "Past states of a resource kept for continue tokens and Exact lists."
    );
    describe_gauge!(
        CACHE_SNAPSHOT_BYTES,
        Unit::Bytes,
        "Estimated bytes the kept snapshots hold that the current state does not (tree nodes; their objects are held by the watch history)."
    );
    describe_counter!(
        CACHE_SNAPSHOT_READS_TOTAL,
        "Continuations and Exact lists by result: retained (a kept snapshot), rebuilt (from the watch history), missed (outside the window: forwarded), evicted (snapshots dropped early by a bound)."
    );
    describe_counter!(
        REFLECTOR_RESTARTS_TOTAL,
        "Watch restarts by reason: stream_end (rewatch from the last RV), error (list or watch failed; backoff) and upstream_behind (an apiserver answered Too large resource version, or a state older than the cache's: retried, preferring another --server; never a relist)."
    );
    describe_counter!(
        REFLECTOR_MALFORMED_TOTAL,
        "Objects or events from the upstream that could not be decoded."
    );
    describe_counter!(
        REFLECTOR_PROGRESS_WATCHES_TOTAL,
        "Short upstream watches opened for their pre-timeout bookmark, to prove a quiet resource's cache fresh for consistent reads (docs/consistency.md)."
    );
    describe_counter!(
        REFLECTOR_BACKFILLS_TOTAL,
        "First syncs from the cache state file's resourceVersion, by result: resumed (the state at it installed, the watch resumed from it), fell_back (the upstream no longer had it, or the read failed: an ordinary sync followed) or other_cluster (the upstream's kube-system uid is not the one the file names: not tried, an ordinary sync followed) (docs/cache.md)."
    );
}

/// Counts one forwarded request under its reason (`cache::forward`'s label).
pub fn forwarded(reason: &'static str) {
    counter!(FORWARDED_TOTAL, "reason" => reason).increment(1);
}

/// Creates every forward reason's series at zero, so that a rate over it is defined from
/// the start.
pub fn forward_reasons(reasons: impl IntoIterator<Item = &'static str>) {
    for reason in reasons {
        counter!(FORWARDED_TOTAL, "reason" => reason).absolute(0);
    }
}

/// Renders the Prometheus text exposition. Empty when the recorder could not be
/// installed. The caches' gauges are copied in first by whoever holds them
/// (`cache::export::refresh_metrics`): this module only names and renders.
pub fn render() -> String {
    let Some(handle) = install() else {
        return String::new();
    };
    if let Some(process) = PROCESS.get() {
        process.collect();
    }
    handle.render()
}

fn describe_fanout() {
    describe_gauge!(
        WATCHERS,
        "Downstream watches served from the cache, open now."
    );
    describe_gauge!(
        WATCHERS_LAGGING,
        "Of those, the ones reading the event history at their own pace after their queue filled."
    );
    describe_counter!(
        WATCH_EVENTS_DELIVERED_TOTAL,
        "Events handed to downstream watchers (one per watcher per event)."
    );
    describe_counter!(
        WATCH_EVENTS_WRITTEN_DIRECTLY_TOTAL,
        "Of the events delivered, those the fan-out wrote straight to an idle HTTP/1.1 watch connection (the express lane)."
    );
    describe_counter!(
        WATCH_BYTES_WRITTEN_TOTAL,
        Unit::Bytes,
        "Bytes of watch streams handed to the connections."
    );
    describe_counter!(
        WATCH_BOOKMARKS_TOTAL,
        "BOOKMARK events sent to downstream watchers."
    );
    describe_counter!(
        WATCH_BOOKMARKS_WRITTEN_DIRECTLY_TOTAL,
        "Of the bookmarks sent, the periodic ones the bookmark tick wrote straight to an idle HTTP/1.1 watch connection (the express lane)."
    );
    describe_counter!(
        TERMINATED_WATCHERS_TOTAL,
        "Downstream watches ended by watchgate or their client, by reason: slow, timeout, client_gone, relist, shutdown."
    );
    describe_histogram!(
        WATCH_DISPATCH_DURATION,
        Unit::Seconds,
        "Time to append one upstream event to the history and queue it for every live watcher it concerns."
    );
    describe_gauge!(
        WATCH_HISTORY_EVENTS,
        "Events in a resource's watch history."
    );
    describe_gauge!(
        WATCH_HISTORY_BYTES,
        Unit::Bytes,
        "Estimated bytes held by a resource's watch history."
    );
    describe_gauge!(
        WATCH_HISTORY_OLDEST_AGE,
        Unit::Seconds,
        "Age of the oldest event in a resource's watch history."
    );
}

//! The fan-out's counters: atomics on the hot path, exported at scrape time (see
//! `metrics::refresh_fanout_metrics`), so a delivery never touches the metrics registry.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Why a downstream watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// It fell behind past what the history still holds.
    Slow,
    /// Its timeoutSeconds (or the randomised default) passed.
    Timeout,
    /// The client went away.
    ClientGone,
    /// An upstream relist could not be turned into ordinary events.
    Relist,
    /// The gateway is shutting down.
    Shutdown,
    /// The upstream's resourceVersions went back (a restored or replaced cluster): the
    /// cache was dropped, and the stream ended with an ERROR 410 so that its client relists.
    UpstreamReset,
    /// A consistency check found the cache different from the upstream, and the re-sync's
    /// difference could not be sent as ordinary events (a change the stream lost lies
    /// before what the client has seen): the stream ended with an ERROR 410 so that its
    /// client relists (`cache::consistency`).
    Inconsistent,
}

impl EndReason {
    pub const ALL: [EndReason; 7] = [
        EndReason::Slow,
        EndReason::Timeout,
        EndReason::ClientGone,
        EndReason::Relist,
        EndReason::Shutdown,
        EndReason::UpstreamReset,
        EndReason::Inconsistent,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Slow => "slow",
            EndReason::Timeout => "timeout",
            EndReason::ClientGone => "client_gone",
            EndReason::Relist => "relist",
            EndReason::Shutdown => "shutdown",
            EndReason::UpstreamReset => "upstream_reset",
            EndReason::Inconsistent => "inconsistent",
        }
    }
}

#[derive(Debug, Default)]
pub struct FanoutStats {
    /// Downstream watches open now.
    pub watchers: AtomicI64,
    /// Of those, the ones reading the history at their own pace.
    pub lagging: AtomicI64,
    pub delivered: AtomicU64,
    /// Of `delivered`, the events the dispatch wrote straight to an idle HTTP/1.1
    /// connection (the express lane, `crate::lane`).
    pub written_directly: AtomicU64,
    pub bytes: AtomicU64,
    pub bookmarks: AtomicU64,
    /// Of `bookmarks`, the periodic ones the hub's tick wrote straight to an idle
    /// HTTP/1.1 connection (`watch::bookmarks`).
    pub bookmarks_written_directly: AtomicU64,
    terminated: [AtomicU64; EndReason::ALL.len()],
}

impl FanoutStats {
    pub fn terminated(&self, reason: EndReason) -> u64 {
        self.terminated[reason as usize].load(Ordering::Relaxed)
    }

    pub fn count_end(&self, reason: EndReason) {
        self.terminated[reason as usize].fetch_add(1, Ordering::Relaxed);
    }
}

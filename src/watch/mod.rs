//! Watch fan-out: downstream watches served from the cache's event history, one upstream
//! watch per resource type however many clients watch. See docs/watch.md.

use std::time::Duration;

pub mod body;
pub mod bookmarks;
pub mod encoding;
pub mod event;
pub mod filter;
pub mod hub;
pub mod index;
pub mod queue;
pub mod relist;
pub mod schedule;
pub mod stats;

/// Tuning of the fan-out, per resource type.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Events younger than this stay in the history, so a client that reconnects after a
    /// blip resumes from its last resourceVersion instead of relisting. kube-apiserver
    /// keeps about 75 s; the default here is 5 minutes.
    pub history_window: Duration,
    /// The history's byte budget: an upper bound on what its events keep alive (both
    /// states of each change and every wire encoding built for it; see docs/watch.md).
    /// The oldest events are dropped first when it is exceeded, even if younger than
    /// `history_window`.
    pub history_bytes: usize,
    /// How often an idle watcher that asked for bookmarks gets one (kube-apiserver: 1 min).
    pub bookmark_interval: Duration,
    /// A watcher that has sent no batch of its initial state for this long (its client
    /// stopped reading) gives its snapshot back and ends; zero: never. The server's
    /// `--write-stall-timeout` sets it, with the same bound on connections (docs/watch.md,
    /// "Slow watchers and memory").
    pub stall_timeout: Duration,
    /// Record `watchgate_watch_dispatch_duration_seconds` (off with the gateway's metrics,
    /// so that the metrics on/off benchmark compares against no instrumentation at all).
    pub record_dispatch: bool,
    /// What watchers get when the upstream forces a relist (`--watch-relist`).
    pub relist: RelistMode,
}

/// `--watch-relist`: what a resource's watchers get when its reflector relists (after a
/// 410, a malformed event or a list error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum RelistMode {
    // Plain comments, not doc comments, so that clap prints its possible values on one
    // line (the README's flag table); the flag's help explains both.
    // The relist's difference as ordinary events; streams go on (watch::relist).
    #[default]
    Diff,
    // Every watch of the resource ends, as kube-apiserver's cacher ends its watchers
    // when its reflector relists.
    End,
}

/// `--write-stall-timeout`'s default.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            history_window: Duration::from_secs(300),
            history_bytes: 256 * 1024 * 1024,
            bookmark_interval: Duration::from_secs(60),
            stall_timeout: DEFAULT_STALL_TIMEOUT,
            record_dispatch: true,
            relist: RelistMode::Diff,
        }
    }
}

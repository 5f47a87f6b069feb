//! Which state of the cache answers a read: the resourceVersion semantics of a get, list
//! or watch (api-concepts.md, "Semantics for get and list" and "for watch") mapped to a
//! snapshot, with read-your-writes applied (`cache::writes`). `None` means the cache
//! cannot give that state in time: the request is forwarded.

use std::sync::Arc;

use super::fresh::{ConsistentReads, Fresh, Scope};
use super::registry::{Registry, ResourceCache};
use super::serve::CATCH_UP_WAIT;
use super::store::Snapshot;

/// The state a read asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// `resourceVersion="0"`: any state ("Any", "Get State and Start at Any").
    Any,
    /// `resourceVersion=N`: a state at N or later ("Not older than").
    NotOlderThan(u64),
    /// `resourceVersion` unset: a state reflecting every write the upstream acknowledged
    /// before the request ("Most Recent", "Get State and Start at Most Recent";
    /// `cache::fresh`).
    Consistent,
    /// The state exactly at N: `resourceVersionMatch=Exact`, the legacy `RV=N&limit=M`,
    /// and continue tokens (their first page's RV; `cache::snapshots`).
    Exact(u64),
}

/// The snapshot that answers `read`, or `None` (forward the request).
pub async fn snapshot_for(
    registry: &Registry,
    cache: &ResourceCache,
    read: &Read,
    scope: Scope<'_>,
) -> Option<Arc<Snapshot>> {
    match read {
        Read::Any => at_least(registry, cache, 0).await,
        Read::NotOlderThan(n) => at_least(registry, cache, *n).await,
        Read::Consistent => consistent(registry, cache, scope).await.map(|f| f.snapshot),
        Read::Exact(n) => {
            // An RV the cache has not reached yet (the token of an upstream that is
            // ahead): the same short wait as for NotOlderThan.
            cache.store.wait_for(*n, CATCH_UP_WAIT).await?;
            let snap = cache.store.state_at(*n);
            if snap.is_none() {
                tracing::debug!(resource = %cache.info.resource, rv = n, "no state at that resourceVersion in the cache's window; forwarding");
            }
            snap
        }
    }
}

/// A state reflecting every write acknowledged upstream before now, or `None` when
/// `--consistent-reads=upstream` or freshness cannot be established in time.
pub async fn consistent(
    registry: &Registry,
    cache: &ResourceCache,
    scope: Scope<'_>,
) -> Option<Fresh> {
    if registry.consistent_reads() == ConsistentReads::Upstream {
        return None;
    }
    match cache.fresh.consistent_snapshot(scope).await {
        Ok(s) => Some(s),
        Err(why) => {
            tracing::debug!(resource = %cache.info.resource, "consistent read forwarded: {why}");
            None
        }
    }
}

/// A state at `n` or later that also holds every write acknowledged through the gateway
/// (read-your-writes), waiting up to [`CATCH_UP_WAIT`] for the cache's stream to bring it.
pub async fn at_least(registry: &Registry, cache: &ResourceCache, n: u64) -> Option<Arc<Snapshot>> {
    let floor = match registry
        .writes()
        .floor(&cache.info.group, &cache.info.resource, &cache.fresh)
        .await
    {
        Ok(f) => f,
        Err(why) => {
            tracing::debug!(resource = %cache.info.resource, "read forwarded: the fence of a write could not be established: {why}");
            return None;
        }
    };
    let needed = n.max(floor);
    let now = cache.store.snapshot();
    if now.resource_version >= needed {
        return Some(now);
    }
    cache.store.wait_for(needed, CATCH_UP_WAIT).await
}

//! Which state of the cache answers a read: the resourceVersion semantics of a get, list
//! or watch (api-concepts.md, "Semantics for get and list" and "for watch") mapped to a
//! snapshot, with read-your-writes applied (`cache::writes`). `None` means the cache
//! cannot give that state in time: the request is forwarded.

use std::sync::Arc;
use std::time::Duration;

use super::forward::Forward;
use super::fresh::{ConsistentRead, Fresh};
use super::registry::{Registry, ResourceCache};
use crate::model::snapshot::Snapshot;

/// How long a read asking for a resourceVersion newer than the cache waits for the cache's
/// own watch to bring it, before it is forwarded instead.
///
/// kube-apiserver's watch cache waits up to 3 s (`blockTimeout`) but, while it waits, asks
/// etcd for a progress notification, so an RV that belongs to another resource's write (RVs
/// are global) is confirmed at once. An apiserver offers its clients no such request: after
/// this short wait the cache cannot tell "my resource has not changed since" from "my watch
/// is behind", so it lets the upstream answer. A client that wrote through watchgate and
/// reads its own write finds it here within milliseconds; an RV that never comes gets the
/// upstream's own 504 Too large resource version after its 3 s.
pub const CATCH_UP_WAIT: Duration = Duration::from_millis(250);

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

/// The snapshot that answers `read`, or why the request is forwarded. `how` describes the
/// request for a consistent read's proof.
pub async fn snapshot_for(
    registry: &Registry,
    cache: &ResourceCache,
    read: &Read,
    how: ConsistentRead,
) -> Result<Arc<Snapshot>, Forward> {
    match read {
        Read::Any => at_least(registry, cache, 0).await,
        Read::NotOlderThan(n) => at_least(registry, cache, *n).await,
        Read::Consistent => consistent(cache, how).await.map(|f| f.snapshot),
        Read::Exact(n) => {
            // An RV the cache has not reached yet (the token of an upstream that is
            // ahead): the same short wait as for NotOlderThan.
            cache
                .store
                .wait_for(*n, CATCH_UP_WAIT)
                .await
                .ok_or(Forward::Behind)?;
            cache.store.state_at(*n).ok_or(Forward::PastState)
        }
    }
}

/// A state reflecting every write acknowledged upstream before the request arrived, or
/// why there is none: freshness not established in time. (`--consistent-reads=upstream`
/// is the routing decision's: such reads never get here, `serve::route`.)
pub async fn consistent(cache: &ResourceCache, how: ConsistentRead) -> Result<Fresh, Forward> {
    cache.fresh.consistent_snapshot(how).await.map_err(|why| {
        tracing::debug!(resource = %cache.info.resource, "consistent read forwarded: {why}");
        why.reason()
    })
}

/// A state at `n` or later that also holds every write acknowledged through the gateway
/// (read-your-writes), waiting up to [`CATCH_UP_WAIT`] for the cache's stream to bring it.
pub async fn at_least(
    registry: &Registry,
    cache: &ResourceCache,
    n: u64,
) -> Result<Arc<Snapshot>, Forward> {
    let floor = match registry
        .writes()
        .floor(&cache.info.group, &cache.info.resource, &cache.fresh)
        .await
    {
        Ok(f) => f,
        Err(why) => {
            tracing::debug!(resource = %cache.info.resource, "read forwarded: the fence of a write could not be established: {why}");
            return Err(why.reason());
        }
    };
    let needed = n.max(floor);
    let now = cache.store.snapshot();
    if now.resource_version >= needed {
        return Ok(now);
    }
    cache
        .store
        .wait_for(needed, CATCH_UP_WAIT)
        .await
        .ok_or(Forward::Behind)
}

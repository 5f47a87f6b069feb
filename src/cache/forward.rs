//! Why a request is forwarded: every request the cache and the fan-out do not answer
//! leaves with one [`Forward`] reason, logged at debug level and counted in
//! `watchgate_forwarded_requests_total{reason}` (a bounded label), so that an operator
//! sees at a glance which traffic still reaches the apiserver and why (docs/operations.md,
//! "Why a request was forwarded").

/// Why a request goes to the upstream instead of the cache or the fan-out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Forward {
    /// Not a get, list or watch of a resource: writes, discovery, `/version`, other
    /// methods, subresources, upgrades, paths only the upstream interprets.
    #[error("not a read the cache serves")]
    NotARead,
    /// The gateway runs without caches (`--cache-disabled` or no registry).
    #[error("caching is off")]
    NoCache,
    /// Security is on and the request was not authorized by the `authz` layer (the
    /// upstream gives its own answer).
    #[error("not authorized for the cache")]
    NotAuthorized,
    /// A pretty-printed answer (`pretty`, curl's User-Agent) is the upstream's to give.
    #[error("a pretty-printed answer")]
    Pretty,
    /// Options the upstream refuses (its Status is the reference), or an option
    /// combination only it interprets (another spelling of zero with a limit, a continue
    /// token with a resourceVersion, …).
    #[error("options only the upstream interprets")]
    Options,
    /// `--cache-exclude`.
    #[error("the resource is excluded from caching")]
    Excluded,
    /// The upstream does not serve the resource as a listable, watchable type, or its
    /// discovery failed.
    #[error("the resource is not cacheable")]
    NotCacheable,
    /// Dropped for its size (the byte budget).
    #[error("the resource does not fit the cache's byte budget")]
    OverBudget,
    /// The cache of the resource did not sync within the bound (`--cache-sync-wait`), or
    /// its reflector is failing.
    #[error("the cache has not synced")]
    NotSynced,
    /// A path with no route for the type (a cluster-scoped type under a namespace, a
    /// namespaced one by name outside one): the upstream's 404.
    #[error("a path with no route for the type")]
    NoRoute,
    /// The Accept header asks for an answer the cache does not produce (YAML, Table
    /// without the type's printer, protobuf of a type it cannot encode, …).
    #[error("a representation the cache does not produce")]
    Representation,
    /// A field selector on a field the cache does not index.
    #[error("a field selector the cache does not index")]
    FieldSelector,
    /// `--consistent-reads=upstream`.
    #[error("consistent reads go upstream (--consistent-reads=upstream)")]
    ConsistentUpstream,
    /// A consistent read whose freshness could not be proven in time (or whose proof would
    /// cost more than forwarding it: a lone get on a quiet resource).
    #[error("the cache could not be proven fresh in time")]
    NotFresh,
    /// A lone consistent read of a resource the last probe found behind, with no event
    /// since: forwarding it is cheaper than a probe and a proof (docs/consistency.md).
    #[error("a lone consistent read of a cache known to be behind")]
    LoneRead,
    /// The probe of the upstream's current resourceVersion failed.
    #[error("the upstream's resourceVersion could not be read")]
    ProbeFailed,
    /// A consistent read whose probe answered a resourceVersion below one the cache had
    /// already seen: the upstream went back (etcd restored, another cluster behind the
    /// same address). The cache is not the upstream's any more.
    #[error("the upstream's resourceVersion went back below the cache's")]
    UpstreamWentBack,
    /// A consistent read of a resource whose last consistency check found the cache
    /// different from the upstream, before the re-sync that repairs it is in
    /// (`cache::consistency`).
    #[error("the consistency check found the cache different from the upstream")]
    Inconsistent,
    /// A resourceVersion (or a write's fence) the cache did not reach in time.
    #[error("the cache did not reach the resourceVersion in time")]
    Behind,
    /// An Exact list or continuation whose state the cache no longer (or never) had.
    #[error("no state at that resourceVersion in the cache's window")]
    PastState,
    /// A continue token the cache cannot resume (bad, or etcd3's negative RV).
    #[error("a continue token the cache cannot resume")]
    ContinueToken,
}

impl Forward {
    /// Every reason, for the metric's zero series and the tests.
    pub const ALL: [Forward; 21] = [
        Forward::NotARead,
        Forward::NoCache,
        Forward::NotAuthorized,
        Forward::Pretty,
        Forward::Options,
        Forward::Excluded,
        Forward::NotCacheable,
        Forward::OverBudget,
        Forward::NotSynced,
        Forward::NoRoute,
        Forward::Representation,
        Forward::FieldSelector,
        Forward::ConsistentUpstream,
        Forward::NotFresh,
        Forward::LoneRead,
        Forward::ProbeFailed,
        Forward::UpstreamWentBack,
        Forward::Inconsistent,
        Forward::Behind,
        Forward::PastState,
        Forward::ContinueToken,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Forward::NotARead => "not_a_read",
            Forward::NoCache => "no_cache",
            Forward::NotAuthorized => "not_authorized",
            Forward::Pretty => "pretty",
            Forward::Options => "options",
            Forward::Excluded => "excluded",
            Forward::NotCacheable => "not_cacheable",
            Forward::OverBudget => "over_budget",
            Forward::NotSynced => "not_synced",
            Forward::NoRoute => "no_route",
            Forward::Representation => "representation",
            Forward::FieldSelector => "field_selector",
            Forward::ConsistentUpstream => "consistent_reads_upstream",
            Forward::NotFresh => "not_fresh",
            Forward::LoneRead => "lone_read",
            Forward::ProbeFailed => "probe_failed",
            Forward::UpstreamWentBack => "upstream_went_back",
            Forward::Inconsistent => "inconsistent",
            Forward::Behind => "behind",
            Forward::PastState => "past_state",
            Forward::ContinueToken => "continue_token",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct_and_cover_every_reason() {
        let labels: std::collections::BTreeSet<_> =
            Forward::ALL.iter().map(|f| f.label()).collect();
        assert_eq!(labels.len(), Forward::ALL.len());
    }
}

//! The routing decision: from the parsed request and what the registry knows of its
//! resource to [`Route::Read`] (a get or list the cache answers), [`Route::Watch`] (a watch
//! the fan-out serves) or [`Route::Forward`] with the reason it goes upstream. It is a
//! pure function, so that every row of docs/cache.md's table is a unit test below; the
//! handlers (`serve::read`, `serve::watch`) then only wait for the state the route names
//! (the cache's sync, a proof of freshness, a resourceVersion) and answer, or forward
//! with the reason that wait gave.
//!
//! After linkerd2-proxy's shape: recognise the request once, then dispatch to a typed
//! target; the reason a request is not answered here is classified once, where it is
//! decided.

use crate::cache::forward::Forward;
use crate::cache::fresh::ConsistentReads;
use crate::cache::read_at::Read;
use crate::cache::registry::Lookup;
use crate::codec::continue_token::ContinueToken;
use crate::model::resource::{is_builtin_group, ResourceInfo};
use crate::negotiate::{Conversion, Encoding, Endpoint, MetaVersion, Negotiated};
use crate::request::{
    ApiPath, ListOptions, Parsed, ResourcePath, ResourceVersion as RV, RvMatch, Verb,
};
use crate::selector::field::Term;
use crate::table::TableOptions;
use crate::watch::filter::NAME;
use http::Method;

/// What the registry knows that the decision reads: a plain value, so that the decision
/// is a function of the request and this alone.
#[derive(Debug, Clone, Copy)]
pub struct Known<'a> {
    /// Security is on and the `authz` layer did not authorize the request for the cache.
    pub authorized: bool,
    /// `--consistent-reads`.
    pub consistent_reads: ConsistentReads,
    /// The resource's standing in the registry.
    pub resource: Standing<'a>,
}

/// A resource's standing in the registry, as far as routing is concerned.
#[derive(Debug, Clone, Copy)]
pub enum Standing<'a> {
    /// `--cache-exclude`.
    Excluded,
    /// Discovery found it not listable and watchable.
    NotCacheable,
    /// Dropped for its size, and not yet due for another try.
    OverBudget,
    /// No cache has been discovered yet (or it is being started): the handler starts it,
    /// joins its sync, and checks the type's facts then ([`admit`]).
    NotYet,
    /// The type as discovery described it.
    Discovered(&'a ResourceInfo),
}

impl<'a> Standing<'a> {
    /// The standing of a resource the registry looked up.
    pub fn of(lookup: &'a Lookup) -> Self {
        match lookup {
            Lookup::Excluded => Standing::Excluded,
            Lookup::NotCacheable => Standing::NotCacheable,
            Lookup::OverBudget => Standing::OverBudget,
            Lookup::NotYet => Standing::NotYet,
            Lookup::Ready(c) => Standing::Discovered(&c.info),
        }
    }
}

/// Where a request is answered.
#[derive(Debug)]
pub enum Route<'a> {
    Read(ReadTarget<'a>),
    Watch(WatchTarget<'a>),
    Forward(Forward),
}

/// The resource and the objects a cache-answered request is about.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
    /// The request's options (a watch's name in the path is a `metadata.name` term here).
    pub opts: ListOptions,
}

/// A get or list the cache answers.
#[derive(Debug, Clone)]
pub struct ReadTarget<'a> {
    pub target: Target<'a>,
    /// The state it needs.
    pub read: Read,
    /// The page size of a limited list (`None`: the whole list).
    pub limit: Option<usize>,
    /// A continuation: the page starts after this key (the token's).
    pub after: Option<Box<str>>,
    /// The answer the Accept header negotiates to, for this type's endpoint.
    pub answer: Answer,
}

/// A watch the fan-out serves.
#[derive(Debug, Clone)]
pub struct WatchTarget<'a> {
    pub target: Target<'a>,
    /// Where its events start.
    pub from: WatchFrom,
}

/// Where a watch's events start (api-concepts, "Semantics for watch"; kube-apiserver's
/// cacher where the documents are silent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchFrom {
    /// `resourceVersion` unset: "Get State and Start at Most Recent", a consistent read.
    /// `sendInitialEvents=true`: the state, then the `initial-events-end` bookmark;
    /// `false`: the changes after the upstream's current resourceVersion; absent (a legacy
    /// `/watch/` path): the state without the bookmark.
    Consistent { send_initial_events: Option<bool> },
    /// `sendInitialEvents=true` with `resourceVersion=N` (NotOlderThan): the state at N or
    /// later, then the bookmark.
    StateNotOlderThan(u64),
    /// `resourceVersion="0"`, `sendInitialEvents=false`: the changes from the cache's head.
    Head,
    /// `resourceVersion="0"`: any state as ADDED events, then the changes.
    AnyState,
    /// `resourceVersion=N`: the changes after N, from the history (410 when older).
    After(u64),
}

/// The answers the cache produces, as the Accept header negotiates for the type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Json,
    Metadata(MetaVersion),
    Table(MetaVersion),
    Protobuf,
    MetadataProtobuf(MetaVersion),
}

/// Decides where `req` is answered. A resource whose cache is not discovered yet
/// ([`Standing::NotYet`]) is routed to the cache on the request alone; its handler checks
/// the type's facts ([`admit`]) once the cache is there.
pub fn decide<'a>(req: &'a Parsed, known: &Known<'_>) -> Route<'a> {
    match recognise(req, known) {
        Ok(route) => route,
        Err(why) => Route::Forward(why),
    }
}

fn recognise<'a>(req: &'a Parsed, known: &Known<'_>) -> Result<Route<'a>, Forward> {
    let verb = req.api.verb;
    if req.api.method != Method::GET || !matches!(verb, Verb::Get | Verb::List | Verb::Watch) {
        return Err(Forward::NotARead);
    }
    let ApiPath::Resource(rp) = &req.api.path else {
        return Err(Forward::NotARead);
    };
    // A path only the upstream can interpret (`crate::apipath`) is its to answer. A
    // legacy `/watch/` path is a watch, whatever verb its query suggests.
    if !rp.canonical
        || rp.subresource.is_some()
        || !rp.extra.is_empty()
        || (rp.legacy_watch && verb != Verb::Watch)
    {
        return Err(Forward::NotARead);
    }
    if !known.authorized {
        return Err(Forward::NotAuthorized);
    }
    // A pretty-printed answer is the upstream's to give: `pretty` in the query, or (for
    // gets and lists) a curl, Wget or browser User-Agent; a watch's stream is never
    // indented, so for it only the negotiation below counts.
    if req.api.query_get("pretty").is_some() || (verb != Verb::Watch && req.pretty) {
        return Err(Forward::Pretty);
    }
    let opts = req.valid_options().ok_or(Forward::Options)?;
    let target = |opts: ListOptions| Target {
        group: &rp.group,
        version: &rp.version,
        resource: &rp.resource,
        namespace: rp.namespace.as_deref(),
        name: rp.name.as_deref(),
        opts,
    };
    // The type's endpoint follows from its group alone, so an answer the cache never
    // produces (YAML, a refusal) is forwarded before any wait for a cold cache.
    let endpoint = if is_builtin_group(&rp.group) {
        Endpoint::BUILTIN
    } else {
        Endpoint::CUSTOM
    };
    let route = if verb == Verb::Watch {
        let (opts, from) = watch_from(rp, opts)?;
        // The stream's framing must agree with the object's encoding; a watch asked as a
        // list (`PartialObjectMetadataList`) is the upstream's refusal to give.
        let n = match (
            req.accept.negotiate(endpoint),
            req.accept.negotiate_stream(endpoint),
        ) {
            (Ok(n), Ok(stream)) if stream.encoding == n.encoding && !n.pretty => n,
            _ => return Err(Forward::Representation),
        };
        match n.conversion {
            Some(Conversion::PartialObjectMetadataList(_)) => return Err(Forward::Representation),
            Some(Conversion::Table(v)) => table_options(req, v)?,
            _ => {}
        }
        Route::Watch(WatchTarget {
            target: target(opts),
            from,
        })
    } else {
        let (read, limit, after) = read_of(rp, opts, verb)?;
        let answer = req
            .accept
            .negotiate(endpoint)
            .ok()
            .and_then(|n| answer(n, verb))
            .ok_or(Forward::Representation)?;
        if let Answer::Table(v) = answer {
            table_options(req, v)?;
        }
        Route::Read(ReadTarget {
            target: target(opts.clone()),
            read,
            limit,
            after,
            answer,
        })
    };
    match known.resource {
        Standing::Excluded => return Err(Forward::Excluded),
        Standing::NotCacheable => return Err(Forward::NotCacheable),
        Standing::OverBudget => return Err(Forward::OverBudget),
        Standing::NotYet | Standing::Discovered(_) => {}
    }
    let consistent = match &route {
        Route::Read(r) => r.read == Read::Consistent,
        Route::Watch(w) => matches!(w.from, WatchFrom::Consistent { .. }),
        Route::Forward(_) => false,
    };
    if consistent && known.consistent_reads == ConsistentReads::Upstream {
        return Err(Forward::ConsistentUpstream);
    }
    if let Standing::Discovered(info) = known.resource {
        admit(target_of(&route), info)?;
    }
    Ok(route)
}

fn target_of<'r, 'a>(route: &'r Route<'a>) -> &'r Target<'a> {
    match route {
        Route::Read(r) => &r.target,
        Route::Watch(w) => &w.target,
        Route::Forward(_) => unreachable!("a forwarded request has no target"),
    }
}

/// The checks that need the type's facts (discovery): a path with no route for the type,
/// and a field selector on a field the cache does not index.
pub fn admit(target: &Target<'_>, info: &ResourceInfo) -> Result<(), Forward> {
    // A cluster-scoped type under a namespace path, or a namespaced one by name outside a
    // namespace (`/api/v1/pods/a`): the upstream's 404 to give (src/apipath.rs).
    // requestinfo.go puts a namespace's own name in `namespace` for
    // `/api/v1/namespaces/{name}`, which is not such a path.
    let own_namespace = target.group.is_empty() && target.resource == "namespaces";
    if (target.namespace.is_some() && !info.namespaced && !own_namespace)
        || (target.name.is_some() && target.namespace.is_none() && info.namespaced)
    {
        return Err(Forward::NoRoute);
    }
    if !fields_indexed(info, &target.opts) {
        return Err(Forward::FieldSelector);
    }
    Ok(())
}

/// Field selectors are answered from the fields parsed into each object; any other field
/// label goes upstream, which knows whether the type supports it. `metadata.namespace` is
/// a field of namespaced types only (`generic.ObjectMetaFieldsSet`): on nodes or
/// namespaces the apiserver refuses it with a 400 (found by tests/bad_input_properties.rs).
fn fields_indexed(info: &ResourceInfo, opts: &ListOptions) -> bool {
    opts.field_selector.terms.iter().all(|t| {
        t.field == NAME
            || (t.field == "metadata.namespace" && info.namespaced)
            || info.field_labels.iter().any(|(l, _)| *l == t.field)
    })
}

/// The state a read needs, its page size, and the key a continuation starts after.
type ReadOf = (Read, Option<usize>, Option<Box<str>>);

/// Which state a get or list needs, and which page size applies, if the cache may answer
/// it (the documents' "Semantics for get and list" table, as kube-apiserver's
/// `delegator.ShouldDelegateList`, its cacher with `ListFromCacheSnapshot` and
/// `computeListLimit` implement it).
fn read_of(rp: &ResourcePath, opts: &ListOptions, verb: Verb) -> Result<ReadOf, Forward> {
    if opts.watch || opts.send_initial_events.is_some() {
        return Err(Forward::Options);
    }
    let limit = opts
        .limit
        .filter(|_| verb == Verb::List)
        .map(|l| l as usize);
    if let Some(token) = &opts.continue_token {
        // "Continue Token, Exact" (RV unset, or "0": "treated as Continue Token, Exact");
        // any other RV is the upstream's 400.
        if verb != Verb::List || !matches!(opts.rv, RV::Unset | RV::Zero) {
            return Err(Forward::Options);
        }
        // The token names the state (its first page's RV) and where the page starts,
        // relative to the list's key prefix, in either of kube-apiserver's forms. A bad
        // token, or a negative RV (etcd3's "continue at the latest" after a compaction),
        // is the upstream's to answer.
        let prefix = rp
            .namespace
            .as_deref()
            .map(|ns| format!("{ns}/"))
            .unwrap_or_default();
        let t = ContinueToken::decode(token, &prefix).map_err(|_| Forward::ContinueToken)?;
        let rv = u64::try_from(t.rv)
            .ok()
            .filter(|rv| *rv > 0)
            .ok_or(Forward::ContinueToken)?;
        return Ok((Read::Exact(rv), limit, Some(t.start_after.into_boxed_str())));
    }
    let n = match &opts.rv {
        // Most Recent: a consistent read (`cache::fresh`), paged or not.
        RV::Unset => return Ok((Read::Consistent, limit, None)),
        // Not a number: the upstream's 400 to give.
        RV::Invalid(_) => return Err(Forward::Options),
        RV::Zero => 0,
        RV::Number(n) => *n,
    };
    let read = match (opts.rv_match, n) {
        // Exact at "0" is invalid (422, validation); another spelling of zero is the
        // upstream's to judge.
        (Some(RvMatch::Exact), 0) => return Err(Forward::Options),
        (Some(RvMatch::Exact), n) => (Read::Exact(n), limit),
        // RV="0": Any. kube-apiserver's cacher ignores `limit` here (`computeListLimit`)
        // and answers the whole list; so does the cache. computeListLimit compares the
        // string: another spelling of zero keeps its limit, which is the upstream's to
        // apply.
        (_, 0) if opts.rv == RV::Zero => (Read::Any, None),
        (_, 0) if limit.is_some() => return Err(Forward::Options),
        (_, 0) => (Read::Any, None),
        // NotOlderThan with a limit: the cacher serves the first page from its cache and
        // issues a continue token at the page's resourceVersion.
        (Some(RvMatch::NotOlderThan), n) => (Read::NotOlderThan(n), limit),
        // Legacy semantics: RV=N with a limit is an exact read.
        (None, n) if limit.is_some() => (Read::Exact(n), limit),
        (None, n) => (Read::NotOlderThan(n), None),
    };
    Ok((read.0, read.1, None))
}

/// A watch's options (its name in the path as a `metadata.name` term, as handlers/get.go
/// does) and where its events start.
fn watch_from(rp: &ResourcePath, opts: &ListOptions) -> Result<(ListOptions, WatchFrom), Forward> {
    let mut opts = opts.clone();
    if let Some(name) = &rp.name {
        match opts.field_selector.requires_exact(NAME) {
            _ if opts.field_selector.is_empty() => opts.field_selector.terms.push(Term {
                field: NAME.into(),
                equals: true,
                value: name.clone(),
            }),
            Some(n) if n == name => {}
            // A disagreement is the upstream's 400 to give.
            _ => return Err(Forward::Options),
        }
    }
    let rv = opts.rv.number().map_err(|_| Forward::Options)?;
    let from = match (opts.send_initial_events, &opts.rv) {
        (send_initial_events, RV::Unset) => WatchFrom::Consistent {
            send_initial_events,
        },
        (Some(true), _) => WatchFrom::StateNotOlderThan(rv),
        (Some(false), _) if rv == 0 => WatchFrom::Head,
        (None, _) if rv == 0 => WatchFrom::AnyState,
        _ => WatchFrom::After(rv),
    };
    Ok((opts, from))
}

/// A Table's options: a bad `includeObject` is the upstream's 400 to give.
fn table_options(req: &Parsed, v: MetaVersion) -> Result<(), Forward> {
    TableOptions::new(v, req.api.query_get("includeObject"))
        .map(drop)
        .map_err(|_| Forward::Representation)
}

/// Which negotiated answers the cache produces for a get or list. Pretty output, YAML,
/// protobuf Tables and the apiserver's 406 refusals (a list asking for
/// `PartialObjectMetadata`, a get for `PartialObjectMetadataList`) are the upstream's.
pub fn answer(n: Negotiated, verb: Verb) -> Option<Answer> {
    if n.pretty || n.encoding == Encoding::Yaml {
        return None;
    }
    let proto = n.encoding == Encoding::Protobuf;
    match (n.conversion, verb) {
        (None, _) if proto => Some(Answer::Protobuf),
        (None, _) => Some(Answer::Json),
        (Some(Conversion::PartialObjectMetadata(v)), Verb::Get)
        | (Some(Conversion::PartialObjectMetadataList(v)), Verb::List) => Some(if proto {
            Answer::MetadataProtobuf(v)
        } else {
            Answer::Metadata(v)
        }),
        (Some(Conversion::Table(v)), _) if !proto => Some(Answer::Table(v)),
        _ => None,
    }
}

/// The tables of docs/cache.md ("Which reads the cache answers", "Representations") and
/// docs/watch.md ("Which watches are served from the cache"), row by row, each as the
/// request that earns it. Rows whose outcome depends on a wait (a cold cache's sync, a
/// proof of freshness, a resourceVersion the cache has not reached) are routed to the
/// cache here and forwarded by their handler with the reason the wait gives; those are
/// tested through the gateway (tests/cache_cold.rs, tests/cache_consistent.rs,
/// tests/cache_reads.rs) and named below where a row has one.
#[cfg(test)]
mod tests {
    use super::*;
    use http::{header, HeaderMap, HeaderValue};

    const PROTOBUF: &str = "application/vnd.kubernetes.protobuf,application/json";
    const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    const META_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    const META_GET: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1";
    /// client-go's metadata informers: protobuf PartialObjectMetadataList first.
    const METADATA_INFORMER: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

    fn pods() -> ResourceInfo {
        ResourceInfo {
            group: String::new(),
            version: "v1".into(),
            resource: "pods".into(),
            kind: "Pod".into(),
            namespaced: true,
            field_labels: vec![("spec.nodeName", "spec.nodeName")],
        }
    }

    fn nodes() -> ResourceInfo {
        ResourceInfo {
            resource: "nodes".into(),
            kind: "Node".into(),
            namespaced: false,
            field_labels: vec![],
            ..pods()
        }
    }

    fn parsed(method: Method, target: &str, headers: &[(header::HeaderName, &str)]) -> Parsed {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        Parsed::new(&method, &target.parse().unwrap(), &map)
    }

    /// Where a GET of `target` goes, with `accept`, for a resource in `standing`.
    fn route_with(
        target: &str,
        accept: Option<&str>,
        standing: Standing<'_>,
        consistent_reads: ConsistentReads,
    ) -> String {
        let headers: Vec<_> = accept.map(|a| (header::ACCEPT, a)).into_iter().collect();
        let req = parsed(Method::GET, target, &headers);
        let known = Known {
            authorized: true,
            consistent_reads,
            resource: standing,
        };
        show(&decide(&req, &known))
    }

    fn route(target: &str) -> String {
        let info = pods();
        route_with(
            target,
            None,
            Standing::Discovered(&info),
            ConsistentReads::Cache,
        )
    }

    fn accept(target: &str, accept: &str) -> String {
        let info = pods();
        route_with(
            target,
            Some(accept),
            Standing::Discovered(&info),
            ConsistentReads::Cache,
        )
    }

    /// A route in a line, so that a table row is one `assert_eq!`.
    fn show(route: &Route<'_>) -> String {
        match route {
            Route::Forward(why) => format!("forward {}", why.label()),
            Route::Read(r) => {
                let mut s = format!("read {:?} {:?}", r.read, r.answer);
                if let Some(l) = r.limit {
                    s += &format!(" limit={l}");
                }
                if let Some(a) = &r.after {
                    s += &format!(" after={a}");
                }
                s
            }
            Route::Watch(w) => format!("watch {:?}", w.from),
        }
    }

    /// Every row of docs/cache.md's "served by" table, by its first cell, with one request
    /// that earns it and where that request goes. The test reads the table from the
    /// document: a row added there without a case here fails it, and so does a case whose
    /// row is gone. (The other tests below go through each rule's variants.)
    #[test]
    fn every_row_of_the_cache_table_has_a_request_that_earns_it() {
        let token = crate::codec::continue_token::ContinueToken {
            rv: 42,
            start_after: "a/p-2".into(),
        }
        .encode("a/", crate::codec::continue_token::KeyForm::Relative);
        let cont = format!("/api/v1/namespaces/a/pods?limit=5&continue={token}");
        let rows: Vec<(&str, &str, Option<&str>, bool, &str)> = vec![
            (
                "get/list `resourceVersion=0` (Any), with or without `limit`",
                "/api/v1/pods?resourceVersion=0&limit=5",
                None,
                true,
                "read Any Json",
            ),
            (
                "get/list `resourceVersion=N`, no `limit` (NotOlderThan)",
                "/api/v1/namespaces/a/pods/p?resourceVersion=7",
                None,
                true,
                "read NotOlderThan(7) Json",
            ),
            (
                "list `resourceVersion=N&resourceVersionMatch=NotOlderThan`, no `limit`",
                "/api/v1/pods?resourceVersion=7&resourceVersionMatch=NotOlderThan",
                None,
                true,
                "read NotOlderThan(7) Json",
            ),
            (
                "list `resourceVersion=N&resourceVersionMatch=NotOlderThan&limit=M`",
                "/api/v1/pods?resourceVersion=7&resourceVersionMatch=NotOlderThan&limit=5",
                None,
                true,
                "read NotOlderThan(7) Json limit=5",
            ),
            (
                "get/list `resourceVersion` unset (Most Recent, consistent read), with or without `limit`",
                "/api/v1/pods?limit=5",
                None,
                true,
                "read Consistent Json limit=5",
            ),
            (
                "list `resourceVersion=N&limit=M` (legacy Exact), `resourceVersionMatch=Exact`",
                "/api/v1/pods?resourceVersion=7&limit=5",
                None,
                true,
                "read Exact(7) Json limit=5",
            ),
            (
                "list with `continue`, RV unset or \"0\"",
                &cont,
                None,
                true,
                "read Exact(42) Json limit=5 after=a/p-2",
            ),
            (
                "watch",
                "/api/v1/pods?watch=1&resourceVersion=5",
                None,
                true,
                "watch After(5)",
            ),
            (
                "`Accept` that negotiates to YAML or a refusal",
                "/api/v1/pods?resourceVersion=0",
                Some("application/yaml"),
                true,
                "forward representation",
            ),
            (
                "a pretty-printed answer",
                "/api/v1/pods?resourceVersion=0&pretty=1",
                None,
                true,
                "forward pretty",
            ),
            (
                "field selector on a label the cache does not index",
                "/api/v1/pods?resourceVersion=0&fieldSelector=status.hostIP%3D1.2.3.4",
                None,
                true,
                "forward field_selector",
            ),
            (
                "invalid options",
                "/api/v1/pods?resourceVersion=0&labelSelector=a%3D%3D%3Db",
                None,
                true,
                "forward options",
            ),
            (
                "any read before the resource's first list has completed",
                "/api/v1/pods?resourceVersion=0",
                None,
                false,
                "read Any Json",
            ),
            (
                "a path that is not canonical",
                "/api/v1//pods",
                None,
                true,
                "forward not_a_read",
            ),
        ];
        let doc = include_str!("../../docs/cache.md");
        let table: Vec<&str> = doc
            .lines()
            .skip_while(|l| !l.starts_with("| request | served by |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| l.trim_start_matches("| ").split(" | ").next().unwrap())
            .collect();
        assert_eq!(table.len(), rows.len(), "rows of the table: {table:#?}");
        let info = pods();
        for (row, (first_cell, target, accept, discovered, want)) in table.iter().zip(&rows) {
            assert!(
                row.starts_with(first_cell),
                "the table's row {row:?} has no case (next case: {first_cell:?})"
            );
            let standing = if *discovered {
                Standing::Discovered(&info)
            } else {
                Standing::NotYet
            };
            assert_eq!(
                route_with(target, *accept, standing, ConsistentReads::Cache),
                *want,
                "{row}"
            );
        }
    }

    #[test]
    fn rv_0_is_any_state_and_the_limit_is_ignored() {
        for q in [
            "/api/v1/pods?resourceVersion=0",
            "/api/v1/namespaces/a/pods/p?resourceVersion=0",
            "/api/v1/pods?resourceVersion=0&limit=5",
            "/api/v1/pods?resourceVersion=0&resourceVersionMatch=NotOlderThan",
            "/api/v1/pods?resourceVersion=0&resourceVersionMatch=NotOlderThan&limit=5",
            // Another spelling of zero without a limit is Any too.
            "/api/v1/pods?resourceVersion=00",
        ] {
            assert_eq!(route(q), "read Any Json", "{q}");
        }
        // computeListLimit compares the string: "00" keeps its limit, the upstream's to
        // apply.
        assert_eq!(
            route("/api/v1/pods?resourceVersion=00&limit=5"),
            "forward options"
        );
    }

    #[test]
    fn rv_n_is_not_older_than_and_with_a_limit_the_legacy_exact() {
        assert_eq!(
            route("/api/v1/pods?resourceVersion=7"),
            "read NotOlderThan(7) Json"
        );
        assert_eq!(
            route("/api/v1/namespaces/a/pods/p?resourceVersion=7"),
            "read NotOlderThan(7) Json"
        );
        assert_eq!(
            route("/api/v1/pods?resourceVersion=7&resourceVersionMatch=NotOlderThan"),
            "read NotOlderThan(7) Json"
        );
        // NotOlderThan with a limit: the first page, from the cache, with a token.
        assert_eq!(
            route("/api/v1/pods?resourceVersion=7&resourceVersionMatch=NotOlderThan&limit=5"),
            "read NotOlderThan(7) Json limit=5"
        );
        // Legacy: RV=N with a limit is an exact read.
        assert_eq!(
            route("/api/v1/pods?resourceVersion=7&limit=5"),
            "read Exact(7) Json limit=5"
        );
        assert_eq!(
            route("/api/v1/pods?resourceVersion=7&resourceVersionMatch=Exact"),
            "read Exact(7) Json"
        );
        assert_eq!(
            route("/api/v1/pods?resourceVersion=7&resourceVersionMatch=Exact&limit=2"),
            "read Exact(7) Json limit=2"
        );
        // A limit means nothing to a get.
        assert_eq!(
            route("/api/v1/namespaces/a/pods/p?resourceVersion=7&limit=5"),
            "read NotOlderThan(7) Json"
        );
    }

    #[test]
    fn rv_unset_is_a_consistent_read_unless_consistent_reads_go_upstream() {
        assert_eq!(route("/api/v1/pods"), "read Consistent Json");
        assert_eq!(route("/api/v1/namespaces/a/pods/p"), "read Consistent Json");
        assert_eq!(
            route("/api/v1/pods?limit=500"),
            "read Consistent Json limit=500"
        );
        let info = pods();
        let upstream = |q: &str| {
            route_with(
                q,
                None,
                Standing::Discovered(&info),
                ConsistentReads::Upstream,
            )
        };
        assert_eq!(
            upstream("/api/v1/pods"),
            "forward consistent_reads_upstream"
        );
        assert_eq!(
            upstream("/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"),
            "forward consistent_reads_upstream"
        );
        // Reads with a resourceVersion still come from the cache.
        assert_eq!(upstream("/api/v1/pods?resourceVersion=0"), "read Any Json");
        assert_eq!(
            upstream("/api/v1/pods?watch=1&resourceVersion=5"),
            "watch After(5)"
        );
    }

    #[test]
    fn a_continue_token_is_its_state_exactly() {
        let token = |rv: i64, start: &str| {
            crate::codec::continue_token::ContinueToken {
                rv,
                start_after: start.into(),
            }
            .encode("a/", crate::codec::continue_token::KeyForm::Relative)
        };
        let t = token(42, "a/p-2");
        assert_eq!(
            route(&format!("/api/v1/namespaces/a/pods?limit=5&continue={t}")),
            "read Exact(42) Json limit=5 after=a/p-2"
        );
        // "0" is treated as "Continue Token, Exact".
        assert_eq!(
            route(&format!(
                "/api/v1/namespaces/a/pods?resourceVersion=0&continue={t}"
            )),
            "read Exact(42) Json after=a/p-2"
        );
        // Any other RV is the upstream's 400.
        assert_eq!(
            route(&format!(
                "/api/v1/namespaces/a/pods?resourceVersion=7&continue={t}"
            )),
            "forward options"
        );
        // A token that does not decode, or etcd3's negative RV: the upstream's.
        assert_eq!(
            route("/api/v1/pods?limit=5&continue=bm90LWpzb24"),
            "forward continue_token"
        );
        let negative = token(-1, "a/p-2");
        assert_eq!(
            route(&format!(
                "/api/v1/namespaces/a/pods?limit=5&continue={negative}"
            )),
            "forward continue_token"
        );
    }

    #[test]
    fn watches_start_where_the_watch_table_says() {
        assert_eq!(
            route("/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"),
            "watch Consistent { send_initial_events: Some(true) }"
        );
        assert_eq!(
            route("/api/v1/pods?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan"),
            "watch Consistent { send_initial_events: Some(false) }"
        );
        // The legacy /watch/ path is not defaulted to a watch-list.
        assert_eq!(
            route("/api/v1/watch/pods"),
            "watch Consistent { send_initial_events: None }"
        );
        // A watch with RV "0" and no sendInitialEvents is defaulted to one (the WatchList
        // defaulting of SetListOptionsDefaults, on since 1.32): the state, then the
        // bookmark. Only the legacy /watch/ path keeps RV=0's plain "any state".
        assert_eq!(
            route("/api/v1/pods?watch=1&resourceVersion=0"),
            "watch StateNotOlderThan(0)"
        );
        assert_eq!(
            route("/api/v1/watch/pods?resourceVersion=0"),
            "watch AnyState"
        );
        assert_eq!(
            route("/api/v1/pods?watch=1&resourceVersion=9"),
            "watch After(9)"
        );
        for rv in ["0", "9"] {
            assert_eq!(
                route(&format!("/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion={rv}")),
                format!("watch StateNotOlderThan({rv})")
            );
        }
        assert_eq!(
            route("/api/v1/pods?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&resourceVersion=0"),
            "watch Head"
        );
        // A name in the path is a metadata.name selector; a different one is a 400.
        let info = pods();
        let req = parsed(
            Method::GET,
            "/api/v1/watch/namespaces/a/pods/p?resourceVersion=0",
            &[],
        );
        let known = Known {
            authorized: true,
            consistent_reads: ConsistentReads::Cache,
            resource: Standing::Discovered(&info),
        };
        let Route::Watch(w) = decide(&req, &known) else {
            panic!("not a watch")
        };
        assert_eq!(w.target.opts.field_selector.requires_exact(NAME), Some("p"));
        assert_eq!(
            route("/api/v1/watch/namespaces/a/pods/p?fieldSelector=metadata.name%3Dq"),
            "forward options"
        );
    }

    #[test]
    fn watch_representations() {
        let watch = "/api/v1/watch/pods?resourceVersion=0";
        assert_eq!(accept(watch, PROTOBUF), "watch AnyState");
        assert_eq!(accept(watch, TABLE), "watch AnyState");
        assert_eq!(accept(watch, METADATA_INFORMER), "forward representation");
        assert_eq!(
            accept(
                watch,
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
            ),
            "watch AnyState"
        );
        assert_eq!(accept(watch, "application/yaml"), "forward representation");
        assert_eq!(
            accept(&format!("{watch}&includeObject=Bogus"), TABLE),
            "forward representation"
        );
    }

    #[test]
    fn representations_the_cache_produces() {
        let list = "/api/v1/pods?resourceVersion=0";
        let get = "/api/v1/namespaces/a/pods/p?resourceVersion=0";
        assert_eq!(accept(list, "application/json, */*"), "read Any Json");
        assert_eq!(accept(list, "*/*"), "read Any Json");
        assert_eq!(accept(list, TABLE), "read Any Table(V1)");
        assert_eq!(accept(get, TABLE), "read Any Table(V1)");
        // client-go's typed clients: protobuf for a built-in type.
        assert_eq!(accept(list, PROTOBUF), "read Any Protobuf");
        assert_eq!(accept(list, META_LIST), "read Any Metadata(V1)");
        assert_eq!(accept(get, META_GET), "read Any Metadata(V1beta1)");
        assert_eq!(
            accept(list, METADATA_INFORMER),
            "read Any MetadataProtobuf(V1)"
        );
        // A custom resource: its metadata in protobuf, its objects in JSON (CRDs have no
        // protobuf serializer, and JSON is acceptable too).
        let crd = |a: &str| {
            route_with(
                "/apis/example.com/v1/things?resourceVersion=0",
                Some(a),
                Standing::NotYet,
                ConsistentReads::Cache,
            )
        };
        assert_eq!(crd(METADATA_INFORMER), "read Any MetadataProtobuf(V1)");
        assert_eq!(crd(PROTOBUF), "read Any Json");
        // Upstream: YAML, pretty, a protobuf Table, the apiserver's 406 refusals, a bad
        // includeObject.
        assert_eq!(accept(list, "application/yaml"), "forward representation");
        assert_eq!(
            accept(list, "application/json;pretty=1"),
            "forward representation"
        );
        assert_eq!(
            accept(
                list,
                "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1"
            ),
            "forward representation"
        );
        assert_eq!(accept(get, META_LIST), "forward representation");
        assert_eq!(accept(list, META_GET), "forward representation");
        assert_eq!(accept(list, "text/html"), "forward representation");
        assert_eq!(
            accept(&format!("{list}&includeObject=Bogus"), TABLE),
            "forward representation"
        );
    }

    #[test]
    fn pretty_answers_are_the_upstreams() {
        assert_eq!(
            route("/api/v1/pods?resourceVersion=0&pretty=true"),
            "forward pretty"
        );
        assert_eq!(route("/api/v1/pods?watch=1&pretty=1"), "forward pretty");
        let info = pods();
        let known = Known {
            authorized: true,
            consistent_reads: ConsistentReads::Cache,
            resource: Standing::Discovered(&info),
        };
        let curl = [(header::USER_AGENT, "curl/8.5.0")];
        let req = parsed(Method::GET, "/api/v1/pods?resourceVersion=0", &curl);
        assert_eq!(show(&decide(&req, &known)), "forward pretty");
        // A watch's stream is never indented: curl's watch is served.
        let req = parsed(Method::GET, "/api/v1/watch/pods?resourceVersion=0", &curl);
        assert_eq!(show(&decide(&req, &known)), "watch AnyState");
    }

    #[test]
    fn field_selectors_on_fields_the_cache_does_not_index() {
        assert_eq!(
            route("/api/v1/pods?resourceVersion=0&fieldSelector=spec.nodeName%3Dn1"),
            "read Any Json"
        );
        assert_eq!(
            route("/api/v1/pods?resourceVersion=0&fieldSelector=metadata.namespace%3Da"),
            "read Any Json"
        );
        assert_eq!(
            route("/api/v1/pods?resourceVersion=0&fieldSelector=status.hostIP%3D1.2.3.4"),
            "forward field_selector"
        );
        assert_eq!(
            route("/api/v1/pods?watch=1&resourceVersion=0&fieldSelector=status.hostIP%3D1.2.3.4"),
            "forward field_selector"
        );
        // metadata.namespace is a field of namespaced types only.
        let info = nodes();
        assert_eq!(
            route_with(
                "/api/v1/nodes?resourceVersion=0&fieldSelector=metadata.namespace%3Da",
                None,
                Standing::Discovered(&info),
                ConsistentReads::Cache,
            ),
            "forward field_selector"
        );
        // Before discovery the request is routed to the cache; its handler admits it once
        // the type is known (the same check, `admit`).
        assert_eq!(
            route_with(
                "/api/v1/pods?resourceVersion=0&fieldSelector=status.hostIP%3D1.2.3.4",
                None,
                Standing::NotYet,
                ConsistentReads::Cache,
            ),
            "read Any Json"
        );
        let info = pods();
        let req = parsed(
            Method::GET,
            "/api/v1/pods?resourceVersion=0&fieldSelector=status.hostIP%3D1.2.3.4",
            &[],
        );
        let known = Known {
            authorized: true,
            consistent_reads: ConsistentReads::Cache,
            resource: Standing::NotYet,
        };
        let Route::Read(r) = decide(&req, &known) else {
            panic!("not a read")
        };
        assert_eq!(admit(&r.target, &info), Err(Forward::FieldSelector));
    }

    #[test]
    fn invalid_options_are_the_upstreams() {
        for q in [
            "/api/v1/pods?labelSelector=a%3D%3D%3Db",
            "/api/v1/pods?resourceVersion=abc",
            "/api/v1/pods?resourceVersion=%2B5",
            "/api/v1/pods?resourceVersion=5&resourceVersionMatch=Sometimes",
            "/api/v1/pods?resourceVersionMatch=Exact",
            "/api/v1/pods?resourceVersion=0&resourceVersionMatch=Exact",
            "/api/v1/pods?limit=abc",
            // sendInitialEvents on a list.
            "/api/v1/pods?sendInitialEvents=true",
            "/api/v1/pods?watch=1&resourceVersion=abc",
        ] {
            assert_eq!(route(q), "forward options", "{q}");
        }
    }

    #[test]
    fn a_read_before_the_first_sync_joins_it() {
        // Routed to the cache: its handler starts the cache and waits for the sync, shared
        // with every other read, up to --cache-sync-wait (then forwarded: not_synced;
        // tests/cache_cold.rs).
        for (q, want) in [
            ("/api/v1/pods?resourceVersion=0", "read Any Json"),
            ("/api/v1/pods", "read Consistent Json"),
            ("/api/v1/watch/pods?resourceVersion=0", "watch AnyState"),
        ] {
            assert_eq!(
                route_with(q, None, Standing::NotYet, ConsistentReads::Cache),
                want
            );
        }
    }

    #[test]
    fn paths_and_resources_the_cache_does_not_answer() {
        // Not canonical (src/apipath.rs), a subresource, segments beyond one: the upstream
        // interprets them.
        for q in [
            "//api/v1/pods",
            "/api/v1//pods",
            "/api/v1/namespaces//pods",
            "/api/v1/namespaces/a/pods/./p",
            "/api/v1/namespaces/a/pods/a%25b",
            "/api/v1/namespaces/a/pods/p/status",
            "/api/v1/namespaces/a/pods/p/log",
            "/api",
            "/apis/apps/v1",
            "/version",
        ] {
            assert_eq!(route(q), "forward not_a_read", "{q}");
        }
        // Writes and other methods.
        let info = pods();
        let known = Known {
            authorized: true,
            consistent_reads: ConsistentReads::Cache,
            resource: Standing::Discovered(&info),
        };
        for m in [
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
            Method::HEAD,
        ] {
            let req = parsed(m.clone(), "/api/v1/namespaces/a/pods/p", &[]);
            assert_eq!(show(&decide(&req, &known)), "forward not_a_read", "{m}");
        }
        // No route for the type: the upstream's 404.
        assert_eq!(route("/api/v1/pods/p"), "forward no_route");
        let info = nodes();
        let node =
            |q: &str| route_with(q, None, Standing::Discovered(&info), ConsistentReads::Cache);
        assert_eq!(node("/api/v1/namespaces/a/nodes"), "forward no_route");
        assert_eq!(node("/api/v1/nodes/n1?resourceVersion=0"), "read Any Json");
        // A namespace's own path names it in `namespace` (requestinfo.go).
        let ns = ResourceInfo {
            resource: "namespaces".into(),
            kind: "Namespace".into(),
            ..nodes()
        };
        assert_eq!(
            route_with(
                "/api/v1/namespaces/a?resourceVersion=0",
                None,
                Standing::Discovered(&ns),
                ConsistentReads::Cache
            ),
            "read Any Json"
        );
    }

    #[test]
    fn the_registry_and_security_can_send_any_read_upstream() {
        let q = "/api/v1/pods?resourceVersion=0";
        for (standing, want) in [
            (Standing::Excluded, "forward excluded"),
            (Standing::NotCacheable, "forward not_cacheable"),
            (Standing::OverBudget, "forward over_budget"),
        ] {
            assert_eq!(route_with(q, None, standing, ConsistentReads::Cache), want);
        }
        let req = parsed(Method::GET, q, &[]);
        let known = Known {
            authorized: false,
            consistent_reads: ConsistentReads::Cache,
            resource: Standing::NotYet,
        };
        assert_eq!(show(&decide(&req, &known)), "forward not_authorized");
    }
}

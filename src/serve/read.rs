//! Answering reads from the cache.
//!
//! Only requests whose semantics the cache can honour exactly are served here (see
//! docs/cache.md for the table): which state each resourceVersion semantics needs is
//! `cache::read_at` (consistent reads: `cache::fresh`; Exact lists and continue tokens:
//! `cache::snapshots`; read-your-writes: `cache::writes`). Everything else returns `None`
//! and is forwarded: states the cache cannot give in time, watches (served by
//! `watch::serve`), Accept types the cache does not produce (YAML; protobuf of a type with
//! an object newer than the schema),
//! field selectors on fields the cache does not index, invalid options (the upstream gives
//! its own Status), and any resource whose cache has not synced yet.

use std::sync::Arc;

use http::{header, HeaderValue, Method, Response, StatusCode};

use super::forward::Forward;
use super::fresh::ConsistentRead;
use super::read_at::{self, Read};
use super::registry::{Registry, ResourceCache};
use crate::body::{self, Body};
use crate::codec::continue_token::ContinueToken;
use crate::codec::gzip;
use crate::codec::list::{page, selected, Filter, ItemForm, ListBody, ListHead};
use crate::codec::proto_list::{framed_len, ProtoListBody};
use crate::model::meta;
use crate::model::object::CachedObject;
use crate::model::proto_form::metadata_list_type;
use crate::model::resource::ResourceInfo;
use crate::model::snapshot::Snapshot;
use crate::negotiate::{Conversion, Encoding, MetaVersion, Negotiated};
use crate::proto::{self, MessageType};
use crate::proxy::headers::Source;
use crate::request::{ApiPath, ListOptions, Parsed, ResourceVersion as RV, RvMatch, Verb};
use crate::status::{GroupResource, Status};
use crate::table::{Convertor, TableOptions};

/// What a cacheable read needs, decided before touching the cache.
struct Plan<'a> {
    group: &'a str,
    version: &'a str,
    resource: &'a str,
    namespace: Option<&'a str>,
    name: Option<&'a str>,
    opts: ListOptions,
    /// The state the read needs.
    read: Read,
    /// The page size of a limited list (`None`: the whole list).
    limit: Option<usize>,
    /// A continuation: the page starts after this key (the token's).
    after: Option<Box<str>>,
}

/// Serves the request from the cache if it can; otherwise says why it is forwarded.
pub async fn try_serve(registry: &Arc<Registry>, req: &Parsed) -> Result<Response<Body>, Forward> {
    let arrived = std::time::Instant::now();
    if req.api.method != Method::GET || !matches!(req.api.verb, Verb::Get | Verb::List) {
        return Err(Forward::NotARead);
    }
    let ApiPath::Resource(rp) = &req.api.path else {
        return Err(Forward::NotARead);
    };
    // A path only the upstream can interpret (`crate::apipath`) is its to answer.
    if !rp.canonical || rp.subresource.is_some() || !rp.extra.is_empty() || rp.legacy_watch {
        return Err(Forward::NotARead);
    }
    // A pretty-printed answer (`pretty`, or curl's User-Agent) is the upstream's to give.
    if req.pretty || req.api.query_get("pretty").is_some() {
        return Err(Forward::Pretty);
    }
    let opts = req.valid_options().ok_or(Forward::Options)?.clone();
    let (read, limit) = cacheable(&opts, req.api.verb).ok_or(Forward::Options)?;
    let (read, after) = match read {
        Cacheable::Read(r) => (r, None),
        // The token names the state (its first page's RV) and where the page starts,
        // relative to the list's key prefix, in either of kube-apiserver's forms.
        Cacheable::Continue(token) => {
            let prefix = rp
                .namespace
                .as_deref()
                .map(|ns| format!("{ns}/"))
                .unwrap_or_default();
            // A bad token, or a negative RV (etcd3's "continue at the latest" after a
            // compaction), is the upstream's to answer.
            let t = ContinueToken::decode(&token, &prefix).map_err(|_| Forward::ContinueToken)?;
            let rv = u64::try_from(t.rv)
                .ok()
                .filter(|rv| *rv > 0)
                .ok_or(Forward::ContinueToken)?;
            (Read::Exact(rv), Some(t.start_after.into_boxed_str()))
        }
    };
    let plan = Plan {
        group: &rp.group,
        version: &rp.version,
        resource: &rp.resource,
        namespace: rp.namespace.as_deref(),
        name: rp.name.as_deref(),
        opts,
        read,
        limit,
        after,
    };
    // An answer the cache never produces (YAML, a refusal) is forwarded before any wait
    // for a cold cache: the type's endpoint follows from its group alone.
    let endpoint = if crate::model::resource::is_builtin_group(&rp.group) {
        crate::negotiate::Endpoint::BUILTIN
    } else {
        crate::negotiate::Endpoint::CUSTOM
    };
    req.accept
        .negotiate(endpoint)
        .ok()
        .and_then(|n| served(n, req.api.verb))
        .ok_or(Forward::Representation)?;
    // The request could be served from a cache: make sure one is (being) built, and join
    // its sync if it has not synced yet.
    let cache = registry
        .cache_for(
            plan.group,
            plan.version,
            plan.resource,
            registry.sync_wait(),
        )
        .await?;
    let repr = representation(registry, &cache, req).ok_or(Forward::Representation)?;
    // A cluster-scoped resource under a namespace path is the upstream's 404 to give.
    // requestinfo.go puts a namespace's own name in `namespace` for
    // `/api/v1/namespaces/{name}`, which is not such a path.
    let own_namespace = rp.group.is_empty() && rp.resource == "namespaces";
    if plan.namespace.is_some() && !cache.info.namespaced && !own_namespace {
        return Err(Forward::NoRoute);
    }
    // Nor has a namespaced one a route by name outside a namespace (`/api/v1/pods/a`):
    // the upstream's 404 too (src/apipath.rs).
    if plan.name.is_some() && plan.namespace.is_none() && cache.info.namespaced {
        return Err(Forward::NoRoute);
    }
    if !fields_indexed(&cache, &plan.opts) {
        return Err(Forward::FieldSelector);
    }
    // A lone get or list is forwarded rather than kept waiting for a proof of freshness
    // (`cache::fresh`).
    let how = ConsistentRead {
        stream: false,
        arrived,
    };
    let snapshot = read_at::snapshot_for(registry, &cache, &plan.read, how).await?;
    // Large answers are gzipped when the client accepts it, as kube-apiserver does.
    let gzip_ok = req.accepts_gzip;
    let resp = match plan.name {
        Some(name) => get(
            &cache,
            &snapshot,
            &plan,
            name,
            repr,
            gzip_ok,
            req.accept.for_errors(),
        ),
        None => list(&cache, snapshot, &plan, repr, gzip_ok).await,
    };
    // No answer here: an object without a protobuf form (the type is marked, and its
    // reads go upstream from now on).
    resp.map(cached).ok_or(Forward::Representation)
}

/// What a cacheable read asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cacheable {
    Read(Read),
    /// A continue token, decoded once the list's key prefix is known.
    Continue(String),
}

/// Which state a request needs, and which page size applies, if the cache may answer it
/// (the documents' "Semantics for get and list" table, as kube-apiserver's
/// `delegator.ShouldDelegateList`, its cacher with `ListFromCacheSnapshot` and
/// `computeListLimit` implement it). `None` means it must go upstream.
fn cacheable(opts: &ListOptions, verb: Verb) -> Option<(Cacheable, Option<usize>)> {
    use Cacheable::Read as R;
    if opts.watch || opts.send_initial_events.is_some() {
        return None;
    }
    let limit = opts
        .limit
        .filter(|_| verb == Verb::List)
        .map(|l| l as usize);
    if let Some(token) = &opts.continue_token {
        // "Continue Token, Exact" (RV unset, or "0": "treated as Continue Token, Exact");
        // any other RV is the upstream's 400.
        if verb != Verb::List || !matches!(opts.rv, RV::Unset | RV::Zero) {
            return None;
        }
        return Some((Cacheable::Continue(token.clone()), limit));
    }
    let n = match &opts.rv {
        // Most Recent: a consistent read (`cache::fresh`), paged or not.
        RV::Unset => return Some((R(Read::Consistent), limit)),
        // Not a number: the upstream's 400 to give.
        RV::Invalid(_) => return None,
        RV::Zero => 0,
        RV::Number(n) => *n,
    };
    match (opts.rv_match, n) {
        // Exact at "0" is invalid (422, validation); another spelling of zero is the
        // upstream's to judge.
        (Some(RvMatch::Exact), 0) => None,
        (Some(RvMatch::Exact), n) => Some((R(Read::Exact(n)), limit)),
        // RV="0": Any. kube-apiserver's cacher ignores `limit` here (`computeListLimit`)
        // and answers the whole list; so does the cache. computeListLimit compares the
        // string: another spelling of zero keeps its limit, which is the upstream's to
        // apply.
        (_, 0) if opts.rv == RV::Zero => Some((R(Read::Any), None)),
        (_, 0) if limit.is_some() => None,
        (_, 0) => Some((R(Read::Any), None)),
        // NotOlderThan with a limit: the cacher serves the first page from its cache and
        // issues a continue token at the page's resourceVersion.
        (Some(RvMatch::NotOlderThan), n) => Some((R(Read::NotOlderThan(n)), limit)),
        // Legacy semantics: RV=N with a limit is an exact read.
        (None, n) if limit.is_some() => Some((R(Read::Exact(n)), limit)),
        (None, n) => Some((R(Read::NotOlderThan(n)), None)),
    }
}

/// Field selectors are answered from the fields parsed into each object; any other field
/// label goes upstream, which knows whether the type supports it. `metadata.namespace` is
/// a field of namespaced types only (`generic.ObjectMetaFieldsSet`): on nodes or
/// namespaces the apiserver refuses it with a 400 (found by tests/bad_input_properties.rs).
pub fn fields_indexed(cache: &ResourceCache, opts: &ListOptions) -> bool {
    opts.field_selector.terms.iter().all(|t| {
        t.field == "metadata.name"
            || (t.field == "metadata.namespace" && cache.info.namespaced)
            || cache.info.field_labels.iter().any(|(l, _)| *l == t.field)
    })
}

/// The representation a read is answered in from the cache.
#[derive(Debug, Clone)]
enum Repr {
    /// The object (list) in JSON.
    Json,
    /// `PartialObjectMetadata` (gets) or `PartialObjectMetadataList` (lists) in JSON.
    Metadata(MetaVersion),
    /// A `meta.k8s.io` Table, printed as the apiserver's table convertor for the type
    /// prints it (`crate::table`).
    Table(Convertor, TableOptions),
    /// The object (list) in protobuf (`crate::proto`): each object's message built once
    /// per version, lists assembled from those bytes.
    Protobuf {
        object: MessageType,
        list: MessageType,
    },
    /// `PartialObjectMetadata(List)` in protobuf; `object` is the type's own message when
    /// it has one (its metadata field is then sliced out of the object's message).
    MetadataProtobuf {
        version: MetaVersion,
        list: MessageType,
        object: Option<MessageType>,
    },
}

impl Repr {
    /// Whether `obj`'s message in this representation has yet to be built.
    fn message_pending(&self, obj: &CachedObject) -> bool {
        match self {
            Repr::Protobuf { .. } => !obj.has_proto(),
            Repr::MetadataProtobuf { .. } => !obj.has_metadata_proto(),
            _ => false,
        }
    }

    fn is_protobuf(&self) -> bool {
        matches!(self, Repr::Protobuf { .. } | Repr::MetadataProtobuf { .. })
    }

    /// An object's message in this protobuf representation (`None`: it has none).
    fn message(&self, obj: &CachedObject) -> Option<bytes::Bytes> {
        match self {
            Repr::Protobuf { object, .. } => obj.proto(*object),
            Repr::MetadataProtobuf { object, .. } => obj.metadata_proto(*object),
            _ => None,
        }
    }
}

/// How the Accept header negotiates for this type (`crate::negotiate`, as the apiserver
/// negotiates it), if the cache produces that answer. Protobuf, YAML, Table, pretty
/// output, and the apiserver's 406 refusals (no acceptable media type, a list asking for
/// `PartialObjectMetadata` or a get for `PartialObjectMetadataList`) are the upstream's
/// to give.
fn representation(registry: &Arc<Registry>, cache: &ResourceCache, req: &Parsed) -> Option<Repr> {
    let n = req.accept.negotiate(cache.info.endpoint()).ok()?;
    match served(n, req.api.verb)? {
        Served::Json => Some(Repr::Json),
        Served::Metadata(v) => Some(Repr::Metadata(v)),
        Served::Table(v) => {
            // A bad includeObject is the upstream's 400 to give.
            let opts = TableOptions::new(v, req.api.query_get("includeObject")).ok()?;
            Some(Repr::Table(convertor(registry, cache)?, opts))
        }
        Served::Protobuf => {
            let (object, list) = cache.proto.types()?;
            Some(Repr::Protobuf { object, list })
        }
        Served::MetadataProtobuf(version) => {
            if !cache.proto.metadata_ok() {
                return None;
            }
            Some(Repr::MetadataProtobuf {
                version,
                list: metadata_list_type(version)?,
                object: cache.proto.object,
            })
        }
    }
}

/// Which negotiated answers the cache produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    Json,
    Metadata(MetaVersion),
    Table(MetaVersion),
    Protobuf,
    MetadataProtobuf(MetaVersion),
}

fn served(n: Negotiated, verb: Verb) -> Option<Served> {
    if n.pretty || n.encoding == Encoding::Yaml {
        return None;
    }
    let proto = n.encoding == Encoding::Protobuf;
    match (n.conversion, verb) {
        (None, _) if proto => Some(Served::Protobuf),
        (None, _) => Some(Served::Json),
        (Some(Conversion::PartialObjectMetadata(v)), Verb::Get)
        | (Some(Conversion::PartialObjectMetadataList(v)), Verb::List) => Some(if proto {
            Served::MetadataProtobuf(v)
        } else {
            Served::Metadata(v)
        }),
        (Some(Conversion::Table(v)), _) if !proto => Some(Served::Table(v)),
        _ => None,
    }
}

/// The table convertor the apiserver uses for this type, if the gateway has it: a ported
/// printer (or the default convertor) for built-in types; for a custom resource, its
/// CRD's `additionalPrinterColumns`, read from the gateway's own cache of
/// CustomResourceDefinitions (started on first use, so that a CRD's new columns show up as
/// soon as its update does). Until that cache has synced, or without the CRD (no RBAC to
/// read CRDs, an aggregated API), the Table is the upstream's.
pub(crate) fn convertor(registry: &Arc<Registry>, cache: &ResourceCache) -> Option<Convertor> {
    let info = &cache.info;
    if info.is_builtin() {
        return Convertor::builtin(&info.group, &info.kind);
    }
    const CRDS: (&str, &str, &str) = ("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    registry.ensure_started(CRDS.0, CRDS.1, CRDS.2);
    let crds = registry.get(CRDS.0, CRDS.1, CRDS.2)?;
    if !crds.is_synced() {
        return None;
    }
    let snapshot = crds.store.snapshot();
    let crd = snapshot.get("", &format!("{}.{}", info.resource, info.group))?;
    let crd: serde_json::Value = serde_json::from_slice(&crd.raw).ok()?;
    Some(Convertor::custom_resource(&crd, &info.version))
}

/// An object as the Table convertor reads it: with its TypeMeta, as a row's
/// `includeObject=Object` carries it.
fn object_value(info: &ResourceInfo, obj: &CachedObject) -> serde_json::Value {
    let mut raw = Vec::with_capacity(obj.raw.len() + 48);
    obj.write_with_type_meta(&info.type_prefix(), &mut raw);
    serde_json::from_slice(&raw).unwrap_or_default()
}

/// A Table answer: built whole (the apiserver's convertors do the same), JSON as the
/// simulator writes it, gzipped when large.
fn table_response(table: &serde_json::Value, gzip_ok: bool) -> Response<Body> {
    let mut out = serde_json::to_vec(table).unwrap_or_default();
    out.push(b'\n');
    let (out, gzipped) = gzip::encode_full(gzip_ok, out);
    let mut resp = json_response(body::full(out));
    gzip::apply(&mut resp, gzipped);
    resp
}

fn matcher(opts: &ListOptions) -> Option<Filter> {
    if opts.label_selector.is_empty() && opts.field_selector.is_empty() {
        return None;
    }
    let labels = opts.label_selector.clone();
    let fields = opts.field_selector.clone();
    Some(Box::new(move |o: &CachedObject| {
        o.label_digest.may_match(&labels)
            && labels.matches_fn(|k| o.label(k))
            && fields.matches_with(|f| o.field(f).unwrap_or_default().to_string())
    }))
}

fn get(
    cache: &ResourceCache,
    snapshot: &Snapshot,
    plan: &Plan<'_>,
    name: &str,
    repr: Repr,
    gzip_ok: bool,
    error_form: Option<Negotiated>,
) -> Option<Response<Body>> {
    let ns = if cache.info.namespaced {
        plan.namespace.unwrap_or_default()
    } else {
        ""
    };
    let found = snapshot.get(ns, name);
    match found {
        Some(obj) => {
            if let Repr::Table(convertor, opts) = &repr {
                let table = convertor.object_table(
                    &object_value(&cache.info, obj),
                    opts,
                    jiff::Timestamp::now(),
                );
                return Some(table_response(&table, gzip_ok));
            }
            if repr.is_protobuf() {
                let Some(msg) = repr.message(obj) else {
                    cache.proto.mark_broken(&cache.info.group);
                    return None;
                };
                let out = match &repr {
                    Repr::MetadataProtobuf { version, .. } => {
                        proto::encode_unknown(version.api_version(), "PartialObjectMetadata", &msg)
                    }
                    _ => proto::encode_unknown(&cache.info.api_version(), &cache.info.kind, &msg),
                };
                return Some(protobuf_response(out, gzip_ok));
            }
            let mut out = Vec::with_capacity(obj.raw.len() + 48);
            match repr {
                Repr::Json => obj.write_with_type_meta(&cache.info.type_prefix(), &mut out),
                Repr::Metadata(v) => {
                    out.extend_from_slice(meta::partial_head(v));
                    match obj.metadata_json(!cache.info.is_builtin()) {
                        Some(m) => out.extend_from_slice(&m),
                        None => out.extend_from_slice(b"{}"),
                    }
                    out.push(b'}');
                }
                Repr::Table(..) | Repr::Protobuf { .. } | Repr::MetadataProtobuf { .. } => {
                    unreachable!("answered above")
                }
            }
            out.push(b'\n');
            let (out, gzipped) = gzip::encode_full(gzip_ok, out);
            let mut resp = json_response(body::full(out));
            gzip::apply(&mut resp, gzipped);
            Some(resp)
        }
        // The apiserver's 404, in the encoding the client negotiated for errors.
        None => Some(crate::error_response::negotiated_as(
            Status::not_found(
                &GroupResource::new(cache.info.group.clone(), cache.info.resource.clone()),
                name,
            ),
            error_form,
        )),
    }
}

/// A protobuf answer (already enveloped), gzipped when large.
fn protobuf_response(out: Vec<u8>, gzip_ok: bool) -> Response<Body> {
    let (out, gzipped) = gzip::encode_full(gzip_ok, out);
    let mut resp = json_response(body::full(out));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(proto::CONTENT_TYPE),
    );
    gzip::apply(&mut resp, gzipped);
    resp
}

async fn list(
    cache: &ResourceCache,
    snapshot: Arc<Snapshot>,
    plan: &Plan<'_>,
    repr: Repr,
    gzip_ok: bool,
) -> Option<Response<Body>> {
    let info = &cache.info;
    let namespace = plan.namespace.filter(|_| info.namespaced);
    let filter = matcher(&plan.opts);
    let after = plan.after.as_deref();
    let page = plan
        .limit
        .and_then(|l| page(&snapshot, namespace, filter.as_ref(), after, l));
    let (continue_token, remaining_item_count) = match &page {
        Some(end) => {
            // kube-apiserver's format, relative to the list's prefix, at the snapshot's
            // RV: any apiserver resumes it at exactly that revision, and the cache serves the
            // next page from this snapshot, which it keeps (`cache::snapshots`).
            cache.store.retain(&snapshot);
            let token = ContinueToken {
                rv: snapshot.resource_version as i64,
                start_after: end.last_key.to_string(),
            };
            let prefix = namespace.map(|ns| format!("{ns}/")).unwrap_or_default();
            let remaining = filter.is_none().then_some(end.remaining as u64);
            // In the form the upstream's own tokens take (`cache::token_form`).
            let form = cache.store.token_form().get();
            (Some(token.encode(&prefix, form)), remaining)
        }
        None => (None, None),
    };
    if let Repr::Table(convertor, opts) = &repr {
        let mut list_meta = serde_json::Map::new();
        list_meta.insert(
            "resourceVersion".into(),
            snapshot.resource_version.to_string().into(),
        );
        if let Some(t) = &continue_token {
            list_meta.insert("continue".into(), t.clone().into());
        }
        if let Some(n) = remaining_item_count {
            list_meta.insert("remainingItemCount".into(), n.into());
        }
        let end = page.as_ref().map(|p| &*p.last_key);
        let objects: Vec<serde_json::Value> =
            selected(&snapshot, namespace, filter.as_ref(), after, end)
                .map(|o| object_value(info, o))
                .collect();
        let table = convertor.list_table(
            &serde_json::Value::Object(list_meta),
            &objects,
            opts,
            jiff::Timestamp::now(),
        );
        return Some(table_response(&table, gzip_ok));
    }
    if repr.is_protobuf() {
        let meta = ProtoListMeta {
            resource_version: snapshot.resource_version.to_string(),
            continue_token: continue_token.unwrap_or_default(),
            remaining_item_count: remaining_item_count.map(|n| n as i64),
        };
        let end = page.map(|p| p.last_key);
        let after = plan.after.clone();
        return proto_list(
            cache, snapshot, namespace, filter, after, end, meta, repr, gzip_ok,
        )
        .await;
    }
    let (api_version, kind, items) = match repr {
        Repr::Json if info.is_builtin() => (
            info.api_version(),
            format!("{}List", info.kind),
            ItemForm::Bare,
        ),
        Repr::Json => (
            info.api_version(),
            format!("{}List", info.kind),
            ItemForm::Typed(info.type_prefix()),
        ),
        Repr::Table(..) | Repr::Protobuf { .. } | Repr::MetadataProtobuf { .. } => {
            unreachable!("answered above")
        }
        Repr::Metadata(v) => (
            v.api_version().to_string(),
            "PartialObjectMetadataList".to_string(),
            ItemForm::Metadata {
                head: meta::partial_head(v),
                unstructured: !info.is_builtin(),
            },
        ),
    };
    let head = ListHead {
        api_version,
        kind,
        resource_version: snapshot.resource_version,
        items,
        continue_token,
        remaining_item_count,
    };
    let mut body = ListBody::new(head, snapshot, namespace, filter);
    if let Some(key) = &plan.after {
        body = body.after(key.clone());
    }
    if let Some(end) = page {
        body = body.until(end.last_key);
    }
    // Streamed either way: with gzip accepted, at most 128 KiB are read ahead to decide.
    Some(gzip::respond(
        json_response(body::empty()),
        gzip::negotiate_stream(gzip_ok, body),
    ))
}

/// A list's ListMeta, for its protobuf envelope.
struct ProtoListMeta {
    resource_version: String,
    continue_token: String,
    remaining_item_count: Option<i64>,
}

/// A protobuf list: every selected object's message (built once per object version), then
/// the envelope around their total size, streamed. Objects not encoded yet (the first
/// protobuf list of a type, ~40 µs per 4 KiB pod) are encoded on the blocking pool, so a
/// cold list of many objects never holds a worker thread. An object with no protobuf
/// form marks the type (`ProtoForm::mark_broken`) and the request is forwarded.
#[allow(clippy::too_many_arguments)]
async fn proto_list(
    cache: &ResourceCache,
    snapshot: Arc<Snapshot>,
    namespace: Option<&str>,
    filter: Option<Filter>,
    after: Option<Box<str>>,
    end: Option<Box<str>>,
    meta: ProtoListMeta,
    repr: Repr,
    gzip_ok: bool,
) -> Option<Response<Body>> {
    let info = &cache.info;
    let (list_ty, api_version, kind) = match &repr {
        Repr::Protobuf { list, .. } => (*list, info.api_version(), format!("{}List", info.kind)),
        Repr::MetadataProtobuf { version, list, .. } => (
            *list,
            version.api_version().to_string(),
            "PartialObjectMetadataList".to_string(),
        ),
        _ => return None,
    };
    let namespace = namespace.map(str::to_string);
    let cold = selected(
        &snapshot,
        namespace.as_deref(),
        filter.as_ref(),
        after.as_deref(),
        end.as_deref(),
    )
    .next()
    .is_some_and(|o| repr.message_pending(o));
    let gather = move || -> Option<Vec<bytes::Bytes>> {
        selected(
            &snapshot,
            namespace.as_deref(),
            filter.as_ref(),
            after.as_deref(),
            end.as_deref(),
        )
        .map(|o| repr.message(o))
        .collect()
    };
    let items = if cold {
        tokio::task::spawn_blocking(gather).await.ok()?
    } else {
        gather()
    };
    let Some(items) = items else {
        cache.proto.mark_broken(&info.group);
        return None;
    };
    let list_meta = proto::ListMeta {
        resource_version: &meta.resource_version,
        continue_token: &meta.continue_token,
        remaining_item_count: meta.remaining_item_count,
    };
    let envelope =
        proto::ListEnvelope::new(list_ty, &api_version, &kind, &list_meta, framed_len(&items))
            .ok()?;
    let mut resp = gzip::respond(
        json_response(body::empty()),
        gzip::negotiate_stream(gzip_ok, ProtoListBody::new(envelope, items)),
    );
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(proto::CONTENT_TYPE),
    );
    Some(resp)
}

fn json_response(body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn cached(mut resp: Response<Body>) -> Response<Body> {
    Source::Cache.mark(resp.headers_mut());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(q: &str) -> ListOptions {
        let pairs: Vec<(String, String)> =
            form_urlencoded::parse(q.as_bytes()).into_owned().collect();
        crate::request::list_options(&pairs, false).unwrap()
    }

    #[test]
    fn the_semantics_table_decides_what_is_cacheable() {
        use Verb::*;
        let r = |read: Read, limit: Option<usize>| Some((Cacheable::Read(read), limit));
        let any = r(Read::Any, None);
        // resourceVersion unset: Most Recent, a consistent read (cache::fresh), paged or not.
        assert_eq!(cacheable(&opts(""), List), r(Read::Consistent, None));
        assert_eq!(cacheable(&opts(""), Get), r(Read::Consistent, None));
        assert_eq!(
            cacheable(&opts("limit=5"), List),
            r(Read::Consistent, Some(5))
        );
        // "0": Any, and the cacher ignores the limit.
        assert_eq!(cacheable(&opts("resourceVersion=0"), List), any);
        assert_eq!(cacheable(&opts("resourceVersion=0"), Get), any);
        assert_eq!(
            cacheable(
                &opts("resourceVersion=0&resourceVersionMatch=NotOlderThan"),
                List
            ),
            any
        );
        assert_eq!(cacheable(&opts("resourceVersion=0&limit=5"), List), any);
        assert_eq!(
            cacheable(
                &opts("resourceVersion=0&resourceVersionMatch=NotOlderThan&limit=5"),
                List
            ),
            any
        );
        // Another spelling of zero keeps its limit (computeListLimit compares strings).
        assert_eq!(cacheable(&opts("resourceVersion=00&limit=5"), List), None);
        assert_eq!(cacheable(&opts("resourceVersion=00"), List), any);
        // "N": Not older than, unless limit makes it the legacy Exact.
        assert_eq!(
            cacheable(&opts("resourceVersion=7"), List),
            r(Read::NotOlderThan(7), None)
        );
        assert_eq!(
            cacheable(&opts("resourceVersion=7"), Get),
            r(Read::NotOlderThan(7), None)
        );
        assert_eq!(
            cacheable(&opts("resourceVersion=7&limit=5"), List),
            r(Read::Exact(7), Some(5))
        );
        // NotOlderThan with a limit: the first page, from the cache.
        assert_eq!(
            cacheable(
                &opts("resourceVersion=7&resourceVersionMatch=NotOlderThan&limit=5"),
                List
            ),
            r(Read::NotOlderThan(7), Some(5))
        );
        assert_eq!(
            cacheable(
                &opts("resourceVersion=7&resourceVersionMatch=NotOlderThan"),
                List
            ),
            r(Read::NotOlderThan(7), None)
        );
        // Exact: a retained or rebuilt snapshot (cache::snapshots).
        assert_eq!(
            cacheable(&opts("resourceVersion=7&resourceVersionMatch=Exact"), List),
            r(Read::Exact(7), None)
        );
        assert_eq!(
            cacheable(
                &opts("resourceVersion=7&resourceVersionMatch=Exact&limit=2"),
                List
            ),
            r(Read::Exact(7), Some(2))
        );
        // Continuations: the token's state (RV unset, or "0", which is treated the same).
        let cont = |t: &str, l| Some((Cacheable::Continue(t.into()), l));
        assert_eq!(
            cacheable(&opts("continue=abc&limit=5"), List),
            cont("abc", Some(5))
        );
        assert_eq!(
            cacheable(&opts("resourceVersion=0&continue=abc"), List),
            cont("abc", None)
        );
        // With any other RV the apiserver answers 400; that is the upstream's.
        assert_eq!(
            cacheable(&opts("resourceVersion=7&continue=abc"), List),
            None
        );
    }

    #[test]
    fn json_metadata_and_tables_are_served_the_rest_is_forwarded() {
        use crate::model::resource::ResourceInfo;
        let repr = |accept: Option<&str>, group: &str, path: &str| {
            let mut headers = http::HeaderMap::new();
            if let Some(a) = accept {
                headers.insert(header::ACCEPT, HeaderValue::from_str(a).unwrap());
            }
            let req = Parsed::new(&Method::GET, &path.parse().unwrap(), &headers);
            let info = ResourceInfo {
                group: group.into(),
                version: "v1".into(),
                resource: "things".into(),
                kind: "Thing".into(),
                namespaced: true,
                field_labels: vec![],
            };
            served(req.accept.negotiate(info.endpoint()).ok()?, req.api.verb)
        };
        let list = "/api/v1/pods";
        let get = "/api/v1/namespaces/a/pods/p";
        assert_eq!(repr(None, "", list), Some(Served::Json));
        assert_eq!(
            repr(Some("application/json, */*"), "", list),
            Some(Served::Json)
        );
        assert_eq!(repr(Some("*/*"), "", list), Some(Served::Json));
        assert_eq!(
            repr(
                Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"),
                "",
                list
            ),
            Some(Served::Table(MetaVersion::V1))
        );
        // client-go's typed clients: protobuf for a built-in type.
        assert_eq!(
            repr(
                Some("application/vnd.kubernetes.protobuf,application/json"),
                "",
                list
            ),
            Some(Served::Protobuf)
        );
        // The metadata informer's Accept: protobuf PartialObjectMetadataList, custom
        // resources included.
        let informer = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(
            repr(Some(informer), "example.com", list),
            Some(Served::MetadataProtobuf(MetaVersion::V1))
        );
        // Table has no protobuf form.
        assert_eq!(
            repr(
                Some("application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1"),
                "",
                list
            ),
            None
        );
        // A custom resource has no protobuf: client-go's typed Accept gets JSON.
        assert_eq!(
            repr(
                Some("application/vnd.kubernetes.protobuf,application/json"),
                "example.com",
                list
            ),
            Some(Served::Json)
        );
        assert_eq!(repr(Some("application/yaml"), "", list), None);
        assert_eq!(repr(Some("application/json;pretty=1"), "", list), None);
        let meta_list = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        let meta_get = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1";
        assert_eq!(
            repr(Some(meta_list), "", list),
            Some(Served::Metadata(MetaVersion::V1))
        );
        assert_eq!(
            repr(Some(meta_get), "example.com", get),
            Some(Served::Metadata(MetaVersion::V1beta1))
        );
        // The apiserver refuses these (406): the upstream answers.
        assert_eq!(repr(Some(meta_list), "", get), None);
        assert_eq!(repr(Some(meta_get), "", list), None);
    }
}

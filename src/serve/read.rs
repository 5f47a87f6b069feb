//! Answering gets and lists from the cache, once the routing decision (`serve::route`)
//! has sent them here: the handler joins the cache's sync if it has not synced yet
//! (`Registry::cache_for`), checks the type's facts (`route::admit`), builds the
//! representation the Accept header negotiated, waits for the state the read needs
//! (`cache::read_at`: consistent reads `cache::fresh`, Exact lists and continue tokens
//! `cache::snapshots`, read-your-writes `cache::writes`) and answers. Each of those steps
//! can still forward the request, with its reason (`cache::forward::Forward`).

use std::sync::Arc;

use http::{header, HeaderValue, Response, StatusCode};

use super::route::{self, Answer, ReadTarget};
use crate::body::{self, Body};
use crate::cache::forward::Forward;
use crate::cache::fresh::ConsistentRead;
use crate::cache::read_at;
use crate::cache::registry::{Registry, ResourceCache};
use crate::codec::continue_token::ContinueToken;
use crate::codec::gzip;
use crate::codec::list::{page, selected, Filter, ItemForm, ListBody, ListHead};
use crate::codec::proto_list::{framed_len, ProtoListBody};
use crate::model::meta;
use crate::model::object::CachedObject;
use crate::model::proto_form::metadata_list_type;
use crate::model::resource::ResourceInfo;
use crate::model::snapshot::Snapshot;
use crate::negotiate::{MetaVersion, Negotiated};
use crate::proto::{self, MessageType};
use crate::proxy::headers::Source;
use crate::request::{ListOptions, Parsed};
use crate::status::{GroupResource, Status};
use crate::table::{Convertor, TableOptions};

/// Answers a get or list routed to the cache, or says why it is forwarded after all.
pub async fn answer(
    registry: &Arc<Registry>,
    req: &Parsed,
    plan: ReadTarget<'_>,
    looked_up: Option<Arc<ResourceCache>>,
) -> Result<Response<Body>, Forward> {
    let arrived = std::time::Instant::now();
    let t = &plan.target;
    // Make sure a cache is (being) built, and join its sync if it has not synced yet.
    let cache = synced(registry, t, looked_up, registry.sync_wait()).await?;
    let repr = representation(registry, &cache, req, plan.answer).ok_or(Forward::Representation)?;
    // A lone get or list is forwarded rather than kept waiting for a proof of freshness
    // (`cache::fresh`).
    let how = ConsistentRead {
        stream: false,
        arrived,
    };
    let snapshot = read_at::snapshot_for(registry, &cache, &plan.read, how).await?;
    // Large answers are gzipped when the client accepts it, as kube-apiserver does.
    let gzip_ok = req.accepts_gzip;
    let resp = match t.name {
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

/// The synced cache of the target's resource: the one the routing decision looked up if
/// it has synced (and was admitted there), else the registry's, started if need be and
/// waited for up to `bound` (`Registry::cache_for`), and admitted now that its type is
/// known.
pub(super) async fn synced(
    registry: &Arc<Registry>,
    t: &route::Target<'_>,
    looked_up: Option<Arc<ResourceCache>>,
    bound: std::time::Duration,
) -> Result<Arc<ResourceCache>, Forward> {
    if let Some(c) = looked_up.filter(|c| c.is_synced()) {
        return Ok(c);
    }
    let cache = registry
        .cache_for(t.group, t.version, t.resource, bound)
        .await?;
    route::admit(t, &cache.info)?;
    Ok(cache)
}

/// The representation of the answer the route negotiated, if the cache produces it for
/// this type: a Table needs the type's printer (and a valid `includeObject`; a bad one is
/// the upstream's 400), protobuf the type's messages and objects that all encode.
fn representation(
    registry: &Arc<Registry>,
    cache: &ResourceCache,
    req: &Parsed,
    answer: Answer,
) -> Option<Repr> {
    match answer {
        Answer::Json => Some(Repr::Json),
        Answer::Metadata(v) => Some(Repr::Metadata(v)),
        Answer::Table(v) => {
            let opts = TableOptions::new(v, req.api.query_get("includeObject")).ok()?;
            Some(Repr::Table(convertor(registry, cache)?, opts))
        }
        Answer::Protobuf => {
            let (object, list) = cache.proto.types()?;
            Some(Repr::Protobuf { object, list })
        }
        Answer::MetadataProtobuf(version) => {
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
    plan: &ReadTarget<'_>,
    name: &str,
    repr: Repr,
    gzip_ok: bool,
    error_form: Option<Negotiated>,
) -> Option<Response<Body>> {
    let ns = if cache.info.namespaced {
        plan.target.namespace.unwrap_or_default()
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
    plan: &ReadTarget<'_>,
    repr: Repr,
    gzip_ok: bool,
) -> Option<Response<Body>> {
    let info = &cache.info;
    let namespace = plan.target.namespace.filter(|_| info.namespaced);
    let filter = matcher(&plan.target.opts);
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

//! Deciding whether a watch is served from the cache, and starting it.
//!
//! Served here (the documents' watch table, kube-apiserver's cacher where they are
//! silent): `resourceVersion="0"` (the current state as ADDED events, then changes),
//! `resourceVersion="N"` (the changes after N, from the history; 410 in an ERROR event
//! when N is older than it; a wait when N is newer, as api-concepts allows: "the API
//! server may wait indefinitely"), `sendInitialEvents=true` with NotOlderThan and RV
//! set (initial events, then the `k8s.io/initial-events-end` bookmark; an RV the cache
//! has not reached within `CATCH_UP_WAIT` is forwarded: see `cache::read_at`), and
//! resourceVersion unset ("Get State and Start at Most Recent", client-go's watch-list)
//! once the cache is proven fresh (`cache::fresh`; forwarded when it cannot be in time).
//! Which state each needs is `cache::read_at`.
//!
//! Forwarded: invalid options (the upstream's Status is the reference), non-JSON media
//! types, field labels the cache does not carry, and resources whose cache is not synced
//! yet.

use std::sync::Arc;
use std::time::Duration;

use http::{header, HeaderValue, Method, Response, StatusCode};
use rand::Rng;

use super::body::{WatchBody, WatchParams};
use super::encoding::{ProtoWatch, TableWatch, WatchEncoding};
use super::event::value_line;
use super::filter::{WatchFilter, NAME};
use super::hub::{Start, TooOld};
use crate::body::{self, Body};
use crate::cache::forward::Forward;
use crate::cache::fresh::ConsistentRead;
use crate::cache::read_at;
use crate::cache::registry::Registry;
use crate::cache::serve::fields_indexed;
use crate::negotiate::{Conversion, Encoding};
use crate::proxy::headers::Source;
use crate::request::{ApiPath, Parsed, ResourceVersion, Verb, WatchTimeout};
use crate::selector::field::Term;
use crate::status::Status;
use crate::table::TableOptions;

/// Without timeoutSeconds, kube-apiserver picks minRequestTimeout (1800 s) × [1, 2), so
/// that reconnects spread out (handlers/get.go).
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);

/// Serves the watch from the cache if it can; otherwise says why it is forwarded. When
/// the gateway drains, the stream ends at an event boundary
/// ([`Registry::shutdown_watches`]).
pub async fn try_watch(registry: &Arc<Registry>, req: &Parsed) -> Result<Response<Body>, Forward> {
    let arrived = std::time::Instant::now();
    if req.api.method != Method::GET {
        return Err(Forward::NotARead);
    }
    let ApiPath::Resource(rp) = &req.api.path else {
        return Err(Forward::NotARead);
    };
    // A path only the upstream can interpret (`crate::apipath`) is its to answer.
    if req.api.verb != Verb::Watch
        || !rp.canonical
        || rp.subresource.is_some()
        || !rp.extra.is_empty()
    {
        return Err(Forward::NotARead);
    }
    if req.api.query_get("pretty").is_some() {
        return Err(Forward::Pretty);
    }
    let mut opts = req.valid_options().ok_or(Forward::Options)?.clone();
    // A name in the path becomes (or must agree with) a metadata.name field selector
    // (handlers/get.go); a disagreement is the upstream's 400 to give.
    if let Some(name) = &rp.name {
        match opts.field_selector.requires_exact(NAME) {
            _ if opts.field_selector.is_empty() => opts.field_selector.terms.push(Term {
                field: NAME.into(),
                equals: true,
                value: name.clone(),
            }),
            Some(n) if n == name => {}
            _ => return Err(Forward::Options),
        }
    }
    // Unset: "Get State and Start at Most Recent", a consistent read.
    let consistent = opts.rv == ResourceVersion::Unset;
    let rv = opts.rv.number().map_err(|_| Forward::Options)?;
    // A stream the cache never writes is forwarded before any wait for a cold cache.
    let endpoint = if crate::model::resource::is_builtin_group(&rp.group) {
        crate::negotiate::Endpoint::BUILTIN
    } else {
        crate::negotiate::Endpoint::CUSTOM
    };
    match (
        req.accept.negotiate(endpoint),
        req.accept.negotiate_stream(endpoint),
    ) {
        (Ok(n), Ok(stream)) if stream.encoding == n.encoding && !n.pretty => {}
        _ => return Err(Forward::Representation),
    }

    // Join the cache's sync if it has not synced yet; a watch does not wait past its own
    // timeout.
    let bound = match opts.watch_timeout() {
        WatchTimeout::After(d) => d.min(registry.sync_wait()),
        _ => registry.sync_wait(),
    };
    let cache = registry
        .cache_for(&rp.group, &rp.version, &rp.resource, bound)
        .await?;
    let encoding = encoding(registry, &cache, req).ok_or(Forward::Representation)?;
    let own_namespace = rp.group.is_empty() && rp.resource == "namespaces";
    // Paths with no route: a cluster-scoped type under a namespace, a namespaced one by
    // name outside a namespace (`/api/v1/watch/pods/a`). The upstream's 404 to give.
    if (rp.namespace.is_some() && !cache.info.namespaced && !own_namespace)
        || (rp.name.is_some() && rp.namespace.is_none() && cache.info.namespaced)
    {
        return Err(Forward::NoRoute);
    }
    if !fields_indexed(&cache, &opts) {
        return Err(Forward::FieldSelector);
    }

    // A watch waits for a proof of freshness rather than being forwarded (`cache::fresh`).
    let how = ConsistentRead {
        stream: true,
        arrived,
    };
    let (start, min_rv, initial_events_end) = match opts.send_initial_events {
        // The state as fresh as a consistent read (its snapshot is taken when the watcher
        // registers, at least as new as the one proven fresh), then the changes.
        Some(send) if consistent => {
            let fresh = read_at::consistent(registry, &cache, how).await?;
            if send {
                (Start::Initial, 0, true)
            } else {
                // "Start at most recent": the changes after the upstream's RV when asked,
                // which may already be in the history.
                (Start::After(fresh.rv), fresh.rv, false)
            }
        }
        None if consistent => {
            // A legacy `/watch/` path (not defaulted to a watch-list): the initial state
            // without the closing bookmark.
            read_at::consistent(registry, &cache, how).await?;
            (Start::Initial, 0, false)
        }
        Some(true) => {
            // The state at N or later (and at the newest write made through the
            // gateway): as for lists, a short wait for the cache's own watch, then the
            // upstream answers (cache::read_at::CATCH_UP_WAIT).
            read_at::at_least(registry, &cache, rv).await?;
            (Start::Initial, 0, true)
        }
        Some(false) if rv == 0 => {
            let head = cache.store.resource_version();
            (Start::After(head), head, false)
        }
        None if rv == 0 => {
            read_at::at_least(registry, &cache, 0).await?;
            (Start::Initial, 0, false)
        }
        _ => (Start::After(rv), rv, false),
    };
    let filter = WatchFilter {
        namespace: rp
            .namespace
            .as_deref()
            .filter(|_| cache.info.namespaced)
            .map(Into::into),
        labels: opts.label_selector.clone(),
        fields: opts.field_selector.clone(),
    };
    let content_type = encoding.content_type();
    let protobuf = matches!(
        encoding,
        WatchEncoding::Protobuf(_) | WatchEncoding::MetadataProtobuf { .. }
    );
    let reg = match cache.store.watch(filter, encoding, start) {
        Ok(r) => r,
        Err(TooOld(requested, oldest)) => {
            let status = Status::too_old_resource_version(requested, oldest);
            let line = if protobuf {
                super::encoding::proto_status_frame(&status)
            } else {
                value_line("ERROR", &status.to_value())
            };
            return Ok(stream_response(body::full(line), content_type));
        }
    };
    let params = WatchParams {
        min_rv,
        allow_bookmarks: opts.allow_watch_bookmarks,
        initial_events_end,
        timeout: watch_timeout(opts.watch_timeout()),
    };
    let body = WatchBody::new(cache.store.hub().clone(), reg, params);
    let lane = Some(body.lane());
    let mut resp = stream_response(body::boxed(body), content_type);
    // Over HTTP/1.1 the connection streams it outside hyper (server/h1.rs), and the hub
    // may write lone events to it itself (server/express.rs).
    resp.extensions_mut()
        .insert(crate::lane::Detachable { lane });
    Ok(resp)
}

/// timeoutSeconds: honoured; negative (also after Go's overflow, see
/// `ListOptions::watch_timeout`) ends the watch at once (a timer that has already fired in
/// the apiserver); absent or 0 picks the randomised default.
fn watch_timeout(t: WatchTimeout) -> Duration {
    match t {
        WatchTimeout::Expired => Duration::ZERO,
        WatchTimeout::After(d) => d,
        WatchTimeout::Default => MIN_REQUEST_TIMEOUT.mul_f64(rand::rng().random_range(1.0..2.0)),
    }
}

/// The representation of the watch's events, negotiated as the apiserver negotiates it
/// for this type: the list negotiation (`NegotiateOutputMediaType`) decides the conversion,
/// the stream negotiation the encoding. The cache writes JSON objects, JSON
/// `PartialObjectMetadata` and Tables; protobuf, a watch asked as a list
/// (`PartialObjectMetadataList`), a bad `includeObject` and refusals go upstream.
fn encoding(
    registry: &Arc<Registry>,
    cache: &crate::cache::registry::ResourceCache,
    req: &Parsed,
) -> Option<WatchEncoding> {
    let endpoint = cache.info.endpoint();
    let n = req.accept.negotiate(endpoint).ok()?;
    let stream = req.accept.negotiate_stream(endpoint).ok()?;
    if stream.encoding != n.encoding || n.pretty {
        return None;
    }
    let proto_watch = || ProtoWatch {
        ty: cache.proto.object,
        api_version: cache.info.api_version(),
        kind: cache.info.kind.clone(),
        form: cache.proto.clone(),
        group: cache.info.group.clone(),
    };
    if n.encoding == Encoding::Protobuf {
        return match n.conversion {
            None => {
                cache.proto.types()?;
                Some(WatchEncoding::Protobuf(proto_watch()))
            }
            Some(Conversion::PartialObjectMetadata(version)) if cache.proto.metadata_ok() => {
                Some(WatchEncoding::MetadataProtobuf {
                    version,
                    form: proto_watch(),
                })
            }
            _ => None,
        };
    }
    match n.conversion {
        None => Some(WatchEncoding::Json),
        Some(Conversion::PartialObjectMetadata(version)) => Some(WatchEncoding::Metadata {
            version,
            unstructured: !cache.info.is_builtin(),
        }),
        Some(Conversion::Table(v)) => {
            let opts = TableOptions::new(v, req.api.query_get("includeObject")).ok()?;
            let convertor = crate::cache::serve::convertor(registry, cache)?;
            Some(WatchEncoding::Table(TableWatch::new(convertor, opts)))
        }
        Some(Conversion::PartialObjectMetadataList(_)) => None,
    }
}

fn stream_response(body: Body, content_type: &'static str) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::OK;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Source::Cache.mark(h);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ListOptions;

    #[test]
    fn timeouts_follow_the_apiserver() {
        let t = |seconds: i64| {
            watch_timeout(
                ListOptions {
                    timeout_seconds: Some(seconds),
                    ..Default::default()
                }
                .watch_timeout(),
            )
        };
        assert_eq!(t(5), Duration::from_secs(5));
        assert_eq!(t(-1), Duration::ZERO);
        // The largest value Go's int64 nanoseconds hold: about 292 years.
        assert_eq!(t(9_223_372_036), Duration::from_secs(9_223_372_036));
        // Go's multiplication wraps: past that the duration is negative (-1 s for
        // i64::MAX), so the watch ends at once...
        for n in [9_223_372_037, i64::MAX, i64::MAX / 2] {
            assert_eq!(t(n), Duration::ZERO, "{n}");
        }
        // A negative value that overflows wraps to a positive duration.
        assert_eq!(
            t(-9_223_372_037),
            Duration::from_nanos(9_223_372_036_709_551_616)
        );
        // ...or exactly 0 (multiples of 2^55, i64::MIN among them): the default.
        let default = |d: Duration| d >= Duration::from_secs(1800) && d < Duration::from_secs(3600);
        for d in [
            watch_timeout(ListOptions::default().watch_timeout()),
            t(0),
            t(1 << 55),
            t(i64::MIN),
        ] {
            assert!(default(d), "{d:?}");
        }
    }
}

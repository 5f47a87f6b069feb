//! Serving a watch from the fan-out, once the routing decision (`serve::route`) has sent
//! it here: the handler joins the cache's sync if it has not synced yet (bounded by the
//! watch's own timeout), checks the type's facts (`route::admit`), builds the encoding the
//! Accept header negotiated, waits for the state the watch starts from (`cache::read_at`:
//! a consistent one through `cache::fresh`; one at N or later; an RV the cache has not
//! reached within `CATCH_UP_WAIT` is forwarded) and registers the watcher with the hub.
//!
//! Where each kind of watch starts is [`WatchFrom`] (the documents' watch table,
//! kube-apiserver's cacher where they are silent): `resourceVersion="0"` the current state
//! as ADDED events, then changes; `resourceVersion="N"` the changes after N, from the
//! history (410 in an ERROR event when N is older than it; a wait when N is newer, as
//! api-concepts allows: "the API server may wait indefinitely"); `sendInitialEvents=true`
//! the initial events, then the `k8s.io/initial-events-end` bookmark; resourceVersion
//! unset ("Get State and Start at Most Recent", client-go's watch-list) once the cache is
//! proven fresh (`cache::fresh`; forwarded when it cannot be in time).

use std::sync::Arc;
use std::time::Duration;

use http::{header, HeaderValue, Response, StatusCode};
use rand::Rng;

use super::route::{WatchFrom, WatchTarget};
use crate::body::{self, Body};
use crate::cache::forward::Forward;
use crate::cache::fresh::ConsistentRead;
use crate::cache::read_at;
use crate::cache::registry::{Registry, ResourceCache};
use crate::negotiate::{Conversion, Encoding};
use crate::proxy::headers::Source;
use crate::request::{Parsed, WatchTimeout};
use crate::status::Status;
use crate::table::TableOptions;
use crate::watch::body::{WatchBody, WatchParams};
use crate::watch::encoding::{ProtoWatch, TableWatch, WatchEncoding};
use crate::watch::event::value_line;
use crate::watch::filter::WatchFilter;
use crate::watch::hub::{Start, TooOld};

/// Without timeoutSeconds, kube-apiserver picks minRequestTimeout (1800 s) × [1, 2), so
/// that reconnects spread out (handlers/get.go).
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);

/// Serves a watch routed to the fan-out, or says why it is forwarded after all. When the
/// gateway drains, the stream ends at an event boundary ([`Registry::shutdown_watches`]).
pub async fn answer(
    registry: &Arc<Registry>,
    req: &Parsed,
    plan: WatchTarget<'_>,
    looked_up: Option<Arc<ResourceCache>>,
) -> Result<Response<Body>, Forward> {
    let arrived = std::time::Instant::now();
    let t = &plan.target;
    let opts = &t.opts;
    // Join the cache's sync if it has not synced yet; a watch does not wait past its own
    // timeout.
    let bound = match opts.watch_timeout() {
        WatchTimeout::After(d) => d.min(registry.sync_wait()),
        _ => registry.sync_wait(),
    };
    let cache = super::read::synced(registry, t, looked_up, bound).await?;
    let encoding = encoding(registry, &cache, req).ok_or(Forward::Representation)?;

    // A watch waits for a proof of freshness rather than being forwarded (`cache::fresh`).
    let how = ConsistentRead {
        stream: true,
        arrived,
    };
    let (start, min_rv, initial_events_end) = match plan.from {
        // The state as fresh as a consistent read (its snapshot is taken when the watcher
        // registers, at least as new as the one proven fresh), then the changes.
        WatchFrom::Consistent {
            send_initial_events,
        } => {
            let fresh = read_at::consistent(&cache, how).await?;
            match send_initial_events {
                Some(true) => (Start::Initial, 0, true),
                // "Start at most recent": the changes after the upstream's RV when asked,
                // which may already be in the history.
                Some(false) => (Start::After(fresh.rv), fresh.rv, false),
                // A legacy `/watch/` path (not defaulted to a watch-list): the initial
                // state without the closing bookmark.
                None => (Start::Initial, 0, false),
            }
        }
        // The state at N or later (and at the newest write made through the gateway): as
        // for lists, a short wait for the cache's own watch, then the upstream answers
        // (cache::read_at::CATCH_UP_WAIT).
        WatchFrom::StateNotOlderThan(rv) => {
            read_at::at_least(registry, &cache, rv).await?;
            (Start::Initial, 0, true)
        }
        WatchFrom::Head => {
            let head = cache.store.resource_version();
            (Start::After(head), head, false)
        }
        WatchFrom::AnyState => {
            read_at::at_least(registry, &cache, 0).await?;
            (Start::Initial, 0, false)
        }
        WatchFrom::After(rv) => (Start::After(rv), rv, false),
    };
    let filter = WatchFilter {
        namespace: t
            .namespace
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
                crate::watch::encoding::proto_status_frame(&status)
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
    cache: &ResourceCache,
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
            let convertor = super::read::convertor(registry, cache)?;
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

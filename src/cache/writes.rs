//! Read-your-writes for writes made through the gateway.
//!
//! A write's answer carries the object at the write's resourceVersion w. Before that answer
//! leaves the gateway, w becomes the resource's *write fence*: from then on every read the
//! cache answers for that resource (any resourceVersion semantics but Exact, which names
//! its state) is served from a state at w or later, waiting the few milliseconds the
//! write's own event takes to arrive on the cache's stream (or forwarded, past
//! `cache::read_at::CATCH_UP_WAIT`). No upstream request is needed: the answer told the RV.
//!
//! The fence is per resource, for every client: the gateway cannot tell one client from
//! another (no client authentication yet, and `kubectl apply` then `kubectl get` are two
//! processes on two connections), and a state at w is what any client that learned of the
//! write expects.
//!
//! Some answers carry no usable resourceVersion: a DELETE's (a `Status`, or the deleted
//! object, whose RV the API does not promise to be the deletion's), other `Status`
//! answers (pods/binding, pods/eviction), collections (deletecollection), bodies larger
//! than [`MAX_BUFFERED`] or encodings the gateway does not read. Those raise an *unknown*
//! fence: the next cached read of the resource asks the upstream for its current RV first
//! (`fresh::Freshness::current_rv`, a probe sent after that read arrived, hence after the
//! write's answer) and uses it as the fence. The probe is paid once per batch of such
//! writes, and only if a cached read follows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use dashmap::DashMap;
use http::{header, Method, Response};
use http_body_util::BodyExt;
use serde::Deserialize;

use super::fresh::{Freshness, NotFresh};
use crate::body::{self, Body, BoxError};
use crate::request::{ApiPath, Parsed};

/// Write answers up to this size are read whole to find their resourceVersion (etcd's
/// objects are at most 1.5 MiB); larger ones stream through and raise an unknown fence.
pub const MAX_BUFFERED: usize = 4 * 1024 * 1024;

/// Subresources whose writes change the parent object (so its cache).
const MUTATING_SUBRESOURCES: &[&str] = &[
    "status",
    "scale",
    "binding",
    "eviction",
    "finalize",
    "approval",
    "ephemeralcontainers",
    "resize",
];

/// One resource's fence.
#[derive(Debug, Default)]
struct Fence {
    /// Cached reads must come from a state at this RV or later.
    rv: AtomicU64,
    /// Writes acknowledged with no usable RV so far.
    unknown: AtomicU64,
    /// Of those, how many a probe has covered (its RV is in `rv`).
    covered: AtomicU64,
}

/// The fences of every resource written through this gateway, by (group, resource).
#[derive(Debug, Default)]
pub struct WriteFences {
    fences: DashMap<(String, String), Arc<Fence>>,
}

/// What a write's answer says about its resourceVersion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteRv {
    Known(u64),
    Unknown,
}

impl WriteFences {
    fn fence(&self, group: &str, resource: &str) -> Arc<Fence> {
        if let Some(f) = self.fences.get(&(group.to_string(), resource.to_string())) {
            return f.clone();
        }
        self.fences
            .entry((group.to_string(), resource.to_string()))
            .or_default()
            .clone()
    }

    /// Records an acknowledged write (called before its answer goes to the client).
    pub fn record(&self, group: &str, resource: &str, rv: WriteRv) {
        let f = self.fence(group, resource);
        match rv {
            WriteRv::Known(rv) => {
                f.rv.fetch_max(rv, Ordering::AcqRel);
            }
            WriteRv::Unknown => {
                f.unknown.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    /// Forgets every fence: the upstream went back, and the old cluster's resourceVersions
    /// say nothing about the new one's (they would hold every read off the cache until the
    /// new cluster passed them).
    pub fn clear(&self) {
        self.fences.clear();
    }

    /// The resourceVersion a cached read of this resource must not be older than: the
    /// newest write acknowledged through the gateway. When some write's RV is unknown, a
    /// probe sent now (after the read arrived, so after that write's answer) supplies it.
    pub async fn floor(
        &self,
        group: &str,
        resource: &str,
        fresh: &Arc<Freshness>,
    ) -> Result<u64, NotFresh> {
        let Some(f) = self
            .fences
            .get(&(group.to_string(), resource.to_string()))
            .map(|f| f.clone())
        else {
            return Ok(0);
        };
        let unknown = f.unknown.load(Ordering::Acquire);
        if unknown > f.covered.load(Ordering::Acquire) {
            // Every write counted in `unknown` was acknowledged before this load, and the
            // probe is sent after it: its RV covers them all.
            let rv = fresh.current_rv().await?;
            f.rv.fetch_max(rv, Ordering::AcqRel);
            f.covered.fetch_max(unknown, Ordering::AcqRel);
        }
        Ok(f.rv.load(Ordering::Acquire))
    }
}

/// The (group, resource) a write changes, if the request is one (and not a dry run).
pub fn written_resource(req: &Parsed) -> Option<(&str, &str)> {
    if !matches!(
        req.api.method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) {
        return None;
    }
    let ApiPath::Resource(rp) = &req.api.path else {
        return None;
    };
    if req.api.dry_run() || !rp.extra.is_empty() {
        return None;
    }
    match rp.subresource.as_deref() {
        None => {}
        Some(s) if MUTATING_SUBRESOURCES.contains(&s) => {}
        Some(_) => return None,
    }
    Some((&rp.group, &rp.resource))
}

/// Records the fence a forwarded write's answer implies, then returns the answer (its body
/// read whole when small enough to find the resourceVersion in it).
pub async fn observe(fences: &WriteFences, req: &Parsed, resp: Response<Body>) -> Response<Body> {
    let Some((group, resource)) = written_resource(req) else {
        return resp;
    };
    if !resp.status().is_success() {
        return resp;
    }
    // A DELETE's answer is a Status or the object, whose RV the API does not promise to
    // be the deletion's; a collection's is a list. Both get a probe on the next read.
    let object =
        req.resource().is_some_and(|rp| rp.name.is_some()) || req.api.method == Method::POST;
    if req.api.method == Method::DELETE || !object {
        fences.record(group, resource, WriteRv::Unknown);
        return resp;
    }
    let encoding = content_kind(&resp);
    let (parts, body) = resp.into_parts();
    match read_bounded(body, MAX_BUFFERED).await {
        Read::Whole(bytes) => {
            let rv = match encoding {
                Encoding::Json => json_rv(&bytes),
                Encoding::Protobuf => protobuf_rv(&bytes),
                Encoding::Other => None,
            };
            fences.record(group, resource, rv.map_or(WriteRv::Unknown, WriteRv::Known));
            Response::from_parts(parts, body::full(bytes))
        }
        Read::Partial(prefix, rest) => {
            fences.record(group, resource, WriteRv::Unknown);
            Response::from_parts(parts, prepend(prefix, rest))
        }
        Read::Failed(prefix, err) => {
            // The client gets what arrived, then the same failure.
            fences.record(group, resource, WriteRv::Unknown);
            let frames = futures_util::stream::iter([Ok(http_body::Frame::data(prefix)), Err(err)]);
            Response::from_parts(parts, body::boxed(http_body_util::StreamBody::new(frames)))
        }
    }
}

enum Encoding {
    Json,
    Protobuf,
    Other,
}

fn content_kind(resp: &Response<Body>) -> Encoding {
    if resp.headers().contains_key(header::CONTENT_ENCODING) {
        // gzip (answers above 128 KiB): not worth inflating for the fence.
        return Encoding::Other;
    }
    let ct = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if ct.starts_with("application/json") {
        Encoding::Json
    } else if ct.starts_with("application/vnd.kubernetes.protobuf") {
        Encoding::Protobuf
    } else {
        Encoding::Other
    }
}

enum Read {
    Whole(Bytes),
    /// The first bytes, and the body they came from (too large to read whole).
    Partial(Bytes, Body),
    Failed(Bytes, BoxError),
}

async fn read_bounded(mut body: Body, max: usize) -> Read {
    let mut buf = BytesMut::new();
    loop {
        match body.frame().await {
            None => return Read::Whole(buf.freeze()),
            Some(Err(e)) => return Read::Failed(buf.freeze(), e),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                    if buf.len() > max {
                        return Read::Partial(buf.freeze(), body);
                    }
                }
            }
        }
    }
}

fn prepend(prefix: Bytes, rest: Body) -> Body {
    let first = http_body_util::Full::new(prefix).map_err(|never| match never {});
    let frames =
        futures_util::stream::unfold((Some(first), rest), |(first, mut rest)| async move {
            if let Some(mut f) = first {
                if let Some(frame) = f.frame().await {
                    return Some((frame, (None, rest)));
                }
            }
            rest.frame().await.map(|frame| (frame, (None, rest)))
        });
    body::boxed(http_body_util::StreamBody::new(frames))
}

#[derive(Deserialize)]
struct JsonHead {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Option<JsonMeta>,
}

#[derive(Deserialize)]
struct JsonMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
}

/// `metadata.resourceVersion` of an object (not of a `Status`).
fn json_rv(bytes: &[u8]) -> Option<u64> {
    let head: JsonHead = serde_json::from_slice(bytes).ok()?;
    if head.kind == "Status" {
        return None;
    }
    head.metadata?.resource_version.parse().ok()
}

/// `metadata.resourceVersion` of an object in Kubernetes' protobuf envelope: the magic
/// `k8s\0`, then a `runtime.Unknown` (1: TypeMeta {1: apiVersion, 2: kind}, 2: raw),
/// whose raw object has its ObjectMeta in field 1 (every API type's `metadata = 1`) and
/// ObjectMeta has `resourceVersion = 6`.
fn protobuf_rv(bytes: &[u8]) -> Option<u64> {
    let unknown = bytes.strip_prefix(b"k8s\0")?;
    let type_meta = proto_field(unknown, 1)?;
    if proto_field(type_meta, 2)? == b"Status" {
        return None;
    }
    let raw = proto_field(unknown, 2)?;
    let meta = proto_field(raw, 1)?;
    std::str::from_utf8(proto_field(meta, 6)?)
        .ok()?
        .parse()
        .ok()
}

/// The first length-delimited field `number` of a protobuf message.
fn proto_field(mut msg: &[u8], number: u64) -> Option<&[u8]> {
    fn varint(buf: &mut &[u8]) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = buf.split_first()?;
            *buf = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    while !msg.is_empty() {
        let key = varint(&mut msg)?;
        let (field, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                varint(&mut msg)?;
            }
            1 => msg = msg.get(8..)?,
            5 => msg = msg.get(4..)?,
            2 => {
                let len = usize::try_from(varint(&mut msg)?).ok()?;
                let value = msg.get(..len)?;
                msg = &msg[len..];
                if field == number {
                    return Some(value);
                }
            }
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len_field(number: u64, value: &[u8]) -> Vec<u8> {
        let mut out = vec![((number << 3) | 2) as u8];
        let mut len = value.len();
        loop {
            let b = (len & 0x7f) as u8;
            len >>= 7;
            if len == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        }
        out.extend_from_slice(value);
        out
    }

    #[test]
    fn the_resource_version_of_json_answers() {
        assert_eq!(
            json_rv(br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"42"}}"#),
            Some(42)
        );
        assert_eq!(
            json_rv(br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success"}"#),
            None
        );
        assert_eq!(json_rv(b"not json"), None);
        assert_eq!(json_rv(br#"{"kind":"Pod","metadata":{"name":"a"}}"#), None);
    }

    #[test]
    fn the_resource_version_of_protobuf_answers() {
        // ObjectMeta{name: "a" (1), resourceVersion: "1234" (6)}, inside a Pod (1: metadata,
        // 2: spec), inside runtime.Unknown{typeMeta, raw}.
        let mut meta = len_field(1, b"a");
        meta.extend(len_field(6, b"1234"));
        let mut pod = len_field(1, &meta);
        pod.extend(len_field(2, b"\x0a\x00"));
        let mut type_meta = len_field(1, b"v1");
        type_meta.extend(len_field(2, b"Pod"));
        let mut unknown = b"k8s\0".to_vec();
        unknown.extend(len_field(1, &type_meta));
        unknown.extend(len_field(2, &pod));
        unknown.extend(len_field(4, b"application/vnd.kubernetes.protobuf"));
        assert_eq!(protobuf_rv(&unknown), Some(1234));
        // A Status has no object RV.
        let mut status_tm = len_field(1, b"v1");
        status_tm.extend(len_field(2, b"Status"));
        let mut status = b"k8s\0".to_vec();
        status.extend(len_field(1, &status_tm));
        status.extend(len_field(2, &len_field(1, b"")));
        assert_eq!(protobuf_rv(&status), None);
        // Truncated or foreign bytes never panic.
        for cut in 0..unknown.len() - 40 {
            assert_eq!(protobuf_rv(&unknown[..cut]), None, "{cut}");
        }
        assert_eq!(protobuf_rv(b"{}"), None);
    }

    #[test]
    fn writes_that_change_a_resource() {
        let parsed =
            |m: Method, uri: &str| Parsed::new(&m, &uri.parse().unwrap(), &Default::default());
        let p = parsed(Method::PATCH, "/api/v1/namespaces/a/pods/x/status");
        assert_eq!(written_resource(&p), Some(("", "pods")));
        let p = parsed(Method::POST, "/apis/apps/v1/namespaces/a/deployments");
        assert_eq!(written_resource(&p), Some(("apps", "deployments")));
        assert_eq!(
            written_resource(&parsed(Method::GET, "/api/v1/namespaces/a/pods/x")),
            None
        );
        assert_eq!(
            written_resource(&parsed(Method::POST, "/api/v1/namespaces/a/pods/x/exec")),
            None
        );
        assert_eq!(
            written_resource(&parsed(
                Method::POST,
                "/api/v1/namespaces/a/pods?dryRun=All"
            )),
            None
        );
    }
}

//! GET of one object and LIST of a collection.
//!
//! Follows k8s.io/apiserver: handlers/get.go (`ListResource`: decode → validate → field
//! label conversion), storage `ValidateListOptions` (continue/RV errors), the cacher
//! delegator (`ShouldDelegateList`: which reads are Exact), etcd3 `store.go` `GetList`
//! (paging, `continue`, `remainingItemCount`, compaction errors) and watch_cache.go
//! (`blockTimeout` 3 s, then "Too large resource version"). See docs/simulator.md.

// `Status` is the error currency of every handler (one per failed request), so its size
// does not matter on these paths.
#![allow(clippy::result_large_err)]

use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use serde_json::{json, Value};
use std::sync::Arc;

use crate::body::{self, Body};
use crate::codec::continue_token::{ContinueToken, KeyForm};
use crate::codec::gzip;
use crate::request::{parse_resource_version, ApiRequest, ListOptions, ResourcePath, RvMatch};
use crate::selector::field::field_value;
use crate::selector::FieldSelector;
use crate::sim::answer::{self, Answer};
use crate::sim::list_stream::ListStream;
use crate::sim::protobuf;
use crate::sim::resources::ResourceType;
use crate::sim::store::{HistoryError, ReadAt};
use crate::sim::{convert, object_response, Sim};
use crate::status::Status;

/// etcd3 store.go `expired`.
pub const LIST_TOO_OLD: &str = "The resourceVersion for the provided list is too old.";
/// etcd3 store.go `inconsistentContinue`.
pub const INCONSISTENT_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// kube-apiserver's `resourceVersionTooHighRetrySeconds`.
pub const TOO_LARGE_RETRY_SECONDS: u32 = 1;

/// Types whose field label conversion is registered in pkg/apis/core/v1/conversion.go
/// (they answer "field label not supported: X"); every other type uses
/// `DefaultMetaV1FieldSelectorConversion`.
fn custom_field_conversion(rt: &ResourceType) -> bool {
    rt.group.is_empty()
        && matches!(
            rt.resource,
            "pods" | "nodes" | "events" | "namespaces" | "secrets" | "services"
        )
}

/// The field selector labels this type accepts, or the apiserver's 400 for the first one
/// it does not. Nodes and namespaces do not accept `metadata.namespace`.
pub fn check_field_labels(rt: &ResourceType, fs: &FieldSelector) -> Result<(), Status> {
    for t in &fs.terms {
        let supported = match t.field.as_str() {
            "metadata.namespace" => rt.namespaced,
            "spec.host" => rt.resource == "pods" && rt.group.is_empty(),
            "status.podIPs" => rt.resource == "pods" && rt.group.is_empty(),
            other => rt.field_path(other).is_some(),
        };
        if !supported {
            let msg = if custom_field_conversion(rt) {
                format!("field label not supported: {}", t.field)
            } else {
                format!(
                    "\"{}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                    t.field
                )
            };
            return Err(Status::bad_request(msg));
        }
    }
    Ok(())
}

/// The selectable value of `label` on `obj` (pod/node strategies' `ToSelectableFields`:
/// booleans are `strconv.FormatBool`, so a missing one is "false").
pub fn selectable_value(rt: &ResourceType, obj: &Value, label: &str) -> String {
    let label = if label == "spec.host" {
        "spec.nodeName"
    } else {
        label
    };
    if label == "status.podIPs" {
        // The pod strategy exposes only the first IP.
        return obj
            .pointer("/status/podIPs/0/ip")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
    }
    let Some(path) = rt.field_path(label) else {
        return String::new();
    };
    let v = field_value(obj, path);
    if v.is_empty() && matches!(label, "spec.hostNetwork" | "spec.unschedulable") {
        return "false".into();
    }
    v
}

/// Whether `obj` matches both selectors.
pub fn matches(rt: &ResourceType, opts: &ListOptions, obj: &Value) -> bool {
    opts.label_selector.matches(obj)
        && opts
            .field_selector
            .matches_with(|f| selectable_value(rt, obj, f))
}

/// Waits for this server's view to reach `rv` (up to the configured 3 s), else the 504.
/// The view is the store's, or less while it is frozen (a lagging apiserver).
pub async fn wait_for_rv(sim: &Sim, rv: u64) -> Result<(), Status> {
    if sim.visible_rv() >= rv {
        return Ok(());
    }
    let mut writes = sim.store.subscribe();
    let mut freezes = sim.faults.frozen_signal();
    let reached = tokio::time::timeout(sim.cfg.too_large_rv_wait, async {
        loop {
            writes.borrow_and_update();
            freezes.borrow_and_update();
            if sim.visible_rv() >= rv {
                return;
            }
            tokio::select! {
                r = writes.changed() => if r.is_err() { std::future::pending::<()>().await },
                r = freezes.changed() => if r.is_err() { std::future::pending::<()>().await },
            }
        }
    })
    .await;
    if reached.is_ok() {
        return Ok(());
    }
    Err(Status::too_large_resource_version(
        rv,
        sim.visible_rv(),
        TOO_LARGE_RETRY_SECONDS,
    ))
}

/// What a list reads, after the RV table is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Current state (Most Recent / Any / Not older than, after the wait).
    Latest,
    /// State exactly at RV (410 if compacted).
    Exact(u64),
}

/// The resourceVersion × resourceVersionMatch × limit/continue table
/// (api-concepts.md "Semantics for get and list"), as storage `ValidateListOptions` +
/// `ShouldDelegateList` implement it. Returns the read plan, the continue position, and
/// the RV the caller must wait for first (Not older than).
pub fn plan(
    opts: &ListOptions,
    prefix: &str,
    compacted: u64,
) -> Result<(Plan, Option<ContinueToken>, Option<u64>), Status> {
    let rv_str = opts.resource_version.as_deref().unwrap_or("");
    if let Some(tok) = &opts.continue_token {
        let t = ContinueToken::decode(tok, prefix)
            .map_err(|e| Status::bad_request(format!("invalid continue token: {e}")))?;
        if !rv_str.is_empty() && rv_str != "0" {
            return Err(Status::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        if t.rv < 0 {
            return Ok((Plan::Latest, Some(t), None));
        }
        // etcd3's tokens expire when their revision is compacted (every 5 minutes by
        // default); the Status carries a token that continues at the latest revision,
        // as `handleCompactedErrorForPaging` does. 1.36's cacher drops its snapshots
        // below a compaction (`watchCache.Compact`) and delegates such a page to etcd3,
        // whose key prefix ends in a slash: that token's start key is relative.
        if (t.rv as u64) < compacted {
            let mut s = Status::expired(INCONSISTENT_CONTINUE);
            s.list_continue = Some(
                ContinueToken {
                    rv: -1,
                    start_after: t.start_after.clone(),
                }
                .encode(prefix, KeyForm::Relative),
            );
            return Err(s);
        }
        let rv = t.rv as u64;
        return Ok((Plan::Exact(rv), Some(t), None));
    }
    let rv = parse_resource_version(rv_str)
        .map_err(|e| Status::bad_request(format!("invalid resource version: {e}")))?;
    let p = match opts.rv_match {
        Some(RvMatch::Exact) => (Plan::Exact(rv), None, Some(rv)),
        Some(RvMatch::NotOlderThan) => (Plan::Latest, None, (rv > 0).then_some(rv)),
        None => {
            if rv > 0 && opts.limit.is_some() {
                // Legacy: RV=N with a limit is an Exact read.
                (Plan::Exact(rv), None, Some(rv))
            } else {
                (Plan::Latest, None, (rv > 0).then_some(rv))
            }
        }
    };
    Ok(p)
}

/// Items of a typed list omit kind/apiVersion (empty TypeMeta); custom resources keep them.
fn strip_type_meta(rt: &ResourceType) -> bool {
    !rt.is_custom()
}

/// LIST.
pub async fn handle(
    sim: &Arc<Sim>,
    api: &ApiRequest,
    headers: &HeaderMap,
    rt: &'static ResourceType,
    rp: &ResourcePath,
) -> Response<Body> {
    sim.stats.record_request(
        "list",
        &rt.group_resource().to_string(),
        &api.query,
        headers,
    );
    // Negotiation comes first, before the options are decoded (handlers/get.go).
    let answer = match Answer::negotiate(rt, headers, api) {
        Ok(a) => a,
        Err(s) => return answer::error(&s, headers, api),
    };
    match list(sim, api, &answer, rt, rp, gzip::accepts_gzip(headers)).await {
        // kube-apiserver gzips answers above 128 KiB for clients that accept it
        // (responsewriters/writers.go); errors are far below the threshold. A streamed
        // list has made that choice already (it is returned unchanged here).
        Ok(r) => gzip::compress_full_response(headers, r).await,
        Err(s) => answer::error(&s, headers, api),
    }
}

async fn list(
    sim: &Arc<Sim>,
    api: &ApiRequest,
    answer: &Answer,
    rt: &'static ResourceType,
    rp: &ResourcePath,
    gzip_ok: bool,
) -> Result<Response<Body>, Status> {
    let opts = api.list_options()?;
    check_field_labels(rt, &opts.field_selector)?;
    // Keys are `namespace/name`; a namespaced list's tokens are relative to its namespace,
    // as kube-apiserver's are relative to `/registry/<resource>/<namespace>`.
    let prefix = match rp.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/"),
        _ => String::new(),
    };
    let (plan, cont, wait) = plan(&opts, &prefix, sim.store.compacted_rv())?;
    if let Some(rv) = wait {
        wait_for_rv(sim, rv).await?;
    }
    // A consistent read (no resourceVersion, no continue) comes from etcd; the others
    // from the watch cache, which a frozen (lagging) server serves at its own RV.
    let consistent = opts.resource_version.as_deref().unwrap_or("").is_empty() && cont.is_none();
    let at = match plan {
        Plan::Latest if !consistent && sim.visible_rv() < sim.store.current_rv() => {
            ReadAt::Exact(sim.visible_rv())
        }
        Plan::Latest => ReadAt::Latest,
        Plan::Exact(rv) => ReadAt::Exact(rv),
    };
    let snap = sim
        .store
        .snapshot(rt, rp.namespace.as_deref(), at)
        .map_err(|e| match e {
            HistoryError::Compacted { .. } => {
                if cont.is_some() {
                    Status::expired(INCONSISTENT_CONTINUE)
                } else {
                    Status::expired(LIST_TOO_OLD)
                }
            }
        })?;
    let start = match &cont {
        Some(t) => snap
            .items
            .partition_point(|(k, _)| k.as_str() <= t.start_after.as_str()),
        None => 0,
    };
    let selecting = !opts.label_selector.is_empty() || !opts.field_selector.is_empty();
    // kube-apiserver serves RV="0" lists from its watch cache, which ignores `limit`
    // (cacher.go `computeListLimit`): the whole list comes back, with no continue token.
    let limit = match opts.limit {
        Some(_) if opts.resource_version.as_deref() == Some("0") && cont.is_none() => usize::MAX,
        Some(l) => l as usize,
        None => usize::MAX,
    };
    let mut picked: Vec<&Arc<Value>> = Vec::new();
    let mut last_idx = start;
    for (i, (_, obj)) in snap.items.iter().enumerate().skip(start) {
        if picked.len() >= limit {
            break;
        }
        last_idx = i + 1;
        if !selecting || matches(rt, &opts, obj) {
            picked.push(obj);
        }
    }
    let remaining = snap.items.len() - last_idx.max(start);
    let mut meta = serde_json::Map::new();
    meta.insert("resourceVersion".into(), json!(snap.rv.to_string()));
    if picked.len() >= limit && remaining > 0 {
        let token = ContinueToken {
            rv: snap.rv as i64,
            start_after: snap.items[last_idx - 1].0.clone(),
        };
        // kube-apiserver 1.36 serves pages from its watch cache's snapshots
        // (`ListFromCacheSnapshot`), whose `GetList` trims the request's key (`/pods/ns`,
        // no trailing slash) from the object's: the start key keeps its leading slash
        // (k8s.io/apiserver pkg/storage/cacher/cacher.go, storage/continue.go). An older
        // apiserver, paging from etcd3, is one `continue_form` away.
        let form = sim.cfg.continue_form;
        meta.insert("continue".into(), json!(token.encode(&prefix, form)));
        if !selecting {
            meta.insert("remainingItemCount".into(), json!(remaining));
        }
    }
    if !answer.is_plain() {
        // Table / PartialObjectMetadataList (convert.rs), protobuf, or pretty JSON.
        let list_meta = Value::Object(meta);
        let items: Vec<&Value> = picked.iter().map(|o| o.as_ref()).collect();
        let v = match convert::list(sim, rt, answer, api, &list_meta, &items)? {
            Some(converted) => converted,
            // A typed list in protobuf: its items encoded one by one into the envelope.
            None if answer.is_protobuf() => {
                let encoded = protobuf::encode_list(rt, &list_meta, &items);
                return Ok(answer::protobuf_response(StatusCode::OK, encoded));
            }
            None => list_value(rt, list_meta, &items),
        };
        return Ok(answer.object(StatusCode::OK, &v));
    }
    // Compact JSON: streamed item by item, as kube-apiserver 1.34+ writes it
    // (list_stream.rs).
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(b"{\"kind\":");
    let _ = serde_json::to_writer(&mut head, rt.list_kind);
    head.extend_from_slice(b",\"apiVersion\":");
    let _ = serde_json::to_writer(&mut head, &rt.api_version());
    head.extend_from_slice(b",\"metadata\":");
    let _ = serde_json::to_writer(&mut head, &meta);
    head.extend_from_slice(b",\"items\":[");
    let items = picked.into_iter().cloned().collect();
    let negotiated = ListStream::new(head, items, strip_type_meta(rt)).into_body(gzip_ok);
    let mut resp = Response::new(body::empty());
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(gzip::respond(resp, negotiated))
}

/// The list as a JSON value (the pretty-printed path; the compact one is written straight
/// into bytes above).
fn list_value(rt: &ResourceType, list_meta: Value, items: &[&Value]) -> Value {
    let strip = strip_type_meta(rt);
    let items: Vec<Value> = items
        .iter()
        .map(|o| match o.as_object() {
            Some(m) if strip => Value::Object(
                m.iter()
                    .filter(|(k, _)| *k != "kind" && *k != "apiVersion")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
            _ => (*o).clone(),
        })
        .collect();
    json!({"kind": rt.list_kind, "apiVersion": rt.api_version(), "metadata": list_meta,
           "items": items})
}

/// GET of one object: RV unset → latest, "0" → any, N → not older than N (wait, 504).
pub async fn get(
    sim: &Arc<Sim>,
    api: &ApiRequest,
    headers: &HeaderMap,
    rt: &'static ResourceType,
    ns: &str,
    name: &str,
) -> Response<Body> {
    sim.stats
        .record_request("get", &rt.group_resource().to_string(), &api.query, headers);
    let answer = match Answer::negotiate(rt, headers, api) {
        Ok(a) => a,
        Err(s) => return answer::error(&s, headers, api),
    };
    match get_object(sim, api, &answer, rt, ns, name).await {
        Ok(r) => gzip::compress_full_response(headers, r).await,
        Err(s) => answer::error(&s, headers, api),
    }
}

async fn get_object(
    sim: &Arc<Sim>,
    api: &ApiRequest,
    answer: &Answer,
    rt: &'static ResourceType,
    ns: &str,
    name: &str,
) -> Result<Response<Body>, Status> {
    if let Some(rv) = api.query_get("resourceVersion") {
        match parse_resource_version(rv) {
            // The cacher returns the storage InvalidError as is: not an APIStatus, so
            // the handler answers 500 with an empty reason.
            Err(e) => return Err(Status::new(500, "", e.to_string())),
            Ok(n) if n > 0 => wait_for_rv(sim, n).await?,
            Ok(_) => {}
        }
    }
    let obj = sim
        .store
        .get(rt, ns, name)
        .ok_or_else(|| Status::not_found(&rt.group_resource(), name))?;
    Ok(match convert::object(sim, rt, answer, api, &obj)? {
        Some(converted) => answer.object(StatusCode::OK, &converted),
        None if answer.is_plain() => object_response(&obj),
        None => answer.object(StatusCode::OK, &obj),
    })
}

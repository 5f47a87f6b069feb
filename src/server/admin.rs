//! The admin listener: liveness and health, readiness, and Prometheus metrics.
//!
//! `/readyz` follows kube-apiserver's healthz handler: a list of named checks, a plain
//! `ok` (200) or a 500 naming what failed, and `?verbose` listing every check as
//! `[+]name ok` / `[-]name failed: reason`, ending in `readyz check passed|failed`. A check
//! that passes without what its name says (a state-file cache not synced after the
//! warm-up) reads `[+]name ok (why)`.
//! Readiness depends only on the upstream and the caches, never on a downstream client,
//! so one misbehaving client cannot make it flap.

use std::sync::Arc;

use crate::body::RequestBody;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};

use crate::body::{self, Body};
use crate::cache::registry::{self, Registry};
use crate::cache::warm::{Gvr, WarmStatus};
use crate::drain::DrainWatch;
use crate::server::probe::UpstreamProbe;
use crate::status::Status;

/// What the admin endpoints look at.
#[derive(Clone)]
pub struct AdminState {
    /// The upstream, probed by the `upstream` check until it first answers.
    pub upstream: Arc<UpstreamProbe>,
    pub cache: Option<Arc<Registry>>,
    pub drain: DrainWatch,
    /// Whether metrics are recorded (`GatewayConfig::metrics`).
    pub metrics: bool,
}

pub async fn handle(state: AdminState, req: Request<RequestBody>) -> Response<Body> {
    let path = req.uri().path();
    if path == CONSISTENCY_CHECK {
        if *req.method() != Method::POST {
            return Status::new(405, "MethodNotAllowed", "only POST is allowed").into_response();
        }
        let only = req.uri().query().and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "resource")
                .map(|(_, v)| v.into_owned())
        });
        return consistency_check(&state, only.as_deref()).await;
    }
    if !matches!(path, "/healthz" | "/livez" | "/readyz" | "/metrics") {
        return Status::path_not_found().into_response();
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return Status::new(405, "MethodNotAllowed", "only GET and HEAD are allowed")
            .into_response();
    }
    match path {
        "/readyz" => {
            let verbose = req
                .uri()
                .query()
                .is_some_and(|q| form_urlencoded::parse(q.as_bytes()).any(|(k, _)| k == "verbose"));
            readyz(&state, verbose).await
        }
        "/metrics" if !state.metrics => {
            Status::new(404, "NotFound", "metrics are disabled in this gateway").into_response()
        }
        "/metrics" => {
            if let Some(registry) = &state.cache {
                crate::cache::export::refresh_metrics(registry);
            }
            let text = crate::metrics::render();
            text_response(
                StatusCode::OK,
                text,
                "text/plain; version=0.0.4; charset=utf-8",
            )
        }
        _ => text_response(StatusCode::OK, "ok".into(), "text/plain; charset=utf-8"),
    }
}

/// An operator's consistency check of every synced cache (or of `?resource=`, named as
/// `--cache` names it: `pods`, `deployments.apps`), now (docs/operations.md).
const CONSISTENCY_CHECK: &str = "/cache/consistency-check";

/// Runs the checks one after another (each is one paged metadata list upstream) and
/// answers one line per cache, like `/readyz?verbose`: 200 when every cache matched the
/// upstream, 500 naming the ones that did not or could not be compared.
async fn consistency_check(state: &AdminState, only: Option<&str>) -> Response<Body> {
    let Some(registry) = &state.cache else {
        return Status::new(404, "NotFound", "caching is off in this gateway").into_response();
    };
    let mut caches: Vec<_> = registry
        .caches()
        .into_iter()
        .filter(|c| c.is_synced())
        .filter(|c| only.is_none_or(|spec| registry::names(spec, &c.info.group, &c.info.resource)))
        .collect();
    caches.sort_by_key(|c| qualified(&c.info));
    if caches.is_empty() {
        return Status::new(404, "NotFound", "no synced cache to check").into_response();
    }
    let (mut text, mut ok) = (String::new(), true);
    for c in caches {
        let report = c.consistency.check().await;
        let passed = report.result() == "success";
        ok &= passed;
        let mark = if passed { '+' } else { '-' };
        text.push_str(&format!("[{mark}]{} {report}\n", qualified(&c.info)));
    }
    text.push_str(if ok {
        "consistency check passed\n"
    } else {
        "consistency check failed\n"
    });
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    text_response(code, text, "text/plain; charset=utf-8")
}

/// A resource as `--cache` names it: `pods`, `deployments.apps`.
fn qualified(info: &crate::model::resource::ResourceInfo) -> String {
    Gvr::new(&info.group, &info.version, &info.resource).qualified()
}

/// One readiness check's outcome: its name and, when it failed, why.
struct Check {
    name: String,
    failure: Option<String>,
    /// For a check that passes without being what its name says (a state-file resource
    /// not synced after the warm-up): why it passes anyway, shown with `?verbose`.
    note: Option<String>,
}

impl Check {
    fn new(name: impl Into<String>, failure: Option<String>) -> Self {
        Self {
            name: name.into(),
            failure,
            note: None,
        }
    }
}

async fn checks(state: &AdminState) -> Vec<Check> {
    let mut out = vec![Check::new("ping", None)];
    out.push(Check::new(
        "shutdown",
        state
            .drain
            .is_draining()
            .then(|| "the gateway is draining".into()),
    ));
    out.push(Check::new(
        "upstream",
        (!state.upstream.reached().await).then(|| "the upstream has not answered yet".into()),
    ));
    if let Some(registry) = &state.cache {
        let caches = registry.caches();
        let dropped = registry.dropped();
        for spec in registry.prewarm_specs() {
            let cache = caches
                .iter()
                .find(|c| registry::names(spec, &c.info.group, &c.info.resource));
            // A `--cache` resource the byte budget refused fails its check with the reason:
            // it was asked to be cached and is not (docs/operations.md, "Readiness").
            let refused = || {
                dropped
                    .iter()
                    .find(|d| registry::names(spec, &d.info.group, &d.info.resource))
            };
            let failure = match cache {
                None => Some(match refused() {
                    Some(d) => format!("not cached: {}; its requests are forwarded", d.why),
                    None => "not started".to_string(),
                }),
                Some(c) if !c.is_synced() => Some("not synced".to_string()),
                Some(_) => None,
            };
            out.push(Check::new(format!("cache-{spec}"), failure));
        }
        if let Some((status, warm)) = registry.warm_status() {
            let over = tokio::time::Instant::now() >= warm.deadline;
            for (gvr, status) in status {
                // A `--cache` resource has its own check, which always counts.
                if registry
                    .prewarm_specs()
                    .iter()
                    .any(|spec| registry::names(spec, &gvr.group, &gvr.resource))
                {
                    continue;
                }
                out.push(warm_check(&gvr, status, over, warm.timeout));
            }
        }
        // What each cache's last consistency check found. Informational: a difference is
        // being repaired by a re-sync (consistent reads are forwarded meanwhile), and one
        // resource must not take the whole gateway out of service.
        let mut by_name: Vec<_> = caches.iter().map(|c| (qualified(&c.info), c)).collect();
        by_name.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, c) in by_name {
            let mut check = Check::new(format!("consistency-{name}"), None);
            check.note = Some(match c.consistency.counters.last() {
                Some((at, report)) => format!("{report}, {:.0?} ago", at.elapsed()),
                None => "not checked yet".into(),
            });
            out.push(check);
        }
    }
    out
}

/// The check of one resource of the state file. It holds readiness only while it may
/// still sync within the warm-up: one that cannot sync must not keep the gateway unready
/// for good, and one the upstream does not serve or that does not fit the byte budget was
/// never going to be cached (docs/operations.md, "Readiness").
fn warm_check(
    gvr: &Gvr,
    status: WarmStatus,
    warm_up_over: bool,
    timeout: std::time::Duration,
) -> Check {
    let mut check = Check::new(format!("warm-{}", gvr.qualified()), None);
    let pending = match status {
        WarmStatus::Synced => return check,
        WarmStatus::NotServed => {
            check.note = Some("not served upstream; dropped from the state file".into());
            return check;
        }
        WarmStatus::NotCached(why) => {
            check.note = Some(format!("not cached: {why}; its requests are forwarded"));
            return check;
        }
        WarmStatus::NotStarted => "not started",
        WarmStatus::NotSynced => "not synced",
    };
    if warm_up_over {
        check.note = Some(format!(
            "{pending}, but the {timeout:?} warm-up is over; its requests are forwarded until it syncs"
        ));
    } else {
        check.failure = Some(pending.to_string());
    }
    check
}

async fn readyz(state: &AdminState, verbose: bool) -> Response<Body> {
    let checks = checks(state).await;
    let ok = checks.iter().all(|c| c.failure.is_none());
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    // Like the apiserver: failures are always itemised; passes only with ?verbose.
    if ok && !verbose {
        return text_response(code, "ok".into(), "text/plain; charset=utf-8");
    }
    let mut text = String::new();
    for c in &checks {
        match (&c.failure, &c.note) {
            (None, None) => text.push_str(&format!("[+]{} ok\n", c.name)),
            (None, Some(note)) => text.push_str(&format!("[+]{} ok ({note})\n", c.name)),
            (Some(why), _) => text.push_str(&format!("[-]{} failed: {why}\n", c.name)),
        }
    }
    text.push_str(if ok {
        "readyz check passed\n"
    } else {
        "readyz check failed\n"
    });
    text_response(code, text, "text/plain; charset=utf-8")
}

fn text_response(code: StatusCode, text: String, content_type: &'static str) -> Response<Body> {
    let mut resp = Response::new(body::full(text));
    *resp.status_mut() = code;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    resp
}

//! Path + query → a typed API request, parsed once.
//!
//! Mirrors k8s.io/apiserver `pkg/endpoints/request/requestinfo.go` (`RequestInfoFactory`)
//! for the path, and the decoding + validation of `metav1.ListOptions` /
//! `metav1.GetOptions` / write options (`pkg/endpoints/handlers/get.go`, `watch.go`,
//! apimachinery `pkg/apis/meta/internalversion/validation`) for the query. The parser is
//! independent of the simulator so that the gateway cache can reuse it.
//!
//! Parsing is two-step on purpose: [`parse`] never fails on the query (it only classifies
//! the path and collects raw parameters, like requestinfo.go does); [`ApiRequest::list_options`]
//! then decodes and validates the list/watch parameters and returns the apiserver's
//! Status for bad input. Handlers call it only after they have resolved the resource, which
//! is the order in which kube-apiserver reports errors (unknown resource 404 first).

// `Status` is the error currency of every handler (one per failed request), so its size
// does not matter on these paths.
#![allow(clippy::result_large_err)]

use http::Method;

use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{Cause, Status};
use crate::strconv::{parse_uint, UintError};

/// The verb, as kube-apiserver's RequestInfo names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    /// Any other method (OPTIONS, HEAD is treated as GET by hyper users, …).
    Other,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Other => "",
        }
    }
}

/// `resourceVersionMatch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RvMatch {
    Exact,
    NotOlderThan,
}

/// A classified request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiPath {
    /// Not under /api or /apis (or /api, /apis, /apis/{group}, /api/v1 themselves).
    NonResource(String),
    /// A resource request.
    Resource(ResourcePath),
}

/// The resource part of a request path.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourcePath {
    /// "" for the legacy core group (`/api/v1`).
    pub group: String,
    pub version: String,
    /// The namespace in the path (also set for `/api/v1/namespaces/{name}`, like
    /// requestinfo.go, where it equals the name).
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// The path used the deprecated `/watch/` prefix.
    pub legacy_watch: bool,
    /// Path segments beyond resource/name/subresource (the apiserver serves none: 404).
    pub extra: Vec<String>,
    /// The path is in the one form whose meaning cannot depend on how it is routed (see
    /// `crate::apipath`): no empty, `.` or `..` segment, valid UTF-8 once decoded, and a
    /// name the storage layer accepts. Only canonical paths are answered from the cache;
    /// the others are forwarded.
    pub canonical: bool,
}

/// A parsed request: method, path classification and the raw query.
#[derive(Debug, Clone)]
pub struct ApiRequest {
    pub method: Method,
    pub path: ApiPath,
    pub verb: Verb,
    /// The query, decoded into (key, value) pairs, in order.
    pub query: Vec<(String, String)>,
}

/// Decoded and validated list/watch/get options.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// `resourceVersion` as sent (None when absent; Some("") when empty).
    pub resource_version: Option<String>,
    /// The same, parsed once: what the cache and the fan-out decide on.
    pub rv: ResourceVersion,
    pub rv_match: Option<RvMatch>,
    /// `limit` (> 0 only; 0 and absent both mean no limit, like the apiserver).
    pub limit: Option<i64>,
    pub continue_token: Option<String>,
    pub label_selector: LabelSelector,
    pub field_selector: FieldSelector,
    pub watch: bool,
    pub allow_watch_bookmarks: bool,
    pub send_initial_events: Option<bool>,
    pub timeout_seconds: Option<i64>,
}

/// A request's `resourceVersion`, parsed at parse time so that no handler parses the
/// string again.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ResourceVersion {
    /// Absent or empty: "Most Recent", a consistent read.
    #[default]
    Unset,
    /// Exactly `"0"`: "Any". (kube-apiserver compares the string in places, e.g.
    /// `computeListLimit`, so another spelling of zero is a [`ResourceVersion::Number`].)
    Zero,
    /// A uint64 as Go's `strconv.ParseUint` reads it (`"00"` is `Number(0)`).
    Number(u64),
    /// Not a uint64: the storage layer's error, with its message.
    Invalid(InvalidResourceVersion),
}

impl ResourceVersion {
    pub fn parse(raw: Option<&str>) -> Self {
        match raw {
            None | Some("") => ResourceVersion::Unset,
            Some("0") => ResourceVersion::Zero,
            Some(s) => match parse_resource_version(s) {
                Ok(n) => ResourceVersion::Number(n),
                Err(e) => ResourceVersion::Invalid(e),
            },
        }
    }

    /// `APIObjectVersioner.ParseResourceVersion`: unset and `"0"` are 0.
    pub fn number(&self) -> Result<u64, &InvalidResourceVersion> {
        match self {
            ResourceVersion::Unset | ResourceVersion::Zero => Ok(0),
            ResourceVersion::Number(n) => Ok(*n),
            ResourceVersion::Invalid(e) => Err(e),
        }
    }
}

/// A `resourceVersion` that is not a uint64. The message is the storage layer's
/// `InvalidError`: `resourceVersion: Invalid value: "x": strconv.ParseUint: parsing "x":
/// invalid syntax`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resourceVersion: Invalid value: {quoted}: strconv.ParseUint: parsing {quoted}: {why}")]
pub struct InvalidResourceVersion {
    /// The value, quoted as Go's `%q` quotes it.
    quoted: String,
    why: UintError,
}

/// What a watch's `timeoutSeconds` means to kube-apiserver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchTimeout {
    /// Absent, or a value the conversion turns into 0: the randomised default.
    Default,
    /// A negative duration: the watch's context is done before it starts, so the stream
    /// ends at once.
    Expired,
    After(std::time::Duration),
}

impl ListOptions {
    /// `timeoutSeconds` as handlers/get.go converts it:
    /// `time.Duration(*opts.TimeoutSeconds) * time.Second`. That is a Go int64
    /// multiplication, which wraps on overflow instead of failing, so every int64 the
    /// decoder accepts is a valid request: 9223372036854775807 wraps to -1 s (the stream
    /// ends at once, like -1), and a multiple of 2^55 wraps to 0 (the default). The
    /// result is at most about 292 years, which an `Instant` on Linux can hold.
    pub fn watch_timeout(&self) -> WatchTimeout {
        match self
            .timeout_seconds
            .unwrap_or(0)
            .wrapping_mul(1_000_000_000)
        {
            0 => WatchTimeout::Default,
            n if n < 0 => WatchTimeout::Expired,
            n => WatchTimeout::After(std::time::Duration::from_nanos(n as u64)),
        }
    }
}

/// Sub-resources of a namespace object (`/api/v1/namespaces/{ns}/status`), which
/// requestinfo.go must not mistake for a namespaced resource.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

/// Classifies a raw (percent-encoded) request path the way kube-apiserver reads it
/// (`crate::apipath`): decoded as a whole as Go decodes it, given to an API handler only
/// when the director would, then named by `RequestInfoFactory.NewRequestInfo`. A path
/// that does not decode, or that the director gives to the non-API mux (`//api/v1/pods`),
/// is [`ApiPath::NonResource`].
pub fn parse_path(path: &str) -> ApiPath {
    let Ok(bytes) = crate::apipath::unescape(path) else {
        return ApiPath::NonResource(path.to_string());
    };
    let decoded = String::from_utf8_lossy(&bytes);
    let utf8 = matches!(decoded, std::borrow::Cow::Borrowed(_));
    if crate::apipath::handler(&decoded) == crate::apipath::Handler::Mux {
        return ApiPath::NonResource(path.to_string());
    }
    let parts = crate::apipath::split_path(&decoded);
    let mut rest: &[&str] = &parts;
    let (group, version) = match rest.first().copied() {
        Some("api") => {
            if rest.len() < 3 {
                return ApiPath::NonResource(path.to_string());
            }
            let v = rest[1].to_string();
            rest = &rest[2..];
            (String::new(), v)
        }
        Some("apis") => {
            if rest.len() < 4 {
                return ApiPath::NonResource(path.to_string());
            }
            let g = rest[1].to_string();
            let v = rest[2].to_string();
            rest = &rest[3..];
            (g, v)
        }
        _ => return ApiPath::NonResource(path.to_string()),
    };
    let mut rp = ResourcePath {
        group,
        version,
        ..Default::default()
    };
    if rest.first().copied() == Some("watch") {
        rp.legacy_watch = true;
        rest = &rest[1..];
    }
    if rest.first().copied() == Some("namespaces") && rest.len() > 1 {
        rp.namespace = Some(rest[1].to_string());
        if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
            rest = &rest[2..];
        }
    }
    if let Some(r) = rest.first() {
        rp.resource = r.to_string();
    }
    if let Some(n) = rest.get(1) {
        rp.name = Some(n.to_string());
    }
    if let Some(s) = rest.get(2) {
        rp.subresource = Some(s.to_string());
    }
    if rest.len() > 3 {
        rp.extra = rest[3..].iter().map(|s| s.to_string()).collect();
    }
    // `/api/v1/namespaces/{ns}` (and its status/finalize) is the namespace object itself.
    if rp.resource == "namespaces" {
        rp.namespace = None;
    }
    rp.canonical = utf8
        && parts
            .iter()
            .all(|p| !p.is_empty() && *p != "." && *p != "..")
        && rp
            .name
            .as_deref()
            .is_none_or(|n| crate::apipath::invalid_name_reasons(n).is_empty());
    ApiPath::Resource(rp)
}

fn decode_query(q: Option<&str>) -> Vec<(String, String)> {
    match q {
        None => Vec::new(),
        Some(q) => form_urlencoded::parse(q.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect(),
    }
}

/// Parses method + URI. Never fails: errors surface when options are decoded.
pub fn parse(method: &Method, uri: &http::Uri) -> ApiRequest {
    let path = parse_path(uri.path());
    let query = decode_query(uri.query());
    let verb = match &path {
        ApiPath::NonResource(_) => match *method {
            Method::GET | Method::HEAD => Verb::Get,
            _ => Verb::Other,
        },
        ApiPath::Resource(rp) => {
            let has_name = rp.name.is_some();
            match *method {
                Method::GET | Method::HEAD => {
                    if rp.legacy_watch {
                        Verb::Watch
                    } else if has_name {
                        Verb::Get
                    } else if query_bool(&query, "watch") == Some(true) {
                        Verb::Watch
                    } else {
                        Verb::List
                    }
                }
                Method::POST => Verb::Create,
                Method::PUT => Verb::Update,
                Method::PATCH => Verb::Patch,
                Method::DELETE => {
                    if has_name {
                        Verb::Delete
                    } else {
                        Verb::DeleteCollection
                    }
                }
                _ => Verb::Other,
            }
        }
    };
    ApiRequest {
        method: method.clone(),
        path,
        verb,
        query,
    }
}

/// The first value of `key` (Go's `url.Values.Get`... but the apiserver's conversion
/// reads the first value too).
pub fn query_get<'a>(q: &'a [(String, String)], key: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// A boolean query parameter as apimachinery's `Convert_Slice_string_To_bool` reads it.
fn query_bool(q: &[(String, String)], key: &str) -> Option<bool> {
    query_get(q, key).map(parse_bool)
}

fn parse_bool(v: &str) -> bool {
    // apimachinery runtime.Convert_Slice_string_To_bool: "0" and "false" (any case) are
    // false; everything else, the empty string included (`?watch`), is true.
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

/// The subresources kube-apiserver counts as long-running whatever their parameters.
const LONG_RUNNING_SUBRESOURCES: &[&str] = &["attach", "exec", "proxy", "log", "portforward"];

/// kube-apiserver's `LongRunningRequestCheck`: k8s.io/kubernetes `pkg/controlplane/apiserver`
/// configures `genericfilters.BasicLongRunningRequestCheck(sets.NewString("watch", "proxy"),
/// sets.NewString("attach", "exec", "proxy", "log", "portforward"))`, which k8s.io/apiserver
/// `pkg/server/filters/longrunning.go` applies to the RequestInfo (`requestinfo.go`):
/// - verb `watch`: a `/watch/` path (any method), or a collection GET whose `watch`
///   parameter `Convert_Slice_string_To_bool` reads as true: anything but `0` and `false`
///   in any case, so a bare `?watch` and `watch=` too (not `strconv.ParseBool`);
/// - verb `proxy`: the legacy `/api/v1/proxy/…` prefix;
/// - those subresources, logs with or without `follow`;
/// - a non-resource path under `/debug/pprof/`.
///
/// A named GET with `?watch=true` is a `get` to the apiserver, so not long-running.
fn is_long_running(api: &ApiRequest) -> bool {
    match &api.path {
        ApiPath::NonResource(p) => p.starts_with("/debug/pprof/"),
        ApiPath::Resource(rp) => {
            let legacy_proxy =
                rp.resource == "proxy" && rp.namespace.is_none() && rp.name.is_some();
            api.verb == Verb::Watch
                || rp.legacy_watch
                || legacy_proxy
                || rp
                    .subresource
                    .as_deref()
                    .is_some_and(|s| LONG_RUNNING_SUBRESOURCES.contains(&s))
        }
    }
}

impl ApiRequest {
    pub fn resource(&self) -> Option<&ResourcePath> {
        match &self.path {
            ApiPath::Resource(rp) => Some(rp),
            ApiPath::NonResource(_) => None,
        }
    }

    pub fn query_get(&self, key: &str) -> Option<&str> {
        query_get(&self.query, key)
    }

    /// All values of `key` (e.g. `dryRun=All`).
    pub fn query_all(&self, key: &str) -> Vec<&str> {
        self.query
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// `dryRun=All` present (the only value the apiserver accepts).
    pub fn dry_run(&self) -> bool {
        self.query_all("dryRun").contains(&"All")
    }

    pub fn field_manager(&self) -> Option<&str> {
        self.query_get("fieldManager")
    }

    /// Decodes and validates list/watch options (see module docs for the error sources).
    pub fn list_options(&self) -> Result<ListOptions, Status> {
        let legacy = self.resource().is_some_and(|r| r.legacy_watch);
        list_options(&self.query, legacy)
    }
}

/// How many requests the gateway has parsed ([`Parsed::new`]): the tests prove with it
/// that a request is parsed exactly once on its way through the stack.
static PARSED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The number of [`Parsed`] built so far in this process.
pub fn parsed_count() -> u64 {
    PARSED.load(std::sync::atomic::Ordering::Relaxed)
}

/// A request as the gateway sees it: parsed once, by the first layer of the API stack
/// (`stack::parse`), and kept in the request's extensions as `Arc<Parsed>`. Every later
/// layer (metrics, routing, the cache, the fan-out, forwarding) reads it from there and
/// never parses the path, query or Accept header again.
#[derive(Debug)]
pub struct Parsed {
    pub api: ApiRequest,
    /// For GET/HEAD on a resource path: the decoded and validated list/watch/get options,
    /// or the Status the apiserver gives for them.
    pub options: Option<Result<ListOptions, Status>>,
    /// The first `Accept` header (`accept.raw`) and its negotiated forms: for a built-in
    /// type, a custom resource, and an error Status.
    pub accept: crate::negotiate::Accept,
    /// The apiserver would pretty-print the answer: `pretty` in the query
    /// (strconv.ParseBool), else a browser or command-line User-Agent
    /// (negotiation.isPrettyPrint: `curl`, `Wget`, `Mozilla/5.0`).
    pub pretty: bool,
    /// kube-apiserver's long-running request ([`is_long_running`]), decided once here for
    /// every layer that asks: the upstream pool's class, the per-user limits, the metrics
    /// and the proxy's drain.
    pub long_running: bool,
    /// The verb is `watch`: a `/watch/` path, or a collection GET whose `watch` parameter
    /// apimachinery's `Convert_Slice_string_To_bool` reads as true (anything but `0` and
    /// `false` in any case, a bare `?watch` included, as kube-apiserver's RequestInfo
    /// reads it; not `strconv.ParseBool`, which refuses the empty string).
    pub watch: bool,
    /// The request's own `?timeout=` (a Go duration), which kube-apiserver honours for
    /// non-streaming requests; None when absent or not a duration. (A watch's
    /// `timeoutSeconds` is in `options`.)
    pub timeout: Option<std::time::Duration>,
    /// `Accept-Encoding` has a `gzip` token (large answers are then gzipped).
    pub accepts_gzip: bool,
}

impl Parsed {
    pub fn new(method: &Method, uri: &http::Uri, headers: &http::HeaderMap) -> Self {
        PARSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let api = parse(method, uri);
        let options = match (&api.path, method) {
            (ApiPath::Resource(_), &Method::GET | &Method::HEAD) => Some(api.list_options()),
            _ => None,
        };
        let header = |name: http::header::HeaderName| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let pretty = crate::negotiate::is_pretty_print(
            api.query_get("pretty"),
            header(http::header::USER_AGENT).as_deref(),
        );
        let long_running = is_long_running(&api);
        let timeout = api
            .query_get("timeout")
            .and_then(|t| crate::duration::parse_duration(t).ok());
        Self {
            accept: crate::negotiate::Accept::new(header(http::header::ACCEPT)),
            accepts_gzip: crate::codec::gzip::accepts_gzip(headers),
            watch: api.verb == Verb::Watch,
            timeout,
            api,
            options,
            pretty,
            long_running,
        }
    }

    /// The typed request a layer before this one stored, if any.
    pub fn of<B>(req: &http::Request<B>) -> Option<std::sync::Arc<Parsed>> {
        req.extensions().get::<std::sync::Arc<Parsed>>().cloned()
    }

    /// The resource path, for resource requests.
    pub fn resource(&self) -> Option<&ResourcePath> {
        self.api.resource()
    }

    /// The options, when they decoded and validated.
    pub fn valid_options(&self) -> Option<&ListOptions> {
        self.options.as_ref().and_then(|o| o.as_ref().ok())
    }
}

/// `metav1.ListOptions` decoding (`DecodeParameters`: 400 on a bad integer or selector),
/// `SetListOptionsDefaults` and `ValidateListOptions` (422), in kube-apiserver's order
/// (handlers/get.go `ListResource`). `force_watch` is set for the legacy `/watch/` paths,
/// which the apiserver serves as watches without setting `opts.Watch`.
pub fn list_options(q: &[(String, String)], force_watch: bool) -> Result<ListOptions, Status> {
    let watch_param = query_bool(q, "watch").unwrap_or(false);
    let mut o = ListOptions {
        watch: watch_param || force_watch,
        ..Default::default()
    };
    // url.Values → v1.ListOptions, in struct field order.
    o.allow_watch_bookmarks = query_bool(q, "allowWatchBookmarks").unwrap_or(false);
    o.resource_version = query_get(q, "resourceVersion").map(str::to_string);
    o.rv = ResourceVersion::parse(o.resource_version.as_deref());
    let rv_match = query_get(q, "resourceVersionMatch")
        .unwrap_or("")
        .to_string();
    if let Some(t) = query_get(q, "timeoutSeconds").filter(|t| !t.is_empty()) {
        o.timeout_seconds = Some(parse_int(t)?);
    }
    if let Some(l) = query_get(q, "limit").filter(|l| !l.is_empty()) {
        let n = parse_int(l)?;
        if n > 0 {
            o.limit = Some(n);
        }
    }
    if let Some(c) = query_get(q, "continue").filter(|c| !c.is_empty()) {
        o.continue_token = Some(c.to_string());
    }
    o.send_initial_events = query_bool(q, "sendInitialEvents");
    // v1 → internal: the selectors are parsed here.
    if let Some(ls) = query_get(q, "labelSelector") {
        o.label_selector = LabelSelector::parse(ls).map_err(Status::bad_request)?;
    }
    if let Some(fs) = query_get(q, "fieldSelector") {
        o.field_selector = FieldSelector::parse(fs).map_err(Status::bad_request)?;
    }
    // SetListOptionsDefaults (WatchList is on by default since 1.32): a watch with RV
    // unset or "0" becomes sendInitialEvents=true + NotOlderThan.
    let mut rv_match = rv_match;
    let rv = o.resource_version.clone().unwrap_or_default();
    if watch_param
        && o.send_initial_events.is_none()
        && rv_match.is_empty()
        && (rv.is_empty() || rv == "0")
    {
        o.send_initial_events = Some(true);
        rv_match = "NotOlderThan".into();
    }
    // ValidateListOptions.
    let mut errs: Vec<FieldError> = Vec::new();
    if watch_param {
        if o.send_initial_events.is_some() && rv_match != "NotOlderThan" {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !rv_match.is_empty() {
            if o.send_initial_events.is_none() {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if rv_match != "NotOlderThan" {
                errs.push(FieldError::not_supported(
                    "resourceVersionMatch",
                    &rv_match,
                    &["NotOlderThan"],
                ));
            }
            if o.continue_token.is_some() {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
    } else {
        if !rv_match.is_empty() {
            if rv.is_empty() {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if o.continue_token.is_some() {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if rv_match != "Exact" && rv_match != "NotOlderThan" {
                errs.push(FieldError::not_supported(
                    "resourceVersionMatch",
                    &rv_match,
                    &["Exact", "NotOlderThan", ""],
                ));
            }
            if rv_match == "Exact" && rv == "0" {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if o.send_initial_events.is_some() {
            errs.push(FieldError::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
    }
    if !errs.is_empty() {
        return Err(invalid_list_options(errs));
    }
    o.rv_match = match rv_match.as_str() {
        "Exact" => Some(RvMatch::Exact),
        "NotOlderThan" => Some(RvMatch::NotOlderThan),
        _ => None,
    };
    Ok(o)
}

/// `strconv.ParseInt(s, 10, 64)` with Go's error text.
fn parse_int(s: &str) -> Result<i64, Status> {
    s.parse::<i64>().map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        Status::bad_request(format!(
            "strconv.ParseInt: parsing {}: {why}",
            crate::selector::validation::go_quote(s)
        ))
    })
}

/// `APIObjectVersioner.ParseResourceVersion`: "" and "0" are 0; anything else must be a
/// uint64. Handlers read [`ListOptions::rv`] instead, parsed once by this.
pub fn parse_resource_version(rv: &str) -> Result<u64, InvalidResourceVersion> {
    if rv.is_empty() || rv == "0" {
        return Ok(0);
    }
    parse_uint(rv).map_err(|why| InvalidResourceVersion {
        quoted: crate::selector::validation::go_quote(rv),
        why,
    })
}

/// One `field.Error`, printed as `field: Body`.
#[derive(Debug, Clone)]
pub struct FieldError {
    pub field: String,
    /// The StatusCause reason (`FieldValueForbidden`, ...).
    pub cause: &'static str,
    /// `ErrorBody()`: `Forbidden: detail`, `Unsupported value: "x": supported values: ...`.
    pub body: String,
}

impl FieldError {
    pub fn forbidden(field: &str, detail: &str) -> Self {
        Self {
            field: field.into(),
            cause: "FieldValueForbidden",
            body: format!("Forbidden: {detail}"),
        }
    }

    pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> Self {
        let q = crate::selector::validation::go_quote;
        let list: Vec<String> = supported.iter().map(|s| q(s)).collect();
        Self {
            field: field.into(),
            cause: "FieldValueNotSupported",
            body: format!(
                "Unsupported value: {}: supported values: {}",
                q(value),
                list.join(", ")
            ),
        }
    }
}

/// `errors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "ListOptions"}, "", errs)`.
pub fn invalid_list_options(errs: Vec<FieldError>) -> Status {
    let mut joined: Vec<String> = Vec::new();
    for e in &errs {
        // ToAggregate() drops duplicate messages.
        let m = format!("{}: {}", e.field, e.body);
        if !joined.contains(&m) {
            joined.push(m);
        }
    }
    let message = if joined.len() == 1 {
        format!("ListOptions.meta.k8s.io \"\" is invalid: {}", joined[0])
    } else {
        format!(
            "ListOptions.meta.k8s.io \"\" is invalid: [{}]",
            joined.join(", ")
        )
    };
    let mut s = Status::new(422, "Invalid", message);
    s.with_details = true;
    s.group = Some("meta.k8s.io".into());
    s.kind = Some("ListOptions".into());
    for e in errs {
        s.causes.push(Cause {
            reason: e.cause.into(),
            message: e.body,
            field: Some(e.field),
        });
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rp(p: &str) -> ResourcePath {
        match parse_path(p) {
            ApiPath::Resource(r) => r,
            other => panic!("{p}: {other:?}"),
        }
    }

    #[test]
    fn paths() {
        let r = rp("/api/v1/namespaces/default/pods/web/log");
        assert_eq!(r.namespace.as_deref(), Some("default"));
        assert_eq!(r.resource, "pods");
        assert_eq!(r.name.as_deref(), Some("web"));
        assert_eq!(r.subresource.as_deref(), Some("log"));
        let r = rp("/api/v1/namespaces/default");
        assert_eq!(r.resource, "namespaces");
        assert_eq!(r.name.as_deref(), Some("default"));
        let r = rp("/api/v1/namespaces/default/status");
        assert_eq!(r.resource, "namespaces");
        assert_eq!(r.subresource.as_deref(), Some("status"));
        let r = rp("/apis/apps/v1/watch/namespaces/x/deployments/d");
        assert!(r.legacy_watch);
        assert_eq!(r.group, "apps");
        assert_eq!(r.name.as_deref(), Some("d"));
        assert!(matches!(parse_path("/apis/apps"), ApiPath::NonResource(_)));
        assert!(matches!(parse_path("/api/v1"), ApiPath::NonResource(_)));
        assert!(matches!(parse_path("/version"), ApiPath::NonResource(_)));
    }

    #[test]
    fn paths_as_the_apiserver_reads_them() {
        // The director gives `//api/...` to the non-API mux: not a resource at all.
        assert!(matches!(
            parse_path("//api/v1/pods"),
            ApiPath::NonResource(_)
        ));
        assert!(matches!(
            parse_path("/api/v1/pods%zz"),
            ApiPath::NonResource(_)
        ));
        // Canonical: trailing slashes are trimmed by go-restful and RequestInfo alike, and
        // the path is decoded as a whole before it is split.
        for p in [
            "/api/v1/pods",
            "/api/v1/pods/",
            "/api/v1/namespaces/default/pods//",
            "/api/v1/namespaces/default/pods/%77eb",
            "/apis/apps/v1/namespaces/a/deployments/d",
        ] {
            assert!(rp(p).canonical, "{p}");
        }
        let r = rp("/api/v1/namespaces%2Fdefault%2Fpods");
        assert_eq!(
            (r.namespace.as_deref(), r.resource.as_str()),
            (Some("default"), "pods")
        );
        let r = rp("/api/v1/namespaces/default/pods/a%2Fb");
        assert_eq!(
            (r.name.as_deref(), r.subresource.as_deref()),
            (Some("a"), Some("b"))
        );
        // Not canonical: empty, `.` or `..` segments, names the storage refuses, bytes
        // that are not UTF-8. RequestInfo's reading is kept (the simulator answers it).
        let r = rp("/api/v1/namespaces//pods");
        assert_eq!(
            (r.namespace.as_deref(), r.resource.as_str()),
            (Some(""), "pods")
        );
        assert!(!r.canonical);
        for p in [
            "/api//v1/pods",
            "/api/v1//pods",
            "/api/v1/namespaces/./pods",
            "/api/v1/namespaces/default/pods/..",
            "/api/v1/namespaces/default/pods/a%25b",
            "/api/v1/namespaces/default/pods/%ff",
            "/api/v1/namespaces/default/pods//status",
        ] {
            assert!(!rp(p).canonical, "{p}");
        }
    }
    fn req(m: Method, uri: &str) -> ApiRequest {
        parse(&m, &uri.parse().unwrap())
    }

    #[test]
    fn long_running_is_kube_apiservers_check() {
        let long = |m: Method, u: &str| {
            let p = Parsed::new(&m, &u.parse().unwrap(), &Default::default());
            assert_eq!(p.long_running, is_long_running(&p.api), "{u}");
            p.long_running
        };
        // `watch` as Convert_Slice_string_To_bool reads it: all but `0` and `false`.
        for w in [
            "watch",
            "watch=",
            "watch=1",
            "watch=t",
            "watch=T",
            "watch=True",
            "watch=true",
            "watch=TRUE",
            "watch=yes",
            "watch=f",
        ] {
            assert!(long(Method::GET, &format!("/api/v1/pods?{w}")), "{w}");
            assert!(
                long(
                    Method::GET,
                    &format!("/apis/apps/v1/namespaces/a/deployments?limit=5&{w}")
                ),
                "{w}"
            );
        }
        for w in ["watch=0", "watch=false", "watch=False", "watch=FALSE"] {
            assert!(!long(Method::GET, &format!("/api/v1/pods?{w}")), "{w}");
        }
        // The first value counts, as url.Values.Get.
        assert!(long(Method::GET, "/api/v1/pods?watch&watch=false"));
        assert!(!long(Method::GET, "/api/v1/pods?watch=0&watch=1"));
        // A named GET is a `get` whatever its `watch`.
        assert!(!long(Method::GET, "/api/v1/namespaces/a/pods/p?watch"));
        // The `/watch/` prefix makes the verb `watch` for any method.
        assert!(long(Method::GET, "/api/v1/watch/namespaces/a/pods/p"));
        assert!(long(Method::POST, "/api/v1/watch/pods"));
        // The streaming subresources, logs with or without `follow`.
        for sub in [
            "log",
            "log?follow=true",
            "exec?command=ls",
            "attach",
            "portforward",
            "proxy/x/y",
        ] {
            assert!(
                long(Method::GET, &format!("/api/v1/namespaces/a/pods/p/{sub}")),
                "{sub}"
            );
        }
        assert!(long(
            Method::POST,
            "/api/v1/namespaces/a/pods/p/exec?command=ls"
        ));
        assert!(long(Method::GET, "/api/v1/nodes/n/proxy/metrics"));
        assert!(!long(Method::GET, "/api/v1/namespaces/a/pods/p/status"));
        assert!(!long(Method::POST, "/api/v1/namespaces/a/pods/p/eviction"));
        // The legacy proxy verb, and the profiler.
        assert!(long(Method::GET, "/api/v1/proxy/namespaces/a/pods/p"));
        assert!(long(Method::GET, "/debug/pprof/profile?seconds=30"));
        assert!(!long(Method::GET, "/version"));
        assert!(!long(Method::GET, "/api/v1/namespaces/proxy/pods"));
    }

    #[test]
    fn verbs() {
        assert_eq!(req(Method::GET, "/api/v1/pods").verb, Verb::List);
        assert_eq!(req(Method::GET, "/api/v1/pods?watch").verb, Verb::Watch);
        assert_eq!(
            req(Method::GET, "/api/v1/pods?watch=false").verb,
            Verb::List
        );
        assert_eq!(req(Method::GET, "/api/v1/pods?watch=0").verb, Verb::List);
        assert_eq!(req(Method::GET, "/api/v1/watch/pods").verb, Verb::Watch);
        assert_eq!(
            req(Method::GET, "/api/v1/namespaces/a/pods/p?watch=1").verb,
            Verb::Get
        );
        assert_eq!(
            req(Method::DELETE, "/api/v1/namespaces/a/pods").verb,
            Verb::DeleteCollection
        );
        assert_eq!(
            req(Method::DELETE, "/api/v1/namespaces/a/pods/p").verb,
            Verb::Delete
        );
        assert_eq!(
            req(Method::PATCH, "/api/v1/namespaces/a/pods/p").verb,
            Verb::Patch
        );
        let r = req(
            Method::POST,
            "/api/v1/namespaces/a/pods?dryRun=All&fieldManager=me",
        );
        assert!(r.dry_run());
        assert_eq!(r.field_manager(), Some("me"));
    }

    #[test]
    fn options() {
        let o = req(
            Method::GET,
            "/api/v1/pods?limit=5&resourceVersion=7&resourceVersionMatch=Exact",
        )
        .list_options()
        .unwrap();
        assert_eq!((o.limit, o.rv_match), (Some(5), Some(RvMatch::Exact)));
        let o = req(Method::GET, "/api/v1/pods?limit=0")
            .list_options()
            .unwrap();
        assert_eq!(o.limit, None);
        let o = req(Method::GET, "/api/v1/pods?watch=1")
            .list_options()
            .unwrap();
        assert_eq!(o.send_initial_events, Some(true), "watch-list defaulting");
        assert_eq!(o.rv_match, Some(RvMatch::NotOlderThan));
        let o = req(Method::GET, "/api/v1/watch/pods")
            .list_options()
            .unwrap();
        assert_eq!(
            o.send_initial_events, None,
            "legacy watch paths are not defaulted"
        );
        let e = req(Method::GET, "/api/v1/pods?limit=x")
            .list_options()
            .unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "strconv.ParseInt: parsing \"x\": invalid syntax")
        );
        assert_eq!(
            parse_resource_version("-1").unwrap_err().to_string(),
            "resourceVersion: Invalid value: \"-1\": strconv.ParseUint: parsing \"-1\": invalid syntax"
        );
        assert_eq!(parse_resource_version("0"), Ok(0));
        // Go's ParseUint takes no sign (Rust's parse would).
        assert_eq!(
            parse_resource_version("+5").unwrap_err().to_string(),
            "resourceVersion: Invalid value: \"+5\": strconv.ParseUint: parsing \"+5\": invalid syntax"
        );
        assert_eq!(parse_resource_version(""), Ok(0));
    }
}

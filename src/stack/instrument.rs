//! Request metrics, as a layer: the bounded labels come from the typed request the parse
//! layer stored, one counter increment when the response head is known, and a guard in
//! the response body that records the duration (or ends the long-running request) when
//! the body is done.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};
use tower::{Layer, Service};

use crate::body::{self, Body, BoxError};
use crate::metrics as m;
use crate::proxy::headers::Source;
use crate::request::{ApiPath, Parsed, Verb};

/// Records every request's series (`watchgate_requests_total`, durations, in-flight and
/// long-running gauges).
#[derive(Clone, Copy, Default)]
pub struct InstrumentLayer;

impl<S> Layer<S> for InstrumentLayer {
    type Service = Instrument<S>;

    fn layer(&self, inner: S) -> Instrument<S> {
        Instrument { inner }
    }
}

#[derive(Clone)]
pub struct Instrument<S> {
    inner: S,
}

impl<S, B> Service<Request<B>> for Instrument<S>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let started = Instant::now();
        let labels = Parsed::of(&req).map(|p| RequestLabels::classify(&p));
        let in_flight = labels
            .as_ref()
            .filter(|l| !l.long_running())
            .map(|_| InFlight::start());
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            Ok(match labels {
                Some(labels) => observe(labels, started, in_flight, resp),
                // The parse layer runs first, so this does not happen; a response is
                // never lost for want of labels.
                None => resp,
            })
        })
    }
}

/// The bounded labels of one request, taken from its method and URI before it is served.
pub struct RequestLabels {
    verb: &'static str,
    group: String,
    resource: String,
    scope: &'static str,
    long_running: bool,
}

impl RequestLabels {
    /// Long-running requests (`request::Parsed::long_running`): not counted in flight, not timed.
    pub fn long_running(&self) -> bool {
        self.long_running
    }

    pub fn classify(req: &Parsed) -> Self {
        let verb = match req.api.verb {
            Verb::Other => "other",
            v => v.as_str(),
        };
        let long_running = req.long_running;
        match &req.api.path {
            ApiPath::NonResource(_) => Self {
                verb,
                group: String::new(),
                resource: String::new(),
                scope: "",
                long_running,
            },
            ApiPath::Resource(rp) => Self {
                verb,
                // kube-apiserver's scope label: resource (one named object), namespace,
                // cluster.
                scope: if rp.name.is_some() {
                    "resource"
                } else if rp.namespace.is_some() {
                    "namespace"
                } else {
                    "cluster"
                },
                group: rp.group.clone(),
                resource: rp.resource.clone(),
                long_running,
            },
        }
    }
}

/// Records `resp` under `labels`. Group and resource come from the client's URL, so they
/// are kept only for resources the gateway has served successfully (see [`KnownResources`]);
/// a client asking for made-up resources, whatever the answer (404, or 401/403 before the
/// apiserver even looks the resource up, or 400), cannot create series at will.
pub fn observe(
    labels: RequestLabels,
    started: Instant,
    in_flight: Option<InFlight>,
    resp: Response<Body>,
) -> Response<Body> {
    let code = resp.status();
    // Unmarked answers are the gateway's own (the stack's `source` layer marks them, but
    // it runs inside this one).
    let source = Source::of(resp.headers())
        .unwrap_or(Source::Gateway)
        .as_str();
    let RequestLabels {
        verb,
        group,
        resource,
        scope,
        long_running,
    } = labels;
    let (group, resource) = known().bound(group, resource, code.is_success());
    let series = Series::of((verb, group, resource, scope, code.as_u16(), source));
    series.total.increment(1);

    let done = if long_running && code.is_success() {
        series.long_running().increment(1.0);
        Done::LongRunning(series)
    } else {
        Done::Request { started, series }
    };
    let (parts, inner) = resp.into_parts();
    Response::from_parts(
        parts,
        body::boxed(Instrumented {
            inner,
            guard: Guard(Some(done)),
            _in_flight: in_flight,
        }),
    )
}

/// The most resources whose group and resource may appear in request labels. A cluster
/// serves a few hundred at most (built-ins plus CRDs); the bound only matters for an
/// upstream that answers 2xx for any path (an aggregated API server can).
const KNOWN_MAX: usize = 1000;

/// The resources whose group and resource label values requests keep: those the gateway
/// has answered with a 2xx, which the upstream's discovery (or the cache, which only
/// serves discovered resources) must know. Kept per process, like the recorder itself.
/// Until a resource has had one success, and for every resource past [`KNOWN_MAX`], its
/// requests are recorded with empty group and resource.
pub struct KnownResources {
    set: dashmap::DashSet<(String, String)>,
    max: usize,
}

impl KnownResources {
    pub fn new(max: usize) -> Self {
        Self {
            set: dashmap::DashSet::new(),
            max,
        }
    }

    /// The label values to record for a request's `group` and `resource`.
    pub fn bound(&self, group: String, resource: String, success: bool) -> (String, String) {
        if group.is_empty() && resource.is_empty() {
            return (group, resource);
        }
        let key = (group, resource);
        // `len` is approximate under concurrent inserts: the bound may be passed by as
        // many as there are racing first successes, which keeps it bounded all the same.
        if self.set.contains(&key)
            || (success && self.set.len() < self.max && self.set.insert(key.clone()))
        {
            return key;
        }
        (String::new(), String::new())
    }
}

fn known() -> &'static KnownResources {
    static KNOWN: std::sync::OnceLock<KnownResources> = std::sync::OnceLock::new();
    KNOWN.get_or_init(|| KnownResources::new(KNOWN_MAX))
}

/// Counts a non-long-running request in flight from before it is served until its
/// response body is done (dropped).
pub struct InFlight;

impl InFlight {
    pub fn start() -> Self {
        in_flight().increment(1.0);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        in_flight().decrement(1.0);
    }
}

/// The in-flight gauge's handle, looked up once (see [`Series`]).
fn in_flight() -> &'static Gauge {
    static GAUGE: std::sync::OnceLock<Gauge> = std::sync::OnceLock::new();
    GAUGE.get_or_init(|| gauge!(m::REQUESTS_IN_FLIGHT))
}

enum Done {
    LongRunning(Arc<Series>),
    Request {
        started: Instant,
        series: Arc<Series>,
    },
}

/// The label values of one request's series.
type SeriesKey = (
    &'static str,
    String,
    String,
    &'static str,
    u16,
    &'static str,
);

/// The metric handles of one label set, looked up in the recorder once and kept. Building
/// a metrics `Key` (six labels, allocations, a hash) and finding it in the recorder's
/// registry for the counter, the histogram and the gauge of every request cost a few
/// microseconds, which a small cached get (tens of µs) notices. The set of keys is as
/// bounded as the series themselves (see [`KnownResources`]). The duration histogram and
/// the long-running gauge are created on first use, so that a label set only has the
/// series its requests use (gets and lists no open-watches gauge, watches no durations).
struct Series {
    key: SeriesKey,
    total: Counter,
    duration: std::sync::OnceLock<Histogram>,
    long_running: std::sync::OnceLock<Gauge>,
}

impl Series {
    fn of(key: SeriesKey) -> Arc<Series> {
        static CACHE: std::sync::OnceLock<dashmap::DashMap<SeriesKey, Arc<Series>>> =
            std::sync::OnceLock::new();
        let cache = CACHE.get_or_init(dashmap::DashMap::new);
        if let Some(s) = cache.get(&key) {
            return s.clone();
        }
        let (verb, group, resource, scope, code, source) = key.clone();
        let s = Arc::new(Series {
            total: counter!(m::REQUESTS_TOTAL,
                "verb" => verb, "group" => group, "resource" => resource,
                "scope" => scope, "code" => code.to_string(), "source" => source),
            duration: std::sync::OnceLock::new(),
            long_running: std::sync::OnceLock::new(),
            key: key.clone(),
        });
        cache.entry(key).or_insert(s).clone()
    }

    fn duration(&self) -> &Histogram {
        self.duration.get_or_init(|| {
            let (verb, group, resource, scope, code, source) = self.key.clone();
            histogram!(m::REQUEST_DURATION,
                "verb" => verb, "group" => group, "resource" => resource,
                "scope" => scope, "code" => code.to_string(), "source" => source)
        })
    }

    fn long_running(&self) -> &Gauge {
        self.long_running.get_or_init(|| {
            let (_, group, resource, ..) = self.key.clone();
            gauge!(m::LONG_RUNNING, "group" => group, "resource" => resource)
        })
    }
}

struct Guard(Option<Done>);

impl Drop for Guard {
    fn drop(&mut self) {
        match self.0.take() {
            Some(Done::LongRunning(series)) => series.long_running().decrement(1.0),
            Some(Done::Request { started, series }) => {
                series.duration().record(started.elapsed().as_secs_f64());
            }
            None => {}
        }
    }
}

pin_project_lite::pin_project! {
    /// The response body with its metrics guard: the guard fires when the body is
    /// dropped, which is when hyper has sent it or the client has gone.
    struct Instrumented {
        #[pin]
        inner: Body,
        guard: Guard,
        _in_flight: Option<InFlight>,
    }
}

impl HttpBody for Instrumented {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(method: http::Method, uri: &str) -> RequestLabels {
        let parsed = Parsed::new(&method, &uri.parse().unwrap(), &http::HeaderMap::new());
        RequestLabels::classify(&parsed)
    }

    #[test]
    fn requests_are_classified_with_bounded_labels() {
        let l = labels(http::Method::GET, "/api/v1/namespaces/ns1/pods/p1");
        assert_eq!(
            (l.verb, l.group.as_str(), l.resource.as_str(), l.scope),
            ("get", "", "pods", "resource")
        );
        let l = labels(
            http::Method::GET,
            "/apis/apps/v1/deployments?resourceVersion=0",
        );
        assert_eq!(
            (l.verb, l.group.as_str(), l.resource.as_str(), l.scope),
            ("list", "apps", "deployments", "cluster")
        );
        let l = labels(http::Method::GET, "/api/v1/namespaces/ns1/pods?watch=true");
        assert_eq!(
            (l.verb, l.scope, l.long_running),
            ("watch", "namespace", true)
        );
        let l = labels(http::Method::POST, "/api/v1/namespaces/ns1/configmaps");
        assert_eq!((l.verb, l.long_running), ("create", false));
        let l = labels(http::Method::GET, "/version");
        assert_eq!((l.verb, l.resource.as_str(), l.scope), ("get", "", ""));
    }

    #[test]
    fn only_resources_served_successfully_keep_their_labels() {
        let k = KnownResources::new(2);
        let b = |g: &str, r: &str, ok: bool| {
            let (g, r) = k.bound(g.into(), r.into(), ok);
            format!("{g}/{r}")
        };
        // A failure for a resource never served: blank, and it stays unknown.
        assert_eq!(b("", "pods", false), "/");
        assert_eq!(b("made.up", "things", false), "/");
        // A success makes it known; later failures keep the labels.
        assert_eq!(b("", "pods", true), "/pods");
        assert_eq!(b("", "pods", false), "/pods");
        assert_eq!(b("apps", "deployments", true), "apps/deployments");
        // Past the bound, new resources are blank even when served.
        assert_eq!(b("", "configmaps", true), "/");
        assert_eq!(b("", "configmaps", false), "/");
        assert_eq!(b("apps", "deployments", false), "apps/deployments");
    }
}

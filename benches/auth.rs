//! The cost of client authentication and authorization (issue 17): what `--auth=delegated`
//! adds to a cached `resourceVersion=0` get and to the start of a cached watch, with warm
//! and with cold decision caches.
//!
//!     cargo bench --bench auth                          # full
//!     WATCHGATE_BENCH_QUICK=1 cargo bench --bench auth  # short measurements
//!
//! Wall time on a shared 2-core machine is noisy, so the bench also has a counting mode
//! for instruction counts, paired without and with the requests:
//!
//!     WATCHGATE_AUTH_COUNT=get/warm:0    valgrind --tool=callgrind target/release/deps/auth-*
//!     WATCHGATE_AUTH_COUNT=get/warm:2000 valgrind --tool=callgrind target/release/deps/auth-*
//!
//! (instructions per request = the difference / 2000; scenarios `get|watch-start` ×
//! `none|warm|cold/local`).
//!
//! The API stack (`stack::layers`) runs around a stub innermost service that answers like
//! the cache (a 4 KiB pod, `X-Watchgate-Source: cache`), so the figures are the stack's
//! own work: `none` is the stack without security, `warm` with it and both decision
//! caches holding the answer (the difference is what authn + authz add), `cold/local` with
//! fresh caches and reviews answered in memory (the cache-miss bookkeeping), and
//! `cold/sim` with fresh caches and the TokenReview and SubjectAccessReview sent to an
//! in-process simulator over loopback HTTP (two round trips; an apiserver adds its own
//! latency to each).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, BatchSize, Criterion};
use http::{HeaderValue, Request, Response};
use http_body_util::{BodyExt, Empty};

use watchgate::auth::review::{Decision, ReviewFuture, Reviews, TokenVerdict};
use watchgate::auth::{Attributes, Security, SecurityConfig, UpstreamReviews, UserInfo};
use watchgate::body::{self, Body};
use watchgate::stack::{layers, Options};

fn quick() -> bool {
    std::env::var_os("WATCHGATE_BENCH_QUICK").is_some()
}

/// Reviews answered at once, in memory: alice may read pods.
struct LocalReviews;

impl Reviews for LocalReviews {
    fn token_review(&self, token: &str) -> ReviewFuture<TokenVerdict> {
        let verdict = if token == "alice-token" {
            TokenVerdict::Authenticated(UserInfo {
                name: "alice".into(),
                uid: "alice-uid".into(),
                groups: vec!["developers".into(), "system:authenticated".into()],
                extra: Default::default(),
            })
        } else {
            TokenVerdict::Rejected(String::new())
        };
        Box::pin(async move { Ok(verdict) })
    }

    fn access_review(&self, _user: &UserInfo, attrs: &Attributes) -> ReviewFuture<Decision> {
        let d = if attrs.resource == "pods" {
            Decision::Allow
        } else {
            Decision::Deny(String::new())
        };
        Box::pin(async move { Ok(d) })
    }
}

/// What the cache answers for a get: one pod of ~4 KiB.
fn stub() -> impl tower::Service<
    Request<Empty<Bytes>>,
    Response = Response<Body>,
    Error = Infallible,
    Future = std::future::Ready<Result<Response<Body>, Infallible>>,
> + Clone
       + Send
       + Sync
       + 'static {
    let pod = Bytes::from(vec![b'x'; 4096]);
    tower::service_fn(move |_req: Request<Empty<Bytes>>| {
        let mut resp = Response::new(body::full(pod.clone()));
        resp.headers_mut()
            .insert("x-watchgate-source", HeaderValue::from_static("cache"));
        std::future::ready(Ok(resp))
    })
}

const GET: &str = "/api/v1/namespaces/default/pods/p1?resourceVersion=0";
const WATCH: &str = "/api/v1/namespaces/default/pods?watch=1&resourceVersion=0";

fn request(uri: &str) -> Request<Empty<Bytes>> {
    Request::get(uri)
        .header("authorization", "Bearer alice-token")
        .header("accept", "application/json")
        .body(Empty::new())
        .unwrap()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // The simulator with the demo policy, for cold reviews over loopback.
    let sim = rt.block_on(async {
        watchgate::sim::start(watchgate::sim::SimConfig {
            policy: Some(watchgate::sim::auth::demo_policy()),
            ..Default::default()
        })
        .await
        .unwrap()
    });
    let upstream = {
        let mut cfg = kube::Config::new(sim.url().parse().unwrap());
        cfg.auth_info.token = Some("watchgate-token".to_string().into());
        let _guard = rt.enter();
        watchgate::upstream::Upstream::new(&cfg, Duration::from_secs(5)).unwrap()
    };

    for (name, uri) in [("get", GET), ("watch-start", WATCH)] {
        let mut g = c.benchmark_group(format!("auth/{name}"));
        let call = |svc: &watchgate::stack::ApiServiceOf<Empty<Bytes>>, uri: &str| {
            let svc = svc.clone();
            let req = request(uri);
            rt.block_on(async move {
                use tower::ServiceExt;
                let resp = svc.oneshot(req).await.unwrap();
                assert_eq!(resp.status(), 200);
                resp.into_body().collect().await.unwrap();
            })
        };
        let none = layers(stub(), Options::default());
        g.bench_function("none", |b| b.iter(|| call(&none, uri)));

        let secured = |reviews: Arc<dyn Reviews>| {
            let _guard = rt.enter();
            layers(
                stub(),
                Options {
                    metrics: false,
                    security: Some(Security::new(&SecurityConfig::default(), reviews)),
                },
            )
        };
        let warm = secured(Arc::new(LocalReviews));
        call(&warm, uri);
        g.bench_function("warm", |b| b.iter(|| call(&warm, uri)));
        g.bench_function("cold/local", |b| {
            b.iter_batched(
                || secured(Arc::new(LocalReviews)),
                |svc| call(&svc, uri),
                BatchSize::SmallInput,
            )
        });
        g.bench_function("cold/sim", |b| {
            b.iter_batched(
                || secured(Arc::new(UpstreamReviews::new(upstream.clone()))),
                |svc| call(&svc, uri),
                BatchSize::SmallInput,
            )
        });
        g.finish();
    }
}

fn config() -> Criterion {
    let c = Criterion::default().configure_from_args();
    if quick() {
        c.warm_up_time(Duration::from_millis(200))
            .measurement_time(Duration::from_millis(500))
            .sample_size(10)
    } else {
        c
    }
}

/// Counting mode: runs one scenario `n` times (after the same set-up as with `n` = 0).
fn count(spec: &str) {
    let (scenario, n) = spec.rsplit_once(':').expect("scenario:n");
    let n: usize = n.parse().expect("a count");
    let (kind, variant) = scenario.split_once('/').expect("get|watch-start/variant");
    let uri = if kind == "get" { GET } else { WATCH };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let secured = |reviews: Arc<dyn Reviews>| {
        layers(
            stub(),
            Options {
                metrics: false,
                security: Some(Security::new(&SecurityConfig::default(), reviews)),
            },
        )
    };
    let run = |svc: &watchgate::stack::ApiServiceOf<Empty<Bytes>>| {
        let svc = svc.clone();
        rt.block_on(async move {
            use tower::ServiceExt;
            let resp = svc.oneshot(request(uri)).await.unwrap();
            assert_eq!(resp.status(), 200);
            resp.into_body().collect().await.unwrap();
        })
    };
    match variant {
        "none" => {
            let svc = layers(stub(), Options::default());
            run(&svc);
            (0..n).for_each(|_| run(&svc));
        }
        "warm" => {
            let svc = secured(Arc::new(LocalReviews));
            run(&svc);
            (0..n).for_each(|_| run(&svc));
        }
        "cold/local" => {
            // The same set-up whatever `n` (2,000 fresh stacks), so that the difference
            // between two counts is the requests alone.
            assert!(n <= 2000, "at most 2000 cold requests");
            let fresh: Vec<_> = (0..2000).map(|_| secured(Arc::new(LocalReviews))).collect();
            run(&secured(Arc::new(LocalReviews)));
            fresh.iter().take(n).for_each(run);
        }
        other => panic!("unknown variant {other}"),
    }
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench
}

fn main() {
    if let Ok(spec) = std::env::var("WATCHGATE_AUTH_COUNT") {
        count(&spec);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}

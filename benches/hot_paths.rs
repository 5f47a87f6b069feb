//! Criterion micro-benchmarks of the hot paths (issue 7): selector parse and match, event
//! framing, list assembly from cached bytes (JSON; JSON and protobuf for 50,000 pods,
//! issue 14), upstream event parsing, dispatch of one event to 10,000 indexed watchers,
//! the simulator's write of one object (with its Go struct round trip,
//! `sim::protobuf::normalize`), and the routing decision of one read (issue 28).
//!
//!     cargo bench --bench hot_paths                          # full: ~1 min 40 s of running
//!     WATCHGATE_BENCH_QUICK=1 cargo bench --bench hot_paths  # short measurements: ~10 s
//!     cargo test --benches                                   # CI smoke: each bench once
//!
//! Objects are the simulator's seeded pods (realistic, padded to ~4 KiB). The times are
//! wall clock on the 2-core development machine when quiet, after the release build
//! (which takes longer than the run when it starts from nothing).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use http_body_util::BodyExt;

use watchgate::cache::events::{LineSplitter, RawEvent};
use watchgate::codec::list::{ListBody, ListHead};
use watchgate::model::object::CachedObject;
use watchgate::model::snapshot::Snapshot;
use watchgate::selector::field::FieldSelector;
use watchgate::selector::label::LabelSelector;
use watchgate::sim::resources::RESOURCES;
use watchgate::sim::seed::{pod, SeedSpec};
use watchgate::watch::event::{Change, Delivery, EncodedBytes, Encoder, Event};
use watchgate::watch::filter::WatchFilter;
use watchgate::watch::hub::{Hub, Start};

fn quick() -> bool {
    std::env::var_os("WATCHGATE_BENCH_QUICK").is_some()
}

fn pod_fields() -> Vec<(&'static str, &'static str)> {
    RESOURCES
        .iter()
        .find(|r| r.group.is_empty() && r.resource == "pods")
        .map(|r| r.fields.iter().map(|f| (f.label, f.path)).collect())
        .expect("pods are a simulated resource")
}

/// Seeded pod `i` with a resourceVersion, as the upstream would send it.
fn pod_json(spec: &SeedSpec, i: usize, rv: u64) -> Vec<u8> {
    let mut v = pod(spec, i, jiff::Timestamp::now());
    v["metadata"]["resourceVersion"] = serde_json::json!(rv.to_string());
    serde_json::to_vec(&v).unwrap()
}

fn cached(spec: &SeedSpec, i: usize, rv: u64) -> Arc<CachedObject> {
    Arc::new(CachedObject::parse(Bytes::from(pod_json(spec, i, rv)), &pod_fields()).unwrap())
}

fn spec(pods: usize, nodes: usize) -> SeedSpec {
    SeedSpec {
        nodes,
        ..SeedSpec::per_type(pods, 4096)
    }
}

fn selectors(c: &mut Criterion) {
    let s = spec(100, 20);
    let obj = cached(&s, 7, 100);
    let mut g = c.benchmark_group("selector");
    g.bench_function("parse label (3 requirements)", |b| {
        b.iter(|| LabelSelector::parse("app=web,tier in (frontend,backend),!canary").unwrap())
    });
    g.bench_function("parse field (2 terms)", |b| {
        b.iter(|| {
            FieldSelector::parse("spec.nodeName=node-7,metadata.namespace!=kube-system").unwrap()
        })
    });
    let label = WatchFilter {
        labels: LabelSelector::parse("app,tier in (frontend,backend),!canary").unwrap(),
        ..Default::default()
    };
    g.bench_function("match label selector", |b| b.iter(|| label.matches(&obj)));
    let field = WatchFilter {
        fields: FieldSelector::parse("spec.nodeName=node-7").unwrap(),
        ..Default::default()
    };
    g.bench_function("match field selector (spec.nodeName)", |b| {
        b.iter(|| field.matches(&obj))
    });
    g.finish();
}

fn framing(c: &mut Criterion) {
    let s = spec(100, 20);
    let obj = cached(&s, 3, 100);
    let enc = Encoder::new("Pod", "v1");
    let mut g = c.benchmark_group("framing");
    g.throughput(Throughput::Bytes(obj.raw.len() as u64));
    g.bench_function("encode one event line (4 KiB pod)", |b| {
        b.iter(|| enc.object_line("MODIFIED", &obj))
    });
    // Encode once, share: every further watcher gets a clone of the same bytes.
    let ev = Event::new(1, 100, Change::Upsert, obj.clone(), Some(obj.clone()));
    let encoded = EncodedBytes::default();
    let _ = ev.line(Delivery::Modified, &enc, &encoded);
    g.bench_function("shared event line (per extra watcher)", |b| {
        b.iter(|| ev.line(Delivery::Modified, &enc, &encoded))
    });
    g.finish();
}

fn lists(c: &mut Criterion) {
    let n = if quick() { 500 } else { 5000 };
    let s = spec(n, 50);
    let mut snap = Snapshot::default();
    for i in 0..n {
        snap.insert(cached(&s, i, 100 + i as u64));
    }
    let bytes = snap.bytes as u64;
    let snap = Arc::new(snap);
    let head = ListHead {
        api_version: "v1".into(),
        kind: "PodList".into(),
        resource_version: 100 + n as u64,
        items: watchgate::codec::list::ItemForm::Bare,
        continue_token: None,
        remaining_item_count: None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("list");
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function(format!("assemble RV=0 list of {n} cached pods"), |b| {
        b.iter(|| {
            let body = ListBody::new(head.clone(), snap.clone(), None, None);
            rt.block_on(body.collect()).unwrap().to_bytes().len()
        })
    });
    g.finish();
}

/// Issue 14: the throughput of a 50,000-pod RV=0 list from the cache in protobuf, next to
/// the same list in JSON. "warm": every object's message is built (any protobuf list or
/// watch after the first); "first": the first protobuf list of the type, which encodes
/// each object's message from its JSON (then kept). Both assemble what the gateway's
/// `serve::read` assembles (the JSON `ListBody`; the protobuf envelope around each
/// object's message, `ProtoListBody`), without HTTP.
fn big_lists(c: &mut Criterion) {
    use watchgate::codec::gzip::ChunkSource;
    use watchgate::codec::proto_list::{framed_len, ProtoListBody};
    use watchgate::proto::{ListEnvelope, ListMeta};
    let n = if quick() { 5_000 } else { 50_000 };
    let s = spec(n, 500);
    let objects: Vec<Arc<CachedObject>> = (0..n).map(|i| cached(&s, i, 100 + i as u64)).collect();
    let snapshot_of = |objects: &[Arc<CachedObject>]| {
        let mut snap = Snapshot::default();
        for o in objects {
            snap.insert(o.clone());
        }
        Arc::new(snap)
    };
    let snap = snapshot_of(&objects);
    let bytes = snap.bytes as u64;
    let pod = watchgate::proto::lookup("", "v1", "Pod").unwrap();
    let pod_list = watchgate::proto::lookup("", "v1", "PodList").unwrap();
    let head = ListHead {
        api_version: "v1".into(),
        kind: "PodList".into(),
        resource_version: 100 + n as u64,
        items: watchgate::codec::list::ItemForm::Bare,
        continue_token: None,
        remaining_item_count: None,
    };
    let protobuf_list = |snap: &Snapshot| {
        let items: Vec<Bytes> = snap
            .objects
            .values()
            .map(|o| o.proto(pod).unwrap())
            .collect();
        let rv = snap.resource_version.to_string();
        let meta = ListMeta {
            resource_version: &rv,
            continue_token: "",
            remaining_item_count: None,
        };
        let envelope =
            ListEnvelope::new(pod_list, "v1", "PodList", &meta, framed_len(&items)).unwrap();
        let mut body = ProtoListBody::new(envelope, items);
        let mut len = 0;
        while let Some(chunk) = body.next_chunk() {
            len += chunk.len();
        }
        len
    };
    let mut g = c.benchmark_group("list of 50k pods");
    g.sample_size(10);
    // Throughput in the JSON's bytes for all three, so the figures compare per object.
    g.throughput(Throughput::Bytes(bytes));
    // Both sides count their chunks' bytes as a socket write would take them (no
    // concatenation into one 200 MB buffer, which would dominate the measure).
    g.bench_function(format!("JSON, RV=0 list of {n} cached pods"), |b| {
        b.iter(|| {
            let mut body = ListBody::new(head.clone(), snap.clone(), None, None);
            let mut len = 0;
            while let Some(chunk) = ChunkSource::next_chunk(&mut body) {
                len += chunk.len();
            }
            len
        })
    });
    protobuf_list(&snap);
    g.bench_function(
        format!("protobuf warm, RV=0 list of {n} cached pods"),
        |b| b.iter(|| protobuf_list(&snap)),
    );
    g.bench_function(
        format!("protobuf first, RV=0 list of {n} cached pods"),
        |b| {
            b.iter_batched(
                || {
                    let fresh: Vec<Arc<CachedObject>> = objects
                        .iter()
                        .map(|o| {
                            Arc::new(CachedObject::parse(o.raw.clone(), &pod_fields()).unwrap())
                        })
                        .collect();
                    snapshot_of(&fresh)
                },
                |snap| protobuf_list(&snap),
                BatchSize::PerIteration,
            )
        },
    );
    g.finish();
}

fn upstream_events(c: &mut Criterion) {
    let s = spec(100, 20);
    let fields = pod_fields();
    let mut line = br#"{"type":"MODIFIED","object":"#.to_vec();
    line.extend_from_slice(&pod_json(&s, 5, 12345));
    line.extend_from_slice(b"}\n");
    let frame = Bytes::from(line);
    let mut g = c.benchmark_group("upstream event");
    g.throughput(Throughput::Bytes(frame.len() as u64));
    g.bench_function(
        "split + parse event + CachedObject::parse (4 KiB pod)",
        |b| {
            b.iter(|| {
                let mut split = LineSplitter::default();
                let lines = split.push(frame.clone()).unwrap();
                let ev: RawEvent = serde_json::from_slice(&lines[0]).unwrap();
                let raw = Bytes::copy_from_slice(ev.object.get().as_bytes());
                CachedObject::parse(raw, &fields).unwrap()
            })
        },
    );
    g.finish();
}

/// A hub of pods with `n` live watchers, each filtered by `filter(i)`.
fn hub_with(
    n: usize,
    filter: impl Fn(usize) -> WatchFilter,
) -> (
    Hub,
    Vec<watchgate::watch::queue::Receiver<watchgate::watch::queue::Item>>,
) {
    let hub = Hub::new(
        Encoder::new("Pod", "v1"),
        Default::default(),
        &["spec.nodeName"],
        metrics::histogram!("bench_dispatch_seconds"),
    );
    let mut rxs = Vec::with_capacity(n);
    for i in 0..n {
        let reg = hub
            .register(
                || -> Arc<Snapshot> { unreachable!("no initial state") },
                filter(i),
                watchgate::watch::encoding::WatchEncoding::Json,
                Start::After(0),
            )
            .unwrap_or_else(|_| panic!("a fresh hub has no history to be too old for"));
        rxs.push(reg.live.expect("joins live dispatch at once"));
    }
    (hub, rxs)
}

fn dispatch(c: &mut Criterion) {
    let n = 10_000;
    let nodes = 10_000;
    let s = spec(nodes, nodes);
    let mut g = c.benchmark_group("dispatch");
    g.throughput(Throughput::Elements(1));

    // Kubelets: watcher i watches spec.nodeName=node-i; each event reaches one of them.
    let (hub, mut rxs) = hub_with(n, |i| WatchFilter {
        fields: FieldSelector::parse(&format!("spec.nodeName=node-{i}")).unwrap(),
        ..Default::default()
    });
    let objs: Vec<Arc<CachedObject>> = (0..64)
        .map(|i| cached(&s, i * 131 % nodes, 1 + i as u64))
        .collect();
    let mut rv = 1_000u64;
    let mut k = 0usize;
    g.bench_function(
        "one event to 10,000 kubelet watchers (indexed by spec.nodeName)",
        |b| {
            b.iter(|| {
                rv += 1;
                k = (k + 1) % objs.len();
                let o = Arc::new(objs[k].with_resource_version(rv));
                let node = k * 131 % nodes;
                let mut st = hub.lock();
                let published = hub.publish(&mut st, Change::Upsert, o, Some(objs[k].clone()));
                drop(st);
                published.deliver(&hub);
                // The one recipient reads it, so its queue never fills.
                rxs[node]
                    .try_recv()
                    .flatten()
                    .expect("delivered to its kubelet")
            })
        },
    );
    drop((hub, rxs));

    // Everyone: 10,000 watchers of the namespace, each event reaches all of them
    // (the cost includes every recipient reading its copy of the shared line).
    let ns = s.namespace_of(0);
    let (hub, mut rxs) = hub_with(n, |_| WatchFilter {
        namespace: Some(ns.clone().into()),
        ..Default::default()
    });
    let base = cached(&s, 0, 1);
    g.bench_function(
        "one event to 10,000 watchers that all match (+ their reads)",
        |b| {
            b.iter_batched(
                || {
                    rv += 1;
                    Arc::new(base.with_resource_version(rv))
                },
                |o| {
                    let mut st = hub.lock();
                    let published = hub.publish(&mut st, Change::Upsert, o, Some(base.clone()));
                    drop(st);
                    published.deliver(&hub);
                    for rx in rxs.iter_mut() {
                        rx.try_recv().flatten().expect("delivered to every watcher");
                    }
                },
                BatchSize::SmallInput,
            )
        },
    );
    g.finish();
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

/// The simulator's write of a seeded 4 KiB pod, and the part of it that stores the pod as
/// kube-apiserver would (JSON → protobuf → JSON, `sim::protobuf::normalize`): what every
/// write of the demo's churn and the load kit pays.
fn sim_writes(c: &mut Criterion) {
    use watchgate::sim::store::{Mutation, Store, StoreConfig};
    let s = spec(100, 20);
    let pods = RESOURCES
        .iter()
        .find(|r| r.group.is_empty() && r.resource == "pods")
        .unwrap();
    let obj = pod(&s, 7, jiff::Timestamp::now());
    let ns = obj["metadata"]["namespace"].as_str().unwrap().to_string();
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let mut g = c.benchmark_group("sim write");
    g.bench_function("normalize a 4 KiB pod (JSON -> protobuf -> JSON)", |b| {
        b.iter_batched(
            || obj.clone(),
            |mut v| watchgate::sim::protobuf::normalize(pods, &mut v).unwrap(),
            BatchSize::SmallInput,
        )
    });
    // Bounded history, so the store does not grow over the run.
    let store = Store::new(StoreConfig {
        history_events: 1000,
        ..StoreConfig::default()
    });
    // A label changes on every write: an unchanged object is not written (no event).
    let mut n = 0u64;
    g.bench_function("store write of a 4 KiB pod (normalize included)", |b| {
        b.iter_batched(
            || {
                n += 1;
                let mut v = obj.clone();
                v["metadata"]["labels"]["n"] = serde_json::json!(n.to_string());
                v
            },
            |v| {
                store
                    .mutate(pods, &ns, &name, |_| Ok(Mutation::Put(v)))
                    .unwrap()
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// Where one read is answered: the routing decision (`serve::route::decide`) for the
/// requests client-go's informers and controllers send most, beside the request's parse
/// that precedes it (both once per request).
fn routing(c: &mut Criterion) {
    use watchgate::cache::fresh::ConsistentReads;
    use watchgate::model::resource::ResourceInfo;
    use watchgate::request::Parsed;
    use watchgate::serve::route::{decide, Known, Route, Standing};
    let info = ResourceInfo {
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
        kind: "Pod".into(),
        namespaced: true,
        field_labels: pod_fields(),
    };
    let known = Known {
        authorized: true,
        consistent_reads: ConsistentReads::Cache,
        resource: Standing::Discovered(&info),
    };
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static("application/vnd.kubernetes.protobuf, */*"),
    );
    let mut g = c.benchmark_group("routing");
    for (what, target) in [
        ("get", "/api/v1/namespaces/ns-1/pods/p-1"),
        (
            "watch-list",
            "/api/v1/pods?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds=544&watch=true",
        ),
        (
            "list by node",
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1&limit=500&resourceVersion=0",
        ),
    ] {
        let uri: http::Uri = target.parse().unwrap();
        g.bench_function(format!("parse a {what}"), |b| {
            b.iter(|| Parsed::new(&http::Method::GET, &uri, &headers))
        });
        let parsed = Parsed::new(&http::Method::GET, &uri, &headers);
        assert!(!matches!(decide(&parsed, &known), Route::Forward(_)));
        g.bench_function(format!("decide a {what}"), |b| {
            b.iter(|| matches!(decide(&parsed, &known), Route::Forward(_)))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = selectors, framing, lists, big_lists, upstream_events, dispatch, sim_writes, routing
}
criterion_main!(benches);

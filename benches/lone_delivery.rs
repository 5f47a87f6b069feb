//! The CPU cost of one lone watch event reaching idle watchers (issue 18): dispatch →
//! bytes on the socket, over HTTP/1.1 and HTTP/2, next to the floor (the same bytes
//! written straight to the same kind of socket, one `write` per watcher or per
//! connection).
//!
//!     cargo bench --bench lone_delivery                          # 1,000 watchers, 200 events, 3 rounds
//!     LONE_WATCHERS=10000 LONE_EVENTS=40 cargo bench --bench lone_delivery
//!     LONE_MODES=h1,floor-h1 cargo bench --bench lone_delivery  # some of h1 h2 floor-h1 floor-h2
//!     WATCHGATE_BENCH_QUICK=1 cargo bench --bench lone_delivery  # 40 watchers, 10 events, 1 round
//!
//! One process, three runtimes, each on its own threads: the gateway (`gw-*`: two
//! workers, as on the 2-core machine), the simulator it syncs from (`sim-*`), and the
//! clients (`client-*`). Events are injected into the gateway's configmap store the way
//! its reflector applies them (`Store::apply`, from a task on the gateway's runtime), so
//! the gateway's CPU covers dispatch, wake-ups, framing and the socket writes, and nothing
//! of the upstream. Each event is applied only once every watcher has read the previous
//! one and the gateway has been idle for `LONE_GAP_MS` (10 ms): every delivery is a lone
//! event reaching an idle watcher, the common case of real fan-out.
//!
//! CPU is the gateway threads' own time on the CPU (`/proc/self/task/*/schedstat`, in
//! nanoseconds) over the measured events, divided by the deliveries; the modes run in
//! turn, round after round, and each figure is the median of its rounds, so a drift of
//! the machine's speed hits every mode alike. Latency is from `Store::apply` to a client
//! reading the event.
//!
//! - `h1`: one HTTP/1.1 connection per watch (the detached chunked writer, server/h1.rs);
//! - `h2`: 100 watches per HTTP/2 connection (as client-go multiplexes), coalesced writes;
//! - `floor-h1`: one `write` of the event's chunk (`{len}\r\n{line}\r\n`) per socket;
//! - `floor-h2`: one `write` per connection of 100 DATA frames (9-byte head + line).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::Notify;

use watchgate::cache::object::CachedObject;
use watchgate::cache::registry::CachePolicy;
use watchgate::cache::store::{Change, Store};
use watchgate::config::GatewayConfig;
use watchgate::server::{Gateway, GatewayHandle};
use watchgate::sim::{start, SimConfig};

/// Each gateway mode watches its own namespace, so that its events reach only its own
/// watchers (the dispatch index buckets watchers by namespace).
const H1_NAMESPACE: &str = "default";
const H2_NAMESPACE: &str = "kube-public";
const STREAMS_PER_CONNECTION: usize = 100;
/// The configmap's data value: events of about 1.1 KB, like the load kit's pods.
const DATA_BYTES: usize = 1000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn runtime(name: &'static str, workers: usize) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("runtime")
}

/// CPU time (ns) and context switches of this process's threads whose name starts with
/// `prefix`.
fn threads_cpu(prefix: &str) -> (u64, u64) {
    let mut ns = 0;
    let mut switches = 0;
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let dir = task.expect("task").path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        let sched = std::fs::read_to_string(dir.join("schedstat")).unwrap_or_default();
        ns += sched
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        for line in status.lines() {
            if let Some(v) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                switches += v.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    (ns, switches)
}

/// What the clients of one mode report to the driver.
struct Progress {
    epoch: Instant,
    received: AtomicU64,
    /// The driver is woken when `received` reaches this.
    target: AtomicU64,
    done: Notify,
    /// When the current event was applied (ns since `epoch`).
    sent_at: AtomicU64,
    /// Delivery latencies (µs) while measuring.
    latencies: Mutex<Vec<u32>>,
    measuring: std::sync::atomic::AtomicBool,
}

impl Progress {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            epoch: Instant::now(),
            received: AtomicU64::new(0),
            target: AtomicU64::new(u64::MAX),
            done: Notify::new(),
            sent_at: AtomicU64::new(0),
            latencies: Mutex::new(Vec::new()),
            measuring: Default::default(),
        })
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn got(&self, events: u64) {
        if events == 0 {
            return;
        }
        if self.measuring.load(Ordering::Acquire) {
            let lat = (self.now_ns() - self.sent_at.load(Ordering::Acquire)) / 1000;
            let mut l = self.latencies.lock().unwrap();
            for _ in 0..events {
                l.push(lat as u32);
            }
        }
        let now = self.received.fetch_add(events, Ordering::AcqRel) + events;
        if now >= self.target.load(Ordering::Acquire) {
            self.done.notify_one();
        }
    }
}

/// Counts event lines (`…}\n`) in a byte stream read in pieces.
#[derive(Default)]
struct LineCounter {
    last: u8,
}

impl LineCounter {
    fn count(&mut self, bytes: &[u8]) -> u64 {
        let mut n = 0;
        let mut prev = self.last;
        for &b in bytes {
            if b == b'\n' && prev == b'}' {
                n += 1;
            }
            prev = b;
        }
        self.last = prev;
        n
    }
}

/// An HTTP/1.1 watch read from a raw socket, or (`path` = None) a bare socket of the floor.
async fn raw_reader(mut s: TcpStream, path: Option<String>, ready: Arc<Ready>, p: Arc<Progress>) {
    s.set_nodelay(true).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut lines = LineCounter::default();
    if let Some(path) = path {
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: bench\r\nAccept: application/json\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
        let mut head = Vec::new();
        let end = loop {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "the gateway closed the watch");
            head.extend_from_slice(&buf[..n]);
            if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let text = String::from_utf8_lossy(&head[..end]).to_lowercase();
        assert!(text.starts_with("http/1.1 200"), "{text}");
        assert!(text.contains("x-watchgate-source: cache"), "{text}");
        assert!(text.contains("transfer-encoding: chunked"), "{text}");
        p.got(lines.count(&head[end..]));
    }
    ready.one();
    loop {
        let n = match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        p.got(lines.count(&buf[..n]));
    }
}

/// `streams` HTTP/2 watches on one connection.
async fn h2_connection(
    addr: String,
    path: String,
    streams: usize,
    ready: Arc<Ready>,
    p: Arc<Progress>,
) {
    let tcp = TcpStream::connect(&addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    // As the load kit's HTTP/2 connections (src/load/target.rs).
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .adaptive_window(true)
        .handshake::<_, Empty<Bytes>>(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    for _ in 0..streams {
        let mut sender = sender.clone();
        let req = http::Request::get(format!("http://{addr}{path}"))
            .header("accept", "application/json")
            .body(Empty::new())
            .unwrap();
        sender.ready().await.unwrap();
        let resp = sender.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()
                .get("x-watchgate-source")
                .map(|v| v.as_bytes()),
            Some(&b"cache"[..])
        );
        let p = p.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            let mut body = resp.into_body();
            let mut lines = LineCounter::default();
            ready.one();
            while let Some(Ok(frame)) = body.frame().await {
                if let Ok(data) = frame.into_data() {
                    p.got(lines.count(&data));
                }
            }
        });
    }
}

/// A configmap of about 1.1 KB at `rv`.
fn configmap(namespace: &str, i: usize, rv: u64) -> Arc<CachedObject> {
    let raw = serde_json::json!({
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {
            "name": format!("lone-{i}"),
            "namespace": namespace,
            "uid": "6b1e5f8e-0d6a-4d4e-9a51-9a0a1f7b1c2d",
            "resourceVersion": rv.to_string(),
            "creationTimestamp": "2026-11-24T00:00:00Z",
        },
        "data": { "payload": "x".repeat(DATA_BYTES) },
    });
    Arc::new(CachedObject::parse(Bytes::from(serde_json::to_vec(&raw).unwrap()), &[]).unwrap())
}

/// The wire line the gateway sends for `obj` as a MODIFIED event (what the floor writes).
fn event_line(obj: &CachedObject) -> Vec<u8> {
    let mut line = b"{\"type\":\"MODIFIED\",\"object\":".to_vec();
    line.extend_from_slice(&obj.raw);
    line.extend_from_slice(b"}\n");
    line
}

/// How one mode puts an event on the wire.
enum Emit {
    /// Apply it to the gateway's store, in this namespace (the gateway does the rest).
    Store(Arc<Store>, &'static str),
    /// Write these bytes to each socket with one `write` (or as few as it takes).
    Sockets(Vec<TcpStream>, Vec<u8>),
}

struct Mode {
    name: &'static str,
    what: String,
    emit: Emit,
    progress: Arc<Progress>,
    /// Deliveries per event.
    fanout: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Round {
    cpu_us_per_delivery: f64,
    switches_per_event: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn pct(v: &mut [u32], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p) as usize] as f64 / 1000.0
}

/// Emits `events` lone events through `mode`; the CPU of the gateway's threads per delivery.
async fn run_round(
    mode: &Mode,
    rv: &AtomicU64,
    events: usize,
    gap: Duration,
    measure: bool,
) -> Round {
    let p = &mode.progress;
    p.latencies.lock().unwrap().clear();
    p.measuring.store(measure, Ordering::Release);
    let (cpu0, sw0) = threads_cpu("gw-");
    for i in 0..events {
        let base = p.received.load(Ordering::Acquire);
        p.target.store(base + mode.fanout, Ordering::Release);
        let r = rv.fetch_add(1, Ordering::AcqRel) + 1;
        p.sent_at.store(p.now_ns(), Ordering::Release);
        match &mode.emit {
            Emit::Store(store, ns) => store.apply(Change::Upsert(configmap(ns, i % 16, r))),
            Emit::Sockets(socks, bytes) => {
                for s in socks {
                    // One `write` each, unless the socket cannot take it all at once.
                    let mut rest = &bytes[..];
                    while !rest.is_empty() {
                        match s.try_write(rest) {
                            Ok(n) => rest = &rest[n..],
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                                s.writable().await.unwrap();
                            }
                            Err(e) => panic!("floor write: {e}"),
                        }
                    }
                }
            }
        }
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            while p.received.load(Ordering::Acquire) < base + mode.fanout {
                p.done.notified().await;
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "{}: event {i} reached {} of {} watchers in 60 s",
            mode.name,
            p.received.load(Ordering::Acquire) - base,
            mode.fanout
        );
        tokio::time::sleep(gap).await;
    }
    let (cpu1, sw1) = threads_cpu("gw-");
    p.measuring.store(false, Ordering::Release);
    let mut lat = std::mem::take(&mut *p.latencies.lock().unwrap());
    let deliveries = (events as u64 * mode.fanout) as f64;
    Round {
        cpu_us_per_delivery: (cpu1 - cpu0) as f64 / 1000.0 / deliveries,
        switches_per_event: (sw1 - sw0) as f64 / events as f64,
        p50_ms: pct(&mut lat, 0.5),
        p99_ms: pct(&mut lat, 0.99),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Counts the watches (or sockets) that have started.
#[derive(Default)]
struct Ready {
    n: AtomicU64,
    changed: Notify,
}

impl Ready {
    fn one(&self) {
        self.n.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_one();
    }
}

async fn wait_ready(ready: &Ready, n: usize) {
    tokio::time::timeout(Duration::from_secs(120), async {
        while ready.n.load(Ordering::Acquire) < n as u64 {
            ready.changed.notified().await;
        }
    })
    .await
    .expect("every watch starts");
}

fn main() {
    let quick = std::env::var_os("WATCHGATE_BENCH_QUICK").is_some();
    let watchers = env_usize("LONE_WATCHERS", if quick { 40 } else { 1000 });
    let events = env_usize("LONE_EVENTS", if quick { 10 } else { 200 });
    let rounds = env_usize("LONE_ROUNDS", if quick { 1 } else { 3 });
    let gap = Duration::from_millis(env_usize("LONE_GAP_MS", 10) as u64);
    let modes: Vec<String> = std::env::var("LONE_MODES")
        .unwrap_or_else(|_| "h1,h2,floor-h1,floor-h2".into())
        .split(',')
        .map(str::to_string)
        .collect();
    let want = |m: &str| modes.iter().any(|x| x == m);
    let per_conn = STREAMS_PER_CONNECTION.min(watchers);
    assert!(
        watchers % per_conn == 0 || !(want("h2") || want("floor-h2")),
        "LONE_WATCHERS must be a multiple of {STREAMS_PER_CONNECTION} for the HTTP/2 modes"
    );
    let _ = rlimit::increase_nofile_limit(u64::MAX);

    // The gateway's runtime is created first and named, so its threads can be told apart.
    let gw_rt = runtime("gw-worker", 2);
    let sim_rt = runtime("sim-worker", 1);
    let client_rt = runtime("client-worker", 2);

    let sim = sim_rt.block_on(async {
        start(SimConfig {
            bootstrap_namespaces: true,
            ..SimConfig::default()
        })
        .await
        .unwrap()
    });
    let sim_url = sim.url();
    let gw: GatewayHandle = gw_rt.block_on(async move {
        let mut cfg = GatewayConfig::for_upstream_url(&sim_url).unwrap();
        cfg.cache = Some(CachePolicy {
            prewarm: vec!["configmaps".into()],
            exclude: vec![],
        });
        Gateway::start(cfg).await.unwrap()
    });
    let store = gw_rt.block_on(async {
        let started = Instant::now();
        loop {
            if let Some(c) = gw.cache().and_then(|r| r.get("", "v1", "configmaps")) {
                if c.is_synced() {
                    break c.store.clone();
                }
            }
            assert!(started.elapsed() < Duration::from_secs(60), "never synced");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    // Synthetic events go well above the simulator's resourceVersions.
    let rv = Arc::new(AtomicU64::new(store.resource_version() + 1_000_000));
    let line = event_line(&configmap(H1_NAMESPACE, 0, rv.load(Ordering::Acquire) + 1));
    // From the store's current resourceVersion: no initial events, only the injected ones.
    let watch_path = |ns: &str| {
        format!(
            "/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={}",
            store.resource_version()
        )
    };
    let addr = gw.addr().to_string();

    let mut built: Vec<Mode> = Vec::new();
    if want("h1") {
        let p = Progress::new();
        let ready = Arc::new(Ready::default());
        for _ in 0..watchers {
            let (addr, p, ready) = (addr.clone(), p.clone(), ready.clone());
            let path = watch_path(H1_NAMESPACE);
            client_rt.spawn(async move {
                let s = TcpStream::connect(&addr).await.unwrap();
                raw_reader(s, Some(path), ready, p).await
            });
        }
        client_rt.block_on(wait_ready(&ready, watchers));
        built.push(Mode {
            name: "h1",
            what: "HTTP/1.1, one connection per watch (detached chunked writer)".into(),
            emit: Emit::Store(store.clone(), H1_NAMESPACE),
            progress: p,
            fanout: watchers as u64,
        });
    }
    if want("h2") {
        let p = Progress::new();
        let ready = Arc::new(Ready::default());
        for _ in 0..watchers / per_conn {
            client_rt.spawn(h2_connection(
                addr.clone(),
                watch_path(H2_NAMESPACE),
                per_conn,
                ready.clone(),
                p.clone(),
            ));
        }
        client_rt.block_on(wait_ready(&ready, watchers));
        built.push(Mode {
            name: "h2",
            what: format!("HTTP/2, {per_conn} watches per connection"),
            emit: Emit::Store(store.clone(), H2_NAMESPACE),
            progress: p,
            fanout: watchers as u64,
        });
    }
    // The floors: bare sockets accepted on the gateway's runtime, read by the same readers.
    let floor = |conns: usize, bytes: Vec<u8>, fanout: u64, name: &'static str, what: String| {
        let p = Progress::new();
        let ready = Arc::new(Ready::default());
        let listener = gw_rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let local = listener.local_addr().unwrap();
        let mut socks = Vec::with_capacity(conns);
        for _ in 0..conns {
            let (p, ready) = (p.clone(), ready.clone());
            client_rt.spawn(async move {
                let s = TcpStream::connect(local).await.unwrap();
                raw_reader(s, None, ready, p).await
            });
            let (s, _) = gw_rt.block_on(listener.accept()).unwrap();
            s.set_nodelay(true).unwrap();
            socks.push(s);
        }
        client_rt.block_on(wait_ready(&ready, conns));
        Mode {
            name,
            what,
            emit: Emit::Sockets(socks, bytes),
            progress: p,
            fanout,
        }
    };
    if want("floor-h1") {
        let mut chunk = format!("{:X}\r\n", line.len()).into_bytes();
        chunk.extend_from_slice(&line);
        chunk.extend_from_slice(b"\r\n");
        built.push(floor(
            watchers,
            chunk,
            watchers as u64,
            "floor-h1",
            "floor: one write of the event's chunk per socket".into(),
        ));
    }
    if want("floor-h2") {
        let mut frames = Vec::new();
        for _ in 0..per_conn {
            // A DATA frame's 9-byte head (length, type 0, no flags, stream 1), then the line.
            let len = line.len() as u32;
            frames.extend_from_slice(&len.to_be_bytes()[1..]);
            frames.extend_from_slice(&[0, 0, 0, 0, 0, 1]);
            frames.extend_from_slice(&line);
        }
        built.push(floor(
            watchers / per_conn,
            frames,
            watchers as u64,
            "floor-h2",
            format!("floor: one write of {per_conn} DATA frames per connection"),
        ));
    }

    println!(
        "lone deliveries: {watchers} watchers, {events} events per round ({} ms apart), {rounds} rounds, event line {} bytes",
        gap.as_millis(),
        line.len()
    );
    // The driver is a task on the gateway's runtime, as the reflector that applies
    // upstream events is.
    let built = Arc::new(built);
    let driver = {
        let (built, rv) = (built.clone(), rv.clone());
        gw_rt.spawn(async move {
            for m in built.iter() {
                // Warm-up: every connection detached, every buffer and wake path exercised.
                run_round(m, &rv, 5, gap, false).await;
            }
            let mut results: Vec<Vec<Round>> = vec![Vec::new(); built.len()];
            for _ in 0..rounds {
                for (i, m) in built.iter().enumerate() {
                    results[i].push(run_round(m, &rv, events, gap, true).await);
                }
            }
            results
        })
    };
    let results = gw_rt.block_on(driver).expect("the driver");
    let mut cpu = std::collections::HashMap::new();
    for (m, rs) in built.iter().zip(&results) {
        let c = median(rs.iter().map(|r| r.cpu_us_per_delivery).collect());
        cpu.insert(m.name, c);
        println!(
            "  {:<9} {:>7.2} µs CPU per delivery (rounds: {}), {:>6.1} gateway context switches per event, latency p50 {:.2} ms p99 {:.2} ms  [{}]",
            m.name,
            c,
            rs.iter()
                .map(|r| format!("{:.2}", r.cpu_us_per_delivery))
                .collect::<Vec<_>>()
                .join(" "),
            median(rs.iter().map(|r| r.switches_per_event).collect()),
            median(rs.iter().map(|r| r.p50_ms).collect()),
            median(rs.iter().map(|r| r.p99_ms).collect()),
            m.what,
        );
    }
    for (a, b) in [("h1", "floor-h1"), ("h2", "floor-h2")] {
        if let (Some(x), Some(y)) = (cpu.get(a), cpu.get(b)) {
            println!("  {a} / {b}: {:.2}×", x / y);
        }
    }
    drop(built);
    drop(gw);
    drop(sim);
    client_rt.shutdown_background();
    gw_rt.shutdown_background();
    sim_rt.shutdown_background();
}

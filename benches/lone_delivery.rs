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
//! The gateway runs in this process on a runtime of its own (`gw-*`: two workers, as on
//! the 2-core machine), in front of an in-process simulator it syncs from (`sim-*`). The
//! watch clients run in a child process (this binary again), as the load kit does, so
//! that they share the cores but not the gateway's accounting. Events are injected into
//! the gateway's configmap store the way its reflector applies them (`Store::apply`, from
//! a task on the gateway's runtime): the gateway's CPU covers dispatch, wake-ups, framing
//! and the socket writes, and nothing of the upstream. Each event is applied only once
//! every watcher has read the previous one and `LONE_GAP_MS` (10 ms) have passed, so every
//! delivery is a lone event reaching an idle watcher: the common case of real fan-out.
//!
//! CPU is the gateway threads' own time on the CPU (`/proc/self/task/*/schedstat`, in
//! nanoseconds) over the measured events, divided by the deliveries. The modes run in
//! turn, round after round, and each figure is the median of its rounds, so a drift of the
//! machine's speed hits every mode alike. "fan-out" is the time from `Store::apply` until
//! the client process has seen the event on every watch (it then tells this process over
//! a control socket: one more loopback hop).
//!
//! - `h1`: one HTTP/1.1 connection per watch (the detached chunked writer, server/h1.rs);
//! - `h2`: 100 watches per HTTP/2 connection (as client-go multiplexes), coalesced writes;
//! - `floor-h1`: one `write` of the event's chunk (`{len}\r\n{line}\r\n`) per socket;
//! - `floor-h2`: one `write` per connection of 100 DATA frames (9-byte head + line);
//! - `h1-pb`, `h2-pb`: `h1` and `h2` with client-go's protobuf watches (`Accept:
//!   application/vnd.kubernetes.protobuf,application/json`): each event is a 4-byte length
//!   and a `WatchEvent` (about the JSON line's size), built once per event and shared.
//!   Not in the default set: `LONE_MODES=h1,h1-pb,h2,h2-pb`.
//!
//! Instructions, deterministically (user space only; the kernel's share is not counted):
//!
//!     valgrind --tool=callgrind --zero-before='*window_starts' --dump-after='*window_ends' \
//!         target/release/deps/lone_delivery-* # with LONE_MODES=h1 LONE_ROUNDS=1 …
//!
//! dumps one profile per measured round of this process (gateway, simulator and driver;
//! the clients are in the child).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

use watchgate::cache::registry::CachePolicy;
use watchgate::cache::store::{Change, StoreWriter};
use watchgate::config::GatewayConfig;
use watchgate::model::object::CachedObject;
use watchgate::server::{Gateway, GatewayHandle};
use watchgate::sim::{start, SimConfig};

/// Each gateway mode watches its own namespace, so that its events reach only its own
/// watchers (the dispatch index buckets watchers by namespace).
const H1_NAMESPACE: &str = "default";
const H2_NAMESPACE: &str = "kube-public";
const H1_PB_NAMESPACE: &str = "kube-system";
const H2_PB_NAMESPACE: &str = "kube-node-lease";
/// client-go's `Accept` for a built-in type's watch (protobuf first).
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf,application/json";
const STREAMS_PER_CONNECTION: usize = 100;
/// The configmap's data value: events of about 1.2 KB, like the load kit's pods.
const DATA_BYTES: usize = 1000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is set for the client process"))
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

// ---- the client process ---------------------------------------------------------------

/// Counts events in a byte stream read in pieces: JSON event lines (`…}\n`), or in a
/// protobuf stream (`protobuf`) the end of each object's payload (`…x!`, see
/// [`configmap`]), which no length prefix or chunk head can contain.
#[derive(Default)]
struct LineCounter {
    last: u8,
    protobuf: bool,
}

impl LineCounter {
    fn new(protobuf: bool) -> Self {
        Self { last: 0, protobuf }
    }

    fn count(&mut self, bytes: &[u8]) -> u64 {
        let (end, before) = if self.protobuf {
            (b'!', b'x')
        } else {
            (b'\n', b'}')
        };
        let mut n = 0;
        for i in memchr::memchr_iter(end, bytes) {
            let prev = if i == 0 { self.last } else { bytes[i - 1] };
            n += u64::from(prev == before);
        }
        if let Some(&b) = bytes.last() {
            self.last = b;
        }
        n
    }
}

/// What the client process's watches share: every event line seen, and the control
/// socket on which each completed event (seen on every watch) is reported.
struct Seen {
    lines: AtomicU64,
    fanout: u64,
    report: tokio::sync::mpsc::UnboundedSender<()>,
    started: AtomicU64,
    ready: tokio::sync::Notify,
}

impl Seen {
    fn got(&self, n: u64) {
        if n == 0 {
            return;
        }
        let before = self.lines.fetch_add(n, Ordering::AcqRel);
        for _ in before / self.fanout..(before + n) / self.fanout {
            let _ = self.report.send(());
        }
    }

    fn started(&self) {
        self.started.fetch_add(1, Ordering::AcqRel);
        self.ready.notify_one();
    }
}

/// An HTTP/1.1 watch read from a raw socket, or (`path` = None) a bare socket of a floor.
async fn raw_reader(
    addr: String,
    path: Option<String>,
    accept: &'static str,
    seen: Arc<Seen>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let mut s = TcpStream::connect(&addr).await.expect("connect");
    s.set_nodelay(true).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut lines = LineCounter::new(accept == PROTOBUF);
    if let Some(path) = path {
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: bench\r\nAccept: {accept}\r\n\r\n").as_bytes(),
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
        if accept == PROTOBUF {
            assert!(
                text.contains("content-type: application/vnd.kubernetes.protobuf;stream=watch"),
                "{text}"
            );
        }
        assert!(text.contains("transfer-encoding: chunked"), "{text}");
        seen.got(lines.count(&head[end..]));
    }
    drop(permit);
    seen.started();
    loop {
        let n = match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        seen.got(lines.count(&buf[..n]));
    }
}

/// `streams` HTTP/2 watches on one connection, as the load kit opens them
/// (src/load/target.rs).
async fn h2_connection(
    addr: String,
    path: String,
    accept: &'static str,
    streams: usize,
    seen: Arc<Seen>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let tcp = TcpStream::connect(&addr).await.expect("connect");
    tcp.set_nodelay(true).unwrap();
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .adaptive_window(true)
        .handshake::<_, Empty<Bytes>>(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    for _ in 0..streams {
        let mut sender = sender.clone();
        let req = http::Request::get(format!("http://{addr}{path}"))
            .header("accept", accept)
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
        if accept == PROTOBUF {
            assert_eq!(
                resp.headers().get("content-type").map(|v| v.as_bytes()),
                Some(&b"application/vnd.kubernetes.protobuf;stream=watch"[..])
            );
        }
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut body = resp.into_body();
            let mut lines = LineCounter::new(accept == PROTOBUF);
            seen.started();
            while let Some(Ok(frame)) = body.frame().await {
                if let Ok(data) = frame.into_data() {
                    seen.got(lines.count(&data));
                }
            }
        });
    }
    drop(permit);
}

/// The child: opens the watches (or bare sockets) it is told to, says `R` on the control
/// socket once all have started, then `E` for every event seen on all of them, until the
/// control socket closes.
fn client_process() {
    let kind = env("LONE_CLIENT");
    let addr = env("LONE_CLIENT_ADDR");
    let path = std::env::var("LONE_CLIENT_PATH").ok();
    let conns = env_usize("LONE_CLIENT_CONNS", 0);
    let streams = env_usize("LONE_CLIENT_STREAMS", 1);
    let control = env("LONE_CLIENT_CONTROL");
    let watches = conns * streams;
    let rt = runtime("client-worker", 2);
    rt.block_on(async move {
        let mut ctl = TcpStream::connect(&control).await.expect("control socket");
        ctl.set_nodelay(true).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let seen = Arc::new(Seen {
            lines: AtomicU64::new(0),
            fanout: watches as u64,
            report: tx,
            started: AtomicU64::new(0),
            ready: tokio::sync::Notify::new(),
        });
        // Connections are opened 128 at a time: a storm beyond the listen backlog would
        // only measure SYN retries.
        let gate = Arc::new(tokio::sync::Semaphore::new(128));
        for _ in 0..conns {
            let (addr, path, seen) = (addr.clone(), path.clone(), seen.clone());
            let permit = gate.clone().acquire_owned().await.unwrap();
            let accept = if kind.ends_with("-pb") {
                PROTOBUF
            } else {
                "application/json"
            };
            match kind.as_str() {
                "h2" | "h2-pb" => tokio::spawn(h2_connection(
                    addr,
                    path.unwrap(),
                    accept,
                    streams,
                    seen,
                    permit,
                )),
                _ => tokio::spawn(raw_reader(addr, path, accept, seen, permit)),
            };
        }
        while seen.started.load(Ordering::Acquire) < watches as u64 {
            seen.ready.notified().await;
        }
        ctl.write_all(b"R").await.unwrap();
        let (mut rd, mut wr) = ctl.into_split();
        tokio::spawn(async move {
            while rx.recv().await.is_some() {
                if wr.write_all(b"E").await.is_err() {
                    return;
                }
            }
        });
        // The parent closes the control socket when it is done.
        let mut b = [0u8; 1];
        let _ = rd.read(&mut b).await;
    });
    rt.shutdown_background();
}

// ---- the gateway process --------------------------------------------------------------

/// A configmap of about 1.1 KB at `rv`. Its payload ends `x!`: the protobuf readers count
/// events by it.
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
        "data": { "payload": format!("{}!", "x".repeat(DATA_BYTES - 1)) },
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
    /// Apply one of these objects (of the mode's namespace) at the next resourceVersion to
    /// the gateway's store, as its reflector would; the gateway does the rest.
    Store(Arc<StoreWriter>, Vec<Arc<CachedObject>>),
    /// Write these bytes to each socket with one `write` (or as few as it takes).
    Sockets(Vec<TcpStream>, Vec<u8>),
}

struct Mode {
    name: &'static str,
    what: String,
    emit: Emit,
    /// The client process's control socket: one byte per event seen by every watcher.
    control: tokio::sync::Mutex<TcpStream>,
    child: std::process::Child,
    /// Deliveries per event.
    fanout: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Round {
    cpu_us_per_delivery: f64,
    switches_per_event: f64,
    fanout_p50_ms: f64,
    fanout_p99_ms: f64,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p) as usize]
}

/// Called as a measured round starts and ends, for callgrind's `--zero-before` and
/// `--dump-after` (see the top of this file).
#[inline(never)]
fn window_starts() {
    WINDOWS.fetch_add(1, Ordering::Relaxed);
}

/// Not the same body as `window_starts`, so that the two are never folded into one symbol.
#[inline(never)]
fn window_ends() {
    WINDOWS.fetch_add(1 << 32, Ordering::Relaxed);
}

static WINDOWS: AtomicU64 = AtomicU64::new(0);

/// Emits `events` lone events through `mode`; the CPU of the gateway's threads per delivery.
async fn run_round(
    mode: &Mode,
    rv: &AtomicU64,
    events: usize,
    gap: Duration,
    measure: bool,
) -> Round {
    let mut control = mode.control.lock().await;
    let mut fanout_ms = Vec::with_capacity(events);
    if measure {
        window_starts();
    }
    let (cpu0, sw0) = threads_cpu("gw-");
    for i in 0..events {
        let r = rv.fetch_add(1, Ordering::AcqRel) + 1;
        let sent = Instant::now();
        match &mode.emit {
            Emit::Store(store, objs) => store.apply(Change::Upsert(Arc::new(
                objs[i % objs.len()].with_resource_version(r),
            ))),
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
        let mut b = [0u8; 1];
        let seen = tokio::time::timeout(Duration::from_secs(60), control.read_exact(&mut b)).await;
        assert!(
            matches!(seen, Ok(Ok(_))) && b[0] == b'E',
            "{}: event {i} did not reach all {} watchers within 60 s",
            mode.name,
            mode.fanout
        );
        fanout_ms.push(sent.elapsed().as_secs_f64() * 1e3);
        tokio::time::sleep(gap).await;
    }
    let (cpu1, sw1) = threads_cpu("gw-");
    if measure {
        window_ends();
    }
    let deliveries = (events as u64 * mode.fanout) as f64;
    Round {
        cpu_us_per_delivery: (cpu1 - cpu0) as f64 / 1000.0 / deliveries,
        switches_per_event: (sw1 - sw0) as f64 / events as f64,
        fanout_p50_ms: pct(&mut fanout_ms, 0.5),
        fanout_p99_ms: pct(&mut fanout_ms, 0.99),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Starts the client process for one mode and waits until all its watches have started.
fn spawn_clients(
    rt: &Runtime,
    kind: &str,
    addr: &str,
    path: Option<&str>,
    conns: usize,
    streams: usize,
) -> (TcpStream, std::process::Child) {
    let control = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.env("LONE_CLIENT", kind)
        .env("LONE_CLIENT_ADDR", addr)
        .env("LONE_CLIENT_CONNS", conns.to_string())
        .env("LONE_CLIENT_STREAMS", streams.to_string())
        .env(
            "LONE_CLIENT_CONTROL",
            control.local_addr().unwrap().to_string(),
        );
    if let Some(p) = path {
        cmd.env("LONE_CLIENT_PATH", p);
    }
    let child = cmd.spawn().expect("the client process");
    eprintln!("  (starting {conns} {kind} connections)");
    let mut ctl = rt.block_on(async {
        let (s, _) = tokio::time::timeout(Duration::from_secs(30), control.accept())
            .await
            .expect("the client process connects")
            .unwrap();
        s
    });
    ctl.set_nodelay(true).unwrap();
    let mut b = [0u8; 1];
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(180), ctl.read_exact(&mut b))
            .await
            .expect("every watch starts within 180 s")
            .expect("the client process reports");
    });
    assert_eq!(b[0], b'R');
    (ctl, child)
}

fn main() {
    if std::env::var_os("LONE_CLIENT").is_some() {
        return client_process();
    }
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
        watchers % per_conn == 0 || !(want("h2") || want("h2-pb") || want("floor-h2")),
        "LONE_WATCHERS must be a multiple of {STREAMS_PER_CONNECTION} for the HTTP/2 modes"
    );
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    // The subscriber `watchgate serve` installs (text, info): with none, every disabled
    // trace span of h2 and hyper would still be built, which the gateway never pays.
    watchgate::logging::init(&watchgate::logging::LogArgs {
        log_format: watchgate::logging::LogFormat::Text,
        verbosity: 0,
    });

    let gw_rt = runtime("gw-worker", 2);
    let sim_rt = runtime("sim-worker", 1);

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
                    // A second writer beside the quiet reflector's (the only one allowed).
                    break Arc::new(c.store.writer_for_benchmarks());
                }
            }
            assert!(started.elapsed() < Duration::from_secs(60), "never synced");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    // Synthetic events go well above the simulator's resourceVersions; watches start from
    // the store's current one, so they get no initial events, only the injected ones.
    let start_rv = store.resource_version();
    let rv = Arc::new(AtomicU64::new(start_rv + 1_000_000));
    let line = event_line(&configmap(H1_NAMESPACE, 0, start_rv + 1_000_001));
    let watch_path =
        |ns: &str| format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={start_rv}");
    let addr = gw.addr().to_string();

    let mut built: Vec<Mode> = Vec::new();
    let gateway_mode = |name, what: String, ns: &'static str, kind, conns, streams| {
        let (control, child) =
            spawn_clients(&gw_rt, kind, &addr, Some(&watch_path(ns)), conns, streams);
        Mode {
            name,
            what,
            emit: Emit::Store(
                store.clone(),
                (0..16).map(|i| configmap(ns, i, start_rv)).collect(),
            ),
            control: tokio::sync::Mutex::new(control),
            child,
            fanout: watchers as u64,
        }
    };
    if want("h1") {
        built.push(gateway_mode(
            "h1",
            "HTTP/1.1, one connection per watch (detached chunked writer)".into(),
            H1_NAMESPACE,
            "h1",
            watchers,
            1,
        ));
    }
    if want("h2") {
        built.push(gateway_mode(
            "h2",
            format!("HTTP/2, {per_conn} watches per connection"),
            H2_NAMESPACE,
            "h2",
            watchers / per_conn,
            per_conn,
        ));
    }
    if want("h1-pb") {
        built.push(gateway_mode(
            "h1-pb",
            "HTTP/1.1, protobuf watches".into(),
            H1_PB_NAMESPACE,
            "h1-pb",
            watchers,
            1,
        ));
    }
    if want("h2-pb") {
        built.push(gateway_mode(
            "h2-pb",
            format!("HTTP/2, {per_conn} protobuf watches per connection"),
            H2_PB_NAMESPACE,
            "h2-pb",
            watchers / per_conn,
            per_conn,
        ));
    }
    // The floors: bare sockets accepted on the gateway's runtime, read by the same readers.
    let floor = |conns: usize, bytes: Vec<u8>, name: &'static str, what: String| {
        let listener = gw_rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let local = listener.local_addr().unwrap().to_string();
        let accepting = gw_rt.spawn(async move {
            let mut socks = Vec::with_capacity(conns);
            for _ in 0..conns {
                let (s, _) = listener.accept().await.unwrap();
                s.set_nodelay(true).unwrap();
                socks.push(s);
            }
            socks
        });
        let (control, child) = spawn_clients(&gw_rt, "raw", &local, None, conns, 1);
        let socks = gw_rt.block_on(accepting).unwrap();
        Mode {
            name,
            what,
            emit: Emit::Sockets(socks, bytes),
            control: tokio::sync::Mutex::new(control),
            child,
            fanout: conns as u64,
        }
    };
    if want("floor-h1") {
        let mut chunk = format!("{:X}\r\n", line.len()).into_bytes();
        chunk.extend_from_slice(&line);
        chunk.extend_from_slice(b"\r\n");
        built.push(floor(
            watchers,
            chunk,
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
        let mut m = floor(
            watchers / per_conn,
            frames,
            "floor-h2",
            format!("floor: one write of {per_conn} DATA frames per connection"),
        );
        // Each of the connection's frames ends with a line: `per_conn` deliveries each.
        m.fanout = watchers as u64;
        built.push(m);
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
            "  {:<9} {:>6.2} µs CPU per delivery (rounds: {}); {:>6.1} gateway context switches per event; fan-out p50 {:.2} ms p99 {:.2} ms  [{}]",
            m.name,
            c,
            rs.iter()
                .map(|r| format!("{:.2}", r.cpu_us_per_delivery))
                .collect::<Vec<_>>()
                .join(" "),
            median(rs.iter().map(|r| r.switches_per_event).collect()),
            median(rs.iter().map(|r| r.fanout_p50_ms).collect()),
            median(rs.iter().map(|r| r.fanout_p99_ms).collect()),
            m.what,
        );
    }
    for (a, b) in [
        ("h1", "floor-h1"),
        ("h2", "floor-h2"),
        ("h1-pb", "h1"),
        ("h2-pb", "h2"),
        ("h1-pb", "floor-h1"),
        ("h2-pb", "floor-h2"),
    ] {
        if let (Some(x), Some(y)) = (cpu.get(a), cpu.get(b)) {
            println!("  {a} / {b}: {:.2}×", x / y);
        }
    }
    let built = Arc::into_inner(built).expect("the driver is done");
    for mut m in built {
        drop(m.control);
        let _ = m.child.wait();
    }
    drop(gw);
    drop(sim);
    gw_rt.shutdown_background();
    sim_rt.shutdown_background();
}

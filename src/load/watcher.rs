//! One watcher: connects, reads its stream, checks every event on the writer's objects,
//! records delivery latencies, and behaves like a reflector when its stream ends (resume
//! from the last RV) or expires (410: relist, then watch from the list's RV).

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use http_body_util::BodyExt;
use tokio_util::sync::CancellationToken;

use super::checker::{EventType, StreamCheck, WriterLog};
use super::encoding::{is_protobuf, Encoding};
use super::lister::{list_once, ListSpec};
use super::pool::Pool;
use super::proto_scan::scan_proto;
use super::records::{Framing, Records};
use super::scan::{needle, scan, Kind};
use super::stats::{unix_ns, Stats};
use super::target::{Protocol, Target};
use crate::selector::field::FieldSelector;
use crate::selector::label::LabelSelector;

/// What a group of watchers watches.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    /// Collection path, e.g. `/api/v1/namespaces/watchgate-load/pods`.
    pub path: String,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    /// List (RV=0) first, then watch from the list's RV (an informer); otherwise watch
    /// from the run's start RV.
    pub list_first: bool,
    /// Start with a consistent watch-list (client-go's `watchList`): its initial events,
    /// up to the `k8s.io/initial-events-end` bookmark, are the informer's list.
    pub watch_list: bool,
    /// Start with a plain watch from `resourceVersion=0` whose initial state is this many
    /// objects: its first that many ADDED events are that state, not changes to check (a
    /// plain watch has no bookmark that ends them, so they are counted; the run must
    /// only modify the resource's objects, never add or delete one, so that their number
    /// holds). Its check starts at the newest of them. Until it has them all a watch
    /// that ends is started again from 0; after, it resumes from its last RV like any
    /// other.
    pub rv0: Option<u64>,
    pub protocol: Protocol,
    /// Close and reopen the watch this often (connect/disconnect churn).
    pub reconnect_every: Option<Duration>,
    /// Leave for good this long after starting (a client of a connect/disconnect storm):
    /// its stream is then checked up to the last resourceVersion it had.
    pub lifetime: Option<Duration>,
    /// The representation asked for (`--encoding`); the response's Content-Type decides
    /// how the stream is read.
    pub encoding: Encoding,
}

impl WatchSpec {
    pub fn selectors(&self) -> anyhow::Result<(Option<LabelSelector>, Option<FieldSelector>)> {
        let l = match &self.label_selector {
            Some(s) => Some(LabelSelector::parse(s).map_err(anyhow::Error::msg)?),
            None => None,
        };
        let f = match &self.field_selector {
            Some(s) => Some(FieldSelector::parse(s).map_err(anyhow::Error::msg)?),
            None => None,
        };
        Ok((l, f))
    }

    fn selector_query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        if let Some(s) = &self.label_selector {
            q.append_pair("labelSelector", s);
        }
        if let Some(s) = &self.field_selector {
            q.append_pair("fieldSelector", s);
        }
        q.finish()
    }
}

/// What every watcher shares.
pub struct Ctx {
    pub target: Target,
    pub stats: Arc<Stats>,
    pub pool: Arc<Pool>,
    /// Cancelled when the run is over (after the drain, or on Ctrl-C).
    pub stop: CancellationToken,
    /// Set when the writer has stopped: the final log, so each watcher knows the last RV
    /// it must see before it may stop. `draining` is cancelled right after it is set.
    pub drain_log: std::sync::OnceLock<Arc<WriterLog>>,
    pub draining: CancellationToken,
    /// Bounds watch requests awaiting their response headers (connect storms).
    pub connect_gate: Arc<tokio::sync::Semaphore>,
    /// When the watchers were started: watch-list informers' sync times count from here.
    pub spawned: Instant,
    /// Reconnects after a restart of the target, per watcher (the `restart` scenario).
    pub track: Option<Arc<super::track::Track>>,
}

/// A watcher's state at the end of the run.
pub struct Outcome {
    pub id: usize,
    pub group: usize,
    pub check: StreamCheck,
    /// It had its initial state (always, but for a watch-list informer before its
    /// bookmark or an RV=0 watcher before its last initial event): a stream that never
    /// got there has nothing to check.
    pub initial_done: bool,
}

/// The last RV of the writer's log this watcher must receive.
fn needed_rv(
    log: &WriterLog,
    pool: &Pool,
    after: u64,
    sel: &(Option<LabelSelector>, Option<FieldSelector>),
) -> u64 {
    log.range(after, None)
        .filter(|r| pool.matches(r, sel.0.as_ref(), sel.1.as_ref()))
        .map(|r| r.rv)
        .last()
        .unwrap_or(0)
}

/// The largest protobuf watch frame read (kube-apiserver's own objects are bounded by
/// etcd's 1.5 MiB request limit; a longer length prefix is garbage).
const MAX_FRAME: usize = 16 << 20;

enum StreamEnd {
    /// The run is over for this watcher.
    Done,
    /// Its lifetime is over: it leaves.
    Left,
    /// The server ended the stream (or the connection broke): resume.
    Ended,
    /// Planned churn: reconnect.
    Reconnect,
    /// 410: relist, then watch again.
    Expired,
}

pub async fn run(
    ctx: Arc<Ctx>,
    id: usize,
    group: usize,
    spec: Arc<WatchSpec>,
    start_rv: u64,
) -> Outcome {
    let sel = spec.selectors().unwrap_or((None, None));
    let stats = &ctx.stats;
    let list_spec = ListSpec {
        path: spec.path.clone(),
        query: spec.selector_query(),
        limit: 0,
        resource_version: "0".into(),
        encoding: spec.encoding,
    };
    let mut check = StreamCheck::new(id, start_rv);
    let leave_at = spec.lifetime.map(|d| tokio::time::Instant::now() + d);
    let left = |check: &mut StreamCheck| {
        leave_at.is_some_and(|t| tokio::time::Instant::now() >= t) && {
            check.close();
            true
        }
    };
    if spec.list_first {
        loop {
            if ctx.stop.is_cancelled() || left(&mut check) {
                return Outcome {
                    id,
                    group,
                    check,
                    initial_done: true,
                };
            }
            match list_once(&ctx.target, &list_spec, stats).await {
                Ok(rv) => {
                    check = StreamCheck::new(id, rv);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    let mut needed: Option<u64> = None;
    // A watch-list informer's initial events stand for its list, until the bookmark.
    let mut initial = spec.watch_list;
    // An RV=0 watcher's initial events: how many are still to come, and the highest RV
    // among those that came.
    let mut rv0_left = spec.rv0;
    let mut rv0_max = 0u64;
    // client-go's reflector backs off after a 429 (800 ms, doubling up to 30 s, with
    // jitter: its backoffManager); a herd of clients retrying faster would measure
    // their own retry storm.
    let mut backoff = BACKOFF_FIRST;
    loop {
        if ctx.stop.is_cancelled() {
            break;
        }
        if left(&mut check) {
            break;
        }
        let end = stream_once(
            &ctx,
            id,
            &spec,
            &sel,
            &mut check,
            &mut needed,
            Initial {
                watch_list: &mut initial,
                rv0_left: &mut rv0_left,
                rv0_max: &mut rv0_max,
            },
            &mut backoff,
            leave_at,
        )
        .await;
        match end {
            StreamEnd::Done => break,
            StreamEnd::Left => {
                check.close();
                break;
            }
            StreamEnd::Reconnect => {}
            StreamEnd::Ended => {
                Stats::add(&stats.c.terminated, 1);
            }
            StreamEnd::Expired if spec.watch_list => {
                // client-go's reflector starts over with a consistent watch-list.
                Stats::add(&stats.c.gone, 1);
                initial = true;
            }
            StreamEnd::Expired => {
                Stats::add(&stats.c.gone, 1);
                if let Some(t) = &ctx.track {
                    t.gone(id);
                }
                // A reflector relists and watches from the list's RV.
                loop {
                    if ctx.stop.is_cancelled() || left(&mut check) {
                        return Outcome {
                            id,
                            group,
                            check,
                            initial_done: true,
                        };
                    }
                    match list_once(&ctx.target, &list_spec, stats).await {
                        Ok(rv) => {
                            check.relisted(rv);
                            break;
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                }
            }
        }
    }
    Outcome {
        id,
        group,
        check,
        initial_done: !initial && rv0_left.is_none(),
    }
}

/// Where a watcher is in its initial state (see [`WatchSpec::watch_list`] and
/// [`WatchSpec::rv0`]).
struct Initial<'a> {
    watch_list: &'a mut bool,
    rv0_left: &'a mut Option<u64>,
    rv0_max: &'a mut u64,
}

/// client-go's reflector backoff after a 429 (reflector.go, `backoffManager`).
pub const BACKOFF_FIRST: Duration = Duration::from_millis(800);
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Sleeps `backoff` times a random factor in [1, 2) and doubles it (up to the cap).
pub async fn back_off(backoff: &mut Duration) {
    tokio::time::sleep(backoff.mul_f64(1.0 + rand::random::<f64>())).await;
    *backoff = (*backoff * 2).min(BACKOFF_MAX);
}

fn reached(needed: Option<u64>, check: &StreamCheck) -> bool {
    needed.is_some_and(|n| check.last_rv() >= n)
}

// One stream's whole state is passed in: it outlives the stream (resumes, relists).
#[allow(clippy::too_many_arguments)]
async fn stream_once(
    ctx: &Ctx,
    id: usize,
    spec: &WatchSpec,
    sel: &(Option<LabelSelector>, Option<FieldSelector>),
    check: &mut StreamCheck,
    needed: &mut Option<u64>,
    init: Initial<'_>,
    backoff: &mut Duration,
    leave_at: Option<tokio::time::Instant>,
) -> StreamEnd {
    let stats = &ctx.stats;
    let Initial {
        watch_list: initial,
        rv0_left,
        rv0_max,
    } = init;
    // A stream that ends before the whole initial state came is started over from 0.
    if rv0_left.is_some() {
        *rv0_left = spec.rv0;
        *rv0_max = 0;
    }
    // The serializer is not Send: build the query in a block.
    let mut q = if rv0_left.is_some() {
        "watch=1&resourceVersion=0&allowWatchBookmarks=true".to_string()
    } else if *initial {
        // client-go's `watchList` request, byte for byte (reflector.go; its timeout is
        // minWatchTimeout × [1, 2), 5 to 10 minutes): no resourceVersion, a consistent
        // read. Reproduced here, query and Accept (`--encoding`), because client-go
        // itself cannot be built on this machine (no Go toolchain): the herd scenarios
        // stand for client-go 1.36 informers through this request shape.
        let timeout = 300 + (id as u64 * 7919) % 300;
        format!("allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds={timeout}&watch=true")
    } else {
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("watch", "1")
            .append_pair("resourceVersion", &check.last_rv().to_string())
            .append_pair("allowWatchBookmarks", "true");
        q.finish()
    };
    let sq = spec.selector_query();
    if !sq.is_empty() {
        q.push('&');
        q.push_str(&sq);
    }
    let path = format!("{}?{q}", spec.path);
    let t0 = Instant::now();
    Stats::add(&stats.c.watch_requests, 1);
    let req = async {
        match spec.protocol {
            Protocol::Http1 => {
                ctx.target
                    .send_accepting(Method::GET, &path, None, spec.encoding.watch_accept())
                    .await
            }
            Protocol::Http2 => {
                ctx.target
                    .get_h2_accepting(&path, spec.encoding.watch_accept())
                    .await
            }
        }
    };
    let far = || tokio::time::Instant::now() + Duration::from_secs(86400 * 365);
    let leave = tokio::time::sleep_until(leave_at.unwrap_or_else(far));
    tokio::pin!(leave);
    let resp = tokio::select! {
        _ = ctx.stop.cancelled() => return StreamEnd::Done,
        _ = &mut leave => return StreamEnd::Left,
        r = async {
            let _permit = ctx.connect_gate.acquire().await;
            req.await
        } => r,
    };
    let resp = match resp {
        Ok(r) => r,
        Err(_) => {
            stats.error("watch: connection");
            tokio::time::sleep(Duration::from_millis(250)).await;
            return StreamEnd::Reconnect;
        }
    };
    if resp.status() == http::StatusCode::GONE {
        stats.error("watch 410");
        return StreamEnd::Expired;
    }
    if resp.status() == http::StatusCode::TOO_MANY_REQUESTS {
        stats.error("watch 429");
        back_off(backoff).await;
        return StreamEnd::Reconnect;
    }
    if !resp.status().is_success() {
        stats.error(format!("watch {}", resp.status().as_u16()));
        tokio::time::sleep(Duration::from_millis(250)).await;
        return StreamEnd::Reconnect;
    }
    *backoff = BACKOFF_FIRST;
    stats.record_watch_connect(t0.elapsed().as_micros() as u64);
    Stats::add(&stats.c.watching, 1);
    if let Some(t) = &ctx.track {
        t.connected(id);
    }
    if *rv0_left == Some(0) {
        // An empty resource: its initial state is in as soon as the watch is.
        *rv0_left = None;
        stats.record_sync(ctx.spawned.elapsed().as_micros() as u64);
    }
    let _watching = Decrement(&stats.c.watching);
    let protobuf = is_protobuf(resp.headers().get(http::header::CONTENT_TYPE));
    let mut body = resp.into_body();
    let mut records = Records::default();
    let mut batch: Vec<(u64, u64)> = Vec::new();
    let reconnect_at = spec.reconnect_every.map(|d| {
        // Staggered, so that reconnects spread over the period.
        let frac = (id as u64 * 7919 % 1000) as f64 / 1000.0;
        tokio::time::Instant::now() + d.mul_f64(0.5 + frac)
    });
    let run = ctx.pool.run.as_str();
    // Futures that outlive the loop: re-creating them for every frame would register a
    // waiter per frame per watcher (10,000 watchers × 100 frames/s).
    let stop = ctx.stop.cancelled();
    let draining = ctx.draining.cancelled();
    let reconnect = tokio::time::sleep_until(reconnect_at.unwrap_or_else(far));
    tokio::pin!(stop, draining, reconnect);
    // The events of one body frame, decoded before they are checked (reused).
    let mut decoded = Vec::new();
    loop {
        let frame = tokio::select! {
            _ = &mut stop => return StreamEnd::Done,
            _ = &mut leave => return StreamEnd::Left,
            _ = &mut reconnect => return StreamEnd::Reconnect,
            _ = &mut draining, if needed.is_none() => {
                if let Some(log) = ctx.drain_log.get() {
                    *needed = Some(needed_rv(log, &ctx.pool, 0, sel));
                }
                if reached(*needed, check) {
                    return StreamEnd::Done;
                }
                continue;
            }
            f = body.frame() => f,
        };
        let frame = match frame {
            None => return StreamEnd::Ended,
            Some(Err(_)) => {
                stats.error("watch: stream broken");
                return StreamEnd::Ended;
            }
            Some(Ok(f)) => f,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        Stats::add(&stats.c.watch_bytes, data.len() as u64);
        let now = unix_ns();
        let mut expired = false;
        let mut events = 0u64;
        let mut checked = 0u64;
        let mut bookmarks = 0u64;
        let fed = if protobuf {
            records.feed(Framing::LengthPrefixed { max: MAX_FRAME }, &data, |frame| {
                Stats::add(&stats.c.protobuf_frames, 1);
                decoded.push(scan_proto(frame).ok().map(|e| {
                    let end = e.kind == Kind::Bookmark && is_initial_events_end_proto(frame);
                    (e, end)
                }));
            })
        } else {
            records.feed(Framing::Lines, &data, |line| {
                decoded.push(scan(line).map(|e| {
                    let end = e.kind == Kind::Bookmark && is_initial_events_end(line);
                    (e, end)
                }));
            })
        };
        if fed.is_err() {
            // A length (or a line) larger than any object the writer makes: the stream
            // is out of step; it is ended and resumed.
            stats.error("watch: undecodable event");
            return StreamEnd::Ended;
        }
        for ev in decoded.drain(..) {
            let Some((ev, initial_end)) = ev else {
                stats.error("watch: undecodable event");
                continue;
            };
            match ev.kind {
                // The initial state (a watch-list's synthetic ADDED events): the
                // informer's list, not changes to check.
                Kind::Added | Kind::Modified | Kind::Deleted if *initial => {
                    events += 1;
                }
                // An RV=0 watch's initial state: its first ADDED events, one per object
                // (the run only modifies objects, so their number is known). Its changes
                // come after the newest of them: that is where its check starts.
                Kind::Added if rv0_left.is_some() => {
                    events += 1;
                    *rv0_max = (*rv0_max).max(ev.rv);
                    let left = rv0_left.map_or(0, |n| n.saturating_sub(1));
                    *rv0_left = Some(left);
                    if left == 0 {
                        *rv0_left = None;
                        *check = StreamCheck::new(id, *rv0_max);
                        stats.record_sync(ctx.spawned.elapsed().as_micros() as u64);
                    }
                }
                Kind::Bookmark if *initial && initial_end => {
                    bookmarks += 1;
                    *initial = false;
                    *check = StreamCheck::new(id, ev.rv);
                    stats.record_sync(ctx.spawned.elapsed().as_micros() as u64);
                }
                Kind::Added | Kind::Modified | Kind::Deleted => {
                    events += 1;
                    let ty = match ev.kind {
                        Kind::Added => EventType::Added,
                        Kind::Modified => EventType::Modified,
                        _ => EventType::Deleted,
                    };
                    match &ev.stamp {
                        Some((r, written)) if r == run => {
                            checked += 1;
                            check.observe(ev.rv, ty);
                            if ty != EventType::Deleted {
                                batch.push((*written, now.saturating_sub(*written) / 1000));
                            }
                        }
                        // Other clients' objects: not checked, but a valid resume point.
                        _ => check.progress(ev.rv),
                    }
                }
                Kind::Bookmark => {
                    bookmarks += 1;
                    check.progress(ev.rv);
                }
                Kind::Error => {
                    if ev.code == Some(410) {
                        expired = true;
                    } else {
                        stats.error(format!(
                            "watch ERROR {}",
                            ev.code.map(|c| c.to_string()).unwrap_or_default()
                        ));
                    }
                }
                Kind::Other => stats.error("watch: unknown event type"),
            }
        }
        Stats::add(&stats.c.events, events);
        Stats::add(&stats.c.checked, checked);
        Stats::add(&stats.c.bookmarks, bookmarks);
        stats.record_deliveries(id, &batch);
        batch.clear();
        if expired {
            return StreamEnd::Expired;
        }
        if reached(*needed, check) {
            return StreamEnd::Done;
        }
    }
}

needle!(INITIAL_EVENTS_END, br#""k8s.io/initial-events-end":"true""#);
// The same annotation in a protobuf ObjectMeta: a map entry `{1: key, 2: "true"}`.
needle!(
    INITIAL_EVENTS_END_PROTO,
    b"k8s.io/initial-events-end\x12\x04true"
);

/// The BOOKMARK that ends a watch-list's initial events.
fn is_initial_events_end(line: &[u8]) -> bool {
    INITIAL_EVENTS_END.find(line).is_some()
}

fn is_initial_events_end_proto(frame: &[u8]) -> bool {
    INITIAL_EVENTS_END_PROTO.find(frame).is_some()
}

struct Decrement<'a>(&'a std::sync::atomic::AtomicU64);

impl Drop for Decrement<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

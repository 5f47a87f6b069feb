//! Store-level tests of the fan-out: history, live dispatch, lagging, expiry, relists,
//! bookmarks and timeouts, driven through real response bodies. Here, beside the store
//! that feeds the hub, because they need both: the fan-out (`watch/`) sits below the
//! cache and does not know the store.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::Value;

use super::store::{Change, Store, StoreWriter};
use crate::model::object::CachedObject;
use crate::model::resource::ResourceInfo;
use crate::model::snapshot::Snapshot;
use crate::watch::body::{WatchBody, WatchParams};
use crate::watch::encoding::WatchEncoding;
use crate::watch::filter::WatchFilter;
use crate::watch::hub::{Start, TooOld, QUEUE_LEN};
use crate::watch::stats::EndReason;
use crate::watch::WatchConfig;

fn info() -> ResourceInfo {
    ResourceInfo {
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
        kind: "Pod".into(),
        namespaced: true,
        field_labels: vec![("spec.nodeName", "spec.nodeName")],
    }
}

fn pod(name: &str, rv: u64, node: &str) -> Arc<CachedObject> {
    let raw = format!(
        r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}},"spec":{{"nodeName":"{node}"}}}}"#
    );
    Arc::new(CachedObject::parse(Bytes::from(raw), &[("spec.nodeName", "spec.nodeName")]).unwrap())
}

fn store(cfg: WatchConfig, objs: &[Arc<CachedObject>], rv: u64) -> Arc<StoreWriter> {
    let s = Arc::new(Store::for_resource(&info(), cfg));
    let mut snap = Snapshot::default();
    for o in objs {
        snap.insert(o.clone());
    }
    snap.resource_version = rv;
    s.replace(snap);
    s
}

fn params(min_rv: u64) -> WatchParams {
    WatchParams {
        min_rv,
        allow_bookmarks: false,
        initial_events_end: false,
        timeout: Duration::from_secs(3600),
    }
}

fn open(s: &Store, filter: WatchFilter, start: Start, p: WatchParams) -> WatchBody {
    let reg = s
        .watch(filter, crate::watch::encoding::WatchEncoding::Json, start)
        .expect("registered");
    WatchBody::new(s.hub().clone(), reg, p)
}

/// Reads whole event lines until `n` have arrived (bounded), as (type, name, rv).
async fn read(body: &mut WatchBody, n: usize) -> Vec<(String, String, String)> {
    read_within(body, n, Duration::from_secs(5)).await
}

/// `read` with a per-frame bound (under paused time, longer than the timers tested).
async fn read_within(
    body: &mut WatchBody,
    n: usize,
    bound: Duration,
) -> Vec<(String, String, String)> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while out.len() < n {
        let frame = tokio::time::timeout(bound, body.frame())
            .await
            .unwrap_or_else(|_| panic!("only {} of {n} events arrived: {out:?}", out.len()));
        let Some(frame) = frame else {
            panic!("stream ended after {} of {n} events: {out:?}", out.len());
        };
        buf.extend_from_slice(frame.unwrap().data_ref().unwrap());
        while let Some(i) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=i).collect();
            let v: Value = serde_json::from_slice(&line).unwrap();
            out.push((
                v["type"].as_str().unwrap().to_string(),
                v["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                v["object"]["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            ));
        }
    }
    out
}

async fn ends(body: &mut WatchBody) {
    ends_within(body, Duration::from_secs(5)).await
}

async fn ends_within(body: &mut WatchBody, bound: Duration) {
    let end = tokio::time::timeout(bound, body.frame())
        .await
        .expect("the stream should end");
    assert!(end.is_none(), "expected the end, got a frame");
}

fn ev(t: &str, name: &str, rv: u64) -> (String, String, String) {
    (t.into(), name.into(), rv.to_string())
}

#[tokio::test]
async fn rv_zero_sends_the_state_then_the_changes() {
    let s = store(
        WatchConfig::default(),
        &[pod("a", 3, "n1"), pod("b", 4, "n2")],
        10,
    );
    let mut w = open(&s, WatchFilter::default(), Start::Initial, params(0));
    s.apply(Change::Upsert(pod("a", 11, "n1")));
    s.apply(Change::Delete(pod("b", 12, "n2")));
    assert_eq!(
        read(&mut w, 4).await,
        vec![
            ev("ADDED", "a", 3),
            ev("ADDED", "b", 4),
            ev("MODIFIED", "a", 11),
            ev("DELETED", "b", 12)
        ]
    );
}

#[tokio::test]
async fn rv_n_replays_the_history_after_n_only() {
    let s = store(WatchConfig::default(), &[], 10);
    for i in 0..5u64 {
        s.apply(Change::Upsert(pod(&format!("p{i}"), 11 + i, "n")));
    }
    let mut w = open(&s, WatchFilter::default(), Start::After(12), params(12));
    s.apply(Change::Upsert(pod("q", 20, "n")));
    assert_eq!(
        read(&mut w, 4).await,
        vec![
            ev("ADDED", "p2", 13),
            ev("ADDED", "p3", 14),
            ev("ADDED", "p4", 15),
            ev("ADDED", "q", 20)
        ]
    );
    // Older than the list the history starts after: 410 with the apiserver's numbers.
    assert_eq!(
        s.watch(WatchFilter::default(), WatchEncoding::Json, Start::After(9))
            .err(),
        Some(TooOld(9, 10))
    );
}

#[tokio::test]
async fn a_reader_that_falls_behind_catches_up_from_the_history() {
    let s = store(WatchConfig::default(), &[], 10);
    let mut slow = open(&s, WatchFilter::default(), Start::After(10), params(10));
    let n = QUEUE_LEN * 4;
    for i in 0..n as u64 {
        s.apply(Change::Upsert(pod(&format!("p{i}"), 11 + i, "n")));
    }
    assert_eq!(
        s.hub().live_watchers(),
        0,
        "the overflowing watcher left live dispatch"
    );
    let lagging = || {
        s.hub()
            .stats
            .lagging
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert_eq!(lagging(), 1, "counted as lagging before it reads again");
    let got = read(&mut slow, n).await;
    let want: Vec<_> = (0..n as u64)
        .map(|i| ev("ADDED", &format!("p{i}"), 11 + i))
        .collect();
    assert_eq!(got, want);
    // Caught up: live again, and still in order.
    s.apply(Change::Upsert(pod("last", 1000, "n")));
    assert_eq!(read(&mut slow, 1).await, vec![ev("ADDED", "last", 1000)]);
    assert_eq!(s.hub().live_watchers(), 1);
    assert_eq!(lagging(), 0);
}

#[tokio::test]
async fn a_reader_past_the_history_ends_cleanly_and_cannot_resume_there() {
    let cfg = WatchConfig {
        history_bytes: 20_000,
        ..Default::default()
    };
    let s = store(cfg, &[], 10);
    let mut stalled = open(&s, WatchFilter::default(), Start::After(10), params(10));
    for i in 0..(QUEUE_LEN as u64 * 10) {
        s.apply(Change::Upsert(pod(&format!("p{i}"), 11 + i, "n")));
    }
    // It gets what its queue held, then the stream ends.
    let got = read(&mut stalled, QUEUE_LEN).await;
    assert_eq!(
        got.last().unwrap(),
        &ev(
            "ADDED",
            &format!("p{}", QUEUE_LEN - 1),
            10 + QUEUE_LEN as u64
        )
    );
    ends(&mut stalled).await;
    assert_eq!(s.hub().stats.terminated(EndReason::Slow), 1);
    let resume_at = 10 + QUEUE_LEN as u64;
    assert!(matches!(
        s.watch(
            WatchFilter::default(),
            WatchEncoding::Json,
            Start::After(resume_at)
        ),
        Err(TooOld(r, _)) if r == resume_at
    ));
}

#[tokio::test]
async fn selectors_see_objects_move_in_and_out() {
    let s = store(WatchConfig::default(), &[pod("a", 3, "n1")], 10);
    let filter = WatchFilter {
        fields: crate::selector::field::FieldSelector::parse("spec.nodeName=n2").unwrap(),
        ..Default::default()
    };
    let mut w = open(&s, filter, Start::After(10), params(10));
    s.apply(Change::Upsert(pod("a", 11, "n2"))); // moves in
    s.apply(Change::Upsert(pod("b", 12, "n1"))); // never matches
    s.apply(Change::Upsert(pod("a", 13, "n2"))); // stays in
    s.apply(Change::Upsert(pod("a", 14, "n3"))); // moves out: previous state at RV 14
    assert_eq!(
        read(&mut w, 3).await,
        vec![
            ev("ADDED", "a", 11),
            ev("MODIFIED", "a", 13),
            ev("DELETED", "a", 14)
        ]
    );
}

#[tokio::test]
async fn a_relist_is_delivered_as_ordinary_events() {
    let s = store(
        WatchConfig::default(),
        &[pod("a", 3, "n"), pod("b", 4, "n")],
        10,
    );
    let mut w = open(&s, WatchFilter::default(), Start::After(10), params(10));
    let mut snap = Snapshot::default();
    snap.insert(pod("a", 15, "n"));
    snap.insert(pod("c", 12, "n"));
    snap.resource_version = 20;
    s.replace(snap);
    s.apply(Change::Upsert(pod("d", 21, "n")));
    assert_eq!(
        read(&mut w, 4).await,
        vec![
            ev("ADDED", "c", 12),
            ev("MODIFIED", "a", 15),
            ev("DELETED", "b", 20),
            ev("ADDED", "d", 21)
        ]
    );
    // A contradictory relist ends the stream, as the apiserver's cacher would.
    s.replace(Snapshot {
        resource_version: 5,
        ..Default::default()
    });
    ends(&mut w).await;
    assert_eq!(s.hub().stats.terminated(EndReason::Relist), 1);
}

#[tokio::test(start_paused = true)]
async fn idle_watchers_get_bookmarks_and_end_at_their_timeout() {
    let cfg = WatchConfig {
        bookmark_interval: Duration::from_secs(60),
        ..Default::default()
    };
    let s = store(cfg, &[], 10);
    let p = WatchParams {
        allow_bookmarks: true,
        timeout: Duration::from_secs(150),
        ..params(10)
    };
    let mut w = open(&s, WatchFilter::default(), Start::After(10), p);
    s.apply(Change::Progress(17));
    // t=60 s and t=120 s: the cadence; t=148 s: the one before the deadline.
    let start = tokio::time::Instant::now();
    let got = read_within(&mut w, 1, Duration::from_secs(1000)).await;
    assert_eq!(got, vec![ev("BOOKMARK", "", 17)]);
    assert_eq!(start.elapsed().as_secs(), 60);
    s.apply(Change::Progress(18));
    let got = read_within(&mut w, 1, Duration::from_secs(1000)).await;
    assert_eq!(got, vec![ev("BOOKMARK", "", 18)]);
    assert_eq!(start.elapsed().as_secs(), 120);
    let got = read_within(&mut w, 1, Duration::from_secs(1000)).await;
    assert_eq!(got, vec![ev("BOOKMARK", "", 18)]);
    assert_eq!(start.elapsed().as_secs(), 148, "2 s before the deadline");
    ends_within(&mut w, Duration::from_secs(1000)).await;
    assert_eq!(s.hub().stats.terminated(EndReason::Timeout), 1);
}

#[tokio::test(start_paused = true)]
async fn watchers_that_did_not_ask_get_no_bookmarks() {
    let s = store(WatchConfig::default(), &[], 10);
    let p = WatchParams {
        timeout: Duration::from_secs(200),
        ..params(10)
    };
    let mut w = open(&s, WatchFilter::default(), Start::After(10), p);
    s.apply(Change::Progress(17));
    let start = tokio::time::Instant::now();
    ends_within(&mut w, Duration::from_secs(1000)).await;
    assert_eq!(
        start.elapsed().as_secs(),
        200,
        "nothing before the deadline"
    );
}

#[tokio::test]
async fn a_dropped_watcher_leaves_dispatch_at_once() {
    let s = store(WatchConfig::default(), &[], 10);
    let w = open(&s, WatchFilter::default(), Start::After(10), params(10));
    assert_eq!(s.hub().live_watchers(), 1);
    drop(w);
    assert_eq!(s.hub().live_watchers(), 0);
    assert_eq!(s.hub().stats.terminated(EndReason::ClientGone), 1);
    assert_eq!(
        s.hub()
            .stats
            .watchers
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

/// The frames a body has ready now, without waiting.
fn ready_frames(body: &mut WatchBody) -> Vec<Bytes> {
    use http_body::Body as _;
    let waker = futures_util::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    let mut out = Vec::new();
    while let std::task::Poll::Ready(Some(Ok(f))) =
        std::pin::Pin::new(&mut *body).poll_frame(&mut cx)
    {
        out.push(f.into_data().expect("data frame"));
    }
    out
}

#[tokio::test]
async fn events_ready_together_leave_in_one_frame_and_a_lone_one_is_not_copied() {
    let s = store(WatchConfig::default(), &[], 10);
    let mut w = open(&s, WatchFilter::default(), Start::After(10), params(10));
    let mut other = open(&s, WatchFilter::default(), Start::After(10), params(10));
    assert!(ready_frames(&mut w).is_empty());
    assert!(ready_frames(&mut other).is_empty());

    // A lone event: its own frame, the hub's shared encoded line itself.
    s.apply(Change::Upsert(pod("a", 11, "n")));
    let lone = ready_frames(&mut w);
    assert_eq!(lone.len(), 1);
    assert_eq!(lone[0].iter().filter(|b| **b == b'\n').count(), 1);
    let lone_too = ready_frames(&mut other);
    assert_eq!(
        lone[0].as_ptr(),
        lone_too[0].as_ptr(),
        "a lone event is sent from the shared encoding, not a copy"
    );

    // Three events queued before the body is polled: one frame, in order.
    for (i, name) in ["b", "c", "d"].iter().enumerate() {
        s.apply(Change::Upsert(pod(name, 12 + i as u64, "n")));
    }
    let burst = ready_frames(&mut w);
    assert_eq!(burst.len(), 1, "a burst is written as one frame");
    let lines: Vec<Value> = burst[0]
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    let rvs: Vec<&str> = lines
        .iter()
        .map(|v| v["object"]["metadata"]["resourceVersion"].as_str().unwrap())
        .collect();
    assert_eq!(rvs, ["12", "13", "14"]);
}

#[tokio::test(start_paused = true)]
async fn a_contradictory_relist_ends_every_watcher_registered_before_it() {
    let cfg = WatchConfig {
        history_window: Duration::from_secs(1),
        ..Default::default()
    };
    let s = store(cfg, &[pod("a", 3, "n"), pod("b", 4, "n")], 10);
    // Fell behind (its queue overflowed), and the events it missed then left the history.
    let mut behind = open(&s, WatchFilter::default(), Start::After(10), params(10));
    for i in 0..=QUEUE_LEN as u64 {
        s.apply(Change::Upsert(pod(&format!("p{i}"), 11 + i, "n")));
    }
    tokio::time::advance(Duration::from_secs(2)).await;
    s.apply(Change::Progress(100));
    assert_eq!(s.hub().history_stats().events, 0, "the history was trimmed");
    // Registered since, its initial state not sent yet, and nothing published after it:
    // its position is exactly where the restarted history begins.
    let mut initial = open(&s, WatchFilter::default(), Start::Initial, params(0));

    // The upstream relists at an older RV: no continuous story exists.
    let mut snap = Snapshot::default();
    snap.insert(pod("z", 4, "n"));
    snap.resource_version = 5;
    s.replace(snap);
    s.apply(Change::Upsert(pod("y", 6, "n")));

    // Neither the old initial state nor the new history's events: the stream ends.
    ends(&mut initial).await;
    // The one behind gets what its queue held, then ends, for the relist: not as slow.
    let got = read(&mut behind, QUEUE_LEN).await;
    let last = QUEUE_LEN as u64 - 1;
    assert_eq!(
        got.last().unwrap(),
        &ev("ADDED", &format!("p{last}"), 11 + last)
    );
    ends(&mut behind).await;
    assert_eq!(s.hub().stats.terminated(EndReason::Relist), 2);
    assert_eq!(s.hub().stats.terminated(EndReason::Slow), 0);
}

/// A negative timeoutSeconds ends the watch before any event, whether or not the
/// clock has moved by the first poll. The timer alone decided it by its millisecond
/// ticks: a deadline within the current tick fires on the next, so a first poll within
/// the tick sent the state's events and a later one did not (CI saw both).
#[tokio::test(start_paused = true)]
async fn an_expired_timeout_ends_the_watch_before_its_initial_state() {
    // Half-way through a tick, as a request usually is.
    tokio::time::advance(Duration::from_micros(500)).await;
    let s = store(
        WatchConfig::default(),
        &[pod("a", 3, "n1"), pod("b", 4, "n2")],
        10,
    );
    let expired = WatchParams {
        timeout: Duration::ZERO,
        ..params(0)
    };
    let mut w = open(&s, WatchFilter::default(), Start::Initial, expired);
    assert!(ready_frames(&mut w).is_empty());
    ends(&mut w).await;
    assert_eq!(s.hub().stats.terminated(EndReason::Timeout), 1);
    assert_eq!(s.hub().live_watchers(), 0, "unregistered");
    assert_eq!(s.hub().pinned_snapshots(), 0, "its snapshot given back");
}

#[tokio::test(start_paused = true)]
async fn a_timeout_of_centuries_is_a_deadline_never_reached() {
    let s = store(WatchConfig::default(), &[], 10);
    // The longest timeoutSeconds kube-apiserver's conversion yields (about 292 years);
    // `Instant + Duration` must not be what decides what happens to it.
    let p = WatchParams {
        timeout: Duration::from_nanos(i64::MAX as u64),
        allow_bookmarks: true,
        ..params(10)
    };
    let mut w = open(&s, WatchFilter::default(), Start::After(10), p);
    s.apply(Change::Upsert(pod("a", 11, "n")));
    assert_eq!(read(&mut w, 1).await, vec![ev("ADDED", "a", 11)]);
    // Longer than any Instant holds: still no panic.
    let p = WatchParams {
        timeout: Duration::MAX,
        ..params(11)
    };
    let mut w = open(&s, WatchFilter::default(), Start::After(11), p);
    s.apply(Change::Upsert(pod("b", 12, "n")));
    assert_eq!(read(&mut w, 1).await, vec![ev("ADDED", "b", 12)]);
}

#[tokio::test]
async fn a_relist_reports_a_re_created_object_as_deleted_then_added() {
    let uid_pod = |name: &str, rv: u64, uid: &str| {
        let raw = format!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}","uid":"{uid}"}},"spec":{{"nodeName":"n"}}}}"#
        );
        Arc::new(
            CachedObject::parse(Bytes::from(raw), &[("spec.nodeName", "spec.nodeName")]).unwrap(),
        )
    };
    let s = store(
        WatchConfig::default(),
        &[uid_pod("a", 3, "uid-1"), uid_pod("b", 4, "uid-b")],
        10,
    );
    let mut w = open(&s, WatchFilter::default(), Start::After(10), params(10));
    // While the upstream watch was down, a was deleted and created again (new uid).
    let mut snap = Snapshot::default();
    snap.insert(uid_pod("a", 15, "uid-2"));
    snap.insert(uid_pod("b", 4, "uid-b"));
    snap.resource_version = 20;
    s.replace(snap);
    assert_eq!(
        read(&mut w, 2).await,
        vec![ev("DELETED", "a", 14), ev("ADDED", "a", 15)]
    );
    // A client that resumes from the deletion's RV gets the re-creation.
    let mut resumed = open(&s, WatchFilter::default(), Start::After(14), params(14));
    assert_eq!(read(&mut resumed, 1).await, vec![ev("ADDED", "a", 15)]);
}

#[tokio::test]
async fn a_relist_at_the_same_rv_with_objects_missing_ends_the_watches() {
    let s = store(
        WatchConfig::default(),
        &[pod("a", 3, "n"), pod("b", 4, "n")],
        10,
    );
    let mut w = open(&s, WatchFilter::default(), Start::After(10), params(10));
    // The same RV and less state: no RV is left for the deletion that a client resuming
    // from 10 would see, so the streams end (the client relists).
    let mut snap = Snapshot::default();
    snap.insert(pod("a", 3, "n"));
    snap.resource_version = 10;
    s.replace(snap);
    ends(&mut w).await;
    assert_eq!(s.hub().stats.terminated(EndReason::Relist), 1);
    // The new state is served: a new watcher's initial state lacks b.
    let mut fresh = open(&s, WatchFilter::default(), Start::Initial, params(0));
    assert_eq!(read(&mut fresh, 1).await, vec![ev("ADDED", "a", 3)]);
    assert!(ready_frames(&mut fresh).is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_history_counts_each_encoding_it_holds() {
    // The same event in a store with no watcher: nothing encoded.
    let quiet = store(WatchConfig::default(), &[pod("a", 3, "n1")], 10);
    quiet.apply(Change::Upsert(pod("a", 11, "n2")));
    let base = quiet.hub().history_stats().bytes;
    assert!(
        base > pod("a", 3, "n1").raw.len() + pod("a", 11, "n2").raw.len(),
        "the event holds both states: {base}"
    );

    let cfg = WatchConfig {
        history_window: Duration::from_secs(1),
        ..Default::default()
    };
    let s = store(cfg, &[pod("a", 3, "n1")], 10);
    let mut all = open(&s, WatchFilter::default(), Start::After(10), params(10));
    let on_n1 = WatchFilter {
        fields: crate::selector::field::FieldSelector::parse("spec.nodeName=n1").unwrap(),
        ..Default::default()
    };
    let mut on_n1 = open(&s, on_n1, Start::After(10), params(10));
    // One event, two encodings: MODIFIED for one watcher, DELETED (the previous state)
    // for the other.
    s.apply(Change::Upsert(pod("a", 11, "n2")));
    let modified: usize = ready_frames(&mut all).iter().map(Bytes::len).sum();
    let deleted: usize = ready_frames(&mut on_n1).iter().map(Bytes::len).sum();
    assert!(modified > 0 && deleted > 0);
    assert_eq!(
        s.hub().history_stats().bytes,
        base + modified + deleted,
        "the event and both of its encodings"
    );
    // Gone from the history, it leaves nothing counted behind.
    tokio::time::advance(Duration::from_secs(2)).await;
    s.apply(Change::Progress(12));
    assert_eq!(s.hub().history_stats().events, 0);
    assert_eq!(s.hub().history_stats().bytes, 0);
}

#[tokio::test(start_paused = true)]
async fn a_watcher_stalled_in_its_initial_state_gives_its_snapshot_back() {
    let cfg = WatchConfig {
        stall_timeout: Duration::from_secs(30),
        ..Default::default()
    };
    // Three batches of initial events (256, 256, 88).
    let objs: Vec<_> = (0..600).map(|i| pod(&format!("p{i:03}"), 3, "n")).collect();
    let s = store(cfg, &objs, 10);
    let pinned = s.snapshot();
    let mut rv = 10;
    let mut churn = |s: &StoreWriter| {
        rv += 1;
        s.apply(Change::Upsert(pod(&format!("p{:03}", rv % 600), rv, "n")));
    };
    // One never read, one that stops after its first batch, one that keeps reading
    // (slowly: a batch every 25 s).
    let mut never = open(&s, WatchFilter::default(), Start::Initial, params(0));
    let mut half = open(&s, WatchFilter::default(), Start::Initial, params(0));
    let mut steady = open(&s, WatchFilter::default(), Start::Initial, params(0));
    assert_eq!(read(&mut half, 256).await.len(), 256);
    assert_eq!(read(&mut steady, 256).await.len(), 256);
    churn(&s);
    tokio::time::advance(Duration::from_secs(25)).await;
    assert_eq!(read(&mut steady, 256).await.len(), 256);
    churn(&s);
    assert_eq!(Arc::strong_count(&pinned), 4, "ours and three watchers'");
    assert_eq!(s.hub().pinned_snapshots(), 3);
    assert_eq!(s.hub().stats.terminated(EndReason::Slow), 0);

    // 35 s: the two stalled since 0 s give the snapshot back (at the next change), and
    // count as ended now, whether or not their clients ever read again.
    tokio::time::advance(Duration::from_secs(10)).await;
    churn(&s);
    assert_eq!(
        Arc::strong_count(&pinned),
        2,
        "ours and the steady reader's"
    );
    assert_eq!(s.hub().pinned_snapshots(), 1);
    assert_eq!(s.hub().stats.terminated(EndReason::Slow), 2);

    // The steady one finishes: its initial state is whole, then the changes follow.
    tokio::time::advance(Duration::from_secs(15)).await;
    let rest = read(&mut steady, 88 + 3).await;
    assert_eq!(rest[87], ev("ADDED", "p599", 3));
    assert_eq!(
        rest[88..],
        [
            ev("MODIFIED", "p011", 11),
            ev("MODIFIED", "p012", 12),
            ev("MODIFIED", "p013", 13)
        ]
    );
    assert_eq!(Arc::strong_count(&pinned), 1, "nobody pins it any more");
    assert_eq!(s.hub().pinned_snapshots(), 0);

    // The stalled ones end as soon as they are polled, with nothing more, and are
    // counted once.
    ends(&mut never).await;
    ends(&mut half).await;
    drop((never, half));
    assert_eq!(s.hub().stats.terminated(EndReason::Slow), 2);
    assert_eq!(s.hub().stats.terminated(EndReason::ClientGone), 0);
    drop(steady);
    assert_eq!(
        s.hub()
            .stats
            .watchers
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[tokio::test]
async fn a_step_queues_a_bounded_number_of_bytes() {
    // Ten 100 KiB objects: 1 MB, far fewer than a batch's 256 objects.
    let big = |name: &str| {
        let raw = format!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"3","annotations":{{"pad":"{}"}}}}}}"#,
            "x".repeat(100 * 1024)
        );
        Arc::new(CachedObject::parse(Bytes::from(raw), &[]).unwrap())
    };
    let objs: Vec<_> = (0..10).map(|i| big(&format!("p{i}"))).collect();
    let s = store(WatchConfig::default(), &objs, 10);
    let mut w = open(&s, WatchFilter::default(), Start::Initial, params(0));
    // One frame taken, as by a client that then stops reading: what the body has queued
    // is a few objects, not the whole state, so it still holds its snapshot lease...
    use http_body_util::BodyExt;
    let mut buf = w
        .frame()
        .await
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap()
        .to_vec();
    assert_eq!(s.hub().pinned_snapshots(), 1);
    // ...and reading on delivers everything, in order.
    while buf.iter().filter(|b| **b == b'\n').count() < 10 {
        let f = tokio::time::timeout(Duration::from_secs(5), w.frame())
            .await
            .expect("a frame")
            .expect("not the end");
        buf.extend_from_slice(f.unwrap().data_ref().unwrap());
    }
    let names: Vec<String> = buf
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            let v: Value = serde_json::from_slice(l).unwrap();
            assert_eq!(v["type"], "ADDED");
            v["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let want: Vec<String> = (0..10).map(|i| format!("p{i}")).collect();
    assert_eq!(names, want);
    assert_eq!(s.hub().pinned_snapshots(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_watcher_whose_snapshot_was_taken_back_is_counted_once() {
    // Its client stalls in the initial state: the hub takes the snapshot back (counted as
    // slow). When the client reads again, after its timeout, the stream ends without a
    // second count (timeout).
    let cfg = WatchConfig {
        stall_timeout: Duration::from_secs(30),
        ..Default::default()
    };
    let objs: Vec<_> = (0..600).map(|i| pod(&format!("p{i:03}"), 3, "n")).collect();
    let s = store(cfg, &objs, 10);
    let mut p = params(0);
    p.timeout = Duration::from_secs(40);
    let mut w = open(&s, WatchFilter::default(), Start::Initial, p);
    assert_eq!(read(&mut w, 256).await.len(), 256);
    tokio::time::advance(Duration::from_secs(35)).await;
    s.apply(Change::Upsert(pod("p000", 11, "n"))); // the change runs the sweep
    assert_eq!(s.hub().stats.terminated(EndReason::Slow), 1);
    tokio::time::advance(Duration::from_secs(10)).await; // past the deadline
    ends(&mut w).await;
    drop(w);
    let total: u64 = EndReason::ALL
        .iter()
        .map(|r| s.hub().stats.terminated(*r))
        .sum();
    assert_eq!(total, 1, "one watch, one end");
}

/// The connection end of the express lane for the bookmark tests: records what it was
/// handed (and when), and answers as told, as `server::chunked::ChunkSink` does for an
/// idle connection (`All`) or a full socket (`Nothing`).
struct LaneSink {
    answer: std::sync::Mutex<crate::lane::Sent>,
    got: std::sync::Mutex<Vec<(tokio::time::Instant, Bytes)>>,
}

impl LaneSink {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            answer: std::sync::Mutex::new(crate::lane::Sent::All),
            got: std::sync::Mutex::default(),
        })
    }

    fn answer(&self, a: crate::lane::Sent) {
        *self.answer.lock().unwrap() = a;
    }

    /// What it wrote, as (type, name, rv), with the time since `start` in seconds.
    fn written(&self, start: tokio::time::Instant) -> Vec<(u64, (String, String, String))> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|(t, b)| {
                let v: Value = serde_json::from_slice(b).unwrap();
                (
                    t.duration_since(start).as_secs(),
                    (
                        v["type"].as_str().unwrap().to_string(),
                        v["object"]["metadata"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        v["object"]["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap()
                            .to_string(),
                    ),
                )
            })
            .collect()
    }
}

impl crate::lane::Sink for LaneSink {
    fn try_send(&self, frame: &bytes::Bytes) -> crate::lane::Sent {
        let a = *self.answer.lock().unwrap();
        if a != crate::lane::Sent::Nothing {
            self.got
                .lock()
                .unwrap()
                .push((tokio::time::Instant::now(), Bytes::copy_from_slice(frame)));
        }
        a
    }
}

/// Counts the wake-ups of the task a body belongs to.
#[derive(Default)]
struct CountingWaker(std::sync::atomic::AtomicUsize);

impl futures_util::task::ArcWake for CountingWaker {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Polls `body` once, as a connection's task does, with `waker`: it must have nothing to
/// send (it goes idle and arms its queue with the lane, if it has one).
fn poll_idle(body: &mut WatchBody, waker: &Arc<CountingWaker>) {
    use http_body::Body as _;
    let w = futures_util::task::waker(waker.clone());
    let mut cx = std::task::Context::from_waker(&w);
    assert!(
        std::pin::Pin::new(body).poll_frame(&mut cx).is_pending(),
        "the body had something to send"
    );
}

fn bookmarking(min_rv: u64, timeout: Duration) -> WatchParams {
    WatchParams {
        allow_bookmarks: true,
        timeout,
        ..params(min_rv)
    }
}

/// Issue 18: periodic bookmarks come from one tick per resource type, not a timer per
/// watcher. An idle watcher on the express lane (a detached HTTP/1.1 watch whose task is
/// idle) gets each one written straight to its socket by the tick, on schedule, exactly
/// one per interval, and its body is never woken for it. 600 watchers: more than one
/// step of the tick (`bookmarks::BATCH`). The pre-timeout bookmark, once per watch, is
/// the body's own.
#[tokio::test(start_paused = true)]
async fn idle_lane_watchers_get_periodic_bookmarks_from_the_tick_without_a_wake_up() {
    const N: usize = 600;
    let cfg = WatchConfig {
        bookmark_interval: Duration::from_secs(60),
        ..Default::default()
    };
    let s = store(cfg, &[], 10);
    let start = tokio::time::Instant::now();
    let mut watchers = Vec::new();
    for _ in 0..N {
        let mut w = open(
            &s,
            WatchFilter::default(),
            Start::After(10),
            bookmarking(10, Duration::from_secs(150)),
        );
        let sink = LaneSink::new();
        w.lane().connect(sink.clone());
        let waker = Arc::new(CountingWaker::default());
        poll_idle(&mut w, &waker);
        watchers.push((w, sink, waker));
    }
    assert_eq!(s.hub().scheduled_bookmarks(), N);
    s.apply(Change::Progress(17));
    tokio::time::sleep_until(start + Duration::from_secs(61)).await;
    s.apply(Change::Progress(18));
    tokio::time::sleep_until(start + Duration::from_secs(121)).await;
    for (i, (_, sink, waker)) in watchers.iter().enumerate() {
        assert_eq!(
            sink.written(start),
            vec![(60, ev("BOOKMARK", "", 17)), (120, ev("BOOKMARK", "", 18))],
            "watcher {i}: one bookmark per interval, through the lane"
        );
        assert_eq!(waker.0.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
    let stats = &s.hub().stats;
    let direct = stats
        .bookmarks_written_directly
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(direct, 2 * N as u64);
    // 2 s before the deadline: the body's own bookmark (its timer wakes it), and no
    // periodic one after it.
    let (w, sink, _) = &mut watchers[0];
    let got = read_within(w, 1, Duration::from_secs(1000)).await;
    assert_eq!(got, vec![ev("BOOKMARK", "", 18)]);
    assert_eq!(start.elapsed().as_secs(), 148, "2 s before the deadline");
    ends_within(w, Duration::from_secs(1000)).await;
    assert_eq!(start.elapsed().as_secs(), 150);
    assert_eq!(
        sink.written(start).len(),
        2,
        "no periodic bookmark after it"
    );
    drop(watchers);
    assert_eq!(
        s.hub().scheduled_bookmarks(),
        0,
        "ended watches leave the schedule"
    );
}

/// A bookmark never overtakes an event: when the tick finds the watcher's queue holding
/// one (its connection was busy when the event came), the bookmark is not written
/// through the lane, even if the socket could take it now; the body sends the event and
/// then the bookmark, carrying that event's RV.
#[tokio::test(start_paused = true)]
async fn a_due_bookmark_never_overtakes_a_queued_event() {
    use crate::lane::Sent;
    let cfg = WatchConfig {
        bookmark_interval: Duration::from_secs(60),
        ..Default::default()
    };
    let s = store(cfg, &[], 10);
    let start = tokio::time::Instant::now();
    let mut w = open(
        &s,
        WatchFilter::default(),
        Start::After(10),
        bookmarking(10, Duration::from_secs(3600)),
    );
    let sink = LaneSink::new();
    w.lane().connect(sink.clone());
    let waker = Arc::new(CountingWaker::default());
    poll_idle(&mut w, &waker);
    // The socket is full: the event is queued and the body woken.
    sink.answer(Sent::Nothing);
    s.apply(Change::Upsert(pod("a", 11, "n")));
    assert_eq!(waker.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The socket drains, but the body has not run yet when the bookmark is due.
    sink.answer(Sent::All);
    tokio::time::sleep_until(start + Duration::from_secs(61)).await;
    assert!(
        sink.written(start).is_empty(),
        "nothing went past the queue"
    );
    let got = read_within(&mut w, 2, Duration::from_secs(1)).await;
    assert_eq!(got, vec![ev("ADDED", "a", 11), ev("BOOKMARK", "", 11)]);
}

/// A bookmark the socket cannot take now (it would block) goes to the body, which is
/// woken and sends it, as an event's write falls back to the connection's task.
#[tokio::test(start_paused = true)]
async fn a_bookmark_the_socket_cannot_take_goes_through_the_body() {
    use crate::lane::Sent;
    let cfg = WatchConfig {
        bookmark_interval: Duration::from_secs(60),
        ..Default::default()
    };
    let s = store(cfg, &[], 10);
    let start = tokio::time::Instant::now();
    let mut w = open(
        &s,
        WatchFilter::default(),
        Start::After(10),
        bookmarking(10, Duration::from_secs(3600)),
    );
    let sink = LaneSink::new();
    w.lane().connect(sink.clone());
    let waker = Arc::new(CountingWaker::default());
    poll_idle(&mut w, &waker);
    s.apply(Change::Progress(15));
    sink.answer(Sent::Nothing);
    tokio::time::sleep_until(start + Duration::from_secs(61)).await;
    assert_eq!(
        waker.0.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "woken"
    );
    let got = read_within(&mut w, 1, Duration::from_secs(1)).await;
    assert_eq!(got, vec![ev("BOOKMARK", "", 15)]);
    assert_eq!(
        s.hub()
            .stats
            .bookmarks_written_directly
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

/// A bookmark due while a watcher still sends its initial state waits until it is live
/// and idle; the initial-events-end bookmark restarts the cadence, so no periodic one
/// follows it at once.
#[tokio::test(start_paused = true)]
async fn the_cadence_restarts_at_the_initial_events_end_bookmark() {
    let cfg = WatchConfig {
        bookmark_interval: Duration::from_secs(60),
        ..Default::default()
    };
    let s = store(cfg, &[pod("a", 5, "n")], 10);
    let start = tokio::time::Instant::now();
    let p = WatchParams {
        initial_events_end: true,
        ..bookmarking(0, Duration::from_secs(3600))
    };
    let mut w = open(&s, WatchFilter::default(), Start::Initial, p);
    // Not read until after the first periodic bookmark was due.
    tokio::time::sleep_until(start + Duration::from_secs(61)).await;
    let got = read_within(&mut w, 2, Duration::from_secs(1)).await;
    assert_eq!(got, vec![ev("ADDED", "a", 5), ev("BOOKMARK", "", 10)]);
    // The next one a full interval after the initial-events-end bookmark.
    let got = read_within(&mut w, 1, Duration::from_secs(1000)).await;
    assert_eq!(got, vec![ev("BOOKMARK", "", 10)]);
    assert_eq!(start.elapsed().as_secs(), 121);
}

/// The trace layer does not wrap a cached watch's body (`stack::trace`): the body writes
/// the request's `end of stream` line itself, once, with the reason the watch ended.
#[tokio::test(start_paused = true)]
async fn a_watch_logs_its_end_of_stream_with_the_reason() {
    #[derive(Clone, Default)]
    struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let logs = Captured::default();
    let sub = tracing_subscriber::fmt()
        .with_env_filter("debug")
        .with_writer({
            let logs = logs.clone();
            move || logs.clone()
        })
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(sub);
    let s = store(WatchConfig::default(), &[], 10);
    let p = WatchParams {
        timeout: Duration::from_secs(30),
        ..params(10)
    };
    let mut w = open(&s, WatchFilter::default(), Start::After(10), p);
    ends_within(&mut w, Duration::from_secs(100)).await;
    drop(w);
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert_eq!(text.matches("end of stream").count(), 1, "{text}");
    assert!(text.contains("reason=\"timeout\""), "{text}");
    assert!(text.contains("stream_duration=30000 ms"), "{text}");
}

/// Records which connection (`Sink::group`) each lane write was for, in order.
struct GroupSink {
    group: u64,
    log: Arc<std::sync::Mutex<Vec<u64>>>,
}

impl crate::lane::Sink for GroupSink {
    fn try_send(&self, _frame: &bytes::Bytes) -> crate::lane::Sent {
        self.log.lock().unwrap().push(self.group);
        crate::lane::Sent::All
    }

    fn group(&self) -> u64 {
        self.group
    }
}

/// Issue 18: one event's lane writes are made connection by connection. HTTP/2 watches
/// share connections; handed over in the index's order, every connection would wait for
/// the whole fan-out before its task could write it in one piece. Watchers registered
/// with their connections interleaved still get the event grouped by connection.
#[tokio::test(start_paused = true)]
async fn an_events_lane_writes_go_connection_by_connection() {
    const CONNECTIONS: u64 = 4;
    const N: u64 = 40;
    let s = store(WatchConfig::default(), &[], 10);
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut watchers = Vec::new();
    for i in 0..N {
        let mut w = open(&s, WatchFilter::default(), Start::After(10), params(10));
        w.lane().connect(Arc::new(GroupSink {
            group: 1 + i % CONNECTIONS,
            log: log.clone(),
        }));
        let waker = Arc::new(CountingWaker::default());
        poll_idle(&mut w, &waker);
        watchers.push((w, waker));
    }
    s.apply(Change::Upsert(pod("a", 11, "n")));
    let got = log.lock().unwrap().clone();
    assert_eq!(
        got.len(),
        N as usize,
        "every watcher written through the lane"
    );
    let mut grouped = got.clone();
    grouped.sort_unstable();
    assert_eq!(got, grouped, "each connection's writes together");
    for (_, waker) in &watchers {
        assert_eq!(
            waker.0.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "no body woken"
        );
    }
}

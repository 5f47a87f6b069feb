//! Every transition of the reflector's state machine (the parent module's doc comment
//! and `cache::reflector`'s diagram), without a server: each test hands the machine an
//! outcome built the way the I/O shell builds it (through the same classification
//! functions, from status codes, event lines and upstream errors) and checks the next
//! step and the actions.

use std::time::Duration;

use http::StatusCode;
use serde_json::json;

use super::*;
use crate::cache::events::decode_event;
use crate::cache::store::Store;
use crate::upstream::Class;

/// A stand-in for an open stream: the machine only carries it.
type S = &'static str;

const SECOND: Duration = Duration::from_secs(1);

fn machine() -> Machine {
    Machine::new(WatchListSupport::Try, 1)
}

fn seen(store_rv: u64) -> Seen {
    Seen {
        store_rv,
        progress_pending: false,
    }
}

fn pending(store_rv: u64) -> Seen {
    Seen {
        store_rv,
        progress_pending: true,
    }
}

fn read(rv: u64) -> Read {
    Read {
        resource_version: rv,
        endpoint: Some(0),
    }
}

fn ended(m: &mut Machine, end: WatchEnd, seen: Seen) -> Transition<S> {
    m.step(Outcome::WatchEnded(end), seen)
}

fn counts(t: &Transition<S>) -> Vec<Counter> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::Count(c) => Some(*c),
            _ => None,
        })
        .collect()
}

/// The sleeps of a transition, before jitter.
fn sleeps(t: &Transition<S>) -> Vec<Delay> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::Sleep(d, _) => Some(*d),
            _ => None,
        })
        .collect()
}

fn installs(t: &Transition<S>) -> Vec<Via> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            Action::Install { via, .. } => Some(*via),
            _ => None,
        })
        .collect()
}

fn upstream_down() -> Failure {
    Failure::Upstream(UpstreamError::Connect("connection refused".into()))
}

fn pool_full() -> Failure {
    Failure::Upstream(UpstreamError::TooManyRequests(Class::LongRunning))
}

fn pod(name: &str, rv: u64) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string()}})
}

fn line(v: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&v).unwrap()
}

fn error_event(code: u16, reason: &str, message: &str) -> Vec<u8> {
    line(
        json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
        "status": "Failure", "code": code, "reason": reason, "message": message}}),
    )
}

/// The ERROR kube-apiserver sends when its watch cache has not reached the RV asked for.
fn too_large_event() -> Vec<u8> {
    line(
        json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
        "status": "Failure", "code": 504, "reason": "Timeout",
        "message": "Too large resource version: 20, current: 10",
        "details": {"causes": [{"reason": "ResourceVersionTooLarge",
                                "message": "Too large resource version"}],
                    "retryAfterSeconds": 2}}}),
    )
}

fn too_large_status() -> ErrorStatus {
    let l = too_large_event();
    let v: RawEvent<'_> = serde_json::from_slice(&l).unwrap();
    serde_json::from_str(v.object.get()).unwrap()
}

/// What a watch event line does, as the shell's `apply_event` decides it.
fn effect(line: &[u8]) -> Result<Effect, MalformedEvent> {
    decode_event(line, &[]).map(on_event)
}

// Sync → WatchList | PagedList

#[test]
fn sync_tries_watch_list_while_it_may_and_pages_otherwise() {
    let t: Transition<S> = machine().step(Outcome::SyncBegun(SyncCause::Start), seen(0));
    assert!(matches!(t.next, Step::WatchList(SyncCause::Start)), "{t:?}");
    assert!(t.actions.is_empty());

    let mut off = Machine::new(WatchListSupport::No, 1);
    let t: Transition<S> = off.step(Outcome::SyncBegun(SyncCause::Consistent), seen(7));
    assert!(
        matches!(t.next, Step::PagedList(SyncCause::Consistent)),
        "{t:?}"
    );
}

#[test]
fn a_watch_list_installs_its_state_and_follows_the_same_stream() {
    let mut m = machine();
    let t = m.step(
        Outcome::WatchListed(SyncCause::Start, Ok((read(10), "the stream"))),
        seen(0),
    );
    assert!(matches!(t.next, Step::Follow("the stream")), "{t:?}");
    assert_eq!(installs(&t), [Via::WatchList]);
    assert_eq!(counts(&t), [Counter::WatchLists]);
    assert!(sleeps(&t).is_empty());
    assert_eq!(m.watch_list_support(), WatchListSupport::Try);
}

// Each watch-list failure → a paged list: for this sync only, or watch-list off for good.

/// The failures that mean "this upstream does not do watch-list", each built the way the
/// shell builds it.
fn unsupported() -> Vec<(&'static str, WatchListFailure)> {
    let mut v = Vec::new();
    for code in [400, 403, 404, 405, 422] {
        let code = StatusCode::from_u16(code).unwrap();
        v.push((
            "a 4xx answer",
            watch_list_refused(RequestError::Status(code)),
        ));
    }
    v.push((
        "the stream ended before the bookmark",
        InitialEvents::ended(),
    ));
    v.push((
        "no bookmark within initial_events_idle",
        InitialEvents::idle(Duration::from_secs(10)),
    ));
    v
}

/// The failures that are transient: a paged list this time, watch-list again next time.
fn transient() -> Vec<(&'static str, WatchListFailure)> {
    let mut v = Vec::new();
    for code in [500, 502, 503, 429] {
        let code = StatusCode::from_u16(code).unwrap();
        v.push((
            "a 5xx or 429",
            watch_list_refused(RequestError::Status(code)),
        ));
    }
    v.push((
        "no answer",
        watch_list_refused(RequestError::Upstream(UpstreamError::Connect(
            "refused".into(),
        ))),
    ));
    v.push((
        "no answer in time",
        watch_list_refused(RequestError::Upstream(UpstreamError::Timeout(SECOND))),
    ));
    v.push((
        "our own pool full",
        watch_list_refused(RequestError::Upstream(UpstreamError::TooManyRequests(
            Class::LongRunning,
        ))),
    ));
    v.push((
        "the stream broke",
        WatchListFailure::Failed(Failure::StreamBroke("connection reset".into())),
    ));
    let mut ev = InitialEvents::new(&[], Some(0));
    for (what, l) in [
        (
            "an ERROR event",
            error_event(500, "InternalError", "etcd is down"),
        ),
        (
            "an ERROR event that is no Status",
            line(json!({"type": "ERROR", "object": "boom"})),
        ),
        ("an undecodable line", b"{not json".to_vec()),
        (
            "an unknown event type",
            line(json!({"type": "WHAT", "object": pod("a", 1)})),
        ),
        (
            "a DELETED event without a name",
            line(json!({"type": "DELETED", "object": {"metadata": {}}})),
        ),
        (
            "a malformed bookmark",
            line(json!({"type": "BOOKMARK", "object": "no object"})),
        ),
        (
            "an end bookmark without a numeric resourceVersion",
            line(
                json!({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "+5",
                "annotations": {INITIAL_EVENTS_END: "true"}}}}),
            ),
        ),
    ] {
        v.push((what, ev.line(&l).expect_err(what)));
    }
    v
}

#[test]
fn watch_list_failures_fall_back_to_a_paged_list_for_good_when_unsupported() {
    for (what, failure) in unsupported() {
        assert!(
            matches!(failure, WatchListFailure::Unsupported(_)),
            "{what}: {failure:?}"
        );
        let mut m = machine();
        let t: Transition<S> = m.step(
            Outcome::WatchListed(SyncCause::Start, Err(failure)),
            seen(0),
        );
        assert!(
            matches!(t.next, Step::PagedList(SyncCause::Start)),
            "{what}: {t:?}"
        );
        assert_eq!(counts(&t), [Counter::WatchListFallbacks], "{what}");
        assert!(
            t.actions
                .iter()
                .any(|a| matches!(a, Action::WatchListFellBack { for_good: true, .. })),
            "{what}: {t:?}"
        );
        assert!(sleeps(&t).is_empty(), "{what}: the fallback is immediate");
        assert_eq!(m.watch_list_support(), WatchListSupport::No, "{what}");
        // The next sync (a relist) goes straight to the paged list.
        let t: Transition<S> = m.step(Outcome::SyncBegun(SyncCause::Consistent), seen(5));
        assert!(matches!(t.next, Step::PagedList(_)), "{what}: {t:?}");
    }
}

#[test]
fn transient_watch_list_failures_fall_back_for_this_sync_only() {
    for (what, failure) in transient() {
        assert!(
            matches!(failure, WatchListFailure::Failed(_)),
            "{what}: {failure:?}"
        );
        let mut m = machine();
        let cause = SyncCause::Relist {
            reason: "x".into(),
            anomaly: false,
        };
        let t: Transition<S> = m.step(Outcome::WatchListed(cause.clone(), Err(failure)), seen(3));
        match &t.next {
            Step::PagedList(c) => assert_eq!(*c, cause, "{what}"),
            other => panic!("{what}: {other:?}"),
        }
        assert_eq!(counts(&t), [Counter::WatchListFallbacks], "{what}");
        assert!(
            t.actions.iter().any(|a| matches!(
                a,
                Action::WatchListFellBack {
                    for_good: false,
                    ..
                }
            )),
            "{what}: {t:?}"
        );
        assert!(sleeps(&t).is_empty(), "{what}");
        assert_eq!(m.watch_list_support(), WatchListSupport::Try, "{what}");
        let t: Transition<S> = m.step(Outcome::SyncBegun(SyncCause::Start), seen(3));
        assert!(matches!(t.next, Step::WatchList(_)), "{what}: {t:?}");
    }
}

#[test]
fn initial_events_build_the_state_up_to_the_end_bookmark() {
    let mut ev = InitialEvents::new(&[], None);
    let add = |n, rv| line(json!({"type": "ADDED", "object": pod(n, rv)}));
    assert!(matches!(ev.line(&add("a", 1)), Ok(Initial::Added)));
    assert!(matches!(ev.line(&add("b", 2)), Ok(Initial::Added)));
    let heap = ev.heap();
    assert!(heap > 0);
    let modified = line(json!({"type": "MODIFIED", "object": pod("a", 3)}));
    assert!(matches!(ev.line(&modified), Ok(Initial::Added)));
    let deleted = line(json!({"type": "DELETED", "object": pod("b", 4)}));
    assert!(matches!(ev.line(&deleted), Ok(Initial::Removed)));
    assert!(ev.heap() < heap);
    // An object that cannot be read is skipped, as a list item would be.
    let bad = line(json!({"type": "ADDED", "object": {"metadata": {"name": "c"}}}));
    assert!(matches!(ev.line(&bad), Ok(Initial::Skipped(_))));
    // A bookmark without the annotation does not end the initial events.
    let plain = line(json!({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "4"}}}));
    assert!(matches!(ev.line(&plain), Ok(Initial::Bookmark)));
    let end = line(
        json!({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9",
        "annotations": {INITIAL_EVENTS_END: "true"}}}}),
    );
    match ev.line(&end) {
        Ok(Initial::Done(s)) => {
            assert_eq!(s.resource_version, 9);
            let names: Vec<&str> = s.objects.keys().map(|k| &**k).collect();
            assert_eq!(names, ["ns/a"]);
        }
        other => panic!("{other:?}"),
    }
}

// PagedList → Watch(rv)

#[test]
fn a_paged_list_installs_its_state_and_watches_from_its_resource_version() {
    let mut m = machine();
    let t: Transition<S> = m.step(Outcome::Listed(SyncCause::Start, Ok(read(42))), seen(0));
    assert!(matches!(t.next, Step::Watch(42, WatchKind::Long)), "{t:?}");
    assert_eq!(installs(&t), [Via::List]);
    assert!(sleeps(&t).is_empty());
}

#[test]
fn a_failed_paged_list_backs_off_and_syncs_again() {
    let mut m = machine();
    let t: Transition<S> = m.step(
        Outcome::Listed(SyncCause::Start, Err(ListError::Failed(upstream_down()))),
        seen(0),
    );
    assert!(matches!(t.next, Step::Sync(SyncCause::Start)), "{t:?}");
    assert_eq!(counts(&t), [Counter::Errors]);
    assert_eq!(sleeps(&t)[0].base, Duration::from_millis(800));
    assert!(matches!(
        &t.actions[1],
        Action::Sleep(_, Wait::ListFailed { first: true, .. })
    ));
    // A status the reflector cannot use, and a page that does not decode: the same.
    for err in [
        Failure::ListStatus {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            body: "{}".into(),
        },
        Failure::Page(PageError::ResourceVersion("x".into())),
    ] {
        let t: Transition<S> = m.step(
            Outcome::Listed(SyncCause::Consistent, Err(ListError::Failed(err))),
            seen(5),
        );
        assert!(matches!(t.next, Step::Sync(SyncCause::Consistent)), "{t:?}");
        assert_eq!(counts(&t), [Counter::Errors]);
    }
}

// Backfill(R) → Watch(R); any failure → an ordinary Sync at once.

#[test]
fn a_resume_point_starts_with_a_backfill_and_none_with_a_sync() {
    assert!(matches!(Machine::start::<S>(Some(42)), Step::Backfill(42)));
    assert!(matches!(
        Machine::start::<S>(None),
        Step::Sync(SyncCause::Start)
    ));
}

#[test]
fn a_backfill_installs_the_past_state_and_watches_from_it() {
    let mut m = machine();
    let t: Transition<S> = m.step(Outcome::Backfilled(42, Ok(read(42))), seen(0));
    // The watch from R brings every change since R into the history: clients resuming
    // from R or later find their events there.
    assert!(matches!(t.next, Step::Watch(42, WatchKind::Long)), "{t:?}");
    assert_eq!(installs(&t), [Via::Backfill]);
    assert!(matches!(
        &t.actions[1],
        Action::Install {
            cause: SyncCause::Start,
            ..
        }
    ));
    assert_eq!(counts(&t), [Counter::Backfills]);
    assert!(sleeps(&t).is_empty());
}

fn fell_back(t: &Transition<S>) -> Option<bool> {
    t.actions.iter().find_map(|a| match a {
        Action::BackfillFellBack { expired, from, .. } => {
            assert_eq!(*from, 42);
            Some(*expired)
        }
        _ => None,
    })
}

#[test]
fn a_compacted_resume_point_falls_back_to_an_ordinary_sync() {
    // kube-apiserver's answer to an Exact list below its compaction: 410 Expired ("The
    // resourceVersion for the provided list is too old."), as the shell reads it.
    let mut m = machine();
    let gone = ListError::Failed(Failure::ListStatus {
        status: StatusCode::GONE,
        body: "too old".into(),
    });
    let t: Transition<S> = m.step(Outcome::Backfilled(42, Err(gone)), seen(0));
    assert!(matches!(t.next, Step::Sync(SyncCause::Start)), "{t:?}");
    assert_eq!(counts(&t), [Counter::BackfillFallbacks]);
    assert_eq!(fell_back(&t), Some(true));
    assert!(installs(&t).is_empty());
    assert!(sleeps(&t).is_empty(), "the ordinary sync follows at once");
    // ...which is the usual sync: watch-list first.
    let t: Transition<S> = m.step(Outcome::SyncBegun(SyncCause::Start), seen(0));
    assert!(matches!(t.next, Step::WatchList(SyncCause::Start)), "{t:?}");
}

#[test]
fn a_failed_backfill_falls_back_at_once_and_the_sync_backs_off_as_usual() {
    for (what, err) in [
        ("upstream down", ListError::Failed(upstream_down())),
        ("pool full", ListError::Failed(pool_full())),
        (
            "500",
            ListError::Failed(Failure::ListStatus {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                body: "{}".into(),
            }),
        ),
        (
            "bad page",
            ListError::Failed(Failure::Page(PageError::ResourceVersion("x".into()))),
        ),
        (
            "behind",
            ListError::Behind(Behind::from_status(&too_large_status(), Some(1))),
        ),
    ] {
        let mut m = machine();
        let t: Transition<S> = m.step(Outcome::Backfilled(42, Err(err)), seen(0));
        assert!(
            matches!(t.next, Step::Sync(SyncCause::Start)),
            "{what}: {t:?}"
        );
        assert_eq!(counts(&t), [Counter::BackfillFallbacks], "{what}");
        assert_eq!(fell_back(&t), Some(false), "{what}");
        assert!(sleeps(&t).is_empty(), "{what}: no wait before the sync");
        let marked = t.actions.iter().any(|a| matches!(a, Action::MarkBehind(1)));
        assert_eq!(marked, what == "behind", "{what}: {t:?}");
        // The backfill's failure did not grow the backoff: the sync's own first failure
        // waits the first step, as a first list that fails does.
        let t: Transition<S> = m.step(
            Outcome::Listed(SyncCause::Start, Err(ListError::Failed(upstream_down()))),
            seen(0),
        );
        assert_eq!(sleeps(&t)[0].base, Duration::from_millis(800), "{what}");
        assert!(matches!(t.next, Step::Sync(SyncCause::Start)), "{what}");
    }
}

#[test]
fn a_backfill_refused_for_another_cluster_syncs_at_once_without_a_fallback() {
    // The identity check answered that the state file's resourceVersions are another
    // cluster's: nothing was read; the first sync is the ordinary one, at once.
    let mut m = machine();
    let t: Transition<S> = m.step(Outcome::BackfillRefused(42), seen(0));
    assert!(matches!(t.next, Step::Sync(SyncCause::Start)), "{t:?}");
    assert_eq!(counts(&t), [Counter::BackfillsOtherCluster]);
    assert!(t
        .actions
        .iter()
        .any(|a| matches!(a, Action::BackfillRefused { from: 42 })));
    assert_eq!(fell_back(&t), None, "not a failed backfill");
    assert!(installs(&t).is_empty());
    assert!(sleeps(&t).is_empty(), "the ordinary sync follows at once");
    let t: Transition<S> = m.step(Outcome::SyncBegun(SyncCause::Start), seen(0));
    assert!(matches!(t.next, Step::WatchList(SyncCause::Start)), "{t:?}");
}

#[test]
fn a_backfill_whose_watch_expires_relists() {
    // The Exact list succeeded but the watch from R finds R gone (kube-apiserver's watch
    // cache window is shorter than etcd's): the usual 410 path, a relist.
    let mut m = machine();
    let _: Transition<S> = m.step(Outcome::Backfilled(42, Ok(read(42))), seen(0));
    let t = ended(&mut m, WatchEnd::Expired("too old".into()), seen(42));
    assert!(matches!(t.next, Step::Verify(After::Relist(_))), "{t:?}");
    let t: Transition<S> = m.step(
        Outcome::Verified(After::Relist("too old".into()), true),
        seen(42),
    );
    assert!(
        matches!(t.next, Step::Sync(SyncCause::Relist { .. })),
        "{t:?}"
    );
}

// Watch/Follow: stream ended → resume from the last rv; bookmarks advance the rv.

#[test]
fn a_stream_that_ends_normally_resumes_from_the_last_resource_version() {
    let f = Following::default();
    let end = f.ended(|| "its timeoutSeconds=300 passed".into());
    let mut m = machine();
    let t = ended(&mut m, end, seen(17));
    assert!(
        matches!(&t.next, Step::Verify(After::Resume(r)) if r == "its timeoutSeconds=300 passed"),
        "{t:?}"
    );
    assert_eq!(counts(&t), [Counter::WatchRestarts]);
    assert!(sleeps(&t).is_empty(), "no backoff after a normal end");
    // The store moved on while the identity was checked: resume from where it is.
    let t: Transition<S> = m.step(Outcome::Verified(After::Resume("x".into()), true), seen(18));
    assert!(matches!(t.next, Step::Watch(18, WatchKind::Long)), "{t:?}");
    assert!(matches!(t.actions[..], [Action::Resuming { rv: 18, .. }]));
}

#[test]
fn bookmarks_advance_the_resource_version_the_watch_resumes_from() {
    let store = Store::untyped();
    let bookmark = line(json!({"type": "BOOKMARK", "object": {"kind": "Pod",
        "metadata": {"resourceVersion": "42"}}}));
    let Ok(Effect::Apply(change)) = effect(&bookmark) else {
        panic!("a bookmark is applied");
    };
    assert!(matches!(change, Change::Progress(42)), "{change:?}");
    store.apply(change);
    assert_eq!(store.resource_version(), 42);
    // It does not end an ordinary watch.
    let mut f = Following::default();
    assert!(f.bookmark(true).is_none());
    assert!(!f.awaiting_bookmark());
    // When the stream ends, the watch resumes from the bookmark's resourceVersion.
    let mut m = machine();
    let t = ended(&mut m, f.ended(String::new), seen(store.resource_version()));
    let Step::Verify(after) = t.next else {
        panic!("{t:?}")
    };
    let t: Transition<S> = m.step(
        Outcome::Verified(after, true),
        seen(store.resource_version()),
    );
    assert!(matches!(t.next, Step::Watch(42, WatchKind::Long)), "{t:?}");
}

#[test]
fn object_events_go_to_the_store() {
    let added = line(json!({"type": "ADDED", "object": pod("a", 5)}));
    assert!(
        matches!(effect(&added), Ok(Effect::Apply(Change::Upsert(o))) if o.resource_version == 5)
    );
    let deleted = line(json!({"type": "DELETED", "object": pod("a", 6)}));
    assert!(
        matches!(effect(&deleted), Ok(Effect::Apply(Change::Delete(o))) if o.resource_version == 6)
    );
}

// 410 → Sync

#[test]
fn expired_http_or_error_event_relists() {
    let http = watch_refused(RequestError::Status(StatusCode::GONE));
    let Ok(Effect::End(event)) = effect(&error_event(
        410,
        "Expired",
        "too old resource version: 1 (5)",
    )) else {
        panic!("an ERROR 410 ends the watch")
    };
    let Ok(Effect::End(gone)) = effect(&error_event(0, "Gone", "gone")) else {
        panic!("an ERROR Gone ends the watch")
    };
    for end in [http, event, gone] {
        assert!(matches!(end, WatchEnd::Expired(_)), "{end:?}");
        let mut m = machine();
        let t = ended(&mut m, end, seen(9));
        assert!(matches!(t.next, Step::Verify(After::Relist(_))), "{t:?}");
        assert_eq!(counts(&t), [Counter::RelistsAfterExpired]);
        assert!(sleeps(&t).is_empty(), "a 410 relists at once");
        let Step::Verify(after) = t.next else {
            unreachable!()
        };
        let t: Transition<S> = m.step(Outcome::Verified(after, true), seen(9));
        assert!(
            matches!(&t.next, Step::Sync(SyncCause::Relist { anomaly: false, reason }) if reason.starts_with("the watch expired")),
            "{t:?}"
        );
    }
}

// Malformed → Sync

#[test]
fn a_malformed_event_relists_after_a_backoff() {
    let mut lines = vec![
        b"{not json".to_vec(),
        line(json!({"type": "MODIFIED", "object": {"metadata": {"name": "a"}}})),
        line(json!({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "x"}}})),
        line(json!({"type": "SOMETHING", "object": pod("a", 1)})),
    ];
    let mut ends: Vec<WatchEnd> = lines
        .drain(..)
        .map(|l| WatchEnd::Malformed(effect(&l).expect_err("malformed").into()))
        .collect();
    // A line longer than any event: the stream cannot be read on.
    ends.push(stream_broke(Failure::EventTooLarge(EventTooLarge)));
    for end in ends {
        assert!(matches!(end, WatchEnd::Malformed(_)), "{end:?}");
        let mut m = machine();
        let t = ended(&mut m, end, seen(9));
        assert!(
            matches!(t.next, Step::Sync(SyncCause::Relist { anomaly: true, .. })),
            "{t:?}"
        );
        assert_eq!(counts(&t), [Counter::MalformedObjects]);
        assert_eq!(sleeps(&t)[0].base, Duration::from_millis(800));
    }
}

// Behind: the same step again (elsewhere), never a relist, the backoff unchanged.

#[test]
fn a_lagging_upstream_retries_the_same_step_and_is_marked_behind() {
    let behind = |endpoint| Behind::from_status(&too_large_status(), endpoint);
    let mut m = machine();
    let check = |t: &Transition<S>, retry: Duration| {
        assert_eq!(counts(t), [Counter::Behind]);
        assert!(
            t.actions.iter().any(|a| matches!(a, Action::MarkBehind(1))),
            "{t:?}"
        );
        assert_eq!(
            sleeps(t),
            [Delay {
                base: retry,
                jitter: (1.0, 1.5)
            }]
        );
    };

    // A watch refused with 504 "Too large resource version", or such an ERROR event.
    let http = watch_refused(RequestError::Behind(behind(Some(1))));
    let Ok(Effect::End(mut event)) = effect(&too_large_event()) else {
        panic!("a too-large ERROR ends the watch")
    };
    if let WatchEnd::Behind(b) = &mut event {
        // The shell fills in the stream's endpoint.
        b.endpoint = Some(1);
    }
    for end in [http, event] {
        assert!(matches!(end, WatchEnd::Behind(_)), "{end:?}");
        let t = ended(&mut m, end, seen(30));
        assert!(matches!(t.next, Step::Watch(30, WatchKind::Long)), "{t:?}");
        check(&t, 2 * SECOND);
    }

    // A watch-list or a list: the same sync again, not a paged list.
    let t: Transition<S> = m.step(
        Outcome::WatchListed(
            SyncCause::Start,
            Err(watch_list_refused(RequestError::Behind(behind(Some(1))))),
        ),
        seen(0),
    );
    assert!(matches!(t.next, Step::Sync(SyncCause::Start)), "{t:?}");
    check(&t, 2 * SECOND);
    assert_eq!(m.watch_list_support(), WatchListSupport::Try);
    let mut ev = InitialEvents::new(&[], Some(1));
    let failure = ev.line(&too_large_event()).expect_err("behind");
    let t: Transition<S> = m.step(
        Outcome::WatchListed(SyncCause::Start, Err(failure)),
        seen(0),
    );
    assert!(matches!(t.next, Step::Sync(SyncCause::Start)), "{t:?}");
    check(&t, 2 * SECOND);
    let t: Transition<S> = m.step(
        Outcome::Listed(
            SyncCause::Consistent,
            Err(ListError::Behind(behind(Some(1)))),
        ),
        seen(0),
    );
    assert!(matches!(t.next, Step::Sync(SyncCause::Consistent)), "{t:?}");
    check(&t, 2 * SECOND);

    // A state older than the cache's, from a watch-list or a list: not installed.
    let older = Read {
        resource_version: 8,
        endpoint: Some(1),
    };
    let mut several = Machine::new(WatchListSupport::Try, 2);
    let t = several.step(
        Outcome::WatchListed(SyncCause::Start, Ok((older, "stream"))),
        seen(10),
    );
    assert!(matches!(t.next, Step::Sync(SyncCause::Start)), "{t:?}");
    assert!(installs(&t).is_empty());
    check(&t, SECOND);
    let t: Transition<S> = several.step(Outcome::Listed(SyncCause::Start, Ok(older)), seen(10));
    assert!(matches!(t.next, Step::Sync(SyncCause::Start)), "{t:?}");
    assert!(installs(&t).is_empty());
    check(&t, SECOND);

    // None of it grew the backoff.
    let t = ended(&mut m, WatchEnd::Failed(upstream_down()), seen(30));
    assert_eq!(sleeps(&t)[0].base, Duration::from_millis(800));
}

#[test]
fn older_states_from_a_lone_upstream_three_times_in_a_row_mean_it_went_back() {
    let older = Read {
        resource_version: 8,
        endpoint: Some(0),
    };
    let went_back = |t: &Transition<S>| {
        t.actions.iter().any(|a| {
            matches!(
                a,
                Action::WentBack {
                    upstream: 8,
                    cache: 10,
                    ..
                }
            )
        })
    };
    let mut m = machine();
    for _ in 0..2 {
        let t: Transition<S> = m.step(Outcome::Listed(SyncCause::Start, Ok(older)), seen(10));
        assert!(!went_back(&t), "{t:?}");
    }
    // A state that is not older breaks the run.
    let t: Transition<S> = m.step(Outcome::Listed(SyncCause::Start, Ok(read(10))), seen(10));
    assert_eq!(installs(&t), [Via::List]);
    for _ in 0..2 {
        let t: Transition<S> = m.step(Outcome::Listed(SyncCause::Start, Ok(older)), seen(10));
        assert!(!went_back(&t), "{t:?}");
    }
    let t: Transition<S> = m.step(Outcome::Listed(SyncCause::Start, Ok(older)), seen(10));
    assert!(went_back(&t), "{t:?}");
    assert!(matches!(t.next, Step::Sync(_)));

    // Behind several endpoints, an older state is only a lagging one.
    let mut several = Machine::new(WatchListSupport::Try, 3);
    for _ in 0..5 {
        let t: Transition<S> = several.step(Outcome::Listed(SyncCause::Start, Ok(older)), seen(10));
        assert!(!went_back(&t), "{t:?}");
    }
}

// Other errors → exponential backoff, reset on success; our own pool full → ~1 s.

#[test]
fn failures_back_off_exponentially_and_success_resets_the_backoff() {
    let mut m = machine();
    let mut bases = Vec::new();
    for _ in 0..8 {
        let failure = watch_refused(RequestError::Status(StatusCode::INTERNAL_SERVER_ERROR));
        let t = ended(&mut m, failure, seen(5));
        assert!(matches!(t.next, Step::Verify(After::Rewatch)), "{t:?}");
        assert_eq!(counts(&t), [Counter::Errors]);
        let [d] = sleeps(&t)[..] else { panic!("{t:?}") };
        assert_eq!(d.jitter, (0.5, 1.5));
        bases.push(d.base.as_millis());
    }
    assert_eq!(bases, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
    // After the backoff, the same cluster: watch again from the store's resourceVersion.
    let t: Transition<S> = m.step(Outcome::Verified(After::Rewatch, true), seen(6));
    assert!(matches!(t.next, Step::Watch(6, WatchKind::Long)), "{t:?}");

    // A stream that broke, an ERROR event other than 410: the same.
    let broke = stream_broke(Failure::StreamBroke("reset".into()));
    let Ok(Effect::End(error)) = effect(&error_event(500, "InternalError", "boom")) else {
        panic!("an ERROR ends the watch")
    };
    for end in [broke, error] {
        assert!(matches!(end, WatchEnd::Failed(_)), "{end:?}");
        let t = ended(&mut m, end, seen(6));
        assert!(matches!(t.next, Step::Verify(After::Rewatch)), "{t:?}");
        assert_eq!(sleeps(&t)[0].base, Duration::from_secs(30));
    }

    // Each kind of success resets it.
    let successes: Vec<Outcome<S>> = vec![
        Outcome::WatchListed(SyncCause::Start, Ok((read(7), "s"))),
        Outcome::Listed(SyncCause::Start, Ok(read(7))),
        Outcome::Verified(After::Resume("closed".into()), true),
    ];
    for success in successes {
        for _ in 0..3 {
            ended(&mut m, WatchEnd::Failed(upstream_down()), seen(6));
        }
        m.step(success, seen(6));
        let t = ended(&mut m, WatchEnd::Failed(upstream_down()), seen(6));
        assert_eq!(sleeps(&t)[0].base, Duration::from_millis(800), "{t:?}");
    }
}

#[test]
fn our_own_pool_full_retries_after_a_second_without_growing_the_backoff() {
    let mut m = machine();
    for _ in 0..2 {
        ended(&mut m, WatchEnd::Failed(upstream_down()), seen(5));
    }
    for _ in 0..5 {
        let t = ended(&mut m, WatchEnd::Failed(pool_full()), seen(5));
        assert!(matches!(t.next, Step::Verify(After::Rewatch)), "{t:?}");
        assert_eq!(
            sleeps(&t),
            [Delay {
                base: POOL_FULL_RETRY,
                jitter: (0.5, 1.5)
            }]
        );
        let Action::Sleep(_, wait) = &t.actions[1] else {
            panic!("{t:?}")
        };
        assert!(!wait.upstreams_fault(), "logged as the gateway's own load");
        let t: Transition<S> = m.step(
            Outcome::Listed(SyncCause::Start, Err(ListError::Failed(pool_full()))),
            seen(5),
        );
        assert_eq!(sleeps(&t)[0].base, POOL_FULL_RETRY);
    }
    // The upstream's failures go on where they were: 0.8 s, 1.6 s, then 3.2 s.
    let t = ended(&mut m, WatchEnd::Failed(upstream_down()), seen(5));
    assert_eq!(sleeps(&t)[0].base, Duration::from_millis(3200));
    let Action::Sleep(_, wait) = &t.actions[1] else {
        panic!("{t:?}")
    };
    assert!(wait.upstreams_fault());
}

// Progress and consistent demands.

#[test]
fn a_resync_demand_syncs_for_a_consistent_read() {
    let t = ended(&mut machine(), WatchEnd::Resync, seen(5));
    assert!(matches!(t.next, Step::Sync(SyncCause::Consistent)), "{t:?}");
    assert!(sleeps(&t).is_empty());
}

#[test]
fn a_progress_demand_opens_a_short_watch_from_the_cache_resource_version() {
    let mut m = machine();
    let t = ended(&mut m, WatchEnd::Progress, seen(5));
    assert!(
        matches!(t.next, Step::Watch(5, WatchKind::Progress)),
        "{t:?}"
    );
    assert_eq!(counts(&t), [Counter::ProgressWatches]);

    // A progress watch awaits its bookmark; a demand still pending after it opens the
    // next one, a satisfied one does not.
    let mut f = Following {
        progress: true,
        bookmarked: false,
    };
    assert!(f.awaiting_bookmark());
    assert!(f.bookmark(false).is_none());
    assert!(!f.awaiting_bookmark());
    let mut f = Following {
        progress: true,
        bookmarked: false,
    };
    assert!(matches!(f.bookmark(true), Some(WatchEnd::Progress)));

    // Its end: another short watch if proof is still asked for, else an ordinary one.
    let end = f.ended(|| unreachable!("a progress watch has no reason"));
    assert!(matches!(end, WatchEnd::ProgressEnded));
    let t = ended(&mut m, end, pending(6));
    assert!(
        matches!(t.next, Step::Watch(6, WatchKind::Progress)),
        "{t:?}"
    );
    assert_eq!(counts(&t), [Counter::ProgressWatches]);
    let t = ended(&mut m, WatchEnd::ProgressEnded, seen(6));
    assert!(matches!(t.next, Step::Watch(6, WatchKind::Long)), "{t:?}");
    assert!(matches!(t.actions[..], [Action::ProgressEnded { rv: 6 }]));

    // An ordinary stream that ends while proof is asked for resumes with a short watch.
    let t: Transition<S> = m.step(
        Outcome::Verified(After::Resume("x".into()), true),
        pending(7),
    );
    assert!(
        matches!(t.next, Step::Watch(7, WatchKind::Progress)),
        "{t:?}"
    );
    assert_eq!(counts(&t), [Counter::ProgressWatches]);
}

// Identity changed → reset.

#[test]
fn every_resumption_checks_the_identity_and_another_cluster_starts_over() {
    let mut m = machine();
    let verify = [
        (WatchEnd::Closed("x".into()), After::Resume("x".into())),
        (WatchEnd::Expired("x".into()), After::Relist("x".into())),
        (WatchEnd::Failed(upstream_down()), After::Rewatch),
    ];
    for (end, expected) in verify {
        let t = ended(&mut m, end, seen(5));
        let Step::Verify(after) = t.next else {
            panic!("{t:?}")
        };
        assert_eq!(after, expected);
        let t: Transition<S> = m.step(Outcome::Verified(after, false), pending(5));
        assert!(matches!(t.next, Step::Sync(SyncCause::Start)), "{t:?}");
        assert!(t.actions.is_empty(), "{t:?}");
    }
}

// The byte budget.

#[test]
fn a_state_or_change_over_the_budget_drops_the_cache() {
    let why = OverBudget::Resource {
        needs: 10,
        limit: 5,
    };
    let outcomes: Vec<Outcome<S>> = vec![
        Outcome::InstallRefused(why),
        Outcome::WatchEnded(WatchEnd::OverBudget(why)),
        Outcome::WatchListed(SyncCause::Start, Err(WatchListFailure::OverBudget(why))),
        Outcome::Listed(SyncCause::Start, Err(ListError::OverBudget(why))),
        Outcome::Backfilled(7, Err(ListError::OverBudget(why))),
    ];
    for o in outcomes {
        let t = machine().step(o, seen(5));
        assert!(matches!(t.next, Step::Dropped(w) if w == why), "{t:?}");
    }
}

#[test]
fn backoff_jitter_stays_within_half_to_one_and_a_half() {
    let mut b = Backoff::default();
    let first = b.next_delay();
    assert!(first >= Duration::from_millis(400) && first <= Duration::from_millis(1200));
    for _ in 0..20 {
        let d = b.next_delay();
        assert!(d <= Duration::from_secs(45), "{d:?}");
    }
    b.reset();
    assert!(b.next_delay() <= Duration::from_millis(1200));
    let behind = Delay {
        base: SECOND,
        jitter: (1.0, 1.5),
    };
    for _ in 0..20 {
        let d = behind.jittered();
        assert!(d >= SECOND && d <= Duration::from_millis(1500), "{d:?}");
    }
}

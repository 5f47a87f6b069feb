//! The watch stream checkers' own tests (`support::watch_checker`): they must catch every
//! kind of divergence the watch tests rely on them to find (a gap, a duplicate, a
//! reordering, a bookmark ahead or behind, a different object) and accept the streams that
//! are right. Here once, rather than in every binary that compiles `support`.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use support::watch_checker::*;

fn s(kind: &str, rv: u64, key: &str) -> Sig {
    Sig::new(kind, rv, key, rv * 7)
}

fn log() -> Arc<Vec<Sig>> {
    Arc::new(vec![
        s("ADDED", 10, "ns/a"),
        s("MODIFIED", 12, "ns/a"),
        s("ADDED", 13, "ns/b"),
        s("DELETED", 15, "ns/a"),
    ])
}

fn run(events: &[Sig]) -> Vec<Violation> {
    let mut c = StreamChecker::new(log());
    for e in events {
        c.observe(e);
    }
    c.finish(true)
}

#[test]
fn the_exact_stream_passes_with_bookmarks_between_events() {
    let mut events: Vec<Sig> = log().to_vec();
    events.insert(2, Sig::new("BOOKMARK", 12, "", 0));
    assert_eq!(run(&events), vec![]);
}

#[test]
fn detects_a_gap() {
    let l = log();
    assert_eq!(
        run(&[l[0].clone(), l[2].clone(), l[3].clone()]),
        vec![Violation::Gap { missing: vec![12] }]
    );
    // A missing tail is a gap too when the stream should be complete…
    let mut c = StreamChecker::new(log());
    c.observe(&l[0]);
    assert_eq!(
        c.finish(true),
        vec![Violation::Gap {
            missing: vec![12, 13, 15]
        }]
    );
    // …but not for a stream that was ended early on purpose.
    assert_eq!(c.finish(false), vec![]);
}

#[test]
fn detects_a_duplicate() {
    let l = log();
    assert_eq!(
        run(&[
            l[0].clone(),
            l[1].clone(),
            l[1].clone(),
            l[2].clone(),
            l[3].clone()
        ]),
        vec![Violation::Duplicate { rv: 12 }]
    );
}

#[test]
fn detects_a_bookmark_ahead_of_unsent_events_or_behind_sent_ones() {
    let l = log();
    let bm = |rv| Sig::new("BOOKMARK", rv, "", 0);
    // Between events, at or beyond the last one sent: fine.
    assert_eq!(
        run(&[
            l[0].clone(),
            bm(11),
            l[1].clone(),
            l[2].clone(),
            l[3].clone(),
            bm(20)
        ]),
        vec![]
    );
    // Ahead of RV 12, which comes after it.
    let v = run(&[
        l[0].clone(),
        bm(12),
        l[1].clone(),
        l[2].clone(),
        l[3].clone(),
    ]);
    assert!(
        matches!(v[..], [Violation::Bookmark { rv: 12, .. }]),
        "{v:?}"
    );
    // Behind RV 13, already sent.
    let v = run(&[
        l[0].clone(),
        l[1].clone(),
        l[2].clone(),
        bm(12),
        l[3].clone(),
    ]);
    assert!(
        matches!(v[..], [Violation::Bookmark { rv: 12, .. }]),
        "{v:?}"
    );
}

#[test]
fn detects_a_reordering() {
    let l = log();
    assert_eq!(
        run(&[l[0].clone(), l[2].clone(), l[1].clone(), l[3].clone()]),
        vec![Violation::Reordered { rv: 12, after: 13 }]
    );
}

#[test]
fn detects_a_different_object_or_an_unknown_event() {
    let l = log();
    let mut changed = l[1].clone();
    changed.digest += 1;
    let v = run(&[l[0].clone(), changed.clone(), l[2].clone(), l[3].clone()]);
    assert_eq!(
        v,
        vec![Violation::Mismatch {
            expected: l[1].clone(),
            got: changed
        }]
    );
    let extra = s("ADDED", 14, "ns/c");
    let v = run(&[
        l[0].clone(),
        l[1].clone(),
        l[2].clone(),
        extra.clone(),
        l[3].clone(),
    ]);
    assert_eq!(v, vec![Violation::Unexpected { got: extra }]);
    let err = Sig::new("ERROR", 0, "", 0);
    assert!(matches!(run(&[err])[0], Violation::Error { .. }));
}

#[test]
fn parses_watch_event_lines() {
    let line = br#"{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"a","namespace":"ns","resourceVersion":"12"}}}"#;
    let sig = Sig::from_line(line).unwrap();
    assert_eq!(
        (sig.kind.as_str(), sig.rv, sig.key.as_str()),
        ("MODIFIED", 12, "ns/a")
    );
    let obj = br#"{"kind":"Pod","metadata":{"name":"a","namespace":"ns","resourceVersion":"12"}}"#;
    assert_eq!(Sig::from_parts("MODIFIED", obj), sig);
    assert!(Sig::from_line(b"{\"type\":\"ADDED\"}").is_err());
}

#[test]
fn state_checker_accepts_a_relist_diff_and_rebuilds_the_state() {
    let mut c = StateChecker::with_state([("ns/a".into(), 5), ("ns/b".into(), 6)], 6);
    // Before the outage: an ordinary update, and d created.
    assert_eq!(c.observe(&s("MODIFIED", 8, "ns/a")), None);
    assert_eq!(c.observe(&s("ADDED", 9, "ns/d")), None);
    // The relist at RV 20: c was created, a updated twice (one MODIFIED), b deleted
    // (DELETED carries the list RV), and d too.
    assert_eq!(c.observe(&s("ADDED", 11, "ns/c")), None);
    assert_eq!(c.observe(&s("MODIFIED", 14, "ns/a")), None);
    assert_eq!(c.observe(&s("DELETED", 20, "ns/b")), None);
    assert_eq!(c.observe(&s("DELETED", 20, "ns/d")), None);
    // A change made at exactly the list's RV comes after the deletions.
    assert_eq!(c.observe(&s("ADDED", 20, "ns/e")), None);
    let want: BTreeMap<String, u64> = [
        ("ns/a".into(), 14),
        ("ns/c".into(), 11),
        ("ns/e".into(), 20),
    ]
    .into();
    assert_eq!(c.diff(&want), None);
    assert!(c.violations().is_empty());
}

#[test]
fn state_checker_detects_gaps_duplicates_and_reordering() {
    let base = || StateChecker::with_state([("ns/a".into(), 5)], 5);
    // Reordering.
    let mut c = base();
    c.observe(&s("MODIFIED", 9, "ns/a"));
    assert_eq!(
        c.observe(&s("ADDED", 7, "ns/b")),
        Some(Violation::Reordered { rv: 7, after: 9 })
    );
    // Duplicate.
    let mut c = base();
    c.observe(&s("MODIFIED", 9, "ns/a"));
    assert_eq!(
        c.observe(&s("MODIFIED", 9, "ns/a")),
        Some(Violation::Duplicate { rv: 9 })
    );
    // A gap shows as an impossible transition (the ADDED of b was lost)…
    let mut c = base();
    assert!(matches!(
        c.observe(&s("MODIFIED", 9, "ns/b")),
        Some(Violation::Invalid { .. })
    ));
    // …or as a final state that differs from the simulator's.
    let mut c = base();
    c.observe(&s("ADDED", 9, "ns/b"));
    let want: BTreeMap<String, u64> = [("ns/a".into(), 11), ("ns/b".into(), 9)].into();
    assert_eq!(
        c.diff(&want).unwrap(),
        "1 difference(s): ns/a: have RV 5, want 11"
    );
}

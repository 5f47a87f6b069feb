//! Stream correctness: every watcher's events are checked against the writer's log.
//!
//! The writer knows every resourceVersion it produced (the RV of each write's response) and
//! which objects it wrote. A watcher records, per event on one of the writer's objects,
//! whether its RV went backwards (reordering), repeated (duplicate), and folds the RVs it
//! received into an order-independent fingerprint. At the end of the run the expected
//! fingerprint is computed from the writer's log over the spans the watcher claims to have
//! covered without a gap (from the RV it started at to the end, split where it had to
//! relist after a 410). Equal counts and fingerprints of a strictly increasing sequence
//! mean the same set, so a missing event shows up as a gap. Keeping a fingerprint instead
//! of every RV keeps 10,000 watchers × thousands of events in a few hundred KiB.

use std::collections::BTreeMap;
use std::fmt;

/// One write as the writer saw it: its RV, the object and what a watcher must see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRecord {
    pub rv: u64,
    /// Index of the object in the writer's pool (selects shard and node).
    pub object: usize,
    pub event: EventType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn parse(s: &[u8]) -> Option<Self> {
        match s {
            b"ADDED" => Some(Self::Added),
            b"MODIFIED" => Some(Self::Modified),
            b"DELETED" => Some(Self::Deleted),
            _ => None,
        }
    }
    fn tag(self) -> u64 {
        match self {
            Self::Added => 1,
            Self::Modified => 2,
            Self::Deleted => 3,
        }
    }
}

/// The writer's log, ordered by RV (writes complete out of order when several are in
/// flight; the store's RV order is what watchers must see).
#[derive(Debug, Default, Clone)]
pub struct WriterLog {
    by_rv: BTreeMap<u64, WriteRecord>,
}

impl WriterLog {
    pub fn insert(&mut self, rec: WriteRecord) {
        self.by_rv.insert(rec.rv, rec);
    }
    pub fn len(&self) -> usize {
        self.by_rv.len()
    }
    pub fn is_empty(&self) -> bool {
        self.by_rv.is_empty()
    }
    pub fn last_rv(&self) -> Option<u64> {
        self.by_rv.keys().next_back().copied()
    }
    pub fn get(&self, rv: u64) -> Option<&WriteRecord> {
        self.by_rv.get(&rv)
    }
    /// The records in (after, upto] (upto = None: to the end).
    pub fn range(&self, after: u64, upto: Option<u64>) -> impl Iterator<Item = &WriteRecord> {
        let hi = upto.unwrap_or(u64::MAX);
        // An empty span (upto == after: a watcher that left or relisted before any event)
        // is an empty range, not a BTreeMap range whose start passes its end (a panic).
        let lo = after.saturating_add(1);
        (lo <= hi)
            .then(|| self.by_rv.range(lo..=hi))
            .into_iter()
            .flatten()
            .map(|(_, r)| r)
    }
}

impl WriterLog {
    /// The writes no watcher can receive one by one because an upstream relist skipped
    /// them: within each window (`asked`, `current`] — a watch from `asked` answered with
    /// 410 while the store was at `current`, after which the gateway's reflector relists
    /// and delivers the difference between its old and new state (docs/watch.md, "Upstream
    /// relists") — every write to an object that a later write to the same object in the
    /// same window supersedes. Only the last write of each object in the window is
    /// delivered, as kube-apiserver never delivers versions etcd compacted away. A window
    /// asked from 0 (a watch-list) covers nothing: the reflector's state is not from 0.
    pub fn superseded_in(&self, windows: &[(u64, u64)]) -> std::collections::BTreeSet<u64> {
        let mut out = std::collections::BTreeSet::new();
        for &(asked, current) in windows {
            if asked == 0 || current <= asked {
                continue;
            }
            let mut last = std::collections::HashMap::new();
            for r in self.range(asked, Some(current)) {
                last.insert(r.object, r.rv);
            }
            out.extend(
                self.range(asked, Some(current))
                    .filter(|r| last[&r.object] != r.rv)
                    .map(|r| r.rv),
            );
        }
        out
    }

    /// This log without the writes at `rvs`.
    pub fn without(&self, rvs: &std::collections::BTreeSet<u64>) -> Self {
        Self {
            by_rv: self
                .by_rv
                .iter()
                .filter(|(rv, _)| !rvs.contains(rv))
                .map(|(rv, r)| (*rv, r.clone()))
                .collect(),
        }
    }
}

/// A mixing function so that the sum of hashes is a good set fingerprint.
fn mix(rv: u64, ev: EventType) -> u64 {
    // splitmix64 finaliser.
    let mut z = rv
        .wrapping_mul(4)
        .wrapping_add(ev.tag())
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A violation found in one watcher's stream.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Violation {
    /// The same RV arrived twice in a row (or again after it was passed).
    Duplicate { watcher: usize, rv: u64 },
    /// An RV lower than one already received.
    Reordered { watcher: usize, rv: u64, after: u64 },
    /// Events the writer produced in a span the watcher covered never arrived (or other
    /// events arrived in their place).
    Gap {
        watcher: usize,
        expected: u64,
        received: u64,
        first_missing: Option<u64>,
    },
    /// Everything the watcher received is correct, but the writer's last events had not
    /// arrived when the drain timeout ended the run: the target (or this machine) could
    /// not keep up. Still a failure: the run cannot vouch for events it never saw.
    Undelivered {
        watcher: usize,
        missing: u64,
        last_rv: u64,
    },
    /// An event whose RV the writer never produced, or with the wrong type.
    Unexpected {
        watcher: usize,
        rv: u64,
        detail: String,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Duplicate { watcher, rv } => {
                write!(f, "watcher {watcher}: duplicate event at RV {rv}")
            }
            Violation::Reordered { watcher, rv, after } => {
                write!(f, "watcher {watcher}: RV {rv} arrived after RV {after}")
            }
            Violation::Gap {
                watcher,
                expected,
                received,
                first_missing,
            } => {
                write!(
                    f,
                    "watcher {watcher}: gap: expected {expected} events, received {received}"
                )?;
                if let Some(rv) = first_missing {
                    write!(f, " (first missing RV {rv})")?;
                }
                Ok(())
            }
            Violation::Undelivered {
                watcher,
                missing,
                last_rv,
            } => write!(
                f,
                "watcher {watcher}: {missing} events after RV {last_rv} not delivered before \
                 the drain timeout (no gap before them)"
            ),
            Violation::Unexpected {
                watcher,
                rv,
                detail,
            } => write!(
                f,
                "watcher {watcher}: unexpected event at RV {rv}: {detail}"
            ),
        }
    }
}

/// A span of the writer's log the watcher claims to have seen completely: (after, upto].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    after: u64,
    upto: Option<u64>,
    count: u64,
    fingerprint: u64,
}

/// The per-watcher checker state (cheap: a few words plus a small sample of RVs).
#[derive(Debug, Clone)]
pub struct StreamCheck {
    watcher: usize,
    last_rv: u64,
    spans: Vec<Span>,
    /// Online violations (duplicates and reorderings), capped so that a badly broken
    /// stream cannot eat memory.
    violations: Vec<Violation>,
    dropped_violations: u64,
    /// The RVs received, kept only while few (for naming the first missing RV).
    sample: Vec<(u64, EventType)>,
}

const MAX_VIOLATIONS: usize = 16;
const MAX_SAMPLE: usize = 4096;

impl StreamCheck {
    /// A watcher that starts at `start_rv` (it must then see every write after it).
    pub fn new(watcher: usize, start_rv: u64) -> Self {
        Self {
            watcher,
            last_rv: start_rv,
            spans: vec![Span {
                after: start_rv,
                upto: None,
                count: 0,
                fingerprint: 0,
            }],
            violations: Vec::new(),
            dropped_violations: 0,
            sample: Vec::new(),
        }
    }

    pub fn last_rv(&self) -> u64 {
        self.last_rv
    }

    fn violate(&mut self, v: Violation) {
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(v);
        } else {
            self.dropped_violations += 1;
        }
    }

    /// An event on one of the writer's objects.
    pub fn observe(&mut self, rv: u64, ev: EventType) {
        if rv == self.last_rv {
            self.violate(Violation::Duplicate {
                watcher: self.watcher,
                rv,
            });
            return;
        }
        if rv < self.last_rv {
            let after = self.last_rv;
            self.violate(Violation::Reordered {
                watcher: self.watcher,
                rv,
                after,
            });
            return;
        }
        self.last_rv = rv;
        let span = self.spans.last_mut().expect("always one span");
        span.count += 1;
        span.fingerprint = span.fingerprint.wrapping_add(mix(rv, ev));
        if self.sample.len() < MAX_SAMPLE {
            self.sample.push((rv, ev));
        }
    }

    /// A bookmark (or any RV the watcher may resume from without having missed anything).
    pub fn progress(&mut self, rv: u64) {
        if rv > self.last_rv {
            self.last_rv = rv;
        }
    }

    /// The watcher lost continuity (410) and relisted at `list_rv`: the current span ends
    /// at the last RV it had, a new one starts at the list's RV.
    pub fn relisted(&mut self, list_rv: u64) {
        let last = self.last_rv;
        if let Some(span) = self.spans.last_mut() {
            span.upto = Some(last);
        }
        self.last_rv = list_rv.max(last);
        self.spans.push(Span {
            after: list_rv,
            upto: None,
            count: 0,
            fingerprint: 0,
        });
        // The sample only names missing RVs of a single-span stream.
        self.sample = Vec::new();
    }

    /// The watcher left on its own (a client that disconnects for good): what it covered
    /// ends at the last RV it had, so the writes after it are not expected.
    pub fn close(&mut self) {
        let last = self.last_rv;
        if let Some(span) = self.spans.last_mut() {
            span.upto.get_or_insert(last);
        }
    }

    /// Compares what arrived with the writer's log; `wants` says which of the writer's
    /// objects this watcher's selector matches.
    pub fn verify(&self, log: &WriterLog, wants: impl Fn(&WriteRecord) -> bool) -> Vec<Violation> {
        let mut out = self.violations.clone();
        let single_span = self.spans.len() == 1;
        for span in &self.spans {
            let mut count = 0u64;
            let mut fp = 0u64;
            let mut first_missing = None;
            let mut sample = self.sample.iter().peekable();
            for rec in log.range(span.after, span.upto).filter(|r| wants(r)) {
                count += 1;
                fp = fp.wrapping_add(mix(rec.rv, rec.event));
                if single_span && first_missing.is_none() {
                    match sample.peek() {
                        Some(&&(rv, _)) if rv == rec.rv => {
                            sample.next();
                        }
                        Some(_) => first_missing = Some(rec.rv),
                        None if self.sample.len() < MAX_SAMPLE => first_missing = Some(rec.rv),
                        None => {}
                    }
                }
            }
            if count != span.count || fp != span.fingerprint {
                // Only the tail missing (what arrived is exactly the span up to the last RV
                // received): the stream was behind, not broken.
                let upto = span.upto.unwrap_or(self.last_rv).min(self.last_rv);
                let (mut c2, mut fp2) = (0u64, 0u64);
                for rec in log.range(span.after, Some(upto)).filter(|r| wants(r)) {
                    c2 += 1;
                    fp2 = fp2.wrapping_add(mix(rec.rv, rec.event));
                }
                if span.upto.is_none() && c2 == span.count && fp2 == span.fingerprint {
                    out.push(Violation::Undelivered {
                        watcher: self.watcher,
                        missing: count - c2,
                        last_rv: self.last_rv,
                    });
                    continue;
                }
                // Same count, different set: something arrived that the writer never wrote
                // (or with the wrong type), in place of something that did not arrive.
                if single_span {
                    for &(rv, ev) in &self.sample {
                        match log.get(rv) {
                            None => out.push(Violation::Unexpected {
                                watcher: self.watcher,
                                rv,
                                detail: "the writer produced no such RV".into(),
                            }),
                            Some(rec) if rec.event != ev => out.push(Violation::Unexpected {
                                watcher: self.watcher,
                                rv,
                                detail: format!("type {ev:?}, the write was {:?}", rec.event),
                            }),
                            Some(rec) if !wants(rec) => out.push(Violation::Unexpected {
                                watcher: self.watcher,
                                rv,
                                detail: "the object does not match the watch's selector".into(),
                            }),
                            _ => {}
                        }
                        if out.len() > MAX_VIOLATIONS {
                            break;
                        }
                    }
                }
                out.push(Violation::Gap {
                    watcher: self.watcher,
                    expected: count,
                    received: span.count,
                    first_missing,
                });
            }
        }
        out
    }

    /// Violations beyond the cap (counted, not kept).
    pub fn dropped_violations(&self) -> u64 {
        self.dropped_violations
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(rvs: &[u64]) -> WriterLog {
        let mut l = WriterLog::default();
        for (i, &rv) in rvs.iter().enumerate() {
            l.insert(WriteRecord {
                rv,
                object: i % 3,
                event: EventType::Modified,
            });
        }
        l
    }

    fn run(start: u64, stream: &[u64], l: &WriterLog) -> Vec<Violation> {
        let mut c = StreamCheck::new(7, start);
        for &rv in stream {
            c.observe(rv, EventType::Modified);
        }
        c.verify(l, |_| true)
    }

    #[test]
    fn a_complete_stream_passes() {
        let l = log(&[11, 12, 15, 20]);
        assert_eq!(run(10, &[11, 12, 15, 20], &l), vec![]);
        // Starting later: only what came after the start is expected.
        assert_eq!(run(12, &[15, 20], &l), vec![]);
    }

    #[test]
    fn a_gap_fails() {
        let l = log(&[11, 12, 15, 20]);
        let v = run(10, &[11, 15, 20], &l);
        assert_eq!(
            v,
            vec![Violation::Gap {
                watcher: 7,
                expected: 4,
                received: 3,
                first_missing: Some(12)
            }]
        );
        // A missing tail (nothing wrong before it) is reported as undelivered: still a
        // failure, named for what it is.
        let v = run(10, &[11, 12, 15], &l);
        assert_eq!(
            v,
            vec![Violation::Undelivered {
                watcher: 7,
                missing: 1,
                last_rv: 15
            }]
        );
    }

    #[test]
    fn a_duplicate_fails() {
        let l = log(&[11, 12, 15]);
        let v = run(10, &[11, 12, 12, 15], &l);
        assert_eq!(v, vec![Violation::Duplicate { watcher: 7, rv: 12 }]);
        // A duplicate of an older event reads as going backwards.
        let v = run(10, &[11, 12, 11, 15], &l);
        assert_eq!(
            v,
            vec![Violation::Reordered {
                watcher: 7,
                rv: 11,
                after: 12
            }]
        );
    }

    #[test]
    fn a_reordering_fails() {
        let l = log(&[11, 12, 15]);
        let v = run(10, &[12, 11, 15], &l);
        // The late event is refused (it went backwards), so the span also lacks it.
        assert_eq!(
            v,
            vec![
                Violation::Reordered {
                    watcher: 7,
                    rv: 11,
                    after: 12
                },
                Violation::Gap {
                    watcher: 7,
                    expected: 3,
                    received: 2,
                    first_missing: Some(11)
                }
            ]
        );
    }

    #[test]
    fn an_event_the_writer_never_made_fails() {
        let l = log(&[11, 12, 15]);
        let v = run(10, &[11, 13, 15], &l);
        assert!(v.contains(&Violation::Unexpected {
            watcher: 7,
            rv: 13,
            detail: "the writer produced no such RV".into()
        }));
        assert!(
            v.iter().any(|x| matches!(x, Violation::Gap { .. })),
            "{v:?}"
        );
    }

    #[test]
    fn a_wrong_type_fails() {
        let l = log(&[11, 12]);
        let mut c = StreamCheck::new(1, 10);
        c.observe(11, EventType::Modified);
        c.observe(12, EventType::Added);
        let v = c.verify(&l, |_| true);
        assert!(
            v.iter()
                .any(|x| matches!(x, Violation::Unexpected { rv: 12, .. })),
            "{v:?}"
        );
    }

    #[test]
    fn selectors_narrow_what_is_expected() {
        let l = log(&[11, 12, 13, 14, 15, 16]); // objects 0,1,2,0,1,2
        let mut c = StreamCheck::new(1, 10);
        c.observe(11, EventType::Modified);
        c.observe(14, EventType::Modified);
        assert_eq!(c.verify(&l, |r| r.object == 0), vec![]);
        assert!(!c.verify(&l, |r| r.object != 2).is_empty());
    }

    #[test]
    fn a_relist_splits_the_spans() {
        let l = log(&[11, 12, 13, 14, 15]);
        let mut c = StreamCheck::new(1, 10);
        c.observe(11, EventType::Modified);
        // 410; the relist is at 13 (12 and 13 are in the list, not in the stream).
        c.relisted(13);
        c.observe(14, EventType::Modified);
        c.observe(15, EventType::Modified);
        assert_eq!(c.verify(&l, |_| true), vec![]);
        // Missing 14 after the relist (15 arrived) is a gap; missing only 15 is
        // undelivered.
        let mut c = StreamCheck::new(1, 10);
        c.observe(11, EventType::Modified);
        c.relisted(13);
        c.observe(15, EventType::Modified);
        assert!(matches!(
            c.verify(&l, |_| true)[..],
            [Violation::Gap {
                expected: 2,
                received: 1,
                ..
            }]
        ));
        let mut c = StreamCheck::new(1, 10);
        c.observe(11, EventType::Modified);
        c.relisted(13);
        c.observe(14, EventType::Modified);
        assert!(matches!(
            c.verify(&l, |_| true)[..],
            [Violation::Undelivered { missing: 1, .. }]
        ));
    }

    #[test]
    fn a_watcher_that_left_is_checked_up_to_where_it_left() {
        let l = log(&[11, 12, 15, 20]);
        let mut c = StreamCheck::new(1, 10);
        c.observe(11, EventType::Modified);
        c.observe(12, EventType::Modified);
        c.close();
        assert_eq!(c.verify(&l, |_| true), vec![]);
        // What it received before it left is still checked: 12 missing is a gap.
        let mut c = StreamCheck::new(1, 10);
        c.observe(11, EventType::Modified);
        c.observe(15, EventType::Modified);
        c.close();
        assert!(matches!(
            c.verify(&l, |_| true)[..],
            [Violation::Gap {
                expected: 3,
                received: 2,
                first_missing: Some(12),
                ..
            }]
        ));
    }

    #[test]
    fn an_empty_span_is_an_empty_range() {
        let l = log(&[11, 12]);
        assert_eq!(l.range(11, Some(11)).count(), 0);
        assert_eq!(l.range(12, Some(11)).count(), 0);
        assert_eq!(l.range(u64::MAX, None).count(), 0);
        assert_eq!(l.range(10, Some(11)).count(), 1);
        // A watcher that left before it received anything expects nothing.
        let mut c = StreamCheck::new(1, 11);
        c.close();
        assert_eq!(c.verify(&l, |_| true), vec![]);
    }

    #[test]
    fn a_relist_window_supersedes_all_but_each_objects_last_write() {
        let mut l = WriterLog::default();
        // Objects 0, 1, 0, 2, 1 at RVs 11..15, then object 0 again at 16.
        for (rv, object) in [(11, 0), (12, 1), (13, 0), (14, 2), (15, 1), (16, 0)] {
            l.insert(WriteRecord {
                rv,
                object,
                event: EventType::Modified,
            });
        }
        // A 410 for a watch from 10 with the store at 15: 11 (by 13) and 12 (by 15) are
        // superseded; 16 is after the window, so 13 stays.
        let s = l.superseded_in(&[(10, 15)]);
        assert_eq!(s.into_iter().collect::<Vec<_>>(), vec![11, 12]);
        // A watch-list's 410 (asked from 0) and an empty window cover nothing.
        assert!(l.superseded_in(&[(0, 15), (15, 15)]).is_empty());
        let kept = l.without(&l.superseded_in(&[(10, 15)]));
        assert_eq!(
            kept.range(0, None).map(|r| r.rv).collect::<Vec<_>>(),
            vec![13, 14, 15, 16]
        );
    }

    #[test]
    fn bookmarks_move_the_resume_point_only() {
        let l = log(&[11, 20]);
        let mut c = StreamCheck::new(1, 10);
        c.observe(11, EventType::Modified);
        c.progress(15);
        assert_eq!(c.last_rv(), 15);
        c.observe(20, EventType::Modified);
        assert_eq!(c.verify(&l, |_| true), vec![]);
    }
}

//! Checks a watcher's event stream against a reference (the simulator's event log, or a
//! direct watch on the simulator): every expected event exactly once, in resourceVersion
//! order, with no gap, duplicate or reordering, and with the same object.
//!
//! Two checkers:
//! - [`StreamChecker`] (strict): the stream must be exactly the reference sequence. Used
//!   wherever the upstream's history is complete (fan-out, a dropped upstream watch that
//!   resumes, slow watchers catching up).
//! - [`StateChecker`] (state-continuity): after an upstream 410 the gateway relists and
//!   delivers the *difference* between its old and new state as ordinary events, so the
//!   stream cannot equal the upstream's log (two updates during the outage become one
//!   MODIFIED, a DELETED carries the list's resourceVersion). What must hold instead: RVs
//!   never go backwards, every event is a valid transition of the state rebuilt so far
//!   (ADDED for an absent object, MODIFIED/DELETED for a present one, never the same
//!   version twice), and the rebuilt state ends equal to the simulator's.
//!
//! Both also check BOOKMARKs: never behind an event already sent, and (strict checker)
//! never ahead of an event not sent yet, since a client resumes from a bookmark's RV.
//!
//! Events are reduced to a small [`Sig`] (type, RV, key, digest of the object's bytes) so
//! that a thousand watchers can be checked without keeping their objects.
//!
//! The checkers' own tests are `tests/watch_checker.rs`, one binary, not a `mod tests`
//! here that every binary compiling `support` would run again.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::hash::{Hash, Hasher};

use serde::Deserialize;
use serde_json::value::RawValue;

/// One event, reduced to what the checks compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sig {
    /// ADDED, MODIFIED, DELETED, BOOKMARK or ERROR.
    pub kind: String,
    /// The object's `metadata.resourceVersion` (the event's RV).
    pub rv: u64,
    /// `namespace/name` (or `name`).
    pub key: String,
    /// A digest of the object's JSON bytes.
    pub digest: u64,
}

impl fmt::Display for Sig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}@{}", self.kind, self.key, self.rv)
    }
}

#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    object: &'a RawValue,
}

#[derive(Deserialize)]
struct WireObject {
    #[serde(default)]
    metadata: WireMeta,
}

#[derive(Deserialize, Default)]
struct WireMeta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
}

/// The digest the checks compare objects by (the bytes as sent: watchgate passes the
/// upstream's encoding through, so the bytes must match the simulator's).
pub fn digest(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

pub fn key_of(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

impl Sig {
    pub fn new(kind: &str, rv: u64, key: &str, digest: u64) -> Self {
        Self {
            kind: kind.to_string(),
            rv,
            key: key.to_string(),
            digest,
        }
    }

    /// Parses one watch event line (`{"type":…,"object":…}`, newline optional).
    pub fn from_line(line: &[u8]) -> Result<Self, String> {
        let ev: WireEvent<'_> = serde_json::from_slice(line)
            .map_err(|e| format!("not a watch event ({e}): {}", excerpt(line)))?;
        let raw = ev.object.get().as_bytes();
        let obj: WireObject = serde_json::from_slice(raw)
            .map_err(|e| format!("event object is not an object ({e}): {}", excerpt(line)))?;
        let rv = if ev.kind == "ERROR" {
            0
        } else {
            obj.metadata
                .resource_version
                .parse()
                .map_err(|_| format!("event without a numeric RV: {}", excerpt(line)))?
        };
        Ok(Self {
            kind: ev.kind.to_string(),
            rv,
            key: key_of(&obj.metadata.namespace, &obj.metadata.name),
            digest: digest(raw),
        })
    }

    /// The signature of an event whose object is already encoded (the simulator's log).
    pub fn from_parts(kind: &str, object_json: &[u8]) -> Self {
        let obj: WireObject = serde_json::from_slice(object_json).expect("object JSON");
        Self {
            kind: kind.to_string(),
            rv: obj.metadata.resource_version.parse().expect("numeric RV"),
            key: key_of(&obj.metadata.namespace, &obj.metadata.name),
            digest: digest(object_json),
        }
    }

    /// Events that carry a change (not BOOKMARK).
    pub fn is_change(&self) -> bool {
        matches!(self.kind.as_str(), "ADDED" | "MODIFIED" | "DELETED")
    }
}

fn excerpt(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(300)]);
    s.into_owned()
}

/// What went wrong with a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Expected events that never arrived (reported at [`StreamChecker::finish`]).
    Gap { missing: Vec<u64> },
    /// The same event arrived twice.
    Duplicate { rv: u64 },
    /// An event arrived after one with a larger RV.
    Reordered { rv: u64, after: u64 },
    /// The event at this RV differs from the reference (type, object key or bytes).
    Mismatch { expected: Sig, got: Sig },
    /// An event the reference does not have at all.
    Unexpected { got: Sig },
    /// An ERROR event (the stream must not carry one here).
    Error { line: String },
    /// An invalid transition for the state rebuilt so far (state checker).
    Invalid { got: Sig, why: String },
    /// A BOOKMARK whose RV is behind an event already sent, or ahead of an event not
    /// sent yet (a client resuming from it would miss that event).
    Bookmark { rv: u64, why: String },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Gap { missing } => {
                let shown: Vec<_> = missing.iter().take(10).collect();
                write!(
                    f,
                    "gap: {} expected event(s) never arrived, RVs {shown:?}{}",
                    missing.len(),
                    if missing.len() > 10 { " …" } else { "" }
                )
            }
            Violation::Duplicate { rv } => {
                write!(f, "duplicate: the event at RV {rv} arrived twice")
            }
            Violation::Reordered { rv, after } => {
                write!(
                    f,
                    "reordered: the event at RV {rv} arrived after RV {after}"
                )
            }
            Violation::Mismatch { expected, got } => {
                write!(
                    f,
                    "mismatch at RV {}: expected {expected}, got {got}",
                    expected.rv
                )?;
                if expected.digest != got.digest {
                    write!(f, " (object bytes differ)")?;
                }
                Ok(())
            }
            Violation::Unexpected { got } => {
                write!(f, "unexpected event {got} (not in the reference)")
            }
            Violation::Error { line } => write!(f, "ERROR event: {line}"),
            Violation::Invalid { got, why } => write!(f, "invalid transition {got}: {why}"),
            Violation::Bookmark { rv, why } => write!(f, "BOOKMARK at RV {rv}: {why}"),
        }
    }
}

/// The strict checker: the stream must be exactly `expected` (changes only; bookmarks are
/// skipped).
pub struct StreamChecker {
    expected: std::sync::Arc<Vec<Sig>>,
    /// Index of the next expected event.
    pos: usize,
    /// Largest RV observed so far.
    last_rv: u64,
    /// RVs observed (to tell a duplicate from a reordering).
    seen: HashSet<u64>,
    /// Expected RVs jumped over; a gap unless they show up later (then: reordered).
    skipped: BTreeSet<u64>,
    violations: Vec<Violation>,
    observed: usize,
    bookmarks: usize,
}

impl StreamChecker {
    /// `expected` must be sorted by RV (a log is).
    pub fn new(expected: std::sync::Arc<Vec<Sig>>) -> Self {
        debug_assert!(expected.windows(2).all(|w| w[0].rv < w[1].rv));
        Self {
            expected,
            pos: 0,
            last_rv: 0,
            seen: HashSet::new(),
            skipped: BTreeSet::new(),
            violations: Vec::new(),
            observed: 0,
            bookmarks: 0,
        }
    }

    fn index_of(&self, rv: u64) -> Option<usize> {
        self.expected.binary_search_by_key(&rv, |s| s.rv).ok()
    }

    /// Feeds one event; returns the violation it caused, if any (also recorded).
    pub fn observe(&mut self, got: &Sig) -> Option<Violation> {
        let v = self.judge(got);
        if let Some(v) = &v {
            self.violations.push(v.clone());
        }
        v
    }

    fn judge(&mut self, got: &Sig) -> Option<Violation> {
        match got.kind.as_str() {
            "BOOKMARK" => return self.judge_bookmark(got.rv),
            "ERROR" => {
                return Some(Violation::Error {
                    line: got.to_string(),
                })
            }
            _ => {}
        }
        self.observed += 1;
        let rv = got.rv;
        let first_time = self.seen.insert(rv);
        if rv <= self.last_rv {
            if !first_time {
                return Some(Violation::Duplicate { rv });
            }
            if self.skipped.remove(&rv) {
                return Some(Violation::Reordered {
                    rv,
                    after: self.last_rv,
                });
            }
            return Some(match self.index_of(rv) {
                Some(_) => Violation::Reordered {
                    rv,
                    after: self.last_rv,
                },
                None => Violation::Unexpected { got: got.clone() },
            });
        }
        self.last_rv = rv;
        let Some(i) = self.index_of(rv) else {
            return Some(Violation::Unexpected { got: got.clone() });
        };
        for s in &self.expected[self.pos..i] {
            self.skipped.insert(s.rv);
        }
        self.pos = i + 1;
        let want = &self.expected[i];
        if want != got {
            return Some(Violation::Mismatch {
                expected: want.clone(),
                got: got.clone(),
            });
        }
        None
    }

    /// A bookmark promises that every event up to its RV has been sent.
    fn judge_bookmark(&mut self, rv: u64) -> Option<Violation> {
        if rv < self.last_rv {
            return Some(Violation::Bookmark {
                rv,
                why: format!("behind RV {} already sent", self.last_rv),
            });
        }
        if let Some(next) = self.expected.get(self.pos).filter(|n| n.rv <= rv) {
            return Some(Violation::Bookmark {
                rv,
                why: format!("ahead of {next}, not sent yet"),
            });
        }
        self.bookmarks += 1;
        None
    }

    /// Bookmarks seen (and found consistent).
    pub fn bookmarks(&self) -> usize {
        self.bookmarks
    }

    /// Whether every expected event has been passed (delivered or skipped).
    pub fn reached_end(&self) -> bool {
        self.pos >= self.expected.len()
    }

    /// Change events observed so far.
    pub fn observed(&self) -> usize {
        self.observed
    }

    /// Largest RV observed.
    pub fn last_rv(&self) -> u64 {
        self.last_rv
    }

    /// Every violation, including the gap of expected events that never arrived. With
    /// `complete = false` the stream may legitimately stop early (a stream that was ended):
    /// only skipped events count as a gap, not the missing tail.
    pub fn finish(&self, complete: bool) -> Vec<Violation> {
        let mut out = self.violations.clone();
        let mut missing: Vec<u64> = self.skipped.iter().copied().collect();
        if complete {
            missing.extend(self.expected[self.pos..].iter().map(|s| s.rv));
        }
        if !missing.is_empty() {
            missing.sort_unstable();
            out.push(Violation::Gap { missing });
        }
        out
    }
}

/// The state-continuity checker (see the module docs).
#[derive(Default)]
pub struct StateChecker {
    /// key → (RV, digest) of the object as the stream describes it.
    state: BTreeMap<String, (u64, u64)>,
    last_rv: u64,
    /// Keys that had an event at `last_rv`: a relist's deletions all carry the list's RV,
    /// and a change made at exactly that RV comes with them, so several events may share
    /// one RV, but never two for the same object.
    keys_at_last: HashSet<String>,
    violations: Vec<Violation>,
    events: usize,
}

impl StateChecker {
    /// Starts from a known state (key → RV), e.g. the simulator's state at the watch's
    /// starting RV.
    pub fn with_state(initial: impl IntoIterator<Item = (String, u64)>, from_rv: u64) -> Self {
        Self {
            state: initial.into_iter().map(|(k, rv)| (k, (rv, 0))).collect(),
            last_rv: from_rv,
            ..Self::default()
        }
    }

    pub fn observe(&mut self, got: &Sig) -> Option<Violation> {
        let v = self.judge(got);
        if let Some(v) = &v {
            self.violations.push(v.clone());
        }
        v
    }

    fn judge(&mut self, got: &Sig) -> Option<Violation> {
        match got.kind.as_str() {
            "BOOKMARK" if got.rv < self.last_rv => {
                return Some(Violation::Bookmark {
                    rv: got.rv,
                    why: format!("behind RV {} already sent", self.last_rv),
                })
            }
            "BOOKMARK" => return None,
            "ERROR" => {
                return Some(Violation::Error {
                    line: got.to_string(),
                })
            }
            _ => {}
        }
        self.events += 1;
        let invalid = |why: String| Violation::Invalid {
            got: got.clone(),
            why,
        };
        if got.rv < self.last_rv {
            return Some(Violation::Reordered {
                rv: got.rv,
                after: self.last_rv,
            });
        }
        if got.rv == self.last_rv {
            if self.keys_at_last.contains(&got.key) {
                return Some(Violation::Duplicate { rv: got.rv });
            }
        } else {
            self.keys_at_last.clear();
        }
        self.keys_at_last.insert(got.key.clone());
        self.last_rv = got.rv;
        let cur = self.state.get(&got.key).copied();
        match (got.kind.as_str(), cur) {
            ("ADDED", None) => {
                self.state.insert(got.key.clone(), (got.rv, got.digest));
            }
            ("ADDED", Some((rv, _))) => {
                return Some(invalid(format!("ADDED for an object present at RV {rv}")))
            }
            ("MODIFIED", Some((rv, _))) if rv < got.rv => {
                self.state.insert(got.key.clone(), (got.rv, got.digest));
            }
            ("MODIFIED", Some((rv, _))) => {
                return Some(invalid(format!("MODIFIED not newer than RV {rv}")))
            }
            ("MODIFIED", None) => return Some(invalid("MODIFIED for an absent object".into())),
            ("DELETED", Some(_)) => {
                self.state.remove(&got.key);
            }
            ("DELETED", None) => return Some(invalid("DELETED for an absent object".into())),
            (other, _) => return Some(invalid(format!("unknown event type {other:?}"))),
        }
        None
    }

    /// The state rebuilt from the events: key → RV.
    pub fn state(&self) -> BTreeMap<String, u64> {
        self.state
            .iter()
            .map(|(k, (rv, _))| (k.clone(), *rv))
            .collect()
    }

    pub fn last_rv(&self) -> u64 {
        self.last_rv
    }

    pub fn events(&self) -> usize {
        self.events
    }

    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Compares the rebuilt state with `want` (key → RV); describes the differences.
    pub fn diff(&self, want: &BTreeMap<String, u64>) -> Option<String> {
        let have = self.state();
        if &have == want {
            return None;
        }
        let mut lines = Vec::new();
        for (k, rv) in want {
            match have.get(k) {
                None => lines.push(format!("missing {k}@{rv}")),
                Some(h) if h != rv => lines.push(format!("{k}: have RV {h}, want {rv}")),
                _ => {}
            }
        }
        for (k, rv) in &have {
            if !want.contains_key(k) {
                lines.push(format!("extra {k}@{rv}"));
            }
        }
        let n = lines.len();
        lines.truncate(10);
        Some(format!("{n} difference(s): {}", lines.join("; ")))
    }
}

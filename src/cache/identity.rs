//! Which cluster the caches were built from: the `kube-system` namespace's uid, the
//! customary cluster identity (it is created once, with the cluster, and a restore from
//! a backup keeps it; a rebuilt cluster has a new one).
//!
//! resourceVersions alone cannot tell a replaced cluster whose resourceVersions happen to
//! be *above* the cache's: a reflector resuming its watch there would receive the new
//! cluster's events on top of the old cluster's objects. So the identity is verified
//! before a reflector resumes after its stream ended or broke, before it relists, and at
//! each consistency check. An upstream can only be replaced while connections break, and
//! every check shares one request with every other that asked before it was sent (the
//! [`Demand`](super::demand::Demand) argument): a restart of the apiserver behind the
//! gateway costs one GET, however many caches resume.
//!
//! A changed uid is handled as an upstream that went back: every cache is dropped and
//! rebuilt, every watch ends with 410 (`Registry::reset`). An upstream without
//! `kube-system` (not a Kubernetes cluster, or an empty simulator) has no identity to
//! check: the resourceVersion checks are all there is.
//!
//! The state file (`cache::warm`) names the cluster its resourceVersions belong to; a
//! restarted gateway resumes its caches from them ([`ClusterIdentity::may_resume`]) only
//! if the upstream is still that cluster. That uid is kept apart from the caches' own:
//! another cluster behind the address at start-up only means that no cache resumes. The
//! new process has served nothing yet, so there is nothing to reset, and the uid it
//! reads is its caches' identity from the start.

use std::time::{Duration, Instant};

use http::StatusCode;
use serde::Deserialize;
use tokio::sync::Mutex;

use crate::upstream::Upstream;

/// The object whose uid names the cluster.
const IDENTITY_PATH: &str = "/api/v1/namespaces/kube-system";

/// A namespace is small; the bound keeps a broken upstream from holding memory.
const MAX_BYTES: usize = 1 << 20;

/// How long one identity read may take before the caller carries on without it.
const TIMEOUT: Duration = Duration::from_secs(5);

/// What a verification found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The cluster the caches were built from (or the first one seen).
    Same,
    /// Another cluster: its `kube-system` uid is not the one recorded.
    Changed { was: String, now: String },
    /// No identity could be read (no `kube-system`, an error, a timeout).
    Unknown,
}

/// Whether the caches may resume from the state file's resourceVersions
/// ([`ClusterIdentity::may_resume`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// The file names no cluster (one written by an earlier gateway): resumed from, as
    /// before the file named one.
    Unrecorded,
    /// The upstream is the cluster the file names.
    Same,
    /// The upstream is another cluster: the file's resourceVersions are not its own.
    Other { recorded: String, now: String },
    /// No identity could be read: resumed from, as without a uid; a resourceVersion the
    /// upstream does not have still fails the backfill (410), which then syncs as usual.
    Unknown,
}

impl Resume {
    pub fn allowed(&self) -> bool {
        !matches!(self, Resume::Other { .. })
    }
}

/// The upstream cluster's identity, shared by every cache of a registry.
pub struct ClusterIdentity {
    upstream: Upstream,
    /// The uid the caches were built with, once read.
    uid: std::sync::Mutex<Option<String>>,
    /// The uid the state file's resourceVersions belong to (the previous run's caches'),
    /// set before the first cache starts. Only [`ClusterIdentity::may_resume`] compares
    /// with it: it is not the caches' identity.
    recorded: std::sync::OnceLock<String>,
    /// [`ClusterIdentity::may_resume`]'s answer, decided once for every cache.
    resume: tokio::sync::OnceCell<Resume>,
    /// When the last read was sent, and what it found.
    last: std::sync::Mutex<Option<(Instant, Verdict)>>,
    /// One read at a time: the callers that wait for it reuse its verdict.
    reading: Mutex<()>,
}

impl ClusterIdentity {
    pub fn new(upstream: Upstream) -> Self {
        Self {
            upstream,
            uid: Default::default(),
            recorded: Default::default(),
            resume: Default::default(),
            last: Default::default(),
            reading: Mutex::new(()),
        }
    }

    /// Whether the upstream is still the cluster the caches were built from, as of a
    /// read sent at or after `since` (when the caller's stream ended, say). A read sent
    /// after `since` by someone else is reused; otherwise one is sent now. The first
    /// identity read is recorded as the caches' own.
    pub async fn verify(&self, since: Instant) -> Verdict {
        let _one = self.reading.lock().await;
        self.verify_locked(since).await
    }

    /// [`ClusterIdentity::verify`], with `reading` held.
    async fn verify_locked(&self, since: Instant) -> Verdict {
        if let Some((sent, verdict)) = &*lock(&self.last) {
            if *sent >= since {
                return verdict.clone();
            }
        }
        let sent = Instant::now();
        let read = tokio::time::timeout(TIMEOUT, self.read_uid()).await;
        let verdict = match read {
            Ok(Some(now)) => {
                let mut uid = lock(&self.uid);
                match &*uid {
                    None => {
                        *uid = Some(now);
                        Verdict::Same
                    }
                    Some(was) if *was == now => Verdict::Same,
                    Some(was) => Verdict::Changed {
                        was: was.clone(),
                        now,
                    },
                }
            }
            _ => Verdict::Unknown,
        };
        *lock(&self.last) = Some((sent, verdict.clone()));
        verdict
    }

    /// Records the identity if none is yet: called as each cache starts, so that the
    /// caches' cluster is known before the first stream could end.
    pub async fn learn(&self) {
        if lock(&self.uid).is_some() {
            return;
        }
        // Caches starting together wait for the first one's read, then find it done.
        let _one = self.reading.lock().await;
        if lock(&self.uid).is_none() {
            self.verify_locked(Instant::now()).await;
        }
    }

    /// The caches' identity, if read.
    pub fn uid(&self) -> Option<String> {
        lock(&self.uid).clone()
    }

    /// Names the cluster the state file's resourceVersions belong to. Call before the
    /// first cache starts; a second call is ignored.
    pub fn set_recorded(&self, uid: String) {
        let _ = self.recorded.set(uid);
    }

    /// Whether the caches may resume from the state file's resourceVersions: unless the
    /// upstream is known to be another cluster than the one the file names. Decided once,
    /// on the caches' first identity read (shared with [`ClusterIdentity::learn`]), for
    /// every cache, however many resume and whenever they start: each would otherwise wait
    /// for its own read when the identity cannot be read. Another cluster is logged once.
    pub async fn may_resume(&self) -> Resume {
        self.resume
            .get_or_init(|| self.check_recorded())
            .await
            .clone()
    }

    async fn check_recorded(&self) -> Resume {
        let Some(recorded) = self.recorded.get() else {
            return Resume::Unrecorded;
        };
        self.learn().await;
        match self.uid() {
            Some(now) if now == *recorded => Resume::Same,
            Some(now) => {
                tracing::warn!(%recorded, %now, "the cache state file's resourceVersions belong to another cluster (its kube-system uid differs): no cache resumes from them; each syncs as usual");
                Resume::Other {
                    recorded: recorded.clone(),
                    now,
                }
            }
            None => {
                tracing::info!(%recorded, "the upstream's identity could not be read; resuming from the cache state file's resourceVersions unchecked");
                // The caches resume as if built from the file's cluster, so that is their
                // identity: a later read that finds another one (the identity was only
                // unreadable for a moment, and the cluster had been replaced) is a change,
                // and every cache is rebuilt, rather than being taken as theirs.
                let mut uid = lock(&self.uid);
                if uid.is_none() {
                    *uid = Some(recorded.clone());
                }
                Resume::Unknown
            }
        }
    }

    /// Forgets the caches' identity: they are being rebuilt from whatever cluster
    /// answers now, whose identity the next read records.
    pub fn forget(&self) {
        *lock(&self.uid) = None;
        *lock(&self.last) = None;
    }

    async fn read_uid(&self) -> Option<String> {
        let answer = self
            .upstream
            .get_internal(IDENTITY_PATH, "application/json", MAX_BYTES)
            .await
            .ok()?;
        if answer.status != StatusCode::OK {
            return None;
        }
        let ns: Namespace = serde_json::from_slice(&answer.body).ok()?;
        Some(ns.metadata.uid).filter(|u| !u.is_empty())
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is an assignment: a poisoned lock is still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Deserialize)]
struct Namespace {
    metadata: Meta,
}

#[derive(Deserialize)]
struct Meta {
    #[serde(default)]
    uid: String,
}

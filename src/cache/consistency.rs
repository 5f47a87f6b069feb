//! The periodic consistency check: now and then (`--cache-consistency-check-interval`,
//! 5 minutes with up to 50 % jitter, waiting first), and on an operator's demand, each
//! synced cache is compared with the upstream at one resourceVersion.
//!
//! It follows kube-apiserver's own check of its watch cache against etcd (1.34+,
//! `pkg/storage/cacher/delegator.go`, `consistencyChecker`): take the cache's state at its
//! resourceVersion R, read the upstream's state at exactly R (`resourceVersion=R&
//! resourceVersionMatch=Exact`, paged by 10,000 as `storageWatchListPageSize`, the pages
//! after the first by their continue token), and compare the two by (namespace, name,
//! resourceVersion): the same triple the apiserver hashes. Only metadata travels
//! (`as=PartialObjectMetadataList`), and where the apiserver compares two digests, the
//! gateway compares the sets, so that its log line can name the first keys that differ.
//!
//! What a mismatch means and what is done (docs/consistency.md, "The consistency check"):
//! the cache's stream lost or invented a change. The state is marked inconsistent, so that
//! consistent reads are forwarded, and the reflector re-reads the resource with a
//! consistent request; watchers get the difference as events (or their watches end, per
//! `--watch-relist`). An upstream that cannot serve R because it is *behind* it (504 "Too
//! large resource version") may have gone back (a restored etcd): a consistent probe
//! decides, and an upstream below the cache resets every cache.
//!
//! Results are counted as the apiserver labels its `storage_consistency_checks_total`:
//! `success`, `failure`, `error` (`watchgate_cache_consistency_checks_total`).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use rand::Rng;
use serde::Deserialize;
use tokio::sync::watch;

use super::events::ErrorStatus;
use super::fresh::Freshness;
use super::identity::{ClusterIdentity, Verdict};
use super::store::Store;
use crate::model::resource::ResourceInfo;
use crate::model::snapshot::Snapshot;
use crate::upstream::Upstream;

/// The default interval: kube-apiserver's `ConsistencyCheckPeriod` ("5 minutes were
/// proposed to match the default compaction period").
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);

/// Objects per page of the upstream's list: the apiserver's own check pages by
/// `storageWatchListPageSize`.
const PAGE_SIZE: usize = 10_000;

/// The largest page accepted. Metadata of 10,000 objects is a few MB; annotations such as
/// `last-applied-configuration` can make it tens. The bound keeps a broken upstream from
/// holding the gateway's memory.
const MAX_PAGE_BYTES: usize = 256 << 20;

/// A whole check gives up after this: kube-apiserver's list timeout is a minute.
const CHECK_TIMEOUT: Duration = Duration::from_secs(60);

/// How many differing keys the log line and the report name.
const SHOWN: usize = 5;

/// The Accept header of the upstream's pages: metadata only, in JSON.
const METADATA_JSON: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

/// Why a check could not compare (the `error` result).
#[derive(Debug, Clone, thiserror::Error)]
pub enum CheckError {
    #[error("the cache has not synced")]
    NotSynced,
    #[error("the upstream could not be asked: {0}")]
    Upstream(#[from] crate::upstream::UpstreamError),
    #[error("reading the upstream's answer: {0}")]
    Body(String),
    #[error("the upstream answered {code}: {message}")]
    Status { code: u16, message: String },
    #[error("the upstream no longer has resourceVersion {0} (compacted); the next check uses a newer one")]
    Expired(u64),
    #[error("the upstream is behind resourceVersion {0} and its current one could not be read")]
    Behind(u64),
    #[error("the upstream answered resourceVersion {got} to a read at exactly {asked}")]
    OtherResourceVersion { asked: u64, got: String },
    #[error("the upstream's answer is not a metadata list: {0}")]
    Decode(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// One key that differs, with the resourceVersions each side has (`None`: absent there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub key: String,
    pub cache: Option<u64>,
    pub upstream: Option<u64>,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rv = |v: Option<u64>| v.map_or_else(|| "absent".to_string(), |v| v.to_string());
        write!(
            f,
            "{} (cache {}, upstream {})",
            self.key,
            rv(self.cache),
            rv(self.upstream)
        )
    }
}

/// How the cache and the upstream differ at one resourceVersion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub resource_version: u64,
    /// In the upstream, not in the cache.
    pub missing: usize,
    /// In the cache, not in the upstream.
    pub extra: usize,
    /// In both, at different resourceVersions.
    pub changed: usize,
    /// The first [`SHOWN`] differences, in key order.
    pub first: Vec<Difference>,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "differs at resourceVersion {}: {} missing from the cache, {} only in the cache, {} at another resourceVersion; first: ",
            self.resource_version, self.missing, self.extra, self.changed
        )?;
        for (i, d) in self.first.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// A check's outcome.
#[derive(Debug, Clone)]
pub enum Report {
    /// The same (namespace, name, resourceVersion) set on both sides.
    Consistent {
        resource_version: u64,
        objects: usize,
    },
    /// They differ: the cache is re-synced.
    Differs(Mismatch),
    /// The upstream's current resourceVersion is below the cache's: every cache is reset.
    WentBack { upstream: u64, cache: u64 },
    /// The upstream is another cluster (its `kube-system` uid changed): every cache is
    /// reset.
    Replaced { was: String, now: String },
    /// No comparison was possible.
    Failed(CheckError),
}

impl Report {
    /// The metric label (kube-apiserver's `storage_consistency_checks_total` values).
    pub fn result(&self) -> &'static str {
        match self {
            Report::Consistent { .. } => "success",
            Report::Differs(_) | Report::WentBack { .. } | Report::Replaced { .. } => "failure",
            Report::Failed(_) => "error",
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Report::Consistent {
                resource_version,
                objects,
            } => write!(
                f,
                "consistent at resourceVersion {resource_version} ({objects} objects)"
            ),
            Report::Differs(m) => write!(f, "{m}; re-syncing"),
            Report::WentBack { upstream, cache } => write!(
                f,
                "the upstream is at resourceVersion {upstream}, below the cache's {cache}: it went back; every cache is rebuilt"
            ),
            Report::Replaced { was, now } => write!(
                f,
                "the upstream is another cluster (kube-system uid {now}, was {was}); every cache is rebuilt"
            ),
            Report::Failed(e) => write!(f, "not checked: {e}"),
        }
    }
}

/// Checks done, by result, and the last report (for `/readyz?verbose`).
#[derive(Debug, Default)]
pub struct CheckCounters {
    pub success: AtomicU64,
    pub failure: AtomicU64,
    pub error: AtomicU64,
    last: Mutex<Option<(Instant, String)>>,
}

impl CheckCounters {
    /// When the last check ended, and what it found.
    pub fn last(&self) -> Option<(Instant, String)> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The consistency check of one resource's cache.
pub struct ConsistencyCheck {
    upstream: Upstream,
    info: Arc<ResourceInfo>,
    store: Arc<Store>,
    fresh: Arc<Freshness>,
    synced: watch::Receiver<bool>,
    identity: Arc<ClusterIdentity>,
    pub counters: CheckCounters,
    /// One check at a time: an operator's check asked during a periodic one runs after it.
    running: tokio::sync::Mutex<()>,
}

impl ConsistencyCheck {
    pub fn new(
        upstream: Upstream,
        info: Arc<ResourceInfo>,
        store: Arc<Store>,
        fresh: Arc<Freshness>,
        synced: watch::Receiver<bool>,
        identity: Arc<ClusterIdentity>,
    ) -> Self {
        Self {
            upstream,
            info,
            store,
            fresh,
            synced,
            identity,
            counters: CheckCounters::default(),
            running: tokio::sync::Mutex::new(()),
        }
    }

    /// Checks every `interval` (plus up to half of it, so that the caches of a gateway
    /// started at once do not check together), waiting first, as kube-apiserver does.
    pub async fn run_every(self: Arc<Self>, interval: Duration) {
        loop {
            let jittered = interval.mul_f64(rand::rng().random_range(1.0..1.5));
            tokio::time::sleep(jittered).await;
            if *self.synced.borrow() {
                self.check().await;
            }
        }
    }

    /// Compares the cache with the upstream now, counts and logs the result, and acts on
    /// it (a re-sync, or a reset of every cache).
    pub async fn check(&self) -> Report {
        let _one = self.running.lock().await;
        let report = match tokio::time::timeout(CHECK_TIMEOUT, self.compare()).await {
            Ok(r) => r,
            Err(_) => Report::Failed(CheckError::Timeout(CHECK_TIMEOUT)),
        };
        self.record(&report);
        report
    }

    fn record(&self, report: &Report) {
        let c = &self.counters;
        let resource = &self.info.resource;
        match report {
            Report::Consistent { .. } => {
                c.success.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%resource, "consistency check: {report}");
            }
            Report::Differs(m) => {
                c.failure.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    %resource,
                    resource_version = m.resource_version,
                    missing = m.missing,
                    extra = m.extra,
                    changed = m.changed,
                    "consistency check: the cache of {resource} {report}"
                );
                // Consistent reads are forwarded until a state read after this moment is
                // in; the reflector is asked for one.
                self.fresh.demands().found_inconsistent(Instant::now());
            }
            Report::WentBack { .. } | Report::Replaced { .. } => {
                c.failure.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%resource, "consistency check: {report}");
                self.fresh.demands().upstream_went_back();
            }
            Report::Failed(_) => {
                c.error.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%resource, "consistency check: {report}");
            }
        }
        *c.last.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), report.to_string()));
    }

    async fn compare(&self) -> Report {
        if !*self.synced.borrow() {
            return Report::Failed(CheckError::NotSynced);
        }
        // Another cluster makes any comparison moot (its resourceVersions may even
        // cover the cache's: they name other writes).
        if let Verdict::Changed { was, now } = self.identity.verify(Instant::now()).await {
            return Report::Replaced { was, now };
        }
        let snapshot = self.store.snapshot();
        let rv = snapshot.resource_version;
        match self.upstream_state(rv).await {
            Ok(upstream) => match differences(&snapshot, upstream) {
                None => Report::Consistent {
                    resource_version: rv,
                    objects: snapshot.len(),
                },
                Some(m) => Report::Differs(m),
            },
            Err(CheckError::Behind(_)) => self.behind(rv).await,
            Err(e) => Report::Failed(e),
        }
    }

    /// The upstream could not serve the cache's resourceVersion because it has not reached
    /// it. A consistent probe tells a lagging upstream (its RV is at or above the cache's
    /// by now) from one that went back; only the only endpoint can prove the latter (a
    /// lagging replica behind a balancer answers the same way).
    async fn behind(&self, cache: u64) -> Report {
        match self.fresh.current_rv().await {
            Ok(upstream) if upstream < cache && self.upstream.endpoints().len() == 1 => {
                Report::WentBack { upstream, cache }
            }
            _ => Report::Failed(CheckError::Behind(cache)),
        }
    }

    /// The upstream's (key, resourceVersion) set at exactly `rv`, page by page.
    async fn upstream_state(&self, rv: u64) -> Result<HashMap<String, u64>, CheckError> {
        let base = self.info.collection_path();
        let mut out = HashMap::new();
        let mut cont: Option<String> = None;
        loop {
            let query = {
                let mut q = form_urlencoded::Serializer::new(String::new());
                q.append_pair("limit", &PAGE_SIZE.to_string());
                match &cont {
                    None => {
                        q.append_pair("resourceVersion", &rv.to_string());
                        q.append_pair("resourceVersionMatch", "Exact");
                    }
                    // Later pages are read at the first page's resourceVersion by their
                    // token, as the apiserver's own check does.
                    Some(c) => {
                        q.append_pair("continue", c);
                    }
                }
                q.finish()
            };
            let (status, bytes) = self.get(format!("{base}?{query}")).await?;
            if !status.is_success() {
                let st: ErrorStatus = serde_json::from_slice(&bytes).unwrap_or_default();
                return Err(if status == StatusCode::GONE {
                    CheckError::Expired(rv)
                } else if st.is_too_large_resource_version() {
                    CheckError::Behind(rv)
                } else {
                    CheckError::Status {
                        code: status.as_u16(),
                        message: st.message,
                    }
                });
            }
            let page: MetaList =
                serde_json::from_slice(&bytes).map_err(|e| CheckError::Decode(e.to_string()))?;
            if cont.is_none() && page.metadata.resource_version != rv.to_string() {
                return Err(CheckError::OtherResourceVersion {
                    asked: rv,
                    got: page.metadata.resource_version,
                });
            }
            for item in page.items {
                let m = item.metadata;
                let item_rv = m.resource_version.parse::<u64>().map_err(|_| {
                    CheckError::Decode(format!(
                        "resourceVersion {:?} of {} is not a number",
                        m.resource_version, m.name
                    ))
                })?;
                let key = if m.namespace.is_empty() {
                    m.name
                } else {
                    format!("{}/{}", m.namespace, m.name)
                };
                out.insert(key, item_rv);
            }
            match page.metadata.continue_token {
                Some(c) if !c.is_empty() => {
                    // The upstream's own token: the form the cache's pages copy.
                    self.store.token_form().learn(&c);
                    cont = Some(c);
                }
                _ => return Ok(out),
            }
        }
    }

    /// A GET of the gateway's own (`Upstream::get_internal`: it may use the connections
    /// kept for short requests when clients' watches fill the others).
    async fn get(&self, path_and_query: String) -> Result<(StatusCode, Bytes), CheckError> {
        let answer = self
            .upstream
            .get_internal(&path_and_query, METADATA_JSON, MAX_PAGE_BYTES)
            .await?;
        Ok((answer.status, answer.body))
    }
}

/// How `snapshot` differs from the upstream's `(key → resourceVersion)` set; `None` when
/// they are the same.
fn differences(snapshot: &Snapshot, mut upstream: HashMap<String, u64>) -> Option<Mismatch> {
    let mut m = Mismatch {
        resource_version: snapshot.resource_version,
        missing: 0,
        extra: 0,
        changed: 0,
        first: Vec::new(),
    };
    let mut shown = Vec::new();
    for (key, obj) in &snapshot.objects {
        let cache = Some(obj.resource_version);
        match upstream.remove(key.as_ref()) {
            Some(rv) if rv == obj.resource_version => continue,
            Some(rv) => {
                m.changed += 1;
                shown.push(Difference {
                    key: key.to_string(),
                    cache,
                    upstream: Some(rv),
                });
            }
            None => {
                m.extra += 1;
                shown.push(Difference {
                    key: key.to_string(),
                    cache,
                    upstream: None,
                });
            }
        }
        // The cache's keys come in order: a few are enough.
        shown.truncate(SHOWN);
    }
    m.missing = upstream.len();
    let mut missing: Vec<_> = upstream.into_iter().collect();
    missing.sort_unstable();
    shown.extend(missing.into_iter().take(SHOWN).map(|(key, rv)| Difference {
        key,
        cache: None,
        upstream: Some(rv),
    }));
    shown.sort_by(|a, b| a.key.cmp(&b.key));
    shown.truncate(SHOWN);
    m.first = shown;
    (m.missing + m.extra + m.changed > 0).then_some(m)
}

#[derive(Deserialize)]
struct MetaList {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Vec<Item>,
}

#[derive(Deserialize, Default)]
struct ListMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
    #[serde(rename = "continue", default)]
    continue_token: Option<String>,
}

#[derive(Deserialize)]
struct Item {
    metadata: ItemMeta,
}

#[derive(Deserialize)]
struct ItemMeta {
    #[serde(default)]
    namespace: String,
    name: String,
    #[serde(rename = "resourceVersion")]
    resource_version: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::object::CachedObject;

    fn obj(ns: &str, name: &str, rv: u64) -> Arc<CachedObject> {
        let raw = serde_json::json!({
            "metadata": {"namespace": ns, "name": name, "resourceVersion": rv.to_string(), "uid": format!("{name}-uid")}
        });
        Arc::new(CachedObject::parse(Bytes::from(raw.to_string()), &[]).expect("an object"))
    }

    fn snapshot(rv: u64, objs: &[(&str, &str, u64)]) -> Snapshot {
        let mut s = Snapshot {
            resource_version: rv,
            ..Default::default()
        };
        for (ns, name, v) in objs {
            s.insert(obj(ns, name, *v));
        }
        s
    }

    fn upstream(objs: &[(&str, u64)]) -> HashMap<String, u64> {
        objs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn the_same_keys_at_the_same_versions_are_consistent() {
        let s = snapshot(9, &[("a", "x", 3), ("b", "y", 9), ("", "node-1", 4)]);
        let u = upstream(&[("a/x", 3), ("b/y", 9), ("node-1", 4)]);
        assert_eq!(differences(&s, u), None);
    }

    #[test]
    fn every_kind_of_difference_is_counted_and_the_first_keys_named_in_order() {
        let s = snapshot(
            20,
            &[("a", "changed", 3), ("a", "extra", 5), ("a", "same", 7)],
        );
        let u = upstream(&[("a/changed", 12), ("a/same", 7), ("a/missing", 15)]);
        let m = differences(&s, u).expect("a mismatch");
        assert_eq!((m.missing, m.extra, m.changed), (1, 1, 1));
        assert_eq!(
            m.first,
            vec![
                Difference {
                    key: "a/changed".into(),
                    cache: Some(3),
                    upstream: Some(12)
                },
                Difference {
                    key: "a/extra".into(),
                    cache: Some(5),
                    upstream: None
                },
                Difference {
                    key: "a/missing".into(),
                    cache: None,
                    upstream: Some(15)
                },
            ]
        );
        assert_eq!(
            m.to_string(),
            "differs at resourceVersion 20: 1 missing from the cache, 1 only in the cache, 1 at another resourceVersion; first: a/changed (cache 3, upstream 12), a/extra (cache 5, upstream absent), a/missing (cache absent, upstream 15)"
        );
    }

    #[test]
    fn a_wholly_different_state_names_only_a_few_keys() {
        let objs: Vec<(String, u64)> = (0..100).map(|i| (format!("ns/o-{i:03}"), i)).collect();
        let u: HashMap<String, u64> = objs.into_iter().collect();
        let m = differences(&snapshot(5, &[]), u).expect("a mismatch");
        assert_eq!(m.missing, 100);
        assert_eq!(m.first.len(), SHOWN);
        assert_eq!(m.first[0].key, "ns/o-000");
    }

    #[test]
    fn results_are_the_apiservers_labels() {
        let consistent = Report::Consistent {
            resource_version: 1,
            objects: 0,
        };
        assert_eq!(consistent.result(), "success");
        assert_eq!(
            Report::WentBack {
                upstream: 1,
                cache: 2
            }
            .result(),
            "failure"
        );
        assert_eq!(Report::Failed(CheckError::NotSynced).result(), "error");
    }
}

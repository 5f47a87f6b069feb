//! The warm list (`--cache-state-file`): which resources this gateway has cached, kept in a
//! small file so that the next start begins those caches before any client asks for them.
//!
//! A gateway that restarts with thousands of clients connected gets their reconnections all
//! at once; with its caches cold, each of them would reach the apiserver (docs/operations.md,
//! "Warm before the clients come"). `--cache` names the resources an operator knows of; this
//! file adds the ones clients turned out to read. A resource is recorded once its cache has
//! synced (so one that cannot be listed, e.g. for lack of RBAC, is never remembered), and
//! forgotten when discovery says the upstream no longer serves it or the byte budget drops
//! it. Writes are debounced and atomic (a temporary file, then a rename), so a crash leaves
//! the previous version or the new one, never half of one.
//!
//! Each entry also carries a resourceVersion its cache had reached, refreshed while the
//! gateway runs (at most every [`PROGRESS_EVERY`], and at a drain): the next start
//! resumes that cache from there (`cache::reflector`, the backfill), so that clients
//! reconnecting with a resourceVersion at least as new resume from its history rather
//! than relist (docs/cache.md, "Resuming after a restart"). The gateway may be killed
//! without a drain, hence the periodic refresh rather than a write at exit alone.
//!
//! The file also names the cluster those resourceVersions belong to (`cluster`: the
//! `kube-system` uid the caches were built from, `cache::identity`): resourceVersions of
//! one cluster mean nothing in another, and the next start resumes from them only if the
//! upstream is still that cluster.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::budget::OverBudget;

/// At most this many resources are remembered: far more resource types than a cluster
/// serves, so only a broken or hostile upstream reaches it, and the file stays small.
pub const MAX_RESOURCES: usize = 1000;
/// A state file larger than this is not read (1,000 entries of the longest names fit).
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// Changes are written this long after the first of them, together: a burst of caches
/// starting (a client's first sweep over many resources) costs one write.
pub const DEBOUNCE: Duration = Duration::from_secs(1);
/// How often the caches' resourceVersions are copied into the file while it runs (each
/// copy that changed something is then written after [`DEBOUNCE`]): at most one write per
/// this period for them, however busy the resources. A resumed cache replays what
/// happened since, so a recorded resourceVersion a few seconds old costs only those
/// seconds of events; clients that saw less than it relist, as without it.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// The file's format; a file of another format is ignored (and replaced on the next save).
/// The `resourceVersion` of an entry and the top-level `cluster` are optional, so files
/// written before they were recorded are read (and older gateways, which ignore unknown
/// fields, read the new ones: `Contents` does not deny them).
const FORMAT: u32 = 1;
/// The longest cluster uid kept. kube-apiserver's uids are UUIDs (36 characters); the
/// bound only keeps an edited file from holding anything large.
const MAX_UID_BYTES: usize = 128;

/// A resource as the file names it: group (empty for the core group), version, resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Gvr {
    pub group: String,
    pub version: String,
    pub resource: String,
}

impl Gvr {
    pub fn new(group: &str, version: &str, resource: &str) -> Self {
        Self {
            group: group.to_string(),
            version: version.to_string(),
            resource: resource.to_string(),
        }
    }

    /// kubectl's fully qualified form: `pods.v1`, `deployments.v1.apps`.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            format!("{}.{}", self.resource, self.version)
        } else {
            format!("{}.{}.{}", self.resource, self.version, self.group)
        }
    }

    /// Names the file may hold: the characters of DNS names, within their lengths. The
    /// names go into discovery and list paths, so an edited or damaged file must not be
    /// able to make the gateway request anything else.
    fn is_valid(&self) -> bool {
        let dns = |s: &str, max: usize| {
            s.len() <= max
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
                && !s.starts_with('.')
                && !s.contains("..")
        };
        dns(&self.group, 253)
            && !self.version.is_empty()
            && dns(&self.version, 63)
            && !self.version.contains('.')
            && !self.resource.is_empty()
            && dns(&self.resource, 253)
    }
}

/// `--cache-state-file` and `--cache-warmup-timeout`.
#[derive(Debug, Clone)]
pub struct WarmConfig {
    pub state_file: PathBuf,
    /// How long after start-up the file's resources hold readiness while they sync.
    pub timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    #[error("reading the cache state file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the cache state file {} is over {MAX_FILE_BYTES} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("the cache state file {} is not one of watchgate's: {source}", path.display())]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("the cache state file {} has format {found}; this watchgate reads format {FORMAT}", path.display())]
    Format { path: PathBuf, found: u32 },
    #[error("the directory of the cache state file {} does not exist", path.display())]
    NoDirectory { path: PathBuf },
    #[error("writing the cache state file {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The file's contents, e.g. `{"format": 1, "cluster": "6f1c…", "resources": [{"group":
/// "", "version": "v1", "resource": "pods", "resourceVersion": "4711"}]}`.
#[derive(Serialize, Deserialize)]
struct Contents {
    format: u32,
    /// The uid of the cluster whose resourceVersions the entries carry (absent in files
    /// of earlier gateways, and while none is known).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_uid"
    )]
    cluster: Option<String>,
    resources: Vec<Entry>,
}

/// Whether `uid` may be kept as a cluster's: non-empty, bounded, printable ASCII. It is
/// only compared with the upstream's, but it is logged, so an edited file must not put
/// control characters or megabytes into the log.
fn valid_uid(uid: &str) -> bool {
    !uid.is_empty() && uid.len() <= MAX_UID_BYTES && uid.bytes().all(|b| b.is_ascii_graphic())
}

/// `cluster` as read: anything but a valid uid (another JSON type, an empty or oversized
/// string) is taken as absent rather than making the whole file unreadable; the entries
/// are then resumed from as in a file of an earlier gateway.
fn lenient_uid<'de, D>(d: D) -> Result<Option<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let v = serde_json::Value::deserialize(d)?;
    Ok(v.as_str().filter(|s| valid_uid(s)).map(str::to_string))
}

/// One resource of the file and the resourceVersion its cache had reached (a string, as
/// Kubernetes writes resourceVersions; absent in files of earlier gateways).
#[derive(Serialize, Deserialize)]
struct Entry {
    #[serde(flatten)]
    gvr: Gvr,
    #[serde(
        rename = "resourceVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    resource_version: Option<String>,
}

impl Entry {
    /// The recorded resourceVersion, if it is one (a positive integer: anything else is
    /// ignored, the cache then starts as it would without it).
    fn rv(&self) -> Option<u64> {
        let rv = self.resource_version.as_deref()?;
        crate::strconv::parse_uint(rv).ok().filter(|&n| n > 0)
    }
}

/// A resource of the file and the resourceVersion recorded for it, if any.
pub type Recorded = (Gvr, Option<u64>);

/// What a state file holds: the cluster its resourceVersions belong to (if named) and
/// its resources with the resourceVersion recorded for each.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    pub cluster: Option<String>,
    pub entries: Vec<Recorded>,
}

/// The resources in the file at `path`; none if it does not exist.
pub fn read(path: &Path) -> Result<Vec<Gvr>, StateFileError> {
    Ok(read_entries(path)?.into_iter().map(|(g, _)| g).collect())
}

/// The resources in the file at `path` with the resourceVersion recorded for each (if
/// any); none if it does not exist.
pub fn read_entries(path: &Path) -> Result<Vec<Recorded>, StateFileError> {
    Ok(read_file(path)?.entries)
}

/// The cluster uid the file at `path` names (none: it does not exist, or names none).
pub fn read_cluster(path: &Path) -> Result<Option<String>, StateFileError> {
    Ok(read_file(path)?.cluster)
}

/// Everything the file at `path` holds; nothing if it does not exist.
pub fn read_file(path: &Path) -> Result<Loaded, StateFileError> {
    use std::io::Read as _;
    let read_err = |source| StateFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::default()),
        Err(e) => return Err(read_err(e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(StateFileError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let contents: Contents =
        serde_json::from_slice(&bytes).map_err(|source| StateFileError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
    if contents.format != FORMAT {
        return Err(StateFileError::Format {
            path: path.to_path_buf(),
            found: contents.format,
        });
    }
    let entries = contents
        .resources
        .into_iter()
        .map(|e| {
            let rv = e.rv();
            (e.gvr, rv)
        })
        .collect();
    Ok(Loaded {
        cluster: contents.cluster,
        entries,
    })
}

fn encode(set: &Set) -> Vec<u8> {
    let contents = Contents {
        format: FORMAT,
        cluster: set.cluster.clone(),
        resources: set
            .resources
            .iter()
            .map(|(gvr, &rv)| Entry {
                gvr: gvr.clone(),
                resource_version: (rv > 0).then(|| rv.to_string()),
            })
            .collect(),
    };
    let mut bytes = serde_json::to_vec_pretty(&contents).expect("plain strings serialise");
    bytes.push(b'\n');
    bytes
}

/// The temporary file a save writes before renaming it over `path`: in the same directory,
/// so that the rename is atomic.
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp"))
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = temp_path(path);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    // On disk before the rename, or a power loss could leave the new name on an empty file.
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

struct Set {
    /// Each resource and the resourceVersion its cache reached (0: none known).
    resources: BTreeMap<Gvr, u64>,
    /// The cluster the resourceVersions belong to (none: not known yet, or a file of an
    /// earlier gateway).
    cluster: Option<String>,
    /// Bumped by every change; a save writes only when it moved past the saved one.
    generation: u64,
}

/// The state file and what it holds now. Changes are saved by a background task.
pub struct StateFile {
    path: PathBuf,
    set: Mutex<Set>,
    /// The generation on disk (or the one the file was read at).
    saved: tokio::sync::watch::Sender<u64>,
    /// Wakes the writer task.
    changed: Arc<Notify>,
    /// One save at a time: the writer and a flush share the temporary file.
    saving: tokio::sync::Mutex<()>,
    /// Files written so far.
    writes: AtomicU64,
    full_warned: AtomicBool,
}

impl StateFile {
    /// Reads the file at `path` and starts its writer. Keeps the entries that are valid
    /// and that `keep` accepts (e.g. not excluded by `--no-cache`), at most
    /// [`MAX_RESOURCES`]; if any was left out, the file is rewritten without it. A file that
    /// is too large, not JSON or of another format is ignored with a warning (it is
    /// replaced on the next save): it only saves work, so it must not stop a start. A
    /// directory that does not exist or a file that cannot be read does stop it: that is
    /// a misconfiguration, which would otherwise go unnoticed.
    ///
    /// Returns the kept resources with the resourceVersion recorded for each; the cluster
    /// they belong to is [`StateFile::cluster`].
    pub fn open(
        path: PathBuf,
        keep: impl Fn(&Gvr) -> bool,
    ) -> Result<(Arc<Self>, Vec<Recorded>), StateFileError> {
        let dir = match path.parent() {
            Some(d) if d.as_os_str().is_empty() => Path::new("."),
            Some(d) => d,
            None => Path::new("."),
        };
        if !dir.is_dir() {
            return Err(StateFileError::NoDirectory { path });
        }
        let Loaded {
            cluster,
            entries: read,
        } = match read_file(&path) {
            Ok(r) => r,
            Err(e @ StateFileError::Read { .. }) => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "ignoring the cache state file; it is replaced on the next save");
                Loaded::default()
            }
        };
        let total = read.len();
        let mut resources = BTreeMap::new();
        for (gvr, rv) in read {
            if resources.len() < MAX_RESOURCES && gvr.is_valid() && keep(&gvr) {
                resources.insert(gvr, rv.unwrap_or(0));
            } else {
                tracing::info!(resource = %gvr.qualified(), "dropping a resource from the cache state file (invalid, excluded or over the limit)");
            }
        }
        let kept: Vec<Recorded> = resources
            .iter()
            .map(|(g, &rv)| (g.clone(), (rv > 0).then_some(rv)))
            .collect();
        let changed = Arc::new(Notify::new());
        let (saved, _) = tokio::sync::watch::channel(0);
        let file = Arc::new(Self {
            path,
            set: Mutex::new(Set {
                resources,
                cluster,
                generation: 0,
            }),
            saved,
            changed: changed.clone(),
            saving: Default::default(),
            writes: AtomicU64::new(0),
            full_warned: AtomicBool::new(false),
        });
        tokio::spawn(writer(Arc::downgrade(&file), changed));
        if kept.len() != total {
            file.bump();
        }
        Ok((file, kept))
    }

    /// Remembers `gvr` (a cache of it has synced, at resourceVersion `rv`). At most
    /// [`MAX_RESOURCES`].
    pub fn record(&self, gvr: Gvr, rv: u64) {
        {
            let mut set = self.lock();
            if set.resources.contains_key(&gvr) {
                drop(set);
                self.progress(&gvr, rv);
                return;
            }
            if set.resources.len() >= MAX_RESOURCES {
                drop(set);
                if !self.full_warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(resource = %gvr.qualified(), "the cache state file holds {MAX_RESOURCES} resources; no more are recorded");
                }
                return;
            }
            set.resources.insert(gvr, rv);
            set.generation += 1;
        }
        self.changed.notify_one();
    }

    /// Notes that the cache of `gvr` (if the file holds it) reached `rv`. Saved with the
    /// next write: the caller bounds how often it calls (every [`PROGRESS_EVERY`]), so
    /// that a busy resource does not rewrite the file at each event.
    pub fn progress(&self, gvr: &Gvr, rv: u64) {
        {
            let mut set = self.lock();
            match set.resources.get_mut(gvr) {
                Some(have) if *have != rv && rv > 0 => *have = rv,
                _ => return,
            }
            set.generation += 1;
        }
        self.changed.notify_one();
    }

    /// Forgets `gvr` (the upstream does not serve it, or it is not cached any more).
    pub fn forget(&self, gvr: &Gvr) {
        {
            let mut set = self.lock();
            if set.resources.remove(gvr).is_none() {
                return;
            }
            set.generation += 1;
        }
        self.changed.notify_one();
    }

    /// The cluster the recorded resourceVersions belong to, as the file names it.
    pub fn cluster(&self) -> Option<String> {
        self.lock().cluster.clone()
    }

    /// Names `uid` as the cluster of the resourceVersions recorded from now on (the caches'
    /// identity, once known). If the file named another cluster, every resourceVersion it
    /// holds is that cluster's: they are dropped, and the caches' own replace them at the
    /// next [`StateFile::progress`]. A file that named none (an earlier gateway's) keeps
    /// its resourceVersions, as it was resumed from: it is taken to be this cluster's. An
    /// invalid uid is not recorded.
    pub fn set_cluster(&self, uid: &str) {
        if !valid_uid(uid) {
            return;
        }
        {
            let mut set = self.lock();
            match set.cluster.as_deref() {
                Some(have) if have == uid => return,
                Some(have) => {
                    tracing::info!(was = %have, now = %uid, "the cache state file's resourceVersions were another cluster's; dropping them");
                    set.resources.values_mut().for_each(|rv| *rv = 0);
                }
                None => {}
            }
            set.cluster = Some(uid.to_string());
            set.generation += 1;
        }
        self.changed.notify_one();
    }

    /// A change that is not an entry: a save is due.
    fn bump(&self) {
        self.lock().generation += 1;
        self.changed.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Set> {
        self.set.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the file holds now (or will once the pending save is done).
    pub fn resources(&self) -> Vec<Gvr> {
        self.lock().resources.keys().cloned().collect()
    }

    /// The resourceVersion recorded for `gvr` now (none: not in the file, or none known).
    pub fn resource_version(&self, gvr: &Gvr) -> Option<u64> {
        self.lock().resources.get(gvr).copied().filter(|&rv| rv > 0)
    }

    /// Files written so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Writes the current set now if it changed since the last save.
    pub async fn save(&self) -> Result<(), StateFileError> {
        let _one = self.saving.lock().await;
        let (bytes, generation) = {
            let set = self.lock();
            if set.generation == *self.saved.borrow() {
                return Ok(());
            }
            (encode(&set), set.generation)
        };
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || write_atomically(&path, &bytes))
            .await
            .map_err(std::io::Error::other)
            .and_then(|r| r)
            .map_err(|source| StateFileError::Write {
                path: self.path.clone(),
                source,
            })?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.saved.send_replace(generation);
        Ok(())
    }
}

impl Drop for StateFile {
    fn drop(&mut self) {
        // The writer holds a weak reference only; woken, it finds the file gone and ends.
        self.changed.notify_one();
    }
}

/// Saves changes [`DEBOUNCE`] after the first of them. A failed save is logged and tried
/// again with the next change (not in a loop: a read-only volume must not flood the log).
async fn writer(file: Weak<StateFile>, changed: Arc<Notify>) {
    loop {
        changed.notified().await;
        tokio::time::sleep(DEBOUNCE).await;
        let Some(file) = file.upgrade() else {
            return;
        };
        if let Err(e) = file.save().await {
            tracing::warn!(error = %e, "the cache state file was not saved; trying again on the next change");
        }
    }
}

/// Where a resource of the state file stands, for `/readyz`.
#[derive(Debug, Clone)]
pub enum WarmStatus {
    /// Discovery has not found it yet.
    NotStarted,
    /// Its cache has not synced yet.
    NotSynced,
    Synced,
    /// The upstream does not serve it (any more): forgotten.
    NotServed,
    /// It does not fit the byte budget: forwarded, forgotten.
    NotCached(OverBudget),
}

/// The state file's resources at start-up, which readiness waits for until each is synced
/// (or found not served, or not cacheable for its size) or the warm-up is over.
pub struct WarmUp {
    pub file: Arc<StateFile>,
    pub resources: Vec<Gvr>,
    /// The resourceVersion each resource's cache had reached in the previous run, as read
    /// at start-up: the first cache of each resumes from it, once (taken by
    /// [`WarmUp::take_resume`]); a cache started again later (after a reset, a drop) must
    /// not, its history is another.
    pub resume: Mutex<HashMap<Gvr, u64>>,
    /// The end of the warm-up: from then on, these resources no longer hold readiness.
    pub deadline: tokio::time::Instant,
    pub timeout: Duration,
}

impl WarmUp {
    /// The resourceVersion the first cache of `gvr` resumes from, once.
    pub fn take_resume(&self, gvr: &Gvr) -> Option<u64> {
        self.resume
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(gvr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gvr(g: &str, v: &str, r: &str) -> Gvr {
        Gvr::new(g, v, r)
    }

    fn open(path: &Path) -> (Arc<StateFile>, Vec<Recorded>) {
        StateFile::open(path.to_path_buf(), |_| true).unwrap()
    }

    #[test]
    fn names_are_qualified_like_kubectl_and_checked_like_dns_names() {
        assert_eq!(gvr("", "v1", "pods").qualified(), "pods.v1");
        assert_eq!(
            gvr("apps", "v1", "deployments").qualified(),
            "deployments.v1.apps"
        );
        assert!(gvr("", "v1", "pods").is_valid());
        assert!(gvr("networking.k8s.io", "v1beta1", "ingresses").is_valid());
        for bad in [
            gvr("", "", "pods"),
            gvr("", "v1", ""),
            gvr("", "v1", "pods/status"),
            gvr("..", "v1", "pods"),
            gvr("a..b", "v1", "pods"),
            gvr("", "v1.2", "pods"),
            gvr("", "v1", "Pods"),
            gvr("", "v1", "pods?x=1"),
            gvr(&"a".repeat(254), "v1", "pods"),
        ] {
            assert!(!bad.is_valid(), "{bad:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn changes_are_saved_together_after_the_debounce_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let (file, loaded) = open(&path);
        assert!(loaded.is_empty(), "no file yet: nothing to start");
        let mut saved = file.saved.subscribe();
        for r in ["pods", "configmaps", "services"] {
            file.record(gvr("", "v1", r), 10);
        }
        // No resourceVersion known (0): the entry has none.
        file.record(gvr("apps", "v1", "deployments"), 0);
        file.record(gvr("", "v1", "pods"), 10); // again: no change
        file.progress(&gvr("", "v1", "configmaps"), 12);
        file.progress(&gvr("", "v1", "nodes"), 12); // not in the file: nothing
        file.forget(&gvr("", "v1", "services"));
        let before = tokio::time::Instant::now();
        saved.wait_for(|g| *g > 0).await.unwrap();
        assert!(before.elapsed() >= DEBOUNCE, "saved before the debounce");
        assert_eq!(file.writes(), 1, "one write for the burst");
        let text = std::fs::read_to_string(&path).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"format": 1, "resources": [
                {"group": "", "version": "v1", "resource": "configmaps", "resourceVersion": "12"},
                {"group": "", "version": "v1", "resource": "pods", "resourceVersion": "10"},
                {"group": "apps", "version": "v1", "resource": "deployments"},
            ]})
        );
        assert!(!temp_path(&path).exists(), "the temporary file was renamed");
        // Nothing changed: a save writes nothing.
        file.save().await.unwrap();
        assert_eq!(file.writes(), 1);

        // The next start reads what was saved.
        drop(file);
        let (again, loaded) = open(&path);
        assert_eq!(
            loaded,
            vec![
                (gvr("", "v1", "configmaps"), Some(12)),
                (gvr("", "v1", "pods"), Some(10)),
                (gvr("apps", "v1", "deployments"), None),
            ]
        );
        assert_eq!(again.resource_version(&gvr("", "v1", "pods")), Some(10));

        // Progress is saved like any change, once it moved: the same RV again is none.
        again.progress(&gvr("", "v1", "pods"), 10);
        again.save().await.unwrap();
        assert_eq!(again.writes(), 0);
        again.progress(&gvr("", "v1", "pods"), 15);
        again.save().await.unwrap();
        assert_eq!(again.writes(), 1);
        assert_eq!(
            read_entries(&path).unwrap()[1],
            (gvr("", "v1", "pods"), Some(15))
        );
    }

    #[test]
    fn files_without_resource_versions_and_bad_ones_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        // A file of a gateway that did not record resourceVersions, and entries whose
        // resourceVersion is not one: the resource is kept, without a resume point.
        std::fs::write(
            &path,
            r#"{"format": 1, "resources": [
                {"group": "", "version": "v1", "resource": "configmaps"},
                {"group": "", "version": "v1", "resource": "pods", "resourceVersion": "x1"},
                {"group": "", "version": "v1", "resource": "secrets", "resourceVersion": "0"},
                {"group": "", "version": "v1", "resource": "services", "resourceVersion": "77"}]}"#,
        )
        .unwrap();
        assert_eq!(
            read_entries(&path).unwrap(),
            vec![
                (gvr("", "v1", "configmaps"), None),
                (gvr("", "v1", "pods"), None),
                (gvr("", "v1", "secrets"), None),
                (gvr("", "v1", "services"), Some(77)),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_cluster_is_written_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let (file, _) = open(&path);
        assert_eq!(file.cluster(), None, "no file: no cluster");
        file.record(gvr("", "v1", "pods"), 10);
        file.set_cluster("0b7a5c1e-uid");
        file.save().await.unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"format": 1, "cluster": "0b7a5c1e-uid", "resources": [
                {"group": "", "version": "v1", "resource": "pods", "resourceVersion": "10"},
            ]})
        );
        // The same uid again changes nothing.
        file.set_cluster("0b7a5c1e-uid");
        file.save().await.unwrap();
        assert_eq!(file.writes(), 1);
        drop(file);
        let (again, loaded) = open(&path);
        assert_eq!(again.cluster().as_deref(), Some("0b7a5c1e-uid"));
        assert_eq!(loaded, vec![(gvr("", "v1", "pods"), Some(10))]);
        assert_eq!(
            read_cluster(&path).unwrap().as_deref(),
            Some("0b7a5c1e-uid")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn another_cluster_drops_the_resource_versions_and_a_first_one_keeps_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        // A file of an earlier gateway: no cluster. Naming one keeps its resourceVersions
        // (the caches resumed from them).
        std::fs::write(
            &path,
            r#"{"format": 1, "resources": [
                {"group": "", "version": "v1", "resource": "configmaps", "resourceVersion": "7"},
                {"group": "", "version": "v1", "resource": "pods", "resourceVersion": "9"}]}"#,
        )
        .unwrap();
        let (file, _) = open(&path);
        file.set_cluster("first");
        file.save().await.unwrap();
        assert_eq!(
            read_file(&path).unwrap(),
            Loaded {
                cluster: Some("first".into()),
                entries: vec![
                    (gvr("", "v1", "configmaps"), Some(7)),
                    (gvr("", "v1", "pods"), Some(9)),
                ],
            }
        );
        // Another cluster: the first one's resourceVersions mean nothing there. The
        // resources stay (their caches start at the next start, with an ordinary sync).
        file.set_cluster("second");
        assert_eq!(file.resource_version(&gvr("", "v1", "pods")), None);
        file.progress(&gvr("", "v1", "pods"), 3);
        file.save().await.unwrap();
        assert_eq!(
            read_file(&path).unwrap(),
            Loaded {
                cluster: Some("second".into()),
                entries: vec![
                    (gvr("", "v1", "configmaps"), None),
                    (gvr("", "v1", "pods"), Some(3)),
                ],
            }
        );
        // An invalid uid is not recorded.
        file.set_cluster("");
        file.set_cluster("a b");
        assert_eq!(file.cluster().as_deref(), Some("second"));
        assert_eq!(file.resource_version(&gvr("", "v1", "pods")), Some(3));
    }

    #[test]
    fn a_bad_cluster_is_read_as_none_and_the_entries_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let long = format!("\"{}\"", "u".repeat(MAX_UID_BYTES + 1));
        for bad in [
            "42",
            "null",
            "{}",
            r#"["uid"]"#,
            r#""""#,
            r#""a\nb""#,
            r#""a b""#,
            r#""\u00e9""#,
            &long,
        ] {
            std::fs::write(
                &path,
                format!(
                    r#"{{"format": 1, "cluster": {bad}, "resources": [
                        {{"group": "", "version": "v1", "resource": "pods", "resourceVersion": "5"}}]}}"#
                ),
            )
            .unwrap();
            assert_eq!(
                read_file(&path).unwrap(),
                Loaded {
                    cluster: None,
                    entries: vec![(gvr("", "v1", "pods"), Some(5))],
                },
                "{bad}"
            );
        }
        let at_bound = "u".repeat(MAX_UID_BYTES);
        assert!(valid_uid(&at_bound));
        assert!(valid_uid("6f1c2b9e-4d5a-4e0f-9a8b-7c6d5e4f3a2b"));
    }

    #[tokio::test(start_paused = true)]
    async fn entries_that_are_invalid_or_not_kept_are_dropped_and_the_file_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(
            &path,
            r#"{"format": 1, "resources": [
                {"group": "", "version": "v1", "resource": "secrets"},
                {"group": "", "version": "v1", "resource": "../../x"},
                {"group": "", "version": "v1", "resource": "pods"}]}"#,
        )
        .unwrap();
        let (file, loaded) = StateFile::open(path.clone(), |g| g.resource != "secrets").unwrap();
        assert_eq!(loaded, vec![(gvr("", "v1", "pods"), None)]);
        let mut saved = file.saved.subscribe();
        saved.wait_for(|g| *g > 0).await.unwrap();
        assert_eq!(read(&path).unwrap(), vec![gvr("", "v1", "pods")]);
    }

    #[tokio::test]
    async fn a_broken_file_is_ignored_and_a_missing_directory_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        for (contents, error) in [
            ("not json".to_string(), "is not one of watchgate's"),
            (
                r#"{"format": 2, "resources": []}"#.to_string(),
                "has format 2",
            ),
            (" ".repeat(MAX_FILE_BYTES as usize + 1), "is over"),
        ] {
            std::fs::write(&path, &contents).unwrap();
            let err = read(&path).unwrap_err().to_string();
            assert!(err.contains(error), "{err}");
            let (_file, loaded) = open(&path);
            assert!(loaded.is_empty());
        }
        let err = StateFile::open(dir.path().join("nowhere/state.json"), |_| true)
            .err()
            .unwrap();
        assert!(matches!(err, StateFileError::NoDirectory { .. }), "{err}");
        // A directory where the file should be cannot be read: a misconfiguration too.
        let err = StateFile::open(dir.path().to_path_buf(), |_| true)
            .err()
            .unwrap();
        assert!(matches!(err, StateFileError::Read { .. }), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_max_resources_are_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let (file, _) = open(&dir.path().join("state.json"));
        for i in 0..MAX_RESOURCES + 10 {
            file.record(gvr("", "v1", &format!("r{i}")), u64::MAX);
        }
        assert_eq!(file.resources().len(), MAX_RESOURCES);
        file.save().await.unwrap();
        let bytes = std::fs::metadata(dir.path().join("state.json"))
            .unwrap()
            .len();
        assert!(bytes < MAX_FILE_BYTES, "{bytes}");
    }
}

//! The registry of resource caches: one per (group, version, resource), started on the
//! first request that could be served from cache. Concurrent first requests share one
//! start, and wait for it: a request for a resource whose cache has not synced yet joins
//! that sync (discovery, then one list or watch-list) for up to `--cache-sync-wait`
//! ([`Registry::cache_for`]), so a herd on a cold gateway costs the upstream one read per
//! resource, not one per request. Past the bound, or when the cache cannot be built, it is
//! forwarded.

use std::sync::Arc;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::budget::{BudgetConfig, ByteBudget, OverBudget};
use super::consistency::ConsistencyCheck;
use super::demand::Demands;
use super::discovery::Discovery;
use super::forward::Forward;
use super::fresh::{ConsistentReads, Freshness};
use super::identity::ClusterIdentity;
use super::reflector::{Backoff, Reflector, ReflectorConfig, ReflectorStats};
use super::store::Store;
use super::warm::{Gvr, StateFile, StateFileError, WarmConfig, WarmStatus, WarmUp};
use super::writes::WriteFences;
use crate::model::resource::ResourceInfo;
use crate::upstream::Upstream;

/// Which resources may be cached.
#[derive(Debug, Clone, Default)]
pub struct CachePolicy {
    /// Resources to start caching at start-up (`pods`, `deployments.apps`, …).
    pub prewarm: Vec<String>,
    /// Resources never cached (`secrets`, …); their requests are always forwarded.
    pub exclude: Vec<String>,
}

impl CachePolicy {
    fn excludes(&self, group: &str, resource: &str) -> bool {
        self.exclude.iter().any(|e| names(e, group, resource))
    }
}

/// `pods` names the core (or any group's) pods; `deployments.apps` names one group's.
pub fn names(spec: &str, group: &str, resource: &str) -> bool {
    match spec.split_once('.') {
        None => spec == resource,
        Some((r, g)) => r == resource && g == group,
    }
}

/// One resource type's cache: its store, its sync state and its reflector task.
pub struct ResourceCache {
    pub info: Arc<ResourceInfo>,
    /// The type's protobuf messages, and whether its objects encode.
    pub proto: Arc<crate::model::proto_form::ProtoForm>,
    pub store: Arc<Store>,
    pub stats: Arc<ReflectorStats>,
    /// Consistent reads: the probes and re-syncs that prove this cache fresh.
    pub fresh: Arc<Freshness>,
    /// The periodic (and on-demand) comparison with the upstream.
    pub consistency: Arc<ConsistencyCheck>,
    synced: watch::Receiver<bool>,
    task: JoinHandle<()>,
    /// The periodic consistency check (`None`: `--cache-consistency-check-interval=0`).
    checker: Option<JoinHandle<()>>,
}

impl ResourceCache {
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits until the first list has completed.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.clone();
        let _ = rx.wait_for(|s| *s).await;
    }
}

impl ResourceCache {
    /// Stops the reflector and the consistency check.
    fn stop(&self) {
        self.task.abort();
        if let Some(c) = &self.checker {
            c.abort();
        }
    }
}

impl Drop for ResourceCache {
    fn drop(&mut self) {
        self.stop();
    }
}

enum Slot {
    /// Discovery is running for this resource.
    Starting,
    Ready(Arc<ResourceCache>),
    /// The upstream does not serve it as a listable, watchable resource.
    NotCacheable,
    /// Dropped for its size (the byte budget): forwarded until `retry_after` has passed,
    /// then a request may start caching it again.
    Dropped(DroppedCache),
}

/// A resource not cached because it does not fit the byte budget.
#[derive(Clone)]
pub struct DroppedCache {
    pub info: Arc<ResourceInfo>,
    pub why: OverBudget,
    pub at: std::time::Instant,
}

type Key = (String, String, String);

/// How often a request waiting on a cold cache checks whether its reflector started
/// backing off (a failing upstream: then it is forwarded rather than kept waiting).
const BACKOFF_CHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// All resource caches of one gateway.
pub struct Registry {
    upstream: Upstream,
    discovery: Discovery,
    policy: CachePolicy,
    watch: crate::watch::WatchConfig,
    slots: DashMap<Key, Slot>,
    reflector: ReflectorConfig,
    consistent_reads: ConsistentReads,
    /// Read-your-writes: the newest write acknowledged through the gateway, per resource.
    writes: WriteFences,
    /// Set by [`Registry::shutdown_watches`]: caches started later begin shut down too.
    draining: std::sync::atomic::AtomicBool,
    budget: Arc<ByteBudget>,
    /// Times each resource was dropped for its size, by reason (a metric).
    drops: DashMap<(String, String, &'static str), u64>,
    /// The state file (`--cache-state-file`), set once before [`Registry::prewarm`]; a
    /// `OnceLock` so that the constructors' many callers need not know about it.
    warm: std::sync::OnceLock<WarmUp>,
    /// Bumped whenever a slot changes, for requests waiting on a cold cache.
    slots_changed: watch::Sender<u64>,
    /// How long a request waits for a cache that has not synced (`--cache-sync-wait`).
    sync_wait: std::sync::atomic::AtomicU64,
    /// Times every cache was dropped because the upstream went back (a metric).
    resets: std::sync::atomic::AtomicU64,
    /// How often each cache is compared with the upstream, in milliseconds; 0 never
    /// (`--cache-consistency-check-interval`). Read when a cache starts.
    consistency_interval: std::sync::atomic::AtomicU64,
    /// The cluster the caches are built from (`kube-system`'s uid).
    identity: Arc<ClusterIdentity>,
}

/// The default of `--cache-sync-wait`: long enough for the first sync of a large resource
/// under a herd, short enough that a client whose resource cannot be cached is not kept
/// waiting long (then it is forwarded).
pub const DEFAULT_SYNC_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What a slot holds, for a waiting request.
/// A resource's standing in the registry ([`Registry::lookup`]).
pub enum Lookup {
    /// `--cache-exclude`.
    Excluded,
    /// Discovery found it not listable and watchable.
    NotCacheable,
    /// Dropped for its size, not yet due for another try.
    OverBudget,
    /// Not started, or discovery or the first sync under way.
    NotYet,
    /// Its cache (synced or not).
    Ready(Arc<ResourceCache>),
}

enum SlotState {
    Absent,
    Starting,
    Ready(Arc<ResourceCache>),
    Forward(Forward),
}

impl Registry {
    pub fn new(
        upstream: Upstream,
        policy: CachePolicy,
        watch: crate::watch::WatchConfig,
    ) -> Arc<Self> {
        Self::with_config(
            upstream,
            policy,
            watch,
            ReflectorConfig::default(),
            BudgetConfig::default(),
            ConsistentReads::default(),
        )
    }

    /// A registry whose reflectors use `reflector` (watch-list or paged list), whose caches
    /// share the byte budget `budget`, and whose consistent reads are answered as
    /// `consistent_reads` says.
    pub fn with_config(
        upstream: Upstream,
        policy: CachePolicy,
        watch: crate::watch::WatchConfig,
        reflector: ReflectorConfig,
        budget: BudgetConfig,
        consistent_reads: ConsistentReads,
    ) -> Arc<Self> {
        Arc::new(Self {
            budget: Arc::new(ByteBudget::new(budget)),
            drops: DashMap::new(),
            discovery: Discovery::new(upstream.clone()),
            identity: Arc::new(ClusterIdentity::new(upstream.clone())),
            upstream,
            policy,
            watch,
            slots: DashMap::new(),
            reflector,
            consistent_reads,
            writes: WriteFences::default(),
            draining: Default::default(),
            slots_changed: watch::channel(0).0,
            sync_wait: std::sync::atomic::AtomicU64::new(DEFAULT_SYNC_WAIT.as_millis() as u64),
            warm: Default::default(),
            resets: Default::default(),
            consistency_interval: std::sync::atomic::AtomicU64::new(
                super::consistency::DEFAULT_INTERVAL.as_millis() as u64,
            ),
        })
    }

    /// How often each cache started from now on is compared with the upstream
    /// (`--cache-consistency-check-interval`; zero turns the periodic check off, an
    /// operator's check still runs).
    pub fn set_consistency_interval(&self, every: std::time::Duration) {
        self.consistency_interval.store(
            every.as_millis() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// How long a request waits for a cache that has not synced yet, before it is
    /// forwarded (`--cache-sync-wait`; zero forwards at once, as before).
    pub fn set_sync_wait(&self, wait: std::time::Duration) {
        self.sync_wait.store(
            wait.as_millis() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    pub fn sync_wait(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.sync_wait.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Changes a slot and wakes the requests waiting on cold caches.
    fn set_slot(&self, key: Key, slot: Slot) -> Option<Slot> {
        let old = self.slots.insert(key, slot);
        self.slots_changed.send_modify(|n| *n += 1);
        old
    }

    fn forget_slot(&self, key: &Key) {
        self.slots.remove(key);
        self.slots_changed.send_modify(|n| *n += 1);
    }

    fn slot_state(&self, key: &Key) -> SlotState {
        match self.slots.get(key).as_deref() {
            None => SlotState::Absent,
            Some(Slot::Starting) => SlotState::Starting,
            Some(Slot::Ready(c)) => SlotState::Ready(c.clone()),
            Some(Slot::NotCacheable) => SlotState::Forward(Forward::NotCacheable),
            Some(Slot::Dropped(_)) => SlotState::Forward(Forward::OverBudget),
        }
    }

    /// What the registry knows of a resource, for the routing decision
    /// (`serve::route::Standing`), without starting anything. A resource dropped for its
    /// size whose time for another try has come is [`Lookup::NotYet`]: the request that
    /// routes to it starts it again (`cache_for`).
    pub fn lookup(&self, group: &str, version: &str, resource: &str) -> Lookup {
        if self.policy.excludes(group, resource) {
            return Lookup::Excluded;
        }
        let key = (group.to_string(), version.to_string(), resource.to_string());
        match self.slots.get(&key).as_deref() {
            None | Some(Slot::Starting) => Lookup::NotYet,
            Some(Slot::Ready(c)) => Lookup::Ready(c.clone()),
            Some(Slot::NotCacheable) => Lookup::NotCacheable,
            Some(Slot::Dropped(d)) if d.at.elapsed() >= self.budget.config.retry_after => {
                Lookup::NotYet
            }
            Some(Slot::Dropped(_)) => Lookup::OverBudget,
        }
    }

    /// A read forwarded as a lone read (`cache::fresh`) has its answer.
    pub fn lone_read_done(&self, req: &crate::request::Parsed) {
        if let crate::request::ApiPath::Resource(rp) = &req.api.path {
            if let Some(c) = self.get(&rp.group, &rp.version, &rp.resource) {
                c.fresh.lone_read_done();
            }
        }
    }

    /// The synced cache of a resource, starting it if needed and waiting for its sync up
    /// to `bound` (shared by every request that arrives meanwhile), or why the request is
    /// forwarded instead: excluded, not cacheable, over the byte budget, or not synced in
    /// time (a reflector that backs off after a failure is not waited for: the upstream
    /// is failing, and the forwarded request gets its answer at once).
    pub async fn cache_for(
        self: &Arc<Self>,
        group: &str,
        version: &str,
        resource: &str,
        bound: std::time::Duration,
    ) -> Result<Arc<ResourceCache>, Forward> {
        if self.policy.excludes(group, resource) {
            return Err(Forward::Excluded);
        }
        self.ensure_started(group, version, resource);
        let key = (group.to_string(), version.to_string(), resource.to_string());
        let deadline = tokio::time::Instant::now() + bound;
        let mut changed = self.slots_changed.subscribe();
        loop {
            changed.borrow_and_update();
            let waiting = match self.slot_state(&key) {
                SlotState::Ready(c) if c.is_synced() => return Ok(c),
                SlotState::Ready(c) => {
                    if c.stats
                        .backing_off
                        .load(std::sync::atomic::Ordering::Relaxed)
                        != 0
                    {
                        return Err(Forward::NotSynced);
                    }
                    Some(c)
                }
                SlotState::Starting => None,
                // Discovery failed (the slot was forgotten so that a later request tries
                // again): the upstream is failing.
                SlotState::Absent => return Err(Forward::NotSynced),
                SlotState::Forward(why) => return Err(why),
            };
            // Wakes on the sync, a slot change (discovery done, a drop), the bound, or a
            // tick to notice a reflector that started backing off.
            let synced = async {
                match &waiting {
                    Some(c) => c.wait_synced().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = synced => {}
                _ = changed.changed() => {}
                _ = tokio::time::sleep(BACKOFF_CHECK) => {}
                _ = tokio::time::sleep_until(deadline) => return Err(Forward::NotSynced),
            }
        }
    }

    /// Where reads with no resourceVersion are answered (`--consistent-reads`).
    pub fn consistent_reads(&self) -> ConsistentReads {
        self.consistent_reads
    }

    /// The write fences (read-your-writes, `cache::writes`).
    pub fn writes(&self) -> &WriteFences {
        &self.writes
    }

    /// The cache of a resource, if it exists (synced or not).
    pub fn get(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceCache>> {
        let key = (group.to_string(), version.to_string(), resource.to_string());
        match self.slots.get(&key).as_deref() {
            Some(Slot::Ready(c)) => Some(c.clone()),
            _ => None,
        }
    }

    /// Starts caching a resource unless it is excluded, started already, or known not to
    /// be cacheable. Returns at once; discovery and the first list run in the background.
    pub fn ensure_started(self: &Arc<Self>, group: &str, version: &str, resource: &str) {
        if self.policy.excludes(group, resource) {
            return;
        }
        let key = (group.to_string(), version.to_string(), resource.to_string());
        match self.slots.entry(key.clone()) {
            // A resource dropped for its size is tried again once its time has come.
            Entry::Occupied(mut o) => match o.get() {
                Slot::Dropped(d) if d.at.elapsed() >= self.budget.config.retry_after => {
                    o.insert(Slot::Starting);
                }
                _ => return,
            },
            Entry::Vacant(v) => {
                v.insert(Slot::Starting);
            }
        }
        let identity = self.identity.clone();
        tokio::spawn(async move { identity.learn().await });
        let this = self.clone();
        tokio::spawn(async move {
            let (g, v, r) = &key;
            // A `--cache` or state-file resource keeps retrying in the background, so that
            // readiness follows the upstream's recovery without waiting for a client's request.
            let prewarmed = this.policy.prewarm.iter().any(|p| names(p, g, r))
                || this.warm.get().is_some_and(|w| {
                    w.resources
                        .iter()
                        .any(|x| x.group == *g && x.version == *v && x.resource == *r)
                });
            let mut backoff = Backoff::default();
            loop {
                match this.discovery.resource(g, v, r).await {
                    Ok(Some(info)) => {
                        this.install(key, info);
                    }
                    Ok(None) => {
                        tracing::debug!(group = %g, version = %v, resource = %r, "not cacheable; forwarding");
                        // Not served (any more): the next start must not try it again.
                        if let Some(w) = this.warm.get() {
                            w.file.forget(&Gvr::new(g, v, r));
                        }
                        this.set_slot(key, Slot::NotCacheable);
                    }
                    Err(err) if prewarmed => {
                        let delay = backoff.next_delay();
                        tracing::warn!(group = %g, version = %v, resource = %r, error = %err, "discovery failed; retrying in {delay:.1?}");
                        tokio::time::sleep(delay).await;
                        continue;
                    }
                    Err(err) => {
                        // Forget the attempt so that a later request tries again.
                        tracing::warn!(group = %g, version = %v, resource = %r, error = %err, "discovery failed");
                        this.forget_slot(&key);
                    }
                }
                break;
            }
        });
    }

    /// Starts the cache of a discovered resource and makes it the slot's.
    fn install(self: &Arc<Self>, key: Key, info: Arc<ResourceInfo>) -> Arc<ResourceCache> {
        let cache = self.start_reflector(key.clone(), info);
        if let Some(w) = self.warm.get() {
            // Recorded once synced: a resource that cannot be listed is never remembered.
            // The receiver, not the cache, waits: a cache dropped meanwhile ends the wait.
            let (file, mut synced) = (w.file.clone(), cache.synced.clone());
            let store = cache.store.clone();
            let identity = self.identity.clone();
            let gvr = Gvr::new(&key.0, &key.1, &key.2);
            tokio::spawn(async move {
                if synced.wait_for(|s| *s).await.is_ok() {
                    note_cluster(&file, &identity);
                    file.record(gvr, store.resource_version());
                }
            });
        }
        // The reflector runs already: one whose first list was over the byte budget may
        // have dropped this very cache before this line (its `Dropped` slot names this
        // cache's `info`). That verdict stands; a `Ready` slot over it would hold a cache
        // whose reflector is gone, never synced (a state-file resource would then hold
        // readiness for the whole warm-up).
        let installed = match self.slots.entry(key) {
            Entry::Occupied(o) if matches!(o.get(), Slot::Dropped(d) if Arc::ptr_eq(&d.info, &cache.info)) => {
                false
            }
            Entry::Occupied(mut o) => {
                o.insert(Slot::Ready(cache.clone()));
                true
            }
            Entry::Vacant(v) => {
                v.insert(Slot::Ready(cache.clone()));
                true
            }
        };
        if installed {
            self.slots_changed.send_modify(|n| *n += 1);
        }
        // After the insert: a drain that began meanwhile either finds the cache in
        // `shutdown_watches` or its flag is visible here (the shard lock orders the two),
        // so no hub escapes the shutdown.
        if self.draining.load(std::sync::atomic::Ordering::Acquire) {
            cache.store.hub().shutdown();
        }
        cache
    }

    fn start_reflector(self: &Arc<Self>, key: Key, info: Arc<ResourceInfo>) -> Arc<ResourceCache> {
        // The first cache of a state-file resource resumes where the previous run's was.
        let resume = self
            .warm
            .get()
            .and_then(|w| w.take_resume(&Gvr::new(&key.0, &key.1, &key.2)));
        // The writer goes to the reflector alone; everyone else reads.
        let writer = Store::for_resource(&info, self.watch.clone());
        let store = writer.reader().clone();
        let stats = Arc::new(ReflectorStats::default());
        let (synced_tx, synced) = watch::channel(false);
        let demands = Arc::new(Demands::with_went_back(self.on_went_back(&store)));
        let fresh = Arc::new(Freshness::new(
            self.upstream.clone(),
            &info.collection_path(),
            store.clone(),
            stats.clone(),
            demands.clone(),
        ));
        let reflector = Reflector::new(
            info.clone(),
            self.upstream.clone(),
            writer,
            synced_tx,
            stats.clone(),
        )
        .with_config(self.reflector.clone())
        .with_resume_from(resume)
        .with_demands(demands)
        .with_identity(self.identity.clone())
        .with_budget(self.budget.clone(), self.on_drop(key, info.clone()));
        let task = tokio::spawn(reflector.run());
        let consistency = Arc::new(ConsistencyCheck::new(
            self.upstream.clone(),
            info.clone(),
            store.clone(),
            fresh.clone(),
            synced.clone(),
            self.identity.clone(),
        ));
        let every = self
            .consistency_interval
            .load(std::sync::atomic::Ordering::Relaxed);
        let checker = (every > 0).then(|| {
            tokio::spawn(
                consistency
                    .clone()
                    .run_every(std::time::Duration::from_millis(every)),
            )
        });
        Arc::new(ResourceCache {
            proto: Arc::new(crate::model::proto_form::ProtoForm::of(&info)),
            info,
            store,
            stats,
            fresh,
            consistency,
            synced,
            task,
            checker,
        })
    }

    /// What a reflector calls when its cache does not fit the byte budget: the slot forgets
    /// the cache (its memory goes with the last reader), and requests are forwarded.
    fn on_drop(self: &Arc<Self>, key: Key, info: Arc<ResourceInfo>) -> super::reflector::OnDrop {
        let registry = Arc::downgrade(self);
        Arc::new(move |why: OverBudget| {
            let Some(registry) = registry.upgrade() else {
                return;
            };
            *registry
                .drops
                .entry((info.group.clone(), info.resource.clone(), why.reason()))
                .or_default() += 1;
            if let Some(w) = registry.warm.get() {
                w.file.forget(&Gvr::new(&key.0, &key.1, &key.2));
            }
            let dropped = Slot::Dropped(DroppedCache {
                info: info.clone(),
                why,
                at: std::time::Instant::now(),
            });
            // Dropped outside the map's lock: the old cache's drop aborts its reflector.
            let old = registry.set_slot(key.clone(), dropped);
            drop(old);
        })
    }

    /// What a cache calls when its upstream's resourceVersions went back (a restored
    /// etcd, another cluster behind the same address): a restore affects every resource,
    /// so every cache is reset, once; a signal from a cache already replaced is ignored.
    fn on_went_back(self: &Arc<Self>, store: &Arc<Store>) -> super::demand::OnWentBack {
        let (registry, store) = (Arc::downgrade(self), Arc::downgrade(store));
        Arc::new(move || {
            if let (Some(registry), Some(store)) = (registry.upgrade(), store.upgrade()) {
                registry.reset(&store);
            }
        })
    }

    /// Drops every cache and starts it again, as kube-apiserver's caches would be rebuilt
    /// after a restore: each old cache's watches end with an ERROR 410 (their clients
    /// relist), its reflector stops, and requests wait for the new cache's first sync
    /// (`cache_for`) or are forwarded, never answered from the old cluster's objects.
    /// `noticed_by` is the store of the cache that noticed; none if it is gone already.
    fn reset(self: &Arc<Self>, noticed_by: &Arc<Store>) {
        let still_current = self
            .slots
            .iter()
            .any(|e| matches!(e.value(), Slot::Ready(c) if Arc::ptr_eq(&c.store, noticed_by)));
        if !still_current {
            return;
        }
        let keys: Vec<Key> = self
            .slots
            .iter()
            .filter(|e| matches!(e.value(), Slot::Ready(_)))
            .map(|e| e.key().clone())
            .collect();
        let mut old = Vec::with_capacity(keys.len());
        for key in &keys {
            // Removed one by one, each under its shard's lock: a cache installed meanwhile
            // is new, and stays.
            if let Some((_, Slot::Ready(c))) = self
                .slots
                .remove_if(key, |_, s| matches!(s, Slot::Ready(_)))
            {
                old.push(c);
            }
        }
        if old.is_empty() {
            return;
        }
        self.resets
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // The old cluster's writes must not fence reads of the new one, and the new
        // caches' identity is whichever cluster answers now.
        self.writes.clear();
        self.identity.forget();
        // What was learnt of the old cluster's resources goes too: its discovery, which
        // resources it did not serve, which did not fit the budget. Their next request
        // asks the new one.
        self.discovery.forget();
        self.slots
            .retain(|_, s| !matches!(s, Slot::NotCacheable | Slot::Dropped(_)));
        tracing::warn!(
            caches = old.len(),
            "the upstream's resourceVersions went back (a restored or replaced cluster): every cache is dropped and rebuilt, and its watches end with 410"
        );
        for c in &old {
            c.stop();
            c.store.hub().reset();
        }
        self.slots_changed.send_modify(|n| *n += 1);
        for (g, v, r) in keys {
            self.ensure_started(&g, &v, &r);
        }
    }

    /// How many times every cache was dropped because the upstream went back.
    pub fn resets(&self) -> u64 {
        self.resets.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The caches' byte budget.
    pub fn budget(&self) -> &ByteBudget {
        &self.budget
    }

    /// The resources not cached now because they did not fit the byte budget.
    pub fn dropped(&self) -> Vec<DroppedCache> {
        self.slots
            .iter()
            .filter_map(|e| match e.value() {
                Slot::Dropped(d) => Some(d.clone()),
                _ => None,
            })
            .collect()
    }

    /// How many times each (group, resource) was dropped for its size, by reason.
    pub fn drop_counts(&self) -> Vec<((String, String, &'static str), u64)> {
        self.drops
            .iter()
            .map(|e| (e.key().clone(), *e.value()))
            .collect()
    }

    /// Reads the state file (`--cache-state-file`): [`Registry::prewarm`] then starts its
    /// resources too, and caches that sync from now on are recorded in it. Excluded
    /// resources are dropped from it. Call once, before `prewarm`.
    pub fn open_state_file(&self, cfg: &WarmConfig) -> Result<(), StateFileError> {
        let (file, entries) = StateFile::open(cfg.state_file.clone(), |g| {
            !self.policy.excludes(&g.group, &g.resource)
        })?;
        // The resourceVersions are resumed from only if the upstream is still this cluster
        // (`ClusterIdentity::may_resume`, asked by each reflector before its backfill).
        if let Some(uid) = file.cluster() {
            self.identity.set_recorded(uid);
        }
        let resume = entries
            .iter()
            .filter_map(|(g, rv)| Some((g.clone(), (*rv)?)))
            .collect();
        let resources: Vec<Gvr> = entries.into_iter().map(|(g, _)| g).collect();
        if !resources.is_empty() {
            tracing::info!(count = resources.len(), file = %cfg.state_file.display(), "starting the caches of the cache state file");
        }
        let warm = WarmUp {
            file,
            resources,
            resume: std::sync::Mutex::new(resume),
            deadline: tokio::time::Instant::now() + cfg.timeout,
            timeout: cfg.timeout,
        };
        if self.warm.set(warm).is_err() {
            tracing::warn!("the cache state file was opened twice; the first one is kept");
        }
        Ok(())
    }

    /// The state file's resources at start-up, where each stands, and the warm-up:
    /// readiness waits for them until its end (docs/operations.md, "Readiness").
    pub fn warm_status(&self) -> Option<(Vec<(Gvr, WarmStatus)>, &WarmUp)> {
        let warm = self.warm.get()?;
        let status = warm
            .resources
            .iter()
            .map(|g| {
                let key = (g.group.clone(), g.version.clone(), g.resource.clone());
                let status = match self.slots.get(&key).as_deref() {
                    None | Some(Slot::Starting) => WarmStatus::NotStarted,
                    Some(Slot::Ready(c)) if c.is_synced() => WarmStatus::Synced,
                    Some(Slot::Ready(_)) => WarmStatus::NotSynced,
                    Some(Slot::NotCacheable) => WarmStatus::NotServed,
                    Some(Slot::Dropped(d)) => WarmStatus::NotCached(d.why),
                };
                (g.clone(), status)
            })
            .collect();
        Some((status, warm))
    }

    /// Copies each synced cache's resourceVersion into the state file (saved with its next
    /// write). Called every [`super::warm::PROGRESS_EVERY`] and at a drain.
    fn note_progress(&self, file: &StateFile) {
        note_cluster(file, &self.identity);
        for c in self.caches() {
            if c.is_synced() {
                let gvr = Gvr::new(&c.info.group, &c.info.version, &c.info.resource);
                file.progress(&gvr, c.store.resource_version());
            }
        }
    }

    /// Keeps the state file's resourceVersions near the caches' while the gateway runs:
    /// it may be killed without a drain, and the next start resumes from what the file
    /// says. Ends with the registry.
    fn spawn_progress(self: &Arc<Self>) {
        let registry = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(super::warm::PROGRESS_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(r) = registry.upgrade() else {
                    return;
                };
                if let Some(w) = r.warm.get() {
                    r.note_progress(&w.file);
                }
            }
        });
    }

    /// Saves the state file now if it changed (a drain: the debounced save may not come),
    /// with the caches' resourceVersions as they are now.
    pub async fn save_state_file(&self) {
        if let Some(w) = self.warm.get() {
            self.note_progress(&w.file);
            if let Err(e) = w.file.save().await {
                tracing::warn!(error = %e, "the cache state file was not saved");
            }
        }
    }

    /// Starts the `--cache` resources and those of the state file. Names without a group
    /// are looked up in the core group; `name.group` names use the group's preferred
    /// version from discovery. State-file entries name their version.
    pub fn prewarm(self: &Arc<Self>) {
        if let Some(w) = self.warm.get() {
            self.spawn_progress();
            for g in &w.resources {
                self.ensure_started(&g.group, &g.version, &g.resource);
            }
        }
        for spec in self.policy.prewarm.clone() {
            match spec.split_once('.') {
                None => self.ensure_started("", "v1", &spec),
                Some((resource, group)) => {
                    let this = self.clone();
                    let (resource, group) = (resource.to_string(), group.to_string());
                    tokio::spawn(async move {
                        // Retried until the upstream names a version: readiness waits for
                        // this resource, so giving up would leave the gateway unready.
                        let mut backoff = Backoff::default();
                        loop {
                            if let Some(version) = this.preferred_version(&group).await {
                                this.ensure_started(&group, &version, &resource);
                                break;
                            }
                            let delay = backoff.next_delay();
                            tracing::warn!(group = %group, "--cache: group discovery failed or the group is not served upstream; retrying in {delay:.1?}");
                            tokio::time::sleep(delay).await;
                        }
                    });
                }
            }
        }
    }

    async fn preferred_version(&self, group: &str) -> Option<String> {
        use http_body_util::BodyExt;
        let req = http::Request::get(format!("/apis/{group}"))
            .header(http::header::ACCEPT, "application/json")
            .body(crate::body::empty())
            .ok()?;
        let resp = self.upstream.send(req).await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let bytes = http_body_util::Limited::new(resp.into_body(), 1 << 20)
            .collect()
            .await
            .ok()?
            .to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        v.pointer("/preferredVersion/version")
            .and_then(|v| v.as_str())
            .map(str::to_string)
    }

    /// The `--cache` resources, as given; readiness waits for each of them.
    pub fn prewarm_specs(&self) -> &[String] {
        &self.policy.prewarm
    }

    /// Every started cache, for readiness and metrics.
    /// The gateway is draining: every watch served from a cache ends at its next event
    /// boundary, and watches asked for from now on end at once.
    pub fn shutdown_watches(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::Release);
        for cache in self.caches() {
            cache.store.hub().shutdown();
        }
    }

    pub fn caches(&self) -> Vec<Arc<ResourceCache>> {
        self.slots
            .iter()
            .filter_map(|e| match e.value() {
                Slot::Ready(c) => Some(c.clone()),
                _ => None,
            })
            .collect()
    }
}

/// Names the caches' cluster in the state file, once it is known, before their
/// resourceVersions are copied there: the file's resourceVersions must be the named
/// cluster's, and naming another one drops the old one's (`StateFile::set_cluster`).
fn note_cluster(file: &StateFile, identity: &ClusterIdentity) {
    if let Some(uid) = identity.uid() {
        file.set_cluster(&uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_with_and_without_group() {
        assert!(names("pods", "", "pods"));
        assert!(names("deployments.apps", "apps", "deployments"));
        assert!(!names("deployments.apps", "extensions", "deployments"));
        assert!(!names("pods", "", "nodes"));
        let p = CachePolicy {
            prewarm: vec![],
            exclude: vec!["secrets".into()],
        };
        assert!(p.excludes("", "secrets"));
        assert!(!p.excludes("", "configmaps"));
    }
    #[tokio::test]
    async fn a_cache_installed_after_the_drain_began_starts_shut_down() {
        // An unreachable upstream: the reflector never syncs, which does not matter here.
        let upstream = crate::upstream::Upstream::new(
            &kube::Config::new("http://127.0.0.1:9".parse().unwrap()),
            std::time::Duration::from_secs(1),
        )
        .unwrap();
        let reg = Registry::new(upstream, CachePolicy::default(), Default::default());
        let key = (String::new(), "v1".to_string(), "pods".to_string());
        // Discovery is still running when the drain begins: the walk finds no cache.
        reg.slots.insert(key.clone(), Slot::Starting);
        reg.shutdown_watches();
        let info = Arc::new(ResourceInfo {
            group: String::new(),
            version: "v1".into(),
            resource: "pods".into(),
            kind: "Pod".into(),
            namespaced: true,
            field_labels: vec![],
        });
        let cache = reg.install(key, info);
        assert!(
            cache.store.hub().is_shutting_down(),
            "watches of a cache that appeared during the drain would never end"
        );
    }
}

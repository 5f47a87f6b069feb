//! A bounded cache of decisions with a time to live per entry, and one fetch per key at a
//! time: what kube-apiserver's cached token authenticator and its webhook authorizer keep
//! (an expiring map, with `singleflight` in front of the webhook).
//!
//! Why single-flight: a gateway restart or a deploy brings hundreds of clients with the
//! same token at once; without it each would send its own TokenReview. Concurrent callers
//! of one key wait for the first caller's fetch and share its result. If that caller goes
//! away (its client disconnected), the next waiter fetches in its place (tokio's
//! `OnceCell` semantics), so an abandoned fetch never leaves a key stuck.
//!
//! Why bounded: keys come from clients (tokens, request attributes), so a client spraying
//! made-up tokens must not grow memory. Past `max` entries, expired entries are dropped
//! first, then arbitrary ones (at worst a valid decision is fetched again).
//!
//! Errors are not cached (the next request retries), as `cacheErrs=false` in kube.

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use tokio::sync::OnceCell;

type Fetched<V, E> = Result<(V, Instant), E>;

enum Slot<V, E> {
    Ready { value: V, expires: Instant },
    Pending(Arc<OnceCell<Fetched<V, E>>>),
}

pub struct TtlCache<K, V, E> {
    map: DashMap<K, Slot<V, E>>,
    max: usize,
}

impl<K, V, E> TtlCache<K, V, E>
where
    K: Hash + Eq + Clone,
    V: Clone,
    E: Clone,
{
    pub fn new(max: usize) -> Self {
        Self {
            map: DashMap::new(),
            max: max.max(1),
        }
    }

    /// The live entry for `key`, if any (no fetch).
    pub fn get(&self, key: &K) -> Option<V> {
        match &*self.map.get(key)? {
            Slot::Ready { value, expires } if *expires > Instant::now() => Some(value.clone()),
            _ => None,
        }
    }

    /// Entries held (ready or being fetched).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The cached value of `key`, or the result of `fetch`, which also says how long its
    /// value may be kept (a zero TTL is not kept).
    pub async fn get_or_fetch<F, Fut>(&self, key: &K, fetch: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(V, Duration), E>>,
    {
        let now = Instant::now();
        let cell = match self.map.get(key).as_deref() {
            Some(Slot::Ready { value, expires }) if *expires > now => return Ok(value.clone()),
            Some(Slot::Pending(cell)) => Some(cell.clone()),
            _ => None,
        };
        let cell = match cell {
            Some(cell) => cell,
            None => {
                if self.map.len() >= self.max {
                    self.evict(now);
                }
                let mut slot = self.map.entry(key.clone()).or_insert_with(pending);
                match &*slot {
                    Slot::Ready { value, expires } if *expires > now => return Ok(value.clone()),
                    Slot::Ready { .. } => {
                        *slot = pending();
                    }
                    Slot::Pending(_) => {}
                }
                match &*slot {
                    Slot::Pending(cell) => cell.clone(),
                    Slot::Ready { .. } => unreachable!("just replaced"),
                }
            }
        };
        let fetched = cell
            .get_or_init(|| async {
                fetch()
                    .await
                    .map(|(value, ttl)| (value, Instant::now() + ttl))
            })
            .await
            .clone();
        // Whoever gets here first settles the slot, if it still holds this fetch.
        let settle = |slot: &Slot<V, E>| matches!(slot, Slot::Pending(c) if Arc::ptr_eq(c, &cell));
        match &fetched {
            Ok((value, expires)) => {
                if let Some(mut slot) = self.map.get_mut(key) {
                    if settle(&slot) {
                        *slot = Slot::Ready {
                            value: value.clone(),
                            expires: *expires,
                        };
                    }
                }
            }
            Err(_) => {
                self.map.remove_if(key, |_, slot| settle(slot));
            }
        }
        fetched.map(|(value, _)| value)
    }

    /// Makes room: expired entries go first; if that is not enough, an eighth of the
    /// entries (whichever the map yields first) go too.
    fn evict(&self, now: Instant) {
        self.map
            .retain(|_, slot| !matches!(slot, Slot::Ready { expires, .. } if *expires <= now));
        if self.map.len() >= self.max {
            let excess = self.map.len() + 1 - self.max + self.max / 8;
            let victims: Vec<K> = self
                .map
                .iter()
                .filter(|e| matches!(e.value(), Slot::Ready { .. }))
                .take(excess)
                .map(|e| e.key().clone())
                .collect();
            for k in victims {
                self.map.remove(&k);
            }
        }
    }
}

fn pending<V, E>() -> Slot<V, E> {
    Slot::Pending(Arc::new(OnceCell::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn concurrent_callers_share_one_fetch() {
        let cache: Arc<TtlCache<&str, u32, String>> = Arc::new(TtlCache::new(10));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (release, gate) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let (cache, fetches, mut gate) = (cache.clone(), fetches.clone(), gate.clone());
            tasks.push(tokio::spawn(async move {
                cache
                    .get_or_fetch(&"k", || async move {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        let _ = gate.wait_for(|open| *open).await;
                        Ok((7, Duration::from_secs(60)))
                    })
                    .await
            }));
        }
        tokio::task::yield_now().await;
        release.send(true).unwrap();
        for t in tasks {
            assert_eq!(t.await.unwrap(), Ok(7));
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        assert_eq!(cache.get(&"k"), Some(7));
    }

    #[tokio::test(start_paused = true)]
    async fn entries_expire_and_errors_are_not_kept() {
        let cache: TtlCache<u8, u32, String> = TtlCache::new(10);
        let v = cache
            .get_or_fetch(&1, || async { Ok((1, Duration::from_secs(10))) })
            .await;
        assert_eq!(v, Ok(1));
        // Cached: the second fetch is not called.
        let v = cache
            .get_or_fetch(&1, || async { Ok((2, Duration::from_secs(10))) })
            .await;
        assert_eq!(v, Ok(1));
        // Errors are returned, not kept.
        let e = cache
            .get_or_fetch(&2, || async {
                Err::<(u32, Duration), _>("down".to_string())
            })
            .await;
        assert_eq!(e, Err("down".to_string()));
        assert_eq!(cache.get(&2), None);
        let v = cache
            .get_or_fetch(&2, || async { Ok((5, Duration::from_secs(10))) })
            .await;
        assert_eq!(v, Ok(5));
    }

    #[test]
    fn expiry_is_by_instant() {
        // std Instant is not paused by tokio: check expiry with a zero TTL.
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let cache: TtlCache<u8, u32, String> = TtlCache::new(10);
            cache
                .get_or_fetch(&1, || async { Ok((1, Duration::ZERO)) })
                .await
                .unwrap();
            assert_eq!(cache.get(&1), None, "a zero TTL is not kept");
            let v = cache
                .get_or_fetch(&1, || async { Ok((2, Duration::from_secs(60))) })
                .await;
            assert_eq!(v, Ok(2));
        });
    }

    #[tokio::test]
    async fn the_cache_stays_bounded() {
        let cache: TtlCache<u32, u32, String> = TtlCache::new(64);
        for k in 0..10_000 {
            cache
                .get_or_fetch(&k, || async move { Ok((k, Duration::from_secs(600))) })
                .await
                .unwrap();
            assert!(cache.len() <= 64, "{} entries", cache.len());
        }
    }
}

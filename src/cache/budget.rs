//! The caches' byte budget (`--cache-max-bytes`, `--cache-max-resource-bytes`; see
//! docs/cache.md, "Byte budget").
//!
//! Each resource's cache counts what its current snapshot holds (`Snapshot::heap`: every
//! object's JSON, parsed header and map entry). A reflector asks the budget before it
//! installs a list or applies an event; a resource that would go over its own bound, or
//! take the caches' total over theirs, is not cached (or stops being cached) and its
//! requests are forwarded. The watch history has its own budget
//! (`--watch-history-bytes`), per resource, on top of this one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The limits, as configured (0 = none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetConfig {
    /// All caches together (`--cache-max-bytes`).
    pub max_bytes: usize,
    /// Any one resource's cache (`--cache-max-resource-bytes`).
    pub max_resource_bytes: usize,
    /// How long a resource dropped for its size stays uncached before a request may start
    /// caching it again.
    pub retry_after: Duration,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            max_bytes: 0,
            max_resource_bytes: 0,
            retry_after: Duration::from_secs(600),
        }
    }
}

/// Why a resource is not cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OverBudget {
    #[error("its cache would hold {} bytes, over --cache-max-resource-bytes={limit}", crate::logging::thousands(*needs as u64))]
    Resource { needs: usize, limit: usize },
    #[error("the caches would hold {} bytes together, over --cache-max-bytes={limit}", crate::logging::thousands(*needs as u64))]
    Total { needs: usize, limit: usize },
}

impl OverBudget {
    /// The metrics label.
    pub fn reason(&self) -> &'static str {
        match self {
            OverBudget::Resource { .. } => "resource_budget",
            OverBudget::Total { .. } => "total_budget",
        }
    }
}

/// The shared budget: the limits and what all caches hold together.
#[derive(Debug, Default)]
pub struct ByteBudget {
    pub config: BudgetConfig,
    used: AtomicUsize,
}

impl ByteBudget {
    pub fn new(config: BudgetConfig) -> Self {
        Self {
            config,
            used: AtomicUsize::new(0),
        }
    }

    /// What all caches hold together, as committed.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn fits(&self, used: usize, held: usize, wanted: usize) -> Result<(), OverBudget> {
        let c = &self.config;
        if c.max_resource_bytes > 0 && wanted > c.max_resource_bytes {
            return Err(OverBudget::Resource {
                needs: wanted,
                limit: c.max_resource_bytes,
            });
        }
        let total = used.saturating_sub(held) + wanted;
        if c.max_bytes > 0 && total > c.max_bytes {
            return Err(OverBudget::Total {
                needs: total,
                limit: c.max_bytes,
            });
        }
        Ok(())
    }

    /// Whether a resource whose cache holds `held` (committed) could hold `wanted`
    /// instead: asked while a list is being read, before anything is committed.
    pub fn check(&self, held: usize, wanted: usize) -> Result<(), OverBudget> {
        if wanted <= held {
            return Ok(());
        }
        self.fits(self.used(), held, wanted)
    }

    /// Moves a resource's holding from `held` to `wanted` if it fits (shrinking always
    /// does). Atomic across resources: two caches growing at once cannot both take the
    /// last bytes.
    pub fn try_commit(&self, held: usize, wanted: usize) -> Result<(), OverBudget> {
        let mut used = self.used();
        loop {
            if wanted > held {
                self.fits(used, held, wanted)?;
            }
            let next = used.saturating_sub(held) + wanted;
            match self
                .used
                .compare_exchange_weak(used, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(now) => used = now,
            }
        }
    }

    /// A dropped cache gives back what it held.
    pub fn release(&self, held: usize) {
        let _ = self.try_commit(held, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(total: usize, each: usize) -> ByteBudget {
        ByteBudget::new(BudgetConfig {
            max_bytes: total,
            max_resource_bytes: each,
            ..Default::default()
        })
    }

    #[test]
    fn per_resource_and_total_bounds() {
        let b = budget(1000, 600);
        assert_eq!(b.try_commit(0, 500), Ok(()));
        assert_eq!(
            b.try_commit(0, 700),
            Err(OverBudget::Resource {
                needs: 700,
                limit: 600
            })
        );
        assert_eq!(
            b.try_commit(0, 600),
            Err(OverBudget::Total {
                needs: 1100,
                limit: 1000
            })
        );
        assert_eq!(b.try_commit(0, 400), Ok(()));
        assert_eq!(b.used(), 900);
        // A resource may grow within what it holds plus what is left.
        assert_eq!(b.check(400, 500), Ok(()));
        assert!(b.check(400, 501).is_err());
        // Shrinking always commits; a release gives everything back.
        assert_eq!(b.try_commit(500, 100), Ok(()));
        b.release(400);
        assert_eq!(b.used(), 100);
        // No limits: anything goes.
        assert_eq!(budget(0, 0).try_commit(0, usize::MAX / 2), Ok(()));
    }
}

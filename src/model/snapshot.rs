//! A consistent view of one resource's objects at one resourceVersion: an immutable map
//! shared by every reader (`Arc`), replaced whole or changed by copy-on-write (`imbl`).

use std::sync::Arc;

use imbl::OrdMap;

use super::object::CachedObject;

/// A consistent view of the cache at one resourceVersion.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub resource_version: u64,
    pub objects: OrdMap<Box<str>, Arc<CachedObject>>,
    /// The sum of the objects' JSON sizes, kept up to date by `insert` and `remove`.
    pub bytes: usize,
    /// What the snapshot holds on the heap, as the byte budget counts it
    /// ([`entry_bytes`] per object), kept up to date by `insert` and `remove`.
    pub heap: usize,
}

/// What one object costs a snapshot: the object itself (`resident_bytes`), its `Arc`'s
/// counters and its share of the map's nodes. Checked against a counting allocator in
/// tests/cache_budget.rs.
pub fn entry_bytes(obj: &CachedObject) -> usize {
    obj.resident_bytes() + ENTRY_OVERHEAD
}

/// An `Arc`'s two counters (16 bytes) and an `OrdMap` entry (a key pointer and length, a
/// value pointer: 24 bytes) in nodes about half full, rounded.
pub const ENTRY_OVERHEAD: usize = 64;

impl Snapshot {
    /// Inserts or replaces an object; returns the version it replaced.
    pub fn insert(&mut self, obj: Arc<CachedObject>) -> Option<Arc<CachedObject>> {
        self.bytes += obj.raw.len();
        self.heap += entry_bytes(&obj);
        let old = self.objects.insert(obj.key.clone(), obj);
        if let Some(o) = &old {
            self.bytes -= o.raw.len();
            self.heap -= entry_bytes(o);
        }
        old
    }

    /// Removes an object; returns it.
    pub fn remove(&mut self, key: &str) -> Option<Arc<CachedObject>> {
        let old = self.objects.remove(key);
        if let Some(o) = &old {
            self.bytes -= o.raw.len();
            self.heap -= entry_bytes(o);
        }
        old
    }

    /// Every object in `namespace` (cluster-wide when `None`), in apiserver list order.
    pub fn iter_namespace<'a>(
        &'a self,
        namespace: Option<&str>,
    ) -> Box<dyn Iterator<Item = &'a Arc<CachedObject>> + 'a> {
        match namespace {
            None => Box::new(self.objects.values()),
            Some(ns) => {
                // All keys of a namespace lie in ["ns/", "ns0"): '0' is the byte after '/'.
                let start: Box<str> = format!("{ns}/").into();
                let end: Box<str> = format!("{ns}0").into();
                Box::new(self.objects.range(start..end).map(|(_, v)| v))
            }
        }
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&Arc<CachedObject>> {
        if namespace.is_empty() {
            self.objects.get(name)
        } else {
            self.objects.get(format!("{namespace}/{name}").as_str())
        }
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

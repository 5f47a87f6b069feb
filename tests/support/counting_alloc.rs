//! A global allocator that counts live heap bytes, for measurements that RSS cannot make
//! (it mixes every component of one process and keeps freed pages): the cache's memory
//! per object (benches/cache_list.rs) and a watcher's (tests/watch_memory.rs).
//!
//! Not part of `support`'s module tree: only the binaries that install it include it
//! (`#[path]`), each with its own `#[global_allocator]`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct CountingAlloc;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: defers every call to the system allocator unchanged; only counts sizes. This is
// the one measured reason for `unsafe` in the project: memory per cached object and per
// watcher.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Live heap bytes of the whole process, if [`CountingAlloc`] is its allocator.
pub fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

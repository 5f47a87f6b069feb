//! A global allocator that counts live heap bytes, for measurements that RSS cannot make
//! (it mixes every component of one process and keeps freed pages): the cache's memory
//! per object (benches/cache_list.rs) and a watcher's (tests/watch_memory.rs).
//!
//! An ordinary `support` module: it only defines the allocator. A binary that measures
//! installs it with its own two lines,
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: CountingAlloc = CountingAlloc;
//! ```
//!
//! since a process has one global allocator and `support` is compiled into every test
//! binary: declaring it here would make every test binary count. In a binary that does not
//! install it, [`live_bytes`] stays 0. `benches/cache_list.rs`, which has no `support`,
//! includes this file with `#[path]`.

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

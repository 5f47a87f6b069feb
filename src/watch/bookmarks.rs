//! Periodic bookmarks from one tick per resource type, not a timer per watcher.
//!
//! kube-apiserver sends a watcher that asked for bookmarks one every `bookmarkFrequency`
//! (a minute) while it is idle, and one 2 s before its deadline. Its cacher does that from
//! one timer per resource type: watchers sit in buckets by the second their next bookmark
//! is due (`watcherBookmarkTimeBuckets`), and a tick about every second pops the due ones
//! (`cacher.go` `dispatchEvents`, `cache_watcher.go` `nextBookmarkTime`).
//!
//! watchgate does the same. Each hub keeps a `schedule::Schedule` of its watchers' next
//! periodic bookmarks, in slots of `schedule::slot_for` (a second at the default interval); one task per
//! hub ([`start`]) sleeps until the next slot with due watchers and then, for each:
//!
//! - live, idle and on the express lane (a detached HTTP/1.1 watch whose queue is empty
//!   and whose connection's task is idle): the bookmark is written to the socket right
//!   there, with one non-blocking `send`, exactly as the dispatch writes a lone event
//!   (`queue::BookmarkHandoff`); the connection's task is not woken;
//! - anything else (HTTP/2, TLS, a queue holding events, a socket that would block, a
//!   watcher still sending its initial state or catching up): the watcher's
//!   `bookmark_due` flag is set and its body is woken; the body sends the bookmark when it
//!   is next idle and caught up, as before.
//!
//! So 5,000 idle HTTP/1.1 kubelets cost about 5,000 `send`s a minute and a few dozen
//! wake-ups of one task, instead of 5,000 timers firing and 5,000 connection tasks polled.
//! The pre-timeout bookmark, once per watch, stays with the body's own deadline timer.
//!
//! The rules that keep docs/watch.md's guarantees:
//! - A bookmark through the lane is written under the watcher's queue lock, only while
//!   its queue is empty and the lane open (the task idle): nothing queued or being
//!   written is overtaken.
//! - Its RV is the larger of the hub's head read *before* that check (every event at or
//!   below it has been offered to every live watcher, and the lane writes of an event
//!   finish before the head moves past it) and the newest RV the watcher has been given
//!   (`queue`'s `sent_rv`: lane writes, and what the body had taken when it went idle).
//!   It is never behind an event the watcher was sent, never ahead of one it was not.
//! - The schedule holds one entry per watcher that asked for bookmarks; the body removes
//!   it when it ends. Each tick handles at most `schedule::BATCH` watchers before it yields, so a
//!   thousand bookmarks due together never hold a worker thread for long.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::hub::Hub;

/// Starts `hub`'s tick task once (it needs a tokio runtime: watches are served on one).
pub fn start(hub: &Arc<Hub>) {
    let ticker = &hub.ticker;
    if ticker.started.swap(true, Ordering::AcqRel) {
        return;
    }
    let wake = ticker.wake.clone();
    tokio::spawn(run(Arc::downgrade(hub), wake));
}

async fn run(hub: Weak<Hub>, wake: Arc<Notify>) {
    loop {
        let next = match hub.upgrade() {
            Some(h) => h.next_bookmark_tick(),
            None => return,
        };
        match next {
            Some(t) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(t) => {}
                    // An earlier entry (or the hub's end): look again.
                    _ = wake.notified() => continue,
                }
            }
            None => {
                wake.notified().await;
                continue;
            }
        }
        loop {
            let Some(h) = hub.upgrade() else {
                return;
            };
            let more = h.send_due_bookmarks(Instant::now());
            drop(h);
            if !more {
                break;
            }
            tokio::task::yield_now().await;
        }
    }
}

//! Writes by the producer of a streamed body, for an idle HTTP/1.1 watch: the express lane.
//!
//! Here, below both, because both sides name it: the server (`server/h1.rs`,
//! `server/http2.rs`, `server/chunked.rs`) connects the lane and the watch fan-out
//! (`serve::watch`, `watch::body`, `watch::queue`) writes to it. The sockets' side of it
//! (non-blocking writes from outside a connection's task) is `server/express.rs`.
//!
//! Most watch deliveries are a lone event reaching an idle watcher. Through the
//! connection's task that costs a wake-up, a trip through the scheduler, a poll of the
//! connection, of the body and of its queue, and then one `writev`. The socket write is
//! what cannot be avoided; the rest added about 60 % to it (docs/benchmarks.md, issue 18).
//!
//! So while a detached HTTP/1.1 watch's connection is idle (everything written, the body
//! waiting for its next event), the fan-out may write an event's chunk itself, from the
//! dispatch, with one non-blocking `send` (the chunk assembled in a per-thread buffer:
//! cheaper than a `writev` of its three pieces), and the connection's task is not woken
//! at all. Three parties share the lane:
//!
//! - the connection's task ([`Sink`]'s implementation in `server/chunked.rs`): it opens the lane
//!   when it goes idle and closes it whenever it runs (so nothing it writes can interleave
//!   with a producer's write), and writes first whatever a producer's short write left;
//! - the body (`watch::body`): it arms its queue with the sink when it is live, and learns
//!   from the queue which events the producer wrote, for its bookmarks;
//! - the producer (`watch::queue::Sender::offer`, then `Handoff::deliver` once the hub's
//!   lock is released): it writes only when the queue is armed and empty and the sink is
//!   open, else it queues the event and wakes the task as before.
//!
//! Any doubt falls back to the task: a socket that would block, a short write (the rest is
//! handed to the task, which writes it before anything else), an error, a task that is
//! running. Events are never reordered, lost or duplicated (docs/watch.md, "Dispatch").

use std::sync::{Arc, OnceLock};

/// What became of a frame offered to a [`Sink`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// All of it is on the socket.
    All,
    /// Part of it is on the socket; the sink keeps the rest, which the connection's task
    /// writes before anything else. The producer must wake the task.
    Part,
    /// None of it: the producer queues it for the task as usual.
    Nothing,
}

/// The connection side of the lane: writes a frame now, or says why not.
pub trait Sink: Send + Sync {
    /// Writes `frame` as the response's next piece (framed as the protocol wants), without
    /// blocking, if the connection is idle.
    fn try_send(&self, frame: &bytes::Bytes) -> Sent;

    /// The connection this sink writes to, when it shares one with others (HTTP/2): an
    /// event's lane writes are made connection by connection ([`crate::watch::hub`]'s
    /// `Published::deliver`), so that each connection's frames are all handed over before
    /// the next connection's, and its task writes them together while the dispatch goes
    /// on with the others. 0 for a sink alone on its connection.
    fn group(&self) -> u64 {
        0
    }
}

/// A streamed response's end of the lane, created with its body and shared with the
/// connection through the response's [`Detachable`] marker. The connection connects
/// its sink once it streams the body itself; until then (and on connections that never
/// do, HTTP/2) there is none and every event goes through the task.
#[derive(Default)]
pub struct Lane {
    sink: OnceLock<Arc<dyn Sink>>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("connected", &self.sink.get().is_some())
            .finish()
    }
}

impl Lane {
    pub fn connect(&self, sink: Arc<dyn Sink>) {
        let _ = self.sink.set(sink);
    }

    pub fn sink(&self) -> Option<&Arc<dyn Sink>> {
        self.sink.get()
    }
}

/// Marks a response whose body the connection may stream outside hyper over HTTP/1.1: a
/// long-lived stream of small frames (a cached watch). With a lane, the body's producer
/// may write its frames itself while the connection is idle.
#[derive(Debug, Clone, Default)]
pub struct Detachable {
    pub lane: Option<Arc<Lane>>,
}

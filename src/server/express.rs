//! The sockets' side of the express lane (`crate::lane`): a socket written without
//! blocking through a shared reference, from outside the task that owns it.

use std::io;
use std::sync::Arc;

/// A socket that can be written without blocking through a shared reference, from
/// outside the task that owns it.
pub trait TryWrite: Send + Sync {
    /// Writes what the socket takes of `buf` now; `WouldBlock` when it takes nothing.
    /// Never registers a waker (the caller falls back to the task).
    fn try_write(&self, buf: &[u8]) -> io::Result<usize>;
}

/// A connection's socket that may offer [`TryWrite`] handles.
pub trait DirectWrite {
    /// A handle for writes from outside the connection's task, if this socket offers them.
    fn direct_writer(&self) -> Option<Arc<dyn TryWrite>>;
}

/// The non-blocking write of the socket under a wrapper.
pub trait TryWriteNow {
    fn try_write_now(&self, buf: &[u8]) -> io::Result<usize>;
}

impl TryWriteNow for tokio::net::TcpStream {
    fn try_write_now(&self, buf: &[u8]) -> io::Result<usize> {
        // tokio's `try_*`: readiness-checked, no waker, no cooperative budget spent (a
        // dispatch writes to thousands of sockets in one poll). One buffer: `send(2)`,
        // measurably cheaper than `writev(2)` on a socket (docs/benchmarks.md).
        self.try_write(buf)
    }
}

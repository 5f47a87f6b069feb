//! Binding a listening socket with kube-apiserver's accept queue.
//!
//! A herd (a thousand informers starting, every client of a restarted gateway
//! reconnecting) opens its connections within a few milliseconds. The kernel queues the
//! handshakes the process has not accepted yet, up to the listen backlog, and drops the
//! rest: their SYNs are retried after 1 s, then 3 s, 7 s. Rust's standard listener (and
//! tokio's `TcpListener::bind`) asks for a backlog of 128, so the 129th simultaneous
//! connection waited a second or more before the gateway saw it, and a herd of 1,000 reached
//! it in waves seconds apart (each wave needing its own proof of freshness). Go's `net`
//! package, which kube-apiserver listens with, asks for `net.core.somaxconn` (4096 on
//! current kernels; `maxListenerBacklog` in `net/sock_linux.go`). Asking for the largest
//! backlog gets exactly that: the kernel caps the request at `somaxconn`.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

/// The backlog asked for; Linux caps it at `net.core.somaxconn`.
const BACKLOG: u32 = u16::MAX as u32;

/// A listener on `addr` (port 0: any) with the system's largest accept queue and
/// `SO_REUSEADDR`, as the standard library sets it, so that a restarted process can bind
/// the port its predecessor's connections still linger on.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The accept queue the kernel grants a listener: `net.core.somaxconn`.
    fn somaxconn() -> Option<usize> {
        std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// A herd's connections complete their handshakes although nobody accepts them yet:
    /// with the standard backlog of 128, those beyond it would wait for a SYN retry (1 s).
    #[tokio::test]
    async fn a_herd_of_connections_completes_before_any_is_accepted() {
        let Some(max) = somaxconn() else {
            eprintln!("no /proc/sys/net/core/somaxconn: nothing to compare with");
            return;
        };
        // Well above the standard 128, below what the kernel grants (with room for the
        // queue's off-by-one).
        let herd = max.saturating_sub(8).min(1000);
        if herd <= 256 {
            eprintln!("net.core.somaxconn is {max}: too small to tell the backlogs apart");
            return;
        }
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let connects = (0..herd).map(|_| tokio::net::TcpStream::connect(addr));
        // Well under the first SYN retry (1 s): a connection that needs one fails this.
        let all = tokio::time::timeout(
            Duration::from_millis(700),
            futures_util::future::join_all(connects),
        )
        .await
        .expect("every handshake completes without a SYN retry");
        assert_eq!(all.into_iter().filter(|c| c.is_ok()).count(), herd);
        drop(listener);
    }
}

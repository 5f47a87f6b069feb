//! The `watchgate serve` binary as a child process, for tests that need what only a
//! process of its own gives: the binary's real log set-up (format, `-v`), metrics no other
//! gateway of the test binary writes to (`watchgate_upstream_up` is process-wide), its
//! memory as the kernel counts it, and its answer to signals.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::process::Command;

use super::http::Http;
use super::process::{Output, Spawned};
use super::wait::wait_until;
use super::EVENT_TIMEOUT;

/// A running `watchgate serve`. Killed when dropped; [`Served::terminate`] drains it and
/// returns everything it logged.
pub struct Served {
    process: Spawned,
    addr: SocketAddr,
    admin: SocketAddr,
}

impl Served {
    /// Starts `watchgate serve --port 0 --admin-port 0 <args>` with no ambient `RUST_LOG`
    /// or `KUBECONFIG`, and waits for the lines that say where it serves.
    pub async fn start(args: &[&str]) -> Self {
        Self::start_with_env(args, &[]).await
    }

    /// [`Served::start`] with these environment variables set (e.g. `RUST_LOG`).
    pub async fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_watchgate"));
        cmd.args(["serve", "--port", "0", "--admin-port", "0"])
            .args(args)
            .env_remove("RUST_LOG")
            .env("KUBECONFIG", "/nonexistent")
            .envs(env.iter().copied());
        let mut process = Spawned::start(cmd);
        let mut field = async |prefix: &str| -> String {
            let line = process
                .next_line(Duration::from_secs(30))
                .await
                .unwrap_or_else(|| panic!("watchgate exited before printing {prefix:?}"));
            line.strip_prefix(prefix)
                .unwrap_or_else(|| panic!("unexpected line {line:?}"))
                .to_string()
        };
        let addr: SocketAddr = field("Starting to serve on ").await.parse().unwrap();
        let admin = field("Admin endpoints on http://").await;
        let admin: SocketAddr = admin.trim_end_matches("/healthz").parse().unwrap();
        // It may bind a wildcard address; tests reach it over loopback.
        Self {
            process,
            addr: SocketAddr::from(([127, 0, 0, 1], addr.port())),
            admin: SocketAddr::from(([127, 0, 0, 1], admin.port())),
        }
    }

    /// The API listener's loopback address, for low-level clients.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The admin listener's loopback address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    /// The API listener, for clients.
    pub fn http(&self) -> Http {
        Http::new(&format!("http://{}", self.addr))
    }

    /// The admin listener (/readyz, /metrics).
    pub fn admin(&self) -> Http {
        Http::new(&format!("http://{}", self.admin))
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// What it has logged so far.
    pub fn stderr(&self) -> String {
        self.process.stderr()
    }

    /// The first `n` non-empty lines it logged, waiting (bounded) until there are `n`.
    pub async fn first_stderr_lines(&self, n: usize) -> Vec<String> {
        let lines = || -> Vec<String> {
            self.stderr()
                .lines()
                .filter(|l| !l.trim().is_empty())
                .take(n)
                .map(str::to_string)
                .collect()
        };
        wait_until(
            &format!("watchgate logged {n} lines"),
            EVENT_TIMEOUT,
            || async { lines().len() == n },
        )
        .await;
        lines()
    }

    /// Sends SIGTERM and returns at once; see [`Served::wait_exit`].
    pub async fn sigterm(&self) {
        self.process.sigterm().await;
    }

    /// Waits for the process to exit on its own; panics after `timeout`. The output holds
    /// everything it wrote.
    pub async fn wait_exit(self, timeout: Duration) -> Output {
        self.process.wait(timeout).await
    }

    /// SIGTERM, then waits for the drain to finish and the log to close: the returned text
    /// is everything the process wrote to stderr.
    pub async fn terminate(self) -> String {
        self.sigterm().await;
        let out = self.wait_exit(Duration::from_secs(60)).await;
        assert!(
            out.success(),
            "watchgate exited with {}:\n{}",
            out.status,
            out.stderr
        );
        out.stderr
    }
}

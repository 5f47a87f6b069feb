//! The `watchgate serve` binary as a child process, for tests that need what only a
//! process of its own gives: the binary's real log set-up (format, `-v`), and metrics no
//! other gateway of the test binary writes to (`watchgate_upstream_up` is process-wide).

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use super::http::Http;

/// A running `watchgate serve`. Killed when dropped; [`Served::terminate`] drains it and
/// returns everything it logged.
pub struct Served {
    child: Child,
    addr: SocketAddr,
    admin: SocketAddr,
    stderr: Arc<Mutex<String>>,
    stderr_done: Option<JoinHandle<()>>,
}

impl Served {
    /// Starts `watchgate serve --port 0 --admin-port 0 <args>` with no ambient `RUST_LOG`
    /// or `KUBECONFIG`, and waits for the lines that say where it serves.
    pub async fn start(args: &[&str]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_watchgate"));
        cmd.args(["serve", "--port", "0", "--admin-port", "0"])
            .args(args)
            .env_remove("RUST_LOG")
            .env("KUBECONFIG", "/nonexistent")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn watchgate serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let err = child.stderr.take().expect("piped stderr");
        let stderr_done = tokio::spawn(async move {
            let mut lines = BufReader::new(err).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let mut out = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut field = async |prefix: &str| -> String {
            let line = tokio::time::timeout(Duration::from_secs(30), out.next_line())
                .await
                .unwrap_or_else(|_| panic!("watchgate printed no {prefix:?} line"))
                .expect("read watchgate's stdout")
                .unwrap_or_else(|| panic!("watchgate exited before printing {prefix:?}"));
            line.strip_prefix(prefix)
                .unwrap_or_else(|| panic!("unexpected line {line:?}"))
                .to_string()
        };
        let addr: SocketAddr = field("Starting to serve on ").await.parse().unwrap();
        let admin = field("Admin endpoints on http://").await;
        let admin: SocketAddr = admin.trim_end_matches("/healthz").parse().unwrap();
        Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], addr.port())),
            admin: SocketAddr::from(([127, 0, 0, 1], admin.port())),
            stderr,
            stderr_done: Some(stderr_done),
        }
    }

    /// The API listener, for clients.
    pub fn http(&self) -> Http {
        Http::new(&format!("http://{}", self.addr))
    }

    /// The admin listener (/readyz, /metrics).
    pub fn admin(&self) -> Http {
        Http::new(&format!("http://{}", self.admin))
    }

    /// What it has logged so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// SIGTERM, then waits for the drain to finish and the log to close: the returned text
    /// is everything the process wrote to stderr.
    pub async fn terminate(mut self) -> String {
        let pid = self.child.id().expect("still running").to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .expect("run kill");
        assert!(status.success(), "kill -TERM {pid}");
        let exit = tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .expect("watchgate exits after SIGTERM")
            .expect("wait for watchgate");
        assert!(
            exit.success(),
            "watchgate exited with {exit}:\n{}",
            self.stderr()
        );
        let done = self.stderr_done.take().expect("not yet joined");
        tokio::time::timeout(Duration::from_secs(10), done)
            .await
            .expect("stderr closes when the process exits")
            .expect("stderr reader");
        self.stderr()
    }
}

//! Running client processes: one-shot with a timeout, or long-running with line reading.
//!
//! Everything is async (tokio::process) because the servers under test run in-process on
//! the same runtime: a blocking `std::process` wait would starve them on a small runtime.

use std::fmt;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What a finished command left behind.
pub struct Output {
    /// The command line, for failure messages.
    pub command: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// Asserts exit code 0 and returns stdout.
    #[track_caller]
    pub fn assert_success(&self) -> &str {
        assert!(self.success(), "command failed: {self}");
        &self.stdout
    }

    /// Asserts a non-zero exit and returns stderr.
    #[track_caller]
    pub fn assert_failure(&self) -> &str {
        assert!(!self.success(), "command should have failed: {self}");
        &self.stderr
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` exited with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command, self.status, self.stdout, self.stderr
        )
    }
}

impl fmt::Debug for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The command line of `cmd`, for messages.
pub fn describe(cmd: &Command) -> String {
    let std = cmd.as_std();
    let mut s = std.get_program().to_string_lossy().into_owned();
    for a in std.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn read_all<R>(mut r: R) -> JoinHandle<Vec<u8>>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut buf = Vec::new();
        // A read error just ends the capture; the exit status tells the story.
        let _ = r.read_to_end(&mut buf).await;
        buf
    })
}

/// Runs `cmd` to completion, feeding it `stdin`, and panics (with whatever it printed so far)
/// if it takes longer than `timeout`.
pub async fn run(mut cmd: Command, stdin: Option<&[u8]>, timeout: Duration) -> Output {
    let command = describe(&cmd);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `{command}`: {e}"));
    let out = read_all(child.stdout.take().expect("piped stdout"));
    let err = read_all(child.stderr.take().expect("piped stderr"));
    if let Some(input) = stdin {
        let mut w = child.stdin.take().expect("piped stdin");
        let input = input.to_vec();
        // Written from a task so a child that does not read stdin cannot deadlock us.
        tokio::spawn(async move {
            let _ = w.write_all(&input).await;
            let _ = w.shutdown().await;
        });
    }
    let status = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(status) => status.unwrap_or_else(|e| panic!("waiting for `{command}`: {e}")),
        Err(_) => {
            let _ = child.kill().await;
            let stdout = String::from_utf8_lossy(&out.await.unwrap_or_default()).into_owned();
            let stderr = String::from_utf8_lossy(&err.await.unwrap_or_default()).into_owned();
            panic!(
                "`{command}` did not finish within {timeout:?}\n--- stdout ---\n{stdout}\n\
                 --- stderr ---\n{stderr}"
            );
        }
    };
    Output {
        command,
        status,
        stdout: String::from_utf8_lossy(&out.await.expect("stdout reader")).into_owned(),
        stderr: String::from_utf8_lossy(&err.await.expect("stderr reader")).into_owned(),
    }
}

/// A long-running process (`kubectl get -w`, `kubectl logs -f`, `kubectl exec -i`) whose
/// stdout is read line by line. Killed when dropped.
pub struct Spawned {
    command: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Every stdout line received so far, for assertions and failure messages.
    seen: Vec<String>,
    stderr: Arc<Mutex<String>>,
    /// The stderr reader, joined by [`Spawned::wait`] so that the log it returns is whole.
    stderr_done: Option<JoinHandle<()>>,
}

impl Spawned {
    /// Starts `cmd` with piped stdin/stdout/stderr.
    pub fn start(mut cmd: Command) -> Self {
        let command = describe(&cmd);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{command}`: {e}"));
        // Bounded: a test that stops reading must not let memory grow; the reader then
        // waits, and the child blocks on its pipe, which is what a slow reader should see.
        let (tx, lines) = mpsc::channel(1024);
        let stdout = child.stdout.take().expect("piped stdout");
        tokio::spawn(async move {
            let mut r = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = r.next_line().await {
                if tx.send(line).await.is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let err = child.stderr.take().expect("piped stderr");
        let stderr_done = tokio::spawn(async move {
            let mut r = BufReader::new(err).lines();
            while let Ok(Some(line)) = r.next_line().await {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let stdin = child.stdin.take();
        Self {
            command,
            child,
            stdin,
            lines,
            seen: Vec::new(),
            stderr,
            stderr_done: Some(stderr_done),
        }
    }

    pub fn command(&self) -> &str {
        &self.command
    }

    /// All stdout lines received so far.
    pub fn seen(&self) -> &[String] {
        &self.seen
    }

    /// What the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The next stdout line, or `None` once stdout closed. Panics after `timeout`.
    pub async fn next_line(&mut self, timeout: Duration) -> Option<String> {
        match tokio::time::timeout(timeout, self.lines.recv()).await {
            Ok(Some(line)) => {
                self.seen.push(line.clone());
                Some(line)
            }
            Ok(None) => None,
            Err(_) => panic!(
                "no output line within {timeout:?}\n{}",
                self.failure_context()
            ),
        }
    }

    /// Reads lines until one satisfies `pred`, and returns it. Panics, naming `desc` and
    /// showing every line seen, if none does within `timeout` or the output ends.
    pub async fn expect_line(
        &mut self,
        desc: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.lines.recv()).await {
                Ok(Some(line)) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return line;
                    }
                }
                Ok(None) => panic!(
                    "output ended before a line with {desc}\n{}",
                    self.failure_context()
                ),
                Err(_) => panic!(
                    "no line with {desc} within {timeout:?}\n{}",
                    self.failure_context()
                ),
            }
        }
    }

    /// Writes to the process's stdin.
    pub async fn write_stdin(&mut self, bytes: &[u8]) {
        let w = self.stdin.as_mut().expect("stdin already closed");
        w.write_all(bytes).await.expect("write to child stdin");
        w.flush().await.expect("flush child stdin");
    }

    /// Closes stdin (EOF for the child).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The process id (while it runs).
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the process is still running")
    }

    /// Sends SIGTERM, as a kubelet or a terminal's Ctrl-C would, and returns at once.
    pub async fn sigterm(&self) {
        let pid = self.pid().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .expect("run kill");
        assert!(status.success(), "kill -TERM {pid}");
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for the process to exit on its own; panics after `timeout`.
    pub async fn wait(mut self, timeout: Duration) -> Output {
        self.stdin = None;
        let status = match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(s) => s.expect("wait for child"),
            Err(_) => panic!(
                "process did not exit within {timeout:?}\n{}",
                self.failure_context()
            ),
        };
        // Drain what is left of stdout (the reader task ends when the pipe closes).
        while let Ok(Some(line)) =
            tokio::time::timeout(Duration::from_secs(5), self.lines.recv()).await
        {
            self.seen.push(line);
        }
        // Likewise stderr: the last lines of a log often say how the process ended.
        if let Some(done) = self.stderr_done.take() {
            tokio::time::timeout(Duration::from_secs(10), done)
                .await
                .expect("stderr closes when the process exits")
                .expect("stderr reader");
        }
        let mut stdout = self.seen.join("\n");
        if !stdout.is_empty() {
            stdout.push('\n');
        }
        Output {
            command: self.command.clone(),
            status,
            stdout,
            stderr: self.stderr(),
        }
    }

    /// Kills the process and waits for it.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    fn failure_context(&self) -> String {
        format!(
            "command: `{}`\n--- stdout lines seen ---\n{}\n--- stderr ---\n{}",
            self.command,
            self.seen.join("\n"),
            self.stderr()
        )
    }
}

//! kubectl bound to one server.
//!
//! Each [`Kubectl`] has its own temporary kubeconfig, `$HOME` and discovery cache, so tests
//! never share state through `~/.kube` (ports are reused between tests, and kubectl caches
//! discovery per host:port) and never touch the developer's real clusters.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;
use tokio::process::Command;

use super::process::{self, Output, Spawned};
use super::{tools, COMMAND_TIMEOUT};

/// Writes a kubeconfig whose only context points at `server` (e.g. `http://127.0.0.1:PORT`),
/// with `namespace` as the context's default namespace.
pub fn write_kubeconfig(path: &Path, server: &str, namespace: &str) {
    write_kubeconfig_for(path, server, namespace, None)
}

/// [`write_kubeconfig`] with a bearer token for the user.
pub fn write_kubeconfig_for(path: &Path, server: &str, namespace: &str, token: Option<&str>) {
    let user = match token {
        Some(t) => format!("{{token: {t}}}"),
        None => "{}".to_string(),
    };
    let text = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {server}
contexts:
- name: test
  context:
    cluster: test
    user: test
    namespace: {namespace}
current-context: test
users:
- name: test
  user: {user}
"
    );
    std::fs::write(path, text).expect("write kubeconfig");
}

pub struct Kubectl {
    server: String,
    dir: TempDir,
    kubeconfig: PathBuf,
}

impl Kubectl {
    /// A kubectl for `server`, defaulting to namespace `default`.
    pub fn new(server: &str) -> Self {
        Self::with_namespace(server, "default")
    }

    pub fn with_namespace(server: &str, namespace: &str) -> Self {
        Self::build(server, namespace, None)
    }

    /// A kubectl for `server` whose user authenticates with a bearer token.
    pub fn with_token(server: &str, token: &str) -> Self {
        Self::build(server, "default", Some(token))
    }

    /// A kubectl for `server` with a kubeconfig written by `kubeconfig` (given the scratch
    /// directory, where it may write certificates): TLS setups.
    pub fn with_kubeconfig(server: &str, kubeconfig: impl FnOnce(&Path) -> String) -> Self {
        let dir = tempfile::tempdir().expect("tempdir for kubectl");
        let path = dir.path().join("kubeconfig");
        let text = kubeconfig(dir.path());
        std::fs::write(&path, text).expect("write kubeconfig");
        Self {
            server: server.to_string(),
            dir,
            kubeconfig: path,
        }
    }

    fn build(server: &str, namespace: &str, token: Option<&str>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir for kubectl");
        let kubeconfig = dir.path().join("kubeconfig");
        write_kubeconfig_for(&kubeconfig, server, namespace, token);
        Self {
            server: server.to_string(),
            dir,
            kubeconfig,
        }
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A scratch directory that lives as long as this kubectl (for manifests).
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `contents` to a file in the scratch directory and returns its path.
    pub fn write_file(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, contents).expect("write manifest");
        p
    }

    /// The command, ready to run: isolated HOME, kubeconfig and cache.
    pub fn command<S: AsRef<str>>(&self, args: &[S]) -> Command {
        let mut cmd = Command::new(tools::kubectl());
        cmd.args(args.iter().map(|a| a.as_ref()))
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.dir.path())
            .env("KUBECACHEDIR", self.dir.path().join("cache"))
            // No colour codes or interactive prompts in captured output.
            .env("NO_COLOR", "1")
            .env("TERM", "dumb");
        cmd
    }

    /// Runs kubectl to completion with the default timeout.
    pub async fn run<S: AsRef<str>>(&self, args: &[S]) -> Output {
        process::run(self.command(args), None, COMMAND_TIMEOUT).await
    }

    /// Runs kubectl with `stdin` as its standard input.
    pub async fn run_stdin<S: AsRef<str>>(&self, args: &[S], stdin: &[u8]) -> Output {
        process::run(self.command(args), Some(stdin), COMMAND_TIMEOUT).await
    }

    /// Runs kubectl with a custom timeout and extra environment.
    pub async fn run_with<S: AsRef<str>>(
        &self,
        args: &[S],
        env: &[(&str, &str)],
        stdin: Option<&[u8]>,
        timeout: Duration,
    ) -> Output {
        let mut cmd = self.command(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        process::run(cmd, stdin, timeout).await
    }

    /// Runs kubectl, asserts success and returns stdout.
    pub async fn ok<S: AsRef<str>>(&self, args: &[S]) -> String {
        let out = self.run(args).await;
        out.assert_success().to_string()
    }

    /// Starts a long-running kubectl (`get -w`, `logs -f`, `exec -i`).
    pub fn spawn<S: AsRef<str>>(&self, args: &[S]) -> Spawned {
        Spawned::start(self.command(args))
    }

    /// Starts a long-running kubectl with extra environment.
    pub fn spawn_with<S: AsRef<str>>(&self, args: &[S], env: &[(&str, &str)]) -> Spawned {
        let mut cmd = self.command(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Spawned::start(cmd)
    }
}

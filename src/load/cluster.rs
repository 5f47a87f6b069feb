//! What the self-contained scenarios (`soak`, `cold-herd`, `quiet-large`, `restart`) stand
//! up on loopback: a simulator in this process (its store seeded directly, its request
//! counts read from its stats, the same ones `GET /debug/sim/stats` serves) and the
//! gateway as a child process, so that its CPU and RSS are its own and it can be killed
//! like a real process and started again on the same ports.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use http_body_util::BodyExt as _;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::pool::PoolResource;
use crate::sim::{self, seed, Mutation, SimConfig, SimHandle};

/// How to start the gateway.
#[derive(Debug, Clone)]
pub struct GatewaySpec {
    pub bin: PathBuf,
    pub upstreams: Vec<String>,
    /// Extra arguments of `serve`.
    pub extra: Vec<String>,
    /// Where its stderr goes (appended to across restarts); discarded without it.
    pub log: Option<PathBuf>,
}

/// The gateway, a child process (killed when dropped).
pub struct Gateway {
    pub child: tokio::process::Child,
    pub url: String,
    /// Its admin listener, `http://127.0.0.1:<port>` (`/metrics`, `/readyz`).
    pub admin: String,
    pub pid: u32,
    pub port: u16,
    pub admin_port: u16,
}

/// The gateway binary: `--gateway-bin`, or this executable.
pub fn gateway_bin(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    match flag {
        Some(p) => Ok(p.to_path_buf()),
        None => std::env::current_exe().context("finding this executable"),
    }
}

impl GatewaySpec {
    /// Starts it on free ports.
    pub async fn start(&self) -> anyhow::Result<Gateway> {
        self.start_on(0, 0).await
    }

    /// Starts it on these ports (0: any), retrying for a few seconds while they are
    /// still held (a killed gateway's listener is released as the kernel reaps it).
    pub async fn start_on(&self, port: u16, admin_port: u16) -> anyhow::Result<Gateway> {
        let mut tries = 0;
        loop {
            match self.try_start(port, admin_port).await {
                Ok(g) => return Ok(g),
                Err(e) if port != 0 && tries < 50 => {
                    tries += 1;
                    tracing::debug!("starting the gateway on port {port}: {e:#}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn try_start(&self, port: u16, admin_port: u16) -> anyhow::Result<Gateway> {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.args(["serve", "--port"])
            .arg(port.to_string())
            .arg("--admin-port")
            .arg(admin_port.to_string())
            .arg("--server")
            .arg(self.upstreams.join(","))
            .args(&self.extra)
            // The scenario's gateway talks to the scenario's simulators only.
            .env("KUBECONFIG", "/nonexistent")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        cmd.stderr(match &self.log {
            Some(p) => Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .with_context(|| format!("opening {}", p.display()))?,
            ),
            None => Stdio::null(),
        });
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting the gateway {}", self.bin.display()))?;
        let pid = child.id().context("the gateway exited at once")?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let (addr, admin): (SocketAddr, SocketAddr) =
            tokio::time::timeout(Duration::from_secs(60), async {
                let mut addr = None;
                while let Some(line) = lines.next_line().await? {
                    if let Some(a) = line.strip_prefix("Starting to serve on ") {
                        addr = Some(a.trim().parse()?);
                    }
                    if let Some(a) = line
                        .strip_prefix("Admin endpoints on http://")
                        .and_then(|a| a.strip_suffix("/healthz"))
                    {
                        let addr = addr.context("the admin line came first")?;
                        return Ok((addr, a.trim().parse()?));
                    }
                }
                anyhow::bail!("the gateway exited before it served (see --gateway-log)")
            })
            .await
            .context("the gateway did not start within 60 s")??;
        // Keep reading its stdout so that it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Gateway {
            child,
            url: format!("http://127.0.0.1:{}", addr.port()),
            admin: format!("http://127.0.0.1:{}", admin.port()),
            pid,
            port: addr.port(),
            admin_port: admin.port(),
        })
    }
}

impl Gateway {
    /// SIGKILL, and reaped: its connections drop as a crashed process's do.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Its Prometheus text, if it answers.
    pub async fn metrics(&self) -> Option<String> {
        get_text(&format!("{}/metrics", self.admin)).await
    }
}

async fn get_text(url: &str) -> Option<String> {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let resp = tokio::time::timeout(Duration::from_secs(5), client.get(url.parse().ok()?))
        .await
        .ok()?
        .ok()?;
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    String::from_utf8(body.to_vec()).ok()
}

/// A simulator with `kube-apiserver`'s own namespaces, as `watchgate sim` starts.
pub async fn start_sim() -> anyhow::Result<SimHandle> {
    sim::start(SimConfig {
        bootstrap_namespaces: true,
        ..SimConfig::default()
    })
    .await
    .context("starting the simulator")
}

/// Puts `count` objects of `resource` straight into the simulator's store (the seed's
/// realistic pods or configmaps, spread over the namespaces `ns-0` … `ns-9`, padded to
/// about `size` bytes of JSON): seeding 20,000 objects through HTTP would take longer
/// than the herd it prepares. Returns the store's resourceVersion after them.
pub fn seed_objects(sim: &SimHandle, resource: PoolResource, count: usize, size: usize) -> u64 {
    let spec = seed::SeedSpec {
        namespaces: 10,
        nodes: 10,
        pod_size: size,
        ..seed::SeedSpec::per_type(0, size)
    };
    let store = sim.store();
    let now = jiff::Timestamp::now();
    let rt = |name: &str| {
        sim::resources::RESOURCES
            .iter()
            .find(|r| r.resource == name)
            .expect("a served resource")
    };
    for n in 0..spec.namespaces.min(count) {
        let ns = seed::namespace(&format!("ns-{n}"), now);
        let _ = store.mutate(rt("namespaces"), "", &format!("ns-{n}"), |cur| {
            Ok(match cur {
                Some(_) => Mutation::NoOp,
                None => Mutation::Put(ns),
            })
        });
    }
    let res = rt(resource.as_str());
    for i in 0..count {
        let mut obj = match resource {
            PoolResource::Pods => seed::pod(&spec, i, now),
            PoolResource::Configmaps => seed::configmap(&spec, i, now),
        };
        seed::pad(&mut obj, size);
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let ns = spec.namespace_of(i);
        let _ = store.mutate(res, &ns, &name, |_| Ok(Mutation::Put(obj)));
    }
    store.current_rv()
}

/// How many objects of `resource` the simulator holds (in every namespace).
pub fn object_count(sim: &SimHandle, resource: PoolResource) -> u64 {
    let rt = sim::resources::RESOURCES
        .iter()
        .find(|r| r.resource == resource.as_str())
        .expect("a served resource");
    sim.store().list(rt, None).1.len() as u64
}

/// The simulator's request counts for one resource: `{verb: count}` and
/// `{verb: {shape: count}}` (src/sim/stats.rs).
pub fn sim_requests(sim: &SimHandle, resource: &str) -> (Value, Value) {
    let counts = sim.stats().to_json();
    let shapes = sim.stats().shapes_json();
    let pick = |v: &Value| {
        let mut out = serde_json::Map::new();
        if let Some(m) = v.as_object() {
            for (verb, per) in m {
                if let Some(n) = per.get(resource) {
                    out.insert(verb.clone(), n.clone());
                }
            }
        }
        Value::Object(out)
    };
    (pick(&counts), pick(&shapes))
}

/// The total of `{verb: count}`.
pub fn total(counts: &Value) -> u64 {
    counts
        .as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

//! The servers under test, started in-process on `127.0.0.1:0` (fast, parallel-safe).
//!
//! [`Env`] is what end-to-end scenarios receive: the URL their clients talk to (the
//! simulator itself, or the gateway in front of it) plus a direct line to the simulator for
//! "another client" writes and for differential checks.

use watchgate::config::GatewayConfig;
use watchgate::server::{Gateway, GatewayHandle};
use watchgate::sim::{SimConfig, SimHandle};

use super::http::Http;
use super::kubectl::Kubectl;

/// A running simulator. Its serve task lives until the test's runtime ends.
pub struct SimServer {
    url: String,
    handle: SimHandle,
}

impl SimServer {
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn handle(&self) -> &SimHandle {
        &self.handle
    }

    /// Kills it like a process: every connection dropped mid-stream (its store lives on
    /// in any replica).
    pub async fn kill(self) {
        self.handle.kill().await;
    }
}

/// A simulator configuration like a fresh cluster: empty but for the namespaces every
/// kube-apiserver has (`default`, `kube-system`, …).
pub fn cluster_config() -> SimConfig {
    SimConfig {
        bootstrap_namespaces: true,
        ..SimConfig::default()
    }
}

/// Starts a simulator on `127.0.0.1:0` with an empty cluster (its built-in namespaces only).
pub async fn start_sim() -> SimServer {
    start_sim_with(cluster_config()).await
}

/// Starts a simulator with `cfg` (its `addr` should be `127.0.0.1:0`).
pub async fn start_sim_with(cfg: SimConfig) -> SimServer {
    let handle = watchgate::sim::start(cfg)
        .await
        .expect("start the simulator in-process");
    SimServer {
        url: handle.url(),
        handle,
    }
}

/// Starts another apiserver of a simulated cluster whose store is `store` (a running
/// simulator's `handle().store()`): writes through either are seen by both; it has its
/// own faults and stats, on `cfg.addr`.
pub async fn start_replica_with(
    cfg: SimConfig,
    store: std::sync::Arc<watchgate::sim::Store>,
) -> SimServer {
    let handle = watchgate::sim::start_replica(cfg, store)
        .await
        .expect("start a simulator replica in-process");
    SimServer {
        url: handle.url(),
        handle,
    }
}

/// A running gateway. Stops (at once) when dropped.
pub struct GatewayServer {
    url: String,
    handle: GatewayHandle,
}

impl GatewayServer {
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn handle(&self) -> &GatewayHandle {
        &self.handle
    }

    pub fn into_handle(self) -> GatewayHandle {
        self.handle
    }
}

/// Starts the gateway on `127.0.0.1:0` (admin listener too) in front of `upstream`, an
/// `http://` URL, with no credentials.
pub async fn start_gateway(upstream: &str) -> GatewayServer {
    let cfg = GatewayConfig::for_upstream_url(upstream).expect("gateway config for the sim");
    start_gateway_with(cfg).await
}

/// [`start_gateway`]'s handle alone, for tests that drive the gateway itself (its
/// addresses, a drain).
pub async fn gateway(upstream: &str) -> GatewayHandle {
    start_gateway(upstream).await.into_handle()
}

/// A gateway that caches nothing, in front of a stub upstream: for tests of forwarding
/// itself, whose stubs answer (and count) only the requests the test sends. A gateway
/// that caches would add its reflectors' discovery, lists and watches on the first read
/// (consistent reads included, docs/consistency.md).
pub async fn forwarding_gateway(upstream: &str) -> GatewayHandle {
    let mut cfg = GatewayConfig::for_upstream_url(upstream).expect("gateway config");
    cfg.cache = None;
    start_gateway_with(cfg).await.into_handle()
}

/// Starts the gateway with `cfg`.
pub async fn start_gateway_with(cfg: GatewayConfig) -> GatewayServer {
    let handle = Gateway::start(cfg)
        .await
        .expect("start the gateway in-process");
    GatewayServer {
        url: handle.url(),
        handle,
    }
}

/// Where an end-to-end scenario runs: directly against the simulator, or through the
/// gateway in front of it.
pub struct Env {
    pub sim: SimServer,
    pub gateway: Option<GatewayServer>,
    /// kubectl for the URL under test (the gateway if there is one).
    pub kubectl: Kubectl,
    /// kubectl talking to the simulator directly: "another client".
    pub direct: Kubectl,
    /// Raw HTTP to the URL under test.
    pub http: Http,
    /// Raw HTTP to the simulator directly.
    pub direct_http: Http,
}

impl Env {
    /// Clients talk to the simulator directly.
    pub async fn sim() -> Self {
        let sim = start_sim().await;
        Self::build(sim, None)
    }

    /// Clients talk to the gateway, which forwards to the simulator.
    pub async fn gateway() -> Self {
        Self::gateway_with(cluster_config()).await
    }

    /// Clients talk to a simulator started with `cfg` (seeding, faults, windows).
    pub async fn sim_with(cfg: SimConfig) -> Self {
        let sim = start_sim_with(cfg).await;
        Self::build(sim, None)
    }

    /// Clients talk to the gateway in front of a simulator started with `cfg`.
    pub async fn gateway_with(cfg: SimConfig) -> Self {
        let sim = start_sim_with(cfg).await;
        let gw = start_gateway(sim.url()).await;
        Self::build(sim, Some(gw))
    }

    fn build(sim: SimServer, gateway: Option<GatewayServer>) -> Self {
        let url = gateway.as_ref().map_or(sim.url(), |g| g.url()).to_string();
        Self {
            kubectl: Kubectl::new(&url),
            direct: Kubectl::new(sim.url()),
            http: Http::new(&url),
            direct_http: Http::new(sim.url()),
            sim,
            gateway,
        }
    }

    /// The URL clients under test talk to.
    pub fn url(&self) -> &str {
        self.http.base()
    }

    pub fn through_gateway(&self) -> bool {
        self.gateway.is_some()
    }
}

//! The servers under test, started in-process on `127.0.0.1:0` (fast, parallel-safe).
//!
//! [`Env`] is what end-to-end scenarios receive: the URL their clients talk to (the
//! simulator itself, or the gateway in front of it) plus a direct line to the simulator for
//! "another client" writes and for differential checks.

use super::http::Http;
use super::kubectl::Kubectl;

/// A running simulator. Stops when dropped.
pub struct SimServer {
    url: String,
}

impl SimServer {
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// Starts a simulator with an empty cluster (its built-in namespaces only).
pub async fn start_sim() -> SimServer {
    // ADAPT: watchgate::sim::start(..) is being built on the sim branches; this adapter is
    // filled in once it lands on main. Until then every end-to-end test fails here, which is
    // the truth: the feature is missing.
    panic!("the simulator's in-process API (watchgate::sim::start) has not landed on main yet")
}

/// A running gateway. Stops when dropped.
pub struct GatewayServer {
    url: String,
}

impl GatewayServer {
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// Starts the gateway on `127.0.0.1:0` in front of `upstream` (an `http://` URL).
pub async fn start_gateway(upstream: &str) -> GatewayServer {
    // ADAPT: watchgate::server::Gateway::start(..) is being built on the gateway branch.
    panic!(
        "the gateway's in-process API (watchgate::server::Gateway::start) has not landed on \
         main yet (upstream {upstream})"
    )
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
        let sim = start_sim().await;
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

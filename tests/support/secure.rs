//! A secured setup: the simulator enforcing the demo policy (`sim::auth::DEMO_POLICY`:
//! users, tokens, rules; TokenReview and SubjectAccessReview served; writes audited) and a
//! gateway with `--auth=delegated` in front of it, authenticating upstream as the policy's
//! gateway service account.

use watchgate::auth::SecurityConfig;
use watchgate::config::GatewayConfig;
use watchgate::sim::auth::demo_policy;

use super::http::Http;
use super::kubectl::Kubectl;
use super::servers::{
    cluster_config, start_gateway_with, start_sim_with, GatewayServer, SimServer,
};

pub const GATEWAY: &str = "watchgate-token";
pub const GATEWAY_USER: &str = "system:serviceaccount:watchgate:watchgate";
/// system:masters: everything.
pub const ADMIN: &str = "admin-token";
/// Reads pods, configmaps, deployments, ... but not secrets; writes configmaps.
pub const ALICE: &str = "alice-token";
/// Reads pods in namespace team-b only.
pub const BOB: &str = "bob-token";

pub struct Secure {
    pub sim: SimServer,
    pub gateway: GatewayServer,
}

impl Secure {
    pub async fn start() -> Self {
        Self::start_with(SecurityConfig::default()).await
    }

    pub async fn start_with(security: SecurityConfig) -> Self {
        Self::start_with_policy(demo_policy(), security).await
    }

    /// With another simulator policy (the gateway still authenticates with [`GATEWAY`]).
    pub async fn start_with_policy(
        policy: std::sync::Arc<watchgate::sim::auth::Policy>,
        security: SecurityConfig,
    ) -> Self {
        Self::start_configured(policy, security, |_| {}).await
    }

    /// With another policy and the gateway's configuration adjusted by `tweak` (TLS).
    pub async fn start_configured(
        policy: std::sync::Arc<watchgate::sim::auth::Policy>,
        security: SecurityConfig,
        tweak: impl FnOnce(&mut GatewayConfig),
    ) -> Self {
        let mut sim_cfg = cluster_config();
        sim_cfg.policy = Some(policy);
        let sim = start_sim_with(sim_cfg).await;
        let mut upstream = kube::Config::new(sim.url().parse().unwrap());
        upstream.auth_info.token = Some(GATEWAY.to_string().into());
        let mut cfg = GatewayConfig::for_upstream(upstream);
        cfg.security = Some(security);
        tweak(&mut cfg);
        let gateway = start_gateway_with(cfg).await;
        Self { sim, gateway }
    }

    /// Raw HTTP to the gateway with `token` (none: no credentials).
    pub fn http(&self, token: Option<&str>) -> Http {
        match token {
            Some(t) => Http::with_token(self.gateway.url(), t),
            None => Http::new(self.gateway.url()),
        }
    }

    /// Raw HTTP to the simulator directly, with `token`: what the apiserver answers.
    pub fn direct(&self, token: Option<&str>) -> Http {
        match token {
            Some(t) => Http::with_token(self.sim.url(), t),
            None => Http::new(self.sim.url()),
        }
    }

    pub fn kubectl(&self, token: Option<&str>) -> Kubectl {
        match token {
            Some(t) => Kubectl::with_token(self.gateway.url(), t),
            None => Kubectl::new(self.gateway.url()),
        }
    }

    /// The simulator's review counters: (TokenReviews, SubjectAccessReviews) answered.
    pub fn reviews(&self) -> (u64, u64) {
        self.sim.handle().sim().audit.reviews()
    }
}

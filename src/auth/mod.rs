//! Client authentication, authorization and fair limits: the policy behind the stack's
//! `authn`, `impersonate`, `limits`, `authz` and `identity` layers (`src/stack/`). See
//! docs/security.md.
//!
//! Everything is delegated to the upstream apiserver, as an aggregated API server
//! delegates: tokens are reviewed with TokenReview, reads the gateway answers itself are
//! authorized with SubjectAccessReview, and forwarded requests carry the client's identity
//! as impersonation headers, so the apiserver authorizes (and audits) them as the client.

pub mod answers;
pub mod attributes;
pub mod authn;
pub mod authz;
pub mod impersonation;
pub mod limits;
pub mod review;
pub mod ttl_cache;
pub mod user;
pub mod x509;

use std::sync::Arc;
use std::time::Duration;

pub use attributes::Attributes;
pub use review::{Decision, Reviews, UpstreamReviews};
pub use user::{User, UserInfo};

/// Settings of client authentication and authorization (`--auth=delegated`).
#[derive(Debug, Clone)]
pub struct SecurityConfig {
    /// Requests without credentials are `system:anonymous` instead of a 401.
    pub anonymous: bool,
    /// How long a TokenReview's success is kept (kube-apiserver's
    /// `--authentication-token-webhook-cache-ttl`, 2m).
    pub token_ttl: Duration,
    /// How long a rejected token is remembered (shorter: a freshly issued token must not
    /// stay refused for long).
    pub token_failure_ttl: Duration,
    /// How long an allowed / denied SubjectAccessReview is kept (kube-apiserver's
    /// `--authorization-webhook-cache-authorized-ttl` 5m, `-unauthorized-ttl` 30s).
    pub allow_ttl: Duration,
    pub deny_ttl: Duration,
    /// Requests in flight per user (0: unlimited).
    pub max_in_flight_per_user: usize,
    /// Watches and other long-running requests per user (0: unlimited).
    pub max_watches_per_user: usize,
    /// Front proxies (`--requestheader-client-ca-file`): what they may assert.
    pub requestheader: Option<authn::RequestHeaderConfig>,
    /// The cache may answer consistent reads (`--consistent-reads=cache`), so `authz`
    /// authorizes them too before the cache is touched (set by the gateway, not a flag).
    pub consistent_reads_from_cache: bool,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        Self {
            anonymous: false,
            token_ttl: Duration::from_secs(120),
            token_failure_ttl: Duration::from_secs(10),
            allow_ttl: Duration::from_secs(300),
            deny_ttl: Duration::from_secs(30),
            max_in_flight_per_user: 100,
            max_watches_per_user: 500,
            requestheader: None,
            consistent_reads_from_cache: false,
        }
    }
}

/// The shared state of the security layers.
pub struct Security {
    pub authn: authn::Authenticator,
    pub authz: authz::Authorizer,
    pub limits: limits::Limits,
    /// See [`SecurityConfig::consistent_reads_from_cache`].
    pub consistent_reads_from_cache: bool,
}

impl Security {
    pub fn new(cfg: &SecurityConfig, reviews: Arc<dyn Reviews>) -> Arc<Self> {
        Arc::new(Self {
            authn: authn::Authenticator::new(
                reviews.clone(),
                cfg.token_ttl,
                cfg.token_failure_ttl,
                cfg.anonymous,
                cfg.requestheader.clone(),
            ),
            authz: authz::Authorizer::new(reviews, cfg.allow_ttl, cfg.deny_ttl),
            limits: limits::Limits::new(cfg.max_in_flight_per_user, cfg.max_watches_per_user),
            consistent_reads_from_cache: cfg.consistent_reads_from_cache,
        })
    }
}

/// Marks a request the `authz` layer has authorized for the attributes of its typed
/// request: the only requests the router lets the cache and the fan-out answer when
/// security is on.
#[derive(Debug, Clone, Copy)]
pub struct Authorized;

//! The downstream server: accept loop, HTTP/1.1 + HTTP/2 serving, graceful drain.
//!
//! [`Gateway::start`] is what `watchgate serve`, the demo and the tests use in-process.

mod admin;
mod chunked;
mod coalesce;
pub mod express;
mod h1;
mod handler;
mod http2;
mod listener;
mod probe;
mod rewind;
pub mod stall;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::config::{self, GatewayConfig, ServeArgs};
use crate::drain::{Drain, DrainOutcome};
use crate::proxy::Proxy;
use crate::upstream::{Upstream, UpstreamOptions};
use handler::Handler;

pub use crate::drain::DrainWatch;

/// The gateway: an API listener forwarding to the upstream, and an admin listener.
pub struct Gateway;

impl Gateway {
    /// Bind both listeners and start serving. Returns once the sockets are bound, so a
    /// caller may connect to [`GatewayHandle::addr`] immediately.
    pub async fn start(cfg: GatewayConfig) -> anyhow::Result<GatewayHandle> {
        let upstream = Upstream::with_options(
            &cfg.upstream,
            UpstreamOptions {
                servers: cfg.upstream_servers.clone(),
                connect_timeout: cfg.upstream_connect_timeout,
                max_connections: cfg.upstream_max_connections,
            },
        )
        .context("building the upstream client")?;
        // Before binding: files that do not load stop the start-up.
        let tls = cfg
            .tls
            .clone()
            .map(tls::TlsServing::load)
            .transpose()
            .context("loading the TLS serving files")?;
        let api =
            crate::listen::bind(cfg.listen).with_context(|| format!("binding {}", cfg.listen))?;
        let admin = crate::listen::bind(cfg.admin_listen)
            .with_context(|| format!("binding admin {}", cfg.admin_listen))?;
        let addr = api.local_addr()?;
        let admin_addr = admin.local_addr()?;
        if cfg.security.is_none() {
            warn_if_exposed(&addr, "API");
        }
        // The admin listener serves health and metrics, no cluster data: pods bind it on
        // their IP for the kubelet's probes and Prometheus, so a note is enough.
        if config::is_exposed(&admin_addr) {
            tracing::info!(%admin_addr, "admin listener (health, readiness, metrics; no cluster data) is reachable from other machines");
        }

        // Installed before the caches (their stores bind the dispatch histogram when they
        // are created) and the first request, so that no early series is lost.
        if cfg.metrics && crate::metrics::install().is_some() {
            crate::metrics::forward_reasons(
                crate::cache::forward::Forward::ALL
                    .iter()
                    .map(|why| why.label()),
            );
        }
        let drain = Drain::new();
        if let Some(tls) = &tls {
            tokio::spawn(tls.clone().watch(drain.watcher()));
        }
        let cache = match cfg.cache.clone() {
            Some(policy) => {
                let registry = crate::cache::registry::Registry::with_config(
                    upstream.clone(),
                    policy,
                    crate::watch::WatchConfig {
                        record_dispatch: cfg.metrics && cfg.watch.record_dispatch,
                        ..cfg.watch.clone()
                    },
                    cfg.reflector.clone(),
                    cfg.cache_budget,
                    cfg.consistent_reads,
                );
                registry.set_sync_wait(cfg.cache_sync_wait);
                registry.set_consistency_interval(cfg.cache_consistency_check_interval);
                if let Some(warm) = &cfg.cache_state {
                    registry
                        .open_state_file(warm)
                        .context("opening --cache-state-file")?;
                }
                registry.prewarm();
                Some(registry)
            }
            None => None,
        };
        let registry = cache.clone();
        if let Some(registry) = cache.clone() {
            // Watches served from the caches end at an event boundary when the drain
            // begins (their bodies do not each poll the drain).
            let draining = drain.watcher().draining();
            tokio::spawn(async move {
                draining.await;
                registry.shutdown_watches();
                // The debounced save may not come before the process exits.
                registry.save_state_file().await;
            });
        }
        let admin_state = admin::AdminState {
            upstream: probe::UpstreamProbe::new(upstream.clone()),
            cache: cache.clone(),
            drain: drain.watcher(),
            metrics: cfg.metrics,
        };
        let security = cfg.security.as_ref().map(|sec| {
            let reviews = crate::auth::UpstreamReviews::new(upstream.clone());
            let sec = crate::auth::SecurityConfig {
                consistent_reads_from_cache: cfg.cache.is_some()
                    && cfg.consistent_reads == crate::cache::fresh::ConsistentReads::Cache,
                ..sec.clone()
            };
            crate::auth::Security::new(&sec, std::sync::Arc::new(reviews))
        });
        let proxy = Proxy::new(upstream, drain.watcher())
            .with_response_timeout(cfg.upstream_response_timeout);
        let service = crate::stack::api(
            crate::stack::route::Router::new(proxy, cache),
            crate::stack::Options {
                metrics: cfg.metrics,
                security,
            },
        );
        let api_handler: Handler = Arc::new(move |req| {
            use tower::ServiceExt as _;
            let service = service.clone();
            Box::pin(async move {
                match service.oneshot(req).await {
                    Ok(resp) => resp,
                    Err(never) => match never {},
                }
            })
        });
        let admin_handler: Handler = Arc::new(move |req| {
            let state = admin_state.clone();
            Box::pin(admin::handle(state, req))
        });
        let conn = listener::ConnOptions {
            http2_max_streams: cfg.http2_max_streams,
            write_stall_timeout: cfg.write_stall_timeout,
        };
        tokio::spawn(listener::accept_loop(
            api,
            api_handler,
            drain.watcher(),
            "api",
            conn,
            tls.clone(),
        ));
        tokio::spawn(listener::accept_loop(
            admin,
            admin_handler,
            drain.watcher(),
            "admin",
            conn,
            // The admin listener stays plain HTTP: the kubelet's probes and Prometheus
            // scrape it, and it serves no cluster data.
            None,
        ));
        tracing::info!(%addr, %admin_addr, upstream = %cfg.upstream.cluster_url, "serving");
        if cfg.upstream_servers.len() > 1 {
            tracing::info!(servers = ?cfg.upstream_servers, "several upstream apiservers: requests go to the first healthy one");
        }
        Ok(GatewayHandle {
            addr,
            admin_addr,
            tls,
            cache: registry,
            shutdown_timeout: cfg.shutdown_timeout,
            drain: Some(drain),
        })
    }
}

/// A running gateway. Dropping it stops the gateway at once; [`GatewayHandle::shutdown`]
/// drains it gracefully.
pub struct GatewayHandle {
    addr: SocketAddr,
    admin_addr: SocketAddr,
    tls: Option<Arc<tls::TlsServing>>,
    cache: Option<Arc<crate::cache::registry::Registry>>,
    shutdown_timeout: Duration,
    drain: Option<Drain>,
}

impl GatewayHandle {
    /// The API listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`, or `https://<addr>` with TLS serving, for clients.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Runs the TLS files' check now, as the periodic one does: `Ok(true)` when a changed
    /// set was loaded, `Ok(false)` when nothing changed (or no TLS), an error when the
    /// changed set does not load (the previous one stays in use).
    pub fn reload_tls(&self) -> Result<bool, tls::TlsError> {
        match &self.tls {
            Some(tls) => tls.reload(),
            None => Ok(false),
        }
    }

    /// The admin listener's address (/healthz, /livez, /readyz, /metrics).
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// The caches (`None` with the cache disabled): in-process tests read the fan-out's
    /// own counters here, more precisely than a scrape or the process's RSS can tell.
    pub fn cache(&self) -> Option<&Arc<crate::cache::registry::Registry>> {
        self.cache.as_ref()
    }

    /// Drain within the configured shutdown timeout: stop accepting, end watch streams
    /// cleanly, let in-flight requests and tunnels finish, cut the rest at the deadline.
    pub async fn shutdown(mut self) -> DrainOutcome {
        let timeout = self.shutdown_timeout;
        self.drain_within(timeout).await
    }

    /// Like [`GatewayHandle::shutdown`] with an explicit deadline.
    pub async fn drain_within(&mut self, deadline: Duration) -> DrainOutcome {
        match self.drain.take() {
            Some(drain) => drain.run(deadline).await,
            None => DrainOutcome::Complete,
        }
    }
}

fn warn_if_exposed(addr: &SocketAddr, which: &str) {
    if config::is_exposed(addr) {
        let msg = format!(
            "WARNING: the {which} listener binds {addr}, which is reachable from other \
             machines, and --auth=none authenticates no client: anyone who can reach \
             this port acts with watchgate's upstream credentials. Use --auth=delegated \
             (docs/security.md)."
        );
        eprintln!("\n{}\n{msg}\n{}\n", "!".repeat(78), "!".repeat(78));
        tracing::warn!("{msg}");
    }
}

/// `watchgate serve`: run until SIGTERM/SIGINT, then drain. A second signal cuts the
/// drain short.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    // Before anything is served: a SIGTERM that arrives once clients can connect must
    // drain, not kill the process with its default action (a race that cut open watches).
    let mut signals = Signals::new()?;
    let cfg = GatewayConfig::from_args(&args).await?;
    let cfg_tls = cfg.tls.is_some();
    let gateway = Gateway::start(cfg).await?;
    // kubectl proxy's wording, so scripts that wait for it keep working.
    println!("Starting to serve on {}", gateway.addr());
    if cfg_tls {
        println!("Serving HTTPS: {}", gateway.url());
    }
    println!("Admin endpoints on http://{}/healthz", gateway.admin_addr());

    signals.next().await;
    tracing::info!("shutdown signal received; draining");
    tokio::select! {
        outcome = gateway.shutdown() => {
            tracing::info!(?outcome, "drained");
        }
        _ = signals.next() => {
            tracing::warn!("second signal; stopping without waiting for the drain");
        }
    }
    Ok(())
}

struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

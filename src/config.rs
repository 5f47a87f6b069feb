//! Typed, validated configuration of `watchgate serve`: the only place that reads flags.
//!
//! Upstream settings come from kube's own config inference (kubeconfig, contexts,
//! in-cluster service account, client certificates, exec plugins, CA bundles,
//! `insecure-skip-tls-verify`): watchgate never parses a kubeconfig itself.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Flags of `watchgate serve`, modelled on `kubectl proxy` and kube-apiserver.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// The IP address on which to serve. Anything but loopback must be chosen explicitly
    /// and, until client authentication exists, prints a loud warning.
    #[arg(long, default_value = "127.0.0.1")]
    pub address: IpAddr,
    /// The port on which to serve (0 picks a free port).
    #[arg(long, default_value_t = 8001)]
    pub port: u16,
    /// Path to the kubeconfig file to use (default: $KUBECONFIG or ~/.kube/config, then
    /// the in-cluster service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long)]
    pub context: Option<String>,
    /// The address of the upstream Kubernetes API server; overrides the kubeconfig's.
    #[arg(long)]
    pub server: Option<String>,
    /// The IP address of the admin listener (/healthz, /livez, /readyz, /metrics).
    #[arg(long, default_value = "127.0.0.1")]
    pub admin_address: IpAddr,
    /// The port of the admin listener (0 picks a free port).
    #[arg(long, default_value_t = 9090)]
    pub admin_port: u16,
    /// How long a graceful shutdown may take before open connections are cut.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,
    /// How long to wait for a TCP (and TLS) connection to the upstream.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub upstream_connect_timeout: Duration,
    /// How long a non-streaming request may wait for the upstream's response headers
    /// (kube-apiserver answers those within its own 60 s request timeout). Watches, followed
    /// logs and upgrades are exempt; a request's own `?timeout=` extends it.
    #[arg(long, default_value = "70s", value_parser = parse_duration)]
    pub upstream_response_timeout: Duration,
    /// Resources to cache from start-up, comma-separated (e.g. `pods,nodes,deployments.apps`).
    /// Other resources start caching on their first cacheable read.
    #[arg(long, value_delimiter = ',', value_name = "RESOURCES")]
    pub cache: Vec<String>,
    /// Resources never to cache, comma-separated (e.g. `secrets`); always forwarded.
    #[arg(long = "no-cache", value_delimiter = ',', value_name = "RESOURCES")]
    pub no_cache: Vec<String>,
    /// Forward every request; serve nothing from the cache.
    #[arg(long)]
    pub disable_cache: bool,
}

/// Everything the gateway needs to run, independent of how it was obtained.
#[derive(Clone)]
pub struct GatewayConfig {
    /// Where the API listener binds (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Where the admin listener binds (port 0 picks a free port).
    pub admin_listen: SocketAddr,
    /// The upstream apiserver: URL, TLS material and credentials, as kube inferred them.
    pub upstream: kube::Config,
    /// Deadline of a graceful drain.
    pub shutdown_timeout: Duration,
    /// Deadline for connecting to the upstream; a dead upstream must yield a 503, not a hang.
    pub upstream_connect_timeout: Duration,
    /// Deadline for the response head of a non-streaming request: an upstream that accepts
    /// connections but never answers must yield a 503 too.
    pub upstream_response_timeout: Duration,
    /// Which resources are cached; `None` forwards everything.
    pub cache: Option<crate::cache::registry::CachePolicy>,
    /// How downstream watches are served from the cache (history window, bookmarks).
    pub watch: crate::watch::WatchConfig,
    /// Record Prometheus metrics (on by default). Off, the request path skips its
    /// instrumentation and `/metrics` answers 404: what the benchmarks compare against.
    pub metrics: bool,
}

impl std::fmt::Debug for GatewayConfig {
    // kube::Config holds credentials; print only what is safe to log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("listen", &self.listen)
            .field("admin_listen", &self.admin_listen)
            .field("upstream", &self.upstream.cluster_url)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .field("upstream_connect_timeout", &self.upstream_connect_timeout)
            .field("upstream_response_timeout", &self.upstream_response_timeout)
            .finish()
    }
}

impl GatewayConfig {
    /// A loopback gateway on free ports in front of `url`, with no credentials: what the
    /// tests and the demo use.
    pub fn for_upstream_url(url: &str) -> anyhow::Result<Self> {
        let uri: http::Uri = url
            .parse()
            .with_context(|| format!("invalid upstream URL {url:?}"))?;
        Ok(Self::for_upstream(kube::Config::new(uri)))
    }

    /// A loopback gateway on free ports in front of an already built kube config.
    pub fn for_upstream(upstream: kube::Config) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            upstream,
            shutdown_timeout: Duration::from_secs(30),
            upstream_connect_timeout: Duration::from_secs(5),
            upstream_response_timeout: Duration::from_secs(70),
            cache: Some(Default::default()),
            watch: Default::default(),
            metrics: true,
        }
    }

    /// Resolve the flags of `watchgate serve`, including kube's config inference.
    pub async fn from_args(args: &ServeArgs) -> anyhow::Result<Self> {
        let upstream = infer_upstream(args).await?;
        Ok(Self {
            listen: SocketAddr::new(args.address, args.port),
            admin_listen: SocketAddr::new(args.admin_address, args.admin_port),
            upstream,
            shutdown_timeout: args.shutdown_timeout,
            upstream_connect_timeout: args.upstream_connect_timeout,
            upstream_response_timeout: args.upstream_response_timeout,
            cache: (!args.disable_cache).then(|| crate::cache::registry::CachePolicy {
                prewarm: args.cache.clone(),
                exclude: args.no_cache.clone(),
            }),
            watch: Default::default(),
            metrics: true,
        })
    }
}

/// kubectl's precedence: an explicit `--kubeconfig`, else `$KUBECONFIG`/`~/.kube/config`,
/// else the in-cluster service account; `--server` then replaces the URL. With `--server`
/// and no config at all, a credential-less config for that URL is used (as kubectl does).
async fn infer_upstream(args: &ServeArgs) -> anyhow::Result<kube::Config> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let inferred = if let Some(path) = &args.kubeconfig {
        let kubeconfig = Kubeconfig::read_from(path)
            .with_context(|| format!("reading kubeconfig {}", path.display()))?;
        kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(anyhow::Error::from)
    } else if args.context.is_some() {
        kube::Config::from_kubeconfig(&options)
            .await
            .map_err(anyhow::Error::from)
    } else {
        kube::Config::infer().await.map_err(anyhow::Error::from)
    };

    let server = args
        .server
        .as_deref()
        .map(|s| {
            s.parse::<http::Uri>()
                .with_context(|| format!("invalid --server {s:?}"))
        })
        .transpose()?;

    match (inferred, server) {
        (Ok(mut config), Some(server)) => {
            config.cluster_url = server;
            Ok(config)
        }
        (Ok(config), None) => Ok(config),
        // Only an explicitly chosen kubeconfig or context must exist; otherwise --server
        // alone is enough.
        (Err(_), Some(server)) if args.kubeconfig.is_none() && args.context.is_none() => {
            Ok(kube::Config::new(server))
        }
        (Err(err), _) => Err(err.context(
            "no upstream configuration: pass --server, --kubeconfig, or run in a cluster",
        )),
    }
}

/// Whether binding `addr` exposes the gateway beyond this machine.
pub fn is_exposed(addr: &SocketAddr) -> bool {
    !addr.ip().is_loopback()
}

/// Durations the way Go flags spell them: `30s`, `500ms`, `2m`, `1h`, or bare seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    let secs = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => {
            return Err(format!(
                "invalid duration unit in {s:?} (use ms, s, m or h)"
            ))
        }
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("invalid duration {s:?}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_go_flags() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn loopback_is_not_exposed() {
        assert!(!is_exposed(&"127.0.0.1:8001".parse().unwrap()));
        assert!(!is_exposed(&"[::1]:8001".parse().unwrap()));
        assert!(is_exposed(&"0.0.0.0:8001".parse().unwrap()));
        assert!(is_exposed(&"10.1.2.3:8001".parse().unwrap()));
    }

    #[tokio::test]
    async fn server_flag_alone_is_enough() {
        let args = ServeArgs {
            address: "127.0.0.1".parse().unwrap(),
            port: 0,
            kubeconfig: None,
            context: None,
            server: Some("http://127.0.0.1:1234".into()),
            admin_address: "127.0.0.1".parse().unwrap(),
            admin_port: 0,
            shutdown_timeout: Duration::from_secs(1),
            upstream_connect_timeout: Duration::from_secs(1),
            upstream_response_timeout: Duration::from_secs(1),
            cache: vec![],
            no_cache: vec![],
            disable_cache: false,
        };
        let cfg = GatewayConfig::from_args(&args).await.unwrap();
        assert_eq!(cfg.upstream.cluster_url, "http://127.0.0.1:1234/");
    }

    #[tokio::test]
    async fn kubeconfig_and_context_come_from_kube() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: a\n\
             clusters:\n- name: ca\n  cluster: {server: 'https://10.0.0.1:6443', insecure-skip-tls-verify: true}\n\
             - name: cb\n  cluster: {server: 'http://127.0.0.1:7777'}\n\
             users:\n- name: u\n  user: {token: secret-token}\n\
             contexts:\n- name: a\n  context: {cluster: ca, user: u}\n\
             - name: b\n  context: {cluster: cb, user: u}\n",
        )
        .unwrap();
        let mut args = ServeArgs {
            address: "127.0.0.1".parse().unwrap(),
            port: 0,
            kubeconfig: Some(path),
            context: None,
            server: None,
            admin_address: "127.0.0.1".parse().unwrap(),
            admin_port: 0,
            shutdown_timeout: Duration::from_secs(1),
            upstream_connect_timeout: Duration::from_secs(1),
            upstream_response_timeout: Duration::from_secs(1),
            cache: vec![],
            no_cache: vec![],
            disable_cache: false,
        };
        let cfg = GatewayConfig::from_args(&args).await.unwrap();
        assert_eq!(cfg.upstream.cluster_url, "https://10.0.0.1:6443/");
        assert!(cfg.upstream.accept_invalid_certs);

        args.context = Some("b".into());
        let cfg = GatewayConfig::from_args(&args).await.unwrap();
        assert_eq!(cfg.upstream.cluster_url, "http://127.0.0.1:7777/");

        args.server = Some("http://127.0.0.1:9999".into());
        let cfg = GatewayConfig::from_args(&args).await.unwrap();
        assert_eq!(cfg.upstream.cluster_url, "http://127.0.0.1:9999/");

        args.context = Some("missing".into());
        assert!(GatewayConfig::from_args(&args).await.is_err());
    }
}

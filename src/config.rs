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
    /// How long watch events stay in each resource's history, so that clients resuming
    /// from a recent resourceVersion continue instead of relisting (kube-apiserver: ~75 s).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub watch_history_window: Duration,
    /// The byte budget of each resource's watch history; the oldest events go first when
    /// it is exceeded. Accepts Ki, Mi and Gi suffixes.
    #[arg(long, default_value = "256Mi", value_parser = parse_bytes)]
    pub watch_history_bytes: usize,
    /// How often an idle watch that asked for bookmarks gets one (kube-apiserver: 1m).
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub watch_bookmark_interval: Duration,
    /// Concurrent streams allowed on one HTTP/2 client connection (kube-apiserver's
    /// --http2-max-streams-per-connection; its aggregated API servers use 1000).
    #[arg(long, default_value_t = 1000)]
    pub http2_max_streams_per_connection: u32,
    /// A client connection that accepts no byte of the gateway's writes for this long is
    /// closed, and a watch whose initial state stops moving for this long gives it up
    /// (its stream ends). A client that keeps reading, however slowly, is never cut; nor
    /// is an HTTP/2 stream whose client stops reading only that stream (its memory stays
    /// bounded). 0 disables both
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub write_stall_timeout: Duration,
    /// How caches get their initial state: `auto` streams it with a watch-list
    /// (`sendInitialEvents`) when the upstream supports it, else pages a list; `off`
    /// always pages a list, then watches.
    #[arg(long, value_enum, default_value = "auto", value_name = "MODE")]
    pub upstream_watch_list: crate::cache::reflector::WatchListMode,
    /// Where gets, lists and watches with no resourceVersion (consistent reads) are
    /// answered: `cache` serves them from the cache once a probe of the upstream proves it
    /// fresh (docs/consistency.md), else forwards them; `upstream` always forwards them.
    #[arg(long, value_enum, default_value = "cache", value_name = "WHERE")]
    pub consistent_reads: crate::cache::fresh::ConsistentReads,
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
    /// Concurrent streams per HTTP/2 connection on the API listener.
    pub http2_max_streams: u32,
    /// A connection whose writes accept no byte for this long is closed (`None`: never).
    /// `watch.stall_timeout` is the same bound for a watch's initial state.
    pub write_stall_timeout: Option<Duration>,
    /// How the caches' reflectors read the upstream (watch-list or paged list).
    pub reflector: crate::cache::reflector::ReflectorConfig,
    /// Where consistent reads are answered (`--consistent-reads`).
    pub consistent_reads: crate::cache::fresh::ConsistentReads,
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
            http2_max_streams: 1000,
            write_stall_timeout: Some(crate::watch::DEFAULT_STALL_TIMEOUT),
            reflector: Default::default(),
            consistent_reads: Default::default(),
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
            watch: crate::watch::WatchConfig {
                history_window: args.watch_history_window,
                history_bytes: args.watch_history_bytes,
                bookmark_interval: args.watch_bookmark_interval,
                stall_timeout: args.write_stall_timeout,
                record_dispatch: true,
            },
            http2_max_streams: args.http2_max_streams_per_connection,
            write_stall_timeout: Some(args.write_stall_timeout).filter(|t| !t.is_zero()),
            reflector: crate::cache::reflector::ReflectorConfig {
                watch_list: args.upstream_watch_list,
                ..Default::default()
            },
            consistent_reads: args.consistent_reads,
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
    // `try_`: a duration past what `Duration` holds is an error, not a panic.
    Duration::try_from_secs_f64(secs).map_err(|_| format!("invalid duration {s:?}"))
}

/// A byte size: a plain number, or one with a Ki, Mi or Gi suffix.
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: usize = num.parse().map_err(|_| format!("invalid size {s:?}"))?;
    let scale: usize = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => return Err(format!("invalid size unit in {s:?} (use Ki, Mi or Gi)")),
    };
    value
        .checked_mul(scale)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_bytes("512"), Ok(512));
        assert_eq!(parse_bytes("64Ki"), Ok(65536));
        assert_eq!(parse_bytes("256Mi"), Ok(256 << 20));
        assert_eq!(parse_bytes("1Gi"), Ok(1 << 30));
        assert!(parse_bytes("1GB").is_err());
        assert!(parse_bytes("x").is_err());
        assert!(parse_bytes("99999999999999999999Gi").is_err());
    }

    #[test]
    fn durations_parse_like_go_flags() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
        // Past what a Duration holds: an error, not a panic.
        assert!(parse_duration("99999999999999999999999h").is_err());
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
            watch_history_window: Duration::from_secs(300),
            watch_history_bytes: 1 << 20,
            watch_bookmark_interval: Duration::from_secs(60),
            http2_max_streams_per_connection: 1000,
            write_stall_timeout: Duration::from_secs(60),
            upstream_watch_list: Default::default(),
            consistent_reads: Default::default(),
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
            watch_history_window: Duration::from_secs(300),
            watch_history_bytes: 1 << 20,
            watch_bookmark_interval: Duration::from_secs(60),
            http2_max_streams_per_connection: 1000,
            write_stall_timeout: Duration::from_secs(60),
            upstream_watch_list: Default::default(),
            consistent_reads: Default::default(),
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

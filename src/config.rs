//! Typed, validated configuration of `watchgate serve`: the only place that reads flags.
//!
//! Upstream settings come from kube's own config inference (kubeconfig, contexts,
//! in-cluster service account, client certificates, exec plugins, CA bundles,
//! `insecure-skip-tls-verify`): watchgate never parses a kubeconfig itself.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

pub use crate::duration::{parse_duration, DurationError};

use anyhow::Context as _;
use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Flags of `watchgate serve`, modelled on `kubectl proxy` and kube-apiserver.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// The IP address on which to serve. Anything but loopback must be chosen explicitly
    /// and, with --auth=none, prints a loud warning.
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
    /// Repeat it (or separate with commas) for the apiservers of one HA control plane:
    /// requests go to the first healthy one, in order
    #[arg(long, value_delimiter = ',')]
    pub server: Vec<String>,
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
    /// Upstream connections open at most, over all apiservers. A tenth of them is kept
    /// for short requests; a request that finds no room gets 429 with Retry-After
    #[arg(long, default_value_t = crate::upstream::DEFAULT_MAX_CONNECTIONS, value_parser = parse_positive)]
    pub upstream_max_connections: usize,
    /// How long a non-streaming request may wait for the upstream's response headers
    /// (kube-apiserver answers those within its own 60 s request timeout). Long-running
    /// requests (watches, logs, exec, attach, port-forward, proxy) and upgrades are exempt; a
    /// request's own `?timeout=` extends it.
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
    /// A file in which the gateway remembers the resources whose caches synced (a small
    /// JSON list, saved a second after a change), to start them again at its next start
    /// before any client asks; /readyz waits for them (--cache-warmup-timeout). Keep it
    /// on a volume that outlives the container (an emptyDir). None by default
    #[arg(long, value_name = "FILE")]
    pub cache_state_file: Option<PathBuf>,
    /// How long after start-up the resources of --cache-state-file hold readiness while
    /// they sync; after it, one that has not synced is reported but no longer fails
    /// /readyz (the --cache ones always count)
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub cache_warmup_timeout: Duration,
    /// The byte budget of all caches together (their objects' JSON, parsed headers and
    /// map entries; the watch histories are apart). A resource that would take the caches
    /// past it is not cached, or stops being cached, and its requests are forwarded; it is
    /// tried again on a request 10 minutes later. 0 = no limit. Accepts Ki, Mi and Gi suffixes
    #[arg(long, default_value = "0", value_parser = parse_bytes, value_name = "BYTES")]
    pub cache_max_bytes: usize,
    /// The byte budget of any one resource's cache, counted the same way; a resource over
    /// it is forwarded instead. 0 = no limit. Accepts Ki, Mi and Gi suffixes
    #[arg(long, default_value = "0", value_parser = parse_bytes, value_name = "BYTES")]
    pub cache_max_resource_bytes: usize,
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
    /// What watches get when the upstream forces a relist (a 410, a broken stream): `diff`
    /// sends the relist's difference as ordinary events and every stream goes on; `end`
    /// ends every watch of the resource, as kube-apiserver's watch cache does when it
    /// relists (clients resume from their last resourceVersion, or relist on a 410).
    #[arg(long, value_enum, default_value = "diff", value_name = "MODE")]
    pub watch_relist: crate::watch::RelistMode,
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
    /// How long a get, list or watch waits for its resource's cache to sync (the first
    /// list or watch-list, shared by every request arriving meanwhile) before it is
    /// forwarded instead; a watch waits no longer than its own timeoutSeconds. 0 forwards
    /// at once
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub cache_sync_wait: Duration,
    /// How often each cache is compared with the upstream at one resourceVersion (a
    /// metadata-only list, as kube-apiserver checks its watch cache against etcd), plus up
    /// to half of it as jitter; a difference re-syncs the resource. 0 turns the periodic
    /// check off (docs/consistency.md, "The consistency check")
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub cache_consistency_check_interval: Duration,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub auth: AuthArgs,
}

/// HTTPS on the API listener and client certificates (docs/security.md). The admin
/// listener stays plain HTTP.
#[derive(Args, Debug, Clone)]
pub struct TlsArgs {
    /// PEM certificate (chain, leaf first) the API listener serves HTTPS with (HTTP/2 and
    /// HTTP/1.1 through ALPN); needs --tls-private-key-file. Both files are read again
    /// every few seconds and a changed pair is used for new connections
    #[arg(long, requires = "tls_private_key_file", value_name = "FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file
    #[arg(long, requires = "tls_cert_file", value_name = "FILE")]
    pub tls_private_key_file: Option<PathBuf>,
    /// With TLS and --auth=delegated: PEM CA bundle; a client certificate it signed
    /// authenticates its client as the certificate's CN (user) and O (groups). Clients
    /// are asked for a certificate, not required to send one
    #[arg(long, value_name = "FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// With TLS and --auth=delegated: PEM CA bundle of front proxies; a client whose
    /// certificate it signed (and whose CN --requestheader-allowed-names allows) is a
    /// front proxy, and its requests are from the user its --requestheader-* headers name
    #[arg(long, value_name = "FILE")]
    pub requestheader_client_ca_file: Option<PathBuf>,
    /// Common names a front proxy's certificate may have, comma-separated (empty: any
    /// signed by --requestheader-client-ca-file)
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub requestheader_allowed_names: Vec<String>,
    /// Headers a front proxy names the user in; the first non-empty one is used
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "X-Remote-User",
        value_name = "HEADERS"
    )]
    pub requestheader_username_headers: Vec<String>,
    /// Headers a front proxy names the user's groups in (every value of each)
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "X-Remote-Group",
        value_name = "HEADERS"
    )]
    pub requestheader_group_headers: Vec<String>,
    /// Header prefixes a front proxy gives the user's extra attributes with
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "X-Remote-Extra-",
        value_name = "PREFIXES"
    )]
    pub requestheader_extra_headers_prefix: Vec<String>,
}

impl Default for TlsArgs {
    fn default() -> Self {
        Self {
            tls_cert_file: None,
            tls_private_key_file: None,
            client_ca_file: None,
            requestheader_client_ca_file: None,
            requestheader_allowed_names: Vec::new(),
            requestheader_username_headers: vec!["X-Remote-User".into()],
            requestheader_group_headers: vec!["X-Remote-Group".into()],
            requestheader_extra_headers_prefix: vec!["X-Remote-Extra-".into()],
        }
    }
}

impl TlsArgs {
    /// The TLS files, or `None` without `--tls-cert-file`; client CAs need TLS.
    pub fn files(&self) -> anyhow::Result<Option<TlsFiles>> {
        let (Some(cert), Some(key)) = (&self.tls_cert_file, &self.tls_private_key_file) else {
            if self.client_ca_file.is_some() || self.requestheader_client_ca_file.is_some() {
                anyhow::bail!(
                    "--client-ca-file and --requestheader-client-ca-file need TLS serving \
                     (--tls-cert-file and --tls-private-key-file): client certificates are \
                     only seen in a TLS handshake"
                );
            }
            return Ok(None);
        };
        let mut files = TlsFiles::new(cert.clone(), key.clone());
        files.client_ca = self.client_ca_file.clone();
        files.requestheader_ca = self.requestheader_client_ca_file.clone();
        Ok(Some(files))
    }

    /// What front proxies may assert, or `None` without `--requestheader-client-ca-file`.
    pub fn requestheader(&self) -> anyhow::Result<Option<crate::auth::authn::RequestHeaderConfig>> {
        if self.requestheader_client_ca_file.is_none() {
            return Ok(None);
        }
        let names = |flag: &str, values: &[String]| -> anyhow::Result<Vec<http::HeaderName>> {
            values
                .iter()
                .filter(|v| !v.trim().is_empty())
                .map(|v| {
                    http::HeaderName::from_bytes(v.trim().to_ascii_lowercase().as_bytes())
                        .with_context(|| format!("--{flag}: {v:?} is not a header name"))
                })
                .collect()
        };
        Ok(Some(crate::auth::authn::RequestHeaderConfig {
            allowed_names: self
                .requestheader_allowed_names
                .iter()
                .filter(|n| !n.is_empty())
                .cloned()
                .collect(),
            username_headers: names(
                "requestheader-username-headers",
                &self.requestheader_username_headers,
            )?,
            group_headers: names(
                "requestheader-group-headers",
                &self.requestheader_group_headers,
            )?,
            extra_prefixes: self
                .requestheader_extra_headers_prefix
                .iter()
                .filter(|p| !p.trim().is_empty())
                .map(|p| p.trim().to_ascii_lowercase())
                .collect(),
        }))
    }
}

/// Who may use the gateway: `--auth` and its settings (docs/security.md).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthMode {
    /// No client authentication: every request acts with watchgate's upstream
    /// credentials. Only for a listener on loopback inside one pod (sidecar mode).
    #[default]
    None,
    /// Clients are authenticated with TokenReview and the reads the gateway answers are
    /// authorized with SubjectAccessReview, both asked of the upstream; forwarded requests
    /// impersonate the client.
    Delegated,
}

#[derive(Args, Debug, Clone)]
pub struct AuthArgs {
    /// Client authentication and authorization: `none` (every client acts with
    /// watchgate's credentials; loopback sidecars only) or `delegated` (TokenReview,
    /// SubjectAccessReview and impersonation through the upstream; see docs/security.md)
    #[arg(long = "auth", value_enum, default_value = "none", value_name = "MODE")]
    pub mode: AuthMode,
    /// With --auth=delegated: requests without credentials are served as
    /// system:anonymous (group system:unauthenticated) instead of getting a 401
    #[arg(long)]
    pub anonymous_auth: bool,
    /// How long a token the upstream's TokenReview accepted is trusted without asking again
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub authentication_token_webhook_cache_ttl: Duration,
    /// How long a token the TokenReview rejected is refused without asking again
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub authentication_token_webhook_cache_failure_ttl: Duration,
    /// How long an allowed SubjectAccessReview decision is reused
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub authorization_webhook_cache_authorized_ttl: Duration,
    /// How long a denied SubjectAccessReview decision is reused
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub authorization_webhook_cache_unauthorized_ttl: Duration,
    /// With --auth=delegated: requests one user may have in flight at once (watches and
    /// other long-running requests excepted); beyond it, 429 with Retry-After. 0: no limit
    #[arg(long, default_value_t = 100)]
    pub max_requests_inflight_per_user: usize,
    /// With --auth=delegated: watches (and the other long-running requests: logs, exec,
    /// attach, port-forward, proxy) one user may have open at once; beyond it, 429 with
    /// Retry-After. 0: no limit
    #[arg(long, default_value_t = 500)]
    pub max_watches_per_user: usize,
}

impl Default for AuthArgs {
    fn default() -> Self {
        let d = crate::auth::SecurityConfig::default();
        Self {
            mode: AuthMode::None,
            anonymous_auth: false,
            authentication_token_webhook_cache_ttl: d.token_ttl,
            authentication_token_webhook_cache_failure_ttl: d.token_failure_ttl,
            authorization_webhook_cache_authorized_ttl: d.allow_ttl,
            authorization_webhook_cache_unauthorized_ttl: d.deny_ttl,
            max_requests_inflight_per_user: d.max_in_flight_per_user,
            max_watches_per_user: d.max_watches_per_user,
        }
    }
}

impl AuthArgs {
    /// The security settings, or `None` for `--auth=none`.
    pub fn security(&self) -> Option<crate::auth::SecurityConfig> {
        (self.mode == AuthMode::Delegated).then_some(crate::auth::SecurityConfig {
            anonymous: self.anonymous_auth,
            token_ttl: self.authentication_token_webhook_cache_ttl,
            token_failure_ttl: self.authentication_token_webhook_cache_failure_ttl,
            allow_ttl: self.authorization_webhook_cache_authorized_ttl,
            deny_ttl: self.authorization_webhook_cache_unauthorized_ttl,
            max_in_flight_per_user: self.max_requests_inflight_per_user,
            max_watches_per_user: self.max_watches_per_user,
            requestheader: None,
            consistent_reads_from_cache: false,
        })
    }
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
    /// The apiservers, in order of preference (`--server` given several times); empty:
    /// `upstream.cluster_url` alone.
    pub upstream_servers: Vec<http::Uri>,
    /// Upstream connections open at most (`--upstream-max-connections`).
    pub upstream_max_connections: usize,
    /// Deadline of a graceful drain.
    pub shutdown_timeout: Duration,
    /// Deadline for connecting to the upstream; a dead upstream must yield a 503, not a hang.
    pub upstream_connect_timeout: Duration,
    /// Deadline for the response head of a non-streaming request: an upstream that accepts
    /// connections but never answers must yield a 503 too.
    pub upstream_response_timeout: Duration,
    /// Which resources are cached; `None` forwards everything.
    pub cache: Option<crate::cache::registry::CachePolicy>,
    /// The state file of the cached resources and the warm-up (`--cache-state-file`).
    pub cache_state: Option<crate::cache::warm::WarmConfig>,
    /// How many bytes the caches may hold (`--cache-max-bytes`, `--cache-max-resource-bytes`).
    pub cache_budget: crate::cache::budget::BudgetConfig,
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
    /// How long a request waits for a cold cache (`--cache-sync-wait`).
    pub cache_sync_wait: Duration,
    /// How often each cache is compared with the upstream; zero: never
    /// (`--cache-consistency-check-interval`).
    pub cache_consistency_check_interval: Duration,
    /// Client authentication, authorization and per-user limits (`None`: `--auth=none`).
    pub security: Option<crate::auth::SecurityConfig>,
    /// HTTPS on the API listener (`None`: plain HTTP).
    pub tls: Option<TlsFiles>,
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
            .field("upstream_servers", &self.upstream_servers)
            .field("upstream_max_connections", &self.upstream_max_connections)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .field("upstream_connect_timeout", &self.upstream_connect_timeout)
            .field("upstream_response_timeout", &self.upstream_response_timeout)
            .field("security", &self.security)
            .field("tls", &self.tls)
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

    /// A loopback gateway on free ports in front of several apiservers of one cluster
    /// (the first is the kube config's URL), with no credentials.
    pub fn for_upstream_urls(urls: &[&str]) -> anyhow::Result<Self> {
        let uris = urls
            .iter()
            .map(|u| {
                u.parse::<http::Uri>()
                    .with_context(|| format!("invalid upstream URL {u:?}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let first = uris.first().context("no upstream URL")?.clone();
        let mut cfg = Self::for_upstream(kube::Config::new(first));
        cfg.upstream_servers = uris;
        Ok(cfg)
    }

    /// A loopback gateway on free ports in front of an already built kube config.
    pub fn for_upstream(upstream: kube::Config) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            upstream,
            upstream_servers: Vec::new(),
            upstream_max_connections: crate::upstream::DEFAULT_MAX_CONNECTIONS,
            shutdown_timeout: Duration::from_secs(30),
            upstream_connect_timeout: Duration::from_secs(5),
            upstream_response_timeout: Duration::from_secs(70),
            cache: Some(Default::default()),
            cache_state: None,
            cache_budget: Default::default(),
            watch: Default::default(),
            http2_max_streams: 1000,
            write_stall_timeout: Some(crate::watch::DEFAULT_STALL_TIMEOUT),
            reflector: Default::default(),
            consistent_reads: Default::default(),
            cache_sync_wait: crate::cache::registry::DEFAULT_SYNC_WAIT,
            cache_consistency_check_interval: crate::cache::consistency::DEFAULT_INTERVAL,
            security: None,
            tls: None,
            metrics: true,
        }
    }

    /// Resolve the flags of `watchgate serve`, including kube's config inference.
    pub async fn from_args(args: &ServeArgs) -> anyhow::Result<Self> {
        let (upstream, upstream_servers) = infer_upstream(args).await?;
        let mut security = args.auth.security();
        let tls = args.tls.files()?;
        let certs =
            args.tls.client_ca_file.is_some() || args.tls.requestheader_client_ca_file.is_some();
        if certs && security.is_none() {
            anyhow::bail!(
                "--client-ca-file and --requestheader-client-ca-file authenticate clients, \
                 which needs --auth=delegated"
            );
        }
        if let Some(sec) = &mut security {
            sec.requestheader = args.tls.requestheader()?;
        }
        if security.is_some() && upstream.auth_info.impersonate.is_some() {
            anyhow::bail!(
                "--auth=delegated impersonates each client upstream, so the kubeconfig's \
                 user must not impersonate (`as:`) itself"
            );
        }
        Ok(Self {
            listen: SocketAddr::new(args.address, args.port),
            admin_listen: SocketAddr::new(args.admin_address, args.admin_port),
            upstream,
            upstream_servers,
            upstream_max_connections: args.upstream_max_connections,
            shutdown_timeout: args.shutdown_timeout,
            upstream_connect_timeout: args.upstream_connect_timeout,
            upstream_response_timeout: args.upstream_response_timeout,
            cache: (!args.disable_cache).then(|| crate::cache::registry::CachePolicy {
                prewarm: args.cache.clone(),
                exclude: args.no_cache.clone(),
            }),
            cache_state: args.cache_state_file.clone().map(|state_file| {
                crate::cache::warm::WarmConfig {
                    state_file,
                    timeout: args.cache_warmup_timeout,
                }
            }),
            cache_budget: crate::cache::budget::BudgetConfig {
                max_bytes: args.cache_max_bytes,
                max_resource_bytes: args.cache_max_resource_bytes,
                ..Default::default()
            },
            watch: crate::watch::WatchConfig {
                history_window: args.watch_history_window,
                history_bytes: args.watch_history_bytes,
                bookmark_interval: args.watch_bookmark_interval,
                stall_timeout: args.write_stall_timeout,
                record_dispatch: true,
                relist: args.watch_relist,
            },
            http2_max_streams: args.http2_max_streams_per_connection,
            write_stall_timeout: Some(args.write_stall_timeout).filter(|t| !t.is_zero()),
            reflector: crate::cache::reflector::ReflectorConfig {
                watch_list: args.upstream_watch_list,
                ..Default::default()
            },
            consistent_reads: args.consistent_reads,
            cache_sync_wait: args.cache_sync_wait,
            cache_consistency_check_interval: args.cache_consistency_check_interval,
            security,
            tls,
            metrics: true,
        })
    }
}

/// kubectl's precedence: an explicit `--kubeconfig`, else `$KUBECONFIG`/`~/.kube/config`,
/// else the in-cluster service account; `--server` then replaces the URL. With `--server`
/// and no config at all, a credential-less config for that URL is used (as kubectl does).
/// Several `--server`s share the config's credentials and TLS material; the first one is
/// the config's URL. Returns the config and every `--server`, in order.
async fn infer_upstream(args: &ServeArgs) -> anyhow::Result<(kube::Config, Vec<http::Uri>)> {
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

    let servers = args
        .server
        .iter()
        .map(|s| parse_server(s))
        .collect::<anyhow::Result<Vec<_>>>()?;

    let config = match (inferred, servers.first()) {
        (Ok(mut config), Some(server)) => {
            config.cluster_url = server.clone();
            config
        }
        (Ok(config), None) => config,
        // Only an explicitly chosen kubeconfig or context must exist; otherwise --server
        // alone is enough.
        (Err(_), Some(server)) if args.kubeconfig.is_none() && args.context.is_none() => {
            kube::Config::new(server.clone())
        }
        (Err(err), _) => {
            return Err(err.context(
                "no upstream configuration: pass --server, --kubeconfig, or run in a cluster",
            ))
        }
    };
    Ok((config, servers))
}

/// One `--server`: an absolute `http://` or `https://` URL (as kubectl requires of a
/// cluster's `server`).
fn parse_server(s: &str) -> anyhow::Result<http::Uri> {
    let uri = s
        .trim()
        .parse::<http::Uri>()
        .with_context(|| format!("invalid --server {s:?}"))?;
    anyhow::ensure!(
        matches!(uri.scheme_str(), Some("http" | "https")) && uri.authority().is_some(),
        "invalid --server {s:?}: expected an http:// or https:// URL with a host"
    );
    Ok(uri)
}

/// Whether binding `addr` exposes the gateway beyond this machine.
pub fn is_exposed(addr: &SocketAddr) -> bool {
    !addr.ip().is_loopback()
}

/// A count flag below one, or not a number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a whole number of at least 1")]
pub struct NotPositive(String);

/// A count of at least one.
pub fn parse_positive(s: &str) -> Result<usize, NotPositive> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(NotPositive(s.to_string())),
    }
}

/// A byte-size flag that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("invalid size {0:?}")]
    Invalid(String),
    #[error("invalid size unit in {0:?} (use Ki, Mi or Gi)")]
    Unit(String),
    #[error("size {0:?} is too large")]
    TooLarge(String),
}

/// A byte size: a plain number, or one with a Ki, Mi or Gi suffix.
pub fn parse_bytes(s: &str) -> Result<usize, SizeError> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: usize = num.parse().map_err(|_| SizeError::Invalid(s.to_string()))?;
    let scale: usize = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => return Err(SizeError::Unit(s.to_string())),
    };
    value
        .checked_mul(scale)
        .ok_or_else(|| SizeError::TooLarge(s.to_string()))
}

/// The files TLS serving is made of (read and reloaded by `server::tls`), as the flags
/// name them.
/// How often the files are read again by default.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM CA bundle for x509 client users.
    pub client_ca: Option<PathBuf>,
    /// PEM CA bundle for front proxies' client certificates.
    pub requestheader_ca: Option<PathBuf>,
    /// How often the files are checked for changes.
    pub reload_interval: Duration,
}

impl TlsFiles {
    pub fn new(cert: PathBuf, key: PathBuf) -> Self {
        Self {
            cert,
            key,
            client_ca: None,
            requestheader_ca: None,
            reload_interval: DEFAULT_RELOAD_INTERVAL,
        }
    }
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
            server: vec!["http://127.0.0.1:1234".into()],
            admin_address: "127.0.0.1".parse().unwrap(),
            admin_port: 0,
            shutdown_timeout: Duration::from_secs(1),
            upstream_connect_timeout: Duration::from_secs(1),
            upstream_max_connections: 256,
            upstream_response_timeout: Duration::from_secs(1),
            cache: vec![],
            no_cache: vec![],
            disable_cache: false,
            cache_state_file: None,
            cache_warmup_timeout: Duration::from_secs(60),
            cache_max_bytes: 0,
            cache_max_resource_bytes: 0,
            watch_history_window: Duration::from_secs(300),
            watch_history_bytes: 1 << 20,
            watch_bookmark_interval: Duration::from_secs(60),
            watch_relist: Default::default(),
            http2_max_streams_per_connection: 1000,
            write_stall_timeout: Duration::from_secs(60),
            upstream_watch_list: Default::default(),
            consistent_reads: Default::default(),
            cache_sync_wait: Duration::from_secs(10),
            cache_consistency_check_interval: Duration::from_secs(300),
            tls: Default::default(),
            auth: Default::default(),
        };
        let cfg = GatewayConfig::from_args(&args).await.unwrap();
        assert_eq!(cfg.upstream.cluster_url, "http://127.0.0.1:1234/");
        assert_eq!(cfg.upstream_servers, vec!["http://127.0.0.1:1234/"]);
    }

    #[test]
    fn server_may_be_given_several_times_or_comma_separated() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let parse = |args: &[&str]| {
            <Cli as clap::Parser>::try_parse_from(
                std::iter::once("watchgate").chain(args.iter().copied()),
            )
            .map(|c| c.serve)
        };
        let a = parse(&[
            "--server",
            "https://a:6443",
            "--server=https://b:6443,https://c:6443",
        ])
        .unwrap();
        assert_eq!(
            a.server,
            ["https://a:6443", "https://b:6443", "https://c:6443"]
        );
        assert_eq!(
            a.upstream_max_connections,
            crate::upstream::DEFAULT_MAX_CONNECTIONS
        );
        assert!(parse(&["--upstream-max-connections=0"]).is_err());
        assert_eq!(
            parse(&["--upstream-max-connections=3"])
                .unwrap()
                .upstream_max_connections,
            3
        );
        assert!(parse_server("https://a:6443").is_ok());
        assert!(parse_server("a:6443").is_err());
        assert!(parse_server("/relative").is_err());
    }

    #[tokio::test]
    async fn tls_and_client_certificate_flags_are_checked_at_start_up() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let parse = |args: &[&str]| {
            <Cli as clap::Parser>::try_parse_from(
                ["watchgate", "--server=http://127.0.0.1:1"]
                    .into_iter()
                    .chain(args.iter().copied()),
            )
            .map(|c| c.serve)
        };
        // Both files or neither.
        let err = parse(&["--tls-cert-file=a.crt"]).unwrap_err().to_string();
        assert!(err.contains("--tls-private-key-file"), "{err}");
        assert!(parse(&["--tls-private-key-file=a.key"]).is_err());

        let cfg = |args: ServeArgs| async move { GatewayConfig::from_args(&args).await };
        let tls = ["--tls-cert-file=a.crt", "--tls-private-key-file=a.key"];
        let c = cfg(parse(&tls).unwrap()).await.unwrap();
        assert_eq!(c.tls.unwrap().cert, PathBuf::from("a.crt"));

        // Client CAs need TLS, and client authentication.
        let err = cfg(parse(&["--auth=delegated", "--client-ca-file=ca.crt"]).unwrap())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("need TLS serving"), "{err}");
        let mut none = tls.to_vec();
        none.push("--requestheader-client-ca-file=p.crt");
        let err = cfg(parse(&none).unwrap()).await.unwrap_err().to_string();
        assert!(err.contains("--auth=delegated"), "{err}");

        // Front proxies: the headers as given, lower-cased; allowed names split.
        let mut args = tls.to_vec();
        args.extend([
            "--auth=delegated",
            "--requestheader-client-ca-file=p.crt",
            "--requestheader-allowed-names=front-proxy,aggregator",
            "--requestheader-username-headers=X-User,X-Remote-User",
        ]);
        let c = cfg(parse(&args).unwrap()).await.unwrap();
        let rh = c.security.unwrap().requestheader.unwrap();
        assert_eq!(rh.allowed_names, ["front-proxy", "aggregator"]);
        assert_eq!(rh.username_headers, ["x-user", "x-remote-user"]);
        assert_eq!(rh.group_headers, ["x-remote-group"]);
        assert_eq!(rh.extra_prefixes, ["x-remote-extra-"]);
        let mut bad = tls.to_vec();
        bad.extend([
            "--auth=delegated",
            "--requestheader-client-ca-file=p.crt",
            "--requestheader-group-headers=not a header",
        ]);
        assert!(cfg(parse(&bad).unwrap()).await.is_err());
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
            server: vec![],
            admin_address: "127.0.0.1".parse().unwrap(),
            admin_port: 0,
            shutdown_timeout: Duration::from_secs(1),
            upstream_connect_timeout: Duration::from_secs(1),
            upstream_max_connections: 256,
            upstream_response_timeout: Duration::from_secs(1),
            cache: vec![],
            no_cache: vec![],
            disable_cache: false,
            cache_state_file: None,
            cache_warmup_timeout: Duration::from_secs(60),
            cache_max_bytes: 0,
            cache_max_resource_bytes: 0,
            watch_history_window: Duration::from_secs(300),
            watch_history_bytes: 1 << 20,
            watch_bookmark_interval: Duration::from_secs(60),
            watch_relist: Default::default(),
            http2_max_streams_per_connection: 1000,
            write_stall_timeout: Duration::from_secs(60),
            upstream_watch_list: Default::default(),
            consistent_reads: Default::default(),
            cache_sync_wait: Duration::from_secs(10),
            cache_consistency_check_interval: Duration::from_secs(300),
            tls: Default::default(),
            auth: Default::default(),
        };
        let cfg = GatewayConfig::from_args(&args).await.unwrap();
        assert_eq!(cfg.upstream.cluster_url, "https://10.0.0.1:6443/");
        assert!(cfg.upstream.accept_invalid_certs);

        args.context = Some("b".into());
        let cfg = GatewayConfig::from_args(&args).await.unwrap();
        assert_eq!(cfg.upstream.cluster_url, "http://127.0.0.1:7777/");

        args.server = vec!["http://127.0.0.1:9999".into()];
        let cfg = GatewayConfig::from_args(&args).await.unwrap();
        assert_eq!(cfg.upstream.cluster_url, "http://127.0.0.1:9999/");

        args.context = Some("missing".into());
        assert!(GatewayConfig::from_args(&args).await.is_err());
    }
}

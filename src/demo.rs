//! `watchgate demo`: the simulator with a seeded cluster and gentle churn, and the gateway
//! in front of it, so that someone without a cluster sees watchgate work in one command.
//!
//! Both run in this process: the simulator on an ephemeral loopback port (nobody needs to
//! know it), the gateway on 127.0.0.1:8001 where kubectl is pointed.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::config::GatewayConfig;
use crate::server::{Gateway, GatewayHandle};
use crate::sim::seed::{self, SeedSpec};
use crate::sim::{churn, SimConfig, SimHandle};

/// Flags of `watchgate demo`.
#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// The IP address the gateway serves on (kubectl talks to this).
    #[arg(long, default_value = "127.0.0.1")]
    pub address: IpAddr,
    /// The port the gateway serves on.
    #[arg(long, default_value_t = 8001)]
    pub port: u16,
    /// Namespaces to spread the seeded objects over (besides default, kube-system, ...).
    #[arg(long, default_value_t = 6)]
    pub namespaces: usize,
    /// Nodes to seed.
    #[arg(long, default_value_t = 20)]
    pub nodes: usize,
    /// Pods to seed. Deployments, services, secrets, configmaps and events are seeded in
    /// proportion (a sixth to a third as many).
    #[arg(long, default_value_t = 300)]
    pub pods: usize,
    /// Approximate JSON size of a seeded pod, in bytes (the Kubernetes scalability tests
    /// use 2 to 15 KiB).
    #[arg(long, default_value_t = 4096)]
    pub pod_size: usize,
    /// Churn: writes per second across the seeded objects (0 = a still cluster).
    #[arg(long, default_value_t = 2.0)]
    pub churn: f64,
    /// A shared, secured gateway: clients authenticate with tokens (TokenReview), reads
    /// served from the cache are authorized (SubjectAccessReview), forwarded requests
    /// impersonate the client; the simulator enforces a small demo policy (users admin,
    /// alice, bob; see docs/security.md)
    #[arg(long)]
    pub secure: bool,
}

impl DemoArgs {
    /// What to seed: a small but realistic cluster shape around the pod count.
    pub fn seed_spec(&self) -> SeedSpec {
        let p = self.pods;
        SeedSpec {
            namespaces: self.namespaces.max(1),
            nodes: self.nodes,
            pods: p,
            configmaps: p / 3,
            secrets: p / 6,
            services: p / 6,
            events: p / 3,
            deployments: p / 6,
            widgets: p / 30,
            pod_size: self.pod_size,
        }
    }
}

/// The simulator and the gateway of a running demo.
pub struct Demo {
    pub sim: SimHandle,
    pub gateway: GatewayHandle,
    /// With `--secure`: the token the demo's own checks use (the policy's admin).
    pub token: Option<&'static str>,
    /// With `--secure`: the demo's own certificates (removed when the demo stops).
    pub certs: Option<DemoCerts>,
}

/// `--secure` serves HTTPS with a CA made at start-up: kubectl sends a kubeconfig's
/// credentials over TLS only, so a secured demo over plain HTTP could not show kubectl
/// with tokens at all.
pub struct DemoCerts {
    dir: std::path::PathBuf,
    /// The CA clients trust (`kubectl --certificate-authority`).
    pub ca: std::path::PathBuf,
    files: crate::config::TlsFiles,
}

impl DemoCerts {
    /// A fresh CA and a serving certificate for 127.0.0.1, localhost and `address`, in a
    /// directory of their own under the temporary directory.
    fn make(address: IpAddr) -> anyhow::Result<Self> {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
            IsCa, KeyPair,
        };
        let dir = std::env::temp_dir().join(format!("watchgate-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "watchgate demo CA");
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
        let mut names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        if !address.is_loopback() && !address.is_unspecified() {
            names.push(address.to_string());
        }
        let mut serving = CertificateParams::new(names)?;
        serving
            .distinguished_name
            .push(DnType::CommonName, "watchgate demo");
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate()?;
        let cert = serving.signed_by(&key, &ca)?;
        let certs = Self {
            ca: dir.join("ca.crt"),
            files: crate::config::TlsFiles::new(dir.join("tls.crt"), dir.join("tls.key")),
            dir,
        };
        std::fs::write(&certs.ca, ca.pem())?;
        std::fs::write(&certs.files.cert, cert.pem())?;
        std::fs::write(&certs.files.key, key.serialize_pem())?;
        Ok(certs)
    }

    /// A client configuration that trusts the demo's CA.
    fn client_config(&self) -> anyhow::Result<tokio_rustls::rustls::ClientConfig> {
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        let mut roots = tokio_rustls::rustls::RootCertStore::empty();
        roots.add(tokio_rustls::rustls::pki_types::CertificateDer::from_pem_file(&self.ca)?)?;
        let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        Ok(
            tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    }
}

impl Drop for DemoCerts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The tokens of the demo policy (`sim::auth::DEMO_POLICY`).
pub const GATEWAY_TOKEN: &str = "watchgate-token";
pub const ADMIN_TOKEN: &str = "admin-token";

impl Demo {
    /// The URL kubectl should use.
    pub fn url(&self) -> String {
        self.gateway.url()
    }

    /// Drains the gateway (watch streams end cleanly), then stops the simulator.
    pub async fn shutdown(self) {
        let outcome = self.gateway.shutdown().await;
        tracing::info!(?outcome, "gateway drained");
        self.sim.shutdown().await;
    }
}

/// Starts the seeded simulator and the gateway in front of it, and checks that a list
/// goes through before returning.
pub async fn start(args: &DemoArgs) -> anyhow::Result<Demo> {
    anyhow::ensure!(
        args.churn.is_finite() && args.churn >= 0.0,
        "--churn must be a non-negative number of writes per second"
    );
    // The simulator starts empty; the demo seeds its own cluster shape (the simulator's
    // `--seed N` gives N of every type, e.g. as many nodes as pods) and runs churn over it.
    let sim = crate::sim::start(SimConfig {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        bootstrap_namespaces: true,
        policy: args.secure.then(crate::sim::auth::demo_policy),
        ..SimConfig::default()
    })
    .await
    .context("starting the simulated apiserver")?;
    let spec = args.seed_spec();
    seed::seed_store(sim.store(), &spec);
    tokio::spawn(churn::run(
        sim.store().clone(),
        spec,
        args.churn,
        sim.sim().shutdown.clone(),
    ));

    let certs = args
        .secure
        .then(|| DemoCerts::make(args.address))
        .transpose()
        .context("making the demo's certificates")?;
    let mut cfg = if let Some(certs) = &certs {
        // The gateway's own identity upstream: the demo policy's service account, which
        // may review tokens and access and impersonate clients.
        let mut upstream = kube::Config::new(sim.url().parse()?);
        upstream.auth_info.token = Some(GATEWAY_TOKEN.to_string().into());
        let mut cfg = GatewayConfig::for_upstream(upstream);
        cfg.security = Some(crate::auth::SecurityConfig::default());
        cfg.tls = Some(certs.files.clone());
        cfg
    } else {
        GatewayConfig::for_upstream_url(&sim.url())?
    };
    cfg.listen = SocketAddr::new(args.address, args.port);
    let gateway = Gateway::start(cfg).await.with_context(|| {
        format!(
            "starting the gateway on {}:{} (is another watchgate or kubectl proxy using \
             it? pick another with --port)",
            args.address, args.port
        )
    })?;
    let demo = Demo {
        sim,
        gateway,
        token: args.secure.then_some(ADMIN_TOKEN),
        certs,
    };
    demo.check().await?;
    Ok(demo)
}

impl Demo {
    /// One list through the gateway, so "ready" is printed only when it is true.
    async fn check(&self) -> anyhow::Result<()> {
        let req = get(&format!("{}/api/v1/pods?limit=1", self.url()), self.token)?;
        let sent = match &self.certs {
            Some(certs) => {
                let connector = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(certs.client_config()?)
                    .https_only()
                    .enable_http1()
                    .build();
                Client::builder(TokioExecutor::new())
                    .build::<_, Empty<bytes::Bytes>>(connector)
                    .request(req)
            }
            None => Client::builder(TokioExecutor::new())
                .build_http::<Empty<bytes::Bytes>>()
                .request(req),
        };
        let resp = tokio::time::timeout(Duration::from_secs(10), sent)
            .await
            .context("the gateway did not answer a list within 10 s")??;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        anyhow::ensure!(
            status.is_success(),
            "a list through the gateway failed: {status} {}",
            String::from_utf8_lossy(&body)
        );
        Ok(())
    }
}

/// A GET with the demo's token, if it has one.
fn get(uri: &str, token: Option<&str>) -> anyhow::Result<http::Request<Empty<bytes::Bytes>>> {
    let mut req = http::Request::get(uri);
    if let Some(token) = token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    Ok(req.body(Empty::new())?)
}

/// The pod the printed examples use: the first seeded pod, `pod-0`. Churn updates seeded
/// pods but deletes only the `churn-N` pods it created itself, so this one exists for as
/// long as the demo runs (unless someone deletes it); it is bound to a node and Running,
/// which `logs`, `exec` and `port-forward` need. `None` when no pods are seeded.
pub fn example_pod(args: &DemoArgs) -> Option<(String, String)> {
    let spec = args.seed_spec();
    (spec.pods > 0).then(|| (spec.namespace_of(0), "pod-0".to_string()))
}

/// The local port the printed port-forward example listens on.
pub const EXAMPLE_LOCAL_PORT: u16 = 18080;

/// What to type, printed once everything is up (tests/kubectl_demo.rs runs every
/// `kubectl` line of it).
pub fn instructions(args: &DemoArgs, demo: &Demo) -> String {
    let url = demo.url();
    if args.secure {
        return secure_instructions(&url, demo);
    }
    let k = format!("kubectl --server {url}");
    let mut examples = vec![
        format!("{k} get pods -A -w"),
        format!("{k} get nodes"),
        format!("{k} get deployments,services,configmaps -A"),
        format!("{k} get --raw /apis"),
    ];
    if let Some((ns, name)) = example_pod(args) {
        let local = EXAMPLE_LOCAL_PORT;
        examples.extend([
            format!("{k} logs -f -n {ns} {name}"),
            format!("echo hello | {k} exec -i -n {ns} {name} -- cat"),
            format!("{k} port-forward -n {ns} pod/{name} {local}:8080"),
            format!("curl http://127.0.0.1:{local}/    # while port-forward runs"),
        ]);
    }
    let examples: String = examples.iter().map(|e| format!("\n  {e}")).collect();
    format!(
        "\nwatchgate demo is running.\n\
         \n  simulated apiserver  {sim} ({pods} pods of ~{size} B, {nodes} nodes, {churn} writes/s)\
         \n  gateway              {url} (admin: http://{admin}/healthz)\n\
         \nIn another terminal (kubectl 1.37 is in .venv/bin after ./scripts/test):\n\
         {examples}\n\
         \nCtrl-C stops the demo.\n",
        sim = demo.sim.url(),
        pods = args.pods,
        nodes = args.nodes,
        size = args.pod_size,
        churn = args.churn,
        admin = demo.gateway.admin_addr(),
    )
}

/// `--secure`: who is who, and what each may do.
fn secure_instructions(url: &str, demo: &Demo) -> String {
    let ca = demo
        .certs
        .as_ref()
        .map(|c| c.ca.display().to_string())
        .unwrap_or_default();
    let k = format!("kubectl --server {url} --certificate-authority {ca}");
    format!(
        "\nwatchgate demo --secure is running.\n\
         \n  simulated apiserver  {sim} (enforces the demo policy; writes audited at {sim}/debug/sim/audit)\
         \n  gateway              {url} (HTTPS, CA {ca}; --auth=delegated: TokenReview, SubjectAccessReview, impersonation)\n\
         \nUsers (docs/security.md):\
         \n  admin-token   admin, system:masters: everything\
         \n  alice-token   alice: reads pods, configmaps, deployments, ... but not secrets; writes configmaps\
         \n  bob-token     bob: reads pods in namespace team-b only\n\
         \nTry (kubectl 1.37 is in .venv/bin after ./scripts/test):\n\
         \n  {k} --token alice-token get pods -A -w              # served by the cache, as alice\
         \n  {k} --token alice-token get secrets -A              # 403, even though the cache holds secrets\
         \n  {k} --token bob-token get pods -A                   # 403: bob may read team-b only\
         \n  {k} --token alice-token create configmap demo --from-literal=a=b\
         \n  curl -s --cacert {ca} {url}/api/v1/pods                 # 401: no token\
         \n  curl -s {sim}/debug/sim/audit                       # the write was made as alice\n\
         \nCtrl-C stops the demo.\n",
        sim = demo.sim.url(),
    )
}

/// `watchgate demo`: runs until Ctrl-C or SIGTERM, then drains.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    // Installed before anything is served, so that a signal sent as soon as the demo
    // answers drains it instead of killing it.
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let demo = start(&args).await?;
    println!("{}", instructions(&args, &demo));

    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    eprintln!("stopping: draining the gateway");
    demo.shutdown().await;
    Ok(())
}

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

    let mut cfg = if args.secure {
        // The gateway's own identity upstream: the demo policy's service account, which
        // may review tokens and access and impersonate clients.
        let mut upstream = kube::Config::new(sim.url().parse()?);
        upstream.auth_info.token = Some(GATEWAY_TOKEN.to_string().into());
        let mut cfg = GatewayConfig::for_upstream(upstream);
        cfg.security = Some(crate::auth::SecurityConfig::default());
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
    };
    demo.check().await?;
    Ok(demo)
}

impl Demo {
    /// One list through the gateway, so "ready" is printed only when it is true.
    async fn check(&self) -> anyhow::Result<()> {
        let client = Client::builder(TokioExecutor::new()).build_http::<Empty<bytes::Bytes>>();
        let req = get(&format!("{}/api/v1/pods?limit=1", self.url()), self.token)?;
        let resp = tokio::time::timeout(Duration::from_secs(10), client.request(req))
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
    let k = format!("kubectl --server {url}");
    format!(
        "\nwatchgate demo --secure is running.\n\
         \n  simulated apiserver  {sim} (enforces the demo policy; writes audited at {sim}/debug/sim/audit)\
         \n  gateway              {url} (--auth=delegated: TokenReview, SubjectAccessReview, impersonation)\n\
         \nUsers (docs/security.md):\
         \n  admin-token   admin, system:masters: everything\
         \n  alice-token   alice: reads pods, configmaps, deployments, ... but not secrets; writes configmaps\
         \n  bob-token     bob: reads pods in namespace team-b only\n\
         \nTry (kubectl 1.37 is in .venv/bin after ./scripts/test):\n\
         \n  {k} --token alice-token get pods -A -w              # served by the cache, as alice\
         \n  {k} --token alice-token get secrets -A              # 403, even though the cache holds secrets\
         \n  {k} get pods                                        # 401: no token\
         \n  {k} --token bob-token get pods -A                   # 403: bob may read team-b only\
         \n  {k} --token alice-token create configmap demo --from-literal=a=b\
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

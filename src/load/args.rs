//! Flags of `watchgate load <scenario>`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::encoding::Encoding;
use super::pool::PoolResource;
use super::target::Protocol;
use crate::config::parse_duration;

/// `watchgate load`: a load generator for any apiserver-compatible URL.
#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    #[command(subcommand)]
    pub scenario: Scenario,
}

#[derive(Subcommand, Debug, Clone)]
pub enum Scenario {
    /// N watchers on one resource (optionally with selectors), over HTTP/1.1 or HTTP/2.
    WatchFanout(FanoutArgs),
    /// N watchers with fieldSelector=spec.nodeName=<node>, the way kubelets watch pods.
    Kubelets(KubeletArgs),
    /// N clients that list (RV=0) then watch from the list's RV at once: a restart storm.
    Informers(InformerArgs),
    /// Repeated lists (RV=0 by default), optionally paginated or with selectors, at a rate
    /// or in a closed loop.
    Lists(ListArgs),
    /// A blend: fan-out watchers, kubelets, informers and lists in one run.
    Mixed(MixedArgs),
    /// A fault soak over two simulator replicas and a gateway it starts itself; --duration
    /// defaults to 10m (docs/reliability.md)
    ///
    /// It starts two simulator replicas sharing one store and a gateway process in front
    /// of both, then runs healthy, stalled and storming watchers and writes through
    /// dropped watches, 410 bursts, replica kills and added latency; it fails on any
    /// stream violation or if the gateway's RSS passes --max-rss.
    #[command(mut_arg("duration", |a| a.default_value("10m")))]
    Soak(SoakArgs),
    /// A herd on a gateway that just started: RV=0 watches, watch-list informers and
    /// RV=0 lists at once on one large resource (issue 26); starts its own simulator and
    /// gateway; --duration (the writes after the herd) defaults to 5s,
    /// --connect-concurrency to 1000
    ///
    /// Reports the simulator's requests for the resource during the herd (by verb and
    /// shape), 429s and other failures per kind of client, the time until every client
    /// has its initial state, then checks every stream over a window of writes. With
    /// --warm, the same herd on a gateway whose cache of the resource is already synced.
    #[command(
        mut_arg("duration", |a| a.default_value("5s")),
        mut_arg("connect_concurrency", |a| a.default_value("1000"))
    )]
    ColdHerd(ColdHerdArgs),
    /// Consistent reads of a large resource that receives no writes while writes
    /// elsewhere move the resourceVersion (issue 26), direct to the simulator and through
    /// the gateway in pairs, then a herd of watch-list informers; starts its own
    /// simulator and gateway; --rate (writes elsewhere) defaults to 20,
    /// --connect-concurrency to 1000
    #[command(
        mut_arg("rate", |a| a.default_value("20")),
        mut_arg("connect_concurrency", |a| a.default_value("1000"))
    )]
    QuietLarge(QuietLargeArgs),
    /// Watchers through a gateway that is killed (SIGKILL) and started again on the
    /// same port (issue 26): upstream requests while they reconnect, how many resumed
    /// and how many relisted, and every stream checked across the restart; starts its
    /// own simulator and gateway; --objects defaults to 1000, --rate to 20, --duration
    /// (the writes after the reconnect) to 5s, --connect-concurrency to 1000
    #[command(
        mut_arg("objects", |a| a.default_value("1000")),
        mut_arg("rate", |a| a.default_value("20")),
        mut_arg("duration", |a| a.default_value("5s")),
        mut_arg("connect_concurrency", |a| a.default_value("1000"))
    )]
    Restart(RestartArgs),
}

/// Flags every scenario takes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// The target's URL (a watchgate, a kube-apiserver or the simulator). Without it, the
    /// kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config, in-cluster) is used.
    #[arg(long)]
    pub server: Option<String>,
    /// Path to a kubeconfig for the target.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long)]
    pub context: Option<String>,
    /// Send the writer's writes directly to this URL (e.g. the upstream behind the
    /// gateway) instead of through the target.
    #[arg(long)]
    pub write_server: Option<String>,
    /// Writes per second (merge patches of the pool's pods, each stamped with its time).
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    /// How long to apply load (the writer's window; watchers then drain).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Namespace of the writer's objects (created if missing).
    #[arg(long, default_value = "watchgate-load")]
    pub namespace: String,
    /// Number of pods the writer creates and updates round-robin.
    #[arg(long, default_value_t = 100)]
    pub pool: usize,
    /// Approximate JSON size of each of the writer's pods, in bytes.
    #[arg(long, default_value_t = 1024)]
    pub object_size: usize,
    /// Label shards of the pool (`load-shard=0..N-1`), for label-selector watches.
    #[arg(long, default_value_t = 10)]
    pub shards: usize,
    /// Writes in flight at most (beyond it, ticks are skipped and counted).
    #[arg(long, default_value_t = 64)]
    pub write_concurrency: usize,
    /// What watchers and lists ask for: json, protobuf (client-go's typed clients' Accept)
    /// or metadata (PartialObjectMetadata, client-go's metadata informers' Accept). Writes
    /// stay JSON.
    #[arg(long, value_enum, default_value_t = Encoding::Json)]
    pub encoding: Encoding,
    /// How watch streams are carried.
    #[arg(long, value_enum, default_value_t = Protocol::Http1)]
    pub protocol: Protocol,
    /// Watches per HTTP/2 connection (with --protocol http2 on an http:// target).
    #[arg(long, default_value_t = 100)]
    pub streams_per_connection: usize,
    /// Watch requests awaiting their response headers at once (connect storms beyond the
    /// listen backlog only measure SYN retries).
    #[arg(long, default_value_t = 256)]
    pub connect_concurrency: usize,
    /// After the writer stops, how long watchers may take to receive its last writes.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// The target's Prometheus endpoint, for its CPU seconds and RSS over the run.
    #[arg(long)]
    pub metrics_url: Option<String>,
    /// The target's process id on this machine, for its CPU seconds and RSS (/proc).
    #[arg(long)]
    pub target_pid: Option<u32>,
    /// Print the summary as JSON on stdout (the table goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Write an SVG plot (latency over time and CDF) to this path.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Leave the writer's pods in place at the end.
    #[arg(long)]
    pub keep_objects: bool,
}

#[derive(Args, Debug, Clone)]
pub struct FanoutArgs {
    #[command(flatten)]
    pub common: Common,
    /// Number of watchers.
    #[arg(long, default_value_t = 100)]
    pub watchers: usize,
    /// Label selector of every watch (e.g. `load-shard=3`).
    #[arg(long)]
    pub label_selector: Option<String>,
    /// Field selector of every watch (e.g. `spec.nodeName=load-node-1`).
    #[arg(long)]
    pub field_selector: Option<String>,
    /// Watch pods in all namespaces instead of the load namespace.
    #[arg(long)]
    pub all_namespaces: bool,
    /// Close and reopen every watch (resuming from its last RV) about this often:
    /// connect/disconnect churn.
    #[arg(long, value_parser = parse_duration)]
    pub reconnect_every: Option<Duration>,
    /// Nodes the pool's pods are spread over.
    #[arg(long, default_value_t = 10)]
    pub nodes: usize,
}

#[derive(Args, Debug, Clone)]
pub struct KubeletArgs {
    #[command(flatten)]
    pub common: Common,
    /// Number of kubelets (one watch each, on its own node).
    #[arg(long, default_value_t = 100)]
    pub nodes: usize,
    /// Node names are `<prefix>-<i>`.
    #[arg(long, default_value = "load-node")]
    pub node_prefix: String,
}

#[derive(Args, Debug, Clone)]
pub struct InformerArgs {
    #[command(flatten)]
    pub common: Common,
    /// Number of informers starting at once.
    #[arg(long, default_value_t = 100)]
    pub clients: usize,
    /// Label selector of every informer.
    #[arg(long)]
    pub label_selector: Option<String>,
    /// Informers list and watch pods in all namespaces instead of the load namespace.
    #[arg(long)]
    pub all_namespaces: bool,
    /// Start each informer as client-go 1.35+ does (WatchListClient): one watch-list with no
    /// resourceVersion (`allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds=N&watch=true`),
    /// synced at its `k8s.io/initial-events-end` bookmark, instead of a list then a watch.
    /// The report gives the time until every informer has synced
    #[arg(long)]
    pub watch_list: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: Common,
    /// Lists in flight at once (closed loop), or at most (with --list-rate).
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Lists per second (0: closed loop).
    #[arg(long, default_value_t = 0.0)]
    pub list_rate: f64,
    /// Page size (`limit`); 0 lists in one response.
    #[arg(long, default_value_t = 0)]
    pub limit: usize,
    /// The collection to list.
    #[arg(long, default_value = "/api/v1/pods")]
    pub path: String,
    /// The resourceVersion parameter of each list. `0` (any, from a cache; `--limit` is
    /// then ignored, as kube-apiserver's watch cache does); empty (`--resource-version=`)
    /// for a consistent list, which is paged.
    #[arg(long, default_value = "0")]
    pub resource_version: String,
    /// Label selector of every list (e.g. `load-shard=3`).
    #[arg(long)]
    pub label_selector: Option<String>,
    /// Field selector of every list (e.g. `spec.nodeName=load-node-1`).
    #[arg(long)]
    pub field_selector: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct MixedArgs {
    #[command(flatten)]
    pub common: Common,
    /// Fan-out watchers on the load namespace.
    #[arg(long, default_value_t = 100)]
    pub watchers: usize,
    /// Kubelet-style watchers (one per node of the pool).
    #[arg(long, default_value_t = 10)]
    pub kubelets: usize,
    /// Informers (list then watch).
    #[arg(long, default_value_t = 10)]
    pub informers: usize,
    /// Closed-loop list workers.
    #[arg(long, default_value_t = 1)]
    pub list_concurrency: usize,
    /// The collection the list workers read.
    #[arg(long, default_value = "/api/v1/pods")]
    pub list_path: String,
}

#[derive(Args, Debug, Clone)]
pub struct SoakArgs {
    #[command(flatten)]
    pub common: Common,
    /// Healthy watchers (they read everything and are checked).
    #[arg(long, default_value_t = 1000)]
    pub watchers: usize,
    /// Stalled watchers (they stop reading once connected); they join halfway, so that
    /// the first half measures delivery without them and the second half with them.
    #[arg(long, default_value_t = 200)]
    pub stalled: usize,
    /// Clients of each connect/disconnect storm: each lists, watches for a random part of
    /// --storm-lifetime, and leaves (checked up to where it left).
    #[arg(long, default_value_t = 100)]
    pub storm_clients: usize,
    /// How often a storm comes.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub storm_every: Duration,
    /// A storm client stays between a quarter of this and this.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub storm_lifetime: Duration,
    /// Length of one cycle of the fault schedule (410 burst, kill and restart of each
    /// replica in turn, a latency window; docs/reliability.md).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub fault_cycle: Duration,
    /// Every upstream watch stream is ended this often.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub drop_watches_every: Duration,
    /// Watches answered with 410 in each burst, per replica.
    #[arg(long, default_value_t = 3)]
    pub burst_410: u32,
    /// Latency added to every upstream response during the latency window (ms).
    #[arg(long, default_value_t = 100)]
    pub latency_ms: u64,
    /// The gateway binary (default: this executable).
    #[arg(long)]
    pub gateway_bin: Option<PathBuf>,
    /// Extra arguments of the gateway's `serve` (repeatable).
    #[arg(long = "gateway-arg", allow_hyphen_values = true)]
    pub gateway_args: Vec<String>,
    /// Where the gateway's log goes (default: discarded).
    #[arg(long)]
    pub gateway_log: Option<PathBuf>,
    /// Write the gateway's RSS over the run as an SVG plot to this path.
    #[arg(long)]
    pub rss_plot: Option<PathBuf>,
    /// The run fails if the gateway's RSS ever exceeds this.
    #[arg(long, default_value = "1Gi", value_parser = crate::config::parse_bytes)]
    pub max_rss: usize,
}

/// Flags of the scenarios that start their own simulator and gateway around one large
/// resource (`cold-herd`, `quiet-large`, `restart`).
#[derive(Args, Debug, Clone)]
pub struct HerdCommon {
    /// The resource the clients read (the writer's pool is made of it too, except in
    /// quiet-large, whose writer writes the other one).
    #[arg(long, value_enum, default_value_t = PoolResource::Configmaps)]
    pub resource: PoolResource,
    /// Objects of the resource put straight into the simulator's store before the run.
    #[arg(long, default_value_t = 20_000)]
    pub objects: usize,
    /// Pad each of those objects to about this many bytes of JSON (0: their natural
    /// size, about 450 bytes for a configmap and 3.5 KiB for a pod).
    #[arg(long, default_value_t = 0)]
    pub seed_size: usize,
    /// The longest the clients may take to get their initial state (or the reconnect,
    /// in restart); the report then says how many had it.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub herd_timeout: Duration,
    /// The gateway binary (default: this executable).
    #[arg(long)]
    pub gateway_bin: Option<PathBuf>,
    /// Extra arguments of the gateway's `serve` (repeatable).
    #[arg(long = "gateway-arg", allow_hyphen_values = true)]
    pub gateway_args: Vec<String>,
    /// Where the gateway's log goes (default: discarded).
    #[arg(long)]
    pub gateway_log: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct ColdHerdArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub herd: HerdCommon,
    /// Plain watches from resourceVersion=0.
    #[arg(long, default_value_t = 1000)]
    pub watches: usize,
    /// Informers that start with client-go 1.36's consistent watch-list.
    #[arg(long, default_value_t = 1000)]
    pub informers: usize,
    /// RV=0 lists (each retried until it succeeds, as a reflector does).
    #[arg(long, default_value_t = 200)]
    pub lists: usize,
    /// Sync the gateway's cache of the resource before the herd (the baseline).
    #[arg(long)]
    pub warm: bool,
}

#[derive(Args, Debug, Clone)]
pub struct QuietLargeArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub herd: HerdCommon,
    /// Rounds; each measures direct to the simulator and through the gateway, in pairs
    /// of one read each way, every other pair in the other order.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Consistent gets of one object per round and target, one at a time.
    #[arg(long, default_value_t = 200)]
    pub gets: usize,
    /// Consistent full lists per round and target, one at a time.
    #[arg(long, default_value_t = 10)]
    pub full_lists: usize,
    /// First pages (`limit=500`) of consistent paged lists per round and target.
    #[arg(long, default_value_t = 50)]
    pub pages: usize,
    /// The longest one measurement (the pairs of gets, lists or pages of one round, both
    /// targets) may take; it then stops with the pairs it made.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub measure_budget: Duration,
    /// Watch-list informers started at once through the gateway at the end.
    #[arg(long, default_value_t = 1000)]
    pub informers: usize,
}

#[derive(Args, Debug, Clone)]
pub struct RestartArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub herd: HerdCommon,
    /// Watchers (a plain watch from resourceVersion=0, then resumed from their last RV
    /// on every reconnect; a 410 makes them relist, as client-go's reflector does).
    #[arg(long, default_value_t = 2000)]
    pub watchers: usize,
    /// Writes go on this long before the gateway is killed.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub before_kill: Duration,
    /// How long the gateway stays down before it is started again.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub down_for: Duration,
}

/// `watchgate load` as a parser of its own, for tests and embedding.
#[derive(clap::Parser, Debug)]
#[command(name = "watchgate load")]
struct LoadCli {
    #[command(flatten)]
    args: LoadArgs,
}

/// Parses `watchgate load` arguments (without the program and `load` words), e.g.
/// `["watch-fanout", "--watchers", "10", "--server", "http://127.0.0.1:8001"]`.
pub fn parse<I, S>(argv: I) -> Result<LoadArgs, clap::Error>
where
    I: IntoIterator<Item = S>,
    S: Into<std::ffi::OsString> + Clone,
{
    use clap::Parser as _;
    let all = std::iter::once(std::ffi::OsString::from("watchgate-load"))
        .chain(argv.into_iter().map(Into::into));
    LoadCli::try_parse_from(all).map(|c| c.args)
}

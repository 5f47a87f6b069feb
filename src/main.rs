//! The `watchgate` binary: flags → config → run. Kept thin on purpose; everything
//! testable lives in the library.

use clap::{Parser, Subcommand};

use watchgate::{
    config::ServeArgs, demo::DemoArgs, load::LoadArgs, logging::LogArgs, sim::SimArgs,
};

#[derive(Parser, Debug)]
#[command(
    name = "watchgate",
    version,
    about = "A caching reverse proxy and watch fan-out gateway for the Kubernetes API",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    /// Flags of `serve`, which runs when no subcommand is given.
    #[command(flatten)]
    serve: ServeArgs,

    /// Logging flags (`--log-format`, `-v`), accepted by every command.
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the gateway in front of a kube-apiserver (the default).
    Serve(ServeArgs),
    /// Run the built-in simulated apiserver.
    Sim(SimArgs),
    /// Run the simulator with a seeded cluster and the gateway in front of it.
    Demo(DemoArgs),
    /// Generate load against an apiserver-compatible URL and check every watch stream.
    Load(LoadArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    watchgate::logging::init(&cli.log);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match cli.command {
            None => watchgate::server::run(cli.serve).await,
            Some(Command::Serve(args)) => watchgate::server::run(args).await,
            Some(Command::Sim(args)) => watchgate::sim::run(args).await,
            Some(Command::Demo(args)) => watchgate::demo::run(args).await,
            Some(Command::Load(args)) => watchgate::load::run(args).await,
        }
    })
}

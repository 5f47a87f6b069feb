//! The `watchgate` binary: flags → config → run. Kept thin on purpose; everything
//! testable lives in the library.

use clap::{Parser, Subcommand};

use watchgate::{config::ServeArgs, demo::DemoArgs, sim::SimArgs};

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
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the gateway in front of a kube-apiserver (the default).
    Serve(ServeArgs),
    /// Run the built-in simulated apiserver.
    Sim(SimArgs),
    /// Run the simulator with a seeded cluster and the gateway in front of it.
    Demo(DemoArgs),
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_tracing();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match cli.command {
            None => watchgate::server::run(cli.serve).await,
            Some(Command::Serve(args)) => watchgate::server::run(args).await,
            Some(Command::Sim(args)) => watchgate::sim::run(args).await,
            Some(Command::Demo(args)) => watchgate::demo::run(args).await,
        }
    })
}

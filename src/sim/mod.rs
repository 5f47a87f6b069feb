//! The simulated apiserver (`watchgate sim`): a faithful in-memory Kubernetes API used by
//! the demo, the tests and the benches. See docs/simulator.md.

// pub mod churn;
pub mod discovery;
pub mod exec;
pub mod logs;
pub mod openapi;
pub mod resources;
// pub mod seed;
pub mod table;

use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct SimArgs {
    #[arg(long, default_value = "127.0.0.1")]
    pub address: String,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
}

pub async fn run(_args: SimArgs) -> anyhow::Result<()> {
    anyhow::bail!("sim: not built yet")
}

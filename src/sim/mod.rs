//! The simulated apiserver (`watchgate sim`): a faithful in-memory Kubernetes API used by
//! the demo, the tests and the benches. See docs/simulator.md.

pub mod gojson;
pub mod resources;
pub mod validate;

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

//! `watchgate demo`: the simulator with a seeded cluster, and the gateway in front of it.

use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct DemoArgs {}

pub async fn run(_args: DemoArgs) -> anyhow::Result<()> {
    anyhow::bail!("demo: not built yet")
}

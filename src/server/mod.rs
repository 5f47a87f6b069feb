//! The downstream server: accept loop, HTTP/1.1 + HTTP/2 serving, graceful drain.

use crate::config::ServeArgs;

pub async fn run(_args: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("serve: not built yet")
}

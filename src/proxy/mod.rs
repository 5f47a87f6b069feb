//! Forwarding to the upstream apiserver: streamed bodies, hop-by-hop headers, upgrades.
//! See docs/proxy.md.

mod forward;
mod gather;
pub mod headers;
mod stream;
mod upgrade;

pub use forward::Proxy;
pub use stream::DrainingBody;

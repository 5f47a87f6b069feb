//! Typed, validated configuration of `watchgate serve`: the only place that reads flags.

use clap::Args;

/// Flags of `watchgate serve`, modelled on `kubectl proxy` and kube-apiserver.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// The IP address on which to serve. Anything but loopback must be chosen explicitly.
    #[arg(long, default_value = "127.0.0.1")]
    pub address: String,
    /// The port on which to serve (0 picks a free port).
    #[arg(long, default_value_t = 8001)]
    pub port: u16,
}

//! Helpers shared by the integration tests: the one support module, `mod support;` in
//! each test binary (no `#[path]` includes).
//!
//! - [`counting_alloc`]: a global allocator counting live heap bytes, for the binaries
//!   that install it (`#[global_allocator]`) to measure memory.
//! - [`tools`]: find kubectl 1.37 and the venv's Python (installed by `./scripts/test`).
//! - [`process`]: run a command with a timeout, or spawn a long-running one (`kubectl get -w`,
//!   `kubectl logs -f`) and read its output line by line with bounded waits.
//! - [`kubectl`]: a kubectl bound to one server through its own temporary kubeconfig.
//! - [`python`]: run a script from `tests/python/` with the venv's Python.
//! - [`http`]: a tiny raw HTTP client for JSON requests and watch streams.
//! - [`raw`]: hyper connections that send requests exactly as built, and raw TCP exchanges.
//! - [`metrics`]: samples of a Prometheus text exposition.
//! - [`objects`]: the one builder per object kind ([`objects::pod`],
//!   [`objects::configmap`]) the tests' objects are made with.
//! - [`protobuf`]: protobuf answers checked against JSON ones with `k8s-pb`, and the
//!   Accept headers of client-go's protobuf clients.
//! - [`serve`]: the `watchgate serve` binary as a child process, its log captured.
//! - [`secure`]: a simulator enforcing the demo policy and a gateway with `--auth=delegated`
//!   in front of it, with the policy's tokens.
//! - [`servers`]: the simulator and the gateway, started in-process on `127.0.0.1:0`.
//! - [`sim`]: a bare simulator and JSON reads of it, for the simulator's own tests.
//! - [`stub`]: stub upstreams whose every answer a test writes (apiservers the simulator
//!   cannot play).
//! - [`tls`]: certificates made in the test (rcgen) and TLS clients for HTTPS gateways.
//! - [`wait`]: bounded polling with a clear failure message (no sleep-and-hope).
//! - [`watch`]: watch streams read event by event with their exact bytes and headers.
//! - [`watch_checker`]: a watcher's stream checked against the simulator's event log
//!   (strictly, or for state continuity after a relist); its own tests are
//!   `tests/watch_checker.rs`.
//! - [`watch_clients`]: many watches over HTTP/2 and HTTP/1.1, and stalled raw watchers.
//! - [`watch_env`]: pods written straight into the simulator's store, its event log and
//!   state, for the fan-out, continuity and slow-watcher tests.
//! - [`kubectl_scenarios`] and [`python_scenarios`]: end-to-end steps that run unchanged
//!   against the simulator directly and through the gateway.
//!
//! Every test binary compiles this module whole but uses only part of it.
#![allow(dead_code, unused_imports)]

pub mod counting_alloc;
pub mod http;
pub mod kubectl;
pub mod kubectl_scenarios;
pub mod metrics;
pub mod objects;
pub mod process;
pub mod protobuf;
pub mod python;
pub mod python_scenarios;
pub mod raw;
pub mod secure;
pub mod serve;
pub mod servers;
pub mod sim;
pub mod stub;
pub mod tls;
pub mod tools;
pub mod wait;
pub mod watch;
pub mod watch_checker;
pub mod watch_clients;
pub mod watch_env;

use std::time::Duration;

pub use http::Http;
pub use kubectl::Kubectl;
pub use servers::Env;
pub use wait::wait_until;

/// The bound for one client command (kubectl, a Python script). Generous because CI has two
/// cores shared by the build, and a first kubectl call fetches discovery and OpenAPI.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// The bound for one expected event or output line to show up.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(20);

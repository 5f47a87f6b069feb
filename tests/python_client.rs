//! The Python `kubernetes` client (37.0.2) lists and watches, directly against the simulator
//! (issue 2, "What must be shown" 4) and through the gateway (issue 3, item 2).
//! The script is tests/python/list_watch.py; the steps are in tests/support/python_scenarios.rs.

mod support;

use support::{python_scenarios, Env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_list_then_watch_added_modified_deleted_sim() {
    python_scenarios::list_then_watch(&Env::sim().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_list_then_watch_added_modified_deleted_gateway() {
    python_scenarios::list_then_watch(&Env::gateway().await).await;
}

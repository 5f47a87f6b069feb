//! Python `kubernetes` client end-to-end scenarios (issue 3 item 2, issue 2 item 4): run
//! unchanged against the simulator directly and through the gateway.

use serde_json::{json, Value};

use super::http::MERGE_PATCH;
use super::kubectl_scenarios::{create_configmap, create_namespace, NS};
use super::{python, Env, COMMAND_TIMEOUT, EVENT_TIMEOUT};

/// The client lists the namespace, then `watch.Watch().stream(...)` receives ADDED,
/// MODIFIED and DELETED for an object another client creates, changes and deletes — in
/// that order, with increasing resourceVersions, and nothing else.
pub async fn list_then_watch(env: &Env) {
    create_namespace(env).await;
    create_configmap(&env.direct_http, "seed-a", json!({"k": "a"})).await;
    create_configmap(&env.direct_http, "seed-b", json!({"k": "b"})).await;

    let kubeconfig = env.kubectl.kubeconfig().to_str().unwrap().to_string();
    let mut script = python::spawn("list_watch.py", &[&kubeconfig, NS, "target"]);

    let line = script
        .expect_line("the list result", COMMAND_TIMEOUT, |l| l.starts_with('{'))
        .await;
    let listed: Value = serde_json::from_str(&line).expect("JSON line");
    let mut names: Vec<&str> = listed["list"]["names"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["seed-a", "seed-b"], "listed: {listed}");
    let list_rv: u64 = listed["list"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("list resourceVersion: {listed}"));

    // Another client, straight to the simulator: create, modify, delete.
    let path = format!("/api/v1/namespaces/{NS}/configmaps");
    create_configmap(&env.direct_http, "target", json!({"step": "1"})).await;
    env.direct_http
        .patch(
            &format!("{path}/target"),
            MERGE_PATCH,
            &json!({"data": {"step": "2"}}),
        )
        .await
        .expect(200);
    let deleted = env.direct_http.delete(&format!("{path}/target")).await;
    assert_eq!(deleted.status.as_u16(), 200, "{}", deleted.text());

    let mut events = Vec::new();
    for _ in 0..3 {
        let line = script
            .expect_line("a watch event", EVENT_TIMEOUT, |l| l.starts_with('{'))
            .await;
        events.push(serde_json::from_str::<Value>(&line).expect("JSON line"));
    }
    let got: Vec<(&str, &str, &Value)> = events
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap_or(""),
                e["name"].as_str().unwrap_or(""),
                &e["data"],
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("ADDED", "target", &json!({"step": "1"})),
            ("MODIFIED", "target", &json!({"step": "2"})),
            ("DELETED", "target", &json!({"step": "2"})),
        ],
        "watch events in order"
    );
    let rvs: Vec<u64> = events
        .iter()
        .map(|e| e["rv"].as_str().and_then(|s| s.parse().ok()).expect("rv"))
        .collect();
    assert!(
        list_rv < rvs[0] && rvs[0] < rvs[1] && rvs[1] < rvs[2],
        "resourceVersions must increase: list {list_rv}, events {rvs:?}"
    );

    let out = script.wait(COMMAND_TIMEOUT).await;
    assert!(out.success(), "the script exits cleanly: {out}");
}

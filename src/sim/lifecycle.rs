//! The scheduler and kubelet, reduced to what clients observe after creating a pod:
//! a pod created without `spec.nodeName` is bound to a node (a MODIFIED event with
//! `spec.nodeName` and the `PodScheduled` condition, as the scheduler's binding
//! subresource write produces), then reported running (a MODIFIED status write with
//! phase Running, IPs, conditions and container statuses, as the kubelet's status
//! manager sends). `kubectl get pods -w`, `kubectl exec` and `kubectl logs` need this.
//!
//! The node is the first Node in the store, or `sim-node-0` on an empty cluster.

// Store closures return metav1.Status errors (the store API's error type).
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use serde_json::{json, Value};

use crate::sim::objects;
use crate::sim::resources;
use crate::sim::store::Mutation;
use crate::sim::Sim;

/// Name used when the cluster has no Node objects.
pub const DEFAULT_NODE: &str = "sim-node-0";

fn same_pod(cur: &Value, uid: &str) -> bool {
    cur.pointer("/metadata/uid").and_then(Value::as_str) == Some(uid)
        && cur
            .pointer("/metadata/deletionTimestamp")
            .is_none_or(Value::is_null)
}

fn condition(kind: &str, now: &str) -> Value {
    json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": now})
}

/// Schedules and starts a freshly created pod in the background.
pub fn spawn_pod_start(sim: Arc<Sim>, ns: String, name: String, uid: String) {
    tokio::spawn(async move {
        let pods = resources::find("", "v1", "pods").expect("pods are served");
        let nodes = resources::find("", "v1", "nodes").expect("nodes are served");
        let node = sim
            .store
            .list(nodes, None)
            .1
            .first()
            .and_then(|n| {
                n.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(String::from)
            })
            .unwrap_or_else(|| DEFAULT_NODE.to_string());
        // Bind (the scheduler's pods/binding write).
        let now = objects::now_rfc3339();
        let bound = sim.store.mutate(pods, &ns, &name, |cur| {
            let Some(cur) = cur.filter(|c| same_pod(c, &uid)) else {
                return Ok(Mutation::NoOp);
            };
            if cur
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty())
            {
                return Ok(Mutation::NoOp);
            }
            let mut p = (**cur).clone();
            p["spec"]["nodeName"] = json!(node);
            p["status"]["conditions"] = json!([condition("PodScheduled", &now)]);
            objects::canonical_order(&mut p);
            Ok(Mutation::Put(p))
        });
        if !matches!(bound, Ok(Some(_))) {
            return;
        }
        tokio::task::yield_now().await;
        // Start (the kubelet's status update).
        let now = objects::now_rfc3339();
        let _ = sim.store.mutate(pods, &ns, &name, |cur| {
            let Some(cur) = cur.filter(|c| same_pod(c, &uid)) else {
                return Ok(Mutation::NoOp);
            };
            if cur.pointer("/status/phase").and_then(Value::as_str) != Some("Pending") {
                return Ok(Mutation::NoOp);
            }
            let mut p = (**cur).clone();
            let n: u32 = rand::random::<u32>() % 60000 + 2;
            let ip = format!("10.244.{}.{}", n / 250, n % 250 + 2);
            let statuses: Vec<Value> = p["spec"]["containers"]
                .as_array()
                .map(|cs| {
                    cs.iter()
                        .map(|c| {
                            let image = c["image"].as_str().unwrap_or_default();
                            json!({"name": c["name"], "state": {"running": {"startedAt": now}},
                                   "lastState": {}, "ready": true, "restartCount": 0,
                                   "image": image, "imageID": format!("docker.io/library/{image}"),
                                   "containerID": format!("containerd://{}", uuid::Uuid::new_v4().simple()),
                                   "started": true})
                        })
                        .collect()
                })
                .unwrap_or_default();
            let qos = p["status"]["qosClass"].clone();
            p["status"] = json!({
                "phase": "Running",
                "conditions": [condition("PodReadyToStartContainers", &now), condition("Initialized", &now),
                               condition("Ready", &now), condition("ContainersReady", &now),
                               condition("PodScheduled", &now)],
                "hostIP": "10.0.0.10",
                "hostIPs": [{"ip": "10.0.0.10"}],
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "startTime": now,
                "containerStatuses": statuses,
                "qosClass": qos,
            });
            Ok(Mutation::Put(p))
        });
    });
}

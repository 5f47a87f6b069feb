//! Server-side `meta.k8s.io/v1` Table output (`kubectl get`'s default format).
//!
//! Columns and cells follow kubernetes `pkg/printers/internalversion/printers.go`
//! (the apiserver always prints the wide form: `pkg/printers/storage`'s
//! `TableConvertor` calls `GenerateTable` with `Wide: true`, kubectl hides the columns
//! with priority > 0 unless `-o wide`). The custom resource has no printer columns, so it
//! gets what apiextensions-apiserver serves by default: `Name` plus an `Age` column of
//! type `date` (`serveDefaultColumnsIfEmpty`).
//!
//! Row objects follow k8s.io/apiserver `pkg/endpoints/handlers/response.go` `asTable`:
//! `includeObject=Metadata` (the default) gives a `meta.k8s.io/v1`
//! `PartialObjectMetadata`, `Object` the full object, `None` a null object; anything
//! else is a 400. The table's `metadata` carries the list's `resourceVersion`,
//! `continue` and `remainingItemCount` (or the single object's `resourceVersion`).
//!
//! For watches (`pkg/endpoints/handlers/watch.go`), every event's object is a Table with
//! one row, and only the first event carries `columnDefinitions`: after the first
//! transform the handler sets `TableOptions.NoHeaders`, which serialises as
//! `"columnDefinitions": null`.
// metav1.Status is the crate's error type (large by design; see status.rs).
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use jiff::Timestamp;
use serde_json::{json, Map, Value};

use super::resources::ResourceType;
use crate::status::Status;

/// What each row's `object` holds (`includeObject` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    None,
    #[default]
    Metadata,
    Object,
}

impl IncludeObject {
    /// Parses the `includeObject` query value; unknown values get the apiserver's 400.
    pub fn parse(v: Option<&str>) -> Result<Self, Status> {
        match v {
            None | Some("") | Some("Metadata") => Ok(Self::Metadata),
            Some("None") => Ok(Self::None),
            Some("Object") => Ok(Self::Object),
            Some(other) => Err(Status::bad_request(format!(
                "unrecognized includeObject value: {other:?}"
            ))),
        }
    }

    /// Reads `includeObject` from a raw query string.
    pub fn from_query(query: Option<&str>) -> Result<Self, Status> {
        let v = query.and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "includeObject")
                .map(|(_, v)| v.into_owned())
        });
        Self::parse(v.as_deref())
    }
}

/// Which Table version an Accept header asks for, if any (`meta.k8s.io` v1 or v1beta1).
/// The apiserver takes the first acceptable media range, so a Table range listed before
/// plain `application/json` wins.
pub fn wants_table(accept: Option<&str>) -> Option<&'static str> {
    let accept = accept?;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let mt = parts.next().unwrap_or("");
        let mut as_ = None;
        let mut g = None;
        let mut v = None;
        for p in parts {
            match p.split_once('=') {
                Some(("as", x)) => as_ = Some(x),
                Some(("g", x)) => g = Some(x),
                Some(("v", x)) => v = Some(x),
                _ => {}
            }
        }
        if as_.is_none() {
            // A plain range (application/json, */*) is acceptable: no Table.
            if mt == "application/json" || mt == "*/*" || mt == "application/*" {
                return None;
            }
            continue;
        }
        if mt != "application/json" || as_ != Some("Table") || g != Some("meta.k8s.io") {
            continue;
        }
        match v {
            Some("v1") => return Some("v1"),
            Some("v1beta1") => return Some("v1beta1"),
            _ => continue,
        }
    }
    None
}

/// One column definition as the apiserver writes it.
pub struct Column {
    pub name: &'static str,
    pub ty: &'static str,
    pub format: &'static str,
    pub priority: i32,
    pub description: &'static str,
}

const fn col(
    name: &'static str,
    ty: &'static str,
    priority: i32,
    description: &'static str,
) -> Column {
    Column {
        name,
        ty,
        format: "",
        priority,
        description,
    }
}

const NAME_DESC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

const NAME: Column = Column {
    name: "Name",
    ty: "string",
    format: "name",
    priority: 0,
    description: NAME_DESC,
};
const AGE: Column = col("Age", "string", 0, AGE_DESC);
const CONTAINERS: Column = col(
    "Containers",
    "string",
    1,
    "Names of each container in the template.",
);
const IMAGES: Column = col(
    "Images",
    "string",
    1,
    "Images referenced by each container in the template.",
);

/// The default columns the apiserver prints for a kind.
pub fn columns(kind: &str) -> Vec<Column> {
    match kind {
        "Pod" => vec![
            NAME,
            col("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
            col("Status", "string", 0, "The aggregate status of the containers in this pod."),
            col("Restarts", "string", 0, "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
            AGE,
            col("IP", "string", 1, "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."),
            col("Node", "string", 1, "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename"),
            col("Nominated Node", "string", 1, "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled."),
            col("Readiness Gates", "string", 1, "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates"),
        ],
        "Node" => vec![
            NAME,
            col("Status", "string", 0, "The status of the node"),
            col("Roles", "string", 0, "The roles of the node"),
            AGE,
            col("Version", "string", 0, "Kubelet Version reported by the node."),
            col("Internal-IP", "string", 1, "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses"),
            col("External-IP", "string", 1, "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses"),
            col("OS-Image", "string", 1, "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
            col("Kernel-Version", "string", 1, "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
            col("Container-Runtime", "string", 1, "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."),
        ],
        "Namespace" => vec![
            NAME,
            col("Status", "string", 0, "The status of the namespace"),
            AGE,
        ],
        "ConfigMap" => vec![
            NAME,
            col("Data", "string", 0, "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process."),
            AGE,
        ],
        "Secret" => vec![
            NAME,
            col("Type", "string", 0, "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types"),
            col("Data", "string", 0, "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4"),
            AGE,
        ],
        "Service" => vec![
            NAME,
            col("Type", "string", 0, "type determines how the Service is exposed. Defaults to ClusterIP. Valid options are ExternalName, ClusterIP, NodePort, and LoadBalancer."),
            col("Cluster-IP", "string", 0, "clusterIP is the IP address of the service and is usually assigned randomly."),
            col("External-IP", "string", 0, "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service."),
            col("Port(s)", "string", 0, "The list of ports that are exposed by this service. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies"),
            AGE,
            col("Selector", "string", 1, "Route service traffic to pods with label keys and values matching this selector. If empty or not present, the service is assumed to have an external process managing its endpoints, which Kubernetes will not modify."),
        ],
        "Endpoints" => vec![
            NAME,
            col("Endpoints", "string", 0, "The set of all endpoints is the union of all subsets. Addresses are placed into subsets according to the IPs they share. A single address with multiple ports, some of which are ready and some of which are not (because they come from different containers) will result in the address being displayed in different subsets for the different ports. No address will appear in both Addresses and NotReadyAddresses in the same subset. Sets of addresses and ports that comprise a service."),
            AGE,
        ],
        "Event" => vec![
            col("Last Seen", "string", 0, "The time at which the most recent occurrence of this event was recorded."),
            col("Type", "string", 0, "Type of this event (Normal, Warning), new types could be added in the future"),
            col("Reason", "string", 0, "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
            col("Object", "string", 0, "The object that this event is about."),
            col("Subobject", "string", 1, "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]."),
            col("Source", "string", 1, "The component reporting this event. Should be a short machine understandable string."),
            col("Message", "string", 0, "A human-readable description of the status of this operation."),
            col("First Seen", "string", 1, "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)"),
            col("Count", "string", 1, "The number of times this event has occurred."),
            Column { priority: 1, ..NAME },
        ],
        "Deployment" => vec![
            NAME,
            col("Ready", "string", 0, "Number of the pod with ready state"),
            col("Up-to-date", "string", 0, "Total number of non-terminating pods targeted by this deployment that have the desired template spec."),
            col("Available", "string", 0, "Total number of available non-terminating pods (ready for at least minReadySeconds) targeted by this deployment."),
            AGE,
            CONTAINERS,
            IMAGES,
            col("Selector", "string", 1, "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment. It must match the pod template's labels."),
        ],
        // A custom resource without additionalPrinterColumns.
        _ => vec![NAME, col("Age", "date", 0, AGE_DESC)],
    }
}

fn column_definitions(kind: &str) -> Value {
    Value::Array(
        columns(kind)
            .into_iter()
            .map(|c| {
                json!({"name": c.name, "type": c.ty, "format": c.format,
                       "description": c.description, "priority": c.priority})
            })
            .collect(),
    )
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_str().unwrap_or("")
}

fn i(v: &Value, path: &[&str]) -> i64 {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_i64().unwrap_or(0)
}

fn arr<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_array().map(Vec::as_slice).unwrap_or(&[])
}

fn parse_ts(v: &str) -> Option<Timestamp> {
    v.parse::<Timestamp>().ok()
}

/// `duration.HumanDuration` from k8s.io/apimachinery, for `now - ts`.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// `translateTimestampSince`: `<unknown>` for a missing timestamp.
fn since(ts: &str, now: Timestamp) -> String {
    match parse_ts(ts) {
        Some(t) => human_duration(now.as_second() - t.as_second()),
        None => "<unknown>".into(),
    }
}

fn or_none(v: &str) -> String {
    if v.is_empty() {
        "<none>".into()
    } else {
        v.to_string()
    }
}

/// `labels.FormatLabels` / `Selector.String()` for a plain map: sorted `k=v` pairs.
fn format_labels(m: &Value) -> String {
    let Some(m) = m.as_object() else {
        return String::new();
    };
    let mut pairs: Vec<String> = m
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    pairs.sort();
    pairs.join(",")
}

/// `metav1.LabelSelectorAsSelector(sel).String()`: requirements sorted by key.
fn format_label_selector(sel: &Value) -> String {
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(m) = sel["matchLabels"].as_object() {
        for (k, v) in m {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    for e in arr(sel, &["matchExpressions"]) {
        let k = s(e, &["key"]).to_string();
        let mut vals: Vec<&str> = arr(e, &["values"])
            .iter()
            .filter_map(Value::as_str)
            .collect();
        vals.sort();
        let r = match s(e, &["operator"]) {
            "In" => format!("{k} in ({})", vals.join(",")),
            "NotIn" => format!("{k} notin ({})", vals.join(",")),
            "Exists" => k.clone(),
            "DoesNotExist" => format!("!{k}"),
            _ => return "<invalid>".into(),
        };
        reqs.push((k, r));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    reqs.into_iter().map(|r| r.1).collect::<Vec<_>>().join(",")
}

fn container_cells(containers: &[Value]) -> (String, String) {
    let names: Vec<&str> = containers.iter().map(|c| s(c, &["name"])).collect();
    let images: Vec<&str> = containers.iter().map(|c| s(c, &["image"])).collect();
    (names.join(","), images.join(","))
}

struct Row {
    cells: Vec<Value>,
    conditions: Option<Value>,
}

fn pod_row(o: &Value, now: Timestamp) -> Row {
    let status = &o["status"];
    let total = arr(o, &["spec", "containers"]).len();
    let mut ready = 0;
    let mut restarts: i64 = 0;
    let mut last_restart: Option<Timestamp> = None;
    let mut reason = s(status, &["phase"]).to_string();
    if !s(status, &["reason"]).is_empty() {
        reason = s(status, &["reason"]).to_string();
    }
    let conditions = match s(status, &["phase"]) {
        "Succeeded" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}]),
        ),
        "Failed" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]),
        ),
        _ => None,
    };
    let mut track_restart = |c: &Value, restarts: &mut i64| {
        *restarts += i(c, &["restartCount"]);
        if let Some(t) = parse_ts(s(c, &["lastState", "terminated", "finishedAt"])) {
            if last_restart.is_none_or(|l| l < t) {
                last_restart = Some(t);
            }
        }
    };
    let init_statuses = arr(status, &["initContainerStatuses"]);
    let n_init = arr(o, &["spec", "initContainers"]).len();
    let mut initializing = false;
    for (idx, c) in init_statuses.iter().enumerate() {
        track_restart(c, &mut restarts);
        let term = &c["state"]["terminated"];
        let waiting = &c["state"]["waiting"];
        if term.is_object() && i(term, &["exitCode"]) == 0 {
            continue;
        } else if term.is_object() {
            reason = if s(term, &["reason"]).is_empty() {
                if i(term, &["signal"]) != 0 {
                    format!("Init:Signal:{}", i(term, &["signal"]))
                } else {
                    format!("Init:ExitCode:{}", i(term, &["exitCode"]))
                }
            } else {
                format!("Init:{}", s(term, &["reason"]))
            };
        } else if waiting.is_object()
            && !s(waiting, &["reason"]).is_empty()
            && s(waiting, &["reason"]) != "PodInitializing"
        {
            reason = format!("Init:{}", s(waiting, &["reason"]));
        } else {
            reason = format!("Init:{idx}/{n_init}");
        }
        initializing = true;
        break;
    }
    if !initializing {
        restarts = 0;
        let mut has_running = false;
        for c in arr(status, &["containerStatuses"]).iter().rev() {
            track_restart(c, &mut restarts);
            let st = &c["state"];
            if !s(st, &["waiting", "reason"]).is_empty() {
                reason = s(st, &["waiting", "reason"]).to_string();
            } else if !s(st, &["terminated", "reason"]).is_empty() {
                reason = s(st, &["terminated", "reason"]).to_string();
            } else if st["terminated"].is_object() {
                let t = &st["terminated"];
                reason = if i(t, &["signal"]) != 0 {
                    format!("Signal:{}", i(t, &["signal"]))
                } else {
                    format!("ExitCode:{}", i(t, &["exitCode"]))
                };
            } else if c["ready"].as_bool() == Some(true) && st["running"].is_object() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = arr(status, &["conditions"])
                .iter()
                .any(|c| s(c, &["type"]) == "Ready" && s(c, &["status"]) == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    }
    if o["metadata"]["deletionTimestamp"].is_string() {
        reason = if s(status, &["reason"]) == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    let restarts_str = match last_restart {
        Some(t) => format!(
            "{restarts} ({} ago)",
            human_duration(now.as_second() - t.as_second())
        ),
        None => restarts.to_string(),
    };
    let ip = arr(status, &["podIPs"])
        .first()
        .map(|p| s(p, &["ip"]))
        .unwrap_or("");
    let gates = arr(o, &["spec", "readinessGates"]);
    let gates_str = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let conds = arr(status, &["conditions"]);
        let ok = gates
            .iter()
            .filter(|g| {
                conds
                    .iter()
                    .find(|c| s(c, &["type"]) == s(g, &["conditionType"]))
                    .is_some_and(|c| s(c, &["status"]) == "True")
            })
            .count();
        format!("{ok}/{}", gates.len())
    };
    Row {
        cells: vec![
            json!(s(o, &["metadata", "name"])),
            json!(format!("{ready}/{total}")),
            json!(reason),
            json!(restarts_str),
            json!(since(s(o, &["metadata", "creationTimestamp"]), now)),
            json!(or_none(ip)),
            json!(or_none(s(o, &["spec", "nodeName"]))),
            json!(or_none(s(status, &["nominatedNodeName"]))),
            json!(gates_str),
        ],
        conditions,
    }
}

fn node_row(o: &Value, now: Timestamp) -> Row {
    let mut status: Vec<String> = Vec::new();
    if let Some(c) = arr(o, &["status", "conditions"])
        .iter()
        .rev()
        .find(|c| s(c, &["type"]) == "Ready")
    {
        status.push(if s(c, &["status"]) == "True" {
            "Ready".into()
        } else {
            "NotReady".into()
        });
    }
    if status.is_empty() {
        status.push("Unknown".into());
    }
    if o["spec"]["unschedulable"].as_bool() == Some(true) {
        status.push("SchedulingDisabled".into());
    }
    let mut roles: Vec<String> = Vec::new();
    if let Some(labels) = o["metadata"]["labels"].as_object() {
        for (k, v) in labels {
            if let Some(r) = k.strip_prefix("node-role.kubernetes.io/") {
                if !r.is_empty() {
                    roles.push(r.to_string());
                }
            } else if k == "kubernetes.io/role" {
                if let Some(v) = v.as_str().filter(|v| !v.is_empty()) {
                    roles.push(v.to_string());
                }
            }
        }
    }
    roles.sort();
    roles.dedup();
    let addr = |ty: &str| {
        arr(o, &["status", "addresses"])
            .iter()
            .find(|a| s(a, &["type"]) == ty)
            .map(|a| s(a, &["address"]).to_string())
            .unwrap_or_else(|| "<none>".into())
    };
    let info = &o["status"]["nodeInfo"];
    let unknown = |v: &str| {
        if v.is_empty() {
            "<unknown>".to_string()
        } else {
            v.to_string()
        }
    };
    Row {
        cells: vec![
            json!(s(o, &["metadata", "name"])),
            json!(status.join(",")),
            json!(if roles.is_empty() {
                "<none>".into()
            } else {
                roles.join(",")
            }),
            json!(since(s(o, &["metadata", "creationTimestamp"]), now)),
            json!(s(info, &["kubeletVersion"])),
            json!(addr("InternalIP")),
            json!(addr("ExternalIP")),
            json!(unknown(s(info, &["osImage"]))),
            json!(unknown(s(info, &["kernelVersion"]))),
            json!(unknown(s(info, &["containerRuntimeVersion"]))),
        ],
        conditions: None,
    }
}

fn service_row(o: &Value, now: Timestamp) -> Row {
    let spec = &o["spec"];
    let ty = s(spec, &["type"]);
    let cluster_ip = arr(spec, &["clusterIPs"])
        .first()
        .and_then(Value::as_str)
        .unwrap_or("<none>")
        .to_string();
    let external: Vec<&str> = arr(spec, &["externalIPs"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let external_ip = match ty {
        "ClusterIP" | "NodePort" => {
            if external.is_empty() {
                "<none>".to_string()
            } else {
                external.join(",")
            }
        }
        "LoadBalancer" => {
            let mut ips: Vec<String> = arr(o, &["status", "loadBalancer", "ingress"])
                .iter()
                .map(|i| {
                    let ip = s(i, &["ip"]);
                    if ip.is_empty() {
                        s(i, &["hostname"]).to_string()
                    } else {
                        ip.to_string()
                    }
                })
                .filter(|x| !x.is_empty())
                .collect();
            ips.sort();
            ips.dedup();
            ips.extend(external.iter().map(|x| x.to_string()));
            if ips.is_empty() {
                "<pending>".into()
            } else {
                ips.join(",")
            }
        }
        "ExternalName" => s(spec, &["externalName"]).to_string(),
        _ => "<unknown>".into(),
    };
    let ports: Vec<String> = arr(spec, &["ports"])
        .iter()
        .map(|p| {
            let proto = s(p, &["protocol"]);
            let node = i(p, &["nodePort"]);
            if node > 0 {
                format!("{}:{node}/{proto}", i(p, &["port"]))
            } else {
                format!("{}/{proto}", i(p, &["port"]))
            }
        })
        .collect();
    let selector = format_labels(&spec["selector"]);
    Row {
        cells: vec![
            json!(s(o, &["metadata", "name"])),
            json!(ty),
            json!(cluster_ip),
            json!(external_ip),
            json!(if ports.is_empty() {
                "<none>".into()
            } else {
                ports.join(",")
            }),
            json!(since(s(o, &["metadata", "creationTimestamp"]), now)),
            json!(or_none(&selector)),
        ],
        conditions: None,
    }
}

fn endpoints_cell(o: &Value) -> String {
    let subsets = arr(o, &["subsets"]);
    if subsets.is_empty() {
        return "<none>".into();
    }
    const MAX: usize = 3;
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0;
    for ss in subsets {
        let addrs = arr(ss, &["addresses"]);
        let ports = arr(ss, &["ports"]);
        if ports.is_empty() {
            count += addrs.len();
            for a in addrs {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(s(a, &["ip"]).to_string());
            }
            continue;
        }
        for p in ports {
            count += addrs.len();
            for a in addrs {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                let ip = s(a, &["ip"]);
                let host = if ip.contains(':') {
                    format!("[{ip}]")
                } else {
                    ip.to_string()
                };
                list.push(format!("{host}:{}", i(p, &["port"])));
            }
        }
    }
    let ret = list.join(",");
    if more {
        format!("{ret} + {} more...", count - MAX)
    } else {
        ret
    }
}

fn event_row(o: &Value, now: Timestamp) -> Row {
    let first = if parse_ts(s(o, &["firstTimestamp"])).is_some() {
        since(s(o, &["firstTimestamp"]), now)
    } else {
        since(s(o, &["eventTime"]), now)
    };
    let mut last = if parse_ts(s(o, &["lastTimestamp"])).is_some() {
        since(s(o, &["lastTimestamp"]), now)
    } else {
        first.clone()
    };
    let mut count = i(o, &["count"]);
    if o["series"].is_object() {
        last = since(s(o, &["series", "lastObservedTime"]), now);
        count = i(o, &["series", "count"]);
    } else if count == 0 {
        count = 1;
    }
    let io = &o["involvedObject"];
    let target = if s(io, &["name"]).is_empty() {
        s(io, &["kind"]).to_lowercase()
    } else {
        format!("{}/{}", s(io, &["kind"]).to_lowercase(), s(io, &["name"]))
    };
    let first_non_empty = |a: &str, b: &str| {
        if a.is_empty() {
            b.to_string()
        } else {
            a.to_string()
        }
    };
    let component = first_non_empty(
        s(o, &["source", "component"]),
        s(o, &["reportingComponent"]),
    );
    let host = first_non_empty(s(o, &["source", "host"]), s(o, &["reportingInstance"]));
    let source = if component.is_empty() {
        String::new()
    } else if host.is_empty() {
        component
    } else {
        format!("{component}, {host}")
    };
    Row {
        cells: vec![
            json!(last),
            json!(s(o, &["type"])),
            json!(s(o, &["reason"])),
            json!(target),
            json!(s(io, &["fieldPath"])),
            json!(source),
            json!(s(o, &["message"]).trim()),
            json!(first),
            json!(count),
            json!(s(o, &["metadata", "name"])),
        ],
        conditions: None,
    }
}

fn row_for(kind: &str, o: &Value, now: Timestamp) -> Row {
    let name = json!(s(o, &["metadata", "name"]));
    let age = json!(since(s(o, &["metadata", "creationTimestamp"]), now));
    let plain = |cells: Vec<Value>| Row {
        cells,
        conditions: None,
    };
    match kind {
        "Pod" => pod_row(o, now),
        "Node" => node_row(o, now),
        "Service" => service_row(o, now),
        "Event" => event_row(o, now),
        "Namespace" => plain(vec![name, json!(s(o, &["status", "phase"])), age]),
        "ConfigMap" => {
            let n = o["data"].as_object().map_or(0, |m| m.len())
                + o["binaryData"].as_object().map_or(0, |m| m.len());
            plain(vec![name, json!(n), age])
        }
        "Secret" => {
            let n = o["data"].as_object().map_or(0, |m| m.len());
            plain(vec![name, json!(s(o, &["type"])), json!(n), age])
        }
        "Endpoints" => plain(vec![name, json!(endpoints_cell(o)), age]),
        "Deployment" => {
            let (names, images) =
                container_cells(arr(o, &["spec", "template", "spec", "containers"]));
            plain(vec![
                name,
                json!(format!(
                    "{}/{}",
                    i(o, &["status", "readyReplicas"]),
                    i(o, &["spec", "replicas"])
                )),
                json!(i(o, &["status", "updatedReplicas"])),
                json!(i(o, &["status", "availableReplicas"])),
                age,
                json!(names),
                json!(images),
                json!(format_label_selector(&o["spec"]["selector"])),
            ])
        }
        _ => plain(vec![name, age]),
    }
}

fn row_object(o: &Value, include: IncludeObject, table_version: &str) -> Value {
    match include {
        IncludeObject::None => Value::Null,
        IncludeObject::Object => o.clone(),
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": format!("meta.k8s.io/{table_version}"),
            "metadata": o.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
    }
}

fn render_rows(
    rt: &ResourceType,
    items: &[Value],
    include: IncludeObject,
    table_version: &str,
    now: Timestamp,
) -> Vec<Value> {
    items
        .iter()
        .map(|o| {
            let row = row_for(rt.kind, o, now);
            let mut m = Map::new();
            m.insert("cells".into(), Value::Array(row.cells));
            if let Some(c) = row.conditions {
                m.insert("conditions".into(), c);
            }
            m.insert("object".into(), row_object(o, include, table_version));
            Value::Object(m)
        })
        .collect()
}

fn table(metadata: Value, columns: Option<Value>, rows: Vec<Value>, table_version: &str) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": format!("meta.k8s.io/{table_version}"),
        "metadata": metadata,
        "columnDefinitions": columns.unwrap_or(Value::Null),
        "rows": rows,
    })
}

/// Options for one Table rendering.
#[derive(Debug, Clone, Copy)]
pub struct TableOptions {
    pub include: IncludeObject,
    /// `meta.k8s.io` version asked for: `v1` or `v1beta1`.
    pub version: &'static str,
    /// Omit `columnDefinitions` (watch events after the first).
    pub no_headers: bool,
}

impl Default for TableOptions {
    fn default() -> Self {
        Self {
            include: IncludeObject::Metadata,
            version: "v1",
            no_headers: false,
        }
    }
}

/// The list answer as a Table (router contract): `items` are the page's objects,
/// `list_meta` the list's `metadata` (resourceVersion, continue, remainingItemCount).
/// Default options: `includeObject=Metadata`, `meta.k8s.io/v1`, with column definitions.
pub fn render_list(rt: &ResourceType, items: &[Arc<Value>], list_meta: Value) -> Value {
    render_list_opts(rt, items, list_meta, TableOptions::default())
}

/// [`render_list`] with explicit options.
pub fn render_list_opts(
    rt: &ResourceType,
    items: &[Arc<Value>],
    list_meta: Value,
    opts: TableOptions,
) -> Value {
    let items: Vec<Value> = items.iter().map(|o| o.as_ref().clone()).collect();
    render_list_value_at(
        rt,
        &json!({"metadata": list_meta, "items": items}),
        opts,
        Timestamp::now(),
    )
}

/// A one-row Table for one object, with column definitions (router contract: GET of
/// one object). Watch streams should use [`WatchTable`] so that only the first event
/// carries the column definitions, as the apiserver does.
pub fn render_row_object(rt: &ResourceType, obj: &Value) -> Value {
    render_row(rt, obj, TableOptions::default())
}

/// Per-watch Table state: the first rendered event has `columnDefinitions`, later ones
/// have `"columnDefinitions": null` (watch.go sets `TableOptions.NoHeaders` after the
/// first transform). `&self` so a watcher can hold it without a lock.
#[derive(Debug)]
pub struct WatchTable {
    opts: TableOptions,
    sent_headers: std::sync::atomic::AtomicBool,
}

impl WatchTable {
    pub fn new(opts: TableOptions) -> Self {
        Self {
            opts,
            sent_headers: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The Table options a request asks for (Accept + `includeObject`), if any.
    pub fn for_request(
        headers: &http::HeaderMap,
        include_object: Option<&str>,
    ) -> Result<Option<Self>, Status> {
        Ok(options_for_headers(headers, include_object)?.map(Self::new))
    }

    /// The object of one watch event.
    pub fn event_object(&self, rt: &ResourceType, obj: &Value) -> Value {
        let sent = self
            .sent_headers
            .swap(true, std::sync::atomic::Ordering::Relaxed);
        let opts = TableOptions {
            no_headers: sent,
            ..self.opts
        };
        render_row(rt, obj, opts)
    }
}

/// [`options_for`] reading every Accept header of a request.
pub fn options_for_headers(
    headers: &http::HeaderMap,
    include_object: Option<&str>,
) -> Result<Option<TableOptions>, Status> {
    let accept: Vec<&str> = headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    if accept.is_empty() {
        return Ok(None);
    }
    options_for(Some(&accept.join(",")), include_object)
}

/// Table options from a request's Accept header and query: None when no Table is
/// asked for, the apiserver's 400 for a bad `includeObject`.
pub fn options_for(
    accept: Option<&str>,
    include_object: Option<&str>,
) -> Result<Option<TableOptions>, Status> {
    let Some(version) = wants_table(accept) else {
        return Ok(None);
    };
    Ok(Some(TableOptions {
        include: IncludeObject::parse(include_object)?,
        version,
        no_headers: false,
    }))
}

/// Renders a list object (`{"metadata": {...}, "items": [...]}`) as a Table.
pub fn render_list_value(rt: &ResourceType, list: &Value, opts: TableOptions) -> Value {
    render_list_value_at(rt, list, opts, Timestamp::now())
}

/// [`render_list_value`] with an explicit clock (ages are relative to `now`).
pub fn render_list_value_at(
    rt: &ResourceType,
    list: &Value,
    opts: TableOptions,
    now: Timestamp,
) -> Value {
    let mut meta = Map::new();
    let lm = &list["metadata"];
    for k in ["resourceVersion", "continue", "remainingItemCount"] {
        if let Some(v) = lm.get(k) {
            if !(v.is_null() || v.as_str() == Some("")) {
                meta.insert(k.into(), v.clone());
            }
        }
    }
    let items = list["items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let rows = render_rows(rt, items, opts.include, opts.version, now);
    let cols = (!opts.no_headers).then(|| column_definitions(rt.kind));
    table(Value::Object(meta), cols, rows, opts.version)
}

/// Renders one object as a Table with a single row (GET of one object, watch events).
pub fn render_row(rt: &ResourceType, obj: &Value, opts: TableOptions) -> Value {
    render_row_at(rt, obj, opts, Timestamp::now())
}

/// [`render_row`] with an explicit clock.
pub fn render_row_at(rt: &ResourceType, obj: &Value, opts: TableOptions, now: Timestamp) -> Value {
    let mut meta = Map::new();
    if let Some(rv) = obj["metadata"]["resourceVersion"].as_str() {
        if !rv.is_empty() {
            meta.insert("resourceVersion".into(), json!(rv));
        }
    }
    let rows = render_rows(
        rt,
        std::slice::from_ref(obj),
        opts.include,
        opts.version,
        now,
    );
    let cols = (!opts.no_headers).then(|| column_definitions(rt.kind));
    table(Value::Object(meta), cols, rows, opts.version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_match_apimachinery() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
        assert_eq!(human_duration(30 * 86400), "30d");
        assert_eq!(human_duration(-5), "<invalid>");
    }

    #[test]
    fn accept_negotiation() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(wants_table(Some(kubectl)), Some("v1"));
        assert_eq!(wants_table(Some("application/json")), None);
        assert_eq!(
            wants_table(Some("application/json;as=Table;v=v1beta1;g=meta.k8s.io")),
            Some("v1beta1")
        );
        assert_eq!(wants_table(None), None);
    }

    #[test]
    fn include_object_values() {
        assert_eq!(IncludeObject::parse(None).unwrap(), IncludeObject::Metadata);
        assert_eq!(
            IncludeObject::parse(Some("Object")).unwrap(),
            IncludeObject::Object
        );
        let e = IncludeObject::parse(Some("All")).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(e.message, "unrecognized includeObject value: \"All\"");
    }
}

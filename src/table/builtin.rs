//! The built-in printers of kube-apiserver: `pkg/printers/internalversion/printers.go`,
//! for the kinds watchgate knows, over the objects' JSON.
//!
//! The apiserver always prints the wide form (`pkg/printers/storage`'s `TableConvertor`
//! calls `GenerateTable` with `Wide: true`); kubectl hides the columns with priority > 0
//! unless `-o wide`.

use jiff::Timestamp;
use serde_json::{json, Value};

use super::format::{human_duration, parse_time, seconds_between, since};
use super::swagger as sw;
use super::{col, Column, Row, AGE_DESC, NAME};

/// A kind with a printer in `printers.go` that watchgate has ported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Printer {
    Pod,
    Node,
    Namespace,
    ConfigMap,
    Secret,
    Service,
    Endpoints,
    Event,
    Deployment,
    EndpointSlice,
}

impl Printer {
    /// Every ported printer (tests check each against kube-apiserver's columns).
    pub const ALL: [Printer; 10] = [
        Printer::Pod,
        Printer::Node,
        Printer::Namespace,
        Printer::ConfigMap,
        Printer::Secret,
        Printer::Service,
        Printer::Endpoints,
        Printer::Event,
        Printer::Deployment,
        Printer::EndpointSlice,
    ];

    /// The printer for a group and kind, if watchgate has ported it.
    pub fn for_kind(group: &str, kind: &str) -> Option<Printer> {
        Some(match (group, kind) {
            ("", "Pod") => Printer::Pod,
            ("", "Node") => Printer::Node,
            ("", "Namespace") => Printer::Namespace,
            ("", "ConfigMap") => Printer::ConfigMap,
            ("", "Secret") => Printer::Secret,
            ("", "Service") => Printer::Service,
            ("", "Endpoints") => Printer::Endpoints,
            ("", "Event") => Printer::Event,
            ("apps", "Deployment") => Printer::Deployment,
            ("discovery.k8s.io", "EndpointSlice") => Printer::EndpointSlice,
            _ => return None,
        })
    }

    /// The columns this printer defines (the wide form: priority-1 columns included).
    pub fn columns(self) -> Vec<Column> {
        // Each printer's `ColumnDefinitions` in printers.go `AddHandlers`; the
        // descriptions that are `X{}.SwaggerDoc()["field"]` there are `sw::X_FIELD` here.
        match self {
        Printer::Pod => vec![
            NAME,
            col("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
            col("Status", "string", 0, "The aggregate status of the containers in this pod."),
            col("Restarts", "string", 0, "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
            AGE,
            col("IP", "string", 1, sw::POD_STATUS_POD_IP),
            col("Node", "string", 1, sw::POD_SPEC_NODE_NAME),
            col("Nominated Node", "string", 1, sw::POD_STATUS_NOMINATED_NODE_NAME),
            col("Readiness Gates", "string", 1, sw::POD_SPEC_READINESS_GATES),
        ],
        Printer::Node => vec![
            NAME,
            col("Status", "string", 0, "The status of the node"),
            col("Roles", "string", 0, "The roles of the node"),
            AGE,
            col("Version", "string", 0, sw::NODE_SYSTEM_INFO_KUBELET_VERSION),
            col("Internal-IP", "string", 1, sw::NODE_STATUS_ADDRESSES),
            col("External-IP", "string", 1, sw::NODE_STATUS_ADDRESSES),
            col("OS-Image", "string", 1, sw::NODE_SYSTEM_INFO_OS_IMAGE),
            col("Kernel-Version", "string", 1, sw::NODE_SYSTEM_INFO_KERNEL_VERSION),
            col("Container-Runtime", "string", 1, sw::NODE_SYSTEM_INFO_CONTAINER_RUNTIME_VERSION),
        ],
        Printer::Namespace => vec![
            NAME,
            col("Status", "string", 0, "The status of the namespace"),
            AGE,
        ],
        Printer::ConfigMap => vec![NAME, col("Data", "string", 0, sw::CONFIG_MAP_DATA), AGE],
        Printer::Secret => vec![
            NAME,
            col("Type", "string", 0, sw::SECRET_TYPE),
            col("Data", "string", 0, sw::SECRET_DATA),
            AGE,
        ],
        Printer::Service => vec![
            NAME,
            col("Type", "string", 0, sw::SERVICE_SPEC_TYPE),
            col("Cluster-IP", "string", 0, sw::SERVICE_SPEC_CLUSTER_IP),
            col("External-IP", "string", 0, sw::SERVICE_SPEC_EXTERNAL_IPS),
            col("Port(s)", "string", 0, sw::SERVICE_SPEC_PORTS),
            AGE,
            col("Selector", "string", 1, sw::SERVICE_SPEC_SELECTOR),
        ],
        Printer::Endpoints => vec![NAME, col("Endpoints", "string", 0, sw::ENDPOINTS_SUBSETS), AGE],
        Printer::Event => vec![
            col("Last Seen", "string", 0, sw::EVENT_LAST_TIMESTAMP),
            col("Type", "string", 0, sw::EVENT_TYPE),
            col("Reason", "string", 0, sw::EVENT_REASON),
            col("Object", "string", 0, sw::EVENT_INVOLVED_OBJECT),
            col("Subobject", "string", 1, sw::OBJECT_REFERENCE_FIELD_PATH),
            col("Source", "string", 1, sw::EVENT_SOURCE),
            col("Message", "string", 0, sw::EVENT_MESSAGE),
            col("First Seen", "string", 1, sw::EVENT_FIRST_TIMESTAMP),
            col("Count", "string", 1, sw::EVENT_COUNT),
            Column { priority: 1, ..NAME },
        ],
        // printers.go describes these with extensions/v1beta1's DeploymentStatus and
        // DeploymentSpec, whose `selector` text is shorter than apps/v1's.
        Printer::Deployment => vec![
            NAME,
            col("Ready", "string", 0, "Number of the pod with ready state"),
            col("Up-to-date", "string", 0, sw::EXTENSIONS_DEPLOYMENT_STATUS_UPDATED_REPLICAS),
            col("Available", "string", 0, sw::EXTENSIONS_DEPLOYMENT_STATUS_AVAILABLE_REPLICAS),
            AGE,
            CONTAINERS,
            IMAGES,
            col("Selector", "string", 1, sw::EXTENSIONS_DEPLOYMENT_SPEC_SELECTOR),
        ],
        // printers.go takes these descriptions from discovery/v1beta1's SwaggerDoc.
        Printer::EndpointSlice => vec![
            NAME,
            col("AddressType", "string", 0, sw::DISCOVERY_V1BETA1_ENDPOINT_SLICE_ADDRESS_TYPE),
            col("Ports", "string", 0, sw::DISCOVERY_V1BETA1_ENDPOINT_SLICE_PORTS),
            col("Endpoints", "string", 0, sw::DISCOVERY_V1BETA1_ENDPOINT_SLICE_ENDPOINTS),
            AGE,
        ],
    }
    }

    /// The row of one object (`printPod`, `printNode`, …).
    pub fn row(self, o: &Value, now: Timestamp) -> Row {
        let name = json!(s(o, &["metadata", "name"]));
        let age = json!(since(s(o, &["metadata", "creationTimestamp"]), now));
        let plain = |cells: Vec<Value>| Row {
            cells,
            conditions: None,
        };
        match self {
            Printer::Pod => pod_row(o, now),
            Printer::Node => node_row(o, now),
            Printer::Service => service_row(o, now),
            Printer::Event => event_row(o, now),
            Printer::Namespace => plain(vec![name, json!(s(o, &["status", "phase"])), age]),
            Printer::ConfigMap => {
                let n = o["data"].as_object().map_or(0, |m| m.len())
                    + o["binaryData"].as_object().map_or(0, |m| m.len());
                plain(vec![name, json!(n), age])
            }
            Printer::Secret => {
                let n = o["data"].as_object().map_or(0, |m| m.len());
                plain(vec![name, json!(s(o, &["type"])), json!(n), age])
            }
            Printer::Endpoints => plain(vec![name, json!(endpoints_cell(o)), age]),
            Printer::EndpointSlice => plain(vec![
                name,
                json!(s(o, &["addressType"])),
                json!(discovery_ports(arr(o, &["ports"]))),
                json!(discovery_endpoints(arr(o, &["endpoints"]))),
                age,
            ]),
            Printer::Deployment => {
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
        }
    }
}

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
        if let Some(t) = parse_time(s(c, &["lastState", "terminated", "finishedAt"])) {
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
            human_duration(seconds_between(t, now))
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

/// `formatDiscoveryPorts`: the first three ports' numbers (a nil port: its name, else
/// `*`), then `+ N more...`.
fn discovery_ports(ports: &[Value]) -> String {
    let list: Vec<String> = ports
        .iter()
        .take(MORE_AFTER)
        .map(
            |p| match (p.get("port").and_then(Value::as_i64), p.get("name")) {
                (Some(n), _) => n.to_string(),
                (None, Some(Value::String(name))) => name.clone(),
                _ => "*".into(),
            },
        )
        .collect();
    list_with_more(list, ports.len())
}

/// `formatDiscoveryEndpoints`: the first three addresses over all endpoints.
fn discovery_endpoints(endpoints: &[Value]) -> String {
    let addresses = endpoints.iter().flat_map(|e| arr(e, &["addresses"]));
    let count = addresses.clone().count();
    let list = addresses
        .take(MORE_AFTER)
        .map(|a| a.as_str().unwrap_or("").to_string())
        .collect();
    list_with_more(list, count)
}

const MORE_AFTER: usize = 3;

/// `listWithMoreString`: `a,b,c + N more...` past three, `<unset>` when empty.
fn list_with_more(list: Vec<String>, count: usize) -> String {
    let ret = list.join(",");
    if count > MORE_AFTER {
        format!("{ret} + {} more...", count - MORE_AFTER)
    } else if ret.is_empty() {
        "<unset>".into()
    } else {
        ret
    }
}

fn event_row(o: &Value, now: Timestamp) -> Row {
    let first = if parse_time(s(o, &["firstTimestamp"])).is_some() {
        since(s(o, &["firstTimestamp"]), now)
    } else {
        since(s(o, &["eventTime"]), now)
    };
    let mut last = if parse_time(s(o, &["lastTimestamp"])).is_some() {
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

//! Realistic object generators and seeding.
//!
//! Objects look like what a kubeadm cluster running a few Deployments holds: pods with
//! two containers, env, volume mounts, probes, resources, owner references, conditions and
//! container statuses; nodes with capacity, conditions, addresses and node info; and so
//! on. Pods are padded to `pod_size` bytes of JSON (default 4096; the Kubernetes
//! scalability tests use 2 to 15 KiB pods) with one annotation, so benches can choose
//! their object size. Everything is deterministic given the index, except `uid`s and
//! timestamps, which are derived from the name and the start time.
//!
//! kube-apiserver creates `default`, `kube-system`, `kube-public` and `kube-node-lease`
//! on start-up (the `system-namespaces` post-start hook); [`seed`] does the same whenever
//! it seeds anything (`--seed N`, N > 0). With `--seed 0` the store stays empty, so tests
//! that count resourceVersions from 1 keep working.
// metav1.Status is the crate's error type (large by design; see status.rs).
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde_json::{json, Value};

use super::resources::{self, ResourceType};
use super::store::{Mutation, Store};
use super::Sim;

/// The namespaces kube-apiserver creates by itself.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// How many objects of each type to seed. Namespaced objects are spread round-robin
/// over the namespaces `ns-0` … `ns-{namespaces-1}` (object `i` goes to `ns-{i % namespaces}`).
#[derive(Debug, Clone, PartialEq)]
pub struct SeedSpec {
    pub namespaces: usize,
    pub nodes: usize,
    pub pods: usize,
    pub configmaps: usize,
    pub secrets: usize,
    pub services: usize,
    pub events: usize,
    pub deployments: usize,
    pub widgets: usize,
    /// Target JSON size of a pod, in bytes.
    pub pod_size: usize,
}

impl SeedSpec {
    /// `n` objects of every seeded type (and `n` nodes) over `min(n, 10)` namespaces.
    pub fn per_type(n: usize, pod_size: usize) -> Self {
        Self {
            namespaces: n.min(10),
            nodes: n,
            pods: n,
            configmaps: n,
            secrets: n,
            services: n,
            events: n,
            deployments: n,
            widgets: n,
            pod_size,
        }
    }

    /// The namespace object `i` of a namespaced type lives in.
    pub fn namespace_of(&self, i: usize) -> String {
        format!("ns-{}", i % self.namespaces.max(1))
    }
}

fn rt(resource: &str) -> &'static ResourceType {
    let r = resources::RESOURCES
        .iter()
        .find(|r| r.resource == resource)
        .expect("served resource");
    r
}

/// A stable UID for an object (UUID-shaped, derived from its identity).
pub fn uid_for(kind: &str, ns: &str, name: &str) -> String {
    let mut h1: u64 = 0xcbf2_9ce4_8422_2325;
    let mut h2: u64 = 0x8422_2325_cbf2_9ce4;
    for b in kind
        .bytes()
        .chain([0])
        .chain(ns.bytes())
        .chain([0])
        .chain(name.bytes())
    {
        h1 = (h1 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        h2 = (h2 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3 ^ 0x5bd1_e995);
    }
    let v = (u128::from(h1) << 64) | u128::from(h2);
    // Version 4 / RFC 4122 variant bits, so it parses as a normal random UUID.
    let v = (v & !(0xF << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    uuid::Uuid::from_u128(v).to_string()
}

fn ts(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A creation time spread over the last day, so `AGE` columns vary.
fn created(now: Timestamp, i: usize) -> Timestamp {
    let back = 3600 + (i as i64 * 37) % 86_400;
    now.checked_sub(SignedDuration::from_secs(back))
        .unwrap_or(now)
}

fn meta(kind: &str, ns: Option<&str>, name: &str, at: Timestamp, labels: Value) -> Value {
    let mut m = json!({
        "name": name,
        "uid": uid_for(kind, ns.unwrap_or(""), name),
        "creationTimestamp": ts(at),
        "labels": labels,
    });
    if let Some(ns) = ns {
        m["namespace"] = json!(ns);
    }
    m
}

pub fn namespace(name: &str, now: Timestamp) -> Value {
    json!({
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": meta("Namespace", None, name, now, json!({"kubernetes.io/metadata.name": name})),
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}

fn ip(base: u8, i: usize) -> String {
    format!("10.{base}.{}.{}", (i / 250) % 250, i % 250 + 2)
}

pub fn node(i: usize, now: Timestamp) -> Value {
    let name = format!("node-{i}");
    let at = created(now, i);
    let zone = format!("zone-{}", ["a", "b", "c"][i % 3]);
    let cond = |ty: &str, status: &str, reason: &str, message: &str| {
        json!({"type": ty, "status": status, "lastHeartbeatTime": ts(now), "lastTransitionTime": ts(at),
               "reason": reason, "message": message})
    };
    let mut labels = json!({
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/region": "region-1",
        "topology.kubernetes.io/zone": zone,
    });
    if i == 0 {
        labels["node-role.kubernetes.io/control-plane"] = json!("");
    }
    json!({
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": meta("Node", None, &name, at, labels),
        "spec": {"podCIDR": format!("10.244.{}.0/24", i % 256), "podCIDRs": [format!("10.244.{}.0/24", i % 256)],
                 "providerID": format!("sim://{name}")},
        "status": {
            "capacity": {"cpu": "8", "ephemeral-storage": "101430960Ki", "hugepages-2Mi": "0", "memory": "32876548Ki", "pods": "110"},
            "allocatable": {"cpu": "7800m", "ephemeral-storage": "93478772582", "hugepages-2Mi": "0", "memory": "31725572Ki", "pods": "110"},
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": ip(0, i)}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": uid_for("machine", "", &name).replace('-', ""),
                "systemUUID": uid_for("system", "", &name),
                "bootID": uid_for("boot", "", &name),
                "kernelVersion": "6.8.0-45-generic",
                "osImage": "Ubuntu 24.04.1 LTS",
                "containerRuntimeVersion": "containerd://2.0.0",
                "kubeletVersion": "v1.36.0",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64"
            },
            "images": [
                {"names": ["registry.k8s.io/pause@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a", "registry.k8s.io/pause:3.10"], "sizeBytes": 320368}
            ]
        }
    })
}

/// The Deployment (and thus app label) pod `i` belongs to.
fn app_of(i: usize) -> String {
    format!("app-{}", i % 5)
}

/// A pod of about `target` bytes of JSON (before the store adds `resourceVersion`).
pub fn pod(spec: &SeedSpec, i: usize, now: Timestamp) -> Value {
    let ns = spec.namespace_of(i);
    let name = format!("pod-{i}");
    let app = app_of(i);
    let hash = format!("{:010x}", (i % 5) * 0x9e37_79b9 + 0x7d4b_9c8f);
    let hash = &hash[hash.len() - 10..];
    let at = created(now, i);
    let node = format!("node-{}", i % spec.nodes.max(1));
    let pending = i % 10 == 9;
    let pod_ip = ip(244, i);
    let labels = json!({"app": app, "pod-template-hash": hash, "tier": if i % 2 == 0 { "frontend" } else { "backend" }});
    let mut metadata = meta("Pod", Some(&ns), &name, at, labels);
    metadata["generateName"] = json!(format!("{app}-{hash}-"));
    metadata["ownerReferences"] = json!([{
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-{hash}"),
        "uid": uid_for("ReplicaSet", &ns, &format!("{app}-{hash}")), "controller": true, "blockOwnerDeletion": true
    }]);
    let env = json!([
        {"name": "APP_NAME", "value": app},
        {"name": "LOG_LEVEL", "value": "info"},
        {"name": "HTTP_PORT", "value": "8080"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
        {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": format!("secret-{}", i % 7), "key": "password"}}}
    ]);
    let mounts = json!([
        {"name": "config", "mountPath": "/etc/app", "readOnly": true},
        {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}
    ]);
    // The app container carries env and probes; the sidecar stays lean, which keeps the
    // natural size of a pod under 4 KiB so padding can hit the target.
    let container = |cname: &str, image: &str, port: u16, full: bool| {
        let mut c = json!({
            "name": cname,
            "image": image,
            "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
            "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}},
            "volumeMounts": mounts,
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent"
        });
        if full {
            c["env"] = env.clone();
            c["readinessProbe"] = json!({"httpGet": {"path": "/ready", "port": port, "scheme": "HTTP"},
                "timeoutSeconds": 1, "periodSeconds": 5, "successThreshold": 1, "failureThreshold": 3});
        }
        c
    };
    let started = at.checked_add(SignedDuration::from_secs(4)).unwrap_or(at);
    let cstatus = |cname: &str, image: &str| {
        let state = if pending {
            json!({"waiting": {"reason": "ContainerCreating"}})
        } else {
            json!({"running": {"startedAt": ts(started)}})
        };
        json!({
            "name": cname, "state": state, "lastState": {}, "ready": !pending, "restartCount": 0,
            "image": image, "imageID": format!("{image}@sha256:{}", "4f1c1e7a".repeat(4)),
            "containerID": if pending { Value::Null } else { json!(format!("containerd://{}", uid_for("c", &name, cname).replace('-', ""))) },
            "started": !pending
        })
    };
    let cond = |ty: &str, ok: bool| json!({"type": ty, "status": if ok { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": ts(started)});
    let mut container_statuses = vec![
        cstatus("app", "example.com/app:1.4.2"),
        cstatus("sidecar", "example.com/proxy:2.1.0"),
    ];
    for c in &mut container_statuses {
        if c["containerID"].is_null() {
            c.as_object_mut().expect("object").remove("containerID");
        }
    }
    let mut p = json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": metadata,
        "spec": {
            "volumes": [
                {"name": "config", "configMap": {"name": format!("configmap-{}", i % 7), "defaultMode": 420}},
                {"name": "kube-api-access", "projected": {"sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
                ], "defaultMode": 420}}
            ],
            "containers": [
                container("app", "example.com/app:1.4.2", 8080, true),
                container("sidecar", "example.com/proxy:2.1.0", 15001, false)
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "nodeName": node,
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ],
            "priority": 0
        },
        "status": {
            "phase": if pending { "Pending" } else { "Running" },
            "conditions": [
                cond("PodReadyToStartContainers", !pending),
                cond("Initialized", true),
                cond("Ready", !pending),
                cond("ContainersReady", !pending),
                cond("PodScheduled", true)
            ],
            "hostIP": ip(0, i % spec.nodes.max(1)),
            "hostIPs": [{"ip": ip(0, i % spec.nodes.max(1))}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": ts(at),
            "containerStatuses": container_statuses,
            "qosClass": "Burstable"
        }
    });
    if pending {
        let st = p["status"].as_object_mut().expect("object");
        st.remove("podIP");
        st.remove("podIPs");
    }
    pad(&mut p, spec.pod_size);
    p
}

/// Grows `obj` to about `target` bytes of compact JSON with a filler annotation (no-op
/// when it is already larger).
pub fn pad(obj: &mut Value, target: usize) {
    const KEY: &str = "sim.watchgate.dev/padding";
    let len = serde_json::to_vec(obj).map(|v| v.len()).unwrap_or(0);
    // `,"sim.watchgate.dev/padding":""` plus the annotations object if it is new.
    let has_annotations = obj["metadata"]["annotations"].is_object();
    let overhead = KEY.len() + 6 + if has_annotations { 0 } else { 16 };
    if len + overhead >= target {
        return;
    }
    let filler: String = (0..target - len - overhead)
        .map(|k| char::from(b'a' + (k % 26) as u8))
        .collect();
    let md = obj["metadata"].as_object_mut().expect("metadata");
    let ann = md
        .entry("annotations")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .expect("annotations object");
    ann.insert(KEY.into(), json!(filler));
}

pub fn configmap(spec: &SeedSpec, i: usize, now: Timestamp) -> Value {
    let ns = spec.namespace_of(i);
    let name = format!("configmap-{i}");
    json!({
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": meta("ConfigMap", Some(&ns), &name, created(now, i), json!({"app": app_of(i)})),
        "data": {
            "app.properties": format!("server.port=8080\nserver.name={name}\ncache.size={}\nfeature.flags=a,b,c\n", 100 + i % 900),
            "log-level": "info",
            "settings.json": "{\"retries\":3,\"timeoutMs\":2500,\"endpoints\":[\"http://backend:8080\",\"http://cache:6379\"]}"
        }
    })
}

pub fn secret(spec: &SeedSpec, i: usize, now: Timestamp) -> Value {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let ns = spec.namespace_of(i);
    let name = format!("secret-{i}");
    json!({
        "kind": "Secret",
        "apiVersion": "v1",
        "metadata": meta("Secret", Some(&ns), &name, created(now, i), json!({"app": app_of(i)})),
        "type": "Opaque",
        "data": {
            "username": b64("app-user"),
            "password": b64(&format!("s3cr3t-{i}-{}", uid_for("pw", &ns, &name))),
        }
    })
}

pub fn service(spec: &SeedSpec, i: usize, now: Timestamp) -> Value {
    let ns = spec.namespace_of(i);
    let name = format!("service-{i}");
    let cip = ip(96, i);
    json!({
        "kind": "Service",
        "apiVersion": "v1",
        "metadata": meta("Service", Some(&ns), &name, created(now, i), json!({"app": app_of(i)})),
        "spec": {
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}],
            "selector": {"app": app_of(i)},
            "clusterIP": cip,
            "clusterIPs": [cip],
            "type": "ClusterIP",
            "sessionAffinity": "None",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster"
        },
        "status": {"loadBalancer": {}}
    })
}

pub fn endpoints(spec: &SeedSpec, i: usize, now: Timestamp) -> Value {
    let ns = spec.namespace_of(i);
    let name = format!("service-{i}");
    let addrs: Vec<Value> = (0..3)
        .map(|k| {
            let p = i * 3 + k;
            json!({"ip": ip(244, p), "nodeName": format!("node-{}", p % spec.nodes.max(1)),
                   "targetRef": {"kind": "Pod", "namespace": ns, "name": format!("pod-{p}"), "uid": uid_for("Pod", &ns, &format!("pod-{p}"))}})
        })
        .collect();
    json!({
        "kind": "Endpoints",
        "apiVersion": "v1",
        "metadata": meta("Endpoints", Some(&ns), &name, created(now, i), json!({"app": app_of(i)})),
        "subsets": [{"addresses": addrs, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]
    })
}

/// The EndpointSlice the endpointslice controller keeps for `service-{i}`: named from its
/// `generateName` (`service-{i}-` + five characters of `utilrand`'s alphabet, derived
/// from the service's UID here), the controller's labels, owned by the service, the same
/// three pod addresses as the Endpoints object.
pub fn endpoint_slice(spec: &SeedSpec, i: usize, now: Timestamp) -> Value {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let ns = spec.namespace_of(i);
    let service = format!("service-{i}");
    let service_uid = uid_for("Service", &ns, &service);
    let suffix: String = service_uid
        .bytes()
        .filter(u8::is_ascii_hexdigit)
        .take(5)
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect();
    let name = format!("{service}-{suffix}");
    let at = created(now, i);
    let mut metadata = meta(
        "EndpointSlice",
        Some(&ns),
        &name,
        at,
        json!({
            "app": app_of(i),
            "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
            "kubernetes.io/service-name": service,
        }),
    );
    metadata["generateName"] = json!(format!("{service}-"));
    metadata["generation"] = json!(1);
    metadata["annotations"] = json!({"endpoints.kubernetes.io/last-change-trigger-time": ts(at)});
    metadata["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Service", "name": service,
        "uid": service_uid, "controller": true, "blockOwnerDeletion": true}]);
    let endpoints: Vec<Value> = (0..3)
        .map(|k| {
            let p = i * 3 + k;
            let pod = format!("pod-{p}");
            json!({"addresses": [ip(244, p)],
                   "conditions": {"ready": true, "serving": true, "terminating": false},
                   "targetRef": {"kind": "Pod", "namespace": ns, "name": pod, "uid": uid_for("Pod", &ns, &pod)},
                   "nodeName": format!("node-{}", p % spec.nodes.max(1))})
        })
        .collect();
    json!({
        "kind": "EndpointSlice",
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": metadata,
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]
    })
}

pub fn event(spec: &SeedSpec, i: usize, now: Timestamp) -> Value {
    let ns = spec.namespace_of(i);
    let pod = format!("pod-{i}");
    let name = format!("{pod}.{:016x}", 0x17f0_0000_0000_0000u64 + i as u64);
    let (reason, message, ty) = match i % 4 {
        0 => (
            "Scheduled",
            format!(
                "Successfully assigned {ns}/{pod} to node-{}",
                i % spec.nodes.max(1)
            ),
            "Normal",
        ),
        1 => (
            "Pulled",
            "Container image \"registry.example.com/team/app:1.4.2\" already present on machine"
                .to_string(),
            "Normal",
        ),
        2 => ("Started", "Started container app".to_string(), "Normal"),
        _ => (
            "Unhealthy",
            "Readiness probe failed: HTTP probe failed with statuscode: 503".to_string(),
            "Warning",
        ),
    };
    let at = created(now, i);
    json!({
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": meta("Event", Some(&ns), &name, at, json!({})),
        "involvedObject": {"kind": "Pod", "namespace": ns, "name": pod, "uid": uid_for("Pod", &ns, &pod), "apiVersion": "v1",
                           "resourceVersion": "1", "fieldPath": if i % 4 == 0 { "" } else { "spec.containers{app}" }},
        "reason": reason,
        "message": message,
        "source": {"component": if i % 4 == 0 { "default-scheduler" } else { "kubelet" }, "host": format!("node-{}", i % spec.nodes.max(1))},
        "firstTimestamp": ts(at),
        "lastTimestamp": ts(at),
        "count": 1 + (i % 3) as i64,
        "type": ty,
        "eventTime": null,
        "reportingComponent": if i % 4 == 0 { "default-scheduler" } else { "kubelet" },
        "reportingInstance": format!("node-{}", i % spec.nodes.max(1))
    })
}

pub fn deployment(spec: &SeedSpec, i: usize, now: Timestamp) -> Value {
    let ns = spec.namespace_of(i);
    let name = format!("deployment-{i}");
    let app = format!("deployment-{i}");
    let at = created(now, i);
    let mut d = json!({
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": meta("Deployment", Some(&ns), &name, at, json!({"app": app})),
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"creationTimestamp": null, "labels": {"app": app}},
                "spec": {
                    "containers": [{"name": "app", "image": "registry.example.com/team/app:1.4.2",
                                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                                    "resources": {}, "terminationMessagePath": "/dev/termination-log",
                                    "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
                    "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                    "securityContext": {}, "schedulerName": "default-scheduler"
                }
            },
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600
        },
        "status": {
            "observedGeneration": 1, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3,
            "conditions": [
                {"type": "Available", "status": "True", "lastUpdateTime": ts(at), "lastTransitionTime": ts(at),
                 "reason": "MinimumReplicasAvailable", "message": "Deployment has minimum availability."},
                {"type": "Progressing", "status": "True", "lastUpdateTime": ts(at), "lastTransitionTime": ts(at),
                 "reason": "NewReplicaSetAvailable", "message": format!("ReplicaSet \"{app}-7d4b9c8f6d\" has successfully progressed.")}
            ]
        }
    });
    d["metadata"]["generation"] = json!(1);
    d["metadata"]["annotations"] = json!({"deployment.kubernetes.io/revision": "1"});
    d
}

pub fn widget(spec: &SeedSpec, i: usize, now: Timestamp) -> Value {
    let ns = spec.namespace_of(i);
    let name = format!("widget-{i}");
    let color = ["red", "green", "blue"][i % 3];
    let mut w = json!({
        "kind": "Widget",
        "apiVersion": "example.com/v1",
        "metadata": meta("Widget", Some(&ns), &name, created(now, i), json!({"color": color})),
        "spec": {"size": 1 + i % 10, "color": color}
    });
    w["metadata"]["generation"] = json!(1);
    w
}

/// The name of the widgets' CustomResourceDefinition.
pub const WIDGETS_CRD: &str = "widgets.example.com";

/// The CustomResourceDefinition of the simulator's custom resource, as a cluster that
/// serves widgets would have it: its `additionalPrinterColumns` give `kubectl get widgets`
/// its columns (src/sim/table.rs reads them from the store).
pub fn widgets_crd(now: Timestamp) -> Value {
    json!({
        "kind": "CustomResourceDefinition",
        "apiVersion": "apiextensions.k8s.io/v1",
        "metadata": {
            "name": WIDGETS_CRD,
            "uid": uid_for("CustomResourceDefinition", "", WIDGETS_CRD),
            "generation": 1,
            "creationTimestamp": ts(now),
        },
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "singular": "widget", "shortNames": ["wg"],
                      "kind": "Widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                                               "x-kubernetes-preserve-unknown-fields": true}},
                "additionalPrinterColumns": [
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color",
                     "description": "The widget's color"},
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Ready", "type": "string", "priority": 1,
                     "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ]
            }],
            "conversion": {"strategy": "None"}
        },
        "status": {
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "lastTransitionTime": ts(now),
                 "reason": "NoConflicts", "message": "no conflicts found"},
                {"type": "Established", "status": "True", "lastTransitionTime": ts(now),
                 "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted"}
            ],
            "acceptedNames": {"plural": "widgets", "singular": "widget", "shortNames": ["wg"],
                              "kind": "Widget", "listKind": "WidgetList"},
            "storedVersions": ["v1"]
        }
    })
}

/// Writes the CustomResourceDefinitions of the served custom resources (idempotent).
pub fn bootstrap_crds(store: &Store) {
    put(
        store,
        "customresourcedefinitions",
        widgets_crd(Timestamp::now()),
    );
}

/// An object generator: spec, index, clock → object.
type Generator = fn(&SeedSpec, usize, Timestamp) -> Value;

fn put(store: &Store, resource: &str, obj: Value) {
    let r = rt(resource);
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    let res = store.mutate(r, &ns, &name, |cur| {
        Ok(if cur.is_some() {
            Mutation::NoOp
        } else {
            Mutation::Put(obj)
        })
    });
    if let Err(e) = res {
        tracing::warn!(%e, resource, name, "seeding failed");
    }
}

/// Writes the system namespaces and everything `spec` asks for into `store`.
pub fn seed_store(store: &Store, spec: &SeedSpec) {
    if *spec == SeedSpec::per_type(0, spec.pod_size) {
        return;
    }
    let now = Timestamp::now();
    for ns in SYSTEM_NAMESPACES {
        put(store, "namespaces", namespace(ns, now));
    }
    put(store, "customresourcedefinitions", widgets_crd(now));
    for n in 0..spec.namespaces {
        put(store, "namespaces", namespace(&format!("ns-{n}"), now));
    }
    for i in 0..spec.nodes {
        put(store, "nodes", node(i, now));
    }
    let gens: [(&str, usize, Generator); 9] = [
        ("configmaps", spec.configmaps, configmap),
        ("secrets", spec.secrets, secret),
        ("services", spec.services, service),
        ("endpoints", spec.services, endpoints),
        // One slice per service: what the controller keeps for fewer than 100 endpoints.
        ("endpointslices", spec.services, endpoint_slice),
        ("deployments", spec.deployments, deployment),
        ("pods", spec.pods, pod),
        ("events", spec.events, event),
        ("widgets", spec.widgets, widget),
    ];
    if spec.namespaces == 0 {
        return;
    }
    for (resource, count, g) in gens {
        for i in 0..count {
            put(store, resource, g(spec, i, now));
        }
    }
}

/// Seeds the simulator from its config (`--seed N`, `--pod-size`): called by `start()`
/// before the listener serves, so clients never see a half-seeded cluster.
pub fn seed(sim: &Arc<Sim>) {
    let spec = SeedSpec::per_type(sim.cfg.seed_per_type, sim.cfg.pod_size);
    seed_store(&sim.store, &spec);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_about_the_requested_size() {
        let spec = SeedSpec::per_type(20, 4096);
        let now = Timestamp::now();
        for i in 0..20 {
            let len = serde_json::to_vec(&pod(&spec, i, now)).unwrap().len();
            assert!((4000..=4150).contains(&len), "pod {i}: {len} bytes");
        }
        let big = SeedSpec::per_type(1, 15 * 1024);
        let len = serde_json::to_vec(&pod(&big, 0, now)).unwrap().len();
        assert!((15 * 1024 - 100..=15 * 1024 + 100).contains(&len), "{len}");
    }

    #[test]
    fn seed_store_writes_every_type_with_realistic_sizes() {
        let store = Store::new(Default::default());
        let spec = SeedSpec::per_type(25, 4096);
        seed_store(&store, &spec);
        for r in resources::RESOURCES {
            let (_, items) = store.list(r, None);
            let want = match r.resource {
                "namespaces" => 10 + SYSTEM_NAMESPACES.len(),
                // The widgets' CRD.
                "customresourcedefinitions" => 1,
                _ => 25,
            };
            assert_eq!(items.len(), want, "{}", r.resource);
            for o in &items {
                assert_eq!(o["kind"], r.kind, "{}", r.resource);
                assert!(o["metadata"]["uid"].is_string());
                assert!(o["metadata"]["creationTimestamp"].is_string());
            }
        }
        let (_, pods) = store.list(rt("pods"), None);
        for p in &pods {
            let len = serde_json::to_vec(p.as_ref()).unwrap().len();
            assert!((4000..=4200).contains(&len), "{len}");
            let i: usize = p["metadata"]["name"].as_str().unwrap()[4..]
                .parse()
                .unwrap();
            assert_eq!(p["metadata"]["namespace"], format!("ns-{}", i % 10));
            assert_eq!(p["spec"]["nodeName"], format!("node-{}", i % 25));
            let phase = if i % 10 == 9 { "Pending" } else { "Running" };
            assert_eq!(p["status"]["phase"], phase);
        }
        // Seeding twice changes nothing (no RV consumed).
        let rv = store.current_rv();
        seed_store(&store, &spec);
        assert_eq!(store.current_rv(), rv);
        // --seed 0 leaves the store empty.
        let empty = Store::new(Default::default());
        seed_store(&empty, &SeedSpec::per_type(0, 4096));
        assert!(resources::RESOURCES
            .iter()
            .all(|r| empty.list(r, None).1.is_empty()));
    }

    #[test]
    fn uids_are_stable_and_distinct() {
        assert_eq!(uid_for("Pod", "a", "b"), uid_for("Pod", "a", "b"));
        assert_ne!(uid_for("Pod", "a", "b"), uid_for("Pod", "a", "c"));
        assert!(uuid::Uuid::parse_str(&uid_for("Pod", "a", "b")).is_ok());
    }
}

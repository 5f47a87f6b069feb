//! Per-type write rules: the bits of each registry strategy (k8s.io/kubernetes
//! `pkg/registry/*/strategy.go`) and API defaulting (`pkg/apis/*/v1/defaults.go`) that
//! clients can observe in the simulator.

// metav1.Status is the error type of every write step (as in the store API); boxing it
// would only add noise to the happy path, which it never slows.
#![allow(clippy::result_large_err)]

use serde_json::{json, Map, Value};

use crate::sim::resources::ResourceType;

/// `metav1.Time` as the apiserver writes it (RFC 3339, seconds, UTC): the writes' and the
/// lifecycle's timestamps (here, below both, so that neither imports the other for it).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Whether the type has a `status` subresource, so the main resource ignores status
/// changes (`PrepareForUpdate` copies the old status) and `/status` ignores the rest.
pub fn has_status_subresource(rt: &ResourceType) -> bool {
    rt.subresources.contains(&"status")
}

/// Whether `metadata.generation` is maintained (strategies that set it to 1 on create and
/// bump it on spec changes: pods, deployments, CRDs, endpointslices, custom resources).
pub fn tracks_generation(rt: &ResourceType) -> bool {
    matches!(
        (rt.group, rt.resource),
        ("", "pods")
            | ("apps", "deployments")
            | ("apiextensions.k8s.io", "customresourcedefinitions")
            | ("discovery.k8s.io", "endpointslices")
            | ("example.com", _)
    )
}

/// Whether a change from `old` to `new` bumps the generation.
/// - deployments: spec or annotations changed (`deploymentStrategy.PrepareForUpdate`:
///   annotations are copied to replica sets, so they count);
/// - pods: spec changed;
/// - endpointslices: anything but metadata, or the labels
///   (`endpointSliceStrategy.PrepareForUpdate`);
/// - custom resources: anything but metadata (and status when it is a subresource).
pub fn generation_changed(rt: &ResourceType, old: &Value, new: &Value) -> bool {
    match (rt.group, rt.resource) {
        ("discovery.k8s.io", "endpointslices")
            if old.pointer("/metadata/labels") != new.pointer("/metadata/labels") =>
        {
            true
        }
        ("apps", "deployments") => {
            old.get("spec") != new.get("spec")
                || old.pointer("/metadata/annotations") != new.pointer("/metadata/annotations")
        }
        // CRDs: `strategy.PrepareForUpdate` bumps it when the spec changes.
        ("", "pods") | ("apiextensions.k8s.io", "customresourcedefinitions") => {
            old.get("spec") != new.get("spec")
        }
        _ => {
            let strip = |v: &Value| -> Map<String, Value> {
                let mut m = v.as_object().cloned().unwrap_or_default();
                m.remove("metadata");
                if has_status_subresource(rt) {
                    m.remove("status");
                }
                m
            };
            strip(old) != strip(new)
        }
    }
}

/// Whether PUT may create a missing object (`AllowCreateOnUpdate`): endpoints and events.
pub fn allow_create_on_update(rt: &ResourceType) -> bool {
    matches!((rt.group, rt.resource), ("", "endpoints") | ("", "events"))
}

/// Whether PUT without metadata.resourceVersion is allowed (`AllowUnconditionalUpdate`):
/// every built-in type here; custom resources require it.
pub fn allow_unconditional_update(rt: &ResourceType) -> bool {
    rt.group != "example.com"
}

/// Whether DELETE answers with the object (`ReturnDeletedObject: true` in the type's
/// registry: pods, services, namespaces) instead of a `Status` with `details`.
pub fn returns_deleted_object(rt: &ResourceType) -> bool {
    matches!(
        (rt.group, rt.resource),
        ("", "pods") | ("", "services") | ("", "namespaces")
    )
}

/// etcd key prefix of a type (`/registry/<prefix>/<ns>/<name>`), used in storage error
/// texts.
pub fn etcd_prefix(rt: &ResourceType) -> String {
    match (rt.group, rt.resource) {
        ("", "nodes") => "minions".into(),
        ("", "services") => "services/specs".into(),
        ("", "endpoints") => "services/endpoints".into(),
        ("", _) | ("apps", _) | ("discovery.k8s.io", _) => rt.resource.into(),
        (g, r) => format!("{g}/{r}"),
    }
}

fn obj_mut<'a>(v: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    let m = v.as_object_mut().expect("object");
    let e = m.entry(key.to_string()).or_insert_with(|| json!({}));
    if !e.is_object() {
        *e = json!({});
    }
    e.as_object_mut().expect("object")
}

fn default(m: &mut Map<String, Value>, key: &str, v: Value) {
    // Go defaulters test the zero value: absent, null and "" are all unset.
    if m.get(key)
        .is_none_or(|v| v.is_null() || v.as_str() == Some(""))
    {
        m.insert(key.to_string(), v);
    }
}

/// `imagePullPolicy` default: Always for `:latest` or untagged images, else IfNotPresent.
fn pull_policy(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') {
        return "IfNotPresent";
    }
    match last.split_once(':') {
        None => "Always",
        Some((_, "latest")) => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn default_pod_spec(spec: &mut Map<String, Value>) {
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = spec.get_mut(list) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                let image = c
                    .get("image")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                default(c, "imagePullPolicy", json!(pull_policy(&image)));
                default(c, "terminationMessagePath", json!("/dev/termination-log"));
                default(c, "terminationMessagePolicy", json!("File"));
                default(c, "resources", json!({}));
                if let Some(Value::Array(ports)) = c.get_mut("ports") {
                    for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                        default(p, "protocol", json!("TCP"));
                    }
                }
            }
        }
    }
    default(spec, "restartPolicy", json!("Always"));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "securityContext", json!({}));
    default(spec, "schedulerName", json!("default-scheduler"));
    default(spec, "enableServiceLinks", json!(true));
}

/// `PodQOSClass` from requests/limits: BestEffort when nothing is set, Guaranteed when
/// every container has equal cpu and memory requests and limits, else Burstable.
fn qos_class(spec: &Value) -> &'static str {
    let cs: Vec<&Value> = spec
        .get("containers")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let mut any = false;
    let mut guaranteed = !cs.is_empty();
    for c in &cs {
        let req = c.pointer("/resources/requests");
        let lim = c.pointer("/resources/limits");
        let has = |v: Option<&Value>| v.and_then(Value::as_object).is_some_and(|m| !m.is_empty());
        if has(req) || has(lim) {
            any = true;
        }
        let full = |v: Option<&Value>| {
            v.and_then(Value::as_object)
                .is_some_and(|m| m.contains_key("cpu") && m.contains_key("memory"))
        };
        let reqs = req.or(lim);
        if !(full(lim) && reqs == lim) {
            guaranteed = false;
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Defaulting and `PrepareForCreate` of each type: what a freshly created object
/// carries beyond what the client sent.
pub fn prepare_for_create(rt: &ResourceType, obj: &mut Value) {
    match (rt.group, rt.resource) {
        ("", "pods") => {
            default_pod_spec(obj_mut(obj, "spec"));
            let qos = qos_class(&obj["spec"]);
            // podStrategy.PrepareForCreate resets the status.
            obj.as_object_mut().expect("object").insert(
                "status".into(),
                json!({"phase": "Pending", "qosClass": qos}),
            );
        }
        ("", "namespaces") => {
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            // The NamespaceDefaultLabelName admission-time label (always set, GA 1.22).
            let labels = obj_mut(obj_mut_meta(obj), "labels");
            labels.insert("kubernetes.io/metadata.name".into(), json!(name));
            let spec = obj_mut(obj, "spec");
            spec.insert("finalizers".into(), json!(["kubernetes"]));
            obj.as_object_mut()
                .expect("object")
                .insert("status".into(), json!({"phase": "Active"}));
        }
        ("apps", "deployments") => {
            let spec = obj_mut(obj, "spec");
            default(spec, "replicas", json!(1));
            default(
                spec,
                "strategy",
                json!({"type": "RollingUpdate",
                       "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
            );
            default(spec, "revisionHistoryLimit", json!(10));
            default(spec, "progressDeadlineSeconds", json!(600));
            if let Some(Value::Object(t)) = spec.get_mut("template") {
                let ts = t.entry("spec").or_insert_with(|| json!({}));
                if let Some(ts) = ts.as_object_mut() {
                    default_pod_spec(ts);
                }
                let tm = t.entry("metadata").or_insert_with(|| json!({}));
                if let Some(tm) = tm.as_object_mut() {
                    default(tm, "creationTimestamp", Value::Null);
                }
            }
            obj.as_object_mut()
                .expect("object")
                .insert("status".into(), json!({}));
        }
        ("", "services") => {
            let spec = obj_mut(obj, "spec");
            default(spec, "type", json!("ClusterIP"));
            default(spec, "sessionAffinity", json!("None"));
            if let Some(Value::Array(ports)) = spec.get_mut("ports") {
                for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                    default(p, "protocol", json!("TCP"));
                    if let Some(port) = p.get("port").cloned() {
                        default(p, "targetPort", port);
                    }
                }
            }
            if spec.get("clusterIP").is_none() {
                let n: u32 = rand::random::<u32>() % 65000 + 10;
                let ip = format!("10.96.{}.{}", n / 254, n % 254 + 1);
                spec.insert("clusterIP".into(), json!(ip));
                spec.insert("clusterIPs".into(), json!([ip]));
            }
            default(spec, "ipFamilies", json!(["IPv4"]));
            default(spec, "ipFamilyPolicy", json!("SingleStack"));
            default(spec, "internalTrafficPolicy", json!("Cluster"));
            obj.as_object_mut()
                .expect("object")
                .insert("status".into(), json!({"loadBalancer": {}}));
        }
        ("", "secrets") => {
            default(
                obj.as_object_mut().expect("object"),
                "type",
                json!("Opaque"),
            );
        }
        _ => {}
    }
}

fn obj_mut_meta(v: &mut Value) -> &mut Value {
    let m = v.as_object_mut().expect("object");
    let e = m.entry("metadata").or_insert_with(|| json!({}));
    if !e.is_object() {
        *e = json!({});
    }
    e
}

/// Top-level fields of each built-in type's Go struct (custom resources: anything).
fn top_level_fields(rt: &ResourceType) -> Option<&'static [&'static str]> {
    Some(match (rt.group, rt.resource) {
        ("", "configmaps") => &["data", "binaryData", "immutable"],
        ("", "secrets") => &["data", "stringData", "type", "immutable"],
        ("", "endpoints") => &["subsets"],
        ("", "events") => &[
            "involvedObject",
            "reason",
            "message",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "type",
            "eventTime",
            "series",
            "action",
            "related",
            "reportingComponent",
            "reportingInstance",
        ],
        ("example.com", _) => return None,
        _ => &["spec", "status"],
    })
}

/// `strict decoding error` field paths: unknown top-level fields and unknown ObjectMeta
/// fields (nested schemas are not known to the simulator), in document order.
pub fn unknown_fields(rt: &ResourceType, obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let Some(m) = obj.as_object() else {
        return out;
    };
    let allowed = top_level_fields(rt);
    for (k, v) in m {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                if let Some(meta) = v.as_object() {
                    for mk in meta.keys() {
                        if !META_ORDER.contains(&mk.as_str()) {
                            out.push(format!("metadata.{mk}"));
                        }
                    }
                }
            }
            other => {
                if allowed.is_some_and(|a| !a.contains(&other)) {
                    out.push(other.to_string());
                }
            }
        }
    }
    out
}

/// Go's ObjectMeta field order (the JSON the apiserver writes follows the struct).
const META_ORDER: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Puts `kind`, `apiVersion`, `metadata` first and orders metadata like the Go struct,
/// so responses look like the apiserver's.
pub fn canonical_order(obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    let mut out = Map::new();
    for k in ["kind", "apiVersion", "metadata"] {
        if let Some(v) = m.shift_remove(k) {
            out.insert(k.to_string(), v);
        }
    }
    if let Some(Value::Object(meta)) = out.get_mut("metadata") {
        let mut ordered = Map::new();
        for k in META_ORDER {
            if let Some(v) = meta.shift_remove(*k) {
                ordered.insert(k.to_string(), v);
            }
        }
        ordered.append(meta);
        *meta = ordered;
    }
    // spec before status, other fields in their original order.
    let status = m.shift_remove("status");
    out.append(m);
    if let Some(s) = status {
        out.insert("status".into(), s);
    }
    *m = out;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::find;

    #[test]
    fn pod_defaults_and_status() {
        let rt = find("", "v1", "pods").unwrap();
        let mut p = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        prepare_for_create(rt, &mut p);
        assert_eq!(
            p["status"],
            json!({"phase": "Pending", "qosClass": "BestEffort"})
        );
        assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(p["spec"]["restartPolicy"], "Always");
    }

    #[test]
    fn generation_rules() {
        let d = find("apps", "v1", "deployments").unwrap();
        let a = json!({"metadata": {"labels": {"x": "1"}}, "spec": {"replicas": 1}});
        let mut b = a.clone();
        b["metadata"]["labels"]["x"] = json!("2");
        assert!(!generation_changed(d, &a, &b));
        b["spec"]["replicas"] = json!(2);
        assert!(generation_changed(d, &a, &b));
        let mut c = a.clone();
        c["metadata"]["annotations"] = json!({"k": "v"});
        assert!(generation_changed(d, &a, &c));
    }

    #[test]
    fn order() {
        let mut v = json!({"spec": {}, "status": {}, "metadata": {"uid": "u", "name": "n"}, "apiVersion": "v1", "kind": "Pod"});
        canonical_order(&mut v);
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["kind", "apiVersion", "metadata", "spec", "status"]);
        let mk: Vec<&String> = v["metadata"].as_object().unwrap().keys().collect();
        assert_eq!(mk, ["name", "uid"]);
    }
}

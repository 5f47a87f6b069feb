//! The field-selector labels kube-apiserver supports per built-in type beyond
//! `metadata.name` and `metadata.namespace` (`generic.ObjectMetaFieldsSet`), and the JSON
//! path each one's value is read from: its registry strategies' `ToSelectableFields`
//! (pkg/registry/core/pod/strategy.go, node, namespace, secret, service and event
//! strategies).
//!
//! Apiserver knowledge on the model's floor: the cache indexes these labels (and forwards
//! a selector on any other), the simulator serves them.

/// A field selector label and the JSON path (dot-separated) its value is read from.
#[derive(Debug, Clone, Copy)]
pub struct FieldLabel {
    pub label: &'static str,
    pub path: &'static str,
}

const fn f(label: &'static str, path: &'static str) -> FieldLabel {
    FieldLabel { label, path }
}

/// `namespaces`.
pub const NAMESPACES: &[FieldLabel] = &[f("status.phase", "status.phase")];

/// `nodes`.
pub const NODES: &[FieldLabel] = &[f("spec.unschedulable", "spec.unschedulable")];

/// `pods`.
pub const PODS: &[FieldLabel] = &[
    f("spec.nodeName", "spec.nodeName"),
    f("spec.restartPolicy", "spec.restartPolicy"),
    f("spec.schedulerName", "spec.schedulerName"),
    f("spec.serviceAccountName", "spec.serviceAccountName"),
    f("spec.hostNetwork", "spec.hostNetwork"),
    f("status.phase", "status.phase"),
    f("status.podIP", "status.podIP"),
    f("status.nominatedNodeName", "status.nominatedNodeName"),
];

/// `secrets`.
pub const SECRETS: &[FieldLabel] = &[f("type", "type")];

/// `services`.
pub const SERVICES: &[FieldLabel] = &[
    f("spec.clusterIP", "spec.clusterIP"),
    f("spec.type", "spec.type"),
];

/// `events`.
pub const EVENTS: &[FieldLabel] = &[
    f("involvedObject.kind", "involvedObject.kind"),
    f("involvedObject.namespace", "involvedObject.namespace"),
    f("involvedObject.name", "involvedObject.name"),
    f("involvedObject.uid", "involvedObject.uid"),
    f("involvedObject.apiVersion", "involvedObject.apiVersion"),
    f(
        "involvedObject.resourceVersion",
        "involvedObject.resourceVersion",
    ),
    f("involvedObject.fieldPath", "involvedObject.fieldPath"),
    f("reason", "reason"),
    f("reportingComponent", "reportingComponent"),
    f("source", "source.component"),
    f("type", "type"),
];

/// Every built-in type with labels of its own: (group, resource, labels).
const BUILTIN: &[(&str, &str, &[FieldLabel])] = &[
    ("", "namespaces", NAMESPACES),
    ("", "nodes", NODES),
    ("", "pods", PODS),
    ("", "secrets", SECRETS),
    ("", "services", SERVICES),
    ("", "events", EVENTS),
];

/// The labels of a built-in type beyond `metadata.*`; none for other types (a selector on
/// their other fields is the upstream's to answer).
pub fn of(group: &str, resource: &str) -> &'static [FieldLabel] {
    BUILTIN
        .iter()
        .find(|(g, r, _)| *g == group && *r == resource)
        .map_or(&[], |(_, _, labels)| labels)
}

//! The resource types the simulator serves, with the facts discovery, routing, field
//! selectors and Table output need about each.
//!
//! Field selector labels per type follow kube-apiserver's registry strategies
//! (pkg/registry/core/pod/strategy.go `ToSelectableFields`, node, namespace, secret,
//! service and event strategies). Every type also supports `metadata.name` and
//! `metadata.namespace` (`generic.ObjectMetaFieldsSet`).

use crate::model::field_labels;
pub use crate::model::field_labels::FieldLabel;

/// One served resource type (group, version, resource).
#[derive(Debug)]
pub struct ResourceType {
    pub group: &'static str,
    pub version: &'static str,
    /// Plural resource name, as in the URL.
    pub resource: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub list_kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub verbs: &'static [&'static str],
    pub subresources: &'static [&'static str],
    /// Field selector labels beyond `metadata.name` / `metadata.namespace`.
    pub fields: &'static [FieldLabel],
}

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
// The apiserver's namespace registry does not offer deletecollection.
const NS_VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

pub static RESOURCES: &[ResourceType] = &[
    ResourceType {
        group: "",
        version: "v1",
        resource: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        list_kind: "NamespaceList",
        namespaced: false,
        short_names: &["ns"],
        categories: &[],
        verbs: NS_VERBS,
        subresources: &["status", "finalize"],
        fields: field_labels::NAMESPACES,
    },
    ResourceType {
        group: "",
        version: "v1",
        resource: "nodes",
        singular: "node",
        kind: "Node",
        list_kind: "NodeList",
        namespaced: false,
        short_names: &["no"],
        categories: &[],
        verbs: VERBS,
        subresources: &["status", "proxy"],
        fields: field_labels::NODES,
    },
    ResourceType {
        group: "",
        version: "v1",
        resource: "pods",
        singular: "pod",
        kind: "Pod",
        list_kind: "PodList",
        namespaced: true,
        short_names: &["po"],
        categories: &["all"],
        verbs: VERBS,
        subresources: &[
            "status",
            "log",
            "exec",
            "attach",
            "portforward",
            "binding",
            "eviction",
        ],
        fields: field_labels::PODS,
    },
    ResourceType {
        group: "",
        version: "v1",
        resource: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        list_kind: "ConfigMapList",
        namespaced: true,
        short_names: &["cm"],
        categories: &[],
        verbs: VERBS,
        subresources: &[],
        fields: &[],
    },
    ResourceType {
        group: "",
        version: "v1",
        resource: "secrets",
        singular: "secret",
        kind: "Secret",
        list_kind: "SecretList",
        namespaced: true,
        short_names: &[],
        categories: &[],
        verbs: VERBS,
        subresources: &[],
        fields: field_labels::SECRETS,
    },
    ResourceType {
        group: "",
        version: "v1",
        resource: "services",
        singular: "service",
        kind: "Service",
        list_kind: "ServiceList",
        namespaced: true,
        short_names: &["svc"],
        categories: &["all"],
        verbs: VERBS,
        subresources: &["status", "proxy"],
        fields: field_labels::SERVICES,
    },
    ResourceType {
        group: "",
        version: "v1",
        resource: "endpoints",
        singular: "endpoints",
        kind: "Endpoints",
        list_kind: "EndpointsList",
        namespaced: true,
        short_names: &["ep"],
        categories: &[],
        verbs: VERBS,
        subresources: &[],
        fields: &[],
    },
    ResourceType {
        group: "",
        version: "v1",
        resource: "events",
        singular: "event",
        kind: "Event",
        list_kind: "EventList",
        namespaced: true,
        short_names: &["ev"],
        categories: &[],
        verbs: VERBS,
        subresources: &[],
        fields: field_labels::EVENTS,
    },
    ResourceType {
        group: "apps",
        version: "v1",
        resource: "deployments",
        singular: "deployment",
        kind: "Deployment",
        list_kind: "DeploymentList",
        namespaced: true,
        short_names: &["deploy"],
        categories: &["all"],
        verbs: VERBS,
        subresources: &["status", "scale"],
        fields: &[],
    },
    ResourceType {
        group: "apiextensions.k8s.io",
        version: "v1",
        resource: "customresourcedefinitions",
        singular: "customresourcedefinition",
        kind: "CustomResourceDefinition",
        list_kind: "CustomResourceDefinitionList",
        namespaced: false,
        short_names: &["crd", "crds"],
        categories: &["api-extensions"],
        verbs: VERBS,
        subresources: &["status"],
        fields: &[],
    },
    // No field selectors of its own: discovery.k8s.io registers no field label
    // conversion, so only metadata.name and metadata.namespace
    // (`DefaultMetaV1FieldSelectorConversion`).
    ResourceType {
        group: "discovery.k8s.io",
        version: "v1",
        resource: "endpointslices",
        singular: "endpointslice",
        kind: "EndpointSlice",
        list_kind: "EndpointSliceList",
        namespaced: true,
        short_names: &[],
        categories: &[],
        verbs: VERBS,
        subresources: &[],
        fields: &[],
    },
    ResourceType {
        group: "example.com",
        version: "v1",
        resource: "widgets",
        singular: "widget",
        kind: "Widget",
        list_kind: "WidgetList",
        namespaced: true,
        short_names: &["wg"],
        categories: &[],
        verbs: VERBS,
        subresources: &[],
        fields: &[],
    },
];

impl ResourceType {
    /// The custom resource (served like a CRD's resource: unstructured, no protobuf, no
    /// strategic merge patch); every other type is built in.
    pub fn is_custom(&self) -> bool {
        self.group == CUSTOM_GROUP
    }

    /// What Go's `%T` prints for the object (or list) the apiserver's registry returns:
    /// internal types (`*core.Pod`, `*apps.DeploymentList`,
    /// `*apiextensions.CustomResourceDefinition`), unstructured for custom resources. The
    /// apiserver names them in some 406 texts.
    pub fn go_type(&self, list: bool) -> String {
        if self.is_custom() {
            return if list {
                "*unstructured.UnstructuredList".into()
            } else {
                "*unstructured.Unstructured".into()
            };
        }
        let package = match self.group {
            "" => "core",
            g => g.split('.').next().unwrap_or(g),
        };
        let kind = if list { self.list_kind } else { self.kind };
        format!("*{package}.{kind}")
    }

    /// `v1` for the core group, `apps/v1` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn group_resource(&self) -> crate::status::GroupResource {
        crate::status::GroupResource::new(self.group, self.resource)
    }

    /// The JSON path a field selector label reads, or None if the apiserver would reject
    /// the label for this type ("field label not supported").
    pub fn field_path(&self, label: &str) -> Option<&'static str> {
        match label {
            "metadata.name" => Some("metadata.name"),
            "metadata.namespace" => Some("metadata.namespace"),
            _ => self
                .fields
                .iter()
                .find(|f| f.label == label)
                .map(|f| f.path),
        }
    }
}

/// The group of the simulator's custom resource (widgets).
pub const CUSTOM_GROUP: &str = "example.com";

/// Looks up a type by group, version and plural resource name.
pub fn find(group: &str, version: &str, resource: &str) -> Option<&'static ResourceType> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.resource == resource)
}

/// The group/versions the simulator serves, in discovery order (core first).
pub fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups() {
        assert_eq!(
            find("apps", "v1", "deployments").unwrap().kind,
            "Deployment"
        );
        assert!(find("", "v1", "deployments").is_none());
        let pods = find("", "v1", "pods").unwrap();
        assert_eq!(pods.field_path("spec.nodeName"), Some("spec.nodeName"));
        assert_eq!(pods.field_path("spec.bogus"), None);
        assert_eq!(group_versions()[0], ("", "v1"));
        assert_eq!(pods.go_type(true), "*core.PodList");
        assert_eq!(
            find("apps", "v1", "deployments").unwrap().go_type(false),
            "*apps.Deployment"
        );
        let crds = find("apiextensions.k8s.io", "v1", "customresourcedefinitions").unwrap();
        assert_eq!(
            crds.go_type(false),
            "*apiextensions.CustomResourceDefinition"
        );
        let widgets = find("example.com", "v1", "widgets").unwrap();
        assert_eq!(widgets.go_type(true), "*unstructured.UnstructuredList");
    }
}

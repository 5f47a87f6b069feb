//! What the cache needs to know about one resource type (from upstream discovery).

/// One cacheable resource type: where it lives and how its objects are shaped.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    /// Plural resource name, as in the URL.
    pub resource: String,
    pub kind: String,
    pub namespaced: bool,
    /// Field-selector labels beyond `metadata.*`, with the JSON path each one reads.
    pub field_labels: Vec<(&'static str, &'static str)>,
}

impl ResourceInfo {
    /// `v1` for the core group, `apps/v1` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The all-namespaces collection path: `/api/v1/pods`, `/apis/apps/v1/deployments`.
    pub fn collection_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}/{}", self.version, self.resource)
        } else {
            format!("/apis/{}/{}/{}", self.group, self.version, self.resource)
        }
    }

    /// `{"kind":"Pod","apiVersion":"v1",`: prepended to objects stored without TypeMeta.
    pub fn type_prefix(&self) -> Vec<u8> {
        let mut out = b"{\"kind\":".to_vec();
        serde_json::to_writer(&mut out, &self.kind).expect("string serialises");
        out.extend_from_slice(b",\"apiVersion\":");
        serde_json::to_writer(&mut out, &self.api_version()).expect("string serialises");
        out.push(b',');
        out
    }

    /// Built-in types are served by kube-apiserver itself (typed Go objects: list items
    /// without TypeMeta, protobuf); custom resources are unstructured (items keep their
    /// TypeMeta, JSON only). A CRD may live in a `*.k8s.io` group
    /// (`gateway.networking.k8s.io`, `snapshot.storage.k8s.io`), so the test is the exact
    /// set of groups kube-apiserver 1.36 and its embedded apiextensions and aggregator
    /// servers serve.
    pub fn is_builtin(&self) -> bool {
        is_builtin_group(&self.group)
    }

    /// What the Accept negotiation may offer for this type.
    pub fn endpoint(&self) -> crate::negotiate::Endpoint {
        if self.is_builtin() {
            crate::negotiate::Endpoint::BUILTIN
        } else {
            crate::negotiate::Endpoint::CUSTOM
        }
    }
}

/// Whether kube-apiserver serves `group` itself (see [`ResourceInfo::is_builtin`]).
pub fn is_builtin_group(group: &str) -> bool {
    BUILTIN_GROUPS.contains(&group)
}

/// The API groups kube-apiserver 1.36 serves itself (`kubectl api-versions` on a cluster
/// without extensions), with apiextensions-apiserver's and kube-aggregator's.
const BUILTIN_GROUPS: &[&str] = &[
    "",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn info(group: &str, resource: &str, kind: &str) -> ResourceInfo {
        ResourceInfo {
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
            kind: kind.into(),
            namespaced: true,
            field_labels: vec![],
        }
    }

    #[test]
    fn paths_and_prefixes() {
        let pods = info("", "pods", "Pod");
        assert_eq!(pods.collection_path(), "/api/v1/pods");
        assert_eq!(pods.type_prefix(), br#"{"kind":"Pod","apiVersion":"v1","#);
        assert!(pods.is_builtin());
        let deps = info("apps", "deployments", "Deployment");
        assert_eq!(deps.collection_path(), "/apis/apps/v1/deployments");
        assert!(deps.is_builtin());
        assert!(info("networking.k8s.io", "ingresses", "Ingress").is_builtin());
        assert!(!info("example.com", "widgets", "Widget").is_builtin());
        // CRDs in k8s.io groups are custom resources all the same.
        assert!(!info("gateway.networking.k8s.io", "gateways", "Gateway").is_builtin());
        assert!(!info("metrics.k8s.io", "pods", "PodMetrics").is_builtin());
    }
}

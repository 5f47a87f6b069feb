//! The writer's objects: pods named `load-<run>-<i>` in one namespace, each on node
//! `<node prefix>-<i mod nodes>` and in shard `i mod shards`, so that label selectors
//! (`load-shard=3`) and the kubelet's field selector (`spec.nodeName=load-node-7`) select
//! known subsets; the checker evaluates the same selectors against this description.
//! The herd scenarios (`cold-herd`, `restart`) may make the pool configmaps instead, so
//! that the resource their clients watch is the one whose streams are checked.

use serde_json::{json, Value};

use crate::selector::field::FieldSelector;
use crate::selector::label::LabelSelector;

use super::checker::WriteRecord;
use super::scan::STAMP_ANNOTATION;

pub const RUN_LABEL: &str = "watchgate.io/load-run";
pub const SHARD_LABEL: &str = "load-shard";

/// What the pool's objects are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolResource {
    #[default]
    Pods,
    Configmaps,
}

impl PoolResource {
    /// The resource's name in paths and in the simulator's stats.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pods => "pods",
            Self::Configmaps => "configmaps",
        }
    }

    /// The other one (the quiet-large scenario writes to it to move the global RV).
    pub fn other(self) -> Self {
        match self {
            Self::Pods => Self::Configmaps,
            Self::Configmaps => Self::Pods,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Pool {
    pub run: String,
    pub resource: PoolResource,
    pub namespace: String,
    pub size: usize,
    pub nodes: usize,
    pub node_prefix: String,
    pub shards: usize,
    /// Approximate JSON size of each object (padding in an annotation).
    pub object_size: usize,
}

impl Pool {
    /// The pool's collection, e.g. `/api/v1/namespaces/watchgate-load/pods`.
    pub fn collection(&self) -> String {
        format!(
            "/api/v1/namespaces/{}/{}",
            self.namespace,
            self.resource.as_str()
        )
    }

    /// Object `i`'s path.
    pub fn object_path(&self, i: usize) -> String {
        format!("{}/{}", self.collection(), self.name(i))
    }

    pub fn name(&self, i: usize) -> String {
        format!("load-{}-{i}", self.run)
    }
    pub fn node(&self, i: usize) -> String {
        format!("{}-{}", self.node_prefix, i % self.nodes.max(1))
    }
    pub fn shard(&self, i: usize) -> String {
        (i % self.shards.max(1)).to_string()
    }

    /// The value of a label of object `i`.
    pub fn label(&self, i: usize, key: &str) -> Option<String> {
        match key {
            RUN_LABEL => Some(self.run.clone()),
            SHARD_LABEL => Some(self.shard(i)),
            _ => None,
        }
    }

    /// The value of a field (as field selectors see it) of object `i`.
    pub fn field(&self, i: usize, path: &str) -> String {
        match path {
            "metadata.name" => self.name(i),
            "metadata.namespace" => self.namespace.clone(),
            "spec.nodeName" => self.node(i),
            "spec.restartPolicy" => "Always".into(),
            "spec.schedulerName" => "default-scheduler".into(),
            "spec.serviceAccountName" => "default".into(),
            "spec.hostNetwork" => "false".into(),
            "status.phase" => "Pending".into(),
            _ => String::new(),
        }
    }

    /// Whether a watch with these selectors must see the write.
    pub fn matches(
        &self,
        rec: &WriteRecord,
        labels: Option<&LabelSelector>,
        fields: Option<&FieldSelector>,
    ) -> bool {
        let i = rec.object;
        let l = labels.is_none_or(|s| {
            let values: Vec<(String, String)> = [RUN_LABEL, SHARD_LABEL]
                .iter()
                .filter_map(|k| Some((k.to_string(), self.label(i, k)?)))
                .collect();
            s.matches_fn(|k| {
                values
                    .iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.as_str())
            })
        });
        l && fields.is_none_or(|s| s.matches_with(|p| self.field(i, p)))
    }

    /// The object to create.
    pub fn object(&self, i: usize, stamp: &str) -> Value {
        if self.resource == PoolResource::Configmaps {
            return self.configmap(i, stamp);
        }
        let mut pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name(i),
                "namespace": self.namespace,
                "labels": {RUN_LABEL: self.run, SHARD_LABEL: self.shard(i)},
                "annotations": {STAMP_ANNOTATION: stamp},
            },
            "spec": {
                "nodeName": self.node(i),
                "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
            },
        });
        let size = serde_json::to_vec(&pod).map(|v| v.len()).unwrap_or(0);
        if self.object_size > size + 64 {
            pod["metadata"]["annotations"]["watchgate.io/load-padding"] =
                json!("x".repeat(self.object_size - size - 64));
        }
        pod
    }

    /// A configmap of the pool: no node, the padding in its data.
    fn configmap(&self, i: usize, stamp: &str) -> Value {
        let mut cm = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name(i),
                "namespace": self.namespace,
                "labels": {RUN_LABEL: self.run, SHARD_LABEL: self.shard(i)},
                "annotations": {STAMP_ANNOTATION: stamp},
            },
            "data": {"index": i.to_string()},
        });
        let size = serde_json::to_vec(&cm).map(|v| v.len()).unwrap_or(0);
        if self.object_size > size + 32 {
            cm["data"]["padding"] = json!("x".repeat(self.object_size - size - 32));
        }
        cm
    }

    /// The merge patch of one write: a new stamp.
    pub fn stamp_patch(stamp: &str) -> Value {
        json!({"metadata": {"annotations": {STAMP_ANNOTATION: stamp}}})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::checker::EventType;

    fn pool() -> Pool {
        Pool {
            run: "r1".into(),
            resource: PoolResource::Pods,
            namespace: "ns".into(),
            size: 10,
            nodes: 4,
            node_prefix: "load-node".into(),
            shards: 3,
            object_size: 0,
        }
    }

    #[test]
    fn selectors_select_the_described_objects() {
        let p = pool();
        let rec = |object| WriteRecord {
            rv: 1,
            object,
            event: EventType::Modified,
        };
        let shard1 = LabelSelector::parse("load-shard=1").unwrap();
        let node2 = FieldSelector::parse("spec.nodeName=load-node-2").unwrap();
        let picked: Vec<usize> = (0..10)
            .filter(|&i| p.matches(&rec(i), Some(&shard1), None))
            .collect();
        assert_eq!(picked, vec![1, 4, 7]);
        let picked: Vec<usize> = (0..10)
            .filter(|&i| p.matches(&rec(i), None, Some(&node2)))
            .collect();
        assert_eq!(picked, vec![2, 6]);
        let run = LabelSelector::parse("watchgate.io/load-run=r1,load-shard!=0").unwrap();
        assert_eq!(
            (0..10)
                .filter(|&i| p.matches(&rec(i), Some(&run), None))
                .count(),
            6
        );
    }

    #[test]
    fn objects_carry_what_the_selectors_read() {
        let p = Pool {
            object_size: 2048,
            ..pool()
        };
        let o = p.object(6, "r1/5");
        assert_eq!(o["spec"]["nodeName"], "load-node-2");
        assert_eq!(o["metadata"]["labels"][SHARD_LABEL], "0");
        let len = serde_json::to_vec(&o).unwrap().len();
        assert!((1900..=2100).contains(&len), "{len}");
        let p = Pool {
            resource: PoolResource::Configmaps,
            ..p
        };
        let o = p.object(6, "r1/5");
        assert_eq!(o["kind"], "ConfigMap");
        assert_eq!(o["metadata"]["labels"][SHARD_LABEL], "0");
        assert_eq!(
            p.object_path(6),
            "/api/v1/namespaces/ns/configmaps/load-r1-6"
        );
        let len = serde_json::to_vec(&o).unwrap().len();
        assert!((1900..=2100).contains(&len), "{len}");
    }
}

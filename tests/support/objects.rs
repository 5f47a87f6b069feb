//! One builder per object kind the tests write: [`pod`] and [`configmap`]. Each starts from
//! the smallest valid object and adds only what a test asks for, so a test's object says
//! what matters to it; [`Pod::merge`] and [`ConfigMap::merge`] add the fields no other test
//! needs (a Table's container statuses, the protobuf test's every field kind).
//!
//! ```ignore
//! pod("ns-1", "a").label("app", "web").node("node-1").phase("Running").build()
//! configmap("default", "cm-1").data(json!({"i": "1"})).build()
//! ```
//!
//! The keys come out in a fixed order (`kind`, `apiVersion`, `metadata`, `spec`, `status`;
//! in metadata `name`, `namespace`, `labels`, `uid`, `annotations`), merged fields after
//! them, so that an object's bytes are the same wherever it is built.

use serde_json::{json, Map, Value};

/// A Pod builder; see [`pod`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .build()"]
pub struct Pod {
    ns: String,
    name: String,
    labels: Option<Map<String, Value>>,
    uid: Option<String>,
    pad: usize,
    node: Option<String>,
    image: String,
    phase: Option<String>,
    extra: Vec<Value>,
}

/// A pod `name` in `ns` (an empty `ns` leaves `metadata.namespace` out, as a client posting
/// to a namespaced URL may) with one container `c` running `busybox`; no labels, node or
/// status unless asked for.
pub fn pod(ns: &str, name: &str) -> Pod {
    Pod {
        ns: ns.to_string(),
        name: name.to_string(),
        labels: None,
        uid: None,
        pad: 0,
        node: None,
        image: "busybox".to_string(),
        phase: None,
        extra: Vec::new(),
    }
}

impl Pod {
    /// `metadata.labels`, replacing any set before (`json!({})` writes an empty map).
    pub fn labels(mut self, labels: Value) -> Self {
        match labels {
            Value::Object(m) => self.labels = Some(m),
            other => panic!("labels must be a JSON object, got {other}"),
        }
        self
    }

    /// One more label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels
            .get_or_insert_with(Map::new)
            .insert(key.to_string(), value.into());
        self
    }

    /// `metadata.uid` (the simulator's store keeps what it is given).
    pub fn uid(mut self, uid: &str) -> Self {
        self.uid = Some(uid.to_string());
        self
    }

    /// `pad` bytes of annotation (`metadata.annotations.pad`), to make the pod as large as
    /// a test needs; 0 adds none.
    pub fn pad(mut self, pad: usize) -> Self {
        self.pad = pad;
        self
    }

    /// `spec.nodeName`: a bound pod, which the simulated scheduler leaves alone.
    pub fn node(mut self, node: &str) -> Self {
        self.node = Some(node.to_string());
        self
    }

    /// [`Pod::node`] and [`Pod::phase`] `Running`: a pod the simulated scheduler and
    /// kubelet are done with.
    pub fn running_on(self, node: &str) -> Self {
        self.node(node).phase("Running")
    }

    /// The container's image (`busybox` unless set).
    pub fn image(mut self, image: &str) -> Self {
        self.image = image.to_string();
        self
    }

    /// `status.phase`.
    pub fn phase(mut self, phase: &str) -> Self {
        self.phase = Some(phase.to_string());
        self
    }

    /// Fields merged into the built pod, objects key by key and anything else replaced
    /// (JSON merge patch without deletion).
    pub fn merge(mut self, fields: Value) -> Self {
        self.extra.push(fields);
        self
    }

    pub fn build(self) -> Value {
        let mut metadata = Map::new();
        metadata.insert("name".into(), self.name.into());
        if !self.ns.is_empty() {
            metadata.insert("namespace".into(), self.ns.into());
        }
        if let Some(labels) = self.labels {
            metadata.insert("labels".into(), labels.into());
        }
        if let Some(uid) = self.uid {
            metadata.insert("uid".into(), uid.into());
        }
        if self.pad > 0 {
            metadata.insert("annotations".into(), json!({"pad": "x".repeat(self.pad)}));
        }
        let mut spec = Map::new();
        if let Some(node) = self.node {
            spec.insert("nodeName".into(), node.into());
        }
        spec.insert(
            "containers".into(),
            json!([{"name": "c", "image": self.image}]),
        );
        let mut p = json!({"kind": "Pod", "apiVersion": "v1", "metadata": metadata, "spec": spec});
        if let Some(phase) = self.phase {
            p["status"] = json!({ "phase": phase });
        }
        for fields in self.extra {
            merge(&mut p, fields);
        }
        p
    }
}

impl From<Pod> for Value {
    fn from(p: Pod) -> Value {
        p.build()
    }
}

/// A ConfigMap builder; see [`configmap`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .build()"]
pub struct ConfigMap {
    ns: String,
    name: String,
    labels: Option<Map<String, Value>>,
    data: Option<Value>,
    extra: Vec<Value>,
}

/// A configmap `name` in `ns` (an empty `ns` leaves `metadata.namespace` out), without
/// data unless asked for.
pub fn configmap(ns: &str, name: &str) -> ConfigMap {
    ConfigMap {
        ns: ns.to_string(),
        name: name.to_string(),
        labels: None,
        data: None,
        extra: Vec::new(),
    }
}

impl ConfigMap {
    /// One more label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels
            .get_or_insert_with(Map::new)
            .insert(key.to_string(), value.into());
        self
    }

    /// `data`, replacing any set before.
    pub fn data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// Fields merged into the built configmap, as [`Pod::merge`].
    pub fn merge(mut self, fields: Value) -> Self {
        self.extra.push(fields);
        self
    }

    pub fn build(self) -> Value {
        let mut metadata = Map::new();
        metadata.insert("name".into(), self.name.into());
        if !self.ns.is_empty() {
            metadata.insert("namespace".into(), self.ns.into());
        }
        if let Some(labels) = self.labels {
            metadata.insert("labels".into(), labels.into());
        }
        let mut cm = json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": metadata});
        if let Some(data) = self.data {
            cm["data"] = data;
        }
        for fields in self.extra {
            merge(&mut cm, fields);
        }
        cm
    }
}

impl From<ConfigMap> for Value {
    fn from(c: ConfigMap) -> Value {
        c.build()
    }
}

/// Merges `from` into `into`: objects key by key, anything else replaced.
fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

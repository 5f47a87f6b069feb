//! The object of a BOOKMARK watch event, as kube-apiserver writes it. Shared by the
//! gateway's watches (`watch::event::Encoder`) and the simulator's, so both send the same
//! bytes.
//!
//! The watch cache makes a bookmark from the storage's `NewFunc()` (cacher.go
//! `newBookmarkEvent`... `c.newFunc()`), sets only `metadata.resourceVersion` (and the
//! `k8s.io/initial-events-end` annotation when it closes a watch-list's initial events),
//! and the watch encoder writes it like any object:
//! - a built-in type is a Go struct, so its JSON is the type's *zero object*: every
//!   non-pointer struct field written (`"spec":{"containers":null},"status":{}` for a
//!   Pod), `metadata` with only what was set (a zero `creationTimestamp` is omitted since
//!   1.33). We get those bytes from the protobuf schema: decoding an empty message is
//!   exactly Go's `json.Marshal` of the zero struct (`proto::decode`);
//! - a custom resource is an `unstructured.Unstructured` whose `NewFunc` set the kind and
//!   apiVersion; its JSON is a Go map's, keys sorted at every level.

use serde_json::{Map, Value};

use crate::proto;

/// The annotation on the bookmark that ends the initial events of a watch-list.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// A type's bookmark object, made once per type; [`BookmarkObject::at`] fills in the RV.
#[derive(Debug, Clone)]
pub struct BookmarkObject {
    /// The zero object with `metadata: {}` (built-in types) or `None` (custom resources,
    /// whose bookmarks are built with sorted keys).
    zero: Option<Value>,
    kind: String,
    api_version: String,
}

impl BookmarkObject {
    pub fn new(api_version: &str, kind: &str) -> Self {
        let zero = proto::type_of(api_version, kind)
            .ok()
            .and_then(|ty| proto::decode(ty, &[], Some((api_version, kind))).ok())
            .and_then(|json| serde_json::from_slice::<Value>(&json).ok())
            .filter(|v| v.get("metadata").is_some_and(Value::is_object));
        Self {
            zero,
            kind: kind.to_string(),
            api_version: api_version.to_string(),
        }
    }

    /// The bookmark object at `rv`.
    pub fn at(&self, rv: u64, initial_events_end: bool) -> Value {
        let rv = Value::String(rv.to_string());
        let end = || serde_json::json!({ INITIAL_EVENTS_END: "true" });
        match &self.zero {
            Some(zero) => {
                // ObjectMeta's field order: resourceVersion before annotations.
                let mut meta = Map::new();
                meta.insert("resourceVersion".into(), rv);
                if initial_events_end {
                    meta.insert("annotations".into(), end());
                }
                let mut obj = zero.clone();
                obj["metadata"] = Value::Object(meta);
                obj
            }
            None => {
                // A Go map: sorted keys (annotations < resourceVersion).
                let mut meta = Map::new();
                if initial_events_end {
                    meta.insert("annotations".into(), end());
                }
                meta.insert("resourceVersion".into(), rv);
                serde_json::json!({
                    "apiVersion": self.api_version,
                    "kind": self.kind,
                    "metadata": meta,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(v: &Value) -> String {
        serde_json::to_string(v).unwrap()
    }

    #[test]
    fn built_in_types_get_their_zero_object() {
        let pod = BookmarkObject::new("v1", "Pod");
        assert_eq!(
            json(&pod.at(42, false)),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"42"},"spec":{"containers":null},"status":{}}"#
        );
        assert_eq!(
            json(&pod.at(42, true)),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"42","annotations":{"k8s.io/initial-events-end":"true"}},"spec":{"containers":null},"status":{}}"#
        );
        assert_eq!(
            json(&BookmarkObject::new("v1", "ConfigMap").at(7, false)),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"7"}}"#
        );
    }

    #[test]
    fn custom_resources_get_a_go_map_with_sorted_keys() {
        let w = BookmarkObject::new("example.com/v1", "Widget");
        assert_eq!(
            json(&w.at(5, true)),
            r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"annotations":{"k8s.io/initial-events-end":"true"},"resourceVersion":"5"}}"#
        );
    }
}

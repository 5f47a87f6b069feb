//! `meta.k8s.io` PartialObjectMetadata and PartialObjectMetadataList from objects' JSON,
//! as kube-apiserver builds them (k8s.io/apiserver `pkg/endpoints/handlers/response.go`:
//! `asPartialObjectMetadata`, `asPartialObjectMetadataList`; apimachinery
//! `meta.AsPartialObjectMetadata`).
//!
//! Both sides use this: the simulator answers `as=PartialObjectMetadata[List]` with it and
//! the gateway renders the same bytes from its cached JSON.
//!
//! The apiserver copies `ObjectMeta` into a Go struct (typed objects: the struct itself;
//! custom resources: rebuilt from the unstructured getters) and encodes that struct, so
//! the `metadata` keys come out in `ObjectMeta`'s field order whatever the stored order:
//! name, generateName, namespace, selfLink, uid, resourceVersion, generation,
//! creationTimestamp, deletionTimestamp, deletionGracePeriodSeconds, labels, annotations,
//! ownerReferences, finalizers, managedFields. Every field is `omitempty` (a zero
//! `creationTimestamp` is omitted since 1.33, `omitzero`); labels and annotations are Go
//! maps, written in sorted key order; times are RFC 3339 UTC seconds; owner references and
//! managed fields entries are structs in their own field order.

use serde_json::{json, Map, Value};

use crate::negotiate::MetaVersion;
use crate::status::Status;
use crate::timestamp::{format_time, parse_time};

/// `metav1.ObjectMeta` of an object's `metadata`, in the Go struct's field order.
pub fn object_meta(meta: &Value) -> Value {
    let mut out = Map::new();
    for key in [
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
    ] {
        if let Some(s) = meta
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            out.insert(key.into(), json!(s));
        }
    }
    if let Some(g) = meta
        .get("generation")
        .and_then(Value::as_i64)
        .filter(|g| *g != 0)
    {
        out.insert("generation".into(), json!(g));
    }
    for key in ["creationTimestamp", "deletionTimestamp"] {
        if let Some(t) = meta.get(key).and_then(Value::as_str).and_then(parse_time) {
            out.insert(key.into(), json!(format_time(t)));
        }
    }
    // A pointer: 0 is kept.
    if let Some(s) = meta
        .get("deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
    {
        out.insert("deletionGracePeriodSeconds".into(), json!(s));
    }
    for key in ["labels", "annotations"] {
        if let Some(m) = meta
            .get(key)
            .and_then(Value::as_object)
            .filter(|m| !m.is_empty())
        {
            out.insert(key.into(), sorted_string_map(m));
        }
    }
    if let Some(refs) = non_empty_array(meta, "ownerReferences") {
        let refs: Vec<Value> = refs.iter().map(owner_reference).collect();
        out.insert("ownerReferences".into(), Value::Array(refs));
    }
    if let Some(f) = non_empty_array(meta, "finalizers") {
        out.insert("finalizers".into(), Value::Array(f.to_vec()));
    }
    if let Some(mf) = non_empty_array(meta, "managedFields") {
        let mf: Vec<Value> = mf.iter().map(managed_fields_entry).collect();
        out.insert("managedFields".into(), Value::Array(mf));
    }
    Value::Object(out)
}

fn non_empty_array<'a>(v: &'a Value, key: &str) -> Option<&'a [Value]> {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .filter(|a| !a.is_empty())
}

fn sorted_string_map(m: &Map<String, Value>) -> Value {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    Value::Object(
        keys.into_iter()
            .map(|k| (k.clone(), m[k].clone()))
            .collect(),
    )
}

/// `metav1.OwnerReference`: apiVersion, kind, name, uid, controller, blockOwnerDeletion.
fn owner_reference(r: &Value) -> Value {
    let mut out = Map::new();
    for key in ["apiVersion", "kind", "name", "uid"] {
        // Not omitempty: the struct always writes them.
        out.insert(
            key.into(),
            json!(r.get(key).and_then(Value::as_str).unwrap_or("")),
        );
    }
    for key in ["controller", "blockOwnerDeletion"] {
        if let Some(b) = r.get(key).and_then(Value::as_bool) {
            out.insert(key.into(), json!(b));
        }
    }
    Value::Object(out)
}

/// `metav1.ManagedFieldsEntry`: manager, operation, apiVersion, time, fieldsType,
/// fieldsV1 (raw JSON, kept as stored), subresource; all omitempty.
fn managed_fields_entry(e: &Value) -> Value {
    let mut out = Map::new();
    for key in ["manager", "operation", "apiVersion"] {
        if let Some(s) = e.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()) {
            out.insert(key.into(), json!(s));
        }
    }
    if let Some(t) = e.get("time").and_then(Value::as_str).and_then(parse_time) {
        out.insert("time".into(), json!(format_time(t)));
    }
    if let Some(s) = e
        .get("fieldsType")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        out.insert("fieldsType".into(), json!(s));
    }
    if let Some(f) = e.get("fieldsV1").filter(|f| !f.is_null()) {
        out.insert("fieldsV1".into(), f.clone());
    }
    if let Some(s) = e
        .get("subresource")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        out.insert("subresource".into(), json!(s));
    }
    Value::Object(out)
}

/// One object as a `PartialObjectMetadata` of `meta.k8s.io/<version>`.
pub fn object(obj: &Value, version: MetaVersion) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": version.api_version(),
        "metadata": object_meta(obj.get("metadata").unwrap_or(&Value::Null)),
    })
}

/// A list as a `PartialObjectMetadataList`: `list_meta` is the list's `metadata`
/// (resourceVersion, continue, remainingItemCount are kept). An empty list has
/// `"items": null`: the handler appends to a nil Go slice and the field is not omitempty.
pub fn list<'a>(
    list_meta: &Value,
    items: impl IntoIterator<Item = &'a Value>,
    version: MetaVersion,
) -> Value {
    let items: Vec<Value> = items.into_iter().map(|o| object(o, version)).collect();
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": version.api_version(),
        "metadata": list_meta_of(list_meta),
        "items": if items.is_empty() { Value::Null } else { Value::Array(items) },
    })
}

/// `metav1.ListMeta` in field order (selfLink, resourceVersion, continue,
/// remainingItemCount), empty values omitted.
pub fn list_meta_of(meta: &Value) -> Value {
    let mut out = Map::new();
    for key in ["selfLink", "resourceVersion", "continue"] {
        if let Some(s) = meta
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            out.insert(key.into(), json!(s));
        }
    }
    if let Some(n) = meta.get("remainingItemCount").and_then(Value::as_i64) {
        out.insert("remainingItemCount".into(), json!(n));
    }
    Value::Object(out)
}

/// The 406 for `as=PartialObjectMetadata` on a list. `go_type` is what Go's `%T` prints for
/// the list the registry returned (an internal type: `*core.PodList`,
/// `*apps.DeploymentList`, `*unstructured.UnstructuredList`).
pub fn list_refused(go_type: &str) -> Status {
    Status::new(
        406,
        "NotAcceptable",
        format!(
            "you requested PartialObjectMetadata, but the requested object is a list ({go_type})"
        ),
    )
}

/// The 406 for `as=PartialObjectMetadataList` on one object (`*core.Pod`, …).
pub fn object_refused(go_type: &str) -> Status {
    Status::new(
        406,
        "NotAcceptable",
        format!(
            "you requested PartialObjectMetadataList, but the requested object is not a list ({go_type})"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_meta_is_in_go_field_order_with_sorted_maps() {
        let meta = json!({
            "labels": {"b": "2", "a": "1"},
            "resourceVersion": "7",
            "managedFields": [{"time": "2024-05-01T12:00:00+02:00", "manager": "m",
                               "fieldsV1": {"f:spec": {}}, "operation": "Update",
                               "fieldsType": "FieldsV1", "apiVersion": "v1"}],
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "namespace": "ns",
            "name": "p",
            "uid": "u",
            "ownerReferences": [{"uid": "o", "name": "rs", "kind": "ReplicaSet",
                                 "apiVersion": "apps/v1", "controller": true}],
            "generation": 0,
            "annotations": {},
            "deletionGracePeriodSeconds": 0,
            "finalizers": ["f"]
        });
        let got = serde_json::to_string(&object_meta(&meta)).unwrap();
        assert_eq!(
            got,
            r#"{"name":"p","namespace":"ns","uid":"u","resourceVersion":"7","creationTimestamp":"2024-05-01T10:00:00Z","deletionGracePeriodSeconds":0,"labels":{"a":"1","b":"2"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"o","controller":true}],"finalizers":["f"],"managedFields":[{"manager":"m","operation":"Update","apiVersion":"v1","time":"2024-05-01T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}}}]}"#
        );
    }

    #[test]
    fn bookmark_metadata_has_no_creation_timestamp() {
        let bm = json!({"kind": "Pod", "apiVersion": "v1",
                        "metadata": {"resourceVersion": "9",
                                     "annotations": {"k8s.io/initial-events-end": "true"}}});
        assert_eq!(
            serde_json::to_string(&object(&bm, MetaVersion::V1)).unwrap(),
            r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}"#
        );
    }

    #[test]
    fn lists_keep_list_meta_and_null_items_when_empty() {
        let l = list(
            &json!({"resourceVersion": "5", "continue": "", "remainingItemCount": 2}),
            [],
            MetaVersion::V1beta1,
        );
        assert_eq!(
            serde_json::to_string(&l).unwrap(),
            r#"{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1beta1","metadata":{"resourceVersion":"5","remainingItemCount":2},"items":null}"#
        );
    }
}

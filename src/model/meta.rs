//! `PartialObjectMetadata` in JSON: an object's `metadata` under the meta.k8s.io TypeMeta.
//!
//! k8s.io/apiserver `pkg/endpoints/handlers/response.go` (`asPartialObjectMetadata`,
//! `asPartialObjectMetadataList`) builds it with `meta.AsPartialObjectMetadata`:
//! - for a typed (built-in) object, `meta.Accessor` returns its embedded `*ObjectMeta`, so
//!   the metadata is the same Go struct the object holds, and its JSON is byte for byte
//!   the `metadata` value of the object's own JSON: the cache answers with a slice of the
//!   cached bytes;
//! - for a custom resource (unstructured), the accessor is the object itself and
//!   `AsPartialObjectMetadata` copies each field through its getter into a new
//!   `ObjectMeta`, so the JSON follows `ObjectMeta`'s Go field order (the stored JSON
//!   has map order: keys sorted), drops empty `omitempty` fields and unknown keys (a zero
//!   `creationTimestamp` too: `omitzero` since 1.33, kubernetes#130989).
//!   [`object_meta_go_order`] reorders the cached bytes that way, copying every value's
//!   bytes as the upstream wrote them (Go's escaping of `<`, `>`, `&` included).

use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

/// `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":`.
pub fn partial_head(version: crate::negotiate::MetaVersion) -> &'static [u8] {
    match version {
        crate::negotiate::MetaVersion::V1 => {
            br#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":"#
        }
        crate::negotiate::MetaVersion::V1beta1 => {
            br#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1beta1","metadata":"#
        }
    }
}

/// Where the top-level `metadata` value lies in an object's JSON.
pub fn metadata_span(raw: &[u8]) -> Option<Range<usize>> {
    #[derive(Deserialize)]
    struct Top<'a> {
        #[serde(borrow)]
        metadata: Option<&'a RawValue>,
    }
    let top: Top<'_> = serde_json::from_slice(raw).ok()?;
    let m = top.metadata?.get().as_bytes();
    let start = m.as_ptr() as usize - raw.as_ptr() as usize;
    Some(start..start + m.len())
}

/// `ObjectMeta`'s JSON fields in Go struct order, and whether each is `omitempty` of a
/// kind that drops it when empty (strings, numbers, maps, slices; not structs).
const OBJECT_META: &[(&str, Omit)] = &[
    ("name", Omit::IfEmpty),
    ("generateName", Omit::IfEmpty),
    ("namespace", Omit::IfEmpty),
    ("selfLink", Omit::IfEmpty),
    ("uid", Omit::IfEmpty),
    ("resourceVersion", Omit::IfEmpty),
    ("generation", Omit::IfEmpty),
    // `omitzero` since 1.33 (kubernetes#130989): a zero time is left out, not `null`.
    ("creationTimestamp", Omit::IfNull),
    ("deletionTimestamp", Omit::IfNull),
    ("deletionGracePeriodSeconds", Omit::IfNull),
    ("labels", Omit::IfEmpty),
    ("annotations", Omit::IfEmpty),
    ("ownerReferences", Omit::IfEmpty),
    ("finalizers", Omit::IfEmpty),
    ("managedFields", Omit::IfEmpty),
];

/// `ObjectMeta`'s JSON field names in Go struct order.
pub const OBJECT_META_ORDER: [&str; 15] = [
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

/// `OwnerReference`'s fields in Go order.
const OWNER_REFERENCE: &[(&str, Omit)] = &[
    ("apiVersion", Omit::Never),
    ("kind", Omit::Never),
    ("name", Omit::Never),
    ("uid", Omit::Never),
    ("controller", Omit::IfNull),
    ("blockOwnerDeletion", Omit::IfNull),
];

/// `ManagedFieldsEntry`'s fields in Go order.
const MANAGED_FIELDS_ENTRY: &[(&str, Omit)] = &[
    ("manager", Omit::IfEmpty),
    ("operation", Omit::IfEmpty),
    ("apiVersion", Omit::IfEmpty),
    ("time", Omit::IfNull),
    ("fieldsType", Omit::IfEmpty),
    ("fieldsV1", Omit::IfNull),
    ("subresource", Omit::IfEmpty),
];

#[derive(Clone, Copy)]
enum Omit {
    /// Written whatever its value (absent: the zero value).
    Never,
    /// A pointer: written when present and not null.
    IfNull,
    /// `omitempty` on a string, number, bool, map or slice: dropped when zero or empty.
    IfEmpty,
}

fn is_empty(v: &RawValue) -> bool {
    matches!(v.get(), "\"\"" | "0" | "false" | "null" | "{}" | "[]")
}

/// Writes `fields` of `map` in `order`, copying each value's bytes.
fn write_ordered(
    out: &mut Vec<u8>,
    map: &[(&str, &RawValue)],
    order: &[(&str, Omit)],
    nested: impl Fn(&str, &RawValue, &mut Vec<u8>) -> Result<(), serde_json::Error>,
) -> Result<(), serde_json::Error> {
    out.push(b'{');
    let mut first = true;
    for (key, omit) in order {
        let value = map.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v);
        let value = match (value, omit) {
            (Some(v), Omit::IfEmpty) if is_empty(v) => continue,
            (Some(v), Omit::IfNull) if v.get() == "null" => continue,
            (Some(v), _) => Some(v),
            (None, Omit::IfEmpty | Omit::IfNull) => continue,
            (None, _) => None,
        };
        if !first {
            out.push(b',');
        }
        first = false;
        out.push(b'"');
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":");
        match (value, omit) {
            (Some(v), _) => nested(key, v, out)?,
            // Go's zero values of the always-written OwnerReference fields.
            (None, _) => out.extend_from_slice(b"\"\""),
        }
    }
    out.push(b'}');
    Ok(())
}

fn pairs(raw: &str) -> Result<Vec<(&str, &RawValue)>, serde_json::Error> {
    // A map into borrowed raw values keeps every value's bytes; keys are plain field names.
    let map: std::collections::BTreeMap<&str, &RawValue> = serde_json::from_str(raw)?;
    Ok(map.into_iter().collect())
}

/// The JSON `ObjectMeta` an unstructured object's metadata becomes through
/// `meta.AsPartialObjectMetadata`: Go field order, empty `omitempty` fields dropped,
/// unknown fields dropped, values' bytes kept.
pub fn object_meta_go_order(metadata: &[u8]) -> Result<Vec<u8>, serde_json::Error> {
    let text = std::str::from_utf8(metadata).map_err(serde::de::Error::custom)?;
    let fields = pairs(text)?;
    let mut out = Vec::with_capacity(metadata.len());
    write_ordered(&mut out, &fields, OBJECT_META, |key, v, out| {
        let order = match key {
            "ownerReferences" => OWNER_REFERENCE,
            "managedFields" => MANAGED_FIELDS_ENTRY,
            _ => {
                out.extend_from_slice(v.get().as_bytes());
                return Ok(());
            }
        };
        let items: Vec<&RawValue> = serde_json::from_str(v.get())?;
        out.push(b'[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_ordered(out, &pairs(item.get())?, order, |_, v, out| {
                out.extend_from_slice(v.get().as_bytes());
                Ok(())
            })?;
        }
        out.push(b']');
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_span_is_the_top_level_value() {
        // A nested "metadata" before the top-level one (a custom resource's sorted keys).
        let raw = br#"{"apiVersion":"x/v1","data":{"metadata":1},"kind":"W","metadata":{"name":"a"},"spec":{}}"#;
        let span = metadata_span(raw).unwrap();
        assert_eq!(&raw[span], br#"{"name":"a"}"#);
        assert_eq!(metadata_span(br#"{"kind":"x"}"#), None);
        assert_eq!(metadata_span(b"not json"), None);
    }

    #[test]
    fn unstructured_metadata_takes_go_order() {
        let stored = br#"{"annotations":{"a":"x\u003cy"},"creationTimestamp":"2026-01-02T03:04:05Z","generateName":"","generation":1,"labels":{"app":"w"},"managedFields":[{"apiVersion":"x/v1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}},"manager":"kubectl","operation":"Update","time":"2026-01-02T03:04:05Z"}],"name":"w1","namespace":"ns","ownerReferences":[{"apiVersion":"v1","blockOwnerDeletion":true,"controller":true,"kind":"Pod","name":"p","uid":"u1"}],"resourceVersion":"7","uid":"u2","unknown":"dropped"}"#;
        let got = object_meta_go_order(stored).unwrap();
        assert_eq!(
            std::str::from_utf8(&got).unwrap(),
            r#"{"name":"w1","namespace":"ns","uid":"u2","resourceVersion":"7","generation":1,"creationTimestamp":"2026-01-02T03:04:05Z","labels":{"app":"w"},"annotations":{"a":"x\u003cy"},"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"p","uid":"u1","controller":true,"blockOwnerDeletion":true}],"managedFields":[{"manager":"kubectl","operation":"Update","apiVersion":"x/v1","time":"2026-01-02T03:04:05Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}}}]}"#
        );
        // A zero creationTimestamp is omitted (omitzero since 1.33).
        let got = object_meta_go_order(br#"{"name":"a","creationTimestamp":null}"#).unwrap();
        assert_eq!(got, br#"{"name":"a"}"#);
        assert!(object_meta_go_order(b"[1]").is_err());
    }
}

//! Decoding of `application/vnd.kubernetes.protobuf` request bodies for the few types
//! kubectl's typed generators send that way (`kubectl create namespace|configmap|secret`).
//!
//! Wire format: the `k8s\0` magic, then a `runtime.Unknown` {typeMeta{apiVersion, kind},
//! raw, contentEncoding, contentType} whose `raw` is the object's protobuf
//! (k8s.io/apimachinery `pkg/runtime/serializer/protobuf`, field numbers from
//! k8s.io/api `core/v1/generated.proto` and apimachinery `meta/v1/generated.proto`).
//! Only the fields a generator sets are decoded; others are skipped.

use base64::Engine;
use serde_json::{json, Map, Value};

const MAGIC: &[u8] = b"k8s\0";

/// One decoded field: number and value.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn varint(data: &[u8], i: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *data.get(*i)?;
        *i += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn fields(data: &[u8]) -> Option<Vec<(u64, Field<'_>)>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < data.len() {
        let key = varint(data, &mut i)?;
        let (num, wt) = (key >> 3, key & 7);
        match wt {
            0 => out.push((num, Field::Varint(varint(data, &mut i)?))),
            1 => i += 8,
            2 => {
                let len = usize::try_from(varint(data, &mut i)?).ok()?;
                let end = i.checked_add(len)?;
                out.push((num, Field::Bytes(data.get(i..end)?)));
                i = end;
            }
            5 => i += 4,
            _ => return None,
        }
    }
    (i == data.len()).then_some(out)
}

fn string(b: &[u8]) -> Option<String> {
    String::from_utf8(b.to_vec()).ok()
}

/// A `map<string, string>` (or bytes, base64-encoded for JSON) entry.
fn map_entry(b: &[u8], bytes_value: bool) -> Option<(String, Value)> {
    let mut k = String::new();
    let mut v = Value::String(String::new());
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(x)) => k = string(x)?,
            (2, Field::Bytes(x)) if bytes_value => {
                v = json!(base64::engine::general_purpose::STANDARD.encode(x))
            }
            (2, Field::Bytes(x)) => v = json!(string(x)?),
            _ => {}
        }
    }
    Some((k, v))
}

fn insert_map(m: &mut Map<String, Value>, key: &str, entry: (String, Value)) {
    let e = m.entry(key.to_string()).or_insert_with(|| json!({}));
    if let Some(o) = e.as_object_mut() {
        o.insert(entry.0, entry.1);
    }
}

fn object_meta(b: &[u8]) -> Option<Value> {
    let mut m = Map::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(x)) => _ = m.insert("name".into(), json!(string(x)?)),
            (2, Field::Bytes(x)) => _ = m.insert("generateName".into(), json!(string(x)?)),
            (3, Field::Bytes(x)) => _ = m.insert("namespace".into(), json!(string(x)?)),
            (5, Field::Bytes(x)) => _ = m.insert("uid".into(), json!(string(x)?)),
            (6, Field::Bytes(x)) => _ = m.insert("resourceVersion".into(), json!(string(x)?)),
            (11, Field::Bytes(x)) => insert_map(&mut m, "labels", map_entry(x, false)?),
            (12, Field::Bytes(x)) => insert_map(&mut m, "annotations", map_entry(x, false)?),
            (14, Field::Bytes(x)) => {
                let e = m.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(a) = e.as_array_mut() {
                    a.push(json!(string(x)?));
                }
            }
            _ => {}
        }
    }
    // Empty strings are the proto zero value: the same as absent in JSON.
    m.retain(|_, v| v.as_str() != Some(""));
    Some(Value::Object(m))
}

/// Decodes a protobuf body into the JSON object, or None when the body is not a
/// protobuf envelope of a type this module knows.
pub fn decode(body: &[u8]) -> Option<Value> {
    let rest = body.strip_prefix(MAGIC)?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for (n, f) in fields(rest)? {
        match (n, f) {
            (1, Field::Bytes(tm)) => {
                for (tn, tf) in fields(tm)? {
                    match (tn, tf) {
                        (1, Field::Bytes(x)) => api_version = string(x)?,
                        (2, Field::Bytes(x)) => kind = string(x)?,
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(x)) => raw = x,
            _ => {}
        }
    }
    let mut obj = Map::new();
    obj.insert("kind".into(), json!(kind));
    obj.insert("apiVersion".into(), json!(api_version));
    for (n, f) in fields(raw)? {
        match (kind.as_str(), n, f) {
            (_, 1, Field::Bytes(x)) => _ = obj.insert("metadata".into(), object_meta(x)?),
            ("ConfigMap", 2, Field::Bytes(x)) => insert_map(&mut obj, "data", map_entry(x, false)?),
            ("ConfigMap", 3, Field::Bytes(x)) => {
                insert_map(&mut obj, "binaryData", map_entry(x, true)?)
            }
            ("ConfigMap", 4, Field::Varint(v)) | ("Secret", 5, Field::Varint(v)) => {
                _ = obj.insert("immutable".into(), json!(v != 0))
            }
            ("Secret", 2, Field::Bytes(x)) => insert_map(&mut obj, "data", map_entry(x, true)?),
            ("Secret", 3, Field::Bytes(x)) => _ = obj.insert("type".into(), json!(string(x)?)),
            ("Secret", 4, Field::Bytes(x)) => {
                insert_map(&mut obj, "stringData", map_entry(x, false)?)
            }
            ("Namespace", 2, Field::Bytes(x)) => {
                let mut fin = Vec::new();
                for (sn, sf) in fields(x)? {
                    if let (1, Field::Bytes(s)) = (sn, sf) {
                        fin.push(json!(string(s)?));
                    }
                }
                obj.insert("spec".into(), json!({"finalizers": fin}));
            }
            ("ConfigMap" | "Secret" | "Namespace", _, _) => {}
            _ => return None,
        }
    }
    Some(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ld(num: u64, b: &[u8]) -> Vec<u8> {
        let mut out = vec![(num << 3 | 2) as u8, b.len() as u8];
        out.extend_from_slice(b);
        out
    }

    #[test]
    fn configmap_envelope() {
        let tm = [ld(1, b"v1"), ld(2, b"ConfigMap")].concat();
        let meta = [ld(1, b"cm"), ld(11, &[ld(1, b"a"), ld(2, b"b")].concat())].concat();
        let raw = [ld(1, &meta), ld(2, &[ld(1, b"k"), ld(2, b"v")].concat())].concat();
        let body = [MAGIC.to_vec(), ld(1, &tm), ld(2, &raw)].concat();
        assert_eq!(
            decode(&body).unwrap(),
            json!({"kind": "ConfigMap", "apiVersion": "v1",
                   "metadata": {"name": "cm", "labels": {"a": "b"}}, "data": {"k": "v"}})
        );
        assert!(decode(b"{}").is_none());
    }
}

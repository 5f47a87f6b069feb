//! Unknown JSON fields of an object, as Go's `encoding/json` meets them when it decodes the
//! object into its struct: the non-strict decoder drops them (kube-apiserver prunes every
//! field its types do not have, `fieldValidation=Ignore`/`Warn`), the strict one
//! (sigs.k8s.io/json `UnmarshalStrict`, `fieldValidation=Strict`) names them as
//! `unknown field "spec.containers[0].imagee"`.
//!
//! [`encode`](super::encode) refuses such fields (`ProtoError::UnknownField`) so that the
//! cache never loses data; a writer playing the apiserver (the simulator) prunes them
//! first with [`prune_unknown`].

use serde_json::Value;

use super::json::MAX_DEPTH;
use super::schema::{message, Card, Field, Kind, Message, MessageType, Special};

/// Removes from `json` (an object of message `ty`) every field the Go struct does not
/// have, at any depth, and returns their paths in document order: `.`-joined JSON names,
/// `[i]` for list elements, the key for map values (`status.capacity.cpu`), as the strict
/// decoder's errors name them. Values of the wrong JSON type are left alone (decoding
/// them is an error of its own), and so are the special types (times, quantities, raw
/// JSON such as a CRD's schemas).
pub fn prune_unknown(ty: MessageType, json: &mut Value) -> Vec<String> {
    let mut out = Vec::new();
    prune_message(ty.def(), json, &mut String::new(), &mut out, 0);
    out
}

/// The field of `m` whose JSON name is `key`, directly or through an inline struct.
fn field_of<'m>(m: &'m Message, key: &str) -> Option<&'m Field> {
    m.fields.iter().find_map(|f| {
        if f.inline {
            match f.kind {
                Kind::Msg(c) => field_of(message(c), key),
                _ => None,
            }
        } else {
            (f.json == key).then_some(f)
        }
    })
}

fn prune_message(
    m: &Message,
    v: &mut Value,
    path: &mut String,
    out: &mut Vec<String>,
    depth: usize,
) {
    if depth > MAX_DEPTH || m.special != Special::None {
        return;
    }
    let Value::Object(map) = v else {
        return;
    };
    let keys: Vec<String> = map.keys().cloned().collect();
    for key in keys {
        let known = if m.type_meta && (key == "apiVersion" || key == "kind") {
            None
        } else {
            match field_of(m, &key) {
                Some(f) => Some(f),
                None => {
                    out.push(join(path, &key));
                    map.shift_remove(&key);
                    continue;
                }
            }
        };
        let (Some(f), Some(child)) = (known, map.get_mut(&key)) else {
            continue;
        };
        let Kind::Msg(c) = f.kind else {
            continue;
        };
        let len = path.len();
        push_key(path, &key);
        prune_value(message(c), f.card, child, path, out, depth + 1);
        path.truncate(len);
    }
}

fn prune_value(
    m: &Message,
    card: Card,
    v: &mut Value,
    path: &mut String,
    out: &mut Vec<String>,
    depth: usize,
) {
    match (card, v) {
        (Card::Single, v) => prune_message(m, v, path, out, depth),
        (Card::Repeated, Value::Array(items)) => {
            for (i, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                prune_message(m, item, path, out, depth);
                path.truncate(len);
            }
        }
        (Card::Map, Value::Object(entries)) => {
            for (k, item) in entries.iter_mut() {
                let len = path.len();
                push_key(path, k);
                prune_message(m, item, path, out, depth);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

fn join(path: &str, key: &str) -> String {
    let mut p = path.to_string();
    push_key(&mut p, key);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_unknown_fields_are_removed_and_named_in_document_order() {
        let pod = super::super::lookup("", "v1", "Pod").unwrap();
        let mut v = json!({
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "p", "nmae": "x", "labels": {"a": "b"}},
            "spec": {
                "containers": [
                    {"name": "a", "image": "i"},
                    {"name": "b", "imagee": "i", "resources": {"limits": {"cpu": "1"}}}
                ],
                // An inline struct's field (VolumeSource in Volume) is known.
                "volumes": [{"name": "v", "emptyDir": {}, "bogus": 1}]
            },
            "extra": true
        });
        let pruned = prune_unknown(pod, &mut v);
        assert_eq!(
            pruned,
            [
                "metadata.nmae",
                "spec.containers[1].imagee",
                "spec.volumes[0].bogus",
                "extra"
            ]
        );
        assert_eq!(
            v,
            json!({
                "kind": "Pod", "apiVersion": "v1",
                "metadata": {"name": "p", "labels": {"a": "b"}},
                "spec": {
                    "containers": [
                        {"name": "a", "image": "i"},
                        {"name": "b", "resources": {"limits": {"cpu": "1"}}}
                    ],
                    "volumes": [{"name": "v", "emptyDir": {}}]
                }
            })
        );
        // Nothing unknown: nothing changes.
        let before = v.clone();
        assert!(prune_unknown(pod, &mut v).is_empty());
        assert_eq!(v, before);
    }
}

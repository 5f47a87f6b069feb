//! The values of a type's field-selector labels (pods' `spec.nodeName`, `status.phase`,
//! …), read from an object's JSON in one pass that builds nothing it does not keep.
//!
//! Building a `serde_json::Value` tree of the whole object only to read a handful of
//! scalars cost most of the time an upstream event takes to enter the cache (every map
//! and string of a 4 KiB pod allocated, then freed). Here the object is walked once
//! against the tree of wanted paths: members on a path are descended into, wanted
//! scalars are kept, and everything else is skipped by serde's `IgnoredAny`, which only
//! scans. Values read the way the apiserver's field sets print them: strings as they
//! are, booleans and numbers in their text form, anything absent as `""`, except the
//! Go booleans that default to `false`.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The values of a type's field labels, in the order of its table: `(label, value)`.
pub type FieldValues = Box<[(&'static str, Box<str>)]>;

/// Reads every `(label, path)` of `field_labels` from `raw`.
pub fn read(
    raw: &[u8],
    field_labels: &[(&'static str, &'static str)],
) -> Result<FieldValues, serde_json::Error> {
    let tree = Wanted::from_paths(field_labels.iter().map(|(_, p)| *p));
    let mut found: Vec<Option<Box<str>>> = vec![None; field_labels.len()];
    let mut de = serde_json::Deserializer::from_slice(raw);
    Walk {
        want: &tree,
        found: &mut found,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(field_labels
        .iter()
        .zip(found)
        .map(|((label, path), v)| (*label, v.unwrap_or_else(|| absent(path))))
        .collect())
}

/// What an absent field reads as: Go's zero value, which field sets print.
fn absent(path: &str) -> Box<str> {
    // Absent booleans (spec.unschedulable, spec.hostNetwork) read as false in Go.
    if path.ends_with("unschedulable") || path.ends_with("hostNetwork") {
        "false".into()
    } else {
        "".into()
    }
}

/// The wanted paths as a tree: each node's members, and which output a leaf fills.
#[derive(Default)]
struct Wanted<'p> {
    members: Vec<(&'p str, Wanted<'p>)>,
    /// Indexes into the output of the paths that end here.
    outputs: Vec<usize>,
}

impl<'p> Wanted<'p> {
    fn from_paths(paths: impl Iterator<Item = &'p str>) -> Self {
        let mut root = Wanted::default();
        for (i, path) in paths.enumerate() {
            let mut node = &mut root;
            for part in path.split('.') {
                let at = match node.members.iter().position(|(k, _)| *k == part) {
                    Some(at) => at,
                    None => {
                        node.members.push((part, Wanted::default()));
                        node.members.len() - 1
                    }
                };
                node = &mut node.members[at].1;
            }
            node.outputs.push(i);
        }
        root
    }

    fn member(&self, key: &str) -> Option<&Wanted<'p>> {
        self.members.iter().find(|(k, _)| *k == key).map(|(_, w)| w)
    }
}

/// Walks one JSON value against a node of the wanted tree. A value that is not an object
/// where the path expects one simply holds none of the wanted fields.
struct Walk<'a, 'p> {
    want: &'a Wanted<'p>,
    found: &'a mut [Option<Box<str>>],
}

impl<'de> DeserializeSeed<'de> for Walk<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match self.want.member(key.as_str()) {
                Some(child) if child.members.is_empty() => {
                    let v = map.next_value::<Scalar>()?.0;
                    for &i in &child.outputs {
                        self.found[i] = Some(v.clone());
                    }
                }
                Some(child) => map.next_value_seed(Walk {
                    want: child,
                    found: &mut *self.found,
                })?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// A member name: borrowed from the input unless it had escapes.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(s))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(s.to_owned()))
            }
        }
        d.deserialize_str(V)
    }
}

/// A wanted value in the text the field set gives it: strings as they are, booleans and
/// numbers printed, objects, arrays and null as `""`.
struct Scalar(Box<str>);

impl<'de> de::Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Ok(Scalar(match v {
            serde_json::Value::String(s) => s.into(),
            serde_json::Value::Bool(b) => b.to_string().into(),
            serde_json::Value::Number(n) => n.to_string().into(),
            _ => "".into(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference: a whole tree, then the path (what `read` replaced).
    fn by_tree(raw: &[u8], fields: &[(&'static str, &'static str)]) -> Vec<(String, String)> {
        let tree: serde_json::Value = serde_json::from_slice(raw).unwrap();
        fields
            .iter()
            .map(|(label, path)| {
                let mut cur = Some(&tree);
                for part in path.split('.') {
                    cur = cur.and_then(|c| c.get(part));
                }
                let v = match cur {
                    None => absent(path).to_string(),
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(serde_json::Value::Bool(b)) => b.to_string(),
                    Some(serde_json::Value::Number(n)) => n.to_string(),
                    Some(_) => String::new(),
                };
                (label.to_string(), v)
            })
            .collect()
    }

    fn by_walk(raw: &[u8], fields: &[(&'static str, &'static str)]) -> Vec<(String, String)> {
        read(raw, fields)
            .unwrap()
            .iter()
            .map(|(l, v)| (l.to_string(), v.to_string()))
            .collect()
    }

    const POD: &[(&str, &str)] = &[
        ("spec.nodeName", "spec.nodeName"),
        ("spec.restartPolicy", "spec.restartPolicy"),
        ("spec.hostNetwork", "spec.hostNetwork"),
        ("status.phase", "status.phase"),
        ("status.podIP", "status.podIP"),
        ("spec.priority", "spec.priority"),
        ("spec.nested.deep.value", "spec.nested.deep.value"),
    ];

    #[test]
    fn one_pass_reads_what_the_whole_tree_reads() {
        let cases: &[&str] = &[
            r#"{"metadata":{"name":"a"},"spec":{"nodeName":"n1","hostNetwork":true,"containers":[{"name":"c","spec":{"nodeName":"no"}}],"priority":7},"status":{"phase":"Running","podIP":"10.0.0.1"}}"#,
            r#"{"metadata":{"name":"a"}}"#,
            r#"{"spec":null,"status":"weird"}"#,
            r#"{"spec":[1,2,{"nodeName":"x"}],"status":{"phase":{"nested":true}}}"#,
            r#"{"spec":{"nodeName":"caf\u00e9 \"q\"","nested":{"deep":{"value":1.5e3}}},"status":{"phase":null}}"#,
            r#"{"sp\u0065c":{"nodeName":"escaped-key","hostNetwork":false}}"#,
            r#"  {"spec" : { "nodeName" : "spaced" } }  "#,
        ];
        for raw in cases {
            assert_eq!(
                by_walk(raw.as_bytes(), POD),
                by_tree(raw.as_bytes(), POD),
                "{raw}"
            );
        }
        // A whole pod as the apiserver writes it (the shape of the simulator's seed pods,
        // written out here: the model sits below the simulator).
        for node in ["node-1", "", "caf\\u00e9"] {
            let raw = format!(
                r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"p","namespace":"ns-0","uid":"1b4e28ba-2fa1-11d2-883f-0016d3cca427","resourceVersion":"42","creationTimestamp":"2024-05-01T10:00:00Z","labels":{{"app":"a"}},"managedFields":[{{"manager":"m","operation":"Update","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{{"f:spec":{{"f:nodeName":{{}}}}}}}}]}},"spec":{{"containers":[{{"name":"c","image":"registry.k8s.io/pause:3.9","resources":{{}}}}],"restartPolicy":"Always","schedulerName":"default-scheduler","serviceAccountName":"default","nodeName":"{node}","hostNetwork":true}},"status":{{"phase":"Running","podIP":"10.0.0.1","conditions":[{{"type":"Ready","status":"True"}}]}}}}"#
            );
            assert_eq!(
                by_walk(raw.as_bytes(), POD),
                by_tree(raw.as_bytes(), POD),
                "{raw}"
            );
        }
    }

    #[test]
    fn invalid_json_is_an_error() {
        for raw in [
            &b"{"[..],
            b"{\"spec\":}",
            b"[]x",
            b"{\"spec\":{\"nodeName\":\"a\"}} trailing",
        ] {
            assert!(
                read(raw, POD).is_err(),
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
    }
}

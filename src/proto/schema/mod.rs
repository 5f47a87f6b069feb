//! The protobuf schema of the built-in kinds: per message, its fields in Go struct order
//! with JSON name, field number, wire kind, and the Go facts that decide the bytes
//! (pointer or value, `omitempty`, inline embedding).
//!
//! `generated.rs` is written by `scripts/gen-proto-schema` (see docs/protobuf.md for its
//! inputs and how to regenerate); this file holds the types and the lookups.

mod generated;

use generated::{KINDS, MESSAGES};

/// The wire kind of a field's value (of each element for repeated fields, of the value
/// for maps, whose keys are always strings in the Kubernetes API).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Str,
    Bytes,
    I32,
    I64,
    Bool,
    F64,
    /// A message: index into the schema table.
    Msg(u16),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Card {
    Single,
    Repeated,
    /// `map<string, V>`: entries `{1: key, 2: value}`, sorted by key on the wire.
    Map,
}

/// Messages whose Go type has hand-written Marshal / MarshalJSON methods (see special.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    None,
    Time,
    MicroTime,
    Duration,
    FieldsV1,
    StringList,
    RawExtension,
    IntOrString,
    Quantity,
    RawJson,
    SchemaOrArray,
    SchemaOrBool,
    SchemaOrStringArray,
}

#[derive(Debug)]
pub(crate) struct Field {
    /// JSON name (the Go `json:` tag); for inline fields the protobuf name.
    pub json: &'static str,
    pub num: u32,
    pub kind: Kind,
    pub card: Card,
    /// The Go field is a pointer: emitted in protobuf only when non-nil.
    pub ptr: bool,
    /// The `json:` tag has `omitempty`.
    pub omitempty: bool,
    /// The `json:` tag has `omitzero` (Go 1.24): encoding/json leaves a zero value out,
    /// structs included. Only `ObjectMeta.creationTimestamp` has it (since 1.33,
    /// kubernetes#130989); JSON only, the protobuf bytes do not change.
    pub omitzero: bool,
    /// Embedded struct with `json:",inline"`: its fields appear in the parent JSON
    /// object, its bytes as a nested message.
    pub inline: bool,
    /// Not in the Go sources the table was made from (newer than them): pointer-ness
    /// follows the API conventions (see docs/protobuf.md).
    #[allow(dead_code)]
    pub inferred: bool,
}

#[derive(Debug)]
pub(crate) struct Message {
    /// Fully qualified protobuf name, e.g. `io.k8s.api.core.v1.Pod`.
    pub name: &'static str,
    /// The Go struct embeds `metav1.TypeMeta` inline: `kind`/`apiVersion` are accepted in
    /// its JSON and written by `decode` when asked to.
    pub type_meta: bool,
    pub special: Special,
    /// Its Go facts come from Go sources (false: wholly inferred, a type newer than them).
    #[allow(dead_code)]
    pub verified: bool,
    /// In Go struct order (JSON output order).
    pub fields: &'static [Field],
    /// Indices into `fields` in ascending field number (protobuf output order).
    pub by_num: &'static [u8],
}

impl Message {
    pub(crate) fn field_by_num(&self, num: u32) -> Option<(usize, &'static Field)> {
        self.fields.iter().enumerate().find(|(_, f)| f.num == num)
    }
}

pub(crate) fn message(index: u16) -> &'static Message {
    &MESSAGES[index as usize]
}

/// A message type of the schema table: the handle callers pass to `encode`/`decode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageType(pub(crate) u16);

impl MessageType {
    /// Fully qualified protobuf name, e.g. `io.k8s.api.core.v1.Pod`.
    pub fn name(self) -> &'static str {
        message(self.0).name
    }

    /// The message of a fully qualified protobuf name.
    pub fn by_name(name: &str) -> Option<MessageType> {
        MESSAGES
            .iter()
            .position(|m| m.name == name)
            .map(|i| MessageType(i as u16))
    }

    pub(crate) fn def(self) -> &'static Message {
        message(self.0)
    }
}

/// The message of a kind served in protobuf: `("", "v1", "Pod")`,
/// `("apps", "v1", "Deployment")`, `("meta.k8s.io", "v1", "PartialObjectMetadataList")`.
/// `None` for kinds kube-apiserver does not serve in protobuf (custom resources,
/// aggregated APIs) and for built-in kinds this table does not cover yet (see
/// docs/protobuf.md): callers forward such requests upstream.
pub fn lookup(group: &str, version: &str, kind: &str) -> Option<MessageType> {
    // meta.k8s.io/v1beta1 `PartialObjectMetadata` is a Go alias of v1's type
    // (`type PartialObjectMetadata = v1.PartialObjectMetadata`), so the .proto files, and the
    // generated table, have no message of its own. Its list is a type of its own (items
    // before metadata) and is in the table.
    let version = match (group, version, kind) {
        ("meta.k8s.io", "v1beta1", "PartialObjectMetadata") => "v1",
        _ => version,
    };
    KINDS
        .binary_search_by(|(g, v, k, _)| (*g, *v, *k).cmp(&(group, version, kind)))
        .ok()
        .map(|i| MessageType(KINDS[i].3))
}

/// Whether `lookup` knows the kind, i.e. whether the cache can answer it in protobuf.
pub fn is_served(group: &str, version: &str, kind: &str) -> bool {
    lookup(group, version, kind).is_some()
}

/// Every (group, version, kind) the table serves.
pub fn served_kinds() -> impl Iterator<Item = (&'static str, &'static str, &'static str)> {
    KINDS.iter().map(|(g, v, k, _)| (*g, *v, *k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_sorted_and_resolve() {
        assert!(KINDS
            .windows(2)
            .all(|w| (w[0].0, w[0].1, w[0].2) < (w[1].0, w[1].1, w[1].2)));
        let pod = lookup("", "v1", "Pod").expect("pods are served");
        assert_eq!(pod.name(), "io.k8s.api.core.v1.Pod");
        assert_eq!(
            lookup("apps", "v1", "Deployment").unwrap().name(),
            "io.k8s.api.apps.v1.Deployment"
        );
        assert!(lookup("example.com", "v1", "Widget").is_none());
        assert!(is_served(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition"
        ));
    }

    #[test]
    fn every_message_is_consistent() {
        for (i, m) in MESSAGES.iter().enumerate() {
            assert_eq!(m.by_num.len(), m.fields.len(), "{}", m.name);
            let mut nums: Vec<u32> = m.by_num.iter().map(|&j| m.fields[j as usize].num).collect();
            assert!(
                nums.windows(2).all(|w| w[0] < w[1]),
                "{}: duplicate numbers",
                m.name
            );
            nums.dedup();
            for f in m.fields {
                if let Kind::Msg(r) = f.kind {
                    assert!((r as usize) < MESSAGES.len(), "{} #{i}", m.name);
                }
                assert!(
                    !(f.inline && f.card != Card::Single),
                    "{}.{}",
                    m.name,
                    f.json
                );
                // decode implements `omitzero` for times only (Time.IsZero).
                if f.omitzero {
                    let Kind::Msg(r) = f.kind else {
                        panic!("{}.{}: omitzero on a scalar", m.name, f.json)
                    };
                    assert!(
                        matches!(message(r).special, Special::Time | Special::MicroTime),
                        "{}.{}: omitzero on a struct other than a time",
                        m.name,
                        f.json
                    );
                }
            }
        }
    }
}

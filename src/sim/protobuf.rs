//! The simulator's protobuf (`application/vnd.kubernetes.protobuf`), through the shared
//! transcoder [`crate::proto`] (docs/protobuf.md):
//!
//! - answers: objects, lists, `Status`, `PartialObjectMetadata[List]` as
//!   `k8s\0` + `runtime.Unknown` envelopes ([`encode_value`], [`encode_list`]); watch
//!   events as length-prefixed `WatchEvent` frames ([`frame`]);
//! - request bodies ([`decode_body`]) with the errors kube-apiserver's protobuf serializer
//!   gives, as `handlers/create.go`/`update.go` wrap them (`transformDecodeError`);
//! - the normalisation of stored built-in objects ([`normalize`]): JSON → protobuf → JSON
//!   is the apiserver's decode into the Go struct and encode back (Go field order,
//!   `omitempty`, zero values); [`prune`] drops the fields the struct lacks, as that
//!   decode does to a client's write.
//!
//! Every kind the simulator serves except the custom resource has a message in the
//! table (`proto::lookup`); the custom resource has no protobuf, as a CRD's resources
//! have none (negotiation never picks protobuf for it without a conversion).

use serde_json::Value;

use crate::proto::{self, ListEnvelope, ListMeta, MessageType, ProtoError};
use crate::sim::resources::ResourceType;

/// The message of a served type's objects (`None` for the custom resource).
pub fn message_type(rt: &ResourceType) -> Option<MessageType> {
    proto::lookup(rt.group, rt.version, rt.kind)
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn to_json(v: &Value) -> Result<Vec<u8>, ProtoError> {
    serde_json::to_vec(v).map_err(|e| ProtoError::Json(e.to_string()))
}

/// One answer (an object, a list, a `Status`, a PartialObjectMetadata or its list) as the
/// protobuf serializer writes it: the envelope named by the value's own `apiVersion` and
/// `kind` (meta.k8s.io/v1beta1 `PartialObjectMetadata` takes v1's message: `proto::lookup`).
pub fn encode_value(v: &Value) -> Result<Vec<u8>, ProtoError> {
    let (av, kind) = (str_of(v, "apiVersion"), str_of(v, "kind"));
    proto::encode_object(av, kind, &to_json(v)?)
}

/// A typed list (`PodList`, ...) from its `metadata` and items, each item encoded on its
/// own and spliced into the list envelope.
pub fn encode_list(
    rt: &ResourceType,
    list_meta: &Value,
    items: &[&Value],
) -> Result<Vec<u8>, ProtoError> {
    let av = rt.api_version();
    let list_ty = proto::type_of(&av, rt.list_kind)?;
    let item_ty = proto::type_of(&av, rt.kind)?;
    let mut encoded = Vec::with_capacity(items.len());
    for item in items {
        encoded.push(proto::encode(item_ty, &to_json(item)?)?);
    }
    let framed: usize = encoded.iter().map(|b| proto::item_frame_len(b.len())).sum();
    let meta = ListMeta {
        resource_version: str_of(list_meta, "resourceVersion"),
        continue_token: str_of(list_meta, "continue"),
        remaining_item_count: list_meta.get("remainingItemCount").and_then(Value::as_i64),
    };
    let env = ListEnvelope::new(list_ty, &av, rt.list_kind, &meta, framed)?;
    let mut out = Vec::with_capacity(env.prefix.len() + framed + env.suffix.len());
    out.extend_from_slice(&env.prefix);
    for b in &encoded {
        env.write_item(&mut out, b);
    }
    out.extend_from_slice(&env.suffix);
    Ok(out)
}

/// One watch event: the object's envelope inside a `WatchEvent`, length-prefixed.
pub fn frame(event_type: &str, object_envelope: &[u8]) -> bytes::Bytes {
    bytes::Bytes::from(proto::watch_frame(event_type, object_envelope))
}

/// Drops the fields a built-in object's Go struct does not have (what decoding a write
/// into the struct does) and returns their paths; nothing for the custom resource.
pub fn prune(rt: &ResourceType, v: &mut Value) -> Vec<String> {
    match message_type(rt) {
        Some(ty) => proto::prune_unknown(ty, v),
        None => Vec::new(),
    }
}

/// A built-in object as kube-apiserver stores and serves it: decoded into its Go struct
/// and encoded back (JSON → protobuf → JSON): Go field order, `omitempty`, zero values
/// written. Fails for the custom resource, for objects with fields the struct lacks (the
/// API write path [`prune`]s them first; objects put straight into the store keep them)
/// and for values of the wrong JSON type; the caller keeps those as they are.
pub fn normalize(rt: &ResourceType, v: &mut Value) -> Result<(), ProtoError> {
    let ty = message_type(rt).ok_or_else(|| ProtoError::UnknownKind(rt.kind.to_string()))?;
    let message = proto::encode(ty, &to_json(v)?)?;
    let av = rt.api_version();
    let json = proto::decode(ty, &message, Some((&av, rt.kind)))?;
    *v = serde_json::from_slice(&json).map_err(|e| ProtoError::Json(e.to_string()))?;
    Ok(())
}

/// Why a protobuf request body could not be decoded, in the two shapes
/// `transformDecodeError` gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// No kind could be read (the envelope itself is bad): `the object provided is
    /// unrecognized (must be of type X): <err> (<summary>)`.
    Unrecognized(String),
    /// The envelope named a kind, its object did not decode: `<Kind> in version "<v>"
    /// cannot be handled as a <X>: <err>`.
    CannotHandle {
        kind: String,
        version: String,
        why: String,
    },
}

/// A protobuf request body (`k8s\0` + `runtime.Unknown`) → the object's JSON, as
/// apimachinery's protobuf `Serializer.Decode` reads it: the errors are its own
/// (`empty data`, `provided data does not appear to be a protobuf message, expected
/// prefix [107 56 115 0]`, `empty body`) and those of gogo's generated `Unmarshal`
/// (`unexpected EOF`, `proto: wrong wireType = 0 for field Data`, …). A missing
/// apiVersion or kind in the envelope defaults to the endpoint's (`copyKindDefaults`).
/// A kind the table does not know comes back as `{kind, apiVersion}` only, for the
/// caller's kind check to refuse.
pub fn decode_body(rt: &ResourceType, body: &[u8]) -> Result<Value, BodyError> {
    if body.is_empty() {
        return Err(BodyError::Unrecognized("empty data".into()));
    }
    if !body.starts_with(&proto::MAGIC) {
        return Err(BodyError::Unrecognized(
            "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
                .into(),
        ));
    }
    if body.len() == proto::MAGIC.len() {
        return Err(BodyError::Unrecognized("empty body".into()));
    }
    let u = proto::decode_unknown(body)
        .map_err(|e| BodyError::Unrecognized(go_error(&e, "Unknown")))?;
    let kind = if u.kind.is_empty() { rt.kind } else { u.kind };
    let own = rt.api_version();
    let av = if u.api_version.is_empty() {
        own.as_str()
    } else {
        u.api_version
    };
    let Ok(ty) = proto::type_of(av, kind) else {
        return Ok(serde_json::json!({"kind": kind, "apiVersion": av}));
    };
    let json = proto::decode(ty, u.raw, Some((av, kind))).map_err(|e| BodyError::CannotHandle {
        kind: kind.to_string(),
        version: av.rsplit('/').next().unwrap_or("").to_string(),
        why: go_error(&e, kind),
    })?;
    serde_json::from_slice(&json).map_err(|e| BodyError::CannotHandle {
        kind: kind.to_string(),
        version: av.rsplit('/').next().unwrap_or("").to_string(),
        why: e.to_string(),
    })
}

/// The text gogo's generated `Unmarshal` (k8s.io/api `generated.pb.go`) gives for what
/// the transcoder found wrong. `message` is the Go type being decoded (the envelope's
/// `Unknown`, or the object's kind: the transcoder does not say which nested message
/// failed, so the few texts that name one name the outermost).
fn go_error(e: &ProtoError, message: &str) -> String {
    match e {
        // io.ErrUnexpectedEOF: a varint, length or value running past the end.
        ProtoError::Truncated => "unexpected EOF".into(),
        ProtoError::VarintOverflow => "proto: integer overflow".into(),
        ProtoError::WrongWireType {
            field, wire_type, ..
        } => format!(
            "proto: wrong wireType = {wire_type} for field {}",
            go_field_name(field)
        ),
        ProtoError::UnsupportedWireType(4) => {
            format!("proto: {message}: wiretype end group for non-group")
        }
        // skipGenerated on an unknown field.
        ProtoError::UnsupportedWireType(w) => format!("proto: illegal wireType {w}"),
        ProtoError::InvalidFieldNumber(n) => {
            format!("proto: {message}: illegal tag {n} (wire type 0)")
        }
        other => other.to_string(),
    }
}

/// The Go field name gogo's errors print for a JSON field: the struct field, i.e. the
/// JSON name capitalised with Go's initialisms (`podIP` → `PodIP`, `uid` → `UID`), and
/// `ObjectMeta`/`ListMeta` for the embedded `metadata`.
fn go_field_name(json: &str) -> String {
    match json {
        "metadata" => return "ObjectMeta".into(),
        "apiVersion" => return "APIVersion".into(),
        _ => {}
    }
    let mut out = String::with_capacity(json.len() + 2);
    let mut chars = json.chars();
    if let Some(c) = chars.next() {
        out.extend(c.to_uppercase());
    }
    out.push_str(chars.as_str());
    for (from, to) in [
        ("Uid", "UID"),
        ("Ip", "IP"),
        ("Url", "URL"),
        ("Cidr", "CIDR"),
    ] {
        if let Some(stem) = out.strip_suffix(from) {
            return format!("{stem}{to}");
        }
        if let Some(stem) = out.strip_suffix(&format!("{from}s")) {
            return format!("{stem}{to}s");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::find;
    use serde_json::json;

    #[test]
    fn a_body_round_trips_and_bad_bodies_get_the_serializers_texts() {
        let cms = find("", "v1", "configmaps").unwrap();
        let cm = json!({"kind": "ConfigMap", "apiVersion": "v1",
                        "metadata": {"name": "cm", "labels": {"a": "b"}}, "data": {"k": "v"}});
        let body = encode_value(&cm).unwrap();
        assert_eq!(decode_body(cms, &body).unwrap(), cm);
        let unrecognized = |s: &str| Err(BodyError::Unrecognized(s.into()));
        assert_eq!(decode_body(cms, b""), unrecognized("empty data"));
        assert_eq!(decode_body(cms, b"k8s\0"), unrecognized("empty body"));
        assert_eq!(
            decode_body(cms, b"{}"),
            unrecognized("provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]")
        );
        assert_eq!(
            decode_body(cms, &body[..10]),
            unrecognized("unexpected EOF")
        );
        // The envelope is whole, the object inside is cut short.
        let raw = proto::encode(
            message_type(cms).unwrap(),
            &serde_json::to_vec(&cm).unwrap(),
        )
        .unwrap();
        let cut = proto::encode_unknown("v1", "ConfigMap", &raw[..raw.len() - 1]);
        assert_eq!(
            decode_body(cms, &cut),
            Err(BodyError::CannotHandle {
                kind: "ConfigMap".into(),
                version: "v1".into(),
                why: "unexpected EOF".into()
            })
        );
        // data (field 2) as a varint.
        let wrong = proto::encode_unknown("v1", "ConfigMap", &[0x10, 0x01]);
        assert_eq!(
            decode_body(cms, &wrong),
            Err(BodyError::CannotHandle {
                kind: "ConfigMap".into(),
                version: "v1".into(),
                why: "proto: wrong wireType = 0 for field Data".into()
            })
        );
        // No kind or apiVersion in the envelope: the endpoint's.
        let bare = proto::encode_unknown("", "", &raw);
        assert_eq!(decode_body(cms, &bare).unwrap(), cm);
    }

    #[test]
    fn normalize_is_the_go_struct_round_trip() {
        let pods = find("", "v1", "pods").unwrap();
        let mut p = json!({"spec": {"containers": [{"image": "i", "name": "c", "bogus": 1}]},
                           "metadata": {"namespace": "n", "name": "p"}, "apiVersion": "v1", "kind": "Pod"});
        // A field the struct lacks: no round trip until it is pruned.
        assert!(normalize(pods, &mut p).is_err());
        assert_eq!(prune(pods, &mut p), ["spec.containers[0].bogus"]);
        normalize(pods, &mut p).unwrap();
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"n"},"spec":{"containers":[{"name":"c","image":"i","resources":{}}]},"status":{}}"#
        );
        let widgets = find("example.com", "v1", "widgets").unwrap();
        assert!(normalize(widgets, &mut json!({})).is_err());
        assert!(prune(widgets, &mut json!({"x": 1})).is_empty());
    }

    #[test]
    fn go_field_names() {
        assert_eq!(go_field_name("data"), "Data");
        assert_eq!(go_field_name("podIP"), "PodIP");
        assert_eq!(go_field_name("podIPs"), "PodIPs");
        assert_eq!(go_field_name("uid"), "UID");
        assert_eq!(go_field_name("metadata"), "ObjectMeta");
    }
}

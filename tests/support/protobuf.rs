//! Checking protobuf answers against JSON ones with an independent decoder: `k8s-pb`
//! (prost types generated from the upstream .proto files).
//!
//! "The same object": the k8s-pb message is re-encoded by prost and turned into JSON by
//! `proto::decode` (Go's `encoding/json` form); the JSON answer goes through the same
//! normalisation (`proto::encode` then `decode`). Any field k8s-pb put elsewhere, dropped,
//! or read differently makes the two differ.

use prost::Message;
use serde_json::Value;
use watchgate::proto::{self, MessageType};

/// client-go's generated clients for built-in types (gets, lists and watches alike).
pub const CLIENT_GO: &str = "application/vnd.kubernetes.protobuf,application/json";
/// client-go's metadata client: lists.
pub const METADATA_LIST: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
/// client-go's metadata client: gets and watches.
pub const METADATA: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

pub fn ty(api_version: &str, kind: &str) -> MessageType {
    proto::type_of(api_version, kind).unwrap_or_else(|e| panic!("{api_version} {kind}: {e}"))
}

/// JSON as Go would write the struct: what both sides are compared in.
pub fn normalised(t: MessageType, av: &str, kind: &str, json: &Value) -> Value {
    let bytes = proto::encode(t, &serde_json::to_vec(json).unwrap())
        .unwrap_or_else(|e| panic!("{kind}: the JSON answer does not encode: {e}"));
    serde_json::from_slice(&proto::decode(t, &bytes, Some((av, kind))).unwrap()).unwrap()
}

/// `envelope` (k8s\0 + Unknown) names `av`/`kind` and decodes with k8s-pb's `M` into the
/// object `json` is.
pub fn same_object<M: Message + Default>(envelope: &[u8], av: &str, kind: &str, json: &Value) -> M {
    let u = proto::decode_unknown(envelope).expect("a k8s\\0 runtime.Unknown envelope");
    assert_eq!(
        (u.api_version, u.kind),
        (av, kind),
        "{}",
        String::from_utf8_lossy(&proto::decode_object(envelope).unwrap_or_default())
    );
    let m = M::decode(u.raw).unwrap_or_else(|e| panic!("k8s-pb cannot decode the {kind}: {e}"));
    let t = ty(av, kind);
    let via_pb: Value = serde_json::from_slice(
        &proto::decode(t, &m.encode_to_vec(), Some((av, kind))).expect("prost's bytes decode"),
    )
    .unwrap();
    assert_eq!(via_pb, normalised(t, av, kind, json), "{kind}");
    m
}

/// A protobuf answer (`k8s\0` + `runtime.Unknown`) as Go's JSON of the same object.
pub fn envelope_json(envelope: &[u8]) -> Value {
    let json = proto::decode_object(envelope)
        .unwrap_or_else(|e| panic!("not a protobuf envelope ({e}): {envelope:?}"));
    serde_json::from_slice(&json).unwrap()
}

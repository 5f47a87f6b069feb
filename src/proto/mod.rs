//! JSON ↔ protobuf for the built-in Kubernetes kinds, byte-exact with kube-apiserver.
//!
//! The cache keeps each object as the upstream's JSON; protobuf clients (client-go's
//! typed clients, kubelets, controllers) get the bytes kube-apiserver would send, made
//! from that JSON once per object version. See docs/protobuf.md for the wire format, the
//! schema's origin, what is byte-exact and the cost per object.
//!
//! A leaf module: it depends on nothing else in the crate.
//!
//! - [`lookup`] / [`is_served`]: `(group, version, kind)` → [`MessageType`].
//! - [`encode`]: object JSON → the message's protobuf bytes (not enveloped);
//!   [`decode`]: bytes → JSON as Go's `encoding/json` writes the struct.
//! - [`envelope`]: `k8s\0` + `runtime.Unknown` ([`encode_unknown`], [`encode_object`],
//!   [`decode_unknown`], [`decode_object`]), lists assembled from per-item bytes
//!   ([`ListEnvelope`]), watch frames ([`watch_frame`], [`object_watch_frame`]), Status,
//!   PartialObjectMetadata.
//! - [`prune_unknown`]: the JSON fields a kind's Go struct does not have, removed (what
//!   the apiserver drops on a write, or names in a strict decoding error).

mod decode;
mod encode;
pub mod envelope;
mod json;
mod prune;
mod schema;
mod special;
mod wire;

pub use decode::decode;
pub use encode::encode;
pub use envelope::{
    decode_object, decode_unknown, encode_object, encode_status, encode_unknown,
    encode_watch_frame, item_frame_len, object_watch_frame, parse_watch_event,
    partial_object_metadata, split_frame, type_of, watch_event, watch_frame, ListEnvelope,
    ListMeta, Unknown, CONTENT_TYPE, MAGIC, WATCH_CONTENT_TYPE,
};
pub use prune::prune_unknown;
pub use schema::{is_served, lookup, served_kinds, MessageType};

/// Why a conversion failed. Encoding errors mean "answer this request from upstream";
/// decoding errors mean "the body is not what it claims" (a 400 for request bodies).
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("invalid JSON: {0}")]
    Json(String),
    /// The JSON has a field the schema does not know: the object is newer than the
    /// table (or not the kind it claims). Never dropped silently.
    #[error("{message} has no field {field:?}")]
    UnknownField {
        message: &'static str,
        field: String,
    },
    #[error("{message}.{field}: expected {expected}, found {found}")]
    TypeMismatch {
        message: &'static str,
        field: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("invalid value: {0}")]
    InvalidValue(String),
    #[error("nesting deeper than {} levels", json::MAX_DEPTH)]
    TooDeep,
    #[error("truncated protobuf data")]
    Truncated,
    #[error("varint longer than 10 bytes")]
    VarintOverflow,
    #[error("invalid protobuf field number {0}")]
    InvalidFieldNumber(u64),
    #[error("unsupported protobuf wire type {0}")]
    UnsupportedWireType(u8),
    #[error("{message}.{field}: wrong wire type {wire_type}")]
    WrongWireType {
        message: &'static str,
        field: &'static str,
        wire_type: u8,
    },
    #[error("not a Kubernetes protobuf body (no k8s\\0 prefix)")]
    NotEnvelope,
    #[error("no protobuf message for {0}")]
    UnknownKind(String),
}

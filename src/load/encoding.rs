//! `--encoding json|protobuf|metadata`: the representation watchers and lists ask for, with
//! client-go's exact Accept headers, and how a response's Content-Type is read back.

/// client-go's typed clients (`ContentType: application/vnd.kubernetes.protobuf`, with
/// JSON as the fallback for types that have no protobuf).
pub const PROTOBUF_ACCEPT: &str = "application/vnd.kubernetes.protobuf,application/json";

/// client-go's metadata client (`k8s.io/client-go/metadata`, behind metadata informers):
/// its `List` asks for `PartialObjectMetadataList`…
pub const METADATA_LIST_ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

/// …and its `Watch` for `PartialObjectMetadata`: a watch streams single objects, and
/// kube-apiserver's watch handler cannot convert an event's object into a list (it ends the
/// stream at the first event).
pub const METADATA_WATCH_ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

/// What watchers and lists ask for.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// `application/json`.
    #[default]
    Json,
    /// Protobuf, as client-go's typed clients ask for it.
    Protobuf,
    /// PartialObjectMetadata in protobuf, as client-go's metadata informers ask for it.
    Metadata,
}

impl Encoding {
    /// The Accept of a list.
    pub fn accept(self) -> &'static str {
        match self {
            Self::Json => "application/json",
            Self::Protobuf => PROTOBUF_ACCEPT,
            Self::Metadata => METADATA_LIST_ACCEPT,
        }
    }

    /// The Accept of a watch (client-go's metadata client differs between the two).
    pub fn watch_accept(self) -> &'static str {
        match self {
            Self::Metadata => METADATA_WATCH_ACCEPT,
            other => other.accept(),
        }
    }
}

/// Whether a response is protobuf (the Content-Type decides, as in client-go: a server may
/// answer JSON to a protobuf Accept).
pub fn is_protobuf(content_type: Option<&http::HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(crate::proto::CONTENT_TYPE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protobuf_content_types_are_recognised() {
        let v = |s: &'static str| http::HeaderValue::from_static(s);
        assert!(is_protobuf(Some(&v("application/vnd.kubernetes.protobuf"))));
        assert!(is_protobuf(Some(&v(
            "application/vnd.kubernetes.protobuf;stream=watch"
        ))));
        assert!(!is_protobuf(Some(&v("application/json"))));
        assert!(!is_protobuf(None));
    }
}

//! `--encoding json|protobuf|metadata`: the representation watchers and lists ask for, with
//! client-go's exact Accept headers, and how a response's Content-Type is read back.

/// client-go's typed clients (`ContentType: application/vnd.kubernetes.protobuf`, with
/// JSON as the fallback for types that have no protobuf).
pub const PROTOBUF_ACCEPT: &str = "application/vnd.kubernetes.protobuf,application/json";

/// client-go's metadata client (metadata informers), for lists and watches alike.
pub const METADATA_ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

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
    pub fn accept(self) -> &'static str {
        match self {
            Self::Json => "application/json",
            Self::Protobuf => PROTOBUF_ACCEPT,
            Self::Metadata => METADATA_ACCEPT,
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

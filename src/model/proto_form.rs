//! What a cached resource type needs to answer in protobuf (`crate::proto`): its message
//! types, and whether its objects turned out not to be encodable.
//!
//! The protobuf of an object is derived from its cached JSON once per object version
//! (`CachedObject::proto`). The schema is a table of the types kube-apiserver 1.36 serves;
//! an object carrying a field the table does not know (a newer apiserver, or a field the
//! table lacks) cannot be encoded without losing data. The first such object marks the
//! whole type `broken`: from then on every protobuf request for it is forwarded, so that
//! protobuf clients never get an answer the apiserver would not have given (logged once,
//! counted in `watchgate_cache_protobuf_unavailable`). It stays so until the gateway
//! restarts: a field that appears in a cluster is there to stay.

use std::sync::atomic::{AtomicBool, Ordering};

use super::resource::ResourceInfo;
use crate::negotiate::MetaVersion;
use crate::proto::{self, MessageType};

#[derive(Debug)]
pub struct ProtoForm {
    /// The object's message (`None`: not a type kube-apiserver serves in protobuf, or one
    /// the table lacks).
    pub object: Option<MessageType>,
    /// The list's message (`PodList`).
    pub list: Option<MessageType>,
    broken: AtomicBool,
    resource: String,
}

impl ProtoForm {
    pub fn of(info: &ResourceInfo) -> Self {
        let lookup = |kind: &str| {
            info.is_builtin()
                .then(|| proto::lookup(&info.group, &info.version, kind))
                .flatten()
        };
        Self {
            object: lookup(&info.kind),
            list: lookup(&format!("{}List", info.kind)),
            broken: AtomicBool::new(false),
            resource: info.resource.clone(),
        }
    }

    /// The object and list messages, while the type answers in protobuf.
    pub fn types(&self) -> Option<(MessageType, MessageType)> {
        if self.broken.load(Ordering::Relaxed) {
            return None;
        }
        Some((self.object?, self.list?))
    }

    /// Whether `PartialObjectMetadata` may be answered in protobuf (any type, custom
    /// resources included, unless one of its objects' metadata failed to encode).
    pub fn metadata_ok(&self) -> bool {
        !self.broken.load(Ordering::Relaxed)
    }

    /// An object could not be encoded: forward the type's protobuf requests from now on.
    pub fn mark_broken(&self, group: &str) {
        if !self.broken.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                group,
                resource = %self.resource,
                "an object of this type has no protobuf form in watchgate's schema (a field newer than it); its protobuf requests are forwarded from now on"
            );
            metrics::gauge!(crate::metrics::CACHE_PROTOBUF_UNAVAILABLE,
                "group" => group.to_string(), "resource" => self.resource.clone())
            .set(1.0);
        }
    }
}

/// The `PartialObjectMetadataList` message of a `meta.k8s.io` version.
pub fn metadata_list_type(v: MetaVersion) -> Option<MessageType> {
    proto::lookup("meta.k8s.io", v.as_str(), "PartialObjectMetadataList")
}

//! The object model, the floor the rest builds on: a cached object (the upstream's JSON
//! bytes and the fields read from them once), its field values, a snapshot of a
//! resource's objects at one resourceVersion, and what is known of a resource type
//! (`ResourceInfo`, its protobuf form), and the metadata-only JSON form of an object
//! (`meta`), and which field-selector labels the apiserver supports per built-in type
//! (`field_labels`). `codec`, `watch` and `cache` all build on it; it imports none of them.

pub mod field_labels;
pub mod fields;
pub mod meta;
pub mod object;
pub mod proto_form;
pub mod resource;
pub mod snapshot;

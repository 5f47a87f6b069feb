//! Decoding one page of an upstream list into cacheable objects, apart from the I/O so
//! that every body an upstream can send is property-tested
//! (tests/bad_input_properties.rs, `list_bodies_*`).
//!
//! The reflector asks for JSON (`Accept: application/json`), so [`BodyFormat::Json`] is
//! the only format today. When the protobuf transcoder (`src/proto/`) lands and the
//! reflector asks for protobuf, its decoder becomes another [`BodyFormat`] variant here,
//! and the property tests that iterate over [`BodyFormat::ALL`] cover it too.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::model::object::{CachedObject, ObjectError};

/// The encodings an upstream list page can come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFormat {
    /// `application/json`: a `{Kind}List` object.
    Json,
}

impl BodyFormat {
    /// Every format the reflector can receive (the property tests iterate over it).
    pub const ALL: &'static [BodyFormat] = &[BodyFormat::Json];
}

/// One decoded page.
#[derive(Debug, Default)]
pub struct Page {
    /// The items that parsed, in the upstream's order.
    pub objects: Vec<CachedObject>,
    /// Why the other items did not: one broken object must not keep the whole type out of
    /// the cache, so they are skipped (and counted by the caller).
    pub malformed: Vec<ObjectError>,
    /// `metadata.resourceVersion`: the list's (every page of a paged list has the first
    /// page's).
    pub resource_version: u64,
    /// `metadata.continue`, when another page follows.
    pub continue_token: Option<String>,
}

/// Why a page could not be used at all (the reflector retries the list after a backoff).
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error("list is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("list resourceVersion {0:?} is not a number")]
    ResourceVersion(String),
}

/// Decodes a page in `format`. `field_labels` as for [`CachedObject::parse`].
pub fn decode_page(
    format: BodyFormat,
    bytes: &[u8],
    field_labels: &[(&'static str, &'static str)],
) -> Result<Page, PageError> {
    match format {
        BodyFormat::Json => decode_json(bytes, field_labels),
    }
}

fn decode_json(
    bytes: &[u8],
    field_labels: &[(&'static str, &'static str)],
) -> Result<Page, PageError> {
    let page: ListPage<'_> = serde_json::from_slice(bytes).map_err(PageError::NotJson)?;
    let resource_version = crate::strconv::parse_uint(&page.metadata.resource_version)
        .map_err(|_| PageError::ResourceVersion(page.metadata.resource_version.clone()))?;
    let mut out = Page {
        resource_version,
        continue_token: page.metadata.cont.filter(|c| !c.is_empty()),
        ..Page::default()
    };
    for item in page.items {
        match CachedObject::parse(Bytes::copy_from_slice(item.get().as_bytes()), field_labels) {
            Ok(o) => out.objects.push(o),
            Err(e) => out.malformed.push(e),
        }
    }
    Ok(out)
}

#[derive(Deserialize)]
struct ListPage<'a> {
    metadata: ListMeta,
    #[serde(borrow, default)]
    items: Vec<&'a RawValue>,
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
    #[serde(rename = "continue", default)]
    cont: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_broken_items_and_keeps_the_rest() {
        let body = br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7","continue":"abc"},"items":[
            {"metadata":{"name":"a","namespace":"n","resourceVersion":"5"}},
            {"metadata":{"namespace":"n","resourceVersion":"6"}},
            [1,2]]}"#;
        let page = decode_page(BodyFormat::Json, body, &[]).unwrap();
        assert_eq!(page.objects.len(), 1);
        assert_eq!(&*page.objects[0].key, "n/a");
        assert_eq!(page.malformed.len(), 2);
        assert_eq!(page.resource_version, 7);
        assert_eq!(page.continue_token.as_deref(), Some("abc"));
        let err = decode_page(
            BodyFormat::Json,
            br#"{"metadata":{"resourceVersion":"x"}}"#,
            &[],
        );
        assert!(matches!(err, Err(PageError::ResourceVersion(_))));
    }
}

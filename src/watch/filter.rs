//! What one watcher wants, and which index bucket finds it.

use crate::model::object::CachedObject;
use crate::selector::field::FieldSelector;
use crate::selector::label::LabelSelector;

/// The field label every type supports and every single-object watch uses.
pub const NAME: &str = "metadata.name";

/// A watcher's scope and selectors.
#[derive(Debug, Clone, Default)]
pub struct WatchFilter {
    /// The namespace of a namespaced watch path; `None` watches all namespaces.
    pub namespace: Option<Box<str>>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl WatchFilter {
    pub fn matches(&self, o: &CachedObject) -> bool {
        if let Some(ns) = &self.namespace {
            if o.namespace() != &**ns {
                return false;
            }
        }
        o.label_digest.may_match(&self.labels)
            && self.labels.matches_fn(|k| o.label(k))
            && self
                .fields
                .matches_with(|f| o.field(f).unwrap_or_default().to_string())
    }

    /// The most selective bucket this watcher can live in: an exact `metadata.name`, then
    /// an exact value of another indexed field label (pods' `spec.nodeName`: the kubelet's
    /// watch), then its namespace, else the bucket every event visits.
    pub fn index_key(&self, indexed: &[&'static str]) -> IndexKey {
        for label in indexed {
            if let Some(v) = self.fields.requires_exact(label) {
                return IndexKey::Field(label, v.into());
            }
        }
        if let Some(ns) = &self.namespace {
            return IndexKey::Namespace(ns.clone());
        }
        if let Some(ns) = self.fields.requires_exact("metadata.namespace") {
            return IndexKey::Namespace(ns.into());
        }
        IndexKey::All
    }
}

/// A bucket of the dispatch index. Each watcher lives in exactly one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IndexKey {
    All,
    Namespace(Box<str>),
    /// (field label, value): watchers requiring `label=value`.
    Field(&'static str, Box<str>),
}

/// The value an object has for an indexed field label.
pub fn field_of<'a>(o: &'a CachedObject, label: &str) -> &'a str {
    if label == NAME {
        o.name()
    } else {
        o.field(label).unwrap_or_default()
    }
}

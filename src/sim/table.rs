//! The simulator's Table glue: which [`Convertor`] each served type gets (the printers
//! themselves are the shared `crate::table`).
//!
//! Built-in types get their ported printer, or the default convertor where kube-apiserver
//! has no printer (CustomResourceDefinitions). The custom resource gets the columns of its
//! CustomResourceDefinition object in the store (`widgets.example.com`, written at
//! bootstrap), read at each request as the apiextensions-apiserver serves the current
//! CRD; without that object it gets what a CRD without columns gets (`Name`, `Age`).

use serde_json::Value;

use crate::sim::resources::{self, ResourceType};
use crate::sim::store::Store;
use crate::table::{Convertor, CustomColumns};

/// The table convertor of `rt`.
pub fn convertor(store: &Store, rt: &ResourceType) -> Convertor {
    if rt.is_custom() {
        return match crd(store, rt) {
            Some(crd) => Convertor::custom_resource(&crd, rt.version),
            None => Convertor::Custom(CustomColumns::new(None)),
        };
    }
    // Every built-in type the simulator serves has a ported printer or the default one.
    Convertor::builtin(rt.group, rt.kind).unwrap_or(Convertor::Default)
}

/// The CustomResourceDefinition object of a custom resource, if it is in the store.
fn crd(store: &Store, rt: &ResourceType) -> Option<Value> {
    let crds = resources::find("apiextensions.k8s.io", "v1", "customresourcedefinitions")?;
    let name = format!("{}.{}", rt.resource, rt.group);
    store.get(crds, "", &name).map(|o| o.as_ref().clone())
}

//! Namespaces as the write path sees them: the NamespaceLifecycle admission plugin
//! (k8s.io/apiserver `pkg/admission/plugin/namespace/lifecycle`), the namespace
//! controller's deletion of a Terminating namespace's contents (k8s.io/kubernetes
//! `pkg/controller/namespace/deletion`), and the built-in namespaces a fresh apiserver
//! creates (`pkg/controlplane`'s system namespaces controller).

use std::sync::Arc;

use serde_json::{json, Value};

use super::create::fill_create_meta;
use super::{finalizers, is_deleting, meta_mut, meta_str, Write};
use crate::sim::apply::{self, Writer};
use crate::sim::objects::{self, now_rfc3339};
use crate::sim::store::{Mutation, Store};
use crate::sim::validate::go_quote;
use crate::sim::{resources, Sim};
use crate::status::{Cause, GroupResource, Status};

/// Namespaces the NamespaceLifecycle plugin refuses to delete (`immortalNamespaces`).
pub(super) const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// The built-in namespaces a fresh kube-apiserver has.
pub const BUILTIN_NAMESPACES: &[&str] =
    &["default", "kube-node-lease", "kube-public", "kube-system"];

/// Creates the built-in namespaces (default, kube-node-lease, kube-public, kube-system)
/// the way a real create would; existing ones are left alone. Idempotent.
pub fn bootstrap(store: &Store) {
    let rt = resources::find("", "v1", "namespaces").expect("namespaces are served");
    let now = now_rfc3339();
    for name in BUILTIN_NAMESPACES {
        let mut obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        fill_create_meta(rt, &mut obj, &now);
        let w = Writer {
            manager: "kube-apiserver",
            api_version: "v1",
            time: &now,
            subresource: None,
            with_status: false,
        };
        apply::record_update(None, &mut obj, &w, "Update");
        objects::canonical_order(&mut obj);
        let _ = store.mutate(rt, "", name, |cur| {
            Ok(if cur.is_some() {
                Mutation::NoOp
            } else {
                Mutation::Put(obj)
            })
        });
    }
}

/// The namespace controller, reduced to what is observable: once a namespace is
/// Terminating, every object in it is deleted (objects with finalizers are marked and
/// waited for), then the namespace itself goes away.
pub(super) fn spawn_namespace_cleanup(sim: Arc<Sim>, ns: String) {
    tokio::spawn(async move {
        let ns_rt = resources::find("", "v1", "namespaces").expect("namespaces are served");
        let mut shutdown = sim.shutdown.clone();
        loop {
            if *shutdown.borrow() {
                return;
            }
            let mut remaining = 0usize;
            for rt in resources::RESOURCES.iter().filter(|r| r.namespaced) {
                let (_, items) = sim.store.list(rt, Some(&ns));
                for item in items {
                    let name = meta_str(&item, "name").to_string();
                    let now = now_rfc3339();
                    let _ = sim.store.mutate(rt, &ns, &name, |cur| {
                        let Some(cur) = cur else {
                            return Ok(Mutation::NoOp);
                        };
                        if finalizers(cur).is_empty() {
                            return Ok(Mutation::Delete);
                        }
                        remaining += 1;
                        if is_deleting(cur) {
                            return Ok(Mutation::NoOp);
                        }
                        let mut new = (**cur).clone();
                        let m = meta_mut(&mut new);
                        m.insert("deletionTimestamp".into(), json!(now));
                        m.insert("deletionGracePeriodSeconds".into(), json!(0));
                        objects::canonical_order(&mut new);
                        Ok(Mutation::Put(new))
                    });
                }
            }
            if remaining == 0 {
                let _ = sim.store.mutate(ns_rt, "", &ns, |cur| {
                    let Some(cur) = cur else {
                        return Ok(Mutation::NoOp);
                    };
                    if !is_deleting(cur) {
                        return Ok(Mutation::NoOp);
                    }
                    if finalizers(cur).is_empty() {
                        Ok(Mutation::Delete)
                    } else {
                        // Only spec.finalizers are the controller's to clear.
                        let mut new = (**cur).clone();
                        if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
                            spec.insert("finalizers".into(), json!([]));
                        }
                        Ok(Mutation::Put(new))
                    }
                });
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
                _ = shutdown.changed() => return,
            }
        }
    });
}

impl Write<'_> {
    /// `rest.EnsureObjectNamespaceMatchesRequestNamespace`.
    pub(super) fn ensure_namespace(&self, obj: &mut Value) -> Result<(), Status> {
        let m = meta_mut(obj);
        if !self.rt.namespaced {
            m.shift_remove("namespace");
            return Ok(());
        }
        match m.get("namespace").and_then(Value::as_str).unwrap_or("") {
            "" => {
                m.insert("namespace".into(), json!(self.ns));
                Ok(())
            }
            ns if ns == self.ns => Ok(()),
            _ => Err(Status::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            )),
        }
    }

    /// NamespaceLifecycle admission for creates: the namespace must exist and must not
    /// be terminating.
    pub(super) fn admit_namespace(&self, name: &str) -> Result<(), Status> {
        if !self.rt.namespaced {
            return Ok(());
        }
        let ns_rt = resources::find("", "v1", "namespaces").expect("namespaces are served");
        match self.store.get(ns_rt, "", &self.ns) {
            // `--seed 0` starts with an empty store (tests count RVs from 1), but the
            // system namespaces always exist on a real cluster: writes into them pass.
            None if BUILTIN_NAMESPACES.contains(&self.ns.as_str()) => Ok(()),
            None => Err(Status::not_found(
                &GroupResource::new("", "namespaces"),
                &self.ns,
            )),
            Some(ns)
                if ns.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating") =>
            {
                let gr = self.gr();
                let msg = format!(
                    "unable to create new content in namespace {} because it is being terminated",
                    self.ns
                );
                let mut s = if name.is_empty() {
                    Status::new(403, "Forbidden", format!("{gr} is forbidden: {msg}"))
                } else {
                    Status::new(
                        403,
                        "Forbidden",
                        format!("{gr} {} is forbidden: {msg}", go_quote(name)),
                    )
                };
                s.with_details = true;
                s.name = (!name.is_empty()).then(|| name.to_string());
                s.group = (!gr.group.is_empty()).then(|| gr.group.clone());
                s.kind = Some(gr.resource.clone());
                s.causes.push(Cause {
                    reason: "NamespaceTerminating".into(),
                    message: format!("namespace {} is being terminated", self.ns),
                    field: Some("metadata.namespace".into()),
                });
                Err(s)
            }
            Some(_) => Ok(()),
        }
    }
}

//! PUT (the object, `/status`, a namespace's `/finalize`): k8s.io/apiserver
//! `pkg/endpoints/handlers/update.go`, with the generic store's `Update`
//! (`pkg/registry/generic/registry/store.go`: optimistic concurrency, create on update,
//! deletion once the last finalizer is gone) and `rest.BeforeUpdate`
//! (`pkg/registry/rest/update.go`). Patches and scale writes end here too.

use serde_json::{json, Value};

use super::{
    finalizers, is_deleting, kind_group, meta_mut, meta_str, Answer, Write, OPTIMISTIC_LOCK_MSG,
};
use crate::sim::store::Mutation;
use crate::sim::validate::{self, go_string_slice, FieldError};
use crate::sim::{apply, objects};
use crate::status::Status;

impl Write<'_> {
    /// The optimistic concurrency check of store.go `Update`.
    pub(super) fn check_rv(&self, old: &Value, new: &Value) -> Result<(), Status> {
        let rv = meta_str(new, "resourceVersion");
        if rv.is_empty() {
            if !objects::allow_unconditional_update(self.rt) {
                let gr = self.gr();
                return Err(validate::invalid(
                    &gr.group,
                    &gr.resource,
                    self.name(),
                    &[FieldError::invalid_raw(
                        "metadata.resourceVersion",
                        "0x0".into(),
                        "must be specified for an update",
                    )],
                ));
            }
            return Ok(());
        }
        if crate::strconv::parse_uint(rv).is_err() {
            let (group, kind) = kind_group(self.rt);
            return Err(validate::invalid(
                group,
                kind,
                self.name(),
                &[FieldError::invalid(
                    "metadata.resourceVersion",
                    rv,
                    "must be a valid resource version",
                )],
            ));
        }
        if rv != meta_str(old, "resourceVersion") {
            return Err(Status::conflict(
                &self.gr(),
                self.name(),
                OPTIMISTIC_LOCK_MSG,
            ));
        }
        Ok(())
    }

    /// `rest.BeforeUpdate` + the strategy's `PrepareForUpdate` + `ValidateObjectMetaUpdate`
    /// + managedFields: turns a client's new object into what would be stored.
    ///
    /// `op` is "Update" or "Apply" (apply has recorded its managed fields already).
    pub(super) fn prepare_update(
        &self,
        old: &Value,
        new: Value,
        manager: &str,
        op: &str,
    ) -> Result<Value, Status> {
        let status_sub = self.sub.as_deref() == Some("status");
        let mut new = if self.sub.as_deref() == Some("finalize") {
            // namespaces/finalize changes only spec.finalizers (namespace
            // finalizeStrategy.PrepareForUpdate).
            let mut out = old.clone();
            let fin = new
                .pointer("/spec/finalizers")
                .cloned()
                .unwrap_or_else(|| json!([]));
            let om = out.as_object_mut().expect("object");
            let spec = om.entry("spec").or_insert_with(|| json!({}));
            if let Some(spec) = spec.as_object_mut() {
                spec.insert("finalizers".into(), fin);
            }
            out
        } else if status_sub {
            // Status updates change only .status (ResetObjectMetaForStatus + strategy).
            let mut out = old.clone();
            let om = out.as_object_mut().expect("object");
            match new.get("status") {
                Some(s) => om.insert("status".into(), s.clone()),
                None => om.shift_remove("status"),
            };
            // managedFields travel with the request for apply.
            if op == "Apply" {
                if let Some(mf) = new.pointer("/metadata/managedFields") {
                    meta_mut(&mut out).insert("managedFields".into(), mf.clone());
                }
            }
            out
        } else {
            let mut new = new;
            if objects::has_status_subresource(self.rt) {
                let nm = new.as_object_mut().expect("object");
                match old.get("status") {
                    Some(s) => nm.insert("status".into(), s.clone()),
                    None => nm.shift_remove("status"),
                };
            }
            new
        };
        // System fields are the server's (BeforeUpdate).
        let new_uid = meta_str(&new, "uid").to_string();
        let old_uid = meta_str(old, "uid").to_string();
        let (group, kind) = kind_group(self.rt);
        if !new_uid.is_empty() && new_uid != old_uid {
            return Err(validate::invalid(
                group,
                kind,
                self.name(),
                &[FieldError::invalid(
                    "metadata.uid",
                    &new_uid,
                    "field is immutable",
                )],
            ));
        }
        if is_deleting(old) {
            let old_f = finalizers(old);
            let mut extra: Vec<String> = finalizers(&new)
                .into_iter()
                .filter(|f| !old_f.contains(f))
                .collect();
            extra.sort();
            extra.dedup();
            if !extra.is_empty() {
                return Err(validate::invalid(
                    group,
                    kind,
                    self.name(),
                    &[FieldError::forbidden(
                        "metadata.finalizers",
                        &format!(
                            "no new finalizers can be added if the object is being deleted, found new finalizers {}",
                            go_string_slice(&extra)
                        ),
                    )],
                ));
            }
        }
        {
            let om = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
            let m = meta_mut(&mut new);
            m.insert("name".into(), om["name"].clone());
            if self.rt.namespaced {
                m.insert("namespace".into(), om["namespace"].clone());
            } else {
                m.shift_remove("namespace");
            }
            for k in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match om.get(k) {
                    Some(v) => m.insert(k.into(), v.clone()),
                    None => m.shift_remove(k),
                };
            }
            m.insert("resourceVersion".into(), om["resourceVersion"].clone());
            m.retain(|_, v| !v.is_null());
        }
        if objects::tracks_generation(self.rt) && objects::generation_changed(self.rt, old, &new) {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        if op == "Update" {
            // Omitted managedFields keep the stored ones; a client that sends its own
            // (e.g. `[]` to reset them) has them taken as the base, as in the apiserver.
            let mut base = old.clone();
            if let Some(mf) = new.pointer("/metadata/managedFields").cloned() {
                meta_mut(&mut base).insert("managedFields".into(), mf);
            }
            let sub = self.sub.as_deref();
            let w = self.writer(manager, sub);
            apply::record_update(Some(&base), &mut new, &w, "Update");
        }
        objects::canonical_order(&mut new);
        Ok(new)
    }

    /// Stores an update prepared by `prepare_update` against `old` (deleting the object
    /// when its last finalizer is gone during deletion) and answers.
    pub(super) fn commit_update(
        &self,
        prepare: impl FnOnce(&Value) -> Result<Value, Status>,
        dry: bool,
    ) -> Answer {
        let gr = self.gr();
        let name = self.name().to_string();
        let mut outcome: Option<Value> = None;
        let result = self.store.mutate(self.rt, &self.ns, &name, |cur| {
            let Some(cur) = cur else {
                return Err(Status::not_found(&gr, &name));
            };
            let mut new = prepare(cur)?;
            // A patch's result is decoded into the Go struct too.
            crate::sim::protobuf::prune(self.rt, &mut new);
            let delete_now = is_deleting(&new) && finalizers(&new).is_empty();
            outcome = Some(new.clone());
            if dry {
                return Ok(Mutation::NoOp);
            }
            Ok(if delete_now {
                Mutation::Delete
            } else {
                Mutation::Put(new)
            })
        });
        let stored = result?;
        let code = 200;
        match (dry, outcome) {
            (true, Some(v)) => self.respond(code, &v),
            (_, Some(v)) if is_deleting(&v) && finalizers(&v).is_empty() => {
                // The update removed the last finalizer: the object is gone; the answer is
                // its final state.
                self.respond(code, &stored.map(|s| (*s).clone()).unwrap_or(v))
            }
            _ => self.respond(code, &stored.map(|s| (*s).clone()).unwrap_or(Value::Null)),
        }
    }

    /// PUT (main resource or /status).
    pub(super) fn update(&self) -> Answer {
        let dry = self.validate_options("UpdateOptions", false)?;
        let obj = self.decode_object()?;
        self.check_name(&obj)?;
        let manager = self.manager();
        if self.sub.is_none()
            && objects::allow_create_on_update(self.rt)
            && self.store.get(self.rt, &self.ns, self.name()).is_none()
        {
            let obj = self.prepare_create(obj, &manager, None)?;
            return self.commit_create(obj, self.name(), dry, 201);
        }
        self.commit_update(
            |cur| {
                self.check_rv(cur, &obj)?;
                self.prepare_update(cur, obj.clone(), &manager, "Update")
            },
            dry,
        )
    }
}

//! POST: k8s.io/apiserver `pkg/endpoints/handlers/create.go`, with the generic store's
//! `Create` (`pkg/registry/generic/registry/store.go`) and `rest.BeforeCreate`
//! (`pkg/registry/rest/create.go`): generateName, validation, system fields, defaults.

use serde_json::{json, Value};

use super::{kind_group, meta_mut, meta_str, Answer, Write};
use crate::sim::resources::ResourceType;
use crate::sim::store::Mutation;
use crate::sim::validate::{self, NameRule};
use crate::sim::{apply, objects};
use crate::status::Status;

/// `names.SimpleNameGenerator`: base (cut to 58 bytes) + 5 random characters from
/// `utilrand`'s alphabet (no vowels, no confusable digits).
pub fn generate_name(base: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut base = base.to_string();
    if base.len() > 58 {
        let mut cut = 58;
        while !base.is_char_boundary(cut) {
            cut -= 1;
        }
        base.truncate(cut);
    }
    let mut rng = rand::rng();
    for _ in 0..5 {
        let i = rand::Rng::random_range(&mut rng, 0..ALPHANUMS.len());
        base.push(ALPHANUMS[i] as char);
    }
    base
}

/// System metadata and defaults of a new object (`FillObjectMetaSystemFields`,
/// `BeforeCreate`, the strategy's `PrepareForCreate`).
pub(super) fn fill_create_meta(rt: &ResourceType, obj: &mut Value, now: &str) {
    {
        let m = meta_mut(obj);
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        // The store fills this in; the placeholder keeps the Go field order.
        m.insert("resourceVersion".into(), json!(""));
        m.insert("creationTimestamp".into(), json!(now));
        m.shift_remove("deletionTimestamp");
        m.shift_remove("deletionGracePeriodSeconds");
        m.shift_remove("selfLink");
        if objects::tracks_generation(rt) {
            m.insert("generation".into(), json!(1));
        } else {
            m.shift_remove("generation");
        }
    }
    objects::prepare_for_create(rt, obj);
    objects::canonical_order(obj);
}

impl Write<'_> {
    /// The create pipeline after decoding: namespace, admission, generateName, validation,
    /// system fields, defaults, managedFields. `op` is the managedFields operation.
    pub(super) fn prepare_create(
        &self,
        mut obj: Value,
        manager: &str,
        applied: Option<&Value>,
    ) -> Result<Value, Status> {
        self.ensure_namespace(&mut obj)?;
        let mut name = meta_str(&obj, "name").to_string();
        self.admit_namespace(&name)?;
        let generate = meta_str(&obj, "generateName").to_string();
        if name.is_empty() && !generate.is_empty() {
            name = generate_name(&generate);
            meta_mut(&mut obj).insert("name".into(), json!(name));
        }
        let (group, kind) = kind_group(self.rt);
        let errs = validate::validate_object_meta_names(
            NameRule::for_resource(self.rt.group, self.rt.resource),
            &name,
            &generate,
        );
        if !errs.is_empty() {
            return Err(validate::invalid(group, kind, &name, &errs));
        }
        if !meta_str(&obj, "resourceVersion").is_empty() {
            // etcd3 store.Create refuses it; the error is not a typed API error.
            return Err(Status::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let mut obj = match applied {
            Some(cfg) => {
                let w = self.writer(manager, None);
                let mut o = apply::apply(None, cfg, &w, false)?;
                // Identity and defaults from the decoded object.
                let mm = meta_mut(&mut o);
                mm.insert("name".into(), json!(name));
                if self.rt.namespaced {
                    mm.insert("namespace".into(), json!(self.ns));
                }
                o
            }
            None => obj,
        };
        fill_create_meta(self.rt, &mut obj, &self.now);
        if applied.is_none() {
            let w = self.writer(manager, None);
            apply::record_update(None, &mut obj, &w, "Update");
        }
        objects::canonical_order(&mut obj);
        Ok(obj)
    }

    /// POST.
    pub(super) fn create(&self) -> Answer {
        let dry = self.validate_options("CreateOptions", false)?;
        let obj = self.decode_object()?;
        let manager = self.manager();
        let generated = meta_str(&obj, "name").is_empty();
        // store.go retries a generated name that is taken (RetryGenerateName: up to 8
        // attempts) before answering AlreadyExists.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let prepared = self.prepare_create(obj.clone(), &manager, None)?;
            let name = meta_str(&prepared, "name").to_string();
            match self.commit_create(prepared, &name, dry, 201) {
                Err(e) if generated && e.reason == "AlreadyExists" && attempts < 8 => continue,
                other => return other,
            }
        }
    }

    /// Stores a prepared new object (AlreadyExists if taken) and answers `code`.
    pub(super) fn commit_create(&self, obj: Value, name: &str, dry: bool, code: u16) -> Answer {
        let gr = self.gr();
        if dry {
            if self.store.get(self.rt, &self.ns, name).is_some() {
                return Err(Status::already_exists(&gr, name));
            }
            let mut out = obj;
            meta_mut(&mut out).shift_remove("resourceVersion");
            return self.respond(code, &out);
        }
        let stored = self.store.mutate(self.rt, &self.ns, name, |cur| {
            if cur.is_some() {
                Err(Status::already_exists(&gr, name))
            } else {
                Ok(Mutation::Put(obj))
            }
        })?;
        let stored = stored.ok_or_else(|| Status::internal("object vanished after create"))?;
        if self.rt.group.is_empty()
            && self.rt.resource == "pods"
            && stored
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
        {
            crate::sim::lifecycle::spawn_pod_start(
                self.sim.clone(),
                self.ns.clone(),
                name.to_string(),
                meta_str(&stored, "uid").to_string(),
            );
        }
        self.respond(code, &stored)
    }

    /// `checkName` (rest.go) for PUT bodies.
    pub(super) fn check_name(&self, obj: &Value) -> Result<(), Status> {
        let url_name = self.name();
        let obj_name = meta_str(obj, "name");
        if obj_name.is_empty() {
            return Err(Status::bad_request(format!(
                "the name of the object ({url_name} based on URL) was undeterminable: name must be provided"
            )));
        }
        if obj_name != url_name {
            return Err(Status::bad_request(format!(
                "the name of the object ({obj_name}) does not match the name on the URL ({url_name})"
            )));
        }
        let obj_ns = meta_str(obj, "namespace");
        if self.rt.namespaced && !self.ns.is_empty() && !obj_ns.is_empty() && obj_ns != self.ns {
            return Err(Status::bad_request(format!(
                "the namespace of the object ({obj_ns}) does not match the namespace on the request ({})",
                self.ns
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names() {
        let n = generate_name("web-");
        assert_eq!(n.len(), 9);
        assert!(n.starts_with("web-"));
        assert_eq!(generate_name(&"a".repeat(70)).len(), 63);
    }
}

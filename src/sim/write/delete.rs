//! DELETE and deletecollection: k8s.io/apiserver `pkg/endpoints/handlers/delete.go`
//! (DeleteOptions from the body and the query), with the generic store's `Delete` and
//! `DeleteCollection` (`pkg/registry/generic/registry/store.go`: preconditions, graceful
//! deletion, finalizers, orphaning) and `rest.BeforeDelete` (`pkg/registry/rest/delete.go`).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::decode::{accepted_media_types, content_type, unsupported_media_type, yaml_to_json};
use super::namespace::{spawn_namespace_cleanup, IMMORTAL_NAMESPACES};
use super::{finalizers, is_deleting, meta_mut, meta_str, Answer, Write};
use crate::sim::objects;
use crate::sim::resources::ResourceType;
use crate::sim::store::Mutation;
use crate::sim::validate::{self, go_quote, FieldError};
use crate::status::{GroupResource, Status};

/// The object part of a `metav1.Status` Success answer to a delete (store.go
/// `finalizeDelete`): details carry the resource (not the kind), name and uid.
pub(super) fn delete_success(rt: &ResourceType, obj: &Value) -> Value {
    let mut details = Map::new();
    details.insert("name".into(), json!(meta_str(obj, "name")));
    if !rt.group.is_empty() {
        details.insert("group".into(), json!(rt.group));
    }
    details.insert("kind".into(), json!(rt.resource));
    details.insert("uid".into(), json!(meta_str(obj, "uid")));
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
           "details": Value::Object(details)})
}

#[derive(Debug, Default, Clone)]
pub(super) struct DeleteOpts {
    propagation: Option<String>,
    grace: Option<i64>,
    orphan: Option<bool>,
    pre_uid: Option<String>,
    pre_rv: Option<String>,
    dry_run: Vec<String>,
}
impl Write<'_> {
    /// DeleteOptions from the body and the query (delete.go).
    pub(super) fn delete_options(&self) -> Result<DeleteOpts, Status> {
        let mut o = DeleteOpts::default();
        if !self.body.is_empty() {
            let ct = content_type(&self.headers);
            let v: Value = match ct.as_str() {
                "" | "application/json" => {
                    if let Some(e) = crate::sim::gojson::syntax_error(&self.body) {
                        // A decode error that is not an API status: 500 without a reason.
                        return Err(Status::new(
                            500,
                            "",
                            format!("couldn't get version/kind; json parse error: {e}"),
                        ));
                    }
                    serde_json::from_slice(&self.body).unwrap_or(Value::Null)
                }
                "application/yaml" => {
                    yaml_to_json(&self.body).map_err(|e| Status::new(500, "", e))?
                }
                _ => return Err(unsupported_media_type(accepted_media_types(self.rt))),
            };
            if let Some(m) = v.as_object() {
                o.propagation = m
                    .get("propagationPolicy")
                    .and_then(Value::as_str)
                    .map(String::from);
                o.grace = m.get("gracePeriodSeconds").and_then(Value::as_i64);
                o.pre_uid = v
                    .pointer("/preconditions/uid")
                    .and_then(Value::as_str)
                    .map(String::from);
                o.pre_rv = v
                    .pointer("/preconditions/resourceVersion")
                    .and_then(Value::as_str)
                    .map(String::from);
                o.orphan = m.get("orphanDependents").and_then(Value::as_bool);
                if let Some(Value::Array(d)) = m.get("dryRun") {
                    o.dry_run = d
                        .iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect();
                }
            }
        }
        if let Some(p) = self.api.query_get("propagationPolicy") {
            o.propagation = Some(p.to_string());
        }
        if let Some(g) = self.api.query_get("gracePeriodSeconds") {
            o.grace = g.parse().ok();
        }
        if let Some(b) = self.api.query_get("orphanDependents") {
            o.orphan = Some(b == "true");
        }
        let q = self.dry_run_values();
        if !q.is_empty() {
            o.dry_run = q;
        }
        let mut errs = Vec::new();
        if o.orphan.is_some() && o.propagation.is_some() {
            errs.push(FieldError::invalid(
                "propagationPolicy",
                o.propagation.as_deref().unwrap_or(""),
                "orphanDependents and deletionPropagation cannot be both set",
            ));
        }
        errs.extend(validate::validate_propagation_policy(
            o.propagation.as_deref(),
        ));
        errs.extend(validate::validate_dry_run(&o.dry_run));
        if !errs.is_empty() {
            return Err(validate::invalid_options("DeleteOptions", &errs));
        }
        Ok(o)
    }

    /// `rest.BeforeDelete`'s precondition checks (409 with the Kind as resource).
    pub(super) fn check_preconditions(&self, o: &DeleteOpts, cur: &Value) -> Result<(), Status> {
        let gr = GroupResource::new(self.rt.group, self.rt.kind);
        let name = meta_str(cur, "name");
        if let Some(uid) = &o.pre_uid {
            let have = meta_str(cur, "uid");
            if uid != have {
                return Err(Status::conflict(&gr, name, &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({have}). The object might have been deleted and then recreated"
                )));
            }
        }
        if let Some(rv) = &o.pre_rv {
            let have = meta_str(cur, "resourceVersion");
            if rv != have {
                return Err(Status::conflict(&gr, name, &format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({have}). The object might have been modified"
                )));
            }
        }
        Ok(())
    }

    /// DELETE of one object.
    pub(super) fn delete(&self) -> Answer {
        let o = self.delete_options()?;
        let dry = !o.dry_run.is_empty();
        if self.rt.resource == "namespaces" && IMMORTAL_NAMESPACES.contains(&self.name()) {
            let gr = self.gr();
            let mut s = Status::new(
                403,
                "Forbidden",
                format!(
                    "{gr} {} is forbidden: this namespace may not be deleted",
                    go_quote(self.name())
                ),
            );
            s.with_details = true;
            s.name = Some(self.name().into());
            s.kind = Some(gr.resource);
            return Err(s);
        }
        let (code, body, terminating) = self.delete_one(self.name(), &o, dry)?;
        if terminating && !dry {
            spawn_namespace_cleanup(self.sim.clone(), self.name().to_string());
        }
        self.respond(code, &body)
    }

    /// Deletes (or marks for deletion) one object; returns the answer's code and body and
    /// whether a namespace entered Terminating.
    pub(super) fn delete_one(
        &self,
        name: &str,
        o: &DeleteOpts,
        dry: bool,
    ) -> Result<(u16, Value, bool), Status> {
        let gr = self.gr();
        let now = self.now.clone();
        let is_ns = self.rt.resource == "namespaces";
        let mut before: Option<Value> = None;
        let mut after: Option<Value> = None;
        let mut immediate = false;
        let res = self.store.mutate(self.rt, &self.ns, name, |cur| {
            let Some(cur) = cur else {
                return Err(Status::not_found(&gr, name));
            };
            self.check_preconditions(o, cur)?;
            before = Some((**cur).clone());
            let pending = !finalizers(cur).is_empty() || is_ns;
            if !pending {
                immediate = true;
                return Ok(if dry {
                    Mutation::NoOp
                } else {
                    Mutation::Delete
                });
            }
            if is_deleting(cur) {
                // Already being deleted: nothing changes.
                after = Some((**cur).clone());
                return Ok(Mutation::NoOp);
            }
            let mut new = (**cur).clone();
            {
                let m = meta_mut(&mut new);
                m.insert("deletionTimestamp".into(), json!(now));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
            }
            if is_ns {
                if let Some(s) = new.as_object_mut() {
                    s.insert("status".into(), json!({"phase": "Terminating"}));
                }
            }
            objects::canonical_order(&mut new);
            after = Some(new.clone());
            Ok(if dry {
                Mutation::NoOp
            } else {
                Mutation::Put(new)
            })
        });
        let stored = res?;
        let before = before.unwrap_or(Value::Null);
        if immediate {
            // The answer carries the object as it was before the delete (etcd3 returns the
            // previous state); watchers see the DELETED event at the deletion's RV.
            let body = if objects::returns_deleted_object(self.rt) {
                before
            } else {
                delete_success(self.rt, &before)
            };
            return Ok((200, body, false));
        }
        let obj = if dry {
            after.unwrap_or(before)
        } else {
            stored.map(|s| (*s).clone()).unwrap_or(before)
        };
        let code = if o.orphan == Some(false) { 202 } else { 200 };
        Ok((code, obj, is_ns))
    }

    /// DELETE on a collection: deletes every matching object, answers the list as it was.
    pub(super) fn delete_collection(&self) -> Answer {
        let o = self.delete_options()?;
        let dry = !o.dry_run.is_empty();
        let lo = self.api.list_options()?;
        crate::sim::list::check_field_labels(self.rt, &lo.field_selector)?;
        let ns = (!self.ns.is_empty()).then_some(self.ns.as_str());
        let (rv, items) = self.store.list(self.rt, ns);
        let rt = self.rt;
        let matching: Vec<Arc<Value>> = items
            .into_iter()
            .filter(|i| crate::sim::list::matches(rt, &lo, i))
            .collect();
        for item in &matching {
            let name = meta_str(item, "name").to_string();
            let item_ns = meta_str(item, "namespace").to_string();
            let w = Write {
                ns: item_ns,
                name: Some(name.clone()),
                ..self.clone_shallow()
            };
            match w.delete_one(&name, &o, dry) {
                Ok(_) => {}
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let list = json!({
            "kind": rt.list_kind,
            "apiVersion": rt.api_version(),
            "metadata": {"resourceVersion": rv.to_string()},
            "items": matching.iter().map(|i| (**i).clone()).collect::<Vec<_>>(),
        });
        self.respond(200, &list)
    }
}

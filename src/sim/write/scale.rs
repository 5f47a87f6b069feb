//! The `scale` subresource of deployments (k8s.io/kubernetes
//! `pkg/registry/apps/deployment/storage/storage.go`, `ScaleREST`), served by the same
//! get, update and patch handlers; its answers are autoscaling/v1 Scales in plain JSON.

use serde_json::{json, Map, Value};

use super::decode::{
    accepted_media_types, content_type, summarize, unsupported_media_type, yaml_to_json,
};
use super::{meta_mut, meta_str, plain_json, Answer, Write, OPTIMISTIC_LOCK_MSG};
use crate::sim::store::Mutation;
use crate::sim::validate::{self, FieldError};
use crate::sim::{apply, objects, patch};
use crate::status::Status;

impl Write<'_> {
    /// The autoscaling/v1 Scale of a deployment (`scaleFromDeployment`).
    pub(super) fn scale_of(&self, d: &Value) -> Value {
        let m = &d["metadata"];
        let mut meta = Map::new();
        for k in [
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "creationTimestamp",
        ] {
            if let Some(v) = m.get(k) {
                meta.insert(k.into(), v.clone());
            }
        }
        let replicas = d
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let mut spec = Map::new();
        if replicas != 0 {
            spec.insert("replicas".into(), json!(replicas));
        }
        let mut status = Map::new();
        status.insert(
            "replicas".into(),
            json!(d
                .pointer("/status/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(0)),
        );
        if let Some(Value::Object(ml)) = d.pointer("/spec/selector/matchLabels") {
            let mut pairs: Vec<String> = ml
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect();
            pairs.sort();
            if !pairs.is_empty() {
                status.insert("selector".into(), json!(pairs.join(",")));
            }
        }
        json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": Value::Object(meta),
               "spec": Value::Object(spec), "status": Value::Object(status)})
    }

    pub(super) fn get_scale(&self) -> Answer {
        let d = self
            .store
            .get(self.rt, &self.ns, self.name())
            .ok_or_else(|| Status::not_found(&self.gr(), self.name()))?;
        Ok(plain_json(200, &self.scale_of(&d)))
    }

    /// Checks a Scale the client sent (`ValidateScale`) and writes its replicas.
    pub(super) fn write_scale(
        &self,
        dry: bool,
        to_scale: impl Fn(&Value) -> Result<Value, Status>,
    ) -> Answer {
        let manager = self.manager();
        let gr = self.gr();
        let name = self.name().to_string();
        let mut outcome: Option<Value> = None;
        let stored = self.store.mutate(self.rt, &self.ns, &name, |cur| {
            let Some(cur) = cur else {
                return Err(Status::not_found(&gr, &name));
            };
            let scale = to_scale(cur)?;
            let rv = meta_str(&scale, "resourceVersion");
            if !rv.is_empty() && rv != meta_str(cur, "resourceVersion") {
                return Err(Status::conflict(&gr, &name, OPTIMISTIC_LOCK_MSG));
            }
            let replicas = match scale.pointer("/spec/replicas") {
                None | Some(Value::Null) => 0,
                Some(v) => v.as_i64().ok_or_else(|| {
                    Status::bad_request(format!(
                        "Scale in version \"v1\" cannot be handled as a Scale: json: cannot unmarshal {} into Go struct field ScaleSpec.spec.replicas of type int32",
                        patch::go_json_type(v)
                    ))
                })?,
            };
            if replicas < 0 {
                return Err(validate::invalid(
                    "autoscaling",
                    "Scale",
                    &name,
                    &[FieldError::invalid_raw(
                        "spec.replicas",
                        replicas.to_string(),
                        "must be greater than or equal to 0",
                    )],
                ));
            }
            let mut new = (**cur).clone();
            if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("replicas".into(), json!(replicas));
            } else {
                new.as_object_mut()
                    .expect("object")
                    .insert("spec".into(), json!({"replicas": replicas}));
            }
            let mut new = new;
            {
                let old = cur.as_ref();
                if objects::generation_changed(self.rt, old, &new) {
                    let g = old
                        .pointer("/metadata/generation")
                        .and_then(Value::as_i64)
                        .unwrap_or(0);
                    meta_mut(&mut new).insert("generation".into(), json!(g + 1));
                }
                let w = self.writer(&manager, Some("scale"));
                apply::record_update(Some(old), &mut new, &w, "Update");
            }
            objects::canonical_order(&mut new);
            outcome = Some(new.clone());
            Ok(if dry { Mutation::NoOp } else { Mutation::Put(new) })
        })?;
        let d = if dry {
            outcome.unwrap_or(Value::Null)
        } else {
            stored.map(|s| (*s).clone()).unwrap_or(Value::Null)
        };
        Ok(plain_json(200, &self.scale_of(&d)))
    }

    pub(super) fn update_scale(&self) -> Answer {
        let dry = self.validate_options("UpdateOptions", false)?;
        let ct = content_type(&self.headers);
        let body: Value = match ct.as_str() {
            "" | "application/json" => {
                if let Some(e) = crate::sim::gojson::syntax_error(&self.body) {
                    return Err(Status::bad_request(format!(
                        "the object provided is unrecognized (must be of type Scale): couldn't get version/kind; json parse error: {e} ({})",
                        summarize(&self.body)
                    )));
                }
                serde_json::from_slice(&self.body).unwrap_or(Value::Null)
            }
            "application/yaml" => yaml_to_json(&self.body).map_err(Status::bad_request)?,
            _ => return Err(unsupported_media_type(accepted_media_types(self.rt))),
        };
        let obj_name = meta_str(&body, "name");
        if obj_name != self.name() {
            return Err(Status::bad_request(format!(
                "the name of the object ({obj_name}) does not match the name on the URL ({})",
                self.name()
            )));
        }
        self.write_scale(dry, |_| Ok(body.clone()))
    }

    pub(super) fn patch_scale(&self) -> Answer {
        let pt = self.patch_type()?;
        let is_apply = pt == "application/apply-patch+yaml";
        let dry = self.validate_options("PatchOptions", is_apply)?;
        self.write_scale(dry, |cur| {
            let scale = self.scale_of(cur);
            if is_apply {
                let mut s = scale;
                let cfg = serde_json::from_slice::<Value>(&self.body)
                    .or_else(|_| yaml_to_json(&self.body))
                    .map_err(|e| Status::bad_request(format!("error decoding YAML: {e}")))?;
                patch::merge_patch(&mut s, &cfg);
                Ok(s)
            } else {
                self.apply_patch_body(&pt, &scale)
            }
        })
    }
}

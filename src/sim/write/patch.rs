//! PATCH (the object or `/status`): k8s.io/apiserver `pkg/endpoints/handlers/patch.go`:
//! the patch types a type accepts, the JSON, merge and strategic-merge patchers and their
//! errors, and server-side apply (its merge is `crate::sim::apply`).

use serde_json::{json, Value};

use super::decode::{content_type, unsupported_media_type, yaml_to_json};
use super::{kind_group, meta_mut, meta_str, Answer, WithMessage, Write, OPTIMISTIC_LOCK_MSG};
use crate::sim::patch::{self, JsonPatchError};
use crate::sim::resources::ResourceType;
use crate::sim::{apply, validate};
use crate::status::{Cause, Status};

/// The patch types a type accepts (patch.go; custom resources have no strategic merge).
pub(super) fn patch_types(rt: &ResourceType) -> &'static [&'static str] {
    if rt.group == "example.com" {
        &[
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ]
    } else {
        &[
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/apply-patch+yaml",
        ]
    }
}

impl Write<'_> {
    /// The patch type of the request, or 415.
    pub(super) fn patch_type(&self) -> Result<String, Status> {
        let ct = content_type(&self.headers);
        let types = patch_types(self.rt);
        if types.contains(&ct.as_str()) {
            Ok(ct)
        } else {
            Err(unsupported_media_type(types))
        }
    }

    /// Applies a non-apply patch body to `cur` (patch.go's patchers and their errors).
    pub(super) fn apply_patch_body(&self, pt: &str, cur: &Value) -> Result<Value, Status> {
        let mut doc = cur.clone();
        match pt {
            "application/json-patch+json" => match patch::json_patch(&mut doc, &self.body) {
                Ok(()) => {}
                Err(JsonPatchError::Decode(e)) => return Err(Status::bad_request(e)),
                Err(JsonPatchError::Apply(e)) => {
                    // errors.NewGenericServerResponse(422, "", GroupResource{}, "", err, 0, false)
                    let mut s = Status::new(
                        422,
                        "Invalid",
                        "the server rejected our request due to an error in our request",
                    );
                    s.with_details = true;
                    s.causes.push(Cause {
                        reason: "UnexpectedServerResponse".into(),
                        message: e,
                        field: None,
                    });
                    return Err(s);
                }
            },
            "application/merge-patch+json" => {
                let p: Value = match crate::sim::gojson::syntax_error(&self.body) {
                    Some(_) => return Err(Status::bad_request("Invalid JSON Patch")),
                    None => serde_json::from_slice(&self.body)
                        .map_err(|_| Status::bad_request("Invalid JSON Patch"))?,
                };
                if !p.is_object() {
                    return Err(Status::bad_request("Invalid JSON Patch"));
                }
                patch::merge_patch(&mut doc, &p);
            }
            _ => {
                // strategic merge patch
                if let Some(e) = crate::sim::gojson::syntax_error(&self.body) {
                    return Err(Status::bad_request(e));
                }
                let p: Value = serde_json::from_slice(&self.body)
                    .map_err(|e| Status::bad_request(e.to_string()))?;
                if !p.is_object() && !p.is_null() {
                    return Err(Status::bad_request(format!(
                        "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                        patch::go_json_type(&p)
                    )));
                }
                if p.is_object() {
                    patch::strategic_merge(&mut doc, &p).map_err(|e| {
                        let (group, kind) = kind_group(self.rt);
                        validate::invalid(group, kind, self.name(), &[]).with_message(e)
                    })?;
                }
            }
        }
        if !doc.is_object() {
            return Err(Status::bad_request(format!(
                "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                patch::go_json_type(&doc)
            )));
        }
        Ok(doc)
    }

    /// Decodes an apply body (YAML or JSON) into the applied configuration.
    pub(super) fn decode_apply(&self) -> Result<Value, Status> {
        let v = match serde_json::from_slice::<Value>(&self.body) {
            Ok(v) => v,
            Err(_) => yaml_to_json(&self.body)
                .map_err(|e| Status::bad_request(format!("error decoding YAML: {e}")))?,
        };
        let Value::Object(_) = v else {
            return Err(Status::bad_request(format!(
                "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                patch::go_json_type(&v)
            )));
        };
        let mut v = v;
        let av = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
        if av.is_empty() || kind.is_empty() {
            // managedfields: the applied object must say what it is.
            return Err(Status::bad_request(format!(
                "Object 'Kind' is missing in '{}'",
                String::from_utf8_lossy(&self.body).trim()
            )));
        }
        self.check_type(&mut v)?;
        let name = meta_str(&v, "name");
        if !name.is_empty() && name != self.name() {
            return Err(Status::bad_request(format!(
                "the name of the object ({name}) does not match the name on the URL ({})",
                self.name()
            )));
        }
        Ok(v)
    }

    /// PATCH (main resource or /status).
    pub(super) fn patch(&self) -> Answer {
        let pt = self.patch_type()?;
        let is_apply = pt == "application/apply-patch+yaml";
        let dry = self.validate_options("PatchOptions", is_apply)?;
        let manager = self.manager();
        if is_apply {
            let cfg = self.decode_apply()?;
            let force = self
                .api
                .query_get("force")
                .is_some_and(|v| v == "true" || v == "1" || v.eq_ignore_ascii_case("true"));
            if self.store.get(self.rt, &self.ns, self.name()).is_none() && self.sub.is_none() {
                let mut obj = cfg.clone();
                meta_mut(&mut obj).insert("name".into(), json!(self.name()));
                let mut cfgn = cfg;
                meta_mut(&mut cfgn).insert("name".into(), json!(self.name()));
                let obj = self.prepare_create(obj, &manager, Some(&cfgn))?;
                return self.commit_create(obj, self.name(), dry, 201);
            }
            let sub = self.sub.clone();
            return self.commit_update(
                |cur| {
                    let w = self.writer(&manager, sub.as_deref());
                    let mut cfg = cfg.clone();
                    if self.rt.namespaced {
                        meta_mut(&mut cfg).insert("namespace".into(), json!(self.ns));
                    }
                    let merged = apply::apply(Some(cur), &cfg, &w, force)?;
                    self.check_rv(cur, &merged).or_else(|e| {
                        if e.code == 422 {
                            Ok(())
                        } else {
                            Err(e)
                        }
                    })?;
                    self.prepare_update(cur, merged, &manager, "Apply")
                },
                dry,
            );
        }
        self.commit_update(
            |cur| {
                let patched = self.apply_patch_body(&pt, cur)?;
                let mut patched = patched;
                self.check_type(&mut patched)?;
                let rv = meta_str(&patched, "resourceVersion");
                if !rv.is_empty() && rv != meta_str(cur, "resourceVersion") {
                    return Err(Status::conflict(
                        &self.gr(),
                        self.name(),
                        OPTIMISTIC_LOCK_MSG,
                    ));
                }
                self.prepare_update(cur, patched, &manager, "Update")
            },
            dry,
        )
    }
}

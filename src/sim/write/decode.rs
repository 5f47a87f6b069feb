//! The request body of a create or update: its media type (`NegotiateInputSerializer`,
//! k8s.io/apiserver `pkg/endpoints/handlers/negotiation`), its decoding and the errors
//! `create.go`/`update.go` make of a bad one (`transformDecodeError`), and the
//! kind/apiVersion checks the typed decoder would make.

use http::{header, HeaderMap};
use serde_json::{json, Value};

use super::Write;
use crate::sim::protobuf::BodyError;
use crate::sim::resources::{self, ResourceType};
use crate::sim::validate::go_quote;
use crate::sim::{objects, patch};
use crate::status::Status;

/// `summarizeData` (create.go's transformDecodeError): JSON objects print as text,
/// anything else as hex, cut at 30 bytes.
pub(super) fn summarize(data: &[u8]) -> String {
    const MAX: usize = 30;
    if data.is_empty() {
        return "<empty>".into();
    }
    let (head, more) = if data.len() > MAX {
        (&data[..MAX], " ...")
    } else {
        (data, "")
    };
    if data[0] == b'{' {
        format!("{}{more}", String::from_utf8_lossy(head))
    } else {
        let hex: String = head.iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}{more}")
    }
}

pub(super) const TYPE_META_STRUCT: &str =
    "struct { APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }";

/// The accepted request body media types (`NegotiateInputSerializer`): built-in types also
/// list protobuf; custom resources only JSON and YAML.
pub(super) fn accepted_media_types(rt: &ResourceType) -> &'static [&'static str] {
    if rt.group == "example.com" {
        &["application/json", "application/yaml"]
    } else {
        &[
            "application/json",
            "application/yaml",
            "application/vnd.kubernetes.protobuf",
        ]
    }
}

/// `negotiation.NewUnsupportedMediaTypeError`.
pub(super) fn unsupported_media_type(accepted: &[&str]) -> Status {
    Status::new(
        415,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format - accepted media types include: {}",
            accepted.join(", ")
        ),
    )
}

/// The media type of the request body, parameters dropped, lower-cased.
pub(super) fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// YAML → JSON value (sigs.k8s.io/yaml semantics for the documents clients send).
pub(super) fn yaml_to_json(data: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(data).map_err(|e| e.to_string())?;
    serde_saphyr::from_str::<Value>(text).map_err(|e| e.to_string())
}

/// The Go package alias used in conversion errors.
pub(super) fn go_package(api_version: &str) -> String {
    match api_version.split_once('/') {
        Some((g, v)) => format!("{v}.{}", g.split('.').next().unwrap_or(g)),
        None => api_version.to_string(),
    }
}

pub(super) fn internal_package(rt: &ResourceType) -> &'static str {
    match rt.group {
        "" => "core",
        _ if rt.is_custom() => "unstructured",
        g => g.split('.').next().unwrap_or(g),
    }
}

impl Write<'_> {
    /// Decodes a create/update body into a JSON object of this type (create.go /
    /// update.go decode + transformDecodeError + the GroupVersion check).
    pub(super) fn decode_object(&self) -> Result<Value, Status> {
        let ct = content_type(&self.headers);
        let accepted = accepted_media_types(self.rt);
        let ct = if ct.is_empty() {
            "application/json".to_string()
        } else {
            ct
        };
        let unrecognized = |err: String| {
            Status::bad_request(format!(
                "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: {err} ({})",
                self.rt.kind,
                summarize(&self.body)
            ))
        };
        let mut obj: Value = match ct.as_str() {
            "application/json" => {
                if let Some(e) = crate::sim::gojson::syntax_error(&self.body) {
                    return Err(unrecognized(e));
                }
                serde_json::from_slice(&self.body).map_err(|e| unrecognized(e.to_string()))?
            }
            "application/yaml" => yaml_to_json(&self.body).map_err(|e| {
                Status::bad_request(format!(
                    "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: error converting YAML to JSON: {e} ({})",
                    self.rt.kind,
                    summarize(&self.body)
                ))
            })?,
            "application/vnd.kubernetes.protobuf" if accepted.contains(&ct.as_str()) => {
                // client-go's typed clients (kubectl's `create configmap|secret|namespace`
                // among them) send protobuf.
                crate::sim::protobuf::decode_body(self.rt, &self.body).map_err(|e| match e {
                    BodyError::Unrecognized(why) => Status::bad_request(format!(
                        "the object provided is unrecognized (must be of type {}): {why} ({})",
                        self.rt.kind,
                        summarize(&self.body)
                    )),
                    BodyError::CannotHandle { kind, version, why } => {
                        Status::bad_request(format!(
                            "{kind} in version {} cannot be handled as a {}: {why}",
                            go_quote(&version),
                            self.rt.kind
                        ))
                    }
                })?
            }
            _ => return Err(unsupported_media_type(accepted)),
        };
        if obj.is_null() {
            obj = json!({});
        }
        if !obj.is_object() {
            return Err(unrecognized(format!(
                "json: cannot unmarshal {} into Go value of type {TYPE_META_STRUCT}",
                patch::go_json_type(&obj)
            )));
        }
        // Decoding into the Go struct drops the fields it lacks; the strict decoder names
        // them instead. Built-in kinds: at every level, from the struct's fields (the
        // protobuf table); the custom resource: the simulator's own top-level list.
        let strict = self.api.query_get("fieldValidation") == Some("Strict");
        let unknown = if crate::sim::protobuf::message_type(self.rt).is_some() {
            crate::sim::protobuf::prune(self.rt, &mut obj)
        } else if strict {
            objects::unknown_fields(self.rt, &obj)
        } else {
            Vec::new()
        };
        if strict && !unknown.is_empty() {
            let list: Vec<String> = unknown
                .iter()
                .map(|f| format!("unknown field {}", go_quote(f)))
                .collect();
            let version = self.rt.version;
            return Err(Status::bad_request(format!(
                "{} in version {} cannot be handled as a {}: strict decoding error: {}",
                self.rt.kind,
                go_quote(version),
                self.rt.kind,
                list.join(", ")
            )));
        }
        self.check_type(&mut obj)?;
        Ok(obj)
    }

    /// kind/apiVersion defaulting and checks, plus the ObjectMeta shapes the typed decoder
    /// would reject.
    pub(super) fn check_type(&self, obj: &mut Value) -> Result<(), Status> {
        let want_av = self.rt.api_version();
        let m = obj.as_object_mut().expect("object");
        for k in ["apiVersion", "kind"] {
            if let Some(v) = m.get(k) {
                if !v.is_string() && !v.is_null() {
                    return Err(Status::bad_request(format!(
                        "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go struct field .{k} of type string ({})",
                        self.rt.kind,
                        patch::go_json_type(v),
                        summarize(&self.body)
                    )));
                }
            }
        }
        let av = m
            .get("apiVersion")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or(&want_av)
            .to_string();
        let kind = m
            .get("kind")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or(self.rt.kind)
            .to_string();
        let version = av.rsplit('/').next().unwrap_or("").to_string();
        if kind != self.rt.kind {
            let known = resources::RESOURCES
                .iter()
                .any(|r| r.kind == kind && r.api_version() == av);
            let why = if known {
                format!(
                    "converting ({}.{kind}) to ({}.{}): unknown conversion",
                    go_package(&av),
                    internal_package(self.rt),
                    self.rt.kind
                )
            } else {
                format!(
                    "no kind {} is registered for version {} in scheme \"pkg/api/legacyscheme/scheme.go:30\"",
                    go_quote(&kind),
                    go_quote(&av)
                )
            };
            return Err(Status::bad_request(format!(
                "{kind} in version {} cannot be handled as a {}: {why}",
                go_quote(&version),
                self.rt.kind
            )));
        }
        if av != want_av {
            return Err(Status::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
        m.insert("apiVersion".into(), json!(want_av));
        m.insert("kind".into(), json!(self.rt.kind));
        let cannot = |what: &str, field: &str, go_type: &str| {
            Status::bad_request(format!(
                "{} in version {} cannot be handled as a {}: json: cannot unmarshal {what} into Go struct field {field} of type {go_type}",
                self.rt.kind,
                go_quote(&version),
                self.rt.kind
            ))
        };
        match m.get("metadata") {
            None | Some(Value::Null) => {
                m.insert("metadata".into(), json!({}));
            }
            Some(Value::Object(meta)) => {
                for k in [
                    "name",
                    "generateName",
                    "namespace",
                    "resourceVersion",
                    "uid",
                ] {
                    if let Some(v) = meta.get(k).filter(|v| !v.is_string() && !v.is_null()) {
                        return Err(cannot(
                            patch::go_json_type(v),
                            &format!("ObjectMeta.metadata.{k}"),
                            "string",
                        ));
                    }
                }
                for k in ["labels", "annotations"] {
                    match meta.get(k) {
                        None | Some(Value::Null) => {}
                        Some(Value::Object(map)) => {
                            if let Some(v) = map.values().find(|v| !v.is_string()) {
                                return Err(cannot(
                                    patch::go_json_type(v),
                                    &format!("ObjectMeta.metadata.{k}"),
                                    "string",
                                ));
                            }
                        }
                        Some(v) => {
                            return Err(cannot(
                                patch::go_json_type(v),
                                &format!("ObjectMeta.metadata.{k}"),
                                "map[string]string",
                            ))
                        }
                    }
                }
            }
            Some(v) => {
                return Err(cannot(
                    patch::go_json_type(v),
                    &format!("{}.metadata", self.rt.kind),
                    "v1.ObjectMeta",
                ))
            }
        }
        // Nulls in ObjectMeta decode to zero values.
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.retain(|_, v| !v.is_null());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries() {
        assert_eq!(summarize(b"{not json"), "{not json");
        assert_eq!(summarize(b"[]"), "5b5d");
        assert_eq!(summarize(b""), "<empty>");
    }
}

//! The three non-apply patch formats, applied to JSON objects.
//!
//! - JSON merge patch (RFC 7386) with the quirks of `gopkg.in/evanphx/json-patch.v4`
//!   `MergePatch`, which kube-apiserver uses (nulls inside newly set objects are pruned).
//! - JSON patch (RFC 6902) re-implemented after json-patch.v4 `Patch.Apply` so error
//!   texts match the apiserver's (`testing value /x failed: test failed`, `error in remove
//!   for path: '/x': Unable to remove nonexistent key: x: missing value`, …).
//! - Strategic merge patch, *without* the Go structs' schema: a merge patch that also
//!   honours the directives kubectl sends (`$patch`, `$retainKeys`,
//!   `$setElementOrder/<f>`, `$deleteFromPrimitiveList/<f>`) and merges the well-known
//!   keyed lists (`containers` by `name`, `ports` by `containerPort`/`port`, …) by key
//!   as the `patchMergeKey` tags in k8s.io/api do. See docs/simulator.md.

// metav1.Status is the error type of every write step (as in the store API); boxing it
// would only add noise to the happy path, which it never slows.
#![allow(clippy::result_large_err)]

use serde_json::{Map, Value};

/// RFC 7386 merge, as json-patch.v4 `mergeDocs(doc, patch, false)` does it.
pub fn merge_patch(doc: &mut Value, patch: &Value) {
    match (doc.as_object_mut(), patch.as_object()) {
        (Some(d), Some(p)) => merge_objects(d, p),
        _ => *doc = prune_nulls(patch.clone()),
    }
}

fn merge_objects(doc: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (k, v) in patch {
        if v.is_null() {
            doc.remove(k);
            continue;
        }
        match (doc.get_mut(k), v) {
            (Some(existing @ Value::Object(_)), Value::Object(p)) => {
                merge_objects(existing.as_object_mut().expect("object"), p)
            }
            _ => {
                doc.insert(k.clone(), prune_nulls(v.clone()));
            }
        }
    }
}

/// `pruneNulls` / `pruneAryNulls`: null members of objects disappear, recursively.
fn prune_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, prune_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(prune_nulls).collect()),
        other => other,
    }
}

/// Why a JSON patch failed, split the way patch.go maps it: a patch document that does
/// not decode is a 400, an operation that does not apply is a 422.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonPatchError {
    Decode(String),
    Apply(String),
}

/// The JSON Pointer tokens of `path`, unescaped (`~1` → `/`, `~0` → `~`).
fn pointer_tokens(path: &str) -> Option<Vec<String>> {
    // json-patch.v4 `findObject`: a path without a leading '/' finds no container.
    let rest = path.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect(),
    )
}

/// The container (object or array) a path's last token refers into.
fn find_container<'a>(doc: &'a mut Value, tokens: &[String]) -> Option<&'a mut Value> {
    let mut cur = doc;
    for t in &tokens[..tokens.len() - 1] {
        cur = match cur {
            Value::Object(m) => m.get_mut(t)?,
            Value::Array(a) => {
                let i: usize = t.parse().ok()?;
                a.get_mut(i)?
            }
            _ => return None,
        };
        if !(cur.is_object() || cur.is_array()) {
            return None;
        }
    }
    Some(cur)
}

fn get_op_str<'a>(op: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    op.get(key).and_then(Value::as_str)
}

const MISSING: &str = "missing value";

/// Applies an RFC 6902 patch document (`body`) to `doc`.
pub fn json_patch(doc: &mut Value, body: &[u8]) -> Result<(), JsonPatchError> {
    if let Some(e) = super::gojson::syntax_error(body) {
        return Err(JsonPatchError::Decode(e));
    }
    let parsed: Value =
        serde_json::from_slice(body).map_err(|e| JsonPatchError::Decode(e.to_string()))?;
    let ops = match parsed {
        Value::Array(ops) => ops,
        other => {
            return Err(JsonPatchError::Decode(format!(
                "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
                go_json_type(&other)
            )))
        }
    };
    let mut ops_maps = Vec::with_capacity(ops.len());
    for op in ops {
        match op {
            Value::Object(m) => ops_maps.push(m),
            other => {
                return Err(JsonPatchError::Decode(format!(
                    "json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
                    go_json_type(&other)
                )))
            }
        }
    }
    for op in &ops_maps {
        apply_op(doc, op).map_err(JsonPatchError::Apply)?;
    }
    Ok(())
}

/// The word Go's `UnmarshalTypeError` uses for a JSON value.
pub fn go_json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn apply_op(doc: &mut Value, op: &Map<String, Value>) -> Result<(), String> {
    let kind = get_op_str(op, "op").unwrap_or("unknown");
    let path = get_op_str(op, "path");
    match kind {
        "add" => {
            let path = path.ok_or(format!("add operation failed to decode path: {MISSING}"))?;
            let value = op.get("value").cloned().unwrap_or(Value::Null);
            add(doc, path, value)
        }
        "remove" => {
            let path = path.ok_or(format!("remove operation failed to decode path: {MISSING}"))?;
            remove(doc, path).map(|_| ())
        }
        "replace" => {
            let path = path.ok_or(format!(
                "replace operation failed to decode path: {MISSING}"
            ))?;
            let value = op.get("value").cloned().unwrap_or(Value::Null);
            replace(doc, path, value)
        }
        "move" => {
            let from = get_op_str(op, "from")
                .ok_or(format!("move operation failed to decode from: {MISSING}"))?;
            let path = path.ok_or(format!("move operation failed to decode path: {MISSING}"))?;
            let v = take(doc, from, "move")?;
            add(doc, path, v).map_err(|e| format!("error in move for path: '{path}': {e}"))
        }
        "copy" => {
            let from = get_op_str(op, "from")
                .ok_or(format!("copy operation failed to decode from: {MISSING}"))?;
            let path = path.ok_or(format!("copy operation failed to decode path: {MISSING}"))?;
            let v = get(doc, from).ok_or(format!(
                "copy operation does not apply: doc is missing from path: {from}: {MISSING}"
            ))?;
            add(doc, path, v).map_err(|e| format!("error in copy for path: '{path}': {e}"))
        }
        "test" => {
            let path = path.ok_or(format!("test operation failed to decode path: {MISSING}"))?;
            let want = op.get("value").cloned().unwrap_or(Value::Null);
            let tokens = pointer_tokens(path);
            if path.is_empty() {
                return if *doc == want {
                    Ok(())
                } else {
                    Err(format!("testing value {path} failed: test failed"))
                };
            }
            let Some(tokens) = tokens else {
                return Err(format!(
                    "test operation does not apply: is missing path: {path}: {MISSING}"
                ));
            };
            if find_container(doc, &tokens).is_none() {
                return Err(format!(
                    "test operation does not apply: is missing path: {path}: {MISSING}"
                ));
            }
            let got = get(doc, path).unwrap_or(Value::Null);
            if got == want {
                Ok(())
            } else {
                Err(format!("testing value {path} failed: test failed"))
            }
        }
        other => Err(format!("Unexpected kind: {other}")),
    }
}

fn get(doc: &Value, path: &str) -> Option<Value> {
    if path.is_empty() {
        return Some(doc.clone());
    }
    doc.pointer(path).cloned()
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let missing =
        || format!("add operation does not apply: doc is missing path: \"{path}\": {MISSING}");
    let tokens = pointer_tokens(path).ok_or_else(missing)?;
    let con = find_container(doc, &tokens).ok_or_else(missing)?;
    let key = tokens.last().expect("non-empty");
    match con {
        Value::Object(m) => {
            m.insert(key.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            if key == "-" {
                a.push(value);
                return Ok(());
            }
            match key.parse::<i64>() {
                Ok(i) if i >= 0 && (i as usize) <= a.len() => {
                    a.insert(i as usize, value);
                    Ok(())
                }
                Ok(i) if i < 0 && i >= -(a.len() as i64) => {
                    let at = (a.len() as i64 + i) as usize;
                    a.insert(at, value);
                    Ok(())
                }
                Ok(i) => Err(format!(
                    "error in add for path: '{path}': Unable to access invalid index: {i}: invalid index referenced"
                )),
                Err(_) => Err(format!(
                    "error in add for path: '{path}': value was rejected for an array: strconv.Atoi: parsing {}: invalid syntax",
                    super::validate::go_quote(key)
                )),
            }
        }
        _ => Err(missing()),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    take(doc, path, "remove")
}

/// Removes and returns the value at `path`; `verb` names the operation in errors.
fn take(doc: &mut Value, path: &str, verb: &str) -> Result<Value, String> {
    let from_word = if verb == "move" { "from path" } else { "path" };
    let missing = || {
        format!(
            "{verb} operation does not apply: doc is missing {from_word}: \"{path}\": {MISSING}"
        )
    };
    let tokens = pointer_tokens(path).ok_or_else(missing)?;
    let con = find_container(doc, &tokens).ok_or_else(missing)?;
    let key = tokens.last().expect("non-empty");
    match con {
        Value::Object(m) => m.shift_remove(key).ok_or(format!(
            "error in {verb} for path: '{path}': Unable to remove nonexistent key: {key}: {MISSING}"
        )),
        Value::Array(a) => match key.parse::<usize>() {
            Ok(i) if i < a.len() => Ok(a.remove(i)),
            _ => Err(format!(
                "error in {verb} for path: '{path}': Unable to access invalid index: {key}: invalid index referenced"
            )),
        },
        _ => Err(missing()),
    }
}

fn replace(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let missing =
        || format!("replace operation does not apply: doc is missing path: {path}: {MISSING}");
    let tokens = pointer_tokens(path).ok_or_else(missing)?;
    let con = find_container(doc, &tokens).ok_or_else(missing)?;
    let key = tokens.last().expect("non-empty");
    match con {
        // json-patch.v4's partialDoc.get never fails, so replacing a missing key of an
        // object sets it, exactly like add.
        Value::Object(m) => {
            m.insert(key.clone(), value);
            Ok(())
        }
        Value::Array(a) => match key.parse::<usize>() {
            Ok(i) if i < a.len() => {
                a[i] = value;
                Ok(())
            }
            _ => Err(format!(
                "replace operation does not apply: doc is missing key: {path}: {MISSING}"
            )),
        },
        _ => Err(missing()),
    }
}

/// The `patchMergeKey` of well-known keyed lists in k8s.io/api, looked up by field name
/// (and, for `ports`, by which key the elements carry).
fn merge_key(field: &str, items: &[Value]) -> Option<&'static str> {
    let has = |k: &str| items.iter().any(|i| i.get(k).is_some());
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims" => Some("name"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "ports" if has("containerPort") => Some("containerPort"),
        "ports" => Some("port"),
        "hostAliases" => Some("ip"),
        "conditions" | "addresses" => Some("type"),
        "ownerReferences" => Some("uid"),
        "taints" => Some("key"),
        "topologySpreadConstraints" => Some("topologyKey"),
        _ => None,
    }
}

/// Lists of scalars whose patch strategy is `merge` (`metadata.finalizers`).
fn is_merging_primitive_list(field: &str) -> bool {
    field == "finalizers"
}

/// Why a strategic merge patch was rejected (the apiserver answers these with 422/400).
pub type SmpError = String;

/// Applies a strategic merge patch to `doc` (see the module comment for the scope).
pub fn strategic_merge(doc: &mut Value, patch: &Value) -> Result<(), SmpError> {
    match (doc.as_object_mut(), patch.as_object()) {
        (Some(d), Some(p)) => smp_objects(d, p),
        _ => {
            *doc = strip_directives(patch.clone());
            Ok(())
        }
    }
}

fn smp_objects(doc: &mut Map<String, Value>, patch: &Map<String, Value>) -> Result<(), SmpError> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut fresh = patch.clone();
            fresh.remove("$patch");
            *doc = match strip_directives(Value::Object(fresh)) {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            return Ok(());
        }
        Some("delete") => {
            doc.clear();
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => return Err(format!("Unknown patch type: {other}")),
    }
    for (k, v) in patch {
        if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(del)) = (doc.get_mut(field), v.as_array()) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        if v.is_null() {
            doc.remove(k);
            continue;
        }
        match (doc.get_mut(k), v) {
            (Some(Value::Object(d)), Value::Object(p)) => {
                if p.get("$patch").and_then(Value::as_str) == Some("delete") {
                    doc.remove(k);
                } else {
                    smp_objects(d, p)?;
                }
            }
            (Some(Value::Array(d)), Value::Array(p)) => {
                smp_list(k, d, p)?;
            }
            _ => {
                if v.get("$patch").and_then(Value::as_str) == Some("delete") {
                    doc.remove(k);
                } else {
                    let mut fresh = strip_directives(v.clone());
                    if let Value::Array(items) = &mut fresh {
                        items.retain(|i| !i.is_null());
                    }
                    doc.insert(k.clone(), fresh);
                }
            }
        }
    }
    if let Some(order) = patch
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix("$setElementOrder/")
                .map(|f| (f.to_string(), v.clone()))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .next()
    {
        reorder(doc, &order.0, &order.1);
    }
    if let Some(Value::Array(keep)) = patch.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        doc.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(())
}

fn smp_list(field: &str, doc: &mut Vec<Value>, patch: &[Value]) -> Result<(), SmpError> {
    if patch
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *doc = patch
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .map(|i| strip_directives(i.clone()))
            .collect();
        return Ok(());
    }
    if is_merging_primitive_list(field) && patch.iter().all(|i| !i.is_object()) {
        for item in patch {
            if !doc.contains(item) {
                doc.push(item.clone());
            }
        }
        return Ok(());
    }
    let Some(key) = merge_key(field, patch) else {
        *doc = patch.iter().map(|i| strip_directives(i.clone())).collect();
        return Ok(());
    };
    for item in patch {
        let Some(obj) = item.as_object() else {
            return Err(format!(
                "unable to find api field in struct for the key: {field}"
            ));
        };
        let Some(kv) = obj.get(key) else {
            return Err(format!(
                "map: {} does not contain declared merge key: {key}",
                go_map(obj)
            ));
        };
        let pos = doc.iter().position(|d| d.get(key) == Some(kv));
        let deleting = obj.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, deleting) {
            (Some(i), true) => {
                doc.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => {
                if let Value::Object(d) = &mut doc[i] {
                    smp_objects(d, obj)?;
                }
            }
            (None, false) => doc.push(strip_directives(item.clone())),
        }
    }
    Ok(())
}

/// Orders `doc[field]` as `$setElementOrder/field` lists it; unlisted items keep their
/// relative order after the listed ones.
fn reorder(doc: &mut Map<String, Value>, field: &str, order: &Value) {
    let (Some(Value::Array(items)), Some(order)) = (doc.get_mut(field), order.as_array()) else {
        return;
    };
    let key = merge_key(field, order);
    let rank = |item: &Value| -> usize {
        order
            .iter()
            .position(|o| match (key, o) {
                (Some(k), Value::Object(om)) => om.get(k).is_some() && item.get(k) == om.get(k),
                _ => o == item,
            })
            .unwrap_or(usize::MAX)
    };
    items.sort_by_key(|i| rank(i));
}

/// Removes every `$`-directive key from a value that is being set wholesale.
fn strip_directives(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
                .map(|(k, v)| (k, strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(strip_directives).collect()),
        other => other,
    }
}

/// Go's `%v` of a `map[string]interface{}` (keys sorted), for SMP error texts.
fn go_map(m: &Map<String, Value>) -> String {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    let parts: Vec<String> = keys
        .iter()
        .map(|k| {
            let v = &m[k.as_str()];
            let s = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!("{k}:{s}")
        })
        .collect();
    format!("map[{}]", parts.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(
            &mut doc,
            &json!({"a": "z", "c": {"f": null}, "l": [3], "n": {"x": null, "y": 1}}),
        );
        assert_eq!(
            doc,
            json!({"a": "z", "c": {"d": "e"}, "l": [3], "n": {"y": 1}})
        );
    }

    #[test]
    fn json_patch_ops_and_errors() {
        let mut doc = json!({"metadata": {"labels": {"a": "1"}}, "l": [1, 2]});
        json_patch(
            &mut doc,
            br#"[{"op":"add","path":"/metadata/labels/b","value":"2"},
                 {"op":"remove","path":"/metadata/labels/a"},
                 {"op":"add","path":"/l/-","value":3},
                 {"op":"replace","path":"/l/0","value":0},
                 {"op":"test","path":"/l/2","value":3},
                 {"op":"copy","from":"/l/2","path":"/c"},
                 {"op":"move","from":"/c","path":"/m"}]"#,
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({"metadata": {"labels": {"b": "2"}}, "l": [0, 2, 3], "m": 3})
        );
        let e = json_patch(&mut doc, br#"[{"op":"test","path":"/m","value":4}]"#).unwrap_err();
        assert_eq!(
            e,
            JsonPatchError::Apply("testing value /m failed: test failed".into())
        );
        let e = json_patch(
            &mut doc,
            br#"[{"op":"remove","path":"/metadata/labels/x"}]"#,
        )
        .unwrap_err();
        assert_eq!(
            e,
            JsonPatchError::Apply(
                "error in remove for path: '/metadata/labels/x': Unable to remove nonexistent key: x: missing value".into()
            )
        );
        let e = json_patch(&mut doc, br#"[{"op":"add","path":"/x/y","value":1}]"#).unwrap_err();
        assert_eq!(
            e,
            JsonPatchError::Apply(
                "add operation does not apply: doc is missing path: \"/x/y\": missing value".into()
            )
        );
        let e = json_patch(&mut doc, br#"[{"op":"bogus","path":"/x"}]"#).unwrap_err();
        assert_eq!(e, JsonPatchError::Apply("Unexpected kind: bogus".into()));
        let e = json_patch(&mut doc, br#"{"op":"add"}"#).unwrap_err();
        assert_eq!(
            e,
            JsonPatchError::Decode(
                "json: cannot unmarshal object into Go value of type jsonpatch.Patch".into()
            )
        );
        let e = json_patch(&mut doc, b"[").unwrap_err();
        assert_eq!(
            e,
            JsonPatchError::Decode("unexpected end of JSON input".into())
        );
    }

    #[test]
    fn strategic_merge_keyed_lists_and_directives() {
        let mut doc = json!({"metadata": {"labels": {"a": "1"}, "finalizers": ["x"]},
            "spec": {"containers": [
                {"name": "web", "image": "nginx:1", "ports": [{"containerPort": 80}]},
                {"name": "side", "image": "busybox"}]}});
        strategic_merge(
            &mut doc,
            &json!({"metadata": {"labels": {"b": "2"}, "finalizers": ["y"]},
                "spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "web"}],
                         "containers": [{"name": "web", "image": "nginx:2"}]}}),
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x", "y"]},
            "spec": {"containers": [
                {"name": "side", "image": "busybox"},
                {"name": "web", "image": "nginx:2", "ports": [{"containerPort": 80}]}]}})
        );
        strategic_merge(
            &mut doc,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]},
                "spec": {"containers": [{"name": "side", "$patch": "delete"}]}}),
        )
        .unwrap();
        assert_eq!(doc["metadata"]["finalizers"], json!(["y"]));
        assert_eq!(doc["spec"]["containers"].as_array().unwrap().len(), 1);
        strategic_merge(
            &mut doc,
            &json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        )
        .unwrap();
        assert_eq!(doc["spec"]["strategy"], json!({"type": "Recreate"}));
    }
}

//! `metadata.managedFields` and server-side apply, without the OpenAPI schema.
//!
//! Field sets are computed from the JSON itself (k8s.io/apimachinery
//! `pkg/util/managedfields` does it from the typed schema): objects recurse by field
//! (`f:name`), lists with a well-known merge key become keyed items (`k:{"name":"web"}`),
//! `metadata.finalizers` becomes a set (`v:"x"`), every other list is atomic. That is
//! enough for `kubectl apply --server-side` (create, merge, removal of fields a manager
//! stopped applying, conflicts with other managers and `force`).
//!
//! The conflict error follows `managedfields/internal/conflict.go` (`NewConflictError`,
//! `getConflictMessage`, `printManager`).

// metav1.Status is the error type of every write step (as in the store API); boxing it
// would only add noise to the happy path, which it never slows.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use crate::status::{Cause, Status};

/// One path element in fieldsV1 notation: `f:spec`, `k:{"name":"web"}`, `v:"x"`, or `.`.
pub type Path = Vec<String>;
pub type FieldSet = BTreeSet<Path>;

/// Fields that identify the object or are owned by the system; never in managed sets
/// (structured-merge-diff's `ignoredFields` plus the apiserver's reset fields).
const IGNORED_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
];

fn merge_key_for(field: &str, items: &[Value]) -> Option<&'static str> {
    let has = |k: &str| items.iter().all(|i| i.get(k).is_some());
    let key = match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims" => "name",
        "volumeMounts" => "mountPath",
        "ports" if has("containerPort") => "containerPort",
        "ports" => "port",
        "conditions" | "addresses" => "type",
        "ownerReferences" => "uid",
        "taints" => "key",
        _ => return None,
    };
    (!items.is_empty() && items.iter().all(|i| i.is_object()) && has(key)).then_some(key)
}

fn key_token(key: &str, v: &Value) -> String {
    format!("k:{}", json!({ key: v }))
}

/// The managed field set of an object (or an applied configuration).
/// `with_status`: include `.status` (false for types whose status is a subresource).
pub fn field_set(obj: &Value, with_status: bool) -> FieldSet {
    let mut out = FieldSet::new();
    let Some(m) = obj.as_object() else {
        return out;
    };
    for (k, v) in m {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "status" if !with_status => {}
            "metadata" => {
                if let Some(meta) = v.as_object() {
                    for (mk, mv) in meta {
                        if IGNORED_META.contains(&mk.as_str()) {
                            continue;
                        }
                        collect(
                            mv,
                            vec!["f:metadata".into(), format!("f:{mk}")],
                            mk,
                            &mut out,
                        );
                    }
                }
            }
            _ => collect(v, vec![format!("f:{k}")], k, &mut out),
        }
    }
    out
}

fn collect(v: &Value, prefix: Path, field: &str, out: &mut FieldSet) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                let mut p = prefix.clone();
                p.push(format!("f:{k}"));
                collect(child, p, k, out);
            }
        }
        Value::Array(items) if field == "finalizers" && items.iter().all(Value::is_string) => {
            for i in items {
                let mut p = prefix.clone();
                p.push(format!("v:{i}"));
                out.insert(p);
            }
            if items.is_empty() {
                out.insert(prefix);
            }
        }
        Value::Array(items) => match merge_key_for(field, items) {
            Some(key) => {
                for item in items {
                    let mut p = prefix.clone();
                    p.push(key_token(key, &item[key]));
                    let mut dot = p.clone();
                    dot.push(".".into());
                    out.insert(dot);
                    if let Some(m) = item.as_object() {
                        for (k, child) in m {
                            let mut cp = p.clone();
                            cp.push(format!("f:{k}"));
                            collect(child, cp, k, out);
                        }
                    }
                }
            }
            None => {
                out.insert(prefix);
            }
        },
        _ => {
            out.insert(prefix);
        }
    }
}

/// Sort rank of a fieldsV1 key: "." first, then fields, keys, values (fieldpath order).
fn rank(k: &str) -> (u8, &str) {
    match k.as_bytes().first() {
        Some(b'.') => (0, k),
        Some(b'f') => (1, k),
        Some(b'k') => (2, k),
        Some(b'v') => (3, k),
        _ => (4, k),
    }
}

/// Renders a set as the `fieldsV1` JSON object.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    #[derive(Default)]
    struct Node(BTreeMap<String, Node>);
    let mut root = Node::default();
    for p in set {
        let mut n = &mut root;
        for t in p {
            n = n.0.entry(t.clone()).or_default();
        }
    }
    fn render(n: &Node) -> Value {
        let mut keys: Vec<&String> = n.0.keys().collect();
        keys.sort_by(|a, b| rank(a).cmp(&rank(b)));
        let mut m = Map::new();
        for k in keys {
            m.insert(k.clone(), render(&n.0[k]));
        }
        Value::Object(m)
    }
    render(&root)
}

/// Parses a `fieldsV1` object back into a set.
pub fn from_fields_v1(v: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    fn walk(v: &Value, prefix: &mut Path, out: &mut FieldSet) {
        match v.as_object() {
            Some(m) if !m.is_empty() => {
                for (k, child) in m {
                    prefix.push(k.clone());
                    walk(child, prefix, out);
                    prefix.pop();
                }
            }
            _ => {
                if !prefix.is_empty() {
                    out.insert(prefix.clone());
                }
            }
        }
    }
    walk(v, &mut Vec::new(), &mut out);
    out
}

/// `fieldpath.Path.String()`: `.spec.containers[name="web"].image`.
pub fn path_string(p: &Path) -> String {
    let mut s = String::new();
    for t in p {
        if let Some(f) = t.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = t.strip_prefix("k:") {
            if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(k) {
                let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
                s.push_str(&format!("[{}]", parts.join(",")));
            }
        } else if let Some(v) = t.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        }
    }
    s
}

/// The value at a path (None when absent). `.` tokens are skipped.
fn value_at<'a>(obj: &'a Value, p: &Path) -> Option<&'a Value> {
    let mut cur = obj;
    for t in p {
        if t == "." {
            continue;
        }
        if let Some(f) = t.strip_prefix("f:") {
            cur = cur.get(f)?;
        } else if let Some(k) = t.strip_prefix("k:") {
            let want: Map<String, Value> = serde_json::from_str(k).ok()?;
            cur = cur
                .as_array()?
                .iter()
                .find(|i| want.iter().all(|(k, v)| i.get(k) == Some(v)))?;
        } else if let Some(v) = t.strip_prefix("v:") {
            let want: Value = serde_json::from_str(v).ok()?;
            cur = cur.as_array()?.iter().find(|i| **i == want)?;
        } else {
            return None;
        }
    }
    Some(cur)
}

/// Removes the value at a path (a field, a keyed item, a set value).
fn remove_at(obj: &mut Value, p: &Path) {
    let p: Vec<&String> = p.iter().filter(|t| *t != ".").collect();
    let Some((last, parents)) = p.split_last() else {
        return;
    };
    let mut cur = obj;
    for t in parents {
        let next = if let Some(f) = t.strip_prefix("f:") {
            cur.get_mut(f)
        } else if let Some(k) = t.strip_prefix("k:") {
            let Ok(want) = serde_json::from_str::<Map<String, Value>>(k) else {
                return;
            };
            cur.as_array_mut().and_then(|a| {
                a.iter_mut()
                    .find(|i| want.iter().all(|(k, v)| i.get(k) == Some(v)))
            })
        } else {
            None
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let Some(f) = last.strip_prefix("f:") {
        if let Some(m) = cur.as_object_mut() {
            m.shift_remove(f);
        }
    } else if let Some(k) = last.strip_prefix("k:") {
        if let (Ok(want), Some(a)) = (
            serde_json::from_str::<Map<String, Value>>(k),
            cur.as_array_mut(),
        ) {
            a.retain(|i| !want.iter().all(|(k, v)| i.get(k) == Some(v)));
        }
    } else if let Some(v) = last.strip_prefix("v:") {
        if let (Ok(want), Some(a)) = (serde_json::from_str::<Value>(v), cur.as_array_mut()) {
            a.retain(|i| *i != want);
        }
    }
}

/// Merges an applied configuration into the live object: objects by field, keyed lists
/// by key, everything else replaced.
fn merge_applied(live: &mut Value, applied: &Value, field: &str) {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) => {
            for (k, av) in a {
                match l.get_mut(k) {
                    Some(lv) => merge_applied(lv, av, k),
                    None => {
                        l.insert(k.clone(), av.clone());
                    }
                }
            }
        }
        (Value::Array(l), Value::Array(a)) if field == "finalizers" => {
            for i in a {
                if !l.contains(i) {
                    l.push(i.clone());
                }
            }
        }
        (Value::Array(l), Value::Array(a)) => match merge_key_for(field, a) {
            Some(key) if l.iter().all(|i| i.get(key).is_some()) => {
                for ai in a {
                    match l.iter_mut().find(|li| li.get(key) == ai.get(key)) {
                        Some(li) => merge_applied(li, ai, ""),
                        None => l.push(ai.clone()),
                    }
                }
            }
            _ => *l = a.clone(),
        },
        (l, a) => *l = a.clone(),
    }
}

/// One `managedFields` entry, decoded.
#[derive(Debug, Clone)]
pub struct Entry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

impl Entry {
    fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), json!(self.manager));
        m.insert("operation".into(), json!(self.operation));
        m.insert("apiVersion".into(), json!(self.api_version));
        if let Some(t) = &self.time {
            m.insert("time".into(), json!(t));
        }
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), to_fields_v1(&self.fields));
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), json!(s));
        }
        Value::Object(m)
    }

    fn same_owner(&self, manager: &str, operation: &str, sub: Option<&str>) -> bool {
        self.manager == manager && self.operation == operation && self.subresource.as_deref() == sub
    }

    /// `printManager`.
    fn describe(&self) -> String {
        let mut s = crate::sim::validate::go_quote(&self.manager);
        if let Some(sr) = &self.subresource {
            s.push_str(&format!(
                " with subresource {}",
                crate::sim::validate::go_quote(sr)
            ));
        }
        if self.operation == "Update" {
            match &self.time {
                Some(t) => s.push_str(&format!(" using {} at {t}", self.api_version)),
                None => s.push_str(&format!(" using {}", self.api_version)),
            }
        }
        s
    }
}

pub fn entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| Entry {
                    manager: e["manager"].as_str().unwrap_or_default().to_string(),
                    operation: e["operation"].as_str().unwrap_or_default().to_string(),
                    api_version: e["apiVersion"].as_str().unwrap_or_default().to_string(),
                    time: e["time"].as_str().map(String::from),
                    subresource: e["subresource"].as_str().map(String::from),
                    fields: from_fields_v1(&e["fieldsV1"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn set_entries(obj: &mut Value, entries: &[Entry]) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        let list: Vec<Value> = entries
            .iter()
            .filter(|e| !e.fields.is_empty())
            .map(Entry::to_value)
            .collect();
        if list.is_empty() {
            meta.shift_remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// Who is writing, for managedFields.
#[derive(Debug, Clone)]
pub struct Writer<'a> {
    pub manager: &'a str,
    pub api_version: &'a str,
    pub time: &'a str,
    pub subresource: Option<&'a str>,
    /// Whether `.status` counts (false when status is a separate subresource and this is
    /// a write to the main resource).
    pub with_status: bool,
}

/// Records a non-apply write (create, update, patch) in `new`'s managedFields, given the
/// previous object (`None` for a create). Like the apiserver's `Update` operation: the
/// writer gains the fields it set or changed, fields that vanished leave every set.
/// Timestamps of unchanged entries are kept so identical writes stay no-ops.
pub fn record_update(old: Option<&Value>, new: &mut Value, w: &Writer<'_>, operation: &str) {
    let mut list = match old {
        Some(o) => entries(o),
        None => Vec::new(),
    };
    let new_fields = field_set(new, w.with_status || w.subresource == Some("status"));
    let changed: FieldSet = match old {
        None => new_fields.clone(),
        Some(o) => new_fields
            .iter()
            .filter(|p| value_at(o, p) != value_at(new, p) || value_at(o, p).is_none())
            .cloned()
            .collect(),
    };
    for e in &mut list {
        e.fields
            .retain(|p| new_fields.contains(p) || !applies_to(w, p));
    }
    let mine = list
        .iter()
        .position(|e| e.same_owner(w.manager, operation, w.subresource));
    if changed.is_empty() && mine.is_none() {
        set_entries(new, &list);
        return;
    }
    // Changed fields move to the writer.
    for e in &mut list {
        if !e.same_owner(w.manager, operation, w.subresource) {
            e.fields.retain(|p| !changed.contains(p));
        }
    }
    match mine {
        Some(i) => {
            let before = list[i].fields.clone();
            list[i].fields.extend(changed);
            if list[i].fields != before {
                list[i].time = Some(w.time.to_string());
                list[i].api_version = w.api_version.to_string();
            }
        }
        None => list.push(Entry {
            manager: w.manager.to_string(),
            operation: operation.to_string(),
            api_version: w.api_version.to_string(),
            time: Some(w.time.to_string()),
            subresource: w.subresource.map(String::from),
            fields: changed,
        }),
    }
    set_entries(new, &list);
}

/// Whether `p` is in the part of the object this write could touch (status paths are
/// left alone by main-resource writes and vice versa).
fn applies_to(w: &Writer<'_>, p: &Path) -> bool {
    let is_status = p.first().map(String::as_str) == Some("f:status");
    match w.subresource {
        Some("status") => is_status,
        _ => w.with_status || !is_status,
    }
}

/// A server-side apply: merges `applied` into `live` (or creates from it) on behalf of
/// `w.manager`. Returns the new object, or 409 Conflict listing fields other managers own
/// with different values (unless `force`).
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    w: &Writer<'_>,
    force: bool,
) -> Result<Value, Status> {
    let applied_set = field_set(applied, w.with_status || w.subresource == Some("status"));
    let Some(live) = live else {
        let mut obj = applied.clone();
        let entry = Entry {
            manager: w.manager.into(),
            operation: "Apply".into(),
            api_version: w.api_version.into(),
            time: Some(w.time.into()),
            subresource: w.subresource.map(String::from),
            fields: applied_set,
        };
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.shift_remove("managedFields");
        }
        set_entries(&mut obj, &[entry]);
        return Ok(obj);
    };
    let mut list = entries(live);
    let mut conflicts: Vec<(usize, Path)> = Vec::new();
    for (i, e) in list.iter().enumerate() {
        if e.same_owner(w.manager, "Apply", w.subresource) {
            continue;
        }
        for p in &e.fields {
            if p.last().map(String::as_str) == Some(".") {
                continue;
            }
            if applied_set.contains(p) && value_at(live, p) != value_at(applied, p) {
                conflicts.push((i, p.clone()));
            }
        }
    }
    if !conflicts.is_empty() {
        if !force {
            return Err(conflict_error(&list, &conflicts));
        }
        for (i, p) in &conflicts {
            list[*i].fields.remove(p);
        }
    }
    let mine = list
        .iter()
        .position(|e| e.same_owner(w.manager, "Apply", w.subresource));
    let previous: FieldSet = mine.map(|i| list[i].fields.clone()).unwrap_or_default();
    let mut out = live.clone();
    // Fields this manager applied before and no longer applies, and nobody else owns, go.
    for p in previous.difference(&applied_set) {
        let owned_elsewhere = list.iter().enumerate().any(|(i, e)| {
            Some(i) != mine && (e.fields.contains(p) || e.fields.iter().any(|q| q.starts_with(p)))
        });
        if !owned_elsewhere && p.last().map(String::as_str) != Some(".") {
            remove_at(&mut out, p);
        } else if !owned_elsewhere {
            let mut item = p.clone();
            item.pop();
            remove_at(&mut out, &item);
        }
    }
    let mut cfg = applied.clone();
    if let Some(m) = cfg.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in IGNORED_META {
            m.shift_remove(*k);
        }
    }
    merge_applied(&mut out, &cfg, "");
    match mine {
        Some(i) => {
            if list[i].fields != applied_set {
                list[i].fields = applied_set;
                list[i].time = Some(w.time.into());
            }
            list[i].api_version = w.api_version.into();
        }
        None => list.push(Entry {
            manager: w.manager.into(),
            operation: "Apply".into(),
            api_version: w.api_version.into(),
            time: Some(w.time.into()),
            subresource: w.subresource.map(String::from),
            fields: applied_set,
        }),
    }
    set_entries(&mut out, &list);
    Ok(out)
}

/// `NewConflictError` → `errors.NewApplyConflict`: 409, reason Conflict, one
/// `FieldManagerConflict` cause per field.
fn conflict_error(list: &[Entry], conflicts: &[(usize, Path)]) -> Status {
    let message = if conflicts.len() == 1 {
        let (i, p) = &conflicts[0];
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            list[*i].describe(),
            path_string(p)
        )
    } else {
        let mut by_mgr: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (i, p) in conflicts {
            by_mgr
                .entry(list[*i].describe())
                .or_default()
                .push(path_string(p));
        }
        let mut lines = Vec::new();
        for (m, paths) in by_mgr {
            lines.push(format!("conflicts with {m}:"));
            for p in paths {
                lines.push(format!("- {p}"));
            }
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    let mut s = Status::new(409, "Conflict", message);
    s.with_details = true;
    s.causes = conflicts
        .iter()
        .map(|(i, p)| Cause {
            reason: "FieldManagerConflict".into(),
            message: format!("conflict with {}", list[*i].describe()),
            field: Some(path_string(p)),
        })
        .collect();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(manager: &str) -> Writer<'_> {
        Writer {
            manager,
            api_version: "apps/v1",
            time: "2026-01-01T00:00:00Z",
            subresource: None,
            with_status: false,
        }
    }

    #[test]
    fn fields_v1_shape() {
        let obj = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": "web"}, "finalizers": ["x"]},
            "spec": {"containers": [{"name": "web", "image": "nginx"}], "securityContext": {}},
            "status": {"phase": "Pending"}});
        let v = to_fields_v1(&field_set(&obj, false));
        assert_eq!(
            v,
            json!({"f:metadata": {"f:finalizers": {"v:\"x\"": {}}, "f:labels": {"f:app": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}},
                           "f:securityContext": {}}})
        );
        assert_eq!(from_fields_v1(&v), field_set(&obj, false));
    }

    #[test]
    fn apply_create_merge_remove_and_conflict() {
        let cfg1 = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"a": "1", "b": "2"}},
            "spec": {"replicas": 2}});
        let created = apply(None, &cfg1, &w("kubectl"), false).unwrap();
        assert_eq!(
            created["metadata"]["managedFields"][0]["operation"],
            "Apply"
        );
        // Drop label b: it disappears; replicas stays.
        let cfg2 = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"a": "1"}}, "spec": {"replicas": 2}});
        let out = apply(Some(&created), &cfg2, &w("kubectl"), false).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"a": "1"}));
        // Someone else updates replicas; applying a different value conflicts.
        let mut scaled = out.clone();
        scaled["spec"]["replicas"] = json!(5);
        record_update(Some(&out), &mut scaled, &w("kubectl-scale"), "Update");
        let cfg3 = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d"}, "spec": {"replicas": 3}});
        let err = apply(Some(&scaled), &cfg3, &w("other"), false).unwrap_err();
        assert_eq!(err.code, 409);
        assert_eq!(
            err.message,
            "Apply failed with 1 conflict: conflict with \"kubectl-scale\" using apps/v1 at 2026-01-01T00:00:00Z: .spec.replicas"
        );
        assert_eq!(err.causes[0].field.as_deref(), Some(".spec.replicas"));
        let forced = apply(Some(&scaled), &cfg3, &w("other"), true).unwrap();
        assert_eq!(forced["spec"]["replicas"], 3);
        // Re-applying the same config changes nothing.
        let again = apply(Some(&forced), &cfg3, &w("other"), false).unwrap();
        assert_eq!(again, forced);
    }
}

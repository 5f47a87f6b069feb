//! STUB owned by sim-api: `meta.k8s.io/v1` Table rendering for kubectl get.
//! Contract: `render_list(rt, items, list_meta) -> Value` (a Table for a list answer) and
//! `render_row_object(rt, obj) -> Value` (a one-row Table, the object of a watch event).

use std::sync::Arc;

use serde_json::{json, Value};

use crate::sim::resources::ResourceType;

pub fn render_list(_rt: &ResourceType, items: &[Arc<Value>], list_meta: Value) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": [{"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0}],
        "rows": items.iter().map(|o| json!({"cells": [o["metadata"]["name"].clone()], "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"].clone()}})).collect::<Vec<_>>(),
    })
}

pub fn render_row_object(rt: &ResourceType, obj: &Value) -> Value {
    let rv = obj["metadata"]["resourceVersion"].clone();
    render_list(rt, &[Arc::new(obj.clone())], json!({"resourceVersion": rv}))
}

//! Field selectors (apimachinery `pkg/fields`).

use serde_json::Value;

/// A parsed field selector. Empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    pub requirements: Vec<(String, bool, String)>,
}

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            if let Some((k, v)) = part.split_once("!=") {
                requirements.push((k.to_string(), false, v.to_string()));
            } else if let Some((k, v)) = part.split_once('=') {
                requirements.push((k.to_string(), true, v.trim_start_matches('=').to_string()));
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            }
        }
        Ok(Self { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Matches using `path_of(label)` to find the JSON path for each label.
    pub fn matches(&self, obj: &Value, path_of: impl Fn(&str) -> Option<&'static str>) -> bool {
        self.requirements.iter().all(|(k, eq, v)| {
            let got = path_of(k).map(|p| field_value(obj, p)).unwrap_or_default();
            (got == *v) == *eq
        })
    }
}

/// The string value of a dot-separated path, formatted like the apiserver's field sets
/// (strings as-is, booleans as "true"/"false", missing as "").
pub fn field_value(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for seg in path.split('.') {
        match cur.get(seg) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

//! Tables of custom resources: apiextensions-apiserver's
//! `pkg/registry/customresource/tableconvertor` over a CRD version's
//! `additionalPrinterColumns`.
//!
//! - Columns: `Name`, then one per printer column (name, type, format, priority, and the
//!   description, or `Custom resource definition column (in JSONPath format): <path>`).
//!   A version without columns gets `Age` (type `date`, `.metadata.creationTimestamp`;
//!   `serveDefaultColumnsIfEmpty` in the CRD handler).
//! - A column whose JSONPath does not parse ends the list: `tableconvertor.New` returns
//!   the convertor built so far with the error, and the handler serves it.
//! - Cells: the first value of the first result (missing keys allowed); nothing found or
//!   an evaluation error is `null`. `string` columns print the value as the JSONPath
//!   printer does (maps and lists as JSON); the other types go through
//!   `cellForJSONValue`: `integer` (int64, or a float truncated), `number` (float64),
//!   `boolean`, `date` (RFC 3339 → human age, `<invalid>` when it does not parse,
//!   `<unknown>` when empty); a value of another JSON type is `null`.

use jiff::Timestamp;
use serde_json::{json, Value};

use super::format::{human_duration, parse_time, seconds_between};
use super::jsonpath::{self, Found, JsonPath};
use super::{Column, Row, AGE_DESC, NAME};

/// One printer column with its parsed JSONPath.
#[derive(Debug, Clone)]
struct Printed {
    column: Column,
    path: JsonPath,
}

/// The columns of one CRD version.
#[derive(Debug, Clone)]
pub struct CustomColumns {
    columns: Vec<Printed>,
    /// Why the column list stops early, if it does.
    invalid: Option<String>,
}

impl CustomColumns {
    /// From a CRD version's `additionalPrinterColumns` (a JSON array, possibly absent).
    pub fn new(printer_columns: Option<&Value>) -> Self {
        let cols = printer_columns
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
            .cloned()
            .unwrap_or_else(|| {
                vec![
                    json!({"name": "Age", "type": "date", "description": AGE_DESC,
                            "jsonPath": ".metadata.creationTimestamp"}),
                ]
            });
        let mut out = Self {
            columns: Vec::new(),
            invalid: None,
        };
        for c in &cols {
            let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let path_text = s("jsonPath");
            let Ok(path) = JsonPath::parse(&format!("{{{path_text}}}")) else {
                out.invalid = Some(format!("unrecognized column definition {path_text:?}"));
                break;
            };
            let description = match s("description") {
                d if d.is_empty() => {
                    format!("Custom resource definition column (in JSONPath format): {path_text}")
                }
                d => d,
            };
            out.columns.push(Printed {
                column: Column {
                    name: s("name").into(),
                    ty: s("type").into(),
                    format: s("format").into(),
                    description: description.into(),
                    priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0) as i32,
                },
                path,
            });
        }
        out
    }

    /// The printer columns of `version` in a CustomResourceDefinition object
    /// (`spec.versions[].additionalPrinterColumns`).
    pub fn from_crd(crd: &Value, version: &str) -> Self {
        let columns = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .and_then(|vs| vs.iter().find(|v| v["name"] == version))
            .and_then(|v| v.get("additionalPrinterColumns"));
        Self::new(columns)
    }

    /// Why the column list was cut short (a JSONPath that does not parse), if it was.
    pub fn invalid(&self) -> Option<&str> {
        self.invalid.as_deref()
    }

    pub fn columns(&self) -> Vec<Column> {
        std::iter::once(NAME)
            .chain(self.columns.iter().map(|p| p.column.clone()))
            .collect()
    }

    pub fn row(&self, obj: &Value, now: Timestamp) -> Row {
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut cells = vec![json!(name)];
        for p in &self.columns {
            cells.push(cell(p, obj, now));
        }
        Row {
            cells,
            conditions: None,
        }
    }
}

fn cell(p: &Printed, obj: &Value, now: Timestamp) -> Value {
    let Ok(results) = p.path.find_results(obj) else {
        return Value::Null;
    };
    let Some(value) = results.first().and_then(|r| r.first()) else {
        return Value::Null;
    };
    if p.column.ty == "string" {
        return json!(jsonpath::print(value));
    }
    cell_for_json_value(&p.column.ty, value, now)
}

/// `cellForJSONValue`. A template literal `int` is a Go `int`, which no case takes.
fn cell_for_json_value(ty: &str, value: &Found<'_>, now: Timestamp) -> Value {
    let number = |v: &Found<'_>| -> Option<(Option<i64>, f64)> {
        match v {
            Found::Json(Value::Number(n)) if !n.is_f64() => n.as_i64().map(|i| (Some(i), i as f64)),
            Found::Json(Value::Number(n)) => n.as_f64().map(|f| (None, f)),
            Found::Float(f) => Some((None, *f)),
            _ => None,
        }
    };
    match ty {
        "integer" => match number(value) {
            Some((Some(i), _)) => json!(i),
            Some((None, f)) => json!(f as i64),
            None => Value::Null,
        },
        "number" => match number(value) {
            Some((_, f)) => float_cell(f),
            None => Value::Null,
        },
        "boolean" => match value {
            Found::Json(Value::Bool(b)) | Found::Bool(b) => json!(b),
            _ => Value::Null,
        },
        "date" => {
            let s = match value {
                Found::Json(Value::String(s)) => s.as_str(),
                Found::Str(s) => s.as_ref(),
                _ => return Value::Null,
            };
            // metav1.Time.UnmarshalQueryParameter: "" and "null" are the zero time.
            if s.is_empty() || s == "null" {
                return json!("<unknown>");
            }
            match parse_time(s) {
                Some(t) => json!(human_duration(seconds_between(t, now))),
                None => json!("<invalid>"),
            }
        }
        _ => Value::Null,
    }
}

/// A float64 cell: `encoding/json` writes an integral float without a fraction (`3`), so
/// integral values within i64 are written as integers; others as serde_json writes them
/// (the same shortest digits for the usual magnitudes; see docs/table.md).
fn float_cell(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        json!(f as i64)
    } else {
        json!(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::format::parse_time;

    fn now() -> Timestamp {
        parse_time("2024-05-01T12:00:00Z").unwrap()
    }

    #[test]
    fn default_columns_are_name_and_age() {
        let c = CustomColumns::new(None);
        let names: Vec<String> = c.columns().iter().map(|c| c.name.to_string()).collect();
        assert_eq!(names, ["Name", "Age"]);
        assert_eq!(c.columns()[1].ty, "date");
        let row = c.row(
            &json!({"metadata": {"name": "w", "creationTimestamp": "2024-05-01T11:00:00Z"}}),
            now(),
        );
        assert_eq!(row.cells, vec![json!("w"), json!("60m")]);
    }

    #[test]
    fn typed_cells_follow_cell_for_json_value() {
        let cols = json!([
            {"name": "S", "type": "string", "jsonPath": ".spec.s"},
            {"name": "L", "type": "string", "jsonPath": ".spec.list"},
            {"name": "I", "type": "integer", "jsonPath": ".spec.f"},
            {"name": "N", "type": "number", "jsonPath": ".spec.i"},
            {"name": "B", "type": "boolean", "jsonPath": ".spec.b"},
            {"name": "D", "type": "date", "jsonPath": ".spec.d"},
            {"name": "Bad", "type": "date", "jsonPath": ".spec.bad"},
            {"name": "Empty", "type": "date", "jsonPath": ".spec.empty"},
            {"name": "Wrong", "type": "integer", "jsonPath": ".spec.s"},
            {"name": "Missing", "type": "string", "jsonPath": ".spec.nope", "priority": 1}
        ]);
        let c = CustomColumns::new(Some(&cols));
        assert!(c.invalid().is_none());
        let obj = json!({"metadata": {"name": "w"}, "spec": {
            "s": "x", "list": ["a", {"k": 1}], "f": 2.9, "i": 3, "b": false,
            "d": "2024-05-01T11:58:00Z", "bad": "yesterday", "empty": ""}});
        assert_eq!(
            c.row(&obj, now()).cells,
            vec![
                json!("w"),
                json!("x"),
                json!(r#"["a",{"k":1}]"#),
                json!(2),
                json!(3),
                json!(false),
                json!("2m"),
                json!("<invalid>"),
                json!("<unknown>"),
                Value::Null,
                Value::Null
            ]
        );
        let defs = c.columns();
        assert_eq!(defs[10].priority, 1);
        assert_eq!(
            defs[1].description,
            "Custom resource definition column (in JSONPath format): .spec.s"
        );
    }

    #[test]
    fn an_unparsable_path_cuts_the_columns_short() {
        let cols = json!([
            {"name": "A", "type": "string", "jsonPath": ".spec.a"},
            {"name": "B", "type": "string", "jsonPath": ".spec.b["},
            {"name": "C", "type": "string", "jsonPath": ".spec.c"}
        ]);
        let c = CustomColumns::new(Some(&cols));
        assert_eq!(c.columns().len(), 2);
        assert_eq!(
            c.invalid(),
            Some("unrecognized column definition \".spec.b[\"")
        );
    }
}

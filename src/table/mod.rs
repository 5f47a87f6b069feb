//! `meta.k8s.io` Tables (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`) rendered
//! from objects' JSON, as kube-apiserver renders them. Both sides use it: the simulator
//! answers Table requests with it, and the gateway renders Tables from its cached JSON.
//!
//! A resource's [`Convertor`] is what the apiserver installs as its `TableConvertor`:
//! - [`Printer`] (`builtin.rs`): the printers of `pkg/printers/internalversion` for the
//!   built-in kinds watchgate has ported;
//! - [`CustomColumns`] (`custom.rs`): apiextensions' convertor over a CRD version's
//!   `additionalPrinterColumns` (JSONPath in `jsonpath.rs`), `Name` + `Age` without them;
//! - `Default`: `rest.NewDefaultTableConvertor` (`Name`, `Created At`) for built-in types
//!   that have no printer (CustomResourceDefinitions, Roles, ClusterRoles, LimitRanges).
//!
//! The Table itself follows `handlers/response.go` `asTable` and `handlers/watch.go`:
//! rows carry the object per `includeObject` (`Metadata`, the default: a
//! PartialObjectMetadata of the Table's version; `Object`; `None`: `null`); the Table's
//! `metadata` is the list's (resourceVersion, continue, remainingItemCount) or the single
//! object's resourceVersion; a watch's first event carries `columnDefinitions`, the later
//! ones `null` (`TableOptions.NoHeaders`). Ages are computed against an explicit clock.
//! See docs/table.md.

pub mod builtin;
pub mod custom;
pub mod format;
pub mod jsonpath;
mod swagger;

use std::borrow::Cow;

use jiff::Timestamp;
use serde_json::{json, Map, Value};

pub use builtin::Printer;
pub use custom::CustomColumns;

use crate::negotiate::MetaVersion;
use crate::partial_metadata;
use crate::status::Status;

/// One `TableColumnDefinition`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: Cow<'static, str>,
    pub ty: Cow<'static, str>,
    pub format: Cow<'static, str>,
    pub description: Cow<'static, str>,
    pub priority: i32,
}

impl Column {
    /// As the apiserver writes it (no field is omitempty).
    pub fn to_json(&self) -> Value {
        json!({"name": self.name, "type": self.ty, "format": self.format,
               "description": self.description, "priority": self.priority})
    }
}

pub(crate) const fn col(
    name: &'static str,
    ty: &'static str,
    priority: i32,
    description: &'static str,
) -> Column {
    Column {
        name: Cow::Borrowed(name),
        ty: Cow::Borrowed(ty),
        format: Cow::Borrowed(""),
        description: Cow::Borrowed(description),
        priority,
    }
}

/// `ObjectMeta.SwaggerDoc()["name"]`.
pub(crate) const NAME_DESC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
/// `ObjectMeta.SwaggerDoc()["creationTimestamp"]`.
pub(crate) const AGE_DESC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// The `Name` column every convertor starts with (except the Event printer's order).
pub(crate) const NAME: Column = Column {
    name: Cow::Borrowed("Name"),
    ty: Cow::Borrowed("string"),
    format: Cow::Borrowed("name"),
    description: Cow::Borrowed(NAME_DESC),
    priority: 0,
};

/// One row's cells and optional conditions (`TableRow` without its object).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub cells: Vec<Value>,
    pub conditions: Option<Value>,
}

/// What each row's `object` holds (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    None,
    #[default]
    Metadata,
    Object,
}

impl IncludeObject {
    /// The `includeObject` query value, validated as `optionsForTransform` does
    /// (`ValidateTableOptions`): anything else is a 400.
    pub fn parse(v: Option<&str>) -> Result<Self, Status> {
        match v {
            None | Some("") | Some("Metadata") => Ok(Self::Metadata),
            Some("None") => Ok(Self::None),
            Some("Object") => Ok(Self::Object),
            Some(other) => Err(Status::bad_request(format!(
                "Unable to convert to Table as requested: includeObject: Invalid value: {other:?}: must be 'Metadata', 'Object', 'None', or empty"
            ))),
        }
    }
}

/// How one Table is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableOptions {
    /// `meta.k8s.io` version of the Table (and of the rows' PartialObjectMetadata).
    pub version: MetaVersion,
    pub include: IncludeObject,
    /// Omit `columnDefinitions` (watch events after the first).
    pub no_headers: bool,
}

impl TableOptions {
    /// Options for a request: the negotiated Table version and the `includeObject` query
    /// parameter (the apiserver's 400 when it is not one of the four values).
    pub fn new(version: MetaVersion, include_object: Option<&str>) -> Result<Self, Status> {
        Ok(Self {
            version,
            include: IncludeObject::parse(include_object)?,
            no_headers: false,
        })
    }
}

/// A resource's table convertor.
#[derive(Debug, Clone)]
pub enum Convertor {
    /// A ported `printers.go` printer.
    Printer(Printer),
    /// A custom resource's CRD columns.
    Custom(CustomColumns),
    /// `rest.NewDefaultTableConvertor`: `Name`, `Created At`.
    Default,
}

impl Convertor {
    /// The convertor kube-apiserver uses for a built-in kind, or `None` when watchgate does
    /// not know it (a printer it has not ported: the caller must not render that Table).
    pub fn builtin(group: &str, kind: &str) -> Option<Convertor> {
        if let Some(p) = Printer::for_kind(group, kind) {
            return Some(Convertor::Printer(p));
        }
        // Registries without a printer (their TableConvertor is the default one).
        match (group, kind) {
            ("apiextensions.k8s.io", "CustomResourceDefinition")
            | ("rbac.authorization.k8s.io", "Role" | "ClusterRole")
            | ("", "LimitRange") => Some(Convertor::Default),
            _ => None,
        }
    }

    /// The convertor of a custom resource served at `version`, from its
    /// CustomResourceDefinition object.
    pub fn custom_resource(crd: &Value, version: &str) -> Convertor {
        Convertor::Custom(CustomColumns::from_crd(crd, version))
    }

    /// The column definitions (all priorities: the apiserver prints the wide form).
    pub fn columns(&self) -> Vec<Column> {
        match self {
            Convertor::Printer(p) => p.columns(),
            Convertor::Custom(c) => c.columns(),
            Convertor::Default => vec![NAME, col("Created At", "date", 0, AGE_DESC)],
        }
    }

    /// The cells of one object's row.
    pub fn row(&self, obj: &Value, now: Timestamp) -> Row {
        match self {
            Convertor::Printer(p) => p.row(obj, now),
            Convertor::Custom(c) => c.row(obj, now),
            Convertor::Default => {
                let meta = obj.get("metadata").unwrap_or(&Value::Null);
                let created = meta
                    .get("creationTimestamp")
                    .and_then(Value::as_str)
                    .and_then(format::parse_time)
                    .map(format::format_time)
                    // `time.Time{}.UTC().Format(time.RFC3339)`.
                    .unwrap_or_else(|| "0001-01-01T00:00:00Z".into());
                Row {
                    cells: vec![json!(meta["name"].as_str().unwrap_or("")), json!(created)],
                    conditions: None,
                }
            }
        }
    }

    /// A list as a Table: `list_meta` is the list's `metadata`, `items` its objects.
    pub fn list_table<'a>(
        &self,
        list_meta: &Value,
        items: impl IntoIterator<Item = &'a Value>,
        opts: &TableOptions,
        now: Timestamp,
    ) -> Value {
        let rows: Vec<Value> = items
            .into_iter()
            .map(|o| self.table_row(o, opts, now))
            .collect();
        // The printers and the CRD convertor start from an empty slice; the default
        // convertor appends to a nil one (`"rows": null` for an empty list).
        let rows = if rows.is_empty() && matches!(self, Convertor::Default) {
            Value::Null
        } else {
            Value::Array(rows)
        };
        self.table(partial_metadata::list_meta_of(list_meta), rows, opts)
    }

    /// One object as a one-row Table (a get, a watch event).
    pub fn object_table(&self, obj: &Value, opts: &TableOptions, now: Timestamp) -> Value {
        let mut meta = Map::new();
        if let Some(rv) = obj
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .filter(|rv| !rv.is_empty())
        {
            meta.insert("resourceVersion".into(), json!(rv));
        }
        let rows = Value::Array(vec![self.table_row(obj, opts, now)]);
        self.table(Value::Object(meta), rows, opts)
    }

    fn table_row(&self, obj: &Value, opts: &TableOptions, now: Timestamp) -> Value {
        let row = self.row(obj, now);
        let mut m = Map::new();
        m.insert("cells".into(), Value::Array(row.cells));
        if let Some(c) = row.conditions {
            m.insert("conditions".into(), c);
        }
        let object = match opts.include {
            IncludeObject::None => Value::Null,
            IncludeObject::Object => obj.clone(),
            IncludeObject::Metadata => partial_metadata::object(obj, opts.version),
        };
        m.insert("object".into(), object);
        Value::Object(m)
    }

    fn table(&self, metadata: Value, rows: Value, opts: &TableOptions) -> Value {
        let columns = if opts.no_headers {
            Value::Null
        } else {
            Value::Array(self.columns().iter().map(Column::to_json).collect())
        };
        json!({
            "kind": "Table",
            "apiVersion": opts.version.api_version(),
            "metadata": metadata,
            "columnDefinitions": columns,
            "rows": rows,
        })
    }
}

/// A watch's Table state: the first event's Table has `columnDefinitions`, the later ones
/// `"columnDefinitions": null` (watch.go sets `TableOptions.NoHeaders` after the first
/// transform, whatever the event: bookmarks too; ERROR events carry a Status and are not
/// transformed).
#[derive(Debug, Clone)]
pub struct WatchTable {
    convertor: Convertor,
    opts: TableOptions,
}

impl WatchTable {
    pub fn new(convertor: Convertor, opts: TableOptions) -> Self {
        Self { convertor, opts }
    }

    /// The Table of one event's object.
    pub fn event_object(&mut self, obj: &Value, now: Timestamp) -> Value {
        let t = self.convertor.object_table(obj, &self.opts, now);
        self.opts.no_headers = true;
        t
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
    fn include_object_values() {
        assert_eq!(IncludeObject::parse(None).unwrap(), IncludeObject::Metadata);
        assert_eq!(
            IncludeObject::parse(Some("Object")).unwrap(),
            IncludeObject::Object
        );
        let e = IncludeObject::parse(Some("All")).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "Unable to convert to Table as requested: includeObject: Invalid value: \"All\": must be 'Metadata', 'Object', 'None', or empty"
        );
    }

    #[test]
    fn default_convertor_is_name_and_created_at() {
        let c = Convertor::builtin("apiextensions.k8s.io", "CustomResourceDefinition").unwrap();
        let opts = TableOptions::new(MetaVersion::V1, Some("None")).unwrap();
        let crd = json!({"metadata": {"name": "widgets.example.com", "resourceVersion": "4",
                                      "creationTimestamp": "2024-05-01T11:00:00Z"}});
        let t = c.list_table(&json!({"resourceVersion": "9"}), [&crd], &opts, now());
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Created At"]);
        assert_eq!(t["columnDefinitions"][1]["type"], "date");
        assert_eq!(
            t["rows"],
            json!([{"cells": ["widgets.example.com", "2024-05-01T11:00:00Z"], "object": null}])
        );
        assert_eq!(t["metadata"], json!({"resourceVersion": "9"}));
        // Empty: rows is null for the default convertor, [] for the printers.
        let empty = c.list_table(&json!({}), [], &opts, now());
        assert_eq!(empty["rows"], Value::Null);
        let pods = Convertor::builtin("", "Pod").unwrap();
        assert_eq!(
            pods.list_table(&json!({}), [], &opts, now())["rows"],
            json!([])
        );
        assert!(Convertor::builtin("apps", "StatefulSet").is_none());
    }

    #[test]
    fn watch_tables_drop_headers_after_the_first_event() {
        let mut w = WatchTable::new(
            Convertor::builtin("", "ConfigMap").unwrap(),
            TableOptions::new(MetaVersion::V1beta1, None).unwrap(),
        );
        let cm = json!({"metadata": {"name": "c", "resourceVersion": "3",
                                     "creationTimestamp": "2024-05-01T11:59:00Z"},
                        "data": {"a": "1"}});
        let first = w.event_object(&cm, now());
        assert_eq!(first["apiVersion"], "meta.k8s.io/v1beta1");
        assert!(first["columnDefinitions"].is_array());
        assert_eq!(first["rows"][0]["cells"], json!(["c", 1, "60s"]));
        assert_eq!(
            first["rows"][0]["object"],
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1beta1",
                   "metadata": {"name": "c", "resourceVersion": "3",
                                "creationTimestamp": "2024-05-01T11:59:00Z"}})
        );
        assert_eq!(w.event_object(&cm, now())["columnDefinitions"], Value::Null);
    }

    #[test]
    fn endpoint_slice_rows_follow_print_endpoint_slice() {
        let c = Convertor::builtin("discovery.k8s.io", "EndpointSlice").unwrap();
        let names: Vec<String> = c.columns().iter().map(|c| c.name.to_string()).collect();
        assert_eq!(names, ["Name", "AddressType", "Ports", "Endpoints", "Age"]);
        let slice = |ports: Value, endpoints: Value| {
            json!({"metadata": {"name": "s", "creationTimestamp": "2024-05-01T11:00:00Z"},
                   "addressType": "IPv4", "ports": ports, "endpoints": endpoints})
        };
        let cells = |o: &Value| Value::Array(c.row(o, now()).cells);
        let four = json!([{"addresses": ["10.0.0.1", "10.0.0.2"]},
                          {"addresses": ["10.0.0.3"]}, {"addresses": ["10.0.0.4"]}]);
        assert_eq!(
            cells(&slice(json!([{"name": "http", "port": 80}]), four)),
            json!([
                "s",
                "IPv4",
                "80",
                "10.0.0.1,10.0.0.2,10.0.0.3 + 1 more...",
                "60m"
            ])
        );
        // A nil port prints its name, or `*`; more than three ports are counted; nothing
        // at all is `<unset>`.
        let ports = json!([{"name": "a"}, {}, {"port": 1}, {"port": 2}, {"port": 3}]);
        let row = cells(&slice(ports, json!([])));
        assert_eq!(
            (&row[2], &row[3]),
            (&json!("a,*,1 + 2 more..."), &json!("<unset>"))
        );
        let row = cells(&slice(Value::Null, Value::Null));
        assert_eq!((&row[2], &row[3]), (&json!("<unset>"), &json!("<unset>")));
    }
}

//! The conversions a request can ask for in its Accept header (`as=Table`,
//! `as=PartialObjectMetadata`, `as=PartialObjectMetadataList`), applied to the
//! simulator's answers as k8s.io/apiserver `handlers/response.go` (`transformResponseObject`,
//! `doTransformObject`) and `handlers/watch.go` apply them.
//!
//! - Order: the object or list is read first (its errors win), then `optionsForTransform`
//!   (a bad `includeObject` is a 400), then the conversion (a list asked as
//!   `PartialObjectMetadata`, or one object as `PartialObjectMetadataList`, is a 406 naming
//!   the registry's Go type).
//! - A `metav1.Status` (a delete's success answer, a watch's ERROR event) is never
//!   converted.
//! - Watches convert each event's object, BOOKMARKs included (a PartialObjectMetadata
//!   bookmark carries only resourceVersion and the initial-events-end annotation). A watch
//!   asked as `PartialObjectMetadataList` gets its 200 and then ends at the first event
//!   that is not an ERROR: the embedded encoder fails on the untransformed object (the
//!   meta.k8s.io codec knows no Pod) and the watch server stops.

use std::borrow::Cow;

use jiff::Timestamp;
use serde_json::Value;

use crate::negotiate::{Conversion, MetaVersion};
use crate::partial_metadata;
use crate::request::ApiRequest;
use crate::sim::answer::Answer;
use crate::sim::resources::ResourceType;
use crate::sim::{table, Sim};
use crate::status::Status;
use crate::table::{TableOptions, WatchTable};

fn table_options(v: MetaVersion, api: &ApiRequest) -> Result<TableOptions, Status> {
    TableOptions::new(v, api.query_get("includeObject"))
}

fn is_status(v: &Value) -> bool {
    v.get("kind").and_then(Value::as_str) == Some("Status")
        && v.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

/// One object converted as asked; `None` when no conversion applies (plain answer).
pub fn object(
    sim: &Sim,
    rt: &ResourceType,
    answer: &Answer,
    api: &ApiRequest,
    obj: &Value,
) -> Result<Option<Value>, Status> {
    if is_status(obj) {
        return Ok(None);
    }
    Ok(match answer.conversion() {
        None => None,
        Some(Conversion::PartialObjectMetadata(v)) => Some(partial_metadata::object(obj, v)),
        Some(Conversion::PartialObjectMetadataList(_)) => {
            return Err(partial_metadata::object_refused(&rt.go_type(false)))
        }
        Some(Conversion::Table(v)) => {
            let opts = table_options(v, api)?;
            let c = table::convertor(&sim.store, rt);
            Some(c.object_table(obj, &opts, Timestamp::now()))
        }
    })
}

/// A list (its `metadata` and items) converted as asked; `None` when no conversion
/// applies.
pub fn list(
    sim: &Sim,
    rt: &ResourceType,
    answer: &Answer,
    api: &ApiRequest,
    list_meta: &Value,
    items: &[&Value],
) -> Result<Option<Value>, Status> {
    Ok(match answer.conversion() {
        None => None,
        Some(Conversion::PartialObjectMetadata(_)) => {
            return Err(partial_metadata::list_refused(&rt.go_type(true)))
        }
        Some(Conversion::PartialObjectMetadataList(v)) => {
            Some(partial_metadata::list(list_meta, items.iter().copied(), v))
        }
        Some(Conversion::Table(v)) => {
            let opts = table_options(v, api)?;
            let c = table::convertor(&sim.store, rt);
            Some(c.list_table(list_meta, items.iter().copied(), &opts, Timestamp::now()))
        }
    })
}

/// A write's answer: an object, a list (deletecollection) or a Status.
pub fn write_result(
    sim: &Sim,
    rt: &ResourceType,
    answer: &Answer,
    api: &ApiRequest,
    v: &Value,
) -> Result<Option<Value>, Status> {
    match v.get("items").and_then(Value::as_array) {
        Some(items) if !is_status(v) => {
            let items: Vec<&Value> = items.iter().collect();
            list(sim, rt, answer, api, &v["metadata"], &items)
        }
        _ => object(sim, rt, answer, api, v),
    }
}

/// How a watch's event objects are converted.
#[derive(Debug)]
pub enum Events {
    Plain,
    PartialObjectMetadata(MetaVersion),
    Table(WatchTable),
    /// `as=PartialObjectMetadataList`: no event object can be encoded.
    Unencodable,
}

impl Events {
    /// The conversion of a watch (`serveWatchHandler`: `optionsForTransform` first).
    pub fn for_watch(
        sim: &Sim,
        rt: &ResourceType,
        answer: &Answer,
        api: &ApiRequest,
    ) -> Result<Events, Status> {
        Ok(match answer.conversion() {
            None => Events::Plain,
            Some(Conversion::PartialObjectMetadata(v)) => Events::PartialObjectMetadata(v),
            Some(Conversion::PartialObjectMetadataList(_)) => Events::Unencodable,
            Some(Conversion::Table(v)) => Events::Table(WatchTable::new(
                table::convertor(&sim.store, rt),
                table_options(v, api)?,
            )),
        })
    }

    pub fn is_plain(&self) -> bool {
        matches!(self, Events::Plain)
    }

    /// The object of one non-ERROR event, or `None` when it cannot be encoded (the
    /// stream ends).
    pub fn event_object<'a>(&mut self, obj: &'a Value) -> Option<Cow<'a, Value>> {
        match self {
            Events::Plain => Some(Cow::Borrowed(obj)),
            Events::PartialObjectMetadata(v) => Some(Cow::Owned(partial_metadata::object(obj, *v))),
            Events::Table(t) => Some(Cow::Owned(t.event_object(obj, Timestamp::now()))),
            Events::Unencodable => None,
        }
    }
}

//! GET of one object and LIST of a collection.

use std::sync::Arc;

use http::{HeaderMap, Response};

use crate::body::Body;
use crate::request::{ApiRequest, ResourcePath};
use crate::sim::resources::ResourceType;
use crate::sim::{object_response, Sim};
use crate::status::Status;

pub async fn get(
    sim: &Arc<Sim>,
    _api: &ApiRequest,
    _headers: &HeaderMap,
    rt: &'static ResourceType,
    ns: &str,
    name: &str,
) -> Response<Body> {
    sim.stats.record("get", &rt.group_resource().to_string());
    match sim.store.get(rt, ns, name) {
        Some(o) => object_response(&o),
        None => Status::not_found(&rt.group_resource(), name).into_response(),
    }
}

pub async fn handle(
    _sim: &Arc<Sim>,
    _api: &ApiRequest,
    _headers: &HeaderMap,
    rt: &'static ResourceType,
    _rp: &ResourcePath,
) -> Response<Body> {
    Status::method_not_supported(&rt.group_resource(), "list").into_response()
}

//! WATCH: newline-delimited JSON events from the shared history.

use std::sync::Arc;

use http::{HeaderMap, Response};

use crate::body::Body;
use crate::request::{ApiRequest, ResourcePath};
use crate::sim::resources::ResourceType;
use crate::sim::Sim;
use crate::status::Status;

pub async fn handle(
    _sim: &Arc<Sim>,
    _api: &ApiRequest,
    _headers: &HeaderMap,
    rt: &'static ResourceType,
    _rp: &ResourcePath,
) -> Response<Body> {
    Status::method_not_supported(&rt.group_resource(), "watch").into_response()
}

//! STUB owned by sim-api: pods/log (follow=true streams lines).

use std::sync::Arc;

use http::Response;

use crate::body::Body;
use crate::request::ApiRequest;
use crate::sim::resources::ResourceType;
use crate::sim::Sim;
use crate::status::Status;

pub async fn handle(
    _sim: &Arc<Sim>,
    _req: &ApiRequest,
    rt: &'static ResourceType,
    _ns: &str,
    _name: &str,
) -> Response<Body> {
    Status::method_not_supported(&rt.group_resource(), "log").into_response()
}

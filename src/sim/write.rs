//! STUB owned by sim-writes: POST/PUT/PATCH/DELETE/deletecollection, apply, dryRun,
//! finalizers, and GET on the `scale` subresource.
//! Contract: `handle(sim, api, rt, req) -> Response<Body>`; the router has already
//! resolved the type, checked the path shape, and read the body (≤ 3 MiB).

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};

use crate::body::Body;
use crate::request::ApiRequest;
use crate::sim::resources::ResourceType;
use crate::sim::Sim;
use crate::status::Status;

pub async fn handle(
    _sim: &Arc<Sim>,
    api: &ApiRequest,
    rt: &'static ResourceType,
    _req: Request<Bytes>,
) -> Response<Body> {
    Status::method_not_supported(&rt.group_resource(), api.verb.as_str()).into_response()
}

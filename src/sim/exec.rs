//! STUB owned by sim-api: pods/exec echo upgrade endpoint.
//! Contract: `handle(sim, req, rt, ns, name) -> Response<Body>` with the raw hyper request
//! (so the handler can take the upgrade).

use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;

use crate::body::Body;
use crate::sim::resources::ResourceType;
use crate::sim::Sim;
use crate::status::Status;

pub async fn handle(
    _sim: &Arc<Sim>,
    _req: Request<Incoming>,
    rt: &'static ResourceType,
    _ns: &str,
    _name: &str,
) -> Response<Body> {
    Status::method_not_supported(&rt.group_resource(), "exec").into_response()
}

//! STUB owned by sim-api: /api, /apis, /version, /openapi/*, /healthz, /readyz.
//! Contract: `handle(head, req) -> Option<Response<Body>>`; None means "not mine" (404).

use http::request::Parts;
use http::Response;

use crate::body::Body;
use crate::request::ApiRequest;

pub fn handle(_head: &Parts, _req: &ApiRequest) -> Option<Response<Body>> {
    None
}

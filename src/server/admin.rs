//! The admin listener: liveness and health now; /readyz and /metrics join it later.

use http::{header, HeaderValue, Method, Request, Response};
use hyper::body::Incoming;

use crate::body::{self, Body};
use crate::status::Status;

pub async fn handle(req: Request<Incoming>) -> Response<Body> {
    match (req.method(), req.uri().path()) {
        (&Method::GET | &Method::HEAD, "/healthz" | "/livez") => {
            let mut resp = Response::new(body::full("ok"));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            resp
        }
        (_, "/healthz" | "/livez") => {
            Status::new(405, "MethodNotAllowed", "only GET and HEAD are allowed").into_response()
        }
        _ => Status::path_not_found().into_response(),
    }
}

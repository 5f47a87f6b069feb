//! A panic while serving a request becomes a 500 `metav1.Status`.
//!
//! kube-apiserver's `WithPanicRecovery` answers a panicking handler with a 500 and logs
//! it; the connection stays usable. The gateway does the same, with a Status body
//! (reason `InternalError`) so that clients decode it like any other error.

use std::any::Any;

use http::Response;

use crate::body::Body;
use crate::status::Status;

pub fn into_status(err: Box<dyn Any + Send + 'static>) -> Response<Body> {
    let what = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    tracing::error!(panic = what, "a request panicked");
    Status::new(
        500,
        "InternalError",
        "This request caused watchgate to panic. Look in the logs for details.",
    )
    .into_response()
}

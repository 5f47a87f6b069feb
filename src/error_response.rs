//! `responsewriters.ErrorNegotiated`: how kube-apiserver writes an error `metav1.Status`.
//! In protobuf to a client whose `Accept` negotiates protobuf under
//! `DefaultEndpointRestrictions` (client-go's typed clients), in JSON otherwise, and as
//! `WriteRawJSON` (indented JSON) when nothing in `Accept` is acceptable. Every Status the
//! gateway writes for a request it has the headers of goes through here, so a protobuf
//! client gets the same bytes from watchgate as from the apiserver.

use http::{header, HeaderValue, Response};

use crate::body::{self, Body};
use crate::negotiate::{negotiate_error, Encoding};
use crate::status::Status;

/// `status` in the encoding `accept` (the request's first `Accept` header) negotiates.
pub fn negotiated(status: Status, accept: Option<&str>) -> Response<Body> {
    negotiated_as(status, negotiate_error(accept))
}

/// `status` in the form the request's Accept header negotiated for errors, worked out when
/// it was parsed (`request::Parsed::accept`, `Accept::for_errors`): `None` when nothing in
/// it is acceptable.
pub fn negotiated_as(status: Status, form: Option<crate::negotiate::Negotiated>) -> Response<Body> {
    match form {
        Some(n) if n.encoding == Encoding::Protobuf => {
            match crate::proto::encode_status(&status.to_bytes()) {
                Ok(bytes) => {
                    let mut resp = status.into_response();
                    *resp.body_mut() = body::full(bytes);
                    resp.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static(crate::proto::CONTENT_TYPE),
                    );
                    resp
                }
                // Every Status encodes; should one not, JSON is still an answer.
                Err(_) => status.into_response(),
            }
        }
        Some(_) => status.into_response(),
        None => {
            // WriteRawJSON: json.MarshalIndent of the Status.
            let indented = crate::codec::go_json::marshal_indent(&status.to_value());
            let mut resp = status.into_response();
            *resp.body_mut() = body::full(indented);
            resp
        }
    }
}

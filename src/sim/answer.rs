//! How the simulator writes the answers of resource requests (get, list, watch, writes):
//! Accept negotiated with [`crate::negotiate`] as kube-apiserver negotiates it, objects
//! encoded in the negotiated form, and errors written as `responsewriters.ErrorNegotiated`
//! writes them.
//!
//! - `NegotiateOutputMediaType` runs first (before options are even decoded): no clause
//!   the endpoint can serve is a 406 whose text lists the scope's serializers.
//! - An error Status is written by re-negotiating the Accept header with
//!   `DefaultEndpointRestrictions` (no conversion allowed): JSON (`pretty` per the
//!   clause or `isPrettyPrint`), else — when that fails too — `WriteRawJSON`: the Status
//!   indented by `json.MarshalIndent(…, "", "  ")`, without a trailing newline, as
//!   `application/json`, with the code it carries (`Retry-After` from its
//!   `retryAfterSeconds` either way).
//! - Objects: compact JSON plus a newline (`json.Encoder`), or indented without a newline
//!   when pretty (`application/json;pretty=1`, `?pretty=true`, a curl/Wget/browser
//!   User-Agent); in protobuf (`application/vnd.kubernetes.protobuf`) the `k8s\0` +
//!   `runtime.Unknown` envelope of [`crate::sim::protobuf`]. An object that cannot be
//!   encoded is what `SerializeObject` writes when its encoder fails: a 500 Status with an
//!   empty reason and the error as message, in the same encoding.
//!
//! Not yet: YAML. A request that negotiates to it is answered in JSON with
//! `Content-Type: application/json` (docs/simulator.md).

use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use serde_json::Value;

use crate::body::{self, Body};
use crate::codec::go_json;
use crate::negotiate::{self, Conversion, Encoding, Endpoint, Negotiated, NotAcceptable};
use crate::proto;
use crate::request::ApiRequest;
use crate::sim::protobuf;
use crate::sim::resources::ResourceType;
use crate::status::Status;

/// The negotiated form of one resource request's answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub endpoint: Endpoint,
    pub negotiated: Negotiated,
    /// The first Accept header (Go's `Header.Get`), for the watch's stream negotiation.
    accept: Option<String>,
    /// Pretty-printed JSON (the clause's `pretty=1`, or `isPrettyPrint`).
    pretty: bool,
}

/// The endpoint restrictions of a served type: built-in types have protobuf, the custom
/// resource does not.
pub fn endpoint(rt: &ResourceType) -> Endpoint {
    if rt.is_custom() {
        Endpoint::CUSTOM
    } else {
        Endpoint::BUILTIN
    }
}

/// The first `Accept` header, as Go's `Header.Get` reads it.
pub fn accept(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok())
}

fn pretty_print(headers: &HeaderMap, api: &ApiRequest) -> bool {
    let ua = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    negotiate::is_pretty_print(api.query_get("pretty"), ua)
}

impl Answer {
    /// `NegotiateOutputMediaType` for a request to `rt`; the 406 Status when nothing can be
    /// served (write it with [`error`]).
    pub fn negotiate(
        rt: &ResourceType,
        headers: &HeaderMap,
        api: &ApiRequest,
    ) -> Result<Answer, Status> {
        let endpoint = endpoint(rt);
        let accept = accept(headers);
        let negotiated =
            negotiate::negotiate(accept, endpoint).map_err(|e: NotAcceptable| e.status())?;
        Ok(Answer {
            endpoint,
            negotiated,
            accept: accept.map(str::to_string),
            pretty: negotiated.pretty || pretty_print(headers, api),
        })
    }

    /// What the object is to be turned into, if anything.
    pub fn conversion(&self) -> Option<Conversion> {
        self.negotiated.conversion
    }

    /// Plain JSON written compactly: the callers' fast paths (pre-encoded bytes) apply.
    /// (YAML is answered as JSON for now.)
    pub fn is_plain(&self) -> bool {
        self.negotiated.conversion.is_none() && !self.pretty && !self.is_protobuf()
    }

    /// The answer is protobuf.
    pub fn is_protobuf(&self) -> bool {
        self.negotiated.encoding == Encoding::Protobuf
    }

    /// `NegotiateOutputMediaTypeStream`: a watch's stream serializer, after the list
    /// negotiation succeeded (YAML is refused here: it has no stream serializer).
    pub fn stream(&self) -> Result<Negotiated, Status> {
        negotiate::negotiate_stream(self.accept.as_deref(), self.endpoint).map_err(|e| e.status())
    }

    /// An object (or list, Table, PartialObjectMetadata, Status) in the negotiated encoding.
    pub fn object(&self, code: StatusCode, v: &Value) -> Response<Body> {
        if self.is_protobuf() {
            return protobuf_response(code, protobuf::encode_value(v));
        }
        // YAML: JSON for now (docs/simulator.md).
        let bytes = encode_json(v, self.pretty);
        json_response(code, bytes)
    }
}

/// A protobuf answer, or — when the object cannot be encoded — what `SerializeObject`
/// writes when its encoder fails: the 500 Status of the error (`ErrorToAPIStatus` of a
/// plain error: empty reason) in the same encoding.
pub fn protobuf_response(
    code: StatusCode,
    encoded: Result<Vec<u8>, proto::ProtoError>,
) -> Response<Body> {
    match encoded {
        Ok(bytes) => typed_response(code, bytes, proto::CONTENT_TYPE),
        Err(e) => {
            let s = Status::new(500, "", e.to_string());
            protobuf_status(&s)
        }
    }
}

/// A Status in protobuf, with its own code.
fn protobuf_status(s: &Status) -> Response<Body> {
    let code = StatusCode::from_u16(s.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    match protobuf::encode_value(&s.to_value()) {
        Ok(bytes) => typed_response(code, bytes, proto::CONTENT_TYPE),
        // Every Status has a message; this cannot fail. Go writes the text form then.
        Err(_) => typed_response(
            code,
            format!("{}: {}", s.reason, s.message).into_bytes(),
            "text/plain",
        ),
    }
}

/// JSON as the apiserver's JSON serializer writes it: compact plus a newline, or indented
/// without one.
fn encode_json(v: &Value, pretty: bool) -> Vec<u8> {
    if pretty {
        go_json::marshal_indent(v)
    } else {
        let mut b = serde_json::to_vec(v).unwrap_or_default();
        b.push(b'\n');
        b
    }
}

fn json_response(code: StatusCode, bytes: Vec<u8>) -> Response<Body> {
    typed_response(code, bytes, "application/json")
}

fn typed_response(code: StatusCode, bytes: Vec<u8>, content_type: &'static str) -> Response<Body> {
    let mut resp = Response::new(body::full(bytes));
    *resp.status_mut() = code;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// `responsewriters.ErrorNegotiated`: writes `status` for a request with these headers.
pub fn error(status: &Status, headers: &HeaderMap, api: &ApiRequest) -> Response<Body> {
    let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = match negotiate::negotiate_error(accept(headers)) {
        Some(n) if n.encoding == Encoding::Protobuf => protobuf_status(status),
        Some(n) => {
            // YAML: written in JSON for now (docs/simulator.md).
            let pretty = n.pretty || pretty_print(headers, api);
            json_response(code, encode_json(&status.to_value(), pretty))
        }
        // WriteRawJSON: json.MarshalIndent of the Status, no newline.
        None => json_response(code, go_json::marshal_indent(&status.to_value())),
    };
    if let Some(r) = status.retry_after_seconds.filter(|r| *r > 0) {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(r));
    }
    resp
}

//! Protocol upgrades (exec, attach, port-forward over SPDY/3.1 or websocket): the request
//! goes upstream over HTTP/1.1 with its `Upgrade` field; if the upstream switches
//! protocols, the 101 goes back to the client and the two raw connections are spliced
//! until either side closes. Bytes are never interpreted, so garbage on a tunnel is the
//! endpoints' business and cannot affect other connections.

use crate::body::RequestBody;
use http::{Request, Response, StatusCode, Version};
use hyper_util::rt::TokioIo;

use super::headers;
use crate::body::{self, Body};
use crate::drain::DrainWatch;
use crate::upstream::Upstream;

pub(super) async fn forward(
    upstream: &Upstream,
    drain: &DrainWatch,
    mut req: Request<RequestBody>,
) -> Response<Body> {
    let downstream = crate::upgrade::on(&mut req);
    let (mut parts, incoming) = req.into_parts();
    headers::upstream_request(&mut parts.headers, true);
    parts.version = Version::HTTP_11;
    let upstream_req = Request::from_parts(parts, body::boxed(incoming));

    let mut resp = match upstream.send_upgrade(upstream_req).await {
        Ok(resp) => resp,
        Err(err) => {
            tracing::warn!(error = %err, "upstream upgrade failed");
            return err.to_status().into_response();
        }
    };

    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        // The upstream refused (403, 400, ...): an ordinary response, forwarded as is.
        let (mut parts, incoming) = resp.into_parts();
        headers::downstream_response(&mut parts.headers, false);
        parts.version = Version::HTTP_11;
        return Response::from_parts(parts, body::boxed(incoming));
    }

    let upstream_io = hyper::upgrade::on(&mut resp);
    let upstream_io = async move { upstream_io.await.map_err(crate::body::BoxError::from) };
    let (mut parts, _) = resp.into_parts();
    headers::downstream_response(&mut parts.headers, true);
    let drain = drain.clone();
    tokio::spawn(async move {
        // The downstream side resolves once hyper has written our 101 to the client.
        let (down, up) = match tokio::try_join!(downstream, upstream_io) {
            Ok(pair) => pair,
            Err(err) => {
                tracing::debug!(error = %err, "upgrade did not complete");
                return;
            }
        };
        let (mut down, mut up) = (down, TokioIo::new(up));
        tokio::select! {
            res = tokio::io::copy_bidirectional(&mut down, &mut up) => match res {
                Ok((to_up, to_down)) => tracing::debug!(to_up, to_down, "tunnel closed"),
                Err(err) => tracing::debug!(error = %err, "tunnel ended with an error"),
            },
            // Tunnels are in-flight work: they may finish during a drain, but not past
            // its deadline.
            _ = drain.stopped() => tracing::debug!("tunnel cut at the drain deadline"),
        }
        // `drain` (and with it this task's hold on the drain) is dropped here.
    });
    Response::from_parts(parts, body::empty())
}

//! `authn`: who is asking. A front proxy's headers and an x509 client certificate are
//! taken from the connection's verified certificate, bearer tokens are reviewed by the
//! upstream (cached), requests without credentials are anonymous only with `--anonymous-auth`; anything else is the
//! apiserver's 401 Status (`auth::answers::unauthorized`). The user goes into the
//! request's extensions as `Arc<auth::User>` for the layers after this one.

use std::sync::Arc;

use http::Request;

use super::guard::{error_form, Guard, Verdict};
use crate::auth::x509::PeerCert;
use crate::auth::{answers, Security};

/// The guard (`stack::guard`): composed as `GuardLayer(Authn(security))`.
#[derive(Clone)]
pub struct Authn(pub Arc<Security>);

impl Guard for Authn {
    async fn check<B: Send + 'static>(self, mut req: Request<B>) -> Verdict<B> {
        // The connection's client certificate, verified at the handshake (`server::tls`).
        let cert = req.extensions().get::<Arc<PeerCert>>().cloned();
        match self
            .0
            .authn
            .authenticate(req.headers_mut(), cert.as_deref())
            .await
        {
            Ok(user) => {
                req.extensions_mut().insert(user);
                Verdict::Pass(req)
            }
            Err(err) => {
                tracing::debug!(error = %err, uri = %req.uri(), "unauthenticated request");
                Verdict::Answer(answers::unauthorized(error_form(&req)))
            }
        }
    }
}

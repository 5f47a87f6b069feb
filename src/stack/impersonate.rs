//! `impersonate`: a client's own `Impersonate-*` headers (`kubectl --as`), checked and
//! applied as kube-apiserver's impersonation filter does (`auth::impersonation`). After
//! this layer the request's user is the impersonated one.

use std::sync::Arc;

use http::Request;

use super::guard::{error_form, Guard, Verdict};
use crate::auth::{impersonation, Security, User};

/// The guard (`stack::guard`): composed as `GuardLayer(Impersonate(security))`.
#[derive(Clone)]
pub struct Impersonate(pub Arc<Security>);

impl Guard for Impersonate {
    async fn check<B: Send + 'static>(self, mut req: Request<B>) -> Verdict<B> {
        // No impersonation header (the common case): nothing to do.
        let asks = req
            .headers()
            .keys()
            .any(|k| k.as_str().starts_with("impersonate-"));
        if asks {
            if let Some(requestor) = req.extensions().get::<Arc<User>>().cloned() {
                let form = error_form(&req);
                let asked =
                    impersonation::impersonate(&self.0.authz, &requestor, req.headers_mut(), form)
                        .await;
                match asked {
                    Ok(Some(user)) => {
                        req.extensions_mut().insert(user);
                    }
                    Ok(None) => {}
                    Err(refused) => return Verdict::Answer(refused),
                }
            }
        }
        Verdict::Pass(req)
    }
}

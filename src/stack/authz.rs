//! `authz`: reads the gateway may answer itself (from the cache or the fan-out) are
//! authorized here with a SubjectAccessReview for the attributes kube-apiserver would
//! check (`auth::Attributes::of_read`), before anything is read from a cache. Allowed
//! requests are marked [`Authorized`]; the router lets the cache and the fan-out answer
//! only marked requests. A denial is the apiserver's 403 Status.
//!
//! Everything else (writes, consistent reads when the cache does not answer them,
//! discovery, subresources) goes upstream with
//! the client's identity, and the apiserver authorizes it itself. If the review fails
//! (upstream unreachable, watchgate lacking RBAC for SubjectAccessReviews), the request is
//! left unmarked and is forwarded too: the upstream then decides, and the cache never
//! answers without a decision.

use std::sync::Arc;

use http::{Method, Request};

use super::guard::{Guard, Verdict};
use crate::auth::{answers, Attributes, Authorized, Decision, Security, User};
use crate::request::{ApiPath, Parsed, Verb};

/// The guard (`stack::guard`): composed as `GuardLayer(Authz(security))`.
#[derive(Clone)]
pub struct Authz(pub Arc<Security>);

/// A superset of what `serve::read` and `serve::watch` may answer: GET reads of a
/// resource (no subresource) with valid options and a resourceVersion, or without one when
/// the cache answers consistent reads. The rest is forwarded whatever happens, so the
/// upstream authorizes it.
pub fn may_be_served_locally(req: &Parsed, consistent_reads: bool) -> bool {
    let ApiPath::Resource(rp) = &req.api.path else {
        return false;
    };
    req.api.method == Method::GET
        && matches!(req.api.verb, Verb::Get | Verb::List | Verb::Watch)
        && rp.subresource.is_none()
        && rp.extra.is_empty()
        && req.valid_options().is_some_and(|o| {
            consistent_reads
                || o.resource_version
                    .as_deref()
                    .is_some_and(|rv| !rv.is_empty())
        })
}

impl Guard for Authz {
    async fn check<B: Send + 'static>(self, mut req: Request<B>) -> Verdict<B> {
        let user = req.extensions().get::<Arc<User>>().cloned();
        let consistent = self.0.consistent_reads_from_cache;
        let parsed = Parsed::of(&req).filter(|p| may_be_served_locally(p, consistent));
        if let (Some(user), Some(parsed)) = (user, parsed) {
            if let Some(attrs) = Attributes::of_read(&parsed) {
                match self.0.authz.authorize(&user, attrs).await {
                    Ok(Decision::Allow) => {
                        req.extensions_mut().insert(Authorized);
                    }
                    Ok(Decision::Deny(reason)) => {
                        let attrs = Attributes::of_read(&parsed).expect("derived above");
                        return Verdict::Answer(answers::forbidden(
                            user.name(),
                            &attrs,
                            &reason,
                            parsed.accept.for_errors(),
                        ));
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "authorization failed; forwarding the read");
                    }
                }
            }
        }
        Verdict::Pass(req)
    }
}

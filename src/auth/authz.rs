//! May this user do this: SubjectAccessReviews asked of the upstream, with allowed and
//! denied decisions cached for their own TTLs (kube-apiserver's webhook authorizer:
//! `--authorization-webhook-cache-authorized-ttl` and `-unauthorized-ttl`), keyed by the
//! whole identity and the whole attributes (the webhook keys its cache by the review's
//! spec), so no decision made for one user or one request shape answers another.

use std::sync::Arc;
use std::time::Duration;

use super::attributes::Attributes;
use super::review::{Decision, ReviewError, Reviews};
use super::ttl_cache::TtlCache;
use super::user::User;

/// The most decisions kept (the webhook authorizer's LRU holds 8192 too).
const MAX_DECISIONS: usize = 8192;

pub struct Authorizer {
    reviews: Arc<dyn Reviews>,
    decisions: TtlCache<(Arc<User>, Attributes), Decision, ReviewError>,
    allow_ttl: Duration,
    deny_ttl: Duration,
}

impl Authorizer {
    pub fn new(reviews: Arc<dyn Reviews>, allow_ttl: Duration, deny_ttl: Duration) -> Self {
        Self {
            reviews,
            decisions: TtlCache::new(MAX_DECISIONS),
            allow_ttl,
            deny_ttl,
        }
    }

    pub async fn authorize(
        &self,
        user: &Arc<User>,
        attrs: Attributes,
    ) -> Result<Decision, ReviewError> {
        let key = (user.clone(), attrs);
        self.decisions
            .get_or_fetch(&key, || async {
                let decision = self.reviews.access_review(&key.0.info, &key.1).await?;
                let ttl = match decision {
                    Decision::Allow => self.allow_ttl,
                    Decision::Deny(_) => self.deny_ttl,
                };
                Ok((decision, ttl))
            })
            .await
    }
}

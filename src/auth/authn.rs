//! Who is asking: bearer tokens reviewed by the upstream (TokenReview), with a cache of
//! verdicts, and anonymous requests when allowed. Mirrors kube-apiserver's authenticator
//! chain for the credentials watchgate can see:
//!
//! - `Authorization: Bearer <token>` (bearertoken.go: the scheme case-insensitive, the
//!   token the second space-separated field; an empty token is no credential), or the
//!   WebSocket subprotocol `base64url.bearer.authorization.k8s.io.<token>` that browsers'
//!   websocket clients use (websocket/protocol.go), removed from the header once read;
//! - a token the reviewer rejects is a 401, never anonymous (`union.NewFailOnError`);
//! - no credential at all is `system:anonymous` if `--anonymous-auth`, else a 401;
//! - every authenticated user is in `system:authenticated` (`AuthenticatedGroupAdder`).
//!
//! Verdicts are cached under an HMAC of the token (a per-process random key, like
//! kube's token cache), so tokens are not kept in memory as keys: a success for
//! `success_ttl`, a rejection for the shorter `failure_ttl`; errors (upstream unreachable)
//! are not cached.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use http::{header, HeaderMap, HeaderValue};

use super::review::{ReviewError, Reviews, TokenVerdict};
use super::ttl_cache::TtlCache;
use super::user::{User, AUTHENTICATED};

const WS_PROTOCOL: HeaderName = HeaderName::from_static("sec-websocket-protocol");
const WS_TOKEN_PREFIX: &str = "base64url.bearer.authorization.k8s.io.";
use http::HeaderName;

/// The most token verdicts kept (see `ttl_cache`).
const MAX_TOKENS: usize = 8192;

/// Why a request is not authenticated (logged; the client gets the 401 either way).
#[derive(Debug, thiserror::Error)]
pub enum AuthnError {
    #[error("no credentials and anonymous requests are not allowed")]
    NoCredentials,
    #[error("invalid bearer token{}", if .0.is_empty() { String::new() } else { format!(": {}", .0) })]
    Rejected(String),
    #[error(transparent)]
    Review(#[from] ReviewError),
}

pub struct Authenticator {
    reviews: Arc<dyn Reviews>,
    tokens: TtlCache<[u8; 32], Option<Arc<User>>, ReviewError>,
    key: ring::hmac::Key,
    success_ttl: Duration,
    failure_ttl: Duration,
    anonymous: Option<Arc<User>>,
}

impl Authenticator {
    pub fn new(
        reviews: Arc<dyn Reviews>,
        success_ttl: Duration,
        failure_ttl: Duration,
        anonymous: bool,
    ) -> Self {
        let rng = ring::rand::SystemRandom::new();
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .expect("the system's random source works");
        Self {
            reviews,
            tokens: TtlCache::new(MAX_TOKENS),
            key,
            success_ttl,
            failure_ttl,
            anonymous: anonymous.then(|| Arc::new(User::anonymous())),
        }
    }

    /// Authenticates a request by its headers, removing the credential it used.
    pub async fn authenticate(&self, headers: &mut HeaderMap) -> Result<Arc<User>, AuthnError> {
        let Some(token) = take_token(headers) else {
            return self.anonymous.clone().ok_or(AuthnError::NoCredentials);
        };
        self.token(&token).await
    }

    /// The user a bearer token stands for.
    pub async fn token(&self, token: &str) -> Result<Arc<User>, AuthnError> {
        let mut key = [0u8; 32];
        key.copy_from_slice(ring::hmac::sign(&self.key, token.as_bytes()).as_ref());
        let verdict = self
            .tokens
            .get_or_fetch(&key, || async {
                match self.reviews.token_review(token).await? {
                    TokenVerdict::Authenticated(mut info) => {
                        if !info.groups.iter().any(|g| g == AUTHENTICATED) {
                            info.groups.push(AUTHENTICATED.into());
                        }
                        Ok((Some(Arc::new(User::new(info))), self.success_ttl))
                    }
                    TokenVerdict::Rejected(err) => {
                        if !err.is_empty() {
                            tracing::debug!(error = %err, "token rejected by the TokenReview");
                        }
                        Ok((None, self.failure_ttl))
                    }
                }
            })
            .await?;
        verdict.ok_or_else(|| AuthnError::Rejected(String::new()))
    }
}

/// The bearer token of a request, if it has one; a token found in the websocket
/// subprotocols is removed from them. (`Authorization` itself is replaced on the way
/// upstream, see `stack::identity`.)
pub fn take_token(headers: &mut HeaderMap) -> Option<String> {
    if let Some(auth) = headers.get(header::AUTHORIZATION) {
        let auth = auth.to_str().ok()?.trim();
        let mut parts = auth.splitn(3, ' ');
        let scheme = parts.next()?;
        let token = parts.next()?;
        if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
            return None;
        }
        return Some(token.to_string());
    }
    websocket_token(headers)
}

fn websocket_token(headers: &mut HeaderMap) -> Option<String> {
    let value = headers.get(WS_PROTOCOL)?.to_str().ok()?;
    let mut token = None;
    let mut rest = Vec::new();
    for p in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match p.strip_prefix(WS_TOKEN_PREFIX) {
            Some(encoded) if token.is_none() => {
                let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(encoded.trim_end_matches('='))
                    .ok()?;
                token = Some(String::from_utf8(bytes).ok()?);
            }
            _ => rest.push(p),
        }
    }
    let token = token.filter(|t| !t.is_empty())?;
    if rest.is_empty() {
        headers.remove(WS_PROTOCOL);
    } else if let Ok(v) = HeaderValue::from_str(&rest.join(", ")) {
        headers.insert(WS_PROTOCOL, v);
    }
    Some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: &'static str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            HeaderName::from_static(name),
            HeaderValue::from_str(value).unwrap(),
        );
        h
    }

    #[test]
    fn bearer_tokens_are_read_as_kube_reads_them() {
        assert_eq!(
            take_token(&mut with("authorization", "Bearer abc")).as_deref(),
            Some("abc")
        );
        assert_eq!(
            take_token(&mut with("authorization", "bearer abc x")).as_deref(),
            Some("abc")
        );
        assert_eq!(take_token(&mut with("authorization", "Bearer ")), None);
        assert_eq!(take_token(&mut with("authorization", "Basic YTpi")), None);
        assert_eq!(take_token(&mut HeaderMap::new()), None);
    }

    #[test]
    fn a_websocket_token_is_taken_out_of_the_subprotocols() {
        // base64url("tok") = "dG9r"
        let mut h = with(
            "sec-websocket-protocol",
            "v5.channel.k8s.io, base64url.bearer.authorization.k8s.io.dG9r",
        );
        assert_eq!(take_token(&mut h).as_deref(), Some("tok"));
        assert_eq!(h["sec-websocket-protocol"], "v5.channel.k8s.io");
    }
}

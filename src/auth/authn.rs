//! Who is asking: front proxies (`--requestheader-*`), x509 client certificates, bearer
//! tokens reviewed by the upstream (TokenReview, with a cache of verdicts), and anonymous
//! requests when allowed. Mirrors kube-apiserver's authenticator chain:
//!
//! - the authenticators are tried in the apiserver's order, requestheader, x509, token,
//!   and the first that succeeds wins; one that fails (a certificate that does not
//!   verify, a rejected token) does not stop the others (kube's `union.New`), but a
//!   request that none authenticates after a failure is a 401, never anonymous;
//! - a front proxy is a client whose certificate verifies against
//!   `--requestheader-client-ca-file` with a common name in `--requestheader-allowed-names`
//!   (any, when empty); its user is the first non-empty username header, its groups every
//!   value of the group headers, its extra the headers with the extra prefix (key lower
//!   case, path-unescaped), as requestheader.go reads them. The configured headers are
//!   removed from every request, so that they never reach the upstream;
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
use super::user::{path_unescape, User, UserInfo, AUTHENTICATED};
use super::x509::{PeerCert, X509Error};

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
    #[error(transparent)]
    X509(#[from] X509Error),
    /// kube's message: `x509: subject with cn=%s is not in the allowed list`.
    #[error("x509: subject with cn={0} is not in the allowed list")]
    ProxyNotAllowed(String),
}

/// `--requestheader-allowed-names`, `-username-headers`, `-group-headers` and
/// `-extra-headers-prefix`: what a front proxy may assert.
#[derive(Debug, Clone)]
pub struct RequestHeaderConfig {
    /// Common names a front proxy's certificate may have; empty: any.
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<HeaderName>,
    pub group_headers: Vec<HeaderName>,
    /// Lower case.
    pub extra_prefixes: Vec<String>,
}

impl Default for RequestHeaderConfig {
    fn default() -> Self {
        Self {
            allowed_names: Vec::new(),
            username_headers: vec![HeaderName::from_static("x-remote-user")],
            group_headers: vec![HeaderName::from_static("x-remote-group")],
            extra_prefixes: vec!["x-remote-extra-".into()],
        }
    }
}

impl RequestHeaderConfig {
    fn allows(&self, common_name: &str) -> bool {
        self.allowed_names.is_empty() || self.allowed_names.iter().any(|n| n == common_name)
    }

    /// The user the front proxy asserts (`None`: no username header).
    fn user(&self, headers: &HeaderMap) -> Option<UserInfo> {
        let values = |names: &[HeaderName]| -> Vec<String> {
            names
                .iter()
                .flat_map(|n| headers.get_all(n))
                .filter_map(|v| v.to_str().ok())
                .filter(|v| !v.is_empty())
                .map(str::to_string)
                .collect()
        };
        let name = values(&self.username_headers).into_iter().next()?;
        let mut groups = values(&self.group_headers);
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.into());
        }
        let mut extra: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (k, v) in headers {
            // Header names are lower case already: kube lowers the key, then unescapes it.
            let Some(key) = self
                .extra_prefixes
                .iter()
                .find_map(|p| k.as_str().strip_prefix(p.as_str()))
            else {
                continue;
            };
            if let Ok(v) = v.to_str() {
                if !v.is_empty() {
                    extra.entry(path_unescape(key)).or_default().push(v.into());
                }
            }
        }
        Some(UserInfo {
            name,
            uid: String::new(),
            groups,
            extra,
        })
    }

    /// Removes every header a front proxy could assert an identity with.
    fn strip(&self, headers: &mut HeaderMap) {
        for n in self.username_headers.iter().chain(&self.group_headers) {
            headers.remove(n);
        }
        let extra: Vec<HeaderName> = headers
            .keys()
            .filter(|k| {
                self.extra_prefixes
                    .iter()
                    .any(|p| k.as_str().starts_with(p.as_str()))
            })
            .cloned()
            .collect();
        for k in extra {
            headers.remove(k);
        }
    }
}

pub struct Authenticator {
    reviews: Arc<dyn Reviews>,
    tokens: TtlCache<[u8; 32], Option<Arc<User>>, ReviewError>,
    key: ring::hmac::Key,
    success_ttl: Duration,
    failure_ttl: Duration,
    anonymous: Option<Arc<User>>,
    requestheader: Option<RequestHeaderConfig>,
}

impl Authenticator {
    pub fn new(
        reviews: Arc<dyn Reviews>,
        success_ttl: Duration,
        failure_ttl: Duration,
        anonymous: bool,
        requestheader: Option<RequestHeaderConfig>,
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
            requestheader,
        }
    }

    /// Authenticates a request by its connection's client certificate (if any) and its
    /// headers, removing the credentials it read.
    pub async fn authenticate(
        &self,
        headers: &mut HeaderMap,
        cert: Option<&PeerCert>,
    ) -> Result<Arc<User>, AuthnError> {
        let mut failed = None;
        if let Some(rh) = &self.requestheader {
            let user = match cert.and_then(|c| c.proxy.as_ref()) {
                Some(Ok(cn)) if rh.allows(cn) => rh.user(headers),
                Some(Ok(cn)) => {
                    failed = Some(AuthnError::ProxyNotAllowed(cn.clone()));
                    None
                }
                Some(Err(e)) => {
                    failed = Some(e.clone().into());
                    None
                }
                None => None,
            };
            rh.strip(headers);
            if let Some(info) = user {
                return Ok(Arc::new(User::new(info)));
            }
        }
        match cert.and_then(|c| c.user.as_ref()) {
            Some(Ok(Some(user))) => return Ok(user.clone()),
            Some(Err(e)) => failed = Some(e.clone().into()),
            Some(Ok(None)) | None => {}
        }
        if let Some(token) = take_token(headers) {
            return self.token(&token).await;
        }
        match failed {
            Some(err) => Err(err),
            None => self.anonymous.clone().ok_or(AuthnError::NoCredentials),
        }
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

    /// Reviews that accept the token `good` as `tom`.
    struct OneToken;

    impl Reviews for OneToken {
        fn token_review(&self, token: &str) -> super::super::review::ReviewFuture<TokenVerdict> {
            let verdict = if token == "good" {
                TokenVerdict::Authenticated(UserInfo {
                    name: "tom".into(),
                    ..Default::default()
                })
            } else {
                TokenVerdict::Rejected(String::new())
            };
            Box::pin(async move { Ok(verdict) })
        }

        fn access_review(
            &self,
            _: &UserInfo,
            _: &super::super::Attributes,
        ) -> super::super::review::ReviewFuture<super::super::Decision> {
            unreachable!("authn asks no access review")
        }
    }

    fn authenticator(anonymous: bool, requestheader: bool) -> Authenticator {
        Authenticator::new(
            Arc::new(OneToken),
            Duration::from_secs(60),
            Duration::from_secs(10),
            anonymous,
            requestheader.then(|| RequestHeaderConfig {
                allowed_names: vec!["proxy".into()],
                ..Default::default()
            }),
        )
    }

    fn x509_user(name: &str) -> Option<Result<Option<Arc<User>>, X509Error>> {
        Some(Ok(Some(Arc::new(User::new(UserInfo {
            name: name.into(),
            groups: vec![AUTHENTICATED.into()],
            ..Default::default()
        })))))
    }

    fn failed() -> X509Error {
        X509Error::Verify(tokio_rustls::rustls::Error::InvalidCertificate(
            tokio_rustls::rustls::CertificateError::UnknownIssuer,
        ))
    }

    fn proxied() -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("x-remote-user", ""),
            ("x-remote-user", "dave"),
            ("x-remote-group", "a"),
            ("x-remote-group", "b"),
            ("x-remote-extra-scopes", "read"),
            ("x-remote-extra-acme.com%2fproject", "p1"),
            ("authorization", "Bearer good"),
        ] {
            h.append(
                HeaderName::from_static(k),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[tokio::test]
    async fn the_first_authenticator_that_succeeds_wins_in_kubes_order() {
        let a = authenticator(false, true);
        // A front proxy's headers before its (or anyone's) certificate and token.
        let proxy = PeerCert {
            user: x509_user("carol"),
            proxy: Some(Ok("proxy".into())),
        };
        let mut h = proxied();
        let u = a.authenticate(&mut h, Some(&proxy)).await.unwrap();
        assert_eq!(u.info.name, "dave", "the first non-empty username header");
        assert_eq!(u.info.groups, ["a", "b", AUTHENTICATED]);
        assert_eq!(u.info.extra["scopes"], ["read"]);
        assert_eq!(u.info.extra["acme.com/project"], ["p1"]);
        assert!(
            !h.keys().any(|k| k.as_str().starts_with("x-remote-")),
            "the asserted identity is removed: {h:?}"
        );

        // Not a front proxy (no proxy verdict): its headers assert nothing, and are
        // removed all the same; the certificate's user comes next.
        let cert = PeerCert {
            user: x509_user("carol"),
            proxy: None,
        };
        let mut h = proxied();
        let u = a.authenticate(&mut h, Some(&cert)).await.unwrap();
        assert_eq!(u.info.name, "carol");
        assert!(!h.keys().any(|k| k.as_str().starts_with("x-remote-")));

        // A proxy whose CN is not allowed, and a certificate of an unknown CA: both fail,
        // and the token still authenticates (kube's union, not fail-on-error).
        let bad = PeerCert {
            user: Some(Err(failed())),
            proxy: Some(Ok("someone".into())),
        };
        let u = a.authenticate(&mut proxied(), Some(&bad)).await.unwrap();
        assert_eq!(u.info.name, "tom");
    }

    #[tokio::test]
    async fn a_failed_credential_is_a_401_never_anonymous() {
        let a = authenticator(true, true);
        // Nothing at all: anonymous (allowed here).
        let u = a.authenticate(&mut HeaderMap::new(), None).await.unwrap();
        assert_eq!(u.info.name, "system:anonymous");
        // A certificate that does not verify, and nothing else: refused.
        let bad = PeerCert {
            user: Some(Err(failed())),
            proxy: None,
        };
        let err = a
            .authenticate(&mut HeaderMap::new(), Some(&bad))
            .await
            .unwrap_err();
        assert!(matches!(err, AuthnError::X509(_)), "{err}");
        // A proxy with a CN not allowed and no other credential.
        let stranger = PeerCert {
            user: None,
            proxy: Some(Ok("someone".into())),
        };
        let mut h = proxied();
        h.remove("authorization");
        let err = a.authenticate(&mut h, Some(&stranger)).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "x509: subject with cn=someone is not in the allowed list"
        );
        // A front proxy that names no user asserts nothing: the next credential counts.
        let proxy = PeerCert {
            user: None,
            proxy: Some(Ok("proxy".into())),
        };
        let mut h = with("authorization", "Bearer good");
        let u = a.authenticate(&mut h, Some(&proxy)).await.unwrap();
        assert_eq!(u.info.name, "tom");
    }
}

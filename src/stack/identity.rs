//! `identity`: a forwarded request reaches the upstream as the client. The client's
//! credential (`Authorization`, already verified) and any `Impersonate-*` header it sent
//! (already checked by `impersonate`) are removed, and the user's impersonation headers
//! are added; watchgate's own credentials authenticate the request upstream (kube's auth
//! layer), and the apiserver then authorizes and audits it as the impersonated client.
//! See docs/security.md ("Identity on forwarded requests").

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{header, Request, Response};
use tower::{Layer, Service};

use crate::auth::User;
use crate::body::Body;

#[derive(Clone, Copy, Default)]
pub struct IdentityLayer;

impl<S> Layer<S> for IdentityLayer {
    type Service = Identity<S>;

    fn layer(&self, inner: S) -> Identity<S> {
        Identity { inner }
    }
}

#[derive(Clone)]
pub struct Identity<S> {
    inner: S,
}

/// Rewrites `req`'s identity headers for `user`. Front-proxy headers (`X-Remote-User`,
/// `-Group`, `-Extra-*`, `-Uid`, the apiserver's default `--requestheader-*` names) go too:
/// a client must not be able to assert an identity to an upstream that would trust
/// watchgate as a front proxy.
pub fn as_user<B>(req: &mut Request<B>, user: &User) {
    let headers = req.headers_mut();
    headers.remove(header::AUTHORIZATION);
    let stale: Vec<_> = headers
        .keys()
        .filter(|k| {
            let k = k.as_str();
            k.starts_with("impersonate-") || k.starts_with("x-remote-")
        })
        .cloned()
        .collect();
    for k in stale {
        headers.remove(k);
    }
    for (name, value) in user.impersonation_headers() {
        headers.append(name.clone(), value.clone());
    }
}

impl<S, B> Service<Request<B>> for Identity<S>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> S::Future {
        if let Some(user) = req.extensions().get::<Arc<User>>().cloned() {
            as_user(&mut req, &user);
        }
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserInfo;

    #[test]
    fn a_forwarded_request_carries_only_the_users_identity() {
        let mut req = Request::get("/api/v1/pods")
            .header("authorization", "Bearer client-token")
            .header("impersonate-user", "root")
            .header("impersonate-group", "system:masters")
            .header("x-remote-user", "root")
            .header("x-remote-extra-scopes", "all")
            .header("accept", "application/json")
            .body(())
            .unwrap();
        let user = User::new(UserInfo {
            name: "alice".into(),
            groups: vec!["developers".into(), "system:authenticated".into()],
            ..Default::default()
        });
        as_user(&mut req, &user);
        let mut h: Vec<(String, String)> = req
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
            .collect();
        h.sort();
        let want = [
            ("accept", "application/json"),
            ("impersonate-group", "developers"),
            ("impersonate-group", "system:authenticated"),
            ("impersonate-user", "alice"),
        ];
        assert_eq!(
            h,
            want.map(|(k, v)| (k.to_string(), v.to_string())).to_vec()
        );
    }
}

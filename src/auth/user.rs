//! Who a request is from: `user.Info` of k8s.io/apiserver (name, uid, groups, extra), and
//! the impersonation headers that carry it to the upstream.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use http::{HeaderName, HeaderValue};

/// The group every authenticated user is in (`user.AllAuthenticated`).
pub const AUTHENTICATED: &str = "system:authenticated";
/// The user and group of a request without credentials, when `--anonymous-auth` allows it.
pub const ANONYMOUS: &str = "system:anonymous";
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The group APF exempts from its limits (and so do the per-user limits).
pub const MASTERS: &str = "system:masters";

/// An authenticated identity. Compared and hashed by content: two requests with the same
/// identity share authorization decisions, whatever credential proved it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// A user as the request path keeps it (`Arc<User>` in the request's extensions): the
/// identity, plus its impersonation headers, built once per identity and reused by every
/// request forwarded on its behalf.
#[derive(Debug)]
pub struct User {
    pub info: UserInfo,
    headers: OnceLock<Vec<(HeaderName, HeaderValue)>>,
}

impl User {
    pub fn new(info: UserInfo) -> Self {
        Self {
            info,
            headers: OnceLock::new(),
        }
    }

    /// `system:anonymous` in `system:unauthenticated` (the anonymous authenticator).
    pub fn anonymous() -> Self {
        Self::new(UserInfo {
            name: ANONYMOUS.into(),
            groups: vec![UNAUTHENTICATED.into()],
            ..Default::default()
        })
    }

    pub fn name(&self) -> &str {
        &self.info.name
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.info.groups.iter().any(|g| g == group)
    }

    /// `Impersonate-User`, `Impersonate-Uid`, one `Impersonate-Group` per group and one
    /// `Impersonate-Extra-<key>` per extra value, as client-go's impersonating round
    /// tripper writes them (extra keys path-escaped, so that any key is a legal header
    /// name; header names are lower case, and the apiserver unescapes `%2f` as `%2F`). A
    /// value that is not a legal header value is left out (it cannot come from a
    /// TokenReview: Kubernetes names are printable).
    pub fn impersonation_headers(&self) -> &[(HeaderName, HeaderValue)] {
        self.headers.get_or_init(|| {
            let mut out = Vec::new();
            let mut push = |name: HeaderName, value: &str| {
                if let Ok(v) = HeaderValue::from_str(value) {
                    out.push((name, v));
                }
            };
            push(IMPERSONATE_USER, &self.info.name);
            if !self.info.uid.is_empty() {
                push(IMPERSONATE_UID, &self.info.uid);
            }
            for g in &self.info.groups {
                push(IMPERSONATE_GROUP, g);
            }
            for (key, values) in &self.info.extra {
                let name = format!("impersonate-extra-{}", path_escape(key));
                if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
                    for v in values {
                        push(name.clone(), v);
                    }
                }
            }
            out
        })
    }
}

// Identity is the info; the header cache is derived from it.
impl PartialEq for User {
    fn eq(&self, other: &Self) -> bool {
        self.info == other.info
    }
}

impl Eq for User {}

impl std::hash::Hash for User {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.info.hash(state)
    }
}

pub const IMPERSONATE_USER: HeaderName = HeaderName::from_static("impersonate-user");
pub const IMPERSONATE_UID: HeaderName = HeaderName::from_static("impersonate-uid");
pub const IMPERSONATE_GROUP: HeaderName = HeaderName::from_static("impersonate-group");
pub const IMPERSONATE_EXTRA_PREFIX: &str = "impersonate-extra-";

/// Go's `url.PathEscape`: everything but unreserved characters and the sub-delimiters a
/// path segment allows is percent-encoded (client-go escapes extra keys with it).
pub fn path_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        let keep = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'_' | b'.' | b'~' | b'$' | b'&' | b'+' | b':' | b'=' | b'@'
            );
        if keep {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The inverse of [`path_escape`] (`url.PathUnescape`), for extra keys in client headers.
pub fn path_unescape(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impersonation_headers_carry_the_whole_identity() {
        let user = User::new(UserInfo {
            name: "system:serviceaccount:ns:sa".into(),
            uid: "u-1".into(),
            groups: vec!["system:serviceaccounts".into(), AUTHENTICATED.into()],
            extra: BTreeMap::from([(
                "authentication.kubernetes.io/pod-name".to_string(),
                vec!["p1".to_string()],
            )]),
        });
        let h: Vec<(String, String)> = user
            .impersonation_headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
            .collect();
        let want = [
            ("impersonate-user", "system:serviceaccount:ns:sa"),
            ("impersonate-uid", "u-1"),
            ("impersonate-group", "system:serviceaccounts"),
            ("impersonate-group", AUTHENTICATED),
            (
                "impersonate-extra-authentication.kubernetes.io%2fpod-name",
                "p1",
            ),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(h, want);
        assert_eq!(
            path_unescape("authentication.kubernetes.io%2Fpod-name"),
            "authentication.kubernetes.io/pod-name"
        );
    }
}

//! List continue tokens in kube-apiserver's format (k8s.io/apiserver `pkg/storage`
//! `continue.go`), shared by the simulator, which issues and resumes them, and the cache,
//! which issues first pages whose continuations the upstream resumes.
//!
//! A token is base64url (no padding) of `{"v":"meta.k8s.io/v1","rv":N,"start":"<key>\u0000"}`,
//! where `<key>` is the last returned object's storage key with the list's key prefix
//! trimmed (`EncodeContinue(key+"\x00", keyPrefix, rv)`: `strings.TrimPrefix(key,
//! keyPrefix)`). The trailing NUL makes the next range start strictly after that key.
//!
//! kube-apiserver has two key prefixes, hence two forms of the same token ([`KeyForm`]):
//!
//! - its watch cache (`pkg/storage/cacher/cacher.go` `GetList`, release-1.36) passes the
//!   request's key as it came, `/pods/<ns>` or `/pods`, with no trailing slash, so the
//!   start key keeps a leading slash: `"start":"/p-2\u0000"` ([`KeyForm::Rooted`]). Since
//!   `ListFromCacheSnapshot` (on by default from 1.34) the cache serves paged lists and
//!   their continuations, so this is what 1.36 issues;
//! - its etcd3 store (`pkg/storage/etcd3/store.go` `GetList`) passes `storage.PrepareKey`'s
//!   key, to which a recursive list adds the trailing slash, so the start key is relative:
//!   `"start":"p-2\u0000"` ([`KeyForm::Relative`]). Apiservers before the cache served
//!   pages issue this form, and so does 1.36 for what it delegates to etcd (a page older
//!   than its cache's snapshots, and the `rv:-1` token of `handleCompactedErrorForPaging`).
//!
//! `DecodeContinue` roots a start key without its slash before it cleans it, so both forms
//! name the same key and every apiserver resumes either; [`ContinueToken::decode`] does too.

use base64::Engine;
use serde::{Deserialize, Serialize};

/// kube-apiserver's `ErrGenericInvalidKey` and friends (`continue.go`).
const NOT_VALID: &str = "continue key is not valid";

/// How a token writes its start key (see the module docs): the same key either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyForm {
    /// `"start":"/p-2\u0000"`: kube-apiserver's watch cache, which 1.36 pages from.
    #[default]
    Rooted,
    /// `"start":"p-2\u0000"`: kube-apiserver's etcd3 store.
    Relative,
}

impl KeyForm {
    /// The form of a token an upstream issued, or `None` if it tells nothing: not a
    /// token, or an `rv` of -1 or less, which only etcd3's compaction path writes
    /// (whatever form the upstream's pages take).
    pub fn of(token: &str) -> Option<Self> {
        let data = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .ok()?;
        let wire: Wire = serde_json::from_slice(&data).ok()?;
        if wire.version != "meta.k8s.io/v1" || wire.rv <= 0 || wire.start.is_empty() {
            return None;
        }
        Some(if wire.start.starts_with('/') {
            KeyForm::Rooted
        } else {
            KeyForm::Relative
        })
    }
}

/// A continue token `storage.DecodeContinue` refuses; the message is its text (the
/// caller prefixes it with `invalid continue token: `).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidContinueToken(pub String);

impl From<String> for InvalidContinueToken {
    fn from(s: String) -> Self {
        InvalidContinueToken(s)
    }
}

/// A decoded continue token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinueToken {
    /// The resourceVersion of the first page; -1 means "continue at the latest", which
    /// etcd3 hands out when the first page's revision was compacted.
    pub rv: i64,
    /// The full key (`namespace/name` or `name` for cluster-scoped objects) the next
    /// page starts strictly after.
    pub start_after: String,
}

/// The wire form; field order as Go's `json.Marshal` writes the struct.
#[derive(Serialize, Deserialize)]
struct Wire {
    #[serde(rename = "v", default)]
    version: String,
    #[serde(rename = "rv", default)]
    rv: i64,
    #[serde(rename = "start", default)]
    start: String,
}

impl ContinueToken {
    /// The token for a list whose keys start with `prefix` (`""` for all namespaces or
    /// a cluster-scoped type, `"<ns>/"` for one namespace), its start key in `form`.
    pub fn encode(&self, prefix: &str, form: KeyForm) -> String {
        let relative = self
            .start_after
            .strip_prefix(prefix)
            .unwrap_or(&self.start_after);
        let root = match form {
            KeyForm::Rooted => "/",
            KeyForm::Relative => "",
        };
        let wire = Wire {
            version: "meta.k8s.io/v1".into(),
            rv: self.rv,
            start: format!("{root}{relative}\u{0}"),
        };
        let json = serde_json::to_vec(&wire).expect("a token serialises");
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    /// `storage.DecodeContinue`, with its error texts (the caller prefixes them with
    /// `invalid continue token: `).
    pub fn decode(token: &str, prefix: &str) -> Result<Self, InvalidContinueToken> {
        // Go's decoder reports the first byte outside the alphabet, or the dangling last
        // byte of an input whose length is 1 (mod 4).
        let bad = token
            .bytes()
            .position(|b| !(b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
            .or((token.len() % 4 == 1).then(|| token.len() - 1));
        if let Some(at) = bad {
            return Err(format!("{NOT_VALID}: illegal base64 data at input byte {at}").into());
        }
        let data = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| {
                format!(
                    "{NOT_VALID}: illegal base64 data at input byte {}",
                    token.len().saturating_sub(1)
                )
            })?;
        let wire: Wire = serde_json::from_slice(&data)
            .map_err(|e| format!("{NOT_VALID}: {}", go_json_error(&data, &e)))?;
        if wire.version != "meta.k8s.io/v1" {
            return Err(format!(
                "{NOT_VALID}: server does not recognize this encoded version {}",
                wire.version
            )
            .into());
        }
        if wire.rv == 0 {
            return Err(format!(
                "{NOT_VALID}: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
            )
            .into());
        }
        if wire.start.is_empty() {
            return Err(
                format!("{NOT_VALID}: encoded start key empty (version meta.k8s.io/v1)").into(),
            );
        }
        // The apiserver's defence against path traversal: the key, rooted, must already be
        // what Go's path.Clean makes of it, so that it cannot range outside the prefix.
        let rooted = if wire.start.starts_with('/') {
            wire.start.clone()
        } else {
            format!("/{}", wire.start)
        };
        if clean(&rooted) != rooted {
            return Err(format!("{NOT_VALID}: {}", wire.start).into());
        }
        let relative = &rooted[1..];
        let relative = relative.strip_suffix('\u{0}').unwrap_or(relative);
        Ok(Self {
            rv: wire.rv,
            start_after: format!("{prefix}{relative}"),
        })
    }
}

/// The message Go's `encoding/json` gives for input that does not decode into the token
/// struct, as near as serde's errors allow: syntax errors name the offending character.
fn go_json_error(data: &[u8], e: &serde_json::Error) -> String {
    match data.iter().find(|b| !b.is_ascii_whitespace()) {
        None => "unexpected end of JSON input".into(),
        Some(&c) if c != b'{' && c != b'n' => {
            format!(
                "invalid character '{}' looking for beginning of value",
                c as char
            )
        }
        _ if e.is_eof() => "unexpected end of JSON input".into(),
        _ => "invalid character looking for beginning of object key string".into(),
    }
}

/// Go's `path.Clean` for a rooted path: collapses `//`, drops `.` and resolves `..`
/// (never above the root), and removes a trailing slash.
fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    #[test]
    fn the_watch_caches_bytes_keep_the_leading_slash() {
        // kube-apiserver 1.36's cacher: EncodeContinue(key+"\x00", "/pods/default", rv).
        let t = ContinueToken {
            rv: 42,
            start_after: "default/pod-a".into(),
        };
        // All namespaces: relative to /registry/pods.
        assert_eq!(
            t.encode("", KeyForm::Rooted),
            raw(r#"{"v":"meta.k8s.io/v1","rv":42,"start":"/default/pod-a\u0000"}"#)
        );
        // One namespace: relative to /registry/pods/default.
        assert_eq!(
            t.encode("default/", KeyForm::Rooted),
            raw(r#"{"v":"meta.k8s.io/v1","rv":42,"start":"/pod-a\u0000"}"#)
        );
        // A cluster-scoped type: relative to /registry/namespaces.
        let ns = ContinueToken {
            rv: 7,
            start_after: "kube-system".into(),
        };
        assert_eq!(
            ns.encode("", KeyForm::Rooted),
            raw(r#"{"v":"meta.k8s.io/v1","rv":7,"start":"/kube-system\u0000"}"#)
        );
        assert_eq!(
            KeyForm::of(&t.encode("", KeyForm::Rooted)),
            Some(KeyForm::Rooted)
        );
    }

    #[test]
    fn etcd3s_bytes_are_relative() {
        // The etcd3 store: EncodeContinue(key+"\x00", "/registry/pods/default/", rv).
        let t = ContinueToken {
            rv: 42,
            start_after: "default/pod-a".into(),
        };
        assert_eq!(
            t.encode("", KeyForm::Relative),
            raw(r#"{"v":"meta.k8s.io/v1","rv":42,"start":"default/pod-a\u0000"}"#)
        );
        assert_eq!(
            t.encode("default/", KeyForm::Relative),
            raw(r#"{"v":"meta.k8s.io/v1","rv":42,"start":"pod-a\u0000"}"#)
        );
        assert_eq!(
            KeyForm::of(&t.encode("default/", KeyForm::Relative)),
            Some(KeyForm::Relative)
        );
    }

    #[test]
    fn both_forms_decode_to_the_same_key() {
        let t = ContinueToken {
            rv: 42,
            start_after: "default/pod-a".into(),
        };
        for form in [KeyForm::Rooted, KeyForm::Relative] {
            for prefix in ["", "default/"] {
                assert_eq!(
                    ContinueToken::decode(&t.encode(prefix, form), prefix),
                    Ok(t.clone()),
                    "{form:?} {prefix:?}"
                );
            }
        }
        // Hand-written, as each server writes them, in a namespace.
        for start in ["/pod-b", "pod-b"] {
            let tok = raw(&format!(
                r#"{{"v":"meta.k8s.io/v1","rv":7,"start":"{start}\u0000"}}"#
            ));
            assert_eq!(
                ContinueToken::decode(&tok, "ns/").unwrap().start_after,
                "ns/pod-b"
            );
        }
        // After a compaction etcd3 continues at the latest revision.
        let latest = ContinueToken {
            rv: -1,
            start_after: "a/b".into(),
        };
        let tok = latest.encode("", KeyForm::Relative);
        assert_eq!(ContinueToken::decode(&tok, ""), Ok(latest));
    }

    #[test]
    fn only_a_real_pages_token_tells_the_form() {
        let latest = raw(r#"{"v":"meta.k8s.io/v1","rv":-1,"start":"/a\u0000"}"#);
        assert_eq!(KeyForm::of(&latest), None, "etcd3's compaction token");
        assert_eq!(KeyForm::of("%%%"), None);
        assert_eq!(KeyForm::of(&raw("{}")), None);
        assert_eq!(KeyForm::of(&raw(r#"{"v":"v2","rv":3,"start":"/a"}"#)), None);
    }

    #[test]
    fn invalid_tokens_get_the_apiservers_messages() {
        let err = |t: &str| ContinueToken::decode(t, "").unwrap_err().0;
        assert_eq!(
            err("%%%"),
            "continue key is not valid: illegal base64 data at input byte 0"
        );
        assert_eq!(
            err(&raw("hello")),
            "continue key is not valid: invalid character 'h' looking for beginning of value"
        );
        assert_eq!(
            err(&raw(r#"{"v":"v1","rv":1,"start":"k"}"#)),
            "continue key is not valid: server does not recognize this encoded version v1"
        );
        assert_eq!(
            err(&raw(r#"{"v":"meta.k8s.io/v1","rv":0,"start":"k"}"#)),
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        );
        assert_eq!(
            err(&raw(r#"{"v":"meta.k8s.io/v1","rv":1,"start":""}"#)),
            "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)"
        );
        for traversal in ["../key", "./key", "./../key", "key/../.."] {
            let t = raw(&format!(
                r#"{{"v":"meta.k8s.io/v1","rv":1,"start":"{traversal}"}}"#
            ));
            assert_eq!(err(&t), format!("continue key is not valid: {traversal}"));
        }
    }
}

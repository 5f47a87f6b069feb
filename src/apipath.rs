//! How kube-apiserver reads a request path, before any handler sees it.
//!
//! Four steps, in the apiserver's order (docs/proxy.md, "Paths"):
//!
//! 1. **Go's URL decoding.** net/http parses the request target with
//!    `url.ParseRequestURI`: the path is percent-decoded as a whole (`%2F` becomes a `/`
//!    that then separates segments), and a `%` not followed by two hex digits fails the
//!    request with a plain `400 Bad Request` before any handler runs ([`unescape`]).
//!    Nothing cleans the path: no ServeMux is involved, so there is no 301 to a cleaned
//!    path, and `//`, `.` and `..` reach the handlers as they are.
//! 2. **The director** (k8s.io/apiserver `pkg/server/handler.go`) gives the path to
//!    go-restful when a WebService's root path is a prefix of it at a segment boundary:
//!    `/api` (and `/api/v1`), `/apis` and `/apis/` exactly, and `/apis/{group}` for the
//!    groups the server itself serves. Anything else goes to the non-API mux: exact and
//!    prefix handlers (`/version`, `/healthz`, `/openapi/…`), apiextensions-apiserver's
//!    `/apis/` prefix for custom resources, and at the end of the delegation chain Go's
//!    `http.NotFound`: `404 page not found` as text/plain ([`handler`]).
//! 3. **go-restful** trims every leading and trailing `/` and splits on `/`, keeping empty
//!    segments: a static route segment never matches an empty one (404 Status), a
//!    parameter (`{namespace}`, `{name}`) does.
//! 4. **RequestInfo** (`requestinfo.go`) names the namespace, resource, name and
//!    subresource from the same segments ([`split_path`]); handlers take the namespace and
//!    name from it.
//!
//! A path is *canonical* when none of that can make a difference: a single leading `/`,
//! no empty, `.` or `..` segment, valid UTF-8 once decoded, and a name the storage layer
//! accepts. Only canonical paths are answered from the cache; every other path is
//! forwarded, so the upstream gives its own answer to it.

/// A `%` not followed by two hex digits: Go's `url.EscapeError`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid URL escape {0:?}")]
pub struct InvalidEscape(pub String);

/// Percent-decodes a request path as net/http does (`unescape(s, encodePath)`): every
/// `%XX` becomes its byte, `+` stays `+`. The result is bytes: Go strings need not be
/// UTF-8.
pub fn unescape(raw: &str) -> Result<Vec<u8>, InvalidEscape> {
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            match (
                b.get(i + 1).copied().and_then(hex),
                b.get(i + 2).copied().and_then(hex),
            ) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                }
                _ => {
                    // Go quotes the escape: the `%` and at most two bytes after it.
                    let end = (i + 3).min(b.len());
                    return Err(InvalidEscape(
                        String::from_utf8_lossy(&b[i..end]).into_owned(),
                    ));
                }
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// Which of kube-apiserver's handlers a decoded path reaches (the director).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    /// A go-restful WebService: its unknown paths are a 404 `metav1.Status`
    /// (`the server could not find the requested resource`).
    Restful,
    /// apiextensions-apiserver's `/apis/` prefix: custom resources, routed by RequestInfo
    /// alone; an unknown group or resource falls through to `404 page not found`.
    CustomResources,
    /// The non-API mux: its unknown paths are Go's `404 page not found` (text/plain).
    Mux,
}

/// The director's choice for a decoded path (see the module docs).
pub fn handler(path: &str) -> Handler {
    let boundary = |root: &str| {
        path.strip_prefix(root)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    if boundary("/api") || path == "/apis" || path == "/apis/" {
        return Handler::Restful;
    }
    match path.strip_prefix("/apis/") {
        Some(rest) => {
            let group = rest.split('/').next().unwrap_or("");
            if !group.is_empty() && crate::model::resource::is_builtin_group(group) {
                Handler::Restful
            } else {
                Handler::CustomResources
            }
        }
        None => Handler::Mux,
    }
}

/// The handler a raw (undecoded) path reaches; an undecodable path reaches none (Go's
/// server answers it with 400), which is reported as [`Handler::Mux`].
pub fn handler_of_raw(raw: &str) -> Handler {
    match unescape(raw) {
        Ok(bytes) => handler(&String::from_utf8_lossy(&bytes)),
        Err(_) => Handler::Mux,
    }
}

/// requestinfo.go's `splitPath`: trim every leading and trailing `/`, split on `/`, keep
/// the empty segments in between (go-restful's tokens are the same).
pub fn split_path(path: &str) -> Vec<&str> {
    let trimmed = path.trim_matches('/');
    if trimmed.is_empty() {
        Vec::new()
    } else {
        trimmed.split('/').collect()
    }
}

/// apimachinery `path.IsValidPathSegmentName`: the reasons a name cannot be a storage
/// key segment (an empty list when it can).
pub fn invalid_name_reasons(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|c| name.contains(**c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_like_net_url() {
        assert_eq!(unescape("/a%2Fb%20c+d").unwrap(), b"/a/b c+d");
        assert_eq!(unescape("/%ff").unwrap(), vec![b'/', 0xff]);
        assert_eq!(unescape("/a%zz").unwrap_err(), InvalidEscape("%zz".into()));
        assert_eq!(unescape("/a%2").unwrap_err(), InvalidEscape("%2".into()));
        assert_eq!(unescape("/a%").unwrap_err(), InvalidEscape("%".into()));
    }

    #[test]
    fn the_director() {
        use Handler::*;
        for (path, want) in [
            ("/api", Restful),
            ("/api/", Restful),
            ("/api/v1/pods", Restful),
            ("/api//v1/pods", Restful),
            ("/apis", Restful),
            ("/apis/", Restful),
            ("/apis/apps/v1/deployments", Restful),
            ("/apis/apps", Restful),
            ("/apis/example.com/v1/widgets", CustomResources),
            ("/apis//v1/pods", CustomResources),
            ("//api/v1/pods", Mux),
            ("/apix/v1", Mux),
            ("/apiv1/pods", Mux),
            ("/version", Mux),
            ("/", Mux),
        ] {
            assert_eq!(handler(path), want, "{path}");
        }
    }

    #[test]
    fn splits_like_requestinfo() {
        assert_eq!(split_path("//api/v1//pods/"), vec!["api", "v1", "", "pods"]);
        assert!(split_path("///").is_empty());
    }

    #[test]
    fn names_the_storage_refuses() {
        assert_eq!(invalid_name_reasons(".."), vec!["may not be '..'"]);
        assert_eq!(invalid_name_reasons("a%b"), vec!["may not contain '%'"]);
        assert!(invalid_name_reasons("web-1").is_empty());
    }
}

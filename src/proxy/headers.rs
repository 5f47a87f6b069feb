//! Header policy of a correct HTTP proxy (RFC 9110 §7.6.1): hop-by-hop fields describe
//! one connection, so they are removed in both directions; everything else (Accept,
//! Content-Type, Content-Encoding, Impersonate-*, Audit-ID, Warning, ...) passes
//! unchanged. For an upgrade the `Upgrade` field and `Connection: Upgrade` are the point
//! of the exchange, so they are kept (and re-stated) on both legs.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Response header naming where an answer came from ([`Source`]). Only [`Source`] writes
/// and reads it.
const SOURCE_HEADER: HeaderName = HeaderName::from_static("x-watchgate-source");

/// Where an answer came from, as `X-Watchgate-Source` tells the client and the metrics'
/// `source` label records it. The one place the header is written and read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The cache or the fan-out.
    Cache,
    /// Forwarded: the upstream's answer.
    Upstream,
    /// A Status the gateway made itself (the upstream unreachable or too slow, a refusal,
    /// a panic, the security layers' 401/403/429).
    Gateway,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Cache => "cache",
            Source::Upstream => "upstream",
            Source::Gateway => "gateway",
        }
    }

    /// Marks an answer as this source's.
    pub fn mark(self, headers: &mut HeaderMap) {
        headers.insert(SOURCE_HEADER, HeaderValue::from_static(self.as_str()));
    }

    /// Marks an answer nothing marked yet (the stack's default: the gateway's own).
    pub fn mark_unmarked(self, headers: &mut HeaderMap) {
        headers
            .entry(SOURCE_HEADER)
            .or_insert(HeaderValue::from_static(self.as_str()));
    }

    /// The source an answer was marked with, if any.
    pub fn of(headers: &HeaderMap) -> Option<Source> {
        match headers.get(SOURCE_HEADER).map(|v| v.as_bytes()) {
            Some(b"cache") => Some(Source::Cache),
            Some(b"upstream") => Some(Source::Upstream),
            Some(b"gateway") => Some(Source::Gateway),
            _ => None,
        }
    }
}

/// Fields that are hop-by-hop whether or not `Connection` lists them. `Proxy-Connection`
/// is not standard but old clients send it; Go's httputil.ReverseProxy strips the same set.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Whether `Connection` carries `token` (comma separated, case-insensitive).
pub fn connection_has(headers: &HeaderMap, token: &str) -> bool {
    connection_tokens(headers).any(|t| t.eq_ignore_ascii_case(token))
}

fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// An HTTP/1.1 request asking to switch protocols (SPDY/3.1, websocket, ...).
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE) && connection_has(headers, "upgrade")
}

/// Remove hop-by-hop fields. With `keep_upgrade`, `Upgrade` survives and
/// `Connection: Upgrade` is set again after the strip.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    let named: Vec<HeaderName> = connection_tokens(headers)
        .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
        .collect();
    for name in named {
        if keep_upgrade && name == header::UPGRADE {
            continue;
        }
        headers.remove(&name);
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
    if keep_upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    } else {
        headers.remove(header::UPGRADE);
    }
}

/// Headers of the request as it goes upstream. `Host` is dropped so the client derives it
/// from the upstream URL (the apiserver's certificate names that host, not ours).
pub fn upstream_request(headers: &mut HeaderMap, upgrade: bool) {
    // RFC 9112 §6.3: with both, Transfer-Encoding wins and a proxy must drop the received
    // Content-Length, or the two hops could disagree on where the body ends (smuggling).
    if headers.contains_key(header::TRANSFER_ENCODING) {
        headers.remove(header::CONTENT_LENGTH);
    }
    strip_hop_by_hop(headers, upgrade);
    headers.remove(header::HOST);
}

/// Headers of the response as it goes back to the client.
pub fn downstream_response(headers: &mut HeaderMap, upgrade: bool) {
    strip_hop_by_hop(headers, upgrade);
    Source::Upstream.mark(headers);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn strips_hop_by_hop_and_connection_named_fields() {
        let mut h = map(&[
            ("connection", "keep-alive, X-Private"),
            ("connection", "close"),
            ("x-private", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic eA=="),
            ("proxy-connection", "keep-alive"),
            ("te", "trailers"),
            ("trailer", "x-checksum"),
            ("transfer-encoding", "chunked"),
            ("content-length", "100"),
            ("upgrade", "h2c"),
            ("host", "gateway:8001"),
            ("accept", "application/json"),
            ("impersonate-user", "alice"),
            ("audit-id", "abc"),
            ("authorization", "Bearer t"),
        ]);
        upstream_request(&mut h, false);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort();
        assert_eq!(
            left,
            ["accept", "audit-id", "authorization", "impersonate-user"]
        );
    }

    #[test]
    fn upgrade_keeps_upgrade_and_restates_connection() {
        let mut h = map(&[
            ("connection", "Upgrade, X-Private"),
            ("x-private", "1"),
            ("upgrade", "SPDY/3.1"),
            ("x-stream-protocol-version", "v4.channel.k8s.io"),
        ]);
        assert!(is_upgrade(&h));
        upstream_request(&mut h, true);
        assert_eq!(h["upgrade"], "SPDY/3.1");
        assert_eq!(h["connection"], "Upgrade");
        assert_eq!(h["x-stream-protocol-version"], "v4.channel.k8s.io");
        assert!(!h.contains_key("x-private"));
    }

    #[test]
    fn upgrade_needs_both_fields() {
        assert!(!is_upgrade(&map(&[("upgrade", "websocket")])));
        assert!(!is_upgrade(&map(&[("connection", "upgrade")])));
        assert!(is_upgrade(&map(&[
            ("connection", "keep-alive, UPGRADE"),
            ("upgrade", "websocket")
        ])));
    }

    #[test]
    fn responses_are_marked_as_upstream() {
        let mut h = map(&[
            ("content-type", "application/json"),
            ("warning", "299 - \"x\""),
        ]);
        downstream_response(&mut h, false);
        assert_eq!(Source::of(&h), Some(Source::Upstream));
        assert_eq!(h["warning"], "299 - \"x\"");
    }
}

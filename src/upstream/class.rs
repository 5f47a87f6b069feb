//! Which connections a request may use: short requests and long-running ones never share
//! an upstream connection, so a request never waits behind streams that do not end (see
//! docs/proxy.md, "The upstream connection pool").

use http::Request;

/// The pool's two kinds of connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// Everything that answers and ends: gets, lists, writes, discovery.
    Short,
    /// Watches, followed logs and upgraded tunnels: they hold their stream (or, over
    /// HTTP/1.1, their connection) until the client or the server ends them.
    LongRunning,
}

impl Class {
    pub const ALL: [Class; 2] = [Class::Short, Class::LongRunning];

    /// The metrics label.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Short => "short",
            Class::LongRunning => "long_running",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Class::Short => 0,
            Class::LongRunning => 1,
        }
    }

    /// The class of a request about to be sent upstream.
    pub fn of<B>(req: &Request<B>) -> Class {
        if is_long_running(req.uri()) {
            Class::LongRunning
        } else {
            Class::Short
        }
    }
}

/// A request the gateway makes for itself (a reflector's list or watch, discovery, a
/// probe), set as a request extension. The cache serves every client of a resource from
/// one such watch, so it may use the connections kept back for short requests when
/// forwarded watches have taken all the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Internal;

/// Watches (`watch=true`, `/watch/` paths) and followed logs run until the client or the
/// server ends them: the apiserver's long-running check for the verbs that stream.
/// The proxy's drain and the metrics ask the same question through this function.
pub fn is_long_running(uri: &http::Uri) -> bool {
    let path = uri.path();
    if path.starts_with("/api/v1/watch/")
        || path == "/api/v1/watch"
        || path.starts_with("/apis/") && path.split('/').nth(4) == Some("watch")
    {
        return true;
    }
    uri.query().is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes())
            .any(|(k, v)| (k == "watch" || k == "follow") && parse_go_bool(&v))
    })
}

/// strconv.ParseBool's true values.
fn parse_go_bool(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_and_follows_are_long_running() {
        let class = |u: &str| Class::of(&Request::get(u).body(()).unwrap());
        for yes in [
            "/api/v1/pods?watch=true",
            "/api/v1/namespaces/a/pods?labelSelector=x&watch=1",
            "/api/v1/watch/pods",
            "/apis/apps/v1/watch/deployments",
            "/api/v1/namespaces/a/pods/p/log?follow=true",
        ] {
            assert_eq!(class(yes), Class::LongRunning, "{yes}");
        }
        for no in [
            "/api/v1/pods",
            "/api/v1/pods?watch=false",
            "/api/v1/namespaces/watch/pods",
            "/api/v1/namespaces/a/pods/p/log",
            "/version",
        ] {
            assert_eq!(class(no), Class::Short, "{no}");
        }
    }
}

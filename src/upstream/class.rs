//! Which connections a request may use: short requests and long-running ones never share
//! an upstream connection, so a request never waits behind streams that do not end (see
//! docs/proxy.md, "The upstream connection pool").

/// The pool's two kinds of connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// Everything that answers and ends: gets, lists, writes, discovery.
    Short,
    /// Watches, logs, exec and the other long-running requests kube-apiserver names
    /// (`request::Parsed::long_running`), and upgraded tunnels: they hold their stream (or, over
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

    /// The class of a client's request: kube-apiserver's long-running requests, as the
    /// parser decided once (`request::Parsed::long_running`). The forwarder sets it on the
    /// request it sends; the gateway's own requests set theirs (`Upstream::open_internal`),
    /// and one that sets none is short. The pool never reads the URI again.
    pub fn of(parsed: &crate::request::Parsed) -> Class {
        if parsed.long_running {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_is_the_parsers_long_running() {
        let class = |u: &str| {
            let req = http::Request::get(u).body(()).unwrap();
            let p = crate::request::Parsed::new(req.method(), req.uri(), req.headers());
            Class::of(&p)
        };
        for yes in [
            // Every spelling `Convert_Slice_string_To_bool` reads as true.
            "/api/v1/pods?watch",
            "/api/v1/pods?watch=",
            "/api/v1/pods?watch=1",
            "/api/v1/pods?watch=t",
            "/api/v1/pods?watch=True",
            "/api/v1/pods?watch=true",
            "/api/v1/pods?watch=yes",
            "/api/v1/namespaces/a/pods?labelSelector=x&watch",
            "/api/v1/watch/pods",
            "/apis/apps/v1/watch/deployments",
            "/api/v1/namespaces/a/pods/p/log?follow=true",
            "/api/v1/namespaces/a/pods/p/log",
            "/api/v1/namespaces/a/pods/p/exec?command=ls",
            "/api/v1/namespaces/a/services/s:80/proxy/x",
        ] {
            assert_eq!(class(yes), Class::LongRunning, "{yes}");
        }
        for no in [
            "/api/v1/pods",
            "/api/v1/pods?watch=false",
            "/api/v1/pods?watch=FALSE",
            "/api/v1/pods?watch=0",
            "/api/v1/namespaces/watch/pods",
            "/api/v1/namespaces/a/pods/p?watch=true",
            "/version",
        ] {
            assert_eq!(class(no), Class::Short, "{no}");
        }
    }
}

//! Helpers shared by the simulator's list/watch/bad-input tests: start the sim in-process
//! on 127.0.0.1:0, put objects straight into its store, talk to it with hyper-util.
#![allow(dead_code)]
// The store's closures return `Result<_, Status>` by design.
#![allow(clippy::result_large_err)]

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use watchgate::sim::resources::{find, ResourceType};
use watchgate::sim::{start, Mutation, SimConfig, SimHandle};

pub type HttpClient = Client<HttpConnector, Empty<Bytes>>;

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub async fn sim_with(f: impl FnOnce(&mut SimConfig)) -> SimHandle {
    let mut cfg = SimConfig::default();
    f(&mut cfg);
    start(cfg).await.expect("sim starts")
}

pub async fn sim() -> SimHandle {
    sim_with(|_| {}).await
}

pub fn pods() -> &'static ResourceType {
    find("", "v1", "pods").unwrap()
}

/// Creates or replaces a pod directly in the store; returns its new RV.
pub fn put_pod(h: &SimHandle, ns: &str, name: &str, labels: Value, phase: &str) -> u64 {
    let obj = json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": phase},
    });
    let out = h
        .store()
        .mutate(pods(), ns, name, |_| Ok(Mutation::Put(obj)))
        .unwrap()
        .unwrap();
    rv_of(&out)
}

pub fn delete_pod(h: &SimHandle, ns: &str, name: &str) -> u64 {
    let out = h
        .store()
        .mutate(pods(), ns, name, |_| Ok(Mutation::Delete))
        .unwrap()
        .unwrap();
    rv_of(&out)
}

pub fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

pub async fn send(h: &SimHandle, method: Method, path: &str) -> hyper::Response<Incoming> {
    let req = Request::builder()
        .method(method)
        .uri(format!("{}{}", h.url(), path))
        .body(Empty::new())
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), client().request(req))
        .await
        .expect("response within 10s")
        .expect("request ok")
}

/// GET → (status, JSON body).
pub async fn get(h: &SimHandle, path: &str) -> (StatusCode, Value) {
    let resp = send(h, Method::GET, path).await;
    let code = resp.status();
    let body = tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect())
        .await
        .expect("body within 10s")
        .unwrap()
        .to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap_or_else(|e| {
        panic!(
            "{path}: not JSON ({e}): {:?}",
            String::from_utf8_lossy(&body)
        )
    });
    (code, v)
}

/// Names of a list's items, in order.
pub fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items in {list}"))
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

pub fn list_rv(list: &Value) -> u64 {
    list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// A watch stream read event by event.
pub struct WatchStream {
    pub status: StatusCode,
    body: Incoming,
    buf: BytesMut,
    ended: bool,
}

pub async fn watch(h: &SimHandle, path: &str) -> WatchStream {
    let resp = send(h, Method::GET, path).await;
    WatchStream {
        status: resp.status(),
        body: resp.into_body(),
        buf: BytesMut::new(),
        ended: false,
    }
}

impl WatchStream {
    /// The next event, or None if the stream ended. Panics after `secs` seconds.
    pub async fn next_within(&mut self, secs: u64) -> Option<Value> {
        let fut = async {
            loop {
                if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                    let line = self.buf.split_to(pos + 1);
                    return Some(serde_json::from_slice(&line[..pos]).expect("event is JSON"));
                }
                if self.ended {
                    assert!(self.buf.is_empty(), "trailing bytes: {:?}", self.buf);
                    return None;
                }
                match self.body.frame().await {
                    Some(Ok(f)) => {
                        if let Ok(d) = f.into_data() {
                            self.buf.extend_from_slice(&d);
                        }
                    }
                    Some(Err(e)) => panic!("watch body error: {e}"),
                    None => self.ended = true,
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(secs), fut)
            .await
            .unwrap_or_else(|_| panic!("no watch event within {secs}s"))
    }

    pub async fn next(&mut self) -> Value {
        self.next_within(10).await.expect("stream ended early")
    }

    /// (type, name) of the next event.
    pub async fn next_typed(&mut self) -> (String, String) {
        let e = self.next().await;
        (
            e["type"].as_str().unwrap().to_string(),
            e["object"]["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        )
    }

    /// Asserts nothing arrives for `ms` milliseconds (the stream stays open and quiet).
    pub async fn expect_quiet(&mut self, ms: u64) {
        let r = tokio::time::timeout(Duration::from_millis(ms), self.next_within(3600)).await;
        if let Ok(e) = r {
            panic!("expected no event, got {e:?}");
        }
    }

    pub async fn expect_end(&mut self, secs: u64) {
        if let Some(e) = self.next_within(secs).await {
            panic!("expected end of stream, got {e}");
        }
    }
}

pub fn arc<T>(t: T) -> Arc<T> {
    Arc::new(t)
}

//! The `upstream` readiness check's own probe: `GET /version`, sent when `/readyz` is asked
//! while no upstream request has had an answer yet.
//!
//! Without it, a gateway with no `--cache` sends nothing upstream until a client's request
//! is forwarded, so it could never become ready on its own. kube-apiserver's readiness
//! checks work the same way: its `etcd` check talks to etcd when `/readyz` is asked. The
//! kubelet's readiness probe (or whoever asks) sets the pace, at most one probe is in
//! flight, and once the upstream has answered anything the check reads the upstream
//! client's sticky "reached" flag and sends nothing more. A gateway nobody asks about its
//! readiness sends no probe at all.

use std::sync::Arc;
use std::time::Duration;

use http::{header, Method, Request};
use tokio::sync::{watch, Mutex};

use crate::upstream::Upstream;

/// How long `/readyz` waits for a probe it started (or found running) before answering.
/// A reachable upstream answers `/version` in milliseconds; the manifests' readiness
/// probes allow 5 s.
const WAIT: Duration = Duration::from_secs(2);
/// A probe gives up after this; the next `/readyz` starts another.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The single-flight probe of one gateway's upstream.
pub struct UpstreamProbe {
    upstream: Upstream,
    /// The running probe's completion (`true` once it is over), if one was started.
    running: Mutex<Option<watch::Receiver<bool>>>,
}

impl UpstreamProbe {
    pub fn new(upstream: Upstream) -> Arc<Self> {
        Arc::new(Self {
            upstream,
            running: Mutex::new(None),
        })
    }

    /// Whether the upstream has answered a request, probing it first if it has not.
    pub async fn reached(&self) -> bool {
        if self.upstream.reached() {
            return true;
        }
        let mut done = {
            let mut running = self.running.lock().await;
            match running.as_ref() {
                // Still running: join it. (A probe whose task is gone without saying it
                // is over, say at runtime shutdown, is not waited for.)
                Some(rx) if !*rx.borrow() && rx.has_changed().is_ok() => rx.clone(),
                _ => {
                    let rx = self.start();
                    *running = Some(rx.clone());
                    rx
                }
            }
        };
        let _ = tokio::time::timeout(WAIT, done.wait_for(|over| *over)).await;
        self.upstream.reached()
    }

    /// Sends one `GET /version` in the background. Any answer, whatever its code, marks
    /// the upstream reached (the upstream client does that for every request).
    fn start(&self) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(false);
        let upstream = self.upstream.clone();
        tokio::spawn(async move {
            let req = Request::builder()
                .method(Method::GET)
                .uri("/version")
                .header(header::ACCEPT, "application/json")
                .body(crate::body::empty())
                .expect("a static request");
            match tokio::time::timeout(PROBE_TIMEOUT, upstream.send(req)).await {
                Ok(Ok(resp)) => {
                    tracing::debug!(status = %resp.status(), "upstream probe answered")
                }
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, upstream = %upstream.url(), "upstream probe (GET /version) failed")
                }
                Err(_) => {
                    tracing::warn!(upstream = %upstream.url(), "upstream probe (GET /version) had no answer within {PROBE_TIMEOUT:?}")
                }
            }
            tx.send_replace(true);
        });
        rx
    }
}

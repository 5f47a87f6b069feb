//! Protocol upgrades (exec, attach, port-forward) on the gateway's own listeners.
//!
//! Below the server and its users alike: the proxy and the simulator take an upgraded
//! connection with [`on`], the server (`server/h1.rs`) delivers it.
//!
//! HTTP/1.1 connections are served with hyper's plain connection, not its upgradeable one,
//! because a watch's connection leaves hyper and comes back (`h1.rs`), which only the plain
//! connection allows. hyper then hands an upgraded connection's socket back to its owner
//! instead of to the handler, so the listener fulfils the upgrade itself: it puts an
//! [`OnUpgrade`] in the request, and once hyper has written the 101 it sends the socket,
//! with any bytes hyper read past the request, to the handler waiting in [`on`].

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use http::Request;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;

use crate::body::BoxError;

/// A socket of any kind.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// The client's side of a connection after `101 Switching Protocols`: its socket, with the
/// bytes read past the request in front (the server hands over its rewinding socket).
pub type Upgraded = Box<dyn Io>;

/// Where the listener delivers a request's upgraded connection.
#[derive(Clone)]
pub struct OnUpgrade(Arc<Mutex<Option<oneshot::Receiver<Upgraded>>>>);

impl OnUpgrade {
    pub fn pair() -> (oneshot::Sender<Upgraded>, Self) {
        let (tx, rx) = oneshot::channel();
        (tx, OnUpgrade(Arc::new(Mutex::new(Some(rx)))))
    }
}

/// The upgraded connection of `req`, once its 101 has been written. Works on the gateway's
/// HTTP/1.1 connections and, through hyper's own mechanism, on any other hyper server.
pub fn on<B>(
    req: &mut Request<B>,
) -> Pin<Box<dyn Future<Output = Result<Upgraded, BoxError>> + Send>> {
    if let Some(ours) = req.extensions_mut().remove::<OnUpgrade>() {
        let rx = ours.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        return Box::pin(async move {
            match rx {
                Some(rx) => rx
                    .await
                    .map_err(|_| "the connection was not upgraded".into()),
                None => Err("the upgrade was already taken".into()),
            }
        });
    }
    let theirs = hyper::upgrade::on(req);
    Box::pin(async move {
        let io: Upgraded = Box::new(TokioIo::new(theirs.await?));
        Ok(io)
    })
}

//! Bodies that the proxy wraps around streams: a response that ends cleanly when the
//! gateway drains, and a request body that remembers it was cut short.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

type Signal = Pin<Box<dyn Future<Output = ()> + Send>>;

pin_project! {
    /// A long-running response (watch, `logs -f`) that ends with a clean end-of-stream
    /// once a drain has begun and the upstream has nothing ready: ending only when idle
    /// means the client never gets half an event, since the apiserver writes and flushes
    /// each event whole. client-go then sees an ordinary end of watch and re-watches
    /// elsewhere, instead of a reset.
    pub struct DrainingBody<B> {
        #[pin]
        inner: B,
        drain: Signal,
        ended: bool,
    }
}

impl<B> DrainingBody<B> {
    pub fn new(inner: B, drain: impl Future<Output = ()> + Send + 'static) -> Self {
        Self {
            inner,
            drain: Box::pin(drain),
            ended: false,
        }
    }
}

impl<B: Body<Data = Bytes>> Body for DrainingBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        if *this.ended {
            return Poll::Ready(None);
        }
        match this.inner.poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame),
            Poll::Pending => {
                if this.drain.as_mut().poll(cx).is_ready() {
                    *this.ended = true;
                    return Poll::Ready(None);
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        // Never exact: the stream may end early.
        let mut hint = SizeHint::new();
        hint.set_lower(0);
        hint
    }
}

pin_project! {
    /// The client's request body on its way upstream; records whether reading it failed
    /// (client vanished, body shorter than its Content-Length) so the proxy can tell a
    /// client's fault from the upstream's.
    pub struct TrackedBody<B> {
        #[pin]
        inner: B,
        failed: Arc<AtomicBool>,
    }
}

impl<B> TrackedBody<B> {
    pub fn new(inner: B) -> (Self, Arc<AtomicBool>) {
        let failed = Arc::new(AtomicBool::new(false));
        (
            Self {
                inner,
                failed: failed.clone(),
            },
            failed,
        )
    }
}

impl<B: Body<Data = Bytes>> Body for TrackedBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if let Poll::Ready(Some(Err(_))) = &polled {
            this.failed.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};
    use tokio::sync::{mpsc, oneshot};

    fn channel_body() -> (
        mpsc::Sender<Result<Frame<Bytes>, std::convert::Infallible>>,
        impl Body<Data = Bytes, Error = std::convert::Infallible>,
    ) {
        let (tx, rx) = mpsc::channel(4);
        let stream =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|f| (f, rx)) },
            );
        (tx, StreamBody::new(stream))
    }

    #[tokio::test]
    async fn ends_cleanly_when_draining_and_idle() {
        let (tx, inner) = channel_body();
        let (drain_tx, drain_rx) = oneshot::channel::<()>();
        let mut body = Box::pin(DrainingBody::new(inner, async move {
            let _ = drain_rx.await;
        }));
        tx.send(Ok(Frame::data(Bytes::from_static(b"event-1\n"))))
            .await
            .unwrap();
        let f = body.frame().await.unwrap().unwrap();
        assert_eq!(f.into_data().unwrap(), "event-1\n");
        // Data already waiting is still delivered after the drain begins.
        tx.send(Ok(Frame::data(Bytes::from_static(b"event-2\n"))))
            .await
            .unwrap();
        drain_tx.send(()).unwrap();
        let f = body.frame().await.unwrap().unwrap();
        assert_eq!(f.into_data().unwrap(), "event-2\n");
        // Idle and draining: a clean end, although the upstream stream is still open.
        assert!(body.frame().await.is_none());
        assert!(body.is_end_stream());
        drop(tx);
    }

    #[tokio::test]
    async fn tracked_body_records_failure() {
        let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(1);
        let stream =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|f| (f, rx)) },
            );
        let (body, failed) = TrackedBody::new(StreamBody::new(stream));
        let mut body = Box::pin(body);
        tx.send(Err(std::io::Error::other("cut"))).await.unwrap();
        assert!(body.frame().await.unwrap().is_err());
        assert!(failed.load(Ordering::Acquire));
    }
}

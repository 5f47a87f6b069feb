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
    /// once a drain has begun, at a point where the client has whole events: when the
    /// upstream has nothing ready (the apiserver writes and flushes each event whole), or,
    /// for newline-delimited streams (JSON watches, logs), right after a line ends — so a
    /// busy stream ends too. client-go then sees an ordinary end of watch and re-watches,
    /// instead of a reset.
    pub struct DrainingBody<B> {
        #[pin]
        inner: B,
        drain: Signal,
        // Set once `drain` has resolved; a finished future must not be polled again.
        draining: bool,
        line_delimited: bool,
        at_line_end: bool,
        ended: bool,
    }
}

impl<B> DrainingBody<B> {
    /// `line_delimited`: every event ends with `\n` (JSON watch streams, logs); protobuf
    /// watch streams are length-prefixed and only end when idle.
    pub fn new(
        inner: B,
        drain: impl Future<Output = ()> + Send + 'static,
        line_delimited: bool,
    ) -> Self {
        Self {
            inner,
            drain: Box::pin(drain),
            draining: false,
            line_delimited,
            at_line_end: true,
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
        if !*this.draining && this.drain.as_mut().poll(cx).is_ready() {
            *this.draining = true;
        }
        let draining = *this.draining;
        if draining && *this.line_delimited && *this.at_line_end {
            *this.ended = true;
            return Poll::Ready(None);
        }
        match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if let Some(last) = data.last() {
                        *this.at_line_end = *last == b'\n';
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(other) => Poll::Ready(other),
            Poll::Pending if draining => {
                *this.ended = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
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

/// A body fed frame by frame through a channel of `cap` frames (the proxy's tests).
#[cfg(test)]
pub(super) fn channel_body(
    cap: usize,
) -> (
    tokio::sync::mpsc::Sender<Result<Frame<Bytes>, std::convert::Infallible>>,
    impl Body<Data = Bytes, Error = std::convert::Infallible>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(cap);
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|f| (f, rx)) });
    (tx, http_body_util::StreamBody::new(stream))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};
    use tokio::sync::{mpsc, oneshot};

    #[tokio::test]
    async fn ends_cleanly_when_draining_and_idle() {
        let (tx, inner) = channel_body(4);
        let (drain_tx, drain_rx) = oneshot::channel::<()>();
        let mut body = Box::pin(DrainingBody::new(
            inner,
            async move {
                let _ = drain_rx.await;
            },
            false,
        ));
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
    async fn a_busy_line_stream_ends_at_the_next_line_end() {
        // Never idle: every poll has data ready.
        let parts = ["{\"a\":", "1}\n", "{\"b\":", "2}\n", "{\"c\":3}\n"];
        let inner = StreamBody::new(futures_util::stream::iter(parts.iter().map(|p| {
            Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(p.as_bytes())))
        })));
        let (drain_tx, drain_rx) = oneshot::channel::<()>();
        let mut body = Box::pin(DrainingBody::new(
            inner,
            async move {
                let _ = drain_rx.await;
            },
            true,
        ));
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "{\"a\":");
        // Mid-event when the drain begins: the event is finished, then the stream ends.
        drain_tx.send(()).unwrap();
        let second = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(second, "1}\n");
        assert!(body.frame().await.is_none());
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

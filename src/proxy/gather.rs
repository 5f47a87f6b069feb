//! A finite forwarded answer (a list, a get) passed on in pieces of at least
//! [`GATHER`] bytes instead of the upstream's own framing.
//!
//! Why: kube-apiserver 1.34+ streams a list item by item, and over HTTP/1.1 net/http cuts
//! it into chunks of 2048 bytes (`sim/list_stream.rs`); hyper's HTTP/1.1 client hands
//! the body over one chunk at a time, and hyper's server writes a frame as soon as the
//! body has no next one ready. Forwarded as they came, the ~4,400 chunks of a 9 MB list
//! cost a `writev` each (and a wake-up of the client to read 2 KiB), measured at +30 ms
//! over direct on the 2-core VM (docs/benchmarks.md, "Forwarding a streamed list").
//! Joined into 64 KiB pieces they cost ~140 writes. The copy is one `memcpy` per byte,
//! far below the system calls it saves; a frame already that large, or an answer that
//! comes whole in one frame (a forwarded get, with its Content-Length), is passed on as
//! it is.
//!
//! Only answers that end on their own are gathered: a watch, `logs -f` or any other
//! long-running stream must pass every byte on at once (`forward.rs` decides). Holding a
//! partial piece while the upstream has sent nothing more delays no reader, since a
//! client uses a list or an object only once it is whole.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

/// The size of the pieces passed on: the cache's own list chunk (`codec::list::CHUNK`).
pub const GATHER: usize = crate::codec::list::CHUNK;

pin_project! {
    /// See the module documentation.
    pub struct GatheredBody<B> {
        #[pin]
        inner: B,
        buf: BytesMut,
        // A trailers frame that came while data was held: passed on after it.
        trailers: Option<Frame<Bytes>>,
        // The inner body has ended.
        ended: bool,
    }
}

impl<B> GatheredBody<B> {
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            buf: BytesMut::new(),
            trailers: None,
            ended: false,
        }
    }
}

impl<B: Body<Data = Bytes>> Body for GatheredBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        loop {
            if *this.ended || this.trailers.is_some() {
                if !this.buf.is_empty() {
                    return Poll::Ready(Some(Ok(Frame::data(this.buf.split().freeze()))));
                }
                return Poll::Ready(this.trailers.take().map(Ok));
            }
            match this.inner.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    // An inner body that knows it is complete (a Content-Length one whose
                    // last byte came) may not say so by ending until its producer is
                    // polled again: its last piece goes at once. Alone (a forwarded get,
                    // most often), or large, a piece goes uncopied.
                    Ok(data)
                        if this.buf.is_empty()
                            && (data.len() >= GATHER || this.inner.is_end_stream()) =>
                    {
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    Ok(data) => {
                        if this.buf.is_empty() {
                            this.buf.reserve(GATHER.max(data.len()));
                        }
                        this.buf.extend_from_slice(&data);
                        if this.buf.len() >= GATHER || this.inner.is_end_stream() {
                            return Poll::Ready(Some(Ok(Frame::data(this.buf.split().freeze()))));
                        }
                    }
                    Err(trailers) => *this.trailers = Some(trailers),
                },
                // The answer is cut short either way; what was held is dropped with it.
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => *this.ended = true,
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.buf.is_empty() && self.trailers.is_none() && (self.ended || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        // The same bytes, in other pieces: what is held counts as still to come.
        let inner = self.inner.size_hint();
        let held = self.buf.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + held);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + held);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::super::stream::channel_body;
    use super::*;
    use http::HeaderMap;
    use http_body_util::BodyExt;
    use std::convert::Infallible;

    type Item = Result<Frame<Bytes>, Infallible>;

    fn data(n: usize, byte: u8) -> Item {
        Ok(Frame::data(Bytes::from(vec![byte; n])))
    }

    #[tokio::test]
    async fn small_frames_go_out_in_gathered_pieces_with_every_byte_in_order() {
        let (tx, inner) = channel_body(5000);
        let mut sent = Vec::new();
        for i in 0..4400u32 {
            let f = vec![(i % 251) as u8; 2048];
            sent.extend_from_slice(&f);
            tx.send(Ok(Frame::data(Bytes::from(f)))).await.unwrap();
        }
        tx.send(data(100, 7)).await.unwrap();
        sent.extend_from_slice(&[7; 100]);
        drop(tx);
        let mut body = Box::pin(GatheredBody::new(inner));
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        while let Some(f) = body.frame().await {
            let d = f.unwrap().into_data().unwrap();
            sizes.push(d.len());
            got.extend_from_slice(&d);
        }
        assert_eq!(got, sent);
        let (last, rest) = sizes.split_last().unwrap();
        assert!(rest.iter().all(|&n| n >= GATHER), "{sizes:?}");
        assert!(*last > 0);
        assert_eq!(sizes.len(), sent.len().div_ceil(GATHER));
    }

    #[tokio::test]
    async fn a_large_frame_passes_through_uncopied() {
        let (tx, inner) = channel_body(4);
        let big = Bytes::from(vec![1u8; 3 * GATHER]);
        tx.send(Ok(Frame::data(big.clone()))).await.unwrap();
        drop(tx);
        let mut body = Box::pin(GatheredBody::new(inner));
        let out = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(out.as_ptr(), big.as_ptr());
        assert!(body.frame().await.is_none());
        assert!(body.is_end_stream());
    }

    #[tokio::test]
    async fn a_partial_piece_is_held_until_more_comes_or_the_answer_ends() {
        let (tx, inner) = channel_body(4);
        let mut body = Box::pin(GatheredBody::new(inner));
        tx.send(data(10, 1)).await.unwrap();
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        // Ten bytes, nothing more yet: held, not passed on.
        assert!(body.as_mut().poll_frame(&mut cx).is_pending());
        assert!(!body.is_end_stream());
        assert_eq!(body.size_hint().lower(), 10);
        tx.send(data(5, 2)).await.unwrap();
        drop(tx);
        let out = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(
            &out[..],
            &[1u8; 10]
                .iter()
                .chain(&[2u8; 5])
                .copied()
                .collect::<Vec<_>>()[..]
        );
        assert!(body.frame().await.is_none());
    }

    /// One frame, then nothing (a producer not polled again), but complete by its length.
    struct LastFrameKnown(Option<Bytes>);

    impl Body for LastFrameKnown {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            match self.0.take() {
                Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
                None => Poll::Pending,
            }
        }

        fn is_end_stream(&self) -> bool {
            self.0.is_none()
        }
    }

    #[tokio::test]
    async fn a_body_complete_by_its_length_is_passed_on_uncopied_without_waiting_for_its_end() {
        let object = Bytes::from_static(b"{\"kind\":\"ConfigMap\"}");
        let mut body = Box::pin(GatheredBody::new(LastFrameKnown(Some(object.clone()))));
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        match body.as_mut().poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(f))) => {
                let out = f.into_data().unwrap();
                assert_eq!(out, object);
                assert_eq!(out.as_ptr(), object.as_ptr());
            }
            other => panic!("held a complete body: {:?}", other.is_pending()),
        }
        assert!(body.is_end_stream());
    }

    #[tokio::test]
    async fn trailers_follow_the_data_held_before_them() {
        let (tx, inner) = channel_body(4);
        tx.send(data(10, 1)).await.unwrap();
        let mut t = HeaderMap::new();
        t.insert("x-t", "1".parse().unwrap());
        tx.send(Ok(Frame::trailers(t))).await.unwrap();
        drop(tx);
        let mut body = Box::pin(GatheredBody::new(inner));
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap().len(), 10);
        let second = body.frame().await.unwrap().unwrap();
        assert_eq!(second.into_trailers().unwrap()["x-t"], "1");
        assert!(body.frame().await.is_none());
    }
}

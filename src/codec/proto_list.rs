//! A streamed protobuf list body assembled from per-object message bytes.
//!
//! A protobuf list is one length-delimited message (`runtime.Unknown.raw` holding the
//! `XxxList`), so its total size is written before its items: the items' bytes must all
//! be known first. They are each object's cached message (`CachedObject::proto`, built
//! once per object version, never per request), held as `Bytes` clones; the body then
//! copies them into chunks of about [`CHUNK`] bytes as hyper writes it, like the JSON list
//! body (`codec::list`).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Frame, SizeHint};

use super::list::CHUNK;
use crate::body::BoxError;
use crate::codec::gzip::ChunkSource;
use crate::proto::{item_frame_len, ListEnvelope};

pub struct ProtoListBody {
    envelope: ListEnvelope,
    items: std::vec::IntoIter<Bytes>,
    started: bool,
    done: bool,
}

impl ProtoListBody {
    /// The body of `items` (each one item's message) in `envelope`, which must have been
    /// built for exactly [`framed_len`] of them.
    pub fn new(envelope: ListEnvelope, items: Vec<Bytes>) -> Self {
        Self {
            envelope,
            items: items.into_iter(),
            started: false,
            done: false,
        }
    }

    pub fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut buf = BytesMut::with_capacity(CHUNK + 16 * 1024);
        if !self.started {
            buf.extend_from_slice(&self.envelope.prefix);
            self.started = true;
        }
        for item in self.items.by_ref() {
            buf.extend_from_slice(&self.envelope.item_header(item.len()));
            buf.extend_from_slice(&item);
            if buf.len() >= CHUNK {
                return Some(buf.freeze());
            }
        }
        buf.extend_from_slice(&self.envelope.suffix);
        self.done = true;
        Some(buf.freeze())
    }
}

/// The bytes `items` take inside a list (what [`ListEnvelope::new`] needs).
pub fn framed_len(items: &[Bytes]) -> usize {
    items.iter().map(|i| item_frame_len(i.len())).sum()
}

impl ChunkSource for ProtoListBody {
    fn next_chunk(&mut self) -> Option<Bytes> {
        ProtoListBody::next_chunk(self)
    }
}

impl http_body::Body for ProtoListBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(self.get_mut().next_chunk().map(|c| Ok(Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{lookup, ListMeta};

    #[test]
    fn chunks_concatenate_to_the_whole_list() {
        let list = lookup("", "v1", "ConfigMapList").unwrap();
        let items: Vec<Bytes> = (0..2000)
            .map(|i| Bytes::from(vec![b'x'; 50 + i % 7]))
            .collect();
        let meta = ListMeta {
            resource_version: "42",
            ..Default::default()
        };
        let env =
            ListEnvelope::new(list, "v1", "ConfigMapList", &meta, framed_len(&items)).unwrap();
        let mut whole = env.prefix.clone();
        for i in &items {
            env.write_item(&mut whole, i);
        }
        whole.extend_from_slice(&env.suffix);
        let mut body = ProtoListBody::new(env, items);
        let mut got = Vec::new();
        let mut chunks = 0;
        while let Some(c) = body.next_chunk() {
            got.extend_from_slice(&c);
            chunks += 1;
        }
        assert_eq!(got, whole);
        assert!(chunks > 1);
    }
}

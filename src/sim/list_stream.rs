//! A JSON list written the way kube-apiserver 1.34+ writes it: streamed, item by item,
//! through Go's HTTP/1.1 response buffer.
//!
//! Since 1.34 (`StreamingCollectionEncodingToJSON`, GA and locked on) the apiserver
//! encodes a list as a sequence of small writes (k8s.io/apimachinery
//! `runtime/serializer/json/collections.go`, `streamingEncodeList`): the list's head, then
//! each item's JSON with a `,` between, then `]}` and a newline. Without gzip
//! (`deferredResponseWriter` passes them straight through) the writes land in net/http's
//! per-response `bufio.Writer` of 2048 bytes (`bufferBeforeChunkingSize`): a write that
//! does not fit fills the buffer, which goes out as one chunk of exactly 2048 bytes; a
//! write longer than that into an empty buffer goes out as one chunk of its own length.
//! A body that ends within the buffer gets a `Content-Length` (net/http computes it when
//! the handler returns before the first flush); anything longer is chunked.
//!
//! What this changes for a client is timing: the first bytes of a large list leave
//! before the rest is encoded, and the body arrives at the encoder's pace. A proxy in
//! front (the gateway) then forwards while the apiserver still encodes, as it does in
//! front of a real one. The bytes of the body are those the simulator wrote in one piece
//! before.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use crate::body;
use crate::codec::gzip::{self, ChunkSource};

/// net/http's `bufferBeforeChunkingSize`: the response buffer, and so the chunk size.
pub const GO_CHUNK: usize = 2048;

/// A compact JSON list, produced chunk by chunk as it is pulled.
pub struct ListStream {
    /// The list's head up to and including `"items":[`, not yet written.
    head: Option<Vec<u8>>,
    items: Vec<Arc<Value>>,
    next: usize,
    /// Whether items lose their `kind` and `apiVersion` (typed lists; see `list.rs`).
    strip: bool,
    /// net/http's response buffer.
    buf: Vec<u8>,
    /// Chunks flushed and not yet pulled (at most two: a full buffer and one long write).
    ready: VecDeque<Bytes>,
    /// The item being encoded, reused between items.
    scratch: Vec<u8>,
    ended: bool,
}

impl ListStream {
    pub fn new(head: Vec<u8>, items: Vec<Arc<Value>>, strip: bool) -> Self {
        Self {
            head: Some(head),
            items,
            next: 0,
            strip,
            buf: Vec::with_capacity(GO_CHUNK),
            ready: VecDeque::new(),
            scratch: Vec::new(),
            ended: false,
        }
    }

    /// The response body: whole (with a `Content-Length`) when it fits Go's buffer,
    /// streamed otherwise; gzipped as kube-apiserver decides when `gzip_ok`.
    pub fn into_body(mut self, gzip_ok: bool) -> gzip::Negotiated {
        if gzip_ok {
            return gzip::negotiate_stream(true, self);
        }
        self.fill();
        if self.ended && self.ready.len() <= 1 {
            let whole = self.ready.pop_front().unwrap_or_default();
            return gzip::Negotiated {
                body: body::full(whole),
                gzipped: false,
            };
        }
        gzip::negotiate_stream(false, self)
    }

    /// `bufio.Writer.Write`.
    fn write(buf: &mut Vec<u8>, ready: &mut VecDeque<Bytes>, mut p: &[u8]) {
        while p.len() > GO_CHUNK - buf.len() {
            if buf.is_empty() {
                // A large write into an empty buffer goes out directly, uncut.
                ready.push_back(Bytes::copy_from_slice(p));
                return;
            }
            let n = GO_CHUNK - buf.len();
            buf.extend_from_slice(&p[..n]);
            p = &p[n..];
            ready.push_back(Bytes::from(std::mem::replace(
                buf,
                Vec::with_capacity(GO_CHUNK),
            )));
        }
        buf.extend_from_slice(p);
    }

    /// Writes the next piece of the list, or flushes the last bytes at its end.
    fn step(&mut self) {
        if let Some(head) = self.head.take() {
            Self::write(&mut self.buf, &mut self.ready, &head);
        } else if self.next < self.items.len() {
            if self.next > 0 {
                Self::write(&mut self.buf, &mut self.ready, b",");
            }
            self.scratch.clear();
            write_item(&mut self.scratch, &self.items[self.next], self.strip);
            self.next += 1;
            Self::write(&mut self.buf, &mut self.ready, &self.scratch);
        } else {
            Self::write(&mut self.buf, &mut self.ready, b"]}\n");
            if !self.buf.is_empty() {
                let last = std::mem::take(&mut self.buf);
                self.ready.push_back(Bytes::from(last));
            }
            self.ended = true;
        }
    }

    /// Encodes until a chunk is ready or the list has ended.
    fn fill(&mut self) {
        while self.ready.is_empty() && !self.ended {
            self.step();
        }
    }
}

impl ChunkSource for ListStream {
    fn next_chunk(&mut self) -> Option<Bytes> {
        self.fill();
        self.ready.pop_front()
    }
}

/// An item's compact JSON; a typed list's items without `kind` and `apiVersion` (empty
/// TypeMeta), a custom resource's with them, as unstructured lists keep them.
fn write_item(out: &mut Vec<u8>, obj: &Value, strip: bool) {
    match obj.as_object() {
        Some(m) if strip => {
            out.push(b'{');
            let mut first = true;
            for (k, v) in m {
                if k == "kind" || k == "apiVersion" {
                    continue;
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                let _ = serde_json::to_writer(&mut *out, k);
                out.push(b':');
                let _ = serde_json::to_writer(&mut *out, v);
            }
            out.push(b'}');
        }
        _ => {
            let _ = serde_json::to_writer(&mut *out, obj);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn items(n: usize, pad: usize) -> Vec<Arc<Value>> {
        (0..n)
            .map(|i| {
                Arc::new(
                    json!({"metadata": {"name": format!("o-{i}")}, "data": {"x": "y".repeat(pad)}}),
                )
            })
            .collect()
    }

    fn chunks(mut s: ListStream) -> Vec<Bytes> {
        std::iter::from_fn(|| s.next_chunk()).collect()
    }

    fn one_piece(head: &[u8], items: &[Arc<Value>]) -> Vec<u8> {
        let mut out = head.to_vec();
        for (i, o) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_item(&mut out, o, true);
        }
        out.extend_from_slice(b"]}\n");
        out
    }

    #[test]
    fn chunks_are_go_buffer_flushes_and_join_to_the_one_piece_list() {
        let head = br#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":["#.to_vec();
        let list = items(50, 300);
        let got = chunks(ListStream::new(head.clone(), list.clone(), true));
        let joined: Vec<u8> = got.iter().flat_map(|c| c.iter().copied()).collect();
        assert_eq!(joined, one_piece(&head, &list));
        // Every chunk but the last is exactly Go's buffer.
        let (last, full) = got.split_last().unwrap();
        assert!(
            full.iter().all(|c| c.len() == GO_CHUNK),
            "{:?}",
            got.iter().map(|c| c.len()).collect::<Vec<_>>()
        );
        assert!(!last.is_empty() && last.len() <= GO_CHUNK);
    }

    #[test]
    fn an_item_longer_than_the_buffer_after_a_flush_goes_out_uncut() {
        // The head, then one item of ~5 KB: the head fills part of the buffer, the item
        // tops it up (a 2048-byte chunk) and its rest, still longer than the buffer, goes
        // out in one piece, as `bufio.Writer.Write` does.
        let head = b"{\"items\":[".to_vec();
        let list = items(1, 5000);
        let got = chunks(ListStream::new(head.clone(), list.clone(), true));
        let lens: Vec<usize> = got.iter().map(|c| c.len()).collect();
        let total = one_piece(&head, &list).len();
        assert_eq!(lens[0], GO_CHUNK);
        assert_eq!(lens[1], total - GO_CHUNK - 3, "{lens:?}");
        assert_eq!(lens[2], 3, "{lens:?}");
    }

    #[test]
    fn a_list_that_fits_the_buffer_is_whole_and_a_longer_one_streams() {
        use http_body::Body as _;
        let head = b"{\"items\":[".to_vec();
        let small = ListStream::new(head.clone(), items(2, 10), true).into_body(false);
        assert!(!small.gzipped);
        assert!(small.body.size_hint().exact().is_some(), "Content-Length");
        let large = ListStream::new(head, items(20, 300), true).into_body(false);
        assert!(!large.gzipped);
        assert_eq!(large.body.size_hint().exact(), None, "chunked");
    }
}

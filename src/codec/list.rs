//! A streamed JSON list body built from a snapshot's cached bytes.
//!
//! The body is produced chunk by chunk while hyper writes it: each chunk copies at most
//! [`CHUNK`] bytes of cached objects, so a 150,000-object list never exists as one buffer,
//! and the snapshot (an `Arc`) keeps the objects alive for as long as the client reads.

use std::ops::Bound;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use crate::body::BoxError;
use crate::codec::gzip::ChunkSource;
use crate::model::object::CachedObject;
use crate::model::snapshot::Snapshot;

/// Target size of one body chunk. Large enough that per-chunk costs (a poll, a chunk
/// header, a syscall) vanish next to the copy; small enough to stay in L2.
pub const CHUNK: usize = 64 * 1024;

/// Which objects a list includes.
pub type Filter = Box<dyn Fn(&CachedObject) -> bool + Send + Sync>;

/// The list's envelope: everything but the items.
#[derive(Debug, Clone)]
pub struct ListHead {
    pub api_version: String,
    pub kind: String,
    pub resource_version: u64,
    /// How each item is written.
    pub items: ItemForm,
    /// `metadata.continue` of a limited list that has more items.
    pub continue_token: Option<String>,
    /// `metadata.remainingItemCount`: set with a continue token when there is no selector.
    pub remaining_item_count: Option<u64>,
}

impl ListHead {
    /// `{"kind":..,"apiVersion":..,"metadata":{"resourceVersion":".."},"items":[`, in the
    /// field order kube-apiserver writes.
    fn prefix(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        out.extend_from_slice(b"{\"kind\":");
        serde_json::to_writer(&mut out, &self.kind).expect("string serialises");
        out.extend_from_slice(b",\"apiVersion\":");
        serde_json::to_writer(&mut out, &self.api_version).expect("string serialises");
        out.extend_from_slice(b",\"metadata\":{\"resourceVersion\":\"");
        out.extend_from_slice(self.resource_version.to_string().as_bytes());
        out.push(b'"');
        // ListMeta's field order: resourceVersion, continue, remainingItemCount.
        if let Some(token) = &self.continue_token {
            out.extend_from_slice(b",\"continue\":");
            serde_json::to_writer(&mut out, token).expect("string serialises");
        }
        if let Some(n) = self.remaining_item_count {
            out.extend_from_slice(b",\"remainingItemCount\":");
            out.extend_from_slice(n.to_string().as_bytes());
        }
        out.extend_from_slice(b"},\"items\":");
        out
    }

    /// What an empty list's `items` is. The apiserver's lists come from storage with an
    /// empty, non-nil slice (`[]`); a `PartialObjectMetadataList` is built by appending to
    /// a nil slice (`asPartialObjectMetadataList`), which Go's JSON writes as `null`.
    fn empty_items(&self) -> &'static [u8] {
        match self.items {
            ItemForm::Metadata { .. } => b"null",
            _ => b"[]",
        }
    }
}

/// How a list writes its items.
#[derive(Debug, Clone)]
pub enum ItemForm {
    /// Without TypeMeta: items of built-in types, as the apiserver writes them.
    Bare,
    /// With TypeMeta (custom resources); the prefix (`{"kind":..,"apiVersion":..,`) is
    /// added to objects stored without it.
    Typed(Vec<u8>),
    /// `PartialObjectMetadata` items of a `PartialObjectMetadataList`: the item head
    /// (`model::meta::partial_head`), then the object's metadata (`unstructured`: rebuilt
    /// in Go order, see `CachedObject::metadata_json`).
    Metadata {
        head: &'static [u8],
        unstructured: bool,
    },
}

/// Where a limited list's page ends, decided before its head is written (the head carries
/// the continue token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageEnd {
    /// The key of the last item of the page (inclusive).
    pub last_key: Box<str>,
    /// How many items of the range follow the page (selected or not): its
    /// `remainingItemCount` when the list has no selector.
    pub remaining: usize,
}

/// The objects of `namespace`'s range (all of them when `None`), in list order.
fn range_bounds(namespace: Option<&str>) -> (Bound<Box<str>>, Bound<Box<str>>) {
    match namespace {
        // All keys of a namespace lie in ["ns/", "ns0"): '0' is the byte after '/'.
        Some(ns) => (
            Bound::Included(format!("{ns}/").into()),
            Bound::Excluded(format!("{ns}0").into()),
        ),
        None => (Bound::Unbounded, Bound::Unbounded),
    }
}

/// The bounds of `namespace`'s range that start after `after` (a continue token's key,
/// which lies in the range: `ContinueToken::decode` prefixes it with the namespace).
fn page_bounds(namespace: Option<&str>, after: Option<&str>) -> (Bound<Box<str>>, Bound<Box<str>>) {
    let (start, end) = range_bounds(namespace);
    match after {
        None => (start, end),
        Some(k) => {
            let beyond = match &end {
                Bound::Excluded(e) => k >= &**e,
                _ => false,
            };
            if beyond {
                // An empty range (imbl, like std, must not be given start > end).
                (end.clone(), end)
            } else {
                (Bound::Excluded(k.into()), end)
            }
        }
    }
}

/// A page of at most `limit` selected objects starting after `after` (the first page
/// when `None`), as kube-apiserver cuts it (the cacher's `GetList`, etcd3's for
/// continuations): `None` when the range holds no item after the page's last (no continue
/// token). With a filter, reaching any item past a full page is what tells that more may
/// follow, selected or not, so a token can lead to an empty next page, as it can from the
/// apiserver.
pub fn page(
    snapshot: &Snapshot,
    namespace: Option<&str>,
    filter: Option<&Filter>,
    after: Option<&str>,
    limit: usize,
) -> Option<PageEnd> {
    let mut selected = 0;
    let mut last: Option<&Box<str>> = None;
    let mut more = false;
    for (key, obj) in snapshot.objects.range(page_bounds(namespace, after)) {
        if selected >= limit {
            more = true;
            break;
        }
        if filter.is_none_or(|f| f(obj)) {
            selected += 1;
            last = Some(key);
        }
    }
    if !more {
        return None;
    }
    let last = last?;
    // Only lists without a selector report it; the walk is the price of knowing it.
    let remaining = match (filter, namespace, after) {
        (Some(_), _, _) => 0,
        (None, None, None) => snapshot.objects.len() - limit,
        (None, _, _) => snapshot
            .objects
            .range(page_bounds(namespace, Some(last)))
            .count(),
    };
    Some(PageEnd {
        last_key: last.clone(),
        remaining,
    })
}

/// The first page: [`page`] from the start of the range.
pub fn first_page(
    snapshot: &Snapshot,
    namespace: Option<&str>,
    filter: Option<&Filter>,
    limit: usize,
) -> Option<PageEnd> {
    page(snapshot, namespace, filter, None, limit)
}

/// The objects a list selects, in list order: `namespace`'s range after `after` (a
/// continuation's key), those `filter` keeps, up to and including `end` (a page's last
/// key). What [`ListBody`] streams, for answers built whole (Tables).
pub fn selected<'a>(
    snapshot: &'a Snapshot,
    namespace: Option<&str>,
    filter: Option<&'a Filter>,
    after: Option<&str>,
    end: Option<&str>,
) -> impl Iterator<Item = &'a Arc<CachedObject>> + 'a {
    let (start, ns_end) = page_bounds(namespace, after);
    let upper = match end {
        Some(k) => Bound::Included(Box::from(k)),
        None => ns_end,
    };
    snapshot
        .objects
        .range((start, upper))
        .map(|(_, o)| o)
        .filter(move |o| filter.is_none_or(|f| f(o)))
}

enum Phase {
    Head,
    Items,
    Done,
}

/// The streamed list body.
pub struct ListBody {
    head: ListHead,
    snapshot: Arc<Snapshot>,
    namespace: Option<Box<str>>,
    filter: Option<Filter>,
    /// The key of the last object emitted: the next chunk resumes after it. Re-seeking
    /// costs O(log n) per 64 KiB chunk, which avoids a self-referential iterator.
    cursor: Option<Box<str>>,
    /// The last key a limited list includes.
    end: Option<Box<str>>,
    first: bool,
    phase: Phase,
}

impl ListBody {
    pub fn new(
        head: ListHead,
        snapshot: Arc<Snapshot>,
        namespace: Option<&str>,
        filter: Option<Filter>,
    ) -> Self {
        Self {
            head,
            snapshot,
            namespace: namespace.map(Box::from),
            filter,
            cursor: None,
            end: None,
            first: true,
            phase: Phase::Head,
        }
    }

    /// A list that stops after `end` (inclusive): the page [`page`] cut.
    pub fn until(mut self, end: Box<str>) -> Self {
        self.end = Some(end);
        self
    }

    /// A list that starts after `key` (a continuation: the token's key).
    pub fn after(mut self, key: Box<str>) -> Self {
        self.cursor = Some(key);
        self
    }

    fn next_items(&mut self, buf: &mut Vec<u8>) -> bool {
        let (lower, ns_end) = page_bounds(self.namespace.as_deref(), self.cursor.as_deref());
        let upper = match &self.end {
            Some(k) => Bound::Included(k.clone()),
            None => ns_end,
        };
        let mut last = None;
        let mut exhausted = true;
        for (key, obj) in self.snapshot.objects.range((lower, upper)) {
            if let Some(f) = &self.filter {
                if !f(obj) {
                    last = Some(key);
                    continue;
                }
            }
            buf.push(if self.first { b'[' } else { b',' });
            self.first = false;
            match &self.head.items {
                ItemForm::Typed(prefix) => obj.write_with_type_meta(prefix, buf),
                ItemForm::Bare => obj.write_without_type_meta(buf),
                ItemForm::Metadata { head, unstructured } => {
                    buf.extend_from_slice(head);
                    // The cache admits only objects with metadata.
                    match obj.metadata_json(*unstructured) {
                        Some(m) => buf.extend_from_slice(&m),
                        None => buf.extend_from_slice(b"{}"),
                    }
                    buf.push(b'}');
                }
            }
            last = Some(key);
            if buf.len() >= CHUNK {
                exhausted = false;
                break;
            }
        }
        if let Some(k) = last {
            self.cursor = Some(k.clone());
        }
        exhausted
    }
}

impl ListBody {
    /// The next chunk of the body (≈[`CHUNK`] bytes), or `None` once `]}` is out.
    pub fn next_chunk(&mut self) -> Option<Bytes> {
        let mut buf = Vec::with_capacity(CHUNK + 8 * 1024);
        match self.phase {
            Phase::Done => return None,
            Phase::Head => {
                buf.extend_from_slice(&self.head.prefix());
                self.phase = Phase::Items;
            }
            Phase::Items => {}
        }
        if self.next_items(&mut buf) {
            if self.first {
                buf.extend_from_slice(self.head.empty_items());
            } else {
                buf.push(b']');
            }
            buf.extend_from_slice(b"}\n");
            self.phase = Phase::Done;
        }
        Some(Bytes::from(buf))
    }
}

impl ChunkSource for ListBody {
    fn next_chunk(&mut self) -> Option<Bytes> {
        ListBody::next_chunk(self)
    }
}

impl http_body::Body for ListBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(self.get_mut().next_chunk().map(|c| Ok(Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn pod(ns: &str, name: &str, rv: u64, pad: usize) -> Arc<CachedObject> {
        let raw = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{rv}","labels":{{"app":"{name}"}}}},"pad":"{}"}}"#,
            "x".repeat(pad)
        );
        Arc::new(CachedObject::parse(Bytes::from(raw), &[]).unwrap())
    }

    /// A snapshot as the store's writer leaves it: each object in, the resourceVersion
    /// the newest one's.
    fn with(snap: &mut Snapshot, obj: Arc<CachedObject>) {
        snap.resource_version = snap.resource_version.max(obj.resource_version);
        snap.insert(obj);
    }

    async fn collect(body: ListBody) -> (serde_json::Value, usize) {
        let mut body = body;
        let mut all = Vec::new();
        let mut frames = 0;
        while let Some(f) = body.frame().await {
            let data = f.unwrap().into_data().unwrap();
            assert!(
                data.len() <= CHUNK + 8 * 1024,
                "chunk of {} bytes",
                data.len()
            );
            all.extend_from_slice(&data);
            frames += 1;
        }
        assert!(all.ends_with(b"]}\n") || all.ends_with(b"null}\n"));
        (serde_json::from_slice(&all).unwrap(), frames)
    }

    fn names(list: &serde_json::Value) -> Vec<&str> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect()
    }

    fn head(rv: u64) -> ListHead {
        ListHead {
            api_version: "v1".into(),
            kind: "PodList".into(),
            resource_version: rv,
            items: ItemForm::Bare,
            continue_token: None,
            remaining_item_count: None,
        }
    }

    #[tokio::test]
    async fn streams_a_large_list_in_bounded_chunks() {
        let mut snap = Snapshot::default();
        for i in 0..2_000u64 {
            with(
                &mut snap,
                pod(&format!("ns-{}", i % 7), &format!("p-{i:05}"), i + 1, 1000),
            );
        }
        let snap = Arc::new(snap);
        let (v, frames) = collect(ListBody::new(
            head(snap.resource_version),
            snap.clone(),
            None,
            None,
        ))
        .await;
        assert!(frames > 20, "{frames} frames for ~2 MB");
        assert_eq!(v["kind"], "PodList");
        assert_eq!(v["metadata"]["resourceVersion"], "2000");
        let keys: Vec<String> = v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["metadata"]["namespace"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        let want: Vec<String> = snap.objects.keys().map(|k| k.to_string()).collect();
        assert_eq!(keys, want);
    }

    #[tokio::test]
    async fn scopes_to_a_namespace_and_filters() {
        let mut snap = Snapshot::default();
        with(&mut snap, pod("a", "x", 1, 0));
        with(&mut snap, pod("a", "y", 2, 0));
        with(&mut snap, pod("ab", "z", 3, 0));
        with(&mut snap, pod("a-b", "w", 4, 0));
        let snap = Arc::new(snap);
        let (v, _) = collect(ListBody::new(head(4), snap.clone(), Some("a"), None)).await;
        assert_eq!(names(&v), ["x", "y"]);
        let only_y: Filter = Box::new(|o| o.label("app") == Some("y"));
        let (v, _) = collect(ListBody::new(head(4), snap.clone(), None, Some(only_y))).await;
        assert_eq!(v["items"].as_array().unwrap().len(), 1);
        let none: Filter = Box::new(|_| false);
        let (v, frames) = collect(ListBody::new(head(4), snap, None, Some(none))).await;
        assert_eq!(v["items"], serde_json::json!([]));
        assert_eq!(frames, 1);
    }
    #[tokio::test]
    async fn a_first_page_ends_at_its_last_item_and_its_head_says_how_to_go_on() {
        let mut snap = Snapshot::default();
        for (i, (ns, name)) in [("a", "x"), ("a", "y"), ("a", "z"), ("ab", "w")]
            .into_iter()
            .enumerate()
        {
            with(&mut snap, pod(ns, name, i as u64 + 1, 0));
        }
        let snap = Arc::new(snap);
        // Two of a's three: the page ends at a/y; the range holds three.
        let end = first_page(&snap, Some("a"), None, 2).unwrap();
        assert_eq!(
            end,
            PageEnd {
                last_key: "a/y".into(),
                remaining: 1
            }
        );
        assert_eq!(first_page(&snap, Some("a"), None, 3), None);
        assert_eq!(first_page(&snap, None, None, 4), None);
        // With a filter, any item after a full page means "more", matching or not.
        let not_z: Filter = Box::new(|o| o.label("app") != Some("z"));
        assert_eq!(
            first_page(&snap, Some("a"), Some(&not_z), 2).map(|e| e.last_key),
            Some("a/y".into())
        );
        let only_x: Filter = Box::new(|o| o.label("app") == Some("x"));
        assert_eq!(
            first_page(&snap, None, Some(&only_x), 1).unwrap().last_key,
            "a/x".into()
        );

        let mut h = head(4);
        h.continue_token = Some("tok".into());
        h.remaining_item_count = Some(1);
        let body = ListBody::new(h, snap, Some("a"), None).until(end.last_key);
        let mut body = body;
        let mut raw = Vec::new();
        while let Some(f) = body.frame().await {
            raw.extend_from_slice(&f.unwrap().into_data().unwrap());
        }
        let text = String::from_utf8(raw).unwrap();
        // ListMeta's field order, as the apiserver writes it.
        assert!(
            text.starts_with(
                r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"4","continue":"tok","remainingItemCount":1},"items":["#
            ),
            "{text}"
        );
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(names(&v), ["x", "y"]);
    }
}

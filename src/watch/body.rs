//! One downstream watch's response body.
//!
//! A poll-driven state machine, no task of its own (an idle watcher costs a queue, a
//! deadline timer and this struct; its periodic bookmarks come from the hub's tick,
//! `watch::bookmarks`):
//!
//! ```text
//!   Initial ──(snapshot sent)──▶ CatchUp(seq) ──(reached the head)──▶ Live
//!                                   ▲                                  │
//!                                   └────(queue overflowed: lag_seq)───┘
//! ```
//!
//! `Initial` streams the starting snapshot as ADDED events in key order (frames share the
//! cached bytes). It holds the snapshot through a lease the hub takes back if the client
//! stops reading for `stall_timeout` (see `hub::SnapshotLease`). `CatchUp` reads the
//! shared history in batches. `Live` takes the events the hub pushed into its queue.
//! A step of either kind queues at most `BATCH` items and `BATCH_BYTES` of objects.
//!
//! Write batching: a lone event leaves at once, as its own frame holding the shared
//! encoded line (no copy). When several are ready together (a burst, a watcher that fell
//! behind, the initial events), they leave as one frame of up to `FRAME_BYTES`: copying
//! them is far cheaper than what each frame costs downstream. hyper's HTTP/1.1 writer
//! takes at most 16 frames per write, and h2 writes every DATA frame above 256 bytes with
//! its own syscall, so one frame per event would cost one kernel write per event exactly
//! when the watcher can least afford it. On loopback that write is most of the CPU a
//! delivery costs (docs/benchmarks.md).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::ops::Bound;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::encoding::AddedFrames;
use super::hub::{CatchUp, Hub, Registration, SnapshotLease, WatcherShared};
use super::queue::{self, Item};
use super::stats::EndReason;
use crate::duration::deadline_after;
use crate::lane::Lane;

/// Objects or history events handled per step, so one watcher never holds the hub's lock
/// (or the executor) for long.
const BATCH: usize = 256;

/// A step also stops once its objects or events add up to this many bytes: what one step
/// queues in `pending` stays alive for as long as the client takes to read it, which for
/// a stalled client is until its connection is closed. 256 large objects would otherwise
/// pin hundreds of MB per watcher (etcd allows 1.5 MB each).
const BATCH_BYTES: usize = 256 * 1024;

/// Events ready together are sent as one frame of at most this many bytes.
const FRAME_BYTES: usize = 64 * 1024;

/// kube-apiserver sends the last bookmark this long before a watch's deadline, so that
/// the client can resume from it instead of from an older resourceVersion.
const PRE_TIMEOUT_BOOKMARK: Duration = Duration::from_secs(2);

enum Phase {
    Initial {
        lease: Arc<SnapshotLease>,
        after: Option<Box<str>>,
        cursor: u64,
    },
    CatchUp(u64),
    Live,
    Done,
}

/// What a watch was asked for, beyond its filter.
#[derive(Debug, Clone, Copy)]
pub struct WatchParams {
    /// Events at or below this resourceVersion are not sent.
    pub min_rv: u64,
    pub allow_bookmarks: bool,
    /// Close the initial events with the `k8s.io/initial-events-end` bookmark.
    pub initial_events_end: bool,
    pub timeout: Duration,
}

pub struct WatchBody {
    /// The resource's fan-out: all a stream needs of the cache.
    hub: Arc<Hub>,
    shared: Arc<WatcherShared>,
    phase: Phase,
    rx: Option<queue::Receiver<Item>>,
    pending: VecDeque<Bytes>,
    params: WatchParams,
    deadline: Instant,
    /// When the last bookmark goes out, 2 s before the deadline (`None`: sent, or none).
    /// Periodic bookmarks stop there; the hub's tick sends those (`watch::bookmarks`).
    pre_timeout: Option<Instant>,
    /// The pre-timeout bookmark, or a periodic one the tick left to this body, is due.
    bookmark_due: bool,
    /// The deadline, or the pre-timeout bookmark before it: at most two wake-ups per
    /// watch, none per bookmark interval.
    timer: Pin<Box<Sleep>>,
    lagging: bool,
    /// The resourceVersion of the last event this stream was given.
    last_rv: u64,
    unflushed_events: u64,
    unflushed_bytes: u64,
    /// The express lane to this watch's connection, once the connection offers it
    /// (`crate::lane`): the hub then writes lone events itself while the queue is
    /// empty and the connection idle.
    lane: Arc<Lane>,
    /// Whether the current queue has been armed with the lane's sink.
    armed: bool,
    /// The request's span (disabled unless debug logging asks for it), for the stream's
    /// `end of stream` line: the trace layer does not wrap this body (`stack::trace`).
    span: tracing::Span,
    started: Instant,
}

impl WatchBody {
    pub fn new(hub: Arc<Hub>, reg: Registration, params: WatchParams) -> Self {
        let now = Instant::now();
        let deadline = deadline_after(now, params.timeout);
        let pre_timeout = deadline
            .checked_sub(PRE_TIMEOUT_BOOKMARK)
            .filter(|t| *t > now && params.allow_bookmarks);
        let phase = match (reg.snapshot, reg.live.is_some()) {
            (Some(lease), _) => Phase::Initial {
                lease,
                after: None,
                cursor: reg.cursor,
            },
            (None, true) => Phase::Live,
            (None, false) => Phase::CatchUp(reg.cursor),
        };
        let mut body = Self {
            hub,
            shared: reg.shared,
            phase,
            rx: reg.live,
            pending: VecDeque::new(),
            params,
            deadline,
            pre_timeout,
            bookmark_due: false,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            lagging: false,
            last_rv: 0,
            unflushed_events: 0,
            unflushed_bytes: 0,
            lane: Arc::default(),
            armed: false,
            span: tracing::Span::current(),
            started: now,
        };
        if params.timeout.is_zero() {
            // A negative timeoutSeconds: kube-apiserver's timer has fired before its serve
            // loop selects, which then picks the timer or a ready event at random. Ending
            // here, before any event, is that loop's likeliest outcome and, unlike the
            // timer (whose millisecond ticks may or may not have passed at the first
            // poll), the same every time; the simulator does the same.
            body.end(EndReason::Timeout);
            return body;
        }
        body.arm_timer();
        if let Some(until) = pre_timeout {
            // kube-apiserver: none when the deadline is less than 2 s away.
            schedule_bookmarks(&body.hub, &body.shared, until);
        }
        body
    }

    /// The lane a connection that streams this body itself may connect its sink to
    /// (`crate::lane::Detachable`).
    pub fn lane(&self) -> Arc<Lane> {
        self.lane.clone()
    }

    /// Live and idle: once the connection has connected its sink, lets the hub write
    /// events through it while the queue is empty (the connection's side decides whether
    /// it is idle; see `crate::lane`).
    fn arm_express(&mut self) {
        if self.armed {
            return;
        }
        if let (Some(rx), Some(sink)) = (self.rx.as_ref(), self.lane.sink()) {
            rx.arm(sink.clone(), self.params.min_rv);
            self.armed = true;
        }
    }

    fn next_wake(&self) -> Instant {
        match self.pre_timeout {
            Some(p) => self.deadline.min(p),
            None => self.deadline,
        }
    }

    fn arm_timer(&mut self) {
        let t = self.next_wake();
        self.timer.as_mut().reset(t);
    }

    /// Handles the timer; returns true when the deadline has passed.
    fn poll_timer(&mut self, cx: &mut Context<'_>) -> bool {
        if self.timer.as_mut().poll(cx).is_pending() {
            return false;
        }
        let now = Instant::now();
        if now >= self.deadline {
            return true;
        }
        if self.pre_timeout.is_some_and(|p| now >= p) {
            self.bookmark_due = true;
            self.pre_timeout = None;
        }
        self.arm_timer();
        // Register the re-armed timer's waker.
        if self.timer.as_mut().poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
        false
    }

    fn end(&mut self, reason: EndReason) {
        let counted_by_hub = match &self.phase {
            Phase::Done => return,
            // The hub may have taken the snapshot back (and counted) meanwhile.
            Phase::Initial { lease, .. } => !lease.finish(),
            _ => false,
        };
        self.end_counted(reason);
        if !counted_by_hub {
            self.hub.count_end(reason);
        }
    }

    /// Ends the stream whose end the hub has already counted.
    fn end_counted(&mut self, reason: EndReason) {
        crate::logging::end_of_stream(&self.span, self.started.elapsed(), Some(reason.as_str()));
        // kube-apiserver's answer to a watch whose resourceVersion is no longer valid:
        // client-go relists on it.
        let expired = match reason {
            EndReason::UpstreamReset => Some(
                "the upstream's resourceVersions went back (a restored or replaced cluster); list again",
            ),
            EndReason::Inconsistent => Some(
                "the cache was re-synced after a consistency check found it different from the upstream; list again",
            ),
            _ => None,
        };
        if let Some(message) = expired {
            let status = crate::status::Status::expired(message);
            self.pending.push_back(self.shared.encoding.error(&status));
        }
        self.phase = Phase::Done;
        self.rx = None;
        self.hub.unregister(&self.shared);
    }

    /// The hub counts a watcher as lagging the moment its queue overflows (even if its
    /// client is stalled and this body is not polled); the body uncounts it when it is
    /// live again or gone.
    fn stop_lagging(&mut self) {
        if std::mem::take(&mut self.lagging) {
            self.hub.stats.lagging.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn flush_counters(&mut self) {
        let stats = &self.hub.stats;
        if self.unflushed_events > 0 {
            stats
                .delivered
                .fetch_add(self.unflushed_events, Ordering::Relaxed);
            self.unflushed_events = 0;
        }
        if self.unflushed_bytes > 0 {
            stats
                .bytes
                .fetch_add(self.unflushed_bytes, Ordering::Relaxed);
            self.unflushed_bytes = 0;
        }
    }

    fn push_event(&mut self, rv: u64, line: Bytes) {
        self.pending.push_back(line);
        self.unflushed_events += 1;
        self.last_rv = self.last_rv.max(rv);
    }

    /// Sends the next batch of the starting snapshot; moves on when it is exhausted.
    fn step_initial(&mut self) {
        let Phase::Initial { lease, .. } = &self.phase else {
            return;
        };
        let Some(snap) = lease.step() else {
            // The hub took the snapshot back while the client was not reading, and has
            // counted this end.
            self.end_counted(EndReason::Slow);
            return;
        };
        if self.hub.restarted_since(&self.shared) {
            // The snapshot is a state the history no longer continues from: stop sending
            // it at once rather than after the last batch.
            self.end(self.hub.restart_reason());
            return;
        }
        if self.hub.is_shutting_down() {
            self.end(EndReason::Shutdown);
            return;
        }
        if self.hub.is_reset() {
            self.end(EndReason::UpstreamReset);
            return;
        }
        let Phase::Initial { after, cursor, .. } = &mut self.phase else {
            return;
        };
        let ns = self.shared.filter.namespace.as_deref();
        let ns_start = ns.map(|n| format!("{n}/"));
        let ns_end = ns.map(|n| format!("{n}0"));
        let lower = match (after.as_deref(), ns_start.as_deref()) {
            (Some(k), _) => Bound::Excluded(k),
            (None, Some(s)) => Bound::Included(s),
            (None, None) => Bound::Unbounded,
        };
        let upper = match ns_end.as_deref() {
            Some(e) => Bound::Excluded(e),
            None => Bound::Unbounded,
        };
        let enc = &self.hub.enc;
        let mut seen = 0;
        let mut bytes = 0;
        let mut last = None;
        let mut events = 0;
        let mut full = false;
        for (k, o) in snap.objects.range::<_, str>((lower, upper)) {
            seen += 1;
            last = Some(k.clone());
            if self.shared.filter.matches(o) {
                match self.shared.encoding.added(enc, o) {
                    AddedFrames::Shared(frames) => self.pending.extend(frames),
                    AddedFrames::One(line) => self.pending.push_back(line),
                }
                events += 1;
                bytes += o.raw.len();
            }
            if seen == BATCH || bytes >= BATCH_BYTES {
                full = true;
                break;
            }
        }
        self.unflushed_events += events;
        if full {
            *after = last;
            return;
        }
        let (rv, cursor) = (snap.resource_version, *cursor);
        self.last_rv = self.last_rv.max(rv);
        if self.params.initial_events_end && self.params.allow_bookmarks {
            self.pending
                .push_back(self.shared.encoding.bookmark(enc, rv, true));
            self.hub.stats.bookmarks.fetch_add(1, Ordering::Relaxed);
            // The next periodic one counts from this one; one due meanwhile is void.
            self.shared.bookmark_due.store(false, Ordering::SeqCst);
            self.bookmark_due = false;
            if let Some(until) = self.pre_timeout {
                self.hub.schedule_bookmarks(&self.shared, until);
            }
        }
        self.phase = Phase::CatchUp(cursor);
    }

    fn step_catch_up(&mut self, cursor: u64) {
        let hub = self.hub.clone();
        if hub.is_shutting_down() {
            self.end(EndReason::Shutdown);
            return;
        }
        if hub.is_reset() {
            self.end(EndReason::UpstreamReset);
            return;
        }
        match hub.catch_up(&self.shared, cursor, BATCH, BATCH_BYTES) {
            CatchUp::Expired(reason) => self.end(reason),
            CatchUp::Events { events, next, live } => {
                for ev in &events {
                    if ev.rv <= self.params.min_rv {
                        continue;
                    }
                    if let Some(d) = ev.transition(|o| self.shared.filter.matches(o)) {
                        let line = self.shared.encoding.line(ev, d, &hub.enc, &hub.encoded);
                        self.push_event(ev.rv, line);
                    }
                }
                match live {
                    Some(rx) => {
                        self.rx = Some(rx);
                        self.armed = false;
                        self.phase = Phase::Live;
                        self.stop_lagging();
                    }
                    None => self.phase = Phase::CatchUp(next),
                }
            }
        }
    }

    fn take_item(&mut self, (rv, line): Item) {
        if rv > self.params.min_rv {
            self.push_event(rv, line);
        }
    }

    /// The queue was closed by the hub: either to lag, or because the stream must end.
    fn queue_closed(&mut self) {
        self.rx = None;
        match self.shared.take_lag() {
            Some(seq) => {
                self.phase = Phase::CatchUp(seq);
                self.lagging = true;
            }
            None => {
                let reason = self.shared.closed_reason();
                self.end(reason);
            }
        }
    }

    /// The next frame: the first pending chunk, joined with those behind it while they
    /// fit in `FRAME_BYTES`. A lone chunk is passed on as it is (shared, not copied).
    fn next_frame(&mut self) -> Option<Bytes> {
        let first = self.pending.pop_front()?;
        let mut total = first.len();
        let mut n = 0;
        for b in &self.pending {
            if total + b.len() > FRAME_BYTES {
                break;
            }
            total += b.len();
            n += 1;
        }
        if n == 0 {
            return Some(first);
        }
        let mut buf = BytesMut::with_capacity(total);
        buf.extend_from_slice(&first);
        for b in self.pending.drain(..n) {
            buf.extend_from_slice(&b);
        }
        Some(buf.freeze())
    }

    /// Live and idle: send a due bookmark if every event up to the head has been taken.
    /// Runs after the queue registered this body's waker, so a periodic bookmark the
    /// hub's tick flags after this read wakes the body (see `BookmarkHandoff::deliver`).
    fn maybe_bookmark(&mut self) -> bool {
        if self.shared.bookmark_due.swap(false, Ordering::SeqCst) {
            self.bookmark_due = true;
        }
        if !self.bookmark_due {
            return false;
        }
        // Read the head before looking at the queue: the hub publishes the head after
        // queueing, so an empty queue now means every event up to `head` was taken.
        let head = self.hub.head_rv();
        // The hub queues an event before it publishes the new head, so this stream may
        // already hold an event newer than `head`: a bookmark must never go behind it.
        let mut head = head.max(self.last_rv);
        if let Some(rx) = self.rx.as_mut() {
            match rx.try_recv() {
                Some(Some(item)) => {
                    self.take_item(item);
                    return true;
                }
                // Closed (lagging or ended): that is handled first; a bookmark now could
                // claim events this watcher has not been given.
                Some(None) => return true,
                None => {}
            }
            // Nor behind an event (or a bookmark) the hub wrote through the lane. The
            // connection's task is running (it is polling this body), so the lane is shut:
            // nothing can be written after this read and before the bookmark.
            head = head.max(rx.sent_rv());
        }
        self.bookmark_due = false;
        if head >= self.params.min_rv && head > 0 {
            self.last_rv = head;
            self.pending
                .push_back(self.shared.encoding.bookmark(&self.hub.enc, head, false));
            self.hub.stats.bookmarks.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }
}

impl Body for WatchBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        loop {
            if !this.pending.is_empty() {
                let b = this.next_frame().expect("pending is not empty");
                this.unflushed_bytes += b.len() as u64;
                return Poll::Ready(Some(Ok(Frame::data(b))));
            }
            if matches!(this.phase, Phase::Done) {
                this.flush_counters();
                return Poll::Ready(None);
            }
            if this.poll_timer(cx) {
                this.end(EndReason::Timeout);
                continue;
            }
            match this.phase {
                Phase::Initial { .. } => this.step_initial(),
                Phase::CatchUp(cursor) => this.step_catch_up(cursor),
                Phase::Done => {}
                Phase::Live => {
                    let Some(rx) = this.rx.as_mut() else {
                        this.queue_closed();
                        continue;
                    };
                    // Everything ready, up to a frame's worth, under one lock: events that
                    // are ready together leave together.
                    let min_rv = this.params.min_rv;
                    let given_rv = this.last_rv;
                    let (pending, events, last_rv) = (
                        &mut this.pending,
                        &mut this.unflushed_events,
                        &mut this.last_rv,
                    );
                    let drained = rx.poll_drain(cx, FRAME_BYTES, given_rv, |(rv, line)| {
                        let len = line.len();
                        if rv > min_rv {
                            pending.push_back(line);
                            *events += 1;
                            *last_rv = (*last_rv).max(rv);
                        }
                        len
                    });
                    match drained {
                        Poll::Ready(Some(())) => {}
                        Poll::Ready(None) => this.queue_closed(),
                        Poll::Pending => {
                            if this.maybe_bookmark() {
                                continue;
                            }
                            this.flush_counters();
                            this.arm_express();
                            return Poll::Pending;
                        }
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.phase, Phase::Done) && self.pending.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

impl Drop for WatchBody {
    fn drop(&mut self) {
        // `end` knows when the hub already counted this watch (its snapshot taken back).
        self.end(EndReason::ClientGone);
        // Overflowed but never noticed (its client stalled until it went away).
        if self.shared.take_lag().is_some() {
            self.lagging = true;
        }
        self.stop_lagging();
        self.flush_counters();
        self.hub.stats.watchers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Puts a new watcher in its hub's bookmark schedule, starting the hub's tick if need be.
fn schedule_bookmarks(hub: &Arc<Hub>, shared: &Arc<WatcherShared>, until: Instant) {
    super::bookmarks::start(hub);
    hub.schedule_bookmarks(shared, until);
}

//! A watcher's live queue: bounded, single producer (the hub, under its lock), single
//! consumer (the watcher's body).
//!
//! tokio's mpsc channel would do, but it allocates a 32-slot block and two cache-padded
//! wakers up front: about 2 KiB per watcher before a single event, which is half of the
//! per-watcher budget (docs/watch.md). This queue allocates nothing while empty and gives
//! its buffer back once drained after a burst, so an idle watcher costs one small `Arc`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;

use crate::lane::{Sent, Sink};

/// What a watcher's queue carries: an event's resourceVersion and its encoded bytes.
pub type Item = (u64, bytes::Bytes);

/// Capacity kept after a burst has been drained; larger buffers are released.
const KEEP_CAPACITY: usize = 4;

struct Shared<T> {
    state: Mutex<State<T>>,
    waker: AtomicWaker,
}

struct State<T> {
    items: VecDeque<T>,
    /// The other side is gone.
    closed: bool,
    /// Set by the body once its connection offers the express lane: while the queue is
    /// empty, the producer hands an event to the sink, which writes it if the connection
    /// is idle (`crate::lane`).
    express: Option<Express>,
    /// The newest resourceVersion this watcher has been given: written through the lane
    /// (events and bookmarks), or taken by the body before it last went idle. No bookmark
    /// may go behind it.
    sent_rv: u64,
}

struct Express {
    sink: Arc<dyn Sink>,
    /// Events at or below it are not sent (`WatchParams::min_rv`).
    min_rv: u64,
}

/// What became of an event handed over for the express lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    /// Queued for the body (which was woken).
    Queued,
    /// Written to the connection by the producer.
    Written,
    /// Not delivered: the watch ended meanwhile.
    Skipped,
}

/// Why an item was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum SendError {
    Full,
    Closed,
}

pub struct Sender<T> {
    shared: Arc<Shared<T>>,
    cap: usize,
}

pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

/// A queue holding at most `cap` items.
pub fn channel<T>(cap: usize) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::new(),
            closed: false,
            express: None,
            sent_rv: 0,
        }),
        waker: AtomicWaker::new(),
    });
    (
        Sender {
            shared: shared.clone(),
            cap,
        },
        Receiver { shared },
    )
}

impl<T> Sender<T> {
    pub fn try_send(&self, item: T) -> Result<(), SendError> {
        {
            let mut st = self.shared.state.lock().expect("queue lock");
            if st.closed {
                return Err(SendError::Closed);
            }
            if st.items.len() >= self.cap {
                return Err(SendError::Full);
            }
            st.items.push_back(item);
        }
        self.shared.waker.wake();
        Ok(())
    }
}

impl Sender<Item> {
    /// Hands `item` to the watcher, under the hub's lock. While the queue is empty and
    /// armed with the express lane, the event is not queued but handed back as a
    /// [`Handoff`], to be written to the connection once the hub's lock is released
    /// (`Hub::publish`); otherwise it is queued and the body woken, as
    /// [`Sender::try_send`] does. Nothing queued can be overtaken: the lane is only
    /// offered an event on an empty queue, and only the hub adds to a queue.
    pub fn offer(&self, item: Item) -> Result<Offered, SendError> {
        let mut st = self.shared.state.lock().expect("queue lock");
        if st.closed {
            return Err(SendError::Closed);
        }
        if st.items.is_empty() {
            if let Some(x) = &st.express {
                if item.0 <= x.min_rv {
                    return Ok(Offered::Skipped);
                }
                return Ok(Offered::Lane(Handoff {
                    shared: self.shared.clone(),
                    group: x.sink.group(),
                    item,
                }));
            }
        }
        if st.items.len() >= self.cap {
            return Err(SendError::Full);
        }
        st.items.push_back(item);
        drop(st);
        self.shared.waker.wake();
        Ok(Offered::Queued)
    }
}

/// What [`Sender::offer`] did with an event.
pub enum Offered {
    /// Queued for the body (which was woken).
    Queued,
    /// At or below the watch's starting resourceVersion: not for this watcher.
    Skipped,
    /// For the express lane: [`Handoff::deliver`] once the hub's lock is released.
    Lane(Handoff),
}

/// An event for a watcher whose queue was empty and armed with the express lane.
pub struct Handoff {
    shared: Arc<Shared<Item>>,
    /// The sink's connection when it shares one (`Sink::group`).
    group: u64,
    item: Item,
}

impl Handoff {
    /// The connection it is for, when shared with other watches (HTTP/2); 0 otherwise.
    pub fn group(&self) -> u64 {
        self.group
    }

    /// The size of the event's wire line.
    pub fn line_len(&self) -> usize {
        self.item.1.len()
    }

    /// Writes the event to the idle connection (one `send`, no wake-up), or, if it is not
    /// idle any more (its task runs) or the socket would block, queues it and wakes the
    /// body as usual.
    pub fn deliver(self) -> Delivered {
        let Handoff { shared, item, .. } = self;
        let mut st = shared.state.lock().expect("queue lock");
        if st.closed {
            // The watch ended meanwhile (its client left, or the drain or a relist ended
            // it at this event boundary).
            return Delivered::Skipped;
        }
        if st.items.is_empty() {
            if let Some(x) = &st.express {
                match x.sink.try_send(&item.1) {
                    Sent::All => {
                        st.sent_rv = st.sent_rv.max(item.0);
                        return Delivered::Written;
                    }
                    Sent::Part => {
                        // The connection's task writes the rest: wake it.
                        st.sent_rv = st.sent_rv.max(item.0);
                        drop(st);
                        shared.waker.wake();
                        return Delivered::Written;
                    }
                    Sent::Nothing => {}
                }
            }
        }
        // Only the hub adds to a queue, one event at a time, and this one was empty when
        // offered the event: this is its only item.
        st.items.push_back(item);
        drop(st);
        shared.waker.wake();
        Delivered::Queued
    }
}

impl Sender<Item> {
    /// The watcher's queue, for a periodic bookmark the hub's tick writes once it has
    /// released the hub's lock ([`BookmarkHandoff::deliver`]).
    pub fn bookmark_handoff(&self) -> BookmarkHandoff {
        BookmarkHandoff {
            shared: self.shared.clone(),
        }
    }
}

/// What became of a periodic bookmark handed to [`BookmarkHandoff::deliver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BookmarkSent {
    /// Written through the express lane: this many bytes.
    Written(usize),
    /// Left to the body: its `due` flag is set and it was woken.
    ToBody,
    /// Nothing to promise yet (no RV at or above the watch's start): as the body does, no
    /// bookmark this time.
    Nothing,
}

/// A live watcher whose periodic bookmark is due.
pub struct BookmarkHandoff {
    shared: Arc<Shared<Item>>,
}

impl BookmarkHandoff {
    /// Writes the bookmark through the express lane if the queue is empty and the
    /// connection idle, exactly as a lone event would be written (`Handoff::deliver`),
    /// carrying `head` (the hub's head, read before this call) or the newest RV the
    /// watcher has been given, whichever is larger: never behind an event it was sent,
    /// and, as every event at or below `head` has reached every live watcher and the lane
    /// is only open while everything given to the connection is written, never ahead of
    /// one it was not. Otherwise sets `due` and wakes the body, which sends it when it is
    /// idle and caught up (as the body's own timer used to).
    pub fn deliver(
        self,
        head: u64,
        due: &std::sync::atomic::AtomicBool,
        mut line: impl FnMut(u64) -> bytes::Bytes,
    ) -> BookmarkSent {
        let mut st = self.shared.state.lock().expect("queue lock");
        if st.closed {
            // Lagging (the body rejoins and sends it when idle) or ended (no one reads
            // it). The close woke the body already.
            due.store(true, std::sync::atomic::Ordering::SeqCst);
            return BookmarkSent::ToBody;
        }
        if st.items.is_empty() {
            if let Some(x) = &st.express {
                let rv = head.max(st.sent_rv);
                if rv == 0 || rv < x.min_rv {
                    return BookmarkSent::Nothing;
                }
                let line = line(rv);
                match x.sink.try_send(&line) {
                    Sent::All => {
                        st.sent_rv = rv;
                        return BookmarkSent::Written(line.len());
                    }
                    Sent::Part => {
                        // The connection's task writes the rest: wake it.
                        st.sent_rv = rv;
                        drop(st);
                        self.shared.waker.wake();
                        return BookmarkSent::Written(line.len());
                    }
                    Sent::Nothing => {}
                }
            }
        }
        drop(st);
        // The flag before the wake-up: a body that registered its waker before this wake
        // is woken; one that registers after it reads the flag (docs/watch.md).
        due.store(true, std::sync::atomic::Ordering::SeqCst);
        self.shared.waker.wake();
        BookmarkSent::ToBody
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock().expect("queue lock");
        st.closed = true;
        st.express = None;
        drop(st);
        self.shared.waker.wake();
    }
}

impl<T> Receiver<T> {
    /// The next item; `None` once the sender is gone and the queue is empty.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if let Some(r) = self.try_recv() {
            return Poll::Ready(r);
        }
        self.shared.waker.register(cx.waker());
        // An item (or the close) may have come between the check and the registration.
        match self.try_recv() {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }

    /// Takes what the queue holds, in order, handing each item to `take` (which returns
    /// its size) until they add up to `max_bytes`, under one lock. `Ready(Some(()))` when
    /// it took any, `Ready(None)` once the sender is gone and the queue is empty; else the
    /// waker is registered (under the same lock, so an item sent after it wakes it) and
    /// `given_rv`, the newest RV the body has taken, is recorded for the bookmarks the
    /// producer may write while the body waits (`BookmarkHandoff`).
    pub fn poll_drain(
        &mut self,
        cx: &mut Context<'_>,
        max_bytes: usize,
        given_rv: u64,
        mut take: impl FnMut(T) -> usize,
    ) -> Poll<Option<()>> {
        let mut st = self.shared.state.lock().expect("queue lock");
        let mut bytes = 0;
        let mut took = false;
        while bytes < max_bytes {
            let Some(item) = st.items.pop_front() else {
                break;
            };
            bytes += take(item);
            took = true;
        }
        if took {
            if st.items.is_empty() && st.items.capacity() > KEEP_CAPACITY {
                st.items.shrink_to(KEEP_CAPACITY);
            }
            return Poll::Ready(Some(()));
        }
        if st.closed {
            return Poll::Ready(None);
        }
        st.sent_rv = st.sent_rv.max(given_rv);
        self.shared.waker.register(cx.waker());
        Poll::Pending
    }

    /// `Some(Some(item))`, `Some(None)` when closed and drained, `None` when empty.
    pub fn try_recv(&mut self) -> Option<Option<T>> {
        let mut st = self.shared.state.lock().expect("queue lock");
        match st.items.pop_front() {
            Some(item) => {
                if st.items.is_empty() && st.items.capacity() > KEEP_CAPACITY {
                    st.items.shrink_to(KEEP_CAPACITY);
                }
                Some(Some(item))
            }
            None if st.closed => Some(None),
            None => None,
        }
    }
}

impl<T> Receiver<T> {
    /// Lets the producer write events through `sink` while the queue is empty (see
    /// [`Sender::offer`]); those at or below `min_rv` are skipped.
    pub fn arm(&self, sink: Arc<dyn Sink>, min_rv: u64) {
        let mut st = self.shared.state.lock().expect("queue lock");
        if !st.closed {
            st.express = Some(Express { sink, min_rv });
        }
    }

    /// The newest resourceVersion this watcher has been given as far as the queue knows:
    /// what the producer wrote through the lane, and what the body recorded when it last
    /// went idle (0: none).
    pub fn sent_rv(&self) -> u64 {
        self.shared.state.lock().expect("queue lock").sent_rv
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock().expect("queue lock");
        st.closed = true;
        st.items.clear();
        st.express = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    #[tokio::test]
    async fn bounded_ordered_and_closed_both_ways() {
        let (tx, mut rx) = channel(2);
        assert_eq!(tx.try_send(1), Ok(()));
        assert_eq!(tx.try_send(2), Ok(()));
        assert_eq!(tx.try_send(3), Err(SendError::Full));
        assert_eq!(poll_fn(|cx| rx.poll_recv(cx)).await, Some(1));
        assert_eq!(rx.try_recv(), Some(Some(2)));
        assert_eq!(rx.try_recv(), None);
        let waiter = tokio::spawn(async move {
            let first = poll_fn(|cx| rx.poll_recv(cx)).await;
            let end = poll_fn(|cx| rx.poll_recv(cx)).await;
            (first, end)
        });
        tokio::task::yield_now().await;
        assert_eq!(tx.try_send(4), Ok(()));
        drop(tx);
        assert_eq!(waiter.await.unwrap(), (Some(4), None));

        let (tx, rx) = channel::<u8>(2);
        drop(rx);
        assert_eq!(tx.try_send(1), Err(SendError::Closed));
    }

    /// A connection end of the express lane that records what it was offered and answers
    /// as told.
    struct Recording {
        answer: Mutex<Sent>,
        got: Mutex<Vec<bytes::Bytes>>,
    }

    impl Sink for Recording {
        fn try_send(&self, frame: &bytes::Bytes) -> Sent {
            let a = *self.answer.lock().unwrap();
            if a != Sent::Nothing {
                self.got
                    .lock()
                    .unwrap()
                    .push(bytes::Bytes::copy_from_slice(frame));
            }
            a
        }
    }

    fn item(rv: u64) -> Item {
        (rv, bytes::Bytes::from(format!("e{rv}\n")))
    }

    #[test]
    fn the_lane_takes_events_only_on_an_empty_queue_so_none_is_overtaken() {
        let (tx, mut rx) = channel::<Item>(4);
        let lane = |o: Result<Offered, SendError>| match o {
            Ok(Offered::Lane(h)) => h.deliver(),
            Ok(Offered::Queued) => panic!("queued, not offered to the lane"),
            Ok(Offered::Skipped) => panic!("skipped"),
            Err(e) => panic!("{e:?}"),
        };
        // Not armed: queued.
        assert!(matches!(tx.offer(item(1)), Ok(Offered::Queued)));
        let sink = Arc::new(Recording {
            answer: Mutex::new(Sent::All),
            got: Mutex::default(),
        });
        rx.arm(sink.clone(), 2);
        // Armed, but the queue holds an event: this one goes behind it.
        assert!(matches!(tx.offer(item(3)), Ok(Offered::Queued)));
        assert_eq!(rx.try_recv(), Some(Some(item(1))));
        assert_eq!(rx.try_recv(), Some(Some(item(3))));
        // Empty: written by the producer, and remembered for bookmarks.
        assert_eq!(lane(tx.offer(item(4))), Delivered::Written);
        assert_eq!(rx.sent_rv(), 4);
        assert_eq!(rx.try_recv(), None);
        // At or below the watch's starting resourceVersion: for no one.
        assert!(matches!(tx.offer(item(2)), Ok(Offered::Skipped)));
        // The connection is busy: queued, as before.
        *sink.answer.lock().unwrap() = Sent::Nothing;
        assert_eq!(lane(tx.offer(item(5))), Delivered::Queued);
        assert_eq!(rx.try_recv(), Some(Some(item(5))));
        // A short write counts as written (the connection writes the rest).
        *sink.answer.lock().unwrap() = Sent::Part;
        assert_eq!(lane(tx.offer(item(6))), Delivered::Written);
        assert_eq!(rx.sent_rv(), 6);
        assert_eq!(*sink.got.lock().unwrap(), vec![item(4).1, item(6).1]);
        // Offered, then the watch ends before the write: nothing is written.
        *sink.answer.lock().unwrap() = Sent::All;
        let Ok(Offered::Lane(h)) = tx.offer(item(7)) else {
            panic!("offered to the lane")
        };
        drop(rx);
        assert_eq!(h.deliver(), Delivered::Skipped);
        assert_eq!(sink.got.lock().unwrap().len(), 2);
        assert!(matches!(tx.offer(item(8)), Err(SendError::Closed)));
        assert_eq!(Arc::strong_count(&sink), 1, "the sink is released");
    }

    #[test]
    fn a_drained_burst_gives_its_buffer_back() {
        let (tx, mut rx) = channel(1000);
        for i in 0..1000 {
            tx.try_send(i).unwrap();
        }
        while let Some(Some(_)) = rx.try_recv() {}
        assert!(rx.shared.state.lock().unwrap().items.capacity() <= KEEP_CAPACITY);
    }
}

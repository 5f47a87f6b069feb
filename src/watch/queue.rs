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

/// Capacity kept after a burst has been drained; larger buffers are released.
const KEEP_CAPACITY: usize = 4;

#[derive(Debug)]
struct Shared<T> {
    state: Mutex<State<T>>,
    waker: AtomicWaker,
}

#[derive(Debug)]
struct State<T> {
    items: VecDeque<T>,
    /// The other side is gone.
    closed: bool,
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

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.shared.state.lock().expect("queue lock").closed = true;
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

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock().expect("queue lock");
        st.closed = true;
        st.items.clear();
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

//! Two-phase graceful shutdown, mini-redis style: a broadcast says "draining" (stop
//! accepting, end watch streams, finish in-flight requests) and later "stopped" (the
//! deadline passed: cut what is left); every task that must finish holds a clone of a
//! [`DrainWatch`], and the drain is complete when the last clone is dropped.

use std::future::Future;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Serving,
    Draining,
    Stopped,
}

/// The owner's side. Dropping it without [`Drain::run`] stops everything at once.
pub struct Drain {
    phase: watch::Sender<Phase>,
    alive_tx: Option<mpsc::Sender<()>>,
    alive_rx: mpsc::Receiver<()>,
}

/// A task's side: tells it when to drain or stop, and keeps the drain waiting for it.
#[derive(Clone)]
pub struct DrainWatch {
    phase: watch::Receiver<Phase>,
    // Never sent on: its only job is to be dropped when the task ends.
    _alive: mpsc::Sender<()>,
}

/// How a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainOutcome {
    /// Every connection, stream and tunnel finished before the deadline.
    Complete,
    /// The deadline passed and the remaining work was cut.
    DeadlineExceeded,
}

impl Default for Drain {
    fn default() -> Self {
        Self::new()
    }
}

impl Drain {
    pub fn new() -> Self {
        let (phase, _) = watch::channel(Phase::Serving);
        let (alive_tx, alive_rx) = mpsc::channel(1);
        Self {
            phase,
            alive_tx: Some(alive_tx),
            alive_rx,
        }
    }

    /// A watch for a task that the drain must wait for.
    pub fn watcher(&self) -> DrainWatch {
        DrainWatch {
            phase: self.phase.subscribe(),
            _alive: self
                .alive_tx
                .clone()
                .expect("watchers are only created before the drain starts"),
        }
    }

    /// Drain: signal, wait for every watcher to go away, cut the rest at `deadline`.
    pub async fn run(mut self, deadline: Duration) -> DrainOutcome {
        self.phase.send_replace(Phase::Draining);
        self.alive_tx = None;
        if tokio::time::timeout(deadline, self.alive_rx.recv())
            .await
            .is_ok()
        {
            return DrainOutcome::Complete;
        }
        tracing::warn!(
            ?deadline,
            "drain deadline passed; closing remaining connections"
        );
        self.phase.send_replace(Phase::Stopped);
        // Cut tasks drop their connections at once; this only bounds a pathological one.
        let _ = tokio::time::timeout(Duration::from_secs(1), self.alive_rx.recv()).await;
        DrainOutcome::DeadlineExceeded
    }
}

impl DrainWatch {
    /// Whether a drain has begun.
    pub fn is_draining(&self) -> bool {
        *self.phase.borrow() != Phase::Serving
    }

    /// Resolves when the drain begins (or the owner is gone).
    pub fn draining(&self) -> impl Future<Output = ()> + Send + 'static {
        self.reached(Phase::Draining)
    }

    /// Resolves when the deadline has passed (or the owner is gone).
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        self.reached(Phase::Stopped)
    }

    fn reached(&self, phase: Phase) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.phase.clone();
        async move {
            // An error means the owner dropped the Drain: treat that as a hard stop.
            let _ = rx.wait_for(|p| *p >= phase).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn completes_when_every_watcher_is_gone() {
        let drain = Drain::new();
        let w = drain.watcher();
        let task = tokio::spawn(async move {
            w.draining().await;
            // finishing in-flight work takes a while, but less than the deadline
            tokio::time::sleep(Duration::from_millis(30)).await;
            drop(w);
        });
        assert_eq!(
            drain.run(Duration::from_secs(10)).await,
            DrainOutcome::Complete
        );
        task.await.unwrap();
    }

    #[tokio::test]
    async fn cuts_at_the_deadline() {
        let drain = Drain::new();
        let w = drain.watcher();
        let task = tokio::spawn(async move {
            w.draining().await;
            assert!(w.is_draining());
            w.stopped().await;
        });
        assert_eq!(
            drain.run(Duration::from_millis(50)).await,
            DrainOutcome::DeadlineExceeded
        );
        task.await.unwrap();
    }

    #[tokio::test]
    async fn dropping_the_owner_stops_everyone() {
        let drain = Drain::new();
        let w = drain.watcher();
        drop(drain);
        w.stopped().await;
    }
}

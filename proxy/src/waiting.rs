//! The connections of a listener that wait for their client (a TLS handshake, a request head),
//! oldest first: on a listener that makes room at its cap (the admin listener), a new connection
//! closes the oldest of them instead of being refused, so that idle connections cannot keep the
//! kubelet's probes out.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// A connection told to make room this soon after it started waiting keeps reading until this
/// age: a flood that keeps evicting its own connections must not close a probe in the moment
/// between its connect and its first bytes. (The listener bounds the connections so kept open.)
const EVICTION_GRACE: Duration = Duration::from_millis(250);

/// Entries kept before the dead ones (connections no longer waiting) are swept out.
const FIRST_SWEEP: usize = 256;

#[derive(Debug)]
pub struct Waiting {
    /// Oldest first; the length at which the next sweep happens.
    queue: Mutex<(VecDeque<Weak<Notify>>, usize)>,
    evicted: AtomicU64,
}

/// A connection waiting for its client, until dropped; [`Wait::evicted`] completes when a newer
/// connection took its place.
#[derive(Debug)]
pub struct Wait {
    notify: Arc<Notify>,
    since: Instant,
}

impl Wait {
    /// Completes once a newer connection took this one's place, and it has waited
    /// [`EVICTION_GRACE`].
    pub async fn evicted(&self) {
        self.notify.notified().await;
        tokio::time::sleep_until(self.since + EVICTION_GRACE).await;
    }
}

/// Completes when `wait` (if any) is evicted; never without one.
pub async fn evicted(wait: Option<&Wait>) {
    match wait {
        Some(w) => w.evicted().await,
        None => std::future::pending().await,
    }
}

impl Default for Waiting {
    fn default() -> Self {
        Waiting {
            queue: Mutex::new((VecDeque::new(), FIRST_SWEEP)),
            evicted: AtomicU64::new(0),
        }
    }
}

impl Waiting {
    /// A connection starts waiting for its client.
    pub fn wait(&self) -> Wait {
        let notify = Arc::new(Notify::new());
        let mut guard = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let (queue, sweep_at) = &mut *guard;
        queue.push_back(Arc::downgrade(&notify));
        if queue.len() >= *sweep_at {
            queue.retain(|w| w.strong_count() > 0);
            *sweep_at = (queue.len() * 2).max(FIRST_SWEEP);
        }
        Wait {
            notify,
            since: Instant::now(),
        }
    }

    /// Tells the oldest connection still waiting to close; whether there was one.
    pub fn evict_oldest(&self) -> bool {
        let mut guard = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(entry) = guard.0.pop_front() {
            if let Some(notify) = entry.upgrade() {
                notify.notify_one();
                self.evicted.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// Connections closed so far to make room for newer ones.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_oldest_connection_still_waiting_is_evicted() {
        let waiting = Waiting::default();
        let first = waiting.wait();
        let second = waiting.wait();
        let third = waiting.wait();
        drop(first);
        assert!(waiting.evict_oldest());
        // The first had stopped waiting: the second goes, and knows it.
        tokio::time::timeout(std::time::Duration::from_secs(1), second.evicted())
            .await
            .expect("the second was evicted");
        assert!(waiting.evict_oldest());
        third.evicted().await;
        assert!(!waiting.evict_oldest(), "nobody left waiting");
        assert_eq!(waiting.evicted(), 2);
    }

    #[tokio::test]
    async fn a_connection_evicted_as_it_starts_waiting_gets_the_grace_first() {
        let waiting = Waiting::default();
        let young = waiting.wait();
        assert!(waiting.evict_oldest());
        let started = Instant::now();
        young.evicted().await;
        assert!(started.elapsed() >= EVICTION_GRACE - Duration::from_millis(20));
        let old = waiting.wait();
        tokio::time::sleep(EVICTION_GRACE).await;
        assert!(waiting.evict_oldest());
        let started = Instant::now();
        old.evicted().await;
        assert!(
            started.elapsed() < EVICTION_GRACE / 2,
            "an old one goes at once"
        );
    }

    #[test]
    fn entries_of_connections_no_longer_waiting_are_swept() {
        let waiting = Waiting::default();
        for _ in 0..10 * FIRST_SWEEP {
            drop(waiting.wait());
        }
        assert!(waiting.queue.lock().unwrap().0.len() <= FIRST_SWEEP);
    }
}

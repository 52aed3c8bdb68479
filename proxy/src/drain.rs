//! The drain Kubernetes needs after SIGTERM: `/readyz` turns 503 at once, every connection keeps
//! being served with `Connection: close` on its next response, and the proxy stops as soon as no
//! request has been in flight for a quiet moment (at most `grace_period` after the signal).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long no request must have been in flight before a draining proxy stops: a client that
/// sent nothing for this long is idle, and its connection is closed.
pub const QUIET: Duration = Duration::from_millis(500);
/// How often the drain looks at the requests in flight.
const POLL: Duration = Duration::from_millis(10);

/// Requests in flight and whether the proxy is draining.
#[derive(Debug)]
pub struct Drain {
    draining: AtomicBool,
    in_flight: AtomicUsize,
    /// Milliseconds since `epoch` of the drain's start or the last request start or end after
    /// it; kept only while draining, so a request reads no clock the rest of the time.
    last_activity: AtomicU64,
    epoch: Instant,
}

impl Default for Drain {
    fn default() -> Self {
        Drain {
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            last_activity: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

/// One request in flight; counted until dropped (with the request's context).
#[derive(Debug)]
pub struct InFlight(Arc<Drain>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch_if_draining();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drain {
    /// Counts a request from now until the returned guard is dropped.
    pub fn enter(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.touch_if_draining();
        InFlight(self.clone())
    }

    /// Whether the proxy is draining (responses close their connection, `/readyz` says 503).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Requests being served now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Starts draining, then returns once nothing has been in flight for [`QUIET`] (or for
    /// `grace` if shorter), or when `grace` has passed since the start, whichever comes first.
    pub async fn drain(&self, grace: Duration) {
        self.draining.store(true, Ordering::Release);
        self.touch();
        let started = Instant::now();
        let quiet = QUIET.min(grace);
        tracing::info!(
            in_flight = self.in_flight(),
            grace_ms = grace.as_millis() as u64,
            "draining: not ready, closing connections after their next response"
        );
        while started.elapsed() < grace {
            if self.in_flight() == 0 && self.idle_for() >= quiet {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        tracing::info!(
            in_flight = self.in_flight(),
            drained_ms = started.elapsed().as_millis() as u64,
            "drain over: stopping"
        );
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn touch(&self) {
        self.last_activity.store(self.now_ms(), Ordering::Release);
    }

    /// A request start or end before the drain needs no time: the drain's own start is later.
    fn touch_if_draining(&self) {
        if self.is_draining() {
            self.touch();
        }
    }

    fn idle_for(&self) -> Duration {
        let last = self.last_activity.load(Ordering::Acquire);
        Duration::from_millis(self.now_ms().saturating_sub(last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_idle_proxy_stops_after_the_quiet_moment_not_the_grace() {
        let drain = Arc::new(Drain::default());
        let started = Instant::now();
        drain.drain(Duration::from_secs(30)).await;
        assert!(drain.is_draining());
        let took = started.elapsed();
        assert!(took >= QUIET && took < QUIET * 3, "{took:?}");
    }

    #[test]
    fn requests_before_the_drain_read_no_clock() {
        let drain = Arc::new(Drain::default());
        std::thread::sleep(Duration::from_millis(5));
        drop(drain.enter());
        let request = drain.enter();
        assert_eq!(drain.in_flight(), 1);
        drop(request);
        assert_eq!(drain.in_flight(), 0);
        assert_eq!(drain.last_activity.load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn a_request_in_flight_holds_the_drain_until_it_ends_or_the_grace_passes() {
        let drain = Arc::new(Drain::default());
        let request = drain.enter();
        assert_eq!(drain.in_flight(), 1);
        let started = Instant::now();
        drain.drain(Duration::from_millis(300)).await;
        assert!(started.elapsed() >= Duration::from_millis(300));

        let ending = {
            let drain = drain.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                drain.drain(Duration::from_secs(30)).await;
                started.elapsed()
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(request);
        assert_eq!(drain.in_flight(), 0);
        let took = ending.await.unwrap();
        assert!(
            took >= Duration::from_millis(200) + QUIET && took < Duration::from_secs(3),
            "{took:?}"
        );
    }
}

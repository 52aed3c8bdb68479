//! Behaviour while the authorization server is failing: [`ProbeGate`] (one probe at a time,
//! spaced by an exponential [`Backoff`], instead of one call per request) and [`LogLimiter`] (at
//! most one failure line per interval, with counts). Both are told the time, so tests drive them
//! with made-up instants.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Delay before the next probe once `n` probes in a row have failed: `initial * 2^n`, at most
/// `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The wait after `failed_probes` failed probes (0 for the failure that started the outage).
    pub fn delay(&self, failed_probes: u32) -> Duration {
        let factor = 1u32.checked_shl(failed_probes).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// The schedule of [`crate::TokenChecker`]: 100 ms, 200 ms, then every 400 ms. The cap is the
/// trade-off: a dead server gets at most 2.5 calls a second from each checker, and a server that
/// comes back is seen within 0.4 s (plus one call) of its return, given traffic to probe with.
pub const PROBE_BACKOFF: Backoff = Backoff {
    initial: Duration::from_millis(100),
    max: Duration::from_millis(400),
};

/// The least time between two failure lines of [`crate::TokenChecker`].
pub const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(10);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether calls may go to the server. Healthy: every call may. After a call that could not reach
/// the server (see [`crate::introspection::IntrospectionError::is_outage`]), the outage begins:
/// one call (the probe) at a time, the next one [`Backoff`] after the previous probe failed; the
/// other callers are refused at once. The first call that reaches the server ends the outage.
#[derive(Debug)]
pub struct ProbeGate {
    backoff: Backoff,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    outage: Option<Outage>,
    /// Numbers the outages, so that a late probe cannot touch a newer one.
    outages: u64,
}

#[derive(Debug)]
struct Outage {
    id: u64,
    since: Instant,
    failed_probes: u32,
    next_probe: Instant,
    probing: bool,
}

/// Leave to make one call. Report its result with [`Permit::finish`]; a permit dropped unfinished
/// (the caller went away) frees the probe slot for the next caller.
#[derive(Debug)]
#[must_use]
pub struct Permit<'a> {
    gate: &'a ProbeGate,
    /// The outage this permit probes, if it is a probe.
    probe: Option<u64>,
}

impl ProbeGate {
    pub fn new(backoff: Backoff) -> Self {
        ProbeGate {
            backoff,
            state: Mutex::default(),
        }
    }

    /// A permit to call the server now, or `None`: an outage is on and a probe is in flight or
    /// not yet due.
    pub fn admit(&self, now: Instant) -> Option<Permit<'_>> {
        let mut s = lock(&self.state);
        let probe = match &mut s.outage {
            None => None,
            Some(o) if !o.probing && now >= o.next_probe => {
                o.probing = true;
                Some(o.id)
            }
            Some(_) => return None,
        };
        Some(Permit { gate: self, probe })
    }

    /// Whether an outage is on.
    pub fn is_failing(&self) -> bool {
        lock(&self.state).outage.is_some()
    }
}

impl Permit<'_> {
    /// Whether this call is the probe of an outage.
    pub fn is_probe(&self) -> bool {
        self.probe.is_some()
    }

    /// Records the call's result: `reached` when the server gave an answer that says it is up
    /// (even a refusal). Returns how long the outage lasted when this call ended one.
    pub fn finish(mut self, reached: bool, now: Instant) -> Option<Duration> {
        let probe = self.probe.take();
        let backoff = self.gate.backoff;
        let mut s = lock(&self.gate.state);
        if reached {
            return s
                .outage
                .take()
                .map(|o| now.saturating_duration_since(o.since));
        }
        match &mut s.outage {
            Some(o) => {
                if probe == Some(o.id) {
                    o.failed_probes = o.failed_probes.saturating_add(1);
                    o.next_probe = now + backoff.delay(o.failed_probes);
                    o.probing = false;
                }
                // Otherwise a call let through before the outage began: nothing to learn.
            }
            None => {
                s.outages += 1;
                s.outage = Some(Outage {
                    id: s.outages,
                    since: now,
                    failed_probes: 0,
                    next_probe: now + backoff.delay(0),
                    probing: false,
                });
            }
        }
        None
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.probe {
            let mut s = lock(&self.gate.state);
            if let Some(o) = s.outage.as_mut().filter(|o| o.id == id) {
                o.probing = false;
            }
        }
    }
}

/// Counts failures and says when a line may be written: the first failure at once, then at most
/// one line per interval, each with the number of failures since the previous line.
#[derive(Debug)]
pub struct LogLimiter {
    interval: Duration,
    state: Mutex<LogState>,
}

#[derive(Debug, Default)]
struct LogState {
    last_line: Option<Instant>,
    /// Failures not yet in a line.
    pending: u64,
    /// A line was written since the last [`LogLimiter::success`] that reported one.
    warned: bool,
}

/// What a failure line reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Failures since the previous line, this one included.
    pub failures: u64,
    /// Time since the previous line; `None` for the first line.
    pub since_last_line: Option<Duration>,
}

impl LogLimiter {
    pub fn new(interval: Duration) -> Self {
        LogLimiter {
            interval,
            state: Mutex::default(),
        }
    }

    /// Counts one failure; `Some` when a line is due now.
    pub fn failure(&self, now: Instant) -> Option<Summary> {
        let mut s = lock(&self.state);
        s.pending += 1;
        let since_last_line = s.last_line.map(|t| now.saturating_duration_since(t));
        if since_last_line.is_some_and(|d| d < self.interval) {
            return None;
        }
        let failures = std::mem::take(&mut s.pending);
        s.last_line = Some(now);
        s.warned = true;
        Some(Summary {
            failures,
            since_last_line,
        })
    }

    /// A success. `Some(failures not yet in a line)` once after failures were reported, so that
    /// the end of the trouble is logged (no more often than the failure lines themselves).
    pub fn success(&self) -> Option<u64> {
        let mut s = lock(&self.state);
        if !std::mem::take(&mut s.warned) {
            return None;
        }
        Some(std::mem::take(&mut s.pending))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let delays: Vec<u64> = (0..6)
            .map(|n| PROBE_BACKOFF.delay(n).as_millis() as u64)
            .collect();
        assert_eq!(delays, [100, 200, 400, 400, 400, 400]);
        assert_eq!(PROBE_BACKOFF.delay(u32::MAX), ms(400));
        let b = Backoff {
            initial: ms(100),
            max: Duration::from_secs(5),
        };
        assert_eq!(b.delay(5), ms(3200));
        assert_eq!(b.delay(6), Duration::from_secs(5));
        assert_eq!(b.delay(40), Duration::from_secs(5));
    }

    #[test]
    fn healthy_gate_lets_every_call_through() {
        let gate = ProbeGate::new(PROBE_BACKOFF);
        let t = Instant::now();
        let permits: Vec<_> = (0..10).map(|_| gate.admit(t).unwrap()).collect();
        assert!(permits.iter().all(|p| !p.is_probe()));
        for p in permits {
            assert_eq!(p.finish(true, t), None);
        }
        assert!(!gate.is_failing());
    }

    #[test]
    fn one_probe_at_a_time_spaced_by_the_backoff() {
        let gate = ProbeGate::new(PROBE_BACKOFF);
        let t0 = Instant::now();
        // Calls already in flight when the server dies all fail; only the first starts the
        // outage, and the others do not push the schedule.
        let in_flight: Vec<_> = (0..3).map(|_| gate.admit(t0).unwrap()).collect();
        for p in in_flight {
            assert_eq!(p.finish(false, t0), None);
        }
        assert!(gate.is_failing());
        // Nothing before 100 ms.
        assert!(gate.admit(t0).is_none());
        assert!(gate.admit(t0 + ms(99)).is_none());
        // At 100 ms, one probe; nobody else while it is in flight, even much later.
        let probe = gate.admit(t0 + ms(100)).unwrap();
        assert!(probe.is_probe());
        assert!(gate.admit(t0 + ms(100)).is_none());
        assert!(gate.admit(t0 + ms(5000)).is_none());
        // It fails at 150 ms: the next probe is 200 ms later, then 400, 400, ...
        assert_eq!(probe.finish(false, t0 + ms(150)), None);
        assert!(gate.admit(t0 + ms(349)).is_none());
        let mut at = t0 + ms(350);
        for wait in [400, 400, 400] {
            let p = gate.admit(at).unwrap();
            assert_eq!(p.finish(false, at), None);
            assert!(gate.admit(at + ms(wait - 1)).is_none());
            at += ms(wait);
        }
        // A probe that reaches the server ends the outage, and says how long it lasted.
        let p = gate.admit(at).unwrap();
        assert_eq!(p.finish(true, at), Some(at - t0));
        assert!(!gate.is_failing());
        assert!(!gate.admit(at).unwrap().is_probe());
    }

    #[test]
    fn a_success_resets_the_backoff() {
        let gate = ProbeGate::new(PROBE_BACKOFF);
        let mut t = Instant::now();
        assert_eq!(gate.admit(t).unwrap().finish(false, t), None);
        for _ in 0..5 {
            t += ms(400);
            assert_eq!(gate.admit(t).unwrap().finish(false, t), None);
        }
        // At the cap now: 399 ms later is still too early.
        assert!(gate.admit(t + ms(399)).is_none());
        t += ms(400);
        assert!(gate.admit(t).unwrap().finish(true, t).is_some());
        // The next outage starts again at 100 ms.
        assert_eq!(gate.admit(t).unwrap().finish(false, t), None);
        assert!(gate.admit(t + ms(99)).is_none());
        assert!(gate.admit(t + ms(100)).unwrap().is_probe());
    }

    #[test]
    fn a_call_from_before_the_outage_that_succeeds_ends_it() {
        let gate = ProbeGate::new(PROBE_BACKOFF);
        let t = Instant::now();
        let slow = gate.admit(t).unwrap();
        assert_eq!(gate.admit(t).unwrap().finish(false, t), None);
        assert!(gate.is_failing());
        assert_eq!(slow.finish(true, t + ms(30)), Some(ms(30)));
        assert!(!gate.is_failing());
    }

    #[test]
    fn an_abandoned_probe_frees_the_slot() {
        let gate = ProbeGate::new(PROBE_BACKOFF);
        let t = Instant::now();
        assert_eq!(gate.admit(t).unwrap().finish(false, t), None);
        let probe = gate.admit(t + ms(100)).unwrap();
        assert!(gate.admit(t + ms(101)).is_none());
        drop(probe);
        assert!(gate.admit(t + ms(101)).unwrap().is_probe());
        assert!(gate.is_failing());
    }

    #[test]
    fn a_late_probe_does_not_touch_a_newer_outage() {
        let gate = ProbeGate::new(PROBE_BACKOFF);
        let t = Instant::now();
        let before = gate.admit(t).unwrap();
        assert_eq!(gate.admit(t).unwrap().finish(false, t), None);
        let old_probe = gate.admit(t + ms(100)).unwrap();
        // A call from before that outage succeeds and ends it; then a new one begins.
        assert!(before.finish(true, t + ms(105)).is_some());
        assert_eq!(
            gate.admit(t + ms(110)).unwrap().finish(false, t + ms(110)),
            None
        );
        let new_probe = gate.admit(t + ms(210)).unwrap();
        // The old probe fails late: the new outage's probe is still the only one.
        assert_eq!(old_probe.finish(false, t + ms(220)), None);
        assert!(gate.admit(t + ms(230)).is_none());
        drop(new_probe);
        assert!(gate.admit(t + ms(230)).is_some());
    }

    #[test]
    fn log_limiter_writes_at_most_one_line_per_interval_with_counts() {
        let limiter = LogLimiter::new(Duration::from_secs(10));
        let t0 = Instant::now();
        // The first failure is reported at once.
        assert_eq!(
            limiter.failure(t0),
            Some(Summary {
                failures: 1,
                since_last_line: None
            })
        );
        // 12 000 failures a second for just under 10 s: no line.
        let mut lines = 0;
        for i in 1..119_999u64 {
            lines += usize::from(
                limiter
                    .failure(t0 + Duration::from_micros(i * 83))
                    .is_some(),
            );
        }
        assert_eq!(lines, 0);
        // The window has passed: one line counting all of them (and this one).
        assert_eq!(
            limiter.failure(t0 + Duration::from_secs(10)),
            Some(Summary {
                failures: 119_999,
                since_last_line: Some(Duration::from_secs(10))
            })
        );
        assert_eq!(limiter.failure(t0 + ms(10_001)), None);
        assert_eq!(limiter.failure(t0 + ms(19_999)), None);
        // A quiet spell longer than the interval: the next failure is reported at once, with
        // the ones not reported yet.
        assert_eq!(
            limiter.failure(t0 + Duration::from_secs(60)),
            Some(Summary {
                failures: 3,
                since_last_line: Some(Duration::from_secs(50))
            })
        );
    }

    #[test]
    fn log_limiter_reports_the_end_once_and_keeps_counts() {
        let limiter = LogLimiter::new(Duration::from_secs(10));
        let t0 = Instant::now();
        // Successes with no failure reported: nothing to say.
        assert_eq!(limiter.success(), None);
        assert!(limiter.failure(t0).is_some());
        assert_eq!(limiter.failure(t0 + ms(1)), None);
        assert_eq!(limiter.failure(t0 + ms(2)), None);
        // Recovery: one line, with the two failures not reported yet; then nothing more.
        assert_eq!(limiter.success(), Some(2));
        assert_eq!(limiter.success(), None);
        // A server flapping within the interval: failures are counted, not written, and no
        // recovery line follows since no failure line was written.
        for i in 0..100 {
            assert_eq!(limiter.failure(t0 + ms(100 + i)), None);
            assert_eq!(limiter.success(), None);
        }
        assert_eq!(
            limiter.failure(t0 + Duration::from_secs(10)),
            Some(Summary {
                failures: 101,
                since_last_line: Some(Duration::from_secs(10))
            })
        );
        assert_eq!(limiter.success(), Some(0));
    }
}

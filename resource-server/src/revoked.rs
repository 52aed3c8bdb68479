//! What a revocation stream has said, as the data path reads it ([`Revoked`]): the deny-list every
//! checked token is screened against (a token family's `jti`; a subject's, a client's, or a
//! subject's at one client, not-before time), the stream's health, which bounds how long a cached
//! answer may be served ([`Revoked::max_age`]), a flush epoch (a cached answer fetched before the
//! last flush is not served), and the receiver's counters. No I/O: the receiver
//! (`crate::ssf`) writes it, the checker and the gate read it.

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::claims::Claims;
use crate::metrics::Scrape;

/// The refusal of a token the stream said was revoked.
pub const REVOKED_TOKEN: &str = "The access token has been revoked.";

/// How long cached answers may live, by the stream's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetimes {
    /// While the stream is healthy: the longest life of a cached answer.
    pub healthy_max_ttl: Duration,
    /// While it is not: the longest age at which a cached answer is still served.
    pub fallback_ttl: Duration,
    /// With no successful poll for this long, the stream is unhealthy.
    pub unhealthy_after: Duration,
    /// How long an event is remembered in the deny-list (longer than any token's life).
    pub remember: Duration,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes {
            healthy_max_ttl: Duration::from_secs(3600),
            fallback_ttl: Duration::from_secs(60),
            unhealthy_after: Duration::from_secs(30),
            remember: Duration::from_secs(86_400),
        }
    }
}

/// One thing an event ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Subject {
    /// A token family: every token whose `jti` is this.
    Jti(String),
    /// A user: every token whose `sub` is this.
    User(String),
    /// An application: every token whose `client_id` is this.
    Client(String),
    /// A user's tokens at one application (consent withdrawn).
    UserAtClient { user: String, client: String },
}

impl Subject {
    /// Whether a token with these claims belongs to the subject.
    pub fn covers(&self, c: &Claims) -> bool {
        let is = |field: &Option<String>, v: &str| field.as_deref() == Some(v);
        match self {
            Subject::Jti(j) => is(&c.jti, j),
            Subject::User(s) => is(&c.sub, s),
            Subject::Client(id) => is(&c.client_id, id),
            Subject::UserAtClient { user, client } => is(&c.sub, user) && is(&c.client_id, client),
        }
    }
}

/// Counters of the receiver (public atomics, written by [`Revoked::collect`]).
#[derive(Debug, Default)]
pub struct RevocationMetrics {
    pub polls: AtomicU64,
    pub poll_errors: AtomicU64,
    pub sets_applied: AtomicU64,
    /// SETs refused: signature, `typ`, `iss`, `aud`, `iat` or shape.
    pub sets_refused: AtomicU64,
    /// Events of a type or subject format the receiver does not act on.
    pub events_ignored: AtomicU64,
    pub streams_created: AtomicU64,
    /// Verification events (SSF 1.0 §8.1.4) received in answer to the receiver's request.
    pub verifications: AtomicU64,
    pub flushes: AtomicU64,
    /// Cached answers dropped by an event (predicates registered; moka drops lazily).
    pub evictions: AtomicU64,
    /// Answers refused by the deny-list.
    pub denied: AtomicU64,
}

/// An entry of the deny-list: refuse tokens issued at or before `not_after`, until `until`.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Tokens with `iat` <= this are refused (a `jti` entry refuses whatever its `iat`).
    issued_until: i64,
    /// Unix seconds when the entry is forgotten.
    until: i64,
}

/// The deny-list by kind of subject, so that a lookup borrows the token's claims (no allocation
/// on the request path).
#[derive(Debug, Default)]
struct DenyList {
    jti: HashMap<String, Entry>,
    user: HashMap<String, Entry>,
    client: HashMap<String, Entry>,
    /// user → client → entry.
    user_at_client: HashMap<String, HashMap<String, Entry>>,
}

impl DenyList {
    fn entry(&mut self, subject: Subject, fresh: Entry) -> &mut Entry {
        match subject {
            Subject::Jti(j) => self.jti.entry(j).or_insert(fresh),
            Subject::User(u) => self.user.entry(u).or_insert(fresh),
            Subject::Client(c) => self.client.entry(c).or_insert(fresh),
            Subject::UserAtClient { user, client } => self
                .user_at_client
                .entry(user)
                .or_default()
                .entry(client)
                .or_insert(fresh),
        }
    }

    fn retain(&mut self, now: i64) {
        let keep = |_: &String, e: &mut Entry| e.until > now;
        self.jti.retain(keep);
        self.user.retain(keep);
        self.client.retain(keep);
        self.user_at_client.retain(|_, by_client| {
            by_client.retain(keep);
            !by_client.is_empty()
        });
    }

    fn len(&self) -> usize {
        self.jti.len()
            + self.user.len()
            + self.client.len()
            + self
                .user_at_client
                .values()
                .map(HashMap::len)
                .sum::<usize>()
    }
}

/// The shared state of one revocation stream. See the module docs.
#[derive(Debug)]
pub struct Revoked {
    pub lifetimes: Lifetimes,
    deny: RwLock<DenyList>,
    /// Whether the deny-list has any entry (the common case, none, reads no lock).
    any: AtomicBool,
    /// Unix ms of the last successful poll; 0: never.
    last_poll_ms: AtomicI64,
    /// Whether a stream exists (created and not answered 404 since).
    stream_up: AtomicBool,
    /// Whether the transmitter says the stream is enabled (SSF 1.0 §8.1.2): a paused or
    /// disabled stream delivers nothing.
    stream_enabled: AtomicBool,
    /// Unix ms until which a verification failure keeps the stream unhealthy.
    failed_until_ms: AtomicI64,
    epoch: AtomicU64,
    pub metrics: RevocationMetrics,
}

impl Revoked {
    pub fn new(lifetimes: Lifetimes) -> Revoked {
        Revoked {
            lifetimes,
            deny: RwLock::default(),
            any: AtomicBool::new(false),
            last_poll_ms: AtomicI64::new(0),
            stream_up: AtomicBool::new(false),
            stream_enabled: AtomicBool::new(true),
            failed_until_ms: AtomicI64::new(0),
            epoch: AtomicU64::new(0),
            metrics: RevocationMetrics::default(),
        }
    }

    /// Healthy, or why not: a stream exists and is enabled, a poll succeeded within
    /// `unhealthy_after`, and no SET failed verification within `unhealthy_after`.
    pub fn health(&self) -> Result<(), &'static str> {
        let now = unix_millis();
        let bound = millis(self.lifetimes.unhealthy_after);
        if !self.stream_up.load(Relaxed) {
            return Err("revocation stream unhealthy: no stream");
        }
        if !self.stream_enabled.load(Relaxed) {
            return Err("revocation stream unhealthy: the stream is paused or disabled");
        }
        if now.saturating_sub(self.last_poll_ms.load(Relaxed)) > bound {
            return Err("revocation stream unhealthy: no successful poll within unhealthy_after");
        }
        if now < self.failed_until_ms.load(Relaxed) {
            return Err("revocation stream unhealthy: a SET failed verification");
        }
        Ok(())
    }

    pub fn is_healthy(&self) -> bool {
        self.health().is_ok()
    }

    /// The longest age at which a cached answer may be served now.
    pub fn max_age(&self) -> Duration {
        if self.is_healthy() {
            self.lifetimes.healthy_max_ttl
        } else {
            self.lifetimes.fallback_ttl
        }
    }

    /// Whether an answer of `age` may still be served (cheap while it is under the fallback).
    pub fn may_serve(&self, age: Duration) -> bool {
        age < self.lifetimes.fallback_ttl
            || (age < self.lifetimes.healthy_max_ttl && self.is_healthy())
    }

    /// The flush epoch: a cached answer whose fetch began in an earlier epoch is not served.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Relaxed)
    }

    /// Every cached answer becomes unusable (events may have been lost).
    pub fn flush(&self) {
        self.epoch.fetch_add(1, Relaxed);
        self.metrics.flushes.fetch_add(1, Relaxed);
    }

    /// A poll was answered.
    pub fn poll_succeeded(&self) {
        self.stream_up.store(true, Relaxed);
        self.last_poll_ms.store(unix_millis(), Relaxed);
    }

    /// The stream's status as the transmitter gave it: anything but enabled makes it unhealthy.
    /// Whether it changed.
    pub fn stream_enabled(&self, enabled: bool) -> bool {
        self.stream_enabled.swap(enabled, Relaxed) != enabled
    }

    /// The stream is gone (404) or not created yet.
    pub fn stream_lost(&self) {
        self.stream_up.store(false, Relaxed);
    }

    /// A SET failed verification: unhealthy for `unhealthy_after`, and everything cached is
    /// flushed (the SET may have been a real event the receiver could not read).
    pub fn verification_failed(&self) {
        self.metrics.sets_refused.fetch_add(1, Relaxed);
        let until = unix_millis().saturating_add(millis(self.lifetimes.unhealthy_after));
        self.failed_until_ms.store(until, Relaxed);
        self.flush();
    }

    /// Unix ms of the last successful poll, if any.
    pub fn last_poll_ms(&self) -> Option<i64> {
        Some(self.last_poll_ms.load(Relaxed)).filter(|&t| t > 0)
    }

    /// Refuses tokens of `subject` issued at or before `issued_until` (unix seconds), for
    /// `remember`. A later event for the same subject moves the time forward, never back.
    pub fn deny(&self, subject: Subject, issued_until: i64) {
        let until = unix_millis() / 1000 + self.lifetimes.remember.as_secs() as i64;
        let mut deny = self.deny.write().unwrap_or_else(|p| p.into_inner());
        let entry = deny.entry(
            subject,
            Entry {
                issued_until,
                until,
            },
        );
        entry.issued_until = entry.issued_until.max(issued_until);
        entry.until = until;
        self.any.store(true, Relaxed);
    }

    /// Forgets entries past their time.
    pub fn purge(&self) {
        let now = unix_millis() / 1000;
        let mut deny = self.deny.write().unwrap_or_else(|p| p.into_inner());
        deny.retain(now);
        self.any.store(deny.len() > 0, Relaxed);
    }

    /// Entries in the deny-list.
    pub fn deny_list_len(&self) -> usize {
        self.deny.read().map_or(0, |d| d.len())
    }

    /// Whether the deny-list refuses an active answer: its `jti` was revoked, or its subject,
    /// client or subject at client was, at or after its `iat`. An answer without `iat` is
    /// refused by subject only when it was cached before the event (the receiver evicts those);
    /// one fetched after was answered by the server itself.
    pub fn refuses(&self, c: &Claims) -> bool {
        if !c.active || !self.any.load(Relaxed) {
            return false;
        }
        let deny = self.deny.read().unwrap_or_else(|p| p.into_inner());
        let before =
            |e: Option<&Entry>| e.is_some_and(|e| c.iat.is_some_and(|iat| iat <= e.issued_until));
        let sub = c.sub.as_deref();
        let client = c.client_id.as_deref();
        let refused = c.jti.as_deref().is_some_and(|j| deny.jti.contains_key(j))
            || sub.is_some_and(|s| before(deny.user.get(s)))
            || client.is_some_and(|id| before(deny.client.get(id)))
            || matches!((sub, client), (Some(s), Some(id))
                if before(deny.user_at_client.get(s).and_then(|m| m.get(id))));
        if refused {
            self.metrics.denied.fetch_add(1, Relaxed);
        }
        refused
    }

    /// Writes the receiver's families (named `revocation_…`, the registry's prefix before them).
    pub fn collect(&self, s: &mut Scrape) -> std::fmt::Result {
        let m = &self.metrics;
        let counters = [
            (
                "revocation_polls",
                "Revocation stream polls answered",
                &m.polls,
            ),
            (
                "revocation_poll_errors",
                "Revocation stream polls (and token, configuration or stream calls) that failed",
                &m.poll_errors,
            ),
            (
                "revocation_sets_applied",
                "Security event tokens verified and applied",
                &m.sets_applied,
            ),
            (
                "revocation_sets_refused",
                "Security event tokens refused: signature, typ, iss, aud, iat or shape",
                &m.sets_refused,
            ),
            (
                "revocation_events_ignored",
                "Events of a type or subject format the receiver does not act on",
                &m.events_ignored,
            ),
            (
                "revocation_streams_created",
                "Revocation streams created (at start, and after one was lost)",
                &m.streams_created,
            ),
            (
                "revocation_verifications",
                "Verification events received in answer to the receiver's request",
                &m.verifications,
            ),
            (
                "revocation_cache_flushes",
                "Whole-cache flushes: stream lost or recreated, or a SET that failed verification",
                &m.flushes,
            ),
            (
                "revocation_evictions",
                "Cache evictions by jti, subject or client requested by events",
                &m.evictions,
            ),
            (
                "revocation_denied",
                "Answers refused by the revocation deny-list",
                &m.denied,
            ),
        ];
        for (name, help, value) in counters {
            s.counter(name, help, value.load(Relaxed))?;
        }
        let gauges = [
            (
                "revocation_stream_healthy",
                "1 while the revocation stream is healthy (cached answers may live healthy_max_ttl), 0 otherwise (fallback_ttl)",
                i64::from(self.is_healthy()),
            ),
            (
                "revocation_last_poll_timestamp_seconds",
                "Unix time of the last successful poll (0 = never)",
                self.last_poll_ms.load(Relaxed) / 1000,
            ),
            (
                "revocation_deny_list_entries",
                "Entries in the revocation deny-list",
                self.deny_list_len() as i64,
            ),
        ];
        for (name, help, value) in gauges {
            s.gauge(name, help, value)?;
        }
        Ok(())
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn unix_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(jti: &str, sub: &str, client: &str, iat: i64) -> Claims {
        Claims {
            active: true,
            jti: Some(jti.into()),
            sub: Some(sub.into()),
            client_id: Some(client.into()),
            iat: Some(iat),
            ..Claims::default()
        }
    }

    #[test]
    fn the_deny_list_refuses_by_jti_subject_client_and_pair() {
        let r = Revoked::new(Lifetimes::default());
        let t = token("f1", "7", "app", 1000);
        assert!(!r.refuses(&t));
        r.deny(Subject::Jti("f2".into()), 0);
        assert!(!r.refuses(&t));
        r.deny(Subject::Jti("f1".into()), 0);
        assert!(r.refuses(&t), "a jti is refused whatever its iat");
        assert!(!r.refuses(&Claims::inactive()));

        let r = Revoked::new(Lifetimes::default());
        r.deny(Subject::User("7".into()), 999);
        assert!(!r.refuses(&t), "issued after the event");
        r.deny(Subject::User("7".into()), 500);
        assert!(!r.refuses(&t), "never moved back");
        r.deny(Subject::User("7".into()), 1000);
        assert!(r.refuses(&t));
        assert!(!r.refuses(&token("f1", "8", "app", 1000)));
        let no_iat = Claims {
            iat: None,
            ..t.clone()
        };
        assert!(!r.refuses(&no_iat));

        let r = Revoked::new(Lifetimes::default());
        r.deny(Subject::Client("app".into()), 1000);
        assert!(r.refuses(&t));
        let r = Revoked::new(Lifetimes::default());
        r.deny(
            Subject::UserAtClient {
                user: "7".into(),
                client: "other".into(),
            },
            2000,
        );
        assert!(!r.refuses(&t));
        r.deny(
            Subject::UserAtClient {
                user: "7".into(),
                client: "app".into(),
            },
            2000,
        );
        assert!(r.refuses(&t));
        assert_eq!(r.metrics.denied.load(Relaxed), 1);
    }

    #[test]
    fn health_and_lifetimes() {
        let r = Revoked::new(Lifetimes {
            healthy_max_ttl: Duration::from_secs(3600),
            fallback_ttl: Duration::from_secs(60),
            unhealthy_after: Duration::from_secs(30),
            remember: Duration::from_secs(10),
        });
        assert_eq!(r.health(), Err("revocation stream unhealthy: no stream"));
        assert_eq!(r.max_age(), Duration::from_secs(60));
        assert!(r.may_serve(Duration::from_secs(59)));
        assert!(!r.may_serve(Duration::from_secs(61)));
        r.poll_succeeded();
        assert!(r.is_healthy());
        assert_eq!(r.max_age(), Duration::from_secs(3600));
        assert!(r.may_serve(Duration::from_secs(3599)));
        assert!(!r.may_serve(Duration::from_secs(3600)));
        let epoch = r.epoch();
        r.verification_failed();
        assert_eq!(
            r.health(),
            Err("revocation stream unhealthy: a SET failed verification")
        );
        assert_eq!(r.epoch(), epoch + 1);
        assert!(!r.may_serve(Duration::from_secs(61)));
        r.last_poll_ms.store(1, Relaxed);
        r.failed_until_ms.store(0, Relaxed);
        assert!(r.health().unwrap_err().contains("no successful poll"));
        let r = std::sync::Arc::new(r);
        let text = crate::metrics::text("tokengate_proxy", move |s| r.collect(s));
        assert!(
            text.contains("\ntokengate_proxy_revocation_stream_healthy 0\n"),
            "{text}"
        );
        assert!(
            text.contains("\ntokengate_proxy_revocation_sets_refused_total 1\n"),
            "{text}"
        );
    }

    #[test]
    fn entries_are_forgotten_after_remember() {
        let r = Revoked::new(Lifetimes {
            remember: Duration::ZERO,
            ..Lifetimes::default()
        });
        r.deny(Subject::Jti("f".into()), 0);
        assert_eq!(r.deny_list_len(), 1);
        r.purge();
        assert_eq!(r.deny_list_len(), 0);
        assert!(!r.refuses(&token("f", "1", "a", 0)));
    }
}

//! [`TokenChecker`]: introspection through a moka cache keyed by a keyed hash of the token
//! ([`crate::token_key`]), with request coalescing, per-entry lifetimes, a stale grace and one probe at a time during outages
//! ([`crate::outage`]), rate-limited failure logs, the answer policy applied once per answer,
//! and metrics. With a revocation stream ([`crate::revoked`]), answers live up to its
//! `healthy_max_ttl` while it is healthy and are served up to its `fallback_ttl` of age otherwise;
//! events evict them by `jti`, subject or client, and a flush makes every earlier answer unusable.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use moka::Expiry;
use moka::future::Cache;
use prometheus_client::metrics::histogram::Histogram;

use crate::claims::Claims;
use crate::decision::Credential;
pub use crate::introspection::CheckerError;
use crate::introspection::{IntrospectionError, IntrospectionSettings, Introspector};
use crate::metrics::Scrape;
use crate::outage::{FAILURE_LOG_INTERVAL, LogLimiter, PROBE_BACKOFF, ProbeGate, Summary};
use crate::policy::AnswerPolicy;
use crate::revoked::{Revoked, Subject};
use crate::token_key::{KeyCache, KeyHash, TokenKey as Key, TokenKeys};
use crate::token_log_id;

/// Cache behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheSettings {
    /// Longest life of an active answer (it never outlives the token's `exp`). Zero: no cache.
    pub max_ttl: Duration,
    /// Life of an inactive answer.
    pub negative_ttl: Duration,
    /// Most entries kept.
    pub capacity: u64,
    /// While the server cannot be reached, an active answer may be served this long after it
    /// left the cache (never past the token's `exp`). Zero: off. A revocation is therefore seen
    /// within `max_ttl`, or within `max_ttl + stale_grace` while the server is unreachable
    /// (counted from the end of the call that fetched the answer).
    pub stale_grace: Duration,
}

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings {
            max_ttl: Duration::from_secs(60),
            negative_ttl: Duration::from_secs(5),
            capacity: 100_000,
            stale_grace: Duration::ZERO,
        }
    }
}

/// The authorization server could not give an answer (unreachable, timeout, non-2xx, or an
/// answer that is not valid RFC 7662). Callers fail closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("authorization server unavailable")]
pub struct Unavailable;

/// Upper bounds (seconds) of the introspection latency histogram; `+Inf` is implied.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Introspection latency histogram (every call, successful or not), in [`LATENCY_BUCKETS`].
#[derive(Debug)]
pub struct LatencyHistogram(Histogram);

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram(Histogram::new(LATENCY_BUCKETS))
    }
}

impl LatencyHistogram {
    /// Records one call.
    pub fn observe(&self, d: Duration) {
        self.0.observe(d.as_secs_f64());
    }
}

/// Counters of a [`TokenChecker`]. Fields are public atomics; the methods read them.
#[derive(Debug, Default)]
pub struct CheckerMetrics {
    /// Checks answered from the cache.
    pub hits: AtomicU64,
    /// Checks that made an introspection call.
    pub misses: AtomicU64,
    /// Checks that waited for another check's call for the same token.
    pub coalesced: AtomicU64,
    /// Checks that made no call because the server was failing and no probe was due (also
    /// those that waited for such a check for the same token); answered from the stale grace
    /// or refused as unavailable.
    pub skipped: AtomicU64,
    /// Introspection calls that failed.
    pub errors: AtomicU64,
    /// Failed calls whose 2xx answer was not a valid RFC 7662 answer (also in `errors`).
    pub malformed: AtomicU64,
    /// Active answers refused by the [`AnswerPolicy`] (refresh token, issuer).
    pub refused: AtomicU64,
    /// Answers served from the stale grace while the server was unavailable.
    pub stale_served: AtomicU64,
    pub latency: LatencyHistogram,
    /// Unix seconds of the last successful introspection call; 0 = never.
    pub last_success: AtomicI64,
    /// Whether the most recent introspection call succeeded (readiness flips at once on failure).
    pub last_call_ok: AtomicBool,
    /// Whether the most recent call was answered 401/403: the proxy's own credentials refused.
    pub last_call_refused: AtomicBool,
}

impl CheckerMetrics {
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }
    pub fn coalesced(&self) -> u64 {
        self.coalesced.load(Ordering::Relaxed)
    }
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
    pub fn malformed(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
    pub fn stale_served(&self) -> u64 {
        self.stale_served.load(Ordering::Relaxed)
    }
    /// Unix seconds of the last successful introspection call, if any (for readiness).
    pub fn last_success(&self) -> Option<i64> {
        Some(self.last_success.load(Ordering::Relaxed)).filter(|&t| t > 0)
    }
    /// Whether the most recent introspection call succeeded.
    pub fn last_call_ok(&self) -> bool {
        self.last_call_ok.load(Ordering::Relaxed)
    }
    /// Whether the most recent introspection call was refused with 401/403 (bad credentials).
    pub fn last_call_refused(&self) -> bool {
        self.last_call_refused.load(Ordering::Relaxed)
    }

    /// Writes the counters, the latency histogram and the last success (names as
    /// `cache_hits_total`, the registry's prefix before them).
    pub fn collect(&self, s: &mut Scrape) -> std::fmt::Result {
        let counters = [
            (
                "cache_hits",
                "Token checks answered from the cache",
                self.hits(),
            ),
            (
                "cache_misses",
                "Token checks that called the introspection endpoint",
                self.misses(),
            ),
            (
                "cache_coalesced",
                "Token checks that waited for a concurrent call for the same token",
                self.coalesced(),
            ),
            (
                "introspection_skipped",
                "Token checks that made no introspection call because the authorization server was failing (one probe at a time, with backoff)",
                self.skipped(),
            ),
            (
                "introspection_errors",
                "Introspection calls that failed",
                self.errors(),
            ),
            (
                "introspection_malformed",
                "Introspection answers that were not valid RFC 7662 (not JSON, wrong types, times out of range)",
                self.malformed(),
            ),
            (
                "introspection_refused",
                "Active introspection answers refused: refresh token or issuer mismatch",
                self.refused(),
            ),
            (
                "stale_served",
                "Cached active answers served past their cache life because the authorization server could not be asked (within stale_grace)",
                self.stale_served(),
            ),
        ];
        for (name, help, value) in counters {
            s.counter(name, help, value)?;
        }
        s.metric(
            "introspection_duration_seconds",
            "Introspection call latency",
            &self.latency.0,
        )?;
        s.gauge(
            "introspection_last_success_timestamp_seconds",
            "Unix time of the last successful introspection call (0 = never)",
            self.last_success.load(Ordering::Relaxed),
        )
    }
}

#[derive(Clone)]
struct Fresh {
    claims: Arc<Claims>,
    ttl: Duration,
    /// When the call that fetched it ended, and the revocation flush epoch when it began.
    fetched: Instant,
    epoch: u64,
}

#[derive(Clone)]
struct Stale {
    claims: Arc<Claims>,
    serve_until: Instant,
    fetched: Instant,
    epoch: u64,
}

/// Each entry lives for the lifetime computed when it was fetched.
struct FreshExpiry;

impl Expiry<Key, Fresh> for FreshExpiry {
    fn expire_after_create(&self, _: &Key, v: &Fresh, _: Instant) -> Option<Duration> {
        Some(v.ttl)
    }
    fn expire_after_update(
        &self,
        _: &Key,
        v: &Fresh,
        _: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(v.ttl)
    }
}

struct StaleExpiry;

impl Expiry<Key, Stale> for StaleExpiry {
    fn expire_after_create(&self, _: &Key, v: &Stale, now: Instant) -> Option<Duration> {
        Some(v.serve_until.saturating_duration_since(now))
    }
    fn expire_after_update(
        &self,
        _: &Key,
        v: &Stale,
        now: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(v.serve_until.saturating_duration_since(now))
    }
}

struct Inner {
    introspector: Introspector,
    policy: AnswerPolicy,
    settings: CacheSettings,
    /// How tokens become keys of both caches.
    keys: TokenKeys,
    fresh: Option<KeyCache<Fresh>>,
    /// Active answers kept past their cache life for the stale grace (only when it is on).
    stale: Option<KeyCache<Stale>>,
    /// One probe at a time while the server is failing.
    gate: ProbeGate,
    /// Failure lines: at most one per [`FAILURE_LOG_INTERVAL`].
    failure_log: LogLimiter,
    metrics: CheckerMetrics,
    /// The revocation stream's state, when there is one.
    revoked: Option<Arc<Revoked>>,
}

/// Why a check got no answer: the call failed, or no call was made (outage, probe not due).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Miss {
    Failed,
    Skipped,
}

/// Checks tokens by introspection through a cache. Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct TokenChecker {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TokenChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenChecker")
            .field("settings", &self.inner.settings)
            .field("entries", &self.entry_count())
            .finish_non_exhaustive()
    }
}

impl TokenChecker {
    /// Builds the HTTP client and the cache. Fails on a bad URL, zero timeouts, credentials that
    /// cannot be a header, a policy [`AnswerPolicy::check`] refuses, or a zero capacity with
    /// caching on.
    pub fn new(i: IntrospectionSettings, c: CacheSettings) -> Result<Self, CheckerError> {
        Self::with_revocation(i, c, None)
    }

    /// [`TokenChecker::new`], its cache governed by a revocation stream's state when given (see
    /// the module docs): `c.max_ttl` then only says whether there is a cache at all.
    pub fn with_revocation(
        i: IntrospectionSettings,
        c: CacheSettings,
        revoked: Option<Arc<Revoked>>,
    ) -> Result<Self, CheckerError> {
        let introspector = Introspector::new(&i)?;
        i.policy.check().map_err(|(key, problem)| {
            CheckerError::Settings(format!("introspection {key}: {problem}"))
        })?;
        let caching = !c.max_ttl.is_zero();
        if caching && c.capacity == 0 {
            return Err(CheckerError::Settings(
                "cache capacity must be greater than zero (set max_ttl to 0 to turn the cache off)"
                    .into(),
            ));
        }
        let evictable = revoked.is_some();
        let fresh = caching.then(|| {
            let b = Cache::builder()
                .name("token-introspection")
                .max_capacity(c.capacity)
                .expire_after(FreshExpiry);
            if evictable {
                b.support_invalidation_closures().build_with_hasher(KeyHash)
            } else {
                b.build_with_hasher(KeyHash)
            }
        });
        let stale = (caching && !c.stale_grace.is_zero()).then(|| {
            let b = Cache::builder()
                .name("token-introspection-stale")
                .max_capacity(c.capacity)
                .expire_after(StaleExpiry);
            if evictable {
                b.support_invalidation_closures().build_with_hasher(KeyHash)
            } else {
                b.build_with_hasher(KeyHash)
            }
        });
        Ok(TokenChecker {
            inner: Arc::new(Inner {
                introspector,
                keys: TokenKeys::random().ok_or_else(|| {
                    CheckerError::Settings("no randomness for the cache's key".into())
                })?,
                policy: i.policy,
                settings: c,
                fresh,
                stale,
                gate: ProbeGate::new(PROBE_BACKOFF),
                failure_log: LogLimiter::new(FAILURE_LOG_INTERVAL),
                metrics: CheckerMetrics::default(),
                revoked,
            }),
        })
    }

    /// Ok(claims) for active and inactive answers alike (an active answer the policy refuses
    /// reads as inactive); Err(Unavailable) when the server cannot be reached, times out, or
    /// answers non-2xx or not valid RFC 7662 (fail closed), unless the stale grace allows a
    /// previous active answer. `exp` and `nbf` are left to [`crate::decide`], with
    /// [`TokenChecker::leeway`], as cached answers age.
    ///
    /// While the server is failing ([`ProbeGate`]), a check that the fresh cache cannot answer
    /// calls only if it is the one probe due; the others get the stale grace or Err(Unavailable)
    /// at once, without a call.
    pub async fn check(&self, token: &str) -> Result<Arc<Claims>, Unavailable> {
        let inner = &*self.inner;
        let key = inner.keys.of(token);
        let Some(cache) = &inner.fresh else {
            let result = self.fetch(&key, token).await;
            self.count(result.as_ref().err(), true);
            return result.map(|f| f.claims).map_err(|_| Unavailable);
        };
        if let Some(hit) = cache.get(&key).await {
            if self.servable(hit.fetched, hit.epoch, Duration::ZERO) {
                inner.metrics.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(hit.claims);
            }
            // Too old for the revocation stream's health, or fetched before a flush.
            cache.invalidate(&key).await;
        }
        let mut ran = false;
        let result = cache
            .entry(key)
            .or_try_insert_with(async {
                ran = true;
                self.fetch(&key, token).await
            })
            .await;
        self.count(result.as_ref().err().map(|e| &**e), ran);
        match result {
            Ok(entry) => Ok(entry.into_value().claims),
            Err(_) => self.stale_or_unavailable(&key, token).await,
        }
    }

    /// Counts a check that was not a cache hit: skipped, or else a miss when it ran the fetch
    /// and coalesced when it waited for another's.
    fn count(&self, miss: Option<&Miss>, ran: bool) {
        let m = &self.inner.metrics;
        let counter = match miss {
            Some(Miss::Skipped) => &m.skipped,
            _ if ran => &m.misses,
            _ => &m.coalesced,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// [`TokenChecker::check`] as a [`Credential`]: the claims, or unavailable (fail closed).
    pub async fn introspect_credential(&self, token: &str) -> Credential {
        match self.check(token).await {
            Ok(claims) => Credential::Checked(claims),
            Err(Unavailable) => Credential::Unavailable,
        }
    }

    /// Whether the checker is in an outage: a call could not reach the server (see
    /// [`IntrospectionError::is_outage`]) and none has since, so only one probe at a time goes
    /// to it.
    pub fn is_failing(&self) -> bool {
        self.inner.gate.is_failing()
    }

    /// The counters.
    pub fn metrics(&self) -> &CheckerMetrics {
        &self.inner.metrics
    }

    /// The cache settings in use.
    pub fn cache_settings(&self) -> &CacheSettings {
        &self.inner.settings
    }

    /// The clock leeway to decide with ([`crate::decide`]).
    pub fn leeway(&self) -> Duration {
        self.inner.policy.leeway
    }

    /// Approximate number of cached answers.
    pub fn entry_count(&self) -> u64 {
        self.inner.fresh.as_ref().map_or(0, Cache::entry_count)
    }

    /// Drops any cached answer for `token` (fresh and stale).
    pub async fn invalidate(&self, token: &str) {
        let key = self.inner.keys.of(token);
        if let Some(c) = &self.inner.fresh {
            c.invalidate(&key).await;
        }
        if let Some(c) = &self.inner.stale {
            c.invalidate(&key).await;
        }
    }

    /// Whether an answer fetched at `fetched`, in flush epoch `epoch`, may be served by the
    /// revocation stream's rules (always, without a stream), `grace` past its age limit.
    fn servable(&self, fetched: Instant, epoch: u64, grace: Duration) -> bool {
        let Some(r) = &self.inner.revoked else {
            return true;
        };
        epoch == r.epoch() && r.may_serve(fetched.elapsed().saturating_sub(grace))
    }

    /// The revocation stream's state this checker follows, if any.
    pub fn revoked(&self) -> Option<&Arc<Revoked>> {
        self.inner.revoked.as_ref()
    }

    /// Drops every cached answer (fresh and stale) of a token `subject` covers. moka drops them
    /// lazily, but none is returned once this is done.
    pub fn evict(&self, subject: &Subject) {
        let inner = &*self.inner;
        let s = subject.clone();
        if let Some(c) = &inner.fresh
            && c.invalidate_entries_if(move |_, v| s.covers(&v.claims))
                .is_ok()
            && let Some(r) = &inner.revoked
        {
            r.metrics.evictions.fetch_add(1, Ordering::Relaxed);
        }
        let s = subject.clone();
        if let Some(c) = &inner.stale {
            let _ = c.invalidate_entries_if(move |_, v| s.covers(&v.claims));
        }
    }

    /// Drops every cached answer, fresh and stale.
    pub fn flush(&self) {
        if let Some(c) = &self.inner.fresh {
            c.invalidate_all();
        }
        if let Some(c) = &self.inner.stale {
            c.invalidate_all();
        }
    }

    /// [`CheckerMetrics::collect`] plus a gauge of cached entries.
    pub fn collect(&self, s: &mut Scrape) -> std::fmt::Result {
        self.metrics().collect(s)?;
        s.gauge(
            "cache_entries",
            "Introspection answers in the cache (approximate)",
            self.entry_count(),
        )
    }

    /// One introspection call if the [`ProbeGate`] lets it through, with metrics, rate-limited
    /// failure logs, the policy applied (a refused answer is kept as inactive, for the negative
    /// TTL) and the stale copy kept up to date.
    async fn fetch(&self, key: &Key, token: &str) -> Result<Fresh, Miss> {
        let inner = &*self.inner;
        let started = Instant::now();
        let epoch = inner.revoked.as_ref().map_or(0, |r| r.epoch());
        let Some(permit) = inner.gate.admit(started) else {
            return Err(Miss::Skipped);
        };
        let result = inner.introspector.introspect(token).await;
        let finished = Instant::now();
        inner.metrics.latency.observe(finished - started);
        let reached = result.as_ref().map_or_else(|e| !e.is_outage(), |_| true);
        let outage = permit.finish(reached, finished);
        let claims = match result {
            Ok(c) => match inner.policy.refusal(&c) {
                None => Arc::new(c),
                Some(why) => {
                    inner.metrics.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(token = %token_log_id(token), reason = why.as_str(), "active introspection answer refused");
                    Arc::new(Claims::inactive())
                }
            },
            Err(error) => {
                inner.metrics.errors.fetch_add(1, Ordering::Relaxed);
                inner.metrics.last_call_ok.store(false, Ordering::Relaxed);
                inner
                    .metrics
                    .last_call_refused
                    .store(error.credentials_refused(), Ordering::Relaxed);
                if let IntrospectionError::Malformed(_) = error {
                    inner.metrics.malformed.fetch_add(1, Ordering::Relaxed);
                    // The server said something about this token that cannot be read as active:
                    // an older active answer must not be served for it.
                    if let Some(stale) = &inner.stale {
                        stale.invalidate(key).await;
                    }
                }
                if let Some(summary) = inner.failure_log.failure(finished) {
                    tracing::warn!(
                        token = %token_log_id(token),
                        failures = summary.failures,
                        "{}",
                        failure_line(&summary, &error)
                    );
                }
                return Err(Miss::Failed);
            }
        };
        if let Some(unreported) = inner.failure_log.success() {
            let lasted = outage.map_or_else(String::new, |d| {
                format!(" after an outage of {:.1} s", d.as_secs_f64())
            });
            tracing::info!(
                unreported,
                "token introspection answering again{lasted} ({unreported} failures since the last warning)"
            );
        }
        let now_ms = unix_millis();
        inner
            .metrics
            .last_success
            .store(now_ms / 1000, Ordering::Relaxed);
        inner.metrics.last_call_ok.store(true, Ordering::Relaxed);
        inner
            .metrics
            .last_call_refused
            .store(false, Ordering::Relaxed);
        let ttl = self.ttl_for(&claims, now_ms);
        tracing::debug!(
            token = %token_log_id(token),
            active = claims.active,
            ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            "token introspected"
        );
        if let Some(stale) = &inner.stale {
            if claims.active && !claims.is_expired_at(now_ms / 1000) {
                let serve_until = finished + ttl + inner.settings.stale_grace;
                stale
                    .insert(
                        *key,
                        Stale {
                            claims: claims.clone(),
                            serve_until,
                            fetched: finished,
                            epoch,
                        },
                    )
                    .await;
            } else {
                // Revoked or expired: never serve an older active answer for it.
                stale.invalidate(key).await;
            }
        }
        Ok(Fresh {
            claims,
            ttl,
            fetched: finished,
            epoch,
        })
    }

    /// Active: `min(max_ttl, exp - now)` (zero once `exp` has passed), `max_ttl` being the
    /// revocation stream's `healthy_max_ttl` when there is one; inactive (including refused):
    /// `negative_ttl`.
    fn ttl_for(&self, c: &Claims, now_ms: i64) -> Duration {
        let s = &self.inner.settings;
        if !c.active {
            return s.negative_ttl;
        }
        let max_ttl = self
            .inner
            .revoked
            .as_ref()
            .map_or(s.max_ttl, |r| r.lifetimes.healthy_max_ttl);
        match c.exp {
            None => max_ttl,
            Some(exp) => {
                let left_ms = exp.saturating_mul(1000).saturating_sub(now_ms);
                let left = Duration::from_millis(u64::try_from(left_ms).unwrap_or(0));
                left.min(max_ttl)
            }
        }
    }

    async fn stale_or_unavailable(
        &self,
        key: &Key,
        token: &str,
    ) -> Result<Arc<Claims>, Unavailable> {
        let inner = &*self.inner;
        if let Some(stale) = &inner.stale
            && let Some(entry) = stale.get(key).await
            && Instant::now() < entry.serve_until
            && self.servable(entry.fetched, entry.epoch, inner.settings.stale_grace)
            && !entry.claims.is_expired_at(unix_millis() / 1000)
        {
            inner.metrics.stale_served.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(token = %token_log_id(token), "authorization server unavailable; serving a stale answer");
            return Ok(entry.claims);
        }
        Err(Unavailable)
    }
}

/// The text of a rate-limited failure line. Never holds a token: `error` names none.
fn failure_line(summary: &Summary, error: &IntrospectionError) -> String {
    match summary.since_last_line {
        Some(d) if summary.failures > 1 => format!(
            "{} introspection failures in the last {} s (last error: {error})",
            summary.failures,
            d.as_secs_f64().round()
        ),
        _ => format!(
            "token introspection failed (last error: {error}); further failures are counted and \
             logged at most every {} s",
            FAILURE_LOG_INTERVAL.as_secs()
        ),
    }
}

fn unix_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::introspection::ClientAuth;

    fn checker(c: CacheSettings) -> TokenChecker {
        TokenChecker::new(
            IntrospectionSettings::new("http://127.0.0.1:9/", ClientAuth::Bearer("t".into())),
            c,
        )
        .unwrap()
    }

    #[test]
    fn ttl_rules() {
        let c = checker(CacheSettings {
            max_ttl: Duration::from_secs(60),
            negative_ttl: Duration::from_secs(5),
            ..CacheSettings::default()
        });
        let now_ms = 1_700_000_000_000;
        let active = |exp| Claims {
            active: true,
            exp,
            ..Claims::default()
        };
        assert_eq!(c.ttl_for(&active(None), now_ms), Duration::from_secs(60));
        assert_eq!(
            c.ttl_for(&active(Some(1_700_000_010)), now_ms),
            Duration::from_secs(10)
        );
        assert_eq!(
            c.ttl_for(&active(Some(1_700_000_100)), now_ms),
            Duration::from_secs(60)
        );
        assert_eq!(
            c.ttl_for(&active(Some(1_700_000_000)), now_ms),
            Duration::ZERO
        );
        assert_eq!(c.ttl_for(&active(Some(i64::MIN)), now_ms), Duration::ZERO);
        assert_eq!(
            c.ttl_for(&active(Some(i64::MAX)), now_ms),
            Duration::from_secs(60)
        );
        assert_eq!(
            c.ttl_for(&Claims::inactive(), now_ms),
            Duration::from_secs(5)
        );
    }

    #[test]
    fn zero_capacity_is_refused_when_caching() {
        let s = IntrospectionSettings::new("http://127.0.0.1:9/", ClientAuth::Bearer("t".into()));
        let c = CacheSettings {
            capacity: 0,
            ..CacheSettings::default()
        };
        assert!(matches!(
            TokenChecker::new(s.clone(), c),
            Err(CheckerError::Settings(_))
        ));
        let c = CacheSettings {
            capacity: 0,
            max_ttl: Duration::ZERO,
            ..CacheSettings::default()
        };
        assert!(TokenChecker::new(s, c).is_ok());
    }

    #[test]
    fn the_policy_is_checked_and_its_leeway_exposed() {
        let mut s =
            IntrospectionSettings::new("http://127.0.0.1:9/", ClientAuth::Bearer("t".into()));
        let c = TokenChecker::new(s.clone(), CacheSettings::default()).unwrap();
        assert_eq!(c.leeway(), AnswerPolicy::DEFAULT_LEEWAY);
        s.policy.leeway = Duration::from_secs(3600);
        let e = TokenChecker::new(s.clone(), CacheSettings::default()).unwrap_err();
        assert_eq!(e.to_string(), "introspection leeway: at most 300s");
        s.policy.leeway = Duration::ZERO;
        s.policy.issuer = Some(String::new());
        assert!(matches!(
            TokenChecker::new(s, CacheSettings::default()),
            Err(CheckerError::Settings(_))
        ));
    }

    #[test]
    fn check_future_is_send() {
        fn assert_send<T: Send>(_: T) {}
        let c = checker(CacheSettings::default());
        assert_send(c.check("x"));
    }

    #[test]
    fn failure_lines_count_and_name_no_token() {
        let first = Summary {
            failures: 1,
            since_last_line: None,
        };
        assert_eq!(
            failure_line(&first, &IntrospectionError::Status(503)),
            "token introspection failed (last error: answered HTTP 503); further failures are \
             counted and logged at most every 10 s"
        );
        let later = Summary {
            failures: 120_000,
            since_last_line: Some(Duration::from_millis(10_004)),
        };
        assert_eq!(
            failure_line(&later, &IntrospectionError::Timeout),
            "120000 introspection failures in the last 10 s (last error: timed out)"
        );
        // One failure after a quiet spell reads as a first failure.
        let quiet = Summary {
            failures: 1,
            since_last_line: Some(Duration::from_secs(3600)),
        };
        assert!(
            failure_line(&quiet, &IntrospectionError::Timeout)
                .starts_with("token introspection failed")
        );
    }

    #[test]
    fn prometheus_text() {
        let m = Arc::new(CheckerMetrics::default());
        m.hits.fetch_add(3, Ordering::Relaxed);
        m.skipped.fetch_add(7, Ordering::Relaxed);
        m.stale_served.fetch_add(2, Ordering::Relaxed);
        m.latency.observe(Duration::from_millis(3));
        m.latency.observe(Duration::from_secs(60));
        let render = |prefix: &str| {
            let m = m.clone();
            crate::metrics::text(prefix, move |s| m.collect(s))
        };
        let text = render("tokengate");
        let h = "tokengate_introspection_duration_seconds";
        for line in [
            "# TYPE tokengate_cache_hits counter\ntokengate_cache_hits_total 3\n".to_owned(),
            "# TYPE tokengate_introspection_skipped counter\ntokengate_introspection_skipped_total 7\n".to_owned(),
            "# TYPE tokengate_stale_served counter\ntokengate_stale_served_total 2\n".to_owned(),
            format!("{h}_bucket{{le=\"0.0025\"}} 0\n"),
            format!("{h}_bucket{{le=\"0.005\"}} 1\n"),
            format!("{h}_bucket{{le=\"5.0\"}} 1\n"),
            format!("{h}_bucket{{le=\"+Inf\"}} 2\n"),
            format!("{h}_count 2\n"),
            "tokengate_introspection_last_success_timestamp_seconds 0\n".to_owned(),
        ] {
            assert!(text.contains(&line), "{line} in {text}");
        }
        assert!(render("").starts_with("# HELP cache_hits "));
        assert!(render("x_").contains("\nx_cache_hits_total 3\n"));
    }
}

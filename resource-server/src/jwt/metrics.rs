//! Counters of a [`super::JwtValidator`]: validations by outcome, JWKS fetches and failures, and
//! the number of keys known; written by [`JwtMetrics::collect`] at each scrape.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::metrics::Scrape;

/// How one validation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validation {
    /// Signature and claims verified.
    Verified,
    /// Answered from the cache of verified tokens.
    Cached,
    /// Not a JWS this validator reads, or an algorithm or `typ` not accepted.
    Malformed,
    /// No known key for its `kid` and algorithm (after at most one refetch per interval).
    UnknownKey,
    /// The signature does not verify.
    BadSignature,
    /// Claims missing, mistyped, or not for this issuer/audience.
    BadClaims,
    /// `exp` passed, `nbf` or `iat` in the future.
    Expired,
    /// No key known at all (the JWKS could not be fetched): 503.
    Unavailable,
}

impl Validation {
    const ALL: [Validation; 8] = [
        Validation::Verified,
        Validation::Cached,
        Validation::Malformed,
        Validation::UnknownKey,
        Validation::BadSignature,
        Validation::BadClaims,
        Validation::Expired,
        Validation::Unavailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Validation::Verified => "verified",
            Validation::Cached => "cached",
            Validation::Malformed => "malformed",
            Validation::UnknownKey => "unknown_key",
            Validation::BadSignature => "bad_signature",
            Validation::BadClaims => "bad_claims",
            Validation::Expired => "expired",
            Validation::Unavailable => "unavailable",
        }
    }
}

/// The counters; public atomics, read by the methods.
#[derive(Debug, Default)]
pub struct JwtMetrics {
    validations: [AtomicU64; 8],
    /// JWKS fetches attempted (start, background refresh, unknown `kid`).
    pub jwks_fetches: AtomicU64,
    /// Fetches that failed (unreachable, non-2xx, not a JWKS).
    pub jwks_failures: AtomicU64,
    /// Fetches for an unknown `kid` that were not made because one was made within the interval.
    pub jwks_refetches_suppressed: AtomicU64,
    /// Usable keys in the current set.
    pub keys: AtomicU64,
}

impl JwtMetrics {
    pub fn record(&self, outcome: Validation) {
        self.validations[outcome as usize].fetch_add(1, Relaxed);
    }

    /// Validations that ended with `outcome`.
    pub fn validations(&self, outcome: Validation) -> u64 {
        self.validations[outcome as usize].load(Relaxed)
    }

    pub fn jwks_fetches(&self) -> u64 {
        self.jwks_fetches.load(Relaxed)
    }

    pub fn jwks_failures(&self) -> u64 {
        self.jwks_failures.load(Relaxed)
    }

    pub fn keys(&self) -> u64 {
        self.keys.load(Relaxed)
    }

    /// Writes the families, named `jwt_…` (the registry's prefix before them, e.g.
    /// `tokengate_proxy_jwt_validations_total`).
    pub fn collect(&self, s: &mut Scrape) -> std::fmt::Result {
        s.counters(
            "jwt_validations",
            "JWT validations by outcome",
            Validation::ALL.map(|v| ([("outcome", v.as_str())], self.validations(v))),
        )?;
        for (name, help, value) in [
            (
                "jwt_jwks_fetches",
                "JWKS fetches attempted (start, refresh, unknown kid)",
                self.jwks_fetches(),
            ),
            (
                "jwt_jwks_fetch_failures",
                "JWKS fetches that failed",
                self.jwks_failures(),
            ),
            (
                "jwt_jwks_refetches_suppressed",
                "Unknown-kid refetches not made because one was made within the interval",
                self.jwks_refetches_suppressed.load(Relaxed),
            ),
        ] {
            s.counter(name, help, value)?;
        }
        s.gauge("jwt_keys", "Verification keys known", self.keys())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text() {
        let m = std::sync::Arc::new(JwtMetrics::default());
        m.record(Validation::Verified);
        m.record(Validation::UnknownKey);
        m.record(Validation::UnknownKey);
        m.jwks_fetches.fetch_add(3, Relaxed);
        m.keys.store(2, Relaxed);
        let text = crate::metrics::text("tokengate_proxy", move |s| m.collect(s));
        for line in [
            "tokengate_proxy_jwt_validations_total{outcome=\"verified\"} 1\n",
            "tokengate_proxy_jwt_validations_total{outcome=\"unknown_key\"} 2\n",
            "tokengate_proxy_jwt_validations_total{outcome=\"cached\"} 0\n",
            "tokengate_proxy_jwt_jwks_fetches_total 3\n",
            "tokengate_proxy_jwt_jwks_fetch_failures_total 0\n",
            "# TYPE tokengate_proxy_jwt_keys gauge\ntokengate_proxy_jwt_keys 2\n",
            "# TYPE tokengate_proxy_jwt_validations counter\n",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
    }
}

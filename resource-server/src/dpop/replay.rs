//! The proofs already seen (RFC 9449 §11.1): a bounded in-memory cache of each accepted proof's
//! key and `jti`, kept for the `iat` window, so a proof is accepted once per process. Entries are
//! 16 bytes of SHA-256 (key thumbprint, `jti`): about 100 bytes each with moka's bookkeeping.

use moka::future::Cache;
use sha2::{Digest, Sha256};
use std::time::Duration;

/// Proof identifiers seen within the window.
#[derive(Clone)]
pub struct ReplayCache {
    seen: Cache<[u8; 16], ()>,
}

impl std::fmt::Debug for ReplayCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayCache")
            .field("entries", &self.seen.entry_count())
            .finish()
    }
}

impl ReplayCache {
    /// At most `capacity` proofs, each remembered `window` seconds (plus the clock leeway).
    /// Past the capacity the least recently seen are forgotten first (a replay of one of those
    /// would then pass); size it for the peak proof rate times
    /// the window.
    pub fn new(capacity: u64, window: i64) -> ReplayCache {
        let ttl = Duration::from_secs((window + super::CLOCK_LEEWAY).max(1) as u64);
        ReplayCache {
            seen: Cache::builder()
                .max_capacity(capacity)
                // Every new proof admitted, the least recently seen forgotten first (TinyLFU,
                // moka's default, could refuse to admit a new entry and let its replay pass).
                .eviction_policy(moka::policy::EvictionPolicy::lru())
                .time_to_live(ttl)
                .build(),
        }
    }

    /// True the first time the proof of this key (`jkt`) and `jti` is seen; false after.
    pub async fn first_use(&self, jkt: &str, jti: &str) -> bool {
        let mut hash = Sha256::new();
        hash.update(jkt.as_bytes());
        hash.update([0]);
        hash.update(jti.as_bytes());
        let digest = hash.finalize();
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        self.seen.entry(key).or_insert(()).await.is_fresh()
    }

    /// Proofs remembered now (approximate, as moka counts).
    pub fn len(&self) -> u64 {
        self.seen.entry_count()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

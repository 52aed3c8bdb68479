//! The proofs already seen (RFC 9449 §11.1), kept for the `iat` window so a proof is accepted
//! once per process. Each proof is 16 bytes of SHA-256 (key thumbprint, `jti`) in one of two
//! generations of hash sets, per shard: the current one, and the one before it. A generation
//! turns over when it is a window old (then everything in the older one is past its window) or
//! when the shard is full (then the oldest half of what it remembers is forgotten early, and a
//! replay of one of those would pass: size the capacity for the peak proof rate times the
//! window). About 40 bytes per proof remembered, against about 300 in a moka cache
//! (`bench/dpop_verify`).

use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Shards, so that concurrent requests rarely wait for one another's lock.
const SHARDS: usize = 16;

/// The keys are SHA-256 already: their first 8 bytes are the hash.
#[derive(Default)]
struct PrehashedKey(u64);

impl Hasher for PrehashedKey {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for (i, byte) in bytes.iter().take(8).enumerate() {
            self.0 |= u64::from(*byte) << (8 * i);
        }
    }
}

type Seen = HashSet<u128, BuildHasherDefault<PrehashedKey>>;

struct Shard {
    current: Seen,
    previous: Seen,
    /// When `current` began.
    started: Instant,
}

/// Proof identifiers seen within the window.
#[derive(Clone)]
pub struct ReplayCache {
    shards: Arc<[Mutex<Shard>]>,
    window: Duration,
    /// The most one generation of a shard holds.
    per_generation: usize,
}

impl std::fmt::Debug for ReplayCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayCache")
            .field("window", &self.window)
            .field("entries", &self.len())
            .finish()
    }
}

impl ReplayCache {
    /// At most about `capacity` proofs, each remembered at least `window` seconds (plus the
    /// clock leeway) unless the capacity is reached first.
    pub fn new(capacity: u64, window: i64) -> ReplayCache {
        let window = Duration::from_secs((window + super::CLOCK_LEEWAY).max(1) as u64);
        let per_generation = (capacity as usize / SHARDS / 2).max(1);
        let now = Instant::now();
        let shards: Vec<Mutex<Shard>> = (0..SHARDS)
            .map(|_| {
                Mutex::new(Shard {
                    current: Seen::default(),
                    previous: Seen::default(),
                    started: now,
                })
            })
            .collect();
        ReplayCache {
            shards: shards.into(),
            window,
            per_generation,
        }
    }

    /// True the first time the proof of this key (`jkt`) and `jti` is seen; false after.
    pub fn first_use(&self, jkt: &str, jti: &str) -> bool {
        let mut hash = Sha256::new();
        hash.update(jkt.as_bytes());
        hash.update([0]);
        hash.update(jti.as_bytes());
        let digest = hash.finalize();
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        let key = u128::from_le_bytes(key);
        let shard = &self.shards[(key >> 120) as usize % SHARDS];
        // A poisoned lock only means another request panicked while holding it: the sets are
        // still sets.
        let mut shard = shard
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if shard.started.elapsed() >= self.window || shard.current.len() >= self.per_generation {
            let full = std::mem::take(&mut shard.current);
            shard.previous = full;
            shard.started = Instant::now();
        }
        if shard.previous.contains(&key) {
            return false;
        }
        shard.current.insert(key)
    }

    /// Proofs remembered now (both generations).
    pub fn len(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                (s.current.len() + s.previous.len()) as u64
            })
            .sum()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

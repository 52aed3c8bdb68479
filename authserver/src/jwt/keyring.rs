//! Each replica's copy of the signing keys: read from the database at most every
//! [`KEY_CACHE_TTL`] (and again, at most once a second, when a token names a kid the copy
//! lacks), and the first key of each type created on first need.

use super::keys::{self, Alg, KeySet};
use crate::store::{Store, StoreError, StoreResult, now};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// How long a replica uses its copy of the keys without reading the database. A rotated key
/// is in every replica's JWKS within this time; `keys rotate` waits longer than this plus the
/// JWKS max-age before the new key signs.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(10);

/// A token naming an unknown kid reads the keys again at most this often (forged kids cost
/// nothing more).
const UNKNOWN_KID_RELOAD: Duration = Duration::from_secs(1);

struct Snapshot {
    keys: Arc<KeySet>,
    /// When the read that produced it began.
    read: Instant,
}

/// The cached keys of one replica.
pub struct KeyRing {
    /// How long a copy is used ([`KEY_CACHE_TTL`] but in tests).
    ttl: Duration,
    snapshot: RwLock<Option<Snapshot>>,
    /// One reader of the database at a time; the others wait and take its result.
    reading: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRing").finish_non_exhaustive()
    }
}

impl KeyRing {
    pub fn new() -> KeyRing {
        KeyRing::with_cache_ttl(KEY_CACHE_TTL)
    }

    /// A ring that reads the database again after `ttl` (tests of rotation use a short one).
    pub fn with_cache_ttl(ttl: Duration) -> KeyRing {
        KeyRing {
            ttl,
            snapshot: RwLock::new(None),
            reading: tokio::sync::Mutex::new(()),
        }
    }

    /// The keys, read again when the copy is older than the cache TTL.
    pub async fn keys(&self, store: &Store) -> StoreResult<Arc<KeySet>> {
        self.fresher_than(store, self.ttl).await
    }

    /// The keys as read after `asked`, for a token whose kid the copy lacks (a key created
    /// since, perhaps by another replica): waits until the copy is a second old, then reads
    /// again, so that forged kids cause at most one read a second, shared by every waiter.
    pub async fn keys_read_after(&self, store: &Store, asked: Instant) -> StoreResult<Arc<KeySet>> {
        let last_read = {
            let snapshot = self.snapshot.read().unwrap_or_else(|e| e.into_inner());
            snapshot.as_ref().map(|s| (s.read, s.keys.clone()))
        };
        if let Some((read, keys)) = last_read {
            if read >= asked {
                return Ok(keys);
            }
            let next = read + UNKNOWN_KID_RELOAD.min(self.ttl);
            tokio::time::sleep_until(next.into()).await;
        }
        self.read_after(store, asked).await
    }

    /// The keys, with one of `alg` that signs now: when there is no key of that type at all,
    /// the first is created (replicas racing to do so agree on the one that won; a race with
    /// the first key of the other type is tried again with the next generation).
    pub async fn keys_with_signer(&self, store: &Store, alg: Alg) -> StoreResult<Arc<KeySet>> {
        let mut keys = self.keys(store).await?;
        for _ in 0..3 {
            if keys.signer(alg, now()).is_some() {
                return Ok(keys);
            }
            if keys.has(alg) {
                // Keys exist, none signs yet (only pending ones): an operator's doing, not
                // fixed by reading the database again on every request.
                break;
            }
            let at = now();
            let first = keys::generate_for(alg, keys.next_generation(), at, at)?;
            if store.add_signing_key(&first).await? {
                tracing::info!(kid = %first.kid, alg = alg.as_str(), "created the first signing key of its type");
            }
            keys = self.read_after(store, Instant::now()).await?;
        }
        if keys.signer(alg, now()).is_some() {
            return Ok(keys);
        }
        Err(anyhow::anyhow!(
            "no {} signing key signs yet (only pending keys)",
            alg.as_str()
        )
        .into())
    }

    /// The keys read from the database now (after a change this process made: a registration
    /// that added the first key of a type publishes it at once).
    pub async fn reload(&self, store: &Store) -> StoreResult<Arc<KeySet>> {
        self.read_after(store, Instant::now()).await
    }

    fn copy_fresher_than(&self, age: Duration) -> Option<Arc<KeySet>> {
        let snapshot = self.snapshot.read().unwrap_or_else(|e| e.into_inner());
        snapshot
            .as_ref()
            .filter(|s| s.read.elapsed() < age)
            .map(|s| s.keys.clone())
    }

    async fn fresher_than(&self, store: &Store, age: Duration) -> StoreResult<Arc<KeySet>> {
        match self.copy_fresher_than(age) {
            Some(keys) => Ok(keys),
            None => self.read_after(store, Instant::now()).await,
        }
    }

    /// Keys read from the database after `asked`: by this call, or by another one that began
    /// reading after `asked` while this one waited for its turn.
    async fn read_after(&self, store: &Store, asked: Instant) -> StoreResult<Arc<KeySet>> {
        let _reading = self.reading.lock().await;
        {
            let snapshot = self.snapshot.read().unwrap_or_else(|e| e.into_inner());
            if let Some(s) = snapshot.as_ref().filter(|s| s.read >= asked) {
                return Ok(s.keys.clone());
            }
        }
        let read = Instant::now();
        let stored = store.signing_keys().await?;
        let keys = Arc::new(KeySet::from_stored(&stored).map_err(StoreError::Other)?);
        *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = Some(Snapshot {
            keys: keys.clone(),
            read,
        });
        Ok(keys)
    }
}

impl Default for KeyRing {
    fn default() -> Self {
        KeyRing::new()
    }
}

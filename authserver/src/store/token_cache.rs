//! The bounded cache of introspection lookups (issue 25), keyed by the token's digest: the token
//! record with its user and application as they were read, and the user's group names when the
//! token carries the `groups` scope. Expiry is checked when answering, never cached.
//!
//! Kept exact by evicting what every change concerns, on every replica: each change that alters
//! an answer is a [`super::bus::Change`], delivered in process after its commit and, on
//! PostgreSQL, to every other process's listener ([`super::bus`]); the highest revocation event
//! id heard is the listener's resumption position. A lookup that read the database before an
//! eviction never keeps what it read (the generation check of [`keep`]).
//!
//! A process has one cache per database, shared by every store it opens on it (the bus's).
//!
//! While the listener is not listening (not yet, or its connection lost) the cache is empty and
//! unused; it is used again once the listener listens and has read the log from its position.
//! On SQLite a change made by another process (the command line) is not heard but seen: a
//! commit by any other connection empties the cache for every lookup that starts
//! [`super::FOREIGN_COMMIT_BOUND`] after it ([`super::sqlite_changes`]). An entry lives at most
//! [`TTL`] in any case: the bound for a connection that died without either side noticing.
//!
//! [`keep`]: TokenCache::keep

use super::{Revocation, Store, StoreResult, TokenRecord};
use crate::domain::GROUPS_SCOPE;
use crate::secrets;
use bytes::Bytes;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// The default capacity in entries (about 1.5 KiB each, 75 MiB in all: docs/scaling.md).
pub const DEFAULT_TOKEN_CACHE_CAPACITY: u64 = 50_000;
/// The longest an entry lives.
const TTL: Duration = Duration::from_secs(30);

/// What introspection answers from: the token as stored, joined.
#[derive(Debug)]
pub struct Introspected {
    pub record: TokenRecord,
    /// [`TokenRecord::current_scope`] of the record (what the answer's `scope` is), made once.
    pub current_scope: String,
    /// The `jti` of the token's family ([`super::family_jti`]), which its events name.
    pub jti: String,
    /// The names of the user's groups when the token's scope has `groups`.
    pub groups: Option<Vec<String>>,
    /// When and how a user's token's user signed in, when remembered for its family (never
    /// changes: first write wins).
    pub signed_in: Option<super::FamilySignIn>,
    /// The introspection endpoint's answer while the token is active, as it wrote it the first
    /// time: made from the fields above, which an entry never changes.
    pub active_answer: OnceLock<Bytes>,
}

/// The entries a change concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Eviction {
    /// The tokens of one family, by its `jti`.
    Family(String),
    /// The tokens of one family, by its stored value (a refresh token spent).
    StoredFamily(String),
    /// The tokens of one user.
    User(i64),
    /// The tokens of one application.
    Client(String),
    /// One user's tokens of one application.
    Consent(i64, String),
    /// Everything (an application or a group changed).
    All,
    /// Nothing (a signing key's withdrawal: a JWT is verified before its lookup).
    Nothing,
}

impl Eviction {
    /// What a logged revocation evicts.
    pub(super) fn of(event: &Revocation) -> Eviction {
        let user = |sub: &str| sub.parse().map_or(Eviction::All, Eviction::User);
        match event {
            Revocation::Family { jti } => Eviction::Family(jti.clone()),
            Revocation::User { sub } | Revocation::Password { sub } => user(sub),
            Revocation::Client { client_id } => Eviction::Client(client_id.clone()),
            Revocation::Consent { sub, client_id } => match sub.parse() {
                Ok(id) => Eviction::Consent(id, client_id.clone()),
                Err(_) => Eviction::All,
            },
            Revocation::SigningKey { .. } | Revocation::Verification { .. } => Eviction::Nothing,
        }
    }

    fn concerns(&self, entry: &Introspected) -> bool {
        let record = &entry.record;
        match self {
            Eviction::Family(jti) => entry.jti == *jti,
            Eviction::StoredFamily(family) => record.family == *family,
            Eviction::User(id) => record.user_id == Some(*id),
            Eviction::Client(client_id) => record.client_id == *client_id,
            Eviction::Consent(id, client_id) => {
                record.user_id == Some(*id) && record.client_id == *client_id
            }
            Eviction::All => true,
            Eviction::Nothing => false,
        }
    }
}

/// An entry's key: the SHA-256 of the token ([`secrets::digest_bytes`]; storage keeps the token
/// under [`secrets::token_key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TokenKey(pub(super) [u8; 32]);

impl TokenKey {
    pub(super) fn of(token: &str) -> TokenKey {
        TokenKey(secrets::digest_bytes(token))
    }
}

impl Hash for TokenKey {
    /// A SHA-256 is as good a hash as any: its first 8 bytes, hashed no further. (Entries are
    /// only made for tokens the server drew at random, so nobody can crowd the table's slots.)
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut first = [0u8; 8];
        first.copy_from_slice(&self.0[..8]);
        state.write_u64(u64::from_ne_bytes(first));
    }
}

/// The hasher of [`TokenKey`]s: the `u64` they write.
#[derive(Default)]
pub(super) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    /// Not used by [`TokenKey`]; any other bytes are folded in all the same.
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }
}

/// This process's cache of introspection lookups.
pub(super) struct TokenCache {
    entries: moka::future::Cache<TokenKey, Arc<Introspected>, BuildHasherDefault<KeyHasher>>,
    /// Bumped by every eviction, so that a lookup that read the database before it does not
    /// keep what it read.
    generation: AtomicU64,
    /// Whether lookups may use the cache: on SQLite always (capacity permitting), on
    /// PostgreSQL while the listener listens and has caught up.
    usable: AtomicBool,
    /// The id of the newest revocation event heard (PostgreSQL).
    position: AtomicI64,
    /// The most entries it holds.
    capacity: u64,
}

impl TokenCache {
    /// A cache of at most `capacity` entries (0: none), used at once when `in_process` (SQLite:
    /// every change is made here or seen by the store's probe) and otherwise once the bus's
    /// listener listens ([`TokenCache::set_usable`]).
    pub(super) fn new(capacity: u64, in_process: bool) -> TokenCache {
        TokenCache::with_ttl(capacity, in_process, TTL)
    }

    /// [`TokenCache::new`] with entries living at most `ttl`.
    fn with_ttl(capacity: u64, in_process: bool, ttl: Duration) -> TokenCache {
        TokenCache {
            entries: moka::future::Cache::builder()
                .max_capacity(capacity)
                .time_to_live(ttl)
                .support_invalidation_closures()
                .build_with_hasher(BuildHasherDefault::default()),
            generation: AtomicU64::new(0),
            usable: AtomicBool::new(in_process && capacity > 0),
            position: AtomicI64::new(0),
            capacity,
        }
    }

    /// Whether lookups may be answered from the cache now.
    pub(super) fn usable(&self) -> bool {
        self.usable.load(Ordering::Acquire)
    }

    /// The cached lookup of `key`, when the cache is usable and holds it.
    pub(super) async fn get(&self, key: &TokenKey) -> Option<Arc<Introspected>> {
        if !self.usable() {
            return None;
        }
        self.entries.get(key).await
    }

    /// Where the cache stands before a lookup reads the database (for [`Self::keep`]).
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Keeps what a lookup read, unless anything was evicted since `generation` (the read may
    /// predate the change).
    pub(super) async fn keep(&self, generation: u64, key: TokenKey, entry: Arc<Introspected>) {
        if !self.usable() || self.generation() != generation {
            return;
        }
        self.entries.insert(key, entry).await;
        // An eviction that raced the insert (its predicate may have been set before the insert):
        // drop the entry ourselves.
        if self.generation() != generation || !self.usable() {
            self.entries.invalidate(&key).await;
        }
    }

    /// Evicts the entries `eviction` concerns (applied to every entry kept before this call).
    pub(super) fn evict(&self, eviction: &Eviction) {
        if *eviction == Eviction::Nothing {
            return;
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        if *eviction == Eviction::All {
            self.entries.invalidate_all();
            return;
        }
        let eviction = eviction.clone();
        if self
            .entries
            .invalidate_entries_if(move |_, entry| eviction.concerns(entry))
            .is_err()
        {
            self.entries.invalidate_all();
        }
    }

    /// Empties the cache, and uses it from now on when `usable` (the listener listens and has
    /// caught up) or not (it does not listen).
    pub(super) fn set_usable(&self, usable: bool) {
        self.evict(&Eviction::All);
        self.usable
            .store(usable && self.capacity > 0, Ordering::Release);
    }

    /// The id of the newest revocation event heard (0: none yet).
    pub(super) fn position(&self) -> i64 {
        self.position.load(Ordering::Acquire)
    }

    /// The revocation event `id` was heard (or read while catching up).
    pub(super) fn heard_event(&self, id: i64) {
        self.position.fetch_max(id, Ordering::AcqRel);
    }

    /// The number of entries, once pending maintenance has run.
    #[cfg(test)]
    async fn entry_count(&self) -> u64 {
        self.entries.run_pending_tasks().await;
        self.entries.entry_count()
    }
}

impl Store {
    /// The token with this plaintext value joined with what introspection answers from: from
    /// this process's token cache when it holds it (exact, see the module), else read and kept.
    /// Whether the cache answered comes with it.
    pub async fn introspect_token(
        &self,
        token: &str,
    ) -> StoreResult<(Option<Arc<Introspected>>, bool)> {
        let key = TokenKey::of(token);
        let cacheable = self.caches_current();
        if cacheable && let Some(hit) = self.token_cache.get(&key).await {
            return Ok((Some(hit), true));
        }
        let generation = self.token_cache.generation();
        let stored_under = secrets::token_key_of(token, &key.0);
        let Some(record) = self.find_token_by_key(&stored_under).await? else {
            return Ok((None, false));
        };
        let groups = match record.user_id {
            Some(id) if record.scope.split_whitespace().any(|s| s == GROUPS_SCOPE) => Some(
                self.user_groups(id)
                    .await?
                    .into_iter()
                    .map(|g| g.name)
                    .collect(),
            ),
            _ => None,
        };
        let signed_in = match record.user_id {
            Some(_) => self.sign_in_of(&record.family).await?,
            None => None,
        };
        let entry = Arc::new(Introspected {
            signed_in,
            jti: super::family_jti(&record.family),
            current_scope: record.current_scope(),
            record,
            groups,
            active_answer: OnceLock::new(),
        });
        if cacheable {
            self.token_cache.keep(generation, key, entry.clone()).await;
        }
        Ok((Some(entry), false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TokenKind;

    fn entry(n: u64) -> Arc<Introspected> {
        Arc::new(Introspected {
            signed_in: None,
            record: TokenRecord {
                id: n as i64,
                kind: TokenKind::Access,
                application_id: 1,
                client_id: "cJ3f0s8Qm2Zp9Wv4Lx7Rk1Tn6Yb5Hd0A".into(),
                user_id: Some((n % 1000) as i64),
                username: Some(format!("user{}", n % 1000)),
                user_active: true,
                scope: "read write groups".into(),
                family: format!("{n:043}"),
                access_token_id: None,
                issued_at: 1,
                expires_at: i64::MAX,
                revoked: false,
                application_scopes: vec!["read".into(), "write".into(), "groups".into()],
                application_permissions: Default::default(),
                cnf_x5t_s256: None,
                cnf_jkt: None,
                audience: None,
            },
            jti: format!("{n:032}"),
            current_scope: "read write groups".into(),
            groups: Some(vec!["staff".into()]),
            // As introspected once: an answer of the bench's size.
            active_answer: OnceLock::from(Bytes::copy_from_slice(&[b'x'; 223])),
        })
    }

    fn digest(n: u64) -> TokenKey {
        TokenKey::of(&n.to_string())
    }

    #[tokio::test]
    async fn evictions_remove_what_they_concern_and_keep_the_rest() {
        let cache = TokenCache::new(100, true);
        for n in 0..3 {
            cache.keep(cache.generation(), digest(n), entry(n)).await;
        }
        cache.evict(&Eviction::User(1));
        assert!(cache.get(&digest(1)).await.is_none());
        assert!(cache.get(&digest(0)).await.is_some());
        cache.evict(&Eviction::Family(format!("{:032}", 2)));
        assert!(cache.get(&digest(2)).await.is_none());
        cache.evict(&Eviction::StoredFamily(format!("{:043}", 0)));
        assert!(cache.get(&digest(0)).await.is_none());
    }

    #[tokio::test]
    async fn a_lookup_read_before_an_eviction_is_not_kept() {
        let cache = TokenCache::new(100, true);
        let before = cache.generation();
        cache.evict(&Eviction::User(12345));
        cache.keep(before, digest(7), entry(7)).await;
        assert!(cache.get(&digest(7)).await.is_none());
    }

    #[tokio::test]
    async fn an_unusable_cache_keeps_and_answers_nothing() {
        let cache = TokenCache::new(100, false);
        cache.keep(cache.generation(), digest(1), entry(1)).await;
        assert!(cache.get(&digest(1)).await.is_none());
        assert_eq!(cache.entry_count().await, 0);
    }

    /// The bound holds with 1M distinct tokens, and the memory an entry takes (printed; run
    /// with `--ignored --nocapture`, docs/scaling.md has the figures).
    #[tokio::test]
    #[ignore = "a measurement: 1M insertions take a while in a debug build"]
    async fn a_million_distinct_tokens_stay_within_the_bound() {
        const CAPACITY: u64 = 100_000;
        let rss = || {
            let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
            let pages: u64 = statm
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            pages * 4096
        };
        // Entries that outlive the run: the bound alone limits them.
        let cache = TokenCache::with_ttl(CAPACITY, true, Duration::from_secs(3600));
        let start = rss();
        for n in 0..CAPACITY {
            cache.keep(cache.generation(), digest(n), entry(n)).await;
        }
        let full = rss();
        println!(
            "{} entries: {} bytes each",
            cache.entry_count().await,
            (full - start) / CAPACITY
        );
        for n in CAPACITY..1_000_000 {
            cache.keep(cache.generation(), digest(n), entry(n)).await;
        }
        let count = cache.entry_count().await;
        let after = rss();
        println!(
            "after 1M distinct tokens: {count} entries, {} MiB above the start",
            (after - start) >> 20
        );
        assert!(
            count <= CAPACITY,
            "{count} entries for a bound of {CAPACITY}"
        );
        assert!(
            after - start < 2 * (full - start) + (16 << 20),
            "memory grew past the bound: {} then {}",
            full - start,
            after - start
        );
    }
}

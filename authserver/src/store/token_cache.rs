//! The bounded cache of introspection lookups (issue 25), keyed by the token's digest: the token
//! record with its user and application as they were read, and the user's group names when the
//! token carries the `groups` scope. Expiry is checked when answering, never cached.
//!
//! Kept exact by evicting what every change concerns, on every replica: the store evicts in
//! process after each commit that changes an answer, and on PostgreSQL every such commit also
//! notifies one of three channels, which a listener of this process (connection named
//! [`APPLICATION_NAME`]) reads in commit order: the revocation log's own channel (the event, with
//! its id, in the payload; the highest id heard is the resumption position), the applications'
//! channel (any change to an application empties the cache), and [`super::channels::TOKENS`] for the changes
//! that are no revocation (a user's row or groups, a refresh token spent). A lookup that read the
//! database before an eviction never keeps what it read (the generation check of [`keep`]).
//!
//! A process has one cache per database, shared by every store it opens on it ([`of_database`]).
//!
//! While the listener is not listening (not yet, or its connection lost) the cache is empty and
//! unused; it is used again once the listener listens and has read the log from its position.
//! On SQLite a change made by another process (the command line) is not heard but seen: a
//! commit by any other connection empties the cache for every lookup that starts
//! [`super::FOREIGN_COMMIT_BOUND`] after it ([`super::sqlite_changes`]). An entry lives at most
//! [`TTL`] in any case: the bound for a connection that died without either side noticing.
//!
//! [`keep`]: TokenCache::keep

use super::hot::Hot;
use super::{Backend, Revocation, Store, StoreResult, TokenRecord};
use crate::domain::GROUPS_SCOPE;
use crate::secrets;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, Weak};
use std::time::Duration;

/// The `application_name` of the listening connection (operators can find it in
/// `pg_stat_activity`).
pub const APPLICATION_NAME: &str = "tokengate-token-cache";
/// The default capacity in entries (about 1.5 KiB each, 75 MiB in all: docs/scaling.md).
pub const DEFAULT_TOKEN_CACHE_CAPACITY: u64 = 50_000;
/// The longest an entry lives.
const TTL: Duration = Duration::from_secs(30);
/// How long the listener waits before listening again after a failure.
const RETRY: Duration = Duration::from_millis(200);

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

    /// The payload announcing it on [`super::channels::TOKENS`].
    pub(super) fn payload(&self) -> String {
        match self {
            Eviction::User(id) => format!("user {id}"),
            Eviction::StoredFamily(family) => format!("family {family}"),
            _ => "all".to_owned(),
        }
    }

    /// A [`super::channels::TOKENS`] payload read back; anything unknown empties the cache.
    fn parse(payload: &str) -> Eviction {
        match payload.split_once(' ') {
            Some(("user", id)) => id.parse().map_or(Eviction::All, Eviction::User),
            Some(("family", family)) => Eviction::StoredFamily(family.to_owned()),
            _ => Eviction::All,
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
}

impl TokenCache {
    /// A cache of at most `capacity` entries (0: none), used at once when `in_process` (SQLite:
    /// every change is made here or seen by the store's probe) and otherwise once [`listen`]
    /// listens.
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

    fn set_usable(&self, usable: bool) {
        self.evict(&Eviction::All);
        self.usable.store(usable, Ordering::Release);
    }

    /// The number of entries, once pending maintenance has run.
    #[cfg(test)]
    async fn entry_count(&self) -> u64 {
        self.entries.run_pending_tasks().await;
        self.entries.entry_count()
    }
}

/// This process's token cache of one database, shared by every store opened on it (so that a
/// change made through any of them evicts at once for all), with its listener (PostgreSQL).
pub(super) struct SharedCache {
    cache: Arc<TokenCache>,
    listener: Option<tokio::task::JoinHandle<()>>,
}

impl std::ops::Deref for SharedCache {
    type Target = TokenCache;

    fn deref(&self) -> &TokenCache {
        &self.cache
    }
}

impl Drop for SharedCache {
    fn drop(&mut self) {
        if let Some(listener) = &self.listener {
            listener.abort();
        }
    }
}

/// This process's cache of the database at `url`: the one a store opened on it already uses,
/// else a new one of `capacity` entries (listening, on PostgreSQL, through `hot`'s pool for its
/// catch-up reads).
pub(super) fn of_database(url: &str, hot: &Hot, capacity: u64) -> Arc<SharedCache> {
    static CACHES: Mutex<BTreeMap<String, Weak<SharedCache>>> = Mutex::new(BTreeMap::new());
    let mut caches = CACHES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    caches.retain(|_, cache| cache.strong_count() > 0);
    if let Some(shared) = caches.get(url).and_then(Weak::upgrade) {
        return shared;
    }
    let cache = Arc::new(TokenCache::new(capacity, matches!(hot, Hot::Sqlite(_))));
    let listener = match hot {
        Hot::Postgres(pool) if capacity > 0 => Some(listen(
            url.to_owned(),
            pool.pool.clone(),
            cache.clone(),
            capacity,
        )),
        _ => None,
    };
    let shared = Arc::new(SharedCache { cache, listener });
    caches.insert(url.to_owned(), Arc::downgrade(&shared));
    shared
}

/// Listens on the three channels on a connection of its own and evicts what each notification
/// concerns; keeps the cache unused while it is not listening. Ends when the task is aborted.
fn listen(
    url: String,
    pool: sqlx::PgPool,
    cache: Arc<TokenCache>,
    capacity: u64,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let _off = Off(cache.clone());
        let mut listener: Option<(sqlx::postgres::PgListener, Channels)> = None;
        loop {
            let Some((active, channels)) = listener.as_mut() else {
                match connect(&url, &pool, &cache).await {
                    Ok(connected) => {
                        listener = Some(connected);
                        cache.usable.store(capacity > 0, Ordering::Release);
                    }
                    Err(error) => {
                        tracing::warn!(%error, "cannot listen for token changes; introspection reads the database until it can");
                        tokio::time::sleep(RETRY).await;
                    }
                }
                continue;
            };
            match active.try_recv().await {
                Ok(Some(notification)) => heard(
                    &cache,
                    channels,
                    notification.channel(),
                    notification.payload(),
                ),
                // The connection broke and was opened again: what was said meanwhile is lost.
                Ok(None) => {
                    cache.set_usable(false);
                    listener = None;
                }
                Err(error) => {
                    cache.set_usable(false);
                    tracing::warn!(%error, "lost the connection that listens for token changes; introspection reads the database until it listens again");
                    listener = None;
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    })
}

/// The names of the three channels listened on, in this schema ([`super::channels`]).
struct Channels {
    events: String,
    tokens: String,
}

/// Evicts what one notification concerns.
fn heard(cache: &TokenCache, channels: &Channels, channel: &str, payload: &str) {
    let eviction = if channel == channels.events {
        match super::events::parse_payload(payload) {
            Some((id, event)) => {
                cache.position.fetch_max(id, Ordering::AcqRel);
                Eviction::of(&event)
            }
            None => Eviction::All,
        }
    } else if channel == channels.tokens {
        Eviction::parse(payload)
    } else {
        Eviction::All
    };
    cache.evict(&eviction);
}

/// Turns the cache off when dropped: nobody listens any more.
struct Off(Arc<TokenCache>);

impl Drop for Off {
    fn drop(&mut self) {
        self.0.set_usable(false);
    }
}

/// Listens on the channels, then reads the events logged after the position (or, the first
/// time, takes the newest as the position), evicting what they concern: the cache (emptied when
/// the connection was lost) is then used again.
async fn connect(
    url: &str,
    pool: &sqlx::PgPool,
    cache: &TokenCache,
) -> sqlx::Result<(sqlx::postgres::PgListener, Channels)> {
    let options: sqlx::postgres::PgConnectOptions = url.parse()?;
    let listening_pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.application_name(APPLICATION_NAME))
        .await?;
    let mut listener = sqlx::postgres::PgListener::connect_with(&listening_pool).await?;
    let channels = Channels {
        events: super::channels::name(&mut listener, super::channels::EVENTS).await?,
        tokens: super::channels::name(&mut listener, super::channels::TOKENS).await?,
    };
    let applications = super::channels::name(&mut listener, super::channels::APPLICATIONS).await?;
    listener
        .listen_all([
            channels.events.as_str(),
            applications.as_str(),
            channels.tokens.as_str(),
        ])
        .await?;
    let position = cache.position.load(Ordering::Acquire);
    if position == 0 {
        let newest: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM ssf_events")
            .fetch_one(pool)
            .await?;
        cache.position.fetch_max(newest, Ordering::AcqRel);
    } else {
        for (id, event) in super::events::logged_after(pool, position).await? {
            cache.position.fetch_max(id, Ordering::AcqRel);
            cache.evict(&event.as_ref().map_or(Eviction::All, Eviction::of));
        }
    }
    Ok((listener, channels))
}

/// Announces `eviction` to every other process in the transaction that makes the change
/// (delivered with its commit); the caller evicts in process after the commit.
pub(super) async fn announce(
    connection: &mut sqlx::AnyConnection,
    eviction: &Eviction,
) -> sqlx::Result<()> {
    sqlx::query(super::channels::NOTIFY)
        .bind(super::channels::TOKENS)
        .bind(eviction.payload())
        .execute(connection)
        .await
        .map(drop)
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

    /// Announces `eviction` to the other processes in the transaction of its change
    /// (PostgreSQL); [`Store::evicted`] follows the commit.
    pub(super) async fn announce_eviction(
        &self,
        tx: &mut sqlx::AnyConnection,
        eviction: &Eviction,
    ) -> StoreResult<()> {
        if self.backend == Backend::Postgres {
            announce(tx, eviction).await?;
        }
        Ok(())
    }

    /// After the commit of a change: evicts what it concerns from this process's token cache.
    pub(super) fn evicted(&self, eviction: &Eviction) {
        self.token_cache.evict(eviction);
    }

    /// Commits `tx`, a change that alters introspection answers as `eviction` says, announced.
    pub(super) async fn commit_evicting(
        &self,
        mut tx: sqlx::Transaction<'_, sqlx::Any>,
        eviction: &Eviction,
    ) -> StoreResult<()> {
        self.announce_eviction(&mut tx, eviction).await?;
        tx.commit().await?;
        self.evicted(eviction);
        Ok(())
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

    #[test]
    fn payloads_survive_the_channel() {
        for eviction in [Eviction::User(7), Eviction::StoredFamily("f x".into())] {
            assert_eq!(Eviction::parse(&eviction.payload()), eviction);
        }
        assert_eq!(Eviction::parse("garbage"), Eviction::All);
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

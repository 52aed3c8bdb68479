//! Storage: one `Store` over sqlx's `AnyPool`, so the same queries run on SQLite and PostgreSQL,
//! with the hot requests (token issue, introspection, client lookup) on a faster path per
//! backend ([`hot`]).

/// The `applications` columns every query reads, in the order both backends decode them.
macro_rules! application_columns {
    () => {
        "id, name, client_id, client_secret_digest, client_type, grant_type, redirect_uris, allowed_scopes, may_introspect, owner_id, created_at, pkce_required, token_format, tls_client_auth, may_use_ssf, previous_secret_digest, previous_secret_expires_at, dpop_required"
    };
}

pub mod api_role;
mod applications;
mod bus;
mod client_cache;
mod codes;
mod consents;
mod events;
mod factors;
mod flash;
mod groups;
mod hot;
mod migrations;
mod oidc;
mod passkeys;
pub mod purge;
mod registrations;
mod resources;
mod server_keys;
mod session_families;
mod sessions;
pub mod signing_keys;
mod sqlite_changes;
mod sqlite_error;
mod sqlite_local;
mod timing;
mod token_cache;
mod tokens;
mod users;

pub use applications::{Application, ApplicationInput, ClientType, GrantType};
pub use bus::LISTENER_NAME as CHANGE_LISTENER;
pub use client_cache::CLIENT_CACHE_TTL;
pub use codes::{CodeOutcome, CodeRecord, NewCode};
pub use consents::AuthorizedApplication;
pub use events::{
    ABANDONED_AFTER, LoggedEvent, MAX_STREAMS_PER_CLIENT, PushTarget, Revocation, StreamRecord,
    StreamStatus, family_jti,
};
pub use factors::TotpFactor;
pub use flash::NewFlash;
pub use groups::Group;
pub use hot::group_writer::{WriterKind, write_group_sizes};
pub use oidc::{DEFAULT_ID_TOKEN_ALG, FamilySignIn, OidcClient, Profile};
pub use passkeys::{ChallengePurpose, NewPasskey, PasskeyListed, StoredPasskey};
pub use purge::Purged;
pub use registrations::{
    DynamicClient, DynamicRecord, InitialAccessToken, NewRegistration, RegistrationUpdate,
};
pub use resources::ResourceInput;
pub use sessions::{NewSession, Session};
pub use sqlite_changes::FOREIGN_COMMIT_BOUND;
pub use timing::call_durations;
pub use token_cache::{DEFAULT_TOKEN_CACHE_CAPACITY, Introspected};
pub use tokens::{IssuedTokens, NewTokens, RefreshOutcome, TokenKind, TokenRecord};
pub use users::{Guarded, NewUser, User, UserUpdate};

use hot::Hot;
use sqlite_local::{Exclusive, SqliteLocal};
use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::pool::PoolConnectionMetadata;
use sqlx::postgres::PgPoolOptions;
use sqlx::{AnyPool, Connection};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Which database the pool talks to; only DDL and locking differ between the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Errors of the storage layer that callers act on; everything else is `Database`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0} already exists")]
    Conflict(&'static str),
    /// Tokens were to be issued into a rotation family that has been revoked.
    #[error("the token family has been revoked")]
    FamilyRevoked,
    /// Tokens were to be issued to an application that no longer exists (deleted, perhaps by
    /// another replica while this one still had it in its client cache, now evicted).
    #[error("the application no longer exists")]
    UnknownApplication,
    /// Tokens were to be issued to a user that no longer exists (deleted, perhaps by another
    /// replica, after the grant had read it).
    #[error("the user no longer exists")]
    UnknownUser,
    /// A value the client sent holds a character the database cannot store (PostgreSQL refuses
    /// NUL in text): the client's mistake, not the server's.
    #[error("a value holds a character that cannot be stored")]
    UnstorableText,
    /// A dynamic registration's initial access token expired or was used up before the
    /// registration could take its use (nothing was stored).
    #[error("the initial access token is expired or used up")]
    InitialAccessTokenSpent,
    /// No database connection came free within the pool's wait: the server is overloaded, not
    /// broken, so callers answer 503 with `Retry-After` ([`StoreError::RETRY_AFTER`]).
    #[error("the database is busy: no connection came free in time")]
    Busy,
    #[error("database error: {0}")]
    Database(sqlx::Error),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl StoreError {
    /// Seconds a client is asked to wait after [`StoreError::Busy`].
    pub const RETRY_AFTER: u32 = 1;
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The authorization server's storage: users, groups, applications and tokens.
#[derive(Clone)]
pub struct Store {
    /// One shared record: a clone (every request clones the app state) is one reference count.
    shared: Arc<Shared>,
}

/// What every clone of a [`Store`] shares.
pub struct Shared {
    /// Reads (and, on PostgreSQL, writes) of the cold path.
    pool: AnyPool,
    /// Writes of the cold path. On SQLite a single connection, used only while the hot path's
    /// writer thread is paused ([`Store::exclusive`]), so there is one writer at a time; on
    /// PostgreSQL the same pool as `pool`.
    writer: AnyPool,
    backend: Backend,
    /// The hot requests' statements: rusqlite on SQLite, sqlx's native driver on PostgreSQL.
    hot: Hot,
    /// Applications by client id: every token and introspection request authenticates a
    /// client. Emptied at once by a change made anywhere ([`client_cache`]).
    clients: Arc<client_cache::ClientCache>,
    /// This process's changes of the database: what delivers every change to the caches and
    /// waiting polls of the stores open on it, and hears the other processes' ([`bus`]).
    bus: Arc<bus::Bus>,
    /// Introspection lookups by token digest, kept exact by every change ([`token_cache`]);
    /// shared with the other stores of this process on the same database (the bus's).
    token_cache: Arc<token_cache::TokenCache>,
    /// The key-encryption keys of the signing keys, once given
    /// ([`Store::use_key_encryption`]); without them no signing key is stored or read.
    key_encryption: std::sync::OnceLock<Arc<crate::key_encryption::KeyEncryption>>,
    /// Wakes the polls waiting for revocation events ([`events`]).
    events: events::EventBell,
}

impl std::ops::Deref for Store {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Connects to `sqlite:…` or `postgres://…`, creating the SQLite file and its folder when
    /// missing, and applies the migrations that have not run yet.
    pub async fn connect(database_url: &str) -> StoreResult<Store> {
        Store::connect_with(
            database_url,
            DEFAULT_TOKEN_CACHE_CAPACITY,
            PoolSettings::default(),
        )
        .await
    }

    /// [`Store::connect`] with a token cache of `capacity` entries (0: none) and the pools sized
    /// by `pools` (the settings `database_max_connections` and `database_acquire_timeout`).
    pub async fn connect_with(
        database_url: &str,
        capacity: u64,
        pools: PoolSettings,
    ) -> StoreResult<Store> {
        install_default_drivers();
        let backend = if database_url.starts_with("postgres") {
            Backend::Postgres
        } else {
            Backend::Sqlite
        };
        let sqlite = match backend {
            Backend::Sqlite => Some(SqliteFile::of(database_url)?),
            Backend::Postgres => None,
        };
        let url = match &sqlite {
            Some(file) => file.url.clone(),
            None => database_url.to_owned(),
        };
        let max_connections = pools
            .max_connections
            .unwrap_or_else(|| default_max_connections(backend));
        let acquire_timeout = pools.acquire_timeout;
        let options = |max_connections: u32| {
            AnyPoolOptions::new()
                .max_connections(max_connections)
                .acquire_timeout(acquire_timeout)
                .test_before_acquire(false)
                .before_acquire(|conn, meta| {
                    Box::pin(async move { ping_if_idle(conn, meta).await })
                })
                .after_connect(move |conn, _| {
                    Box::pin(async move {
                        if backend == Backend::Sqlite {
                            for pragma in [
                                "PRAGMA foreign_keys = ON",
                                "PRAGMA journal_mode = WAL",
                                "PRAGMA busy_timeout = 5000",
                                "PRAGMA synchronous = NORMAL",
                                // The hot path's checkpoint thread checkpoints the WAL.
                                "PRAGMA wal_autocheckpoint = 0",
                            ] {
                                sqlx::query(pragma).execute(&mut *conn).await?;
                            }
                        }
                        Ok(())
                    })
                })
        };
        if backend == Backend::Postgres {
            // A refused or silent server is said at once, with its cause: the pool would keep
            // retrying until its acquire timeout and then say only "pool timed out".
            match tokio::time::timeout(FIRST_CONNECT_TIMEOUT, sqlx::PgConnection::connect(&url))
                .await
            {
                Ok(connection) => drop(connection?.close().await),
                Err(_) => {
                    return Err(anyhow::anyhow!(
                        "no answer from the database server within {} s",
                        FIRST_CONNECT_TIMEOUT.as_secs()
                    )
                    .into());
                }
            }
        }
        let pool = options(max_connections).connect(&url).await?;
        let writer = match backend {
            Backend::Sqlite => options(1).connect(&url).await?,
            Backend::Postgres => pool.clone(),
        };
        let hot = match sqlite {
            Some(file) => Hot::Sqlite(Arc::new(SqliteLocal::open(&file.path, file.temporary)?)),
            None => {
                let pool = PgPoolOptions::new()
                    .max_connections(16)
                    .acquire_timeout(acquire_timeout)
                    .test_before_acquire(false)
                    .before_acquire(|conn, meta| {
                        Box::pin(async move { ping_if_idle(conn, meta).await })
                    })
                    .connect(&url)
                    .await?;
                Hot::Postgres(Arc::new(hot::postgres_groups::PgHot::new(pool)))
            }
        };
        // Before the bus, whose listener reads the revocation log from the start.
        migrations::run(&writer, backend).await?;
        let (bus, sqlite_file) = match &hot {
            Hot::Sqlite(local) => (
                bus::of_database(&url, None, capacity),
                Some(local.path().to_owned()),
            ),
            Hot::Postgres(pg) => (bus::of_database(&url, Some(&pg.pool), capacity), None),
        };
        let clients = Arc::new(client_cache::ClientCache::new(backend == Backend::Sqlite));
        let events = events::EventBell::new(sqlite_file);
        bus.subscribe(&clients, &events.notify);
        let store = Store {
            shared: Arc::new(Shared {
                pool,
                writer,
                backend,
                hot,
                clients,
                token_cache: bus.token_cache(),
                bus,
                key_encryption: std::sync::OnceLock::new(),
                events,
            }),
        };
        Ok(store)
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Whether lookups may use this store's client and token caches now. On SQLite it first
    /// empties both when another connection, of this process or another, committed before a
    /// probe of the last [`FOREIGN_COMMIT_BOUND`] ([`sqlite_changes`]); `false` when the
    /// database cannot be asked, or a due probe would have to wait. On PostgreSQL the caches hear
    /// the changes themselves.
    fn caches_current(&self) -> bool {
        match &self.hot {
            Hot::Sqlite(local) => matches!(
                local.unless_changed(|| {
                    self.clients.forget_all();
                    self.token_cache.evict(&token_cache::Eviction::All);
                }),
                Ok(true)
            ),
            Hot::Postgres(_) => true,
        }
    }

    /// Before a cold-path write through `self.writer`: on SQLite, pauses the hot path's writer
    /// thread until the guard is dropped, so the two never write at once (nothing on
    /// PostgreSQL). Never held across a call that takes it again.
    async fn exclusive(&self) -> StoreResult<Option<Exclusive>> {
        match &self.hot {
            Hot::Sqlite(local) => Ok(Some(local.exclusive().await?)),
            Hot::Postgres(_) => Ok(None),
        }
    }
}

/// How the cold path's pool is sized and how long any pool's caller waits for a connection
/// (the settings `database_max_connections` and `database_acquire_timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// The most connections of the cold path's pool (on SQLite its readers': the cold path's
    /// writer stays one connection); `None`: [`default_max_connections`] of the backend. The
    /// hot path's PostgreSQL pool keeps its own 16.
    pub max_connections: Option<u32>,
    /// How long a request waits for a connection of any pool before it is answered `503`.
    pub acquire_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> PoolSettings {
        PoolSettings {
            max_connections: None,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
        }
    }
}

/// The cold path's pool size when `database_max_connections` is not set.
pub fn default_max_connections(backend: Backend) -> u32 {
    match backend {
        Backend::Sqlite => 4,
        Backend::Postgres => 8,
    }
}

/// How long a request waits for a pooled connection when `database_acquire_timeout` is not set.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the first connection to PostgreSQL may take before the server is called silent.
const FIRST_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A pooled connection idle for longer than this is pinged before use (a busy pool never is).
const PING_AFTER_IDLE: Duration = Duration::from_secs(30);

/// The pools' check before handing out a connection: a ping, only after a long idle spell (a
/// database restart shows there), instead of a round trip before every statement.
async fn ping_if_idle<C: Connection>(
    conn: &mut C,
    meta: PoolConnectionMetadata,
) -> sqlx::Result<bool> {
    if meta.idle_for > PING_AFTER_IDLE {
        conn.ping().await?;
    }
    Ok(true)
}

/// The file of a SQLite database URL (`sqlite://data/x.db`, `sqlite:x.db?mode=rwc`); `None` for
/// PostgreSQL and for an in-memory database.
pub fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() || path == ":memory:" || query.contains("mode=memory") {
        return None;
    }
    Some(PathBuf::from(path))
}

/// Where a SQLite database lives: its sqlx URL and its file.
struct SqliteFile {
    url: String,
    path: PathBuf,
    /// The folder of a temporary file standing in for an in-memory database, removed on close.
    temporary: Option<PathBuf>,
}

impl SqliteFile {
    /// `sqlite://data/x.db`: the folder `data/` is created and the file opened read-write-create.
    /// `sqlite::memory:` (or `mode=memory`): a file in a new temporary folder, since the hot
    /// path's connections and sqlx's must see one database.
    fn of(url: &str) -> StoreResult<SqliteFile> {
        let Some(path) = sqlite_file(url) else {
            let folder = std::env::temp_dir().join(format!(
                "tokengate-memory-{}",
                crate::secrets::random_client_id()
            ));
            let path = folder.join("db.sqlite");
            let mut file = SqliteFile::of(&format!("sqlite://{}", path.display()))?;
            file.temporary = Some(folder);
            return Ok(file);
        };
        let path = path.to_str().unwrap_or_default();
        if let Some(parent) = std::path::Path::new(path)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
        {
            crate::private_files::create_folder(parent).map_err(|error| {
                anyhow::anyhow!(
                    "cannot create database folder {}: {error}",
                    parent.display()
                )
            })?;
        }
        private_file(std::path::Path::new(path))
            .map_err(|error| anyhow::anyhow!("cannot create database file {path}: {error}"))?;
        let url = if url.contains("mode=") {
            url.to_owned()
        } else if url.contains('?') {
            format!("{url}&mode=rwc")
        } else {
            format!("{url}?mode=rwc")
        };
        Ok(SqliteFile {
            url,
            path: PathBuf::from(path),
            temporary: None,
        })
    }
}

/// Creates an empty database file (0600: it holds password hashes, client-secret digests and
/// the private JWT signing keys) when missing, before SQLite opens it; SQLite gives its WAL and
/// shared-memory files the same mode. An existing file is left as it is.
fn private_file(path: &std::path::Path) -> std::io::Result<()> {
    match crate::private_files::create_new_file(path) {
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other.map(drop),
    }
}

/// A stored token format, or an error naming it.
pub(crate) fn parse_token_format(
    stored: Option<String>,
) -> StoreResult<Option<crate::domain::AccessTokenFormat>> {
    stored
        .map(|name| {
            crate::domain::AccessTokenFormat::parse(&name)
                .ok_or_else(|| StoreError::Other(anyhow::anyhow!("unknown token format {name:?}")))
        })
        .transpose()
}

/// A stored certificate registration, or an error naming it.
pub(crate) fn parse_tls_client_auth(
    stored: Option<String>,
) -> StoreResult<Option<crate::domain::TlsClientAuth>> {
    stored
        .map(|text| {
            crate::domain::TlsClientAuth::read_stored(&text)
                .map_err(|e| StoreError::Other(anyhow::anyhow!("tls_client_auth: {e}")))
        })
        .transpose()
}

/// A stored space-separated scope list (an application's allowed scopes).
pub(crate) fn split_scopes(scopes: &str) -> Vec<String> {
    scopes.split_whitespace().map(str::to_owned).collect()
}

/// Seconds since the Unix epoch.
pub use crate::domain::now;

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        // SQLSTATE 22021, character_not_in_repertoire: PostgreSQL's answer to a NUL in text.
        match &error {
            sqlx::Error::Database(db) if db.code().as_deref() == Some("22021") => {
                StoreError::UnstorableText
            }
            sqlx::Error::PoolTimedOut => {
                warn_busy();
                StoreError::Busy
            }
            _ => StoreError::Database(error),
        }
    }
}

/// One warning line at most every 10 s while the database pool stays full (its 503s carry no
/// error for the request log, and an overloaded server must not also flood its log).
fn warn_busy() {
    use std::sync::atomic::{AtomicI64, Ordering};
    static LAST_WARNED: AtomicI64 = AtomicI64::new(0);
    let now = now();
    let last = LAST_WARNED.load(Ordering::Relaxed);
    if now - last >= 10
        && LAST_WARNED
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        tracing::warn!(
            "no database connection came free within database_acquire_timeout: answering 503 \
             with Retry-After (database_max_connections sizes the pool)"
        );
    }
}

/// Maps a unique-constraint violation to `Conflict(what)`.
fn conflict(what: &'static str) -> impl Fn(sqlx::Error) -> StoreError {
    move |error| match &error {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Conflict(what),
        _ => StoreError::from(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_pools_are_sized_and_wait_as_the_settings_say() {
        let mut urls = vec![crate::testing::sqlite_url()];
        urls.extend(crate::testing::postgres_schema_url().await);
        for url in urls {
            let mut settings = crate::config::Settings::for_tests(&url);
            let wait = Duration::from_millis(1500);
            settings.database_pools = PoolSettings {
                max_connections: Some(3),
                acquire_timeout: wait,
            };
            let store = crate::server::open_store(&mut settings, None)
                .await
                .unwrap();
            let options = store.pool().options();
            assert_eq!(options.get_max_connections(), 3, "{url}");
            assert_eq!(options.get_acquire_timeout(), wait, "{url}");
            match &store.hot {
                Hot::Sqlite(_) => {
                    let writer = store.writer.options();
                    assert_eq!(writer.get_max_connections(), 1, "SQLite's one writer");
                    assert_eq!(writer.get_acquire_timeout(), wait);
                }
                Hot::Postgres(pg) => {
                    let hot = pg.pool.options();
                    assert_eq!(hot.get_max_connections(), 16, "the hot path's own pool");
                    assert_eq!(hot.get_acquire_timeout(), wait);
                }
            }
            let defaulted = Store::connect(&url).await.unwrap();
            assert_eq!(
                defaulted.pool().options().get_max_connections(),
                default_max_connections(defaulted.backend())
            );
            assert_eq!(
                defaulted.pool().options().get_acquire_timeout(),
                DEFAULT_ACQUIRE_TIMEOUT
            );
        }
    }
}

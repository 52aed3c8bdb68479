//! Storage: one `Store` over sqlx's `AnyPool`, so the same queries run on SQLite and PostgreSQL.

mod applications;
mod groups;
mod migrations;
mod sessions;
mod tokens;
mod users;

pub use applications::{Application, ApplicationInput, ClientType, GrantType};
pub use groups::Group;
pub use sessions::{NewSession, Session};
pub use tokens::{IssuedTokens, NewTokens, RefreshOutcome, TokenRecord};
pub use users::{Guarded, NewUser, User, UserUpdate};

use sqlx::AnyPool;
use sqlx::any::{AnyPoolOptions, install_default_drivers};
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
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("{0}")]
    Other(#[from] anyhow::Error),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The authorization server's storage: users, groups, applications and tokens.
#[derive(Clone)]
pub struct Store {
    /// Reads (and, on PostgreSQL, writes).
    pool: AnyPool,
    /// Writes. On SQLite a single connection, so writers queue in the pool instead of meeting
    /// SQLite's lock and its sleeping busy handler; on PostgreSQL the same pool as `pool`.
    writer: AnyPool,
    backend: Backend,
    /// Applications by client id, for a few seconds: every token and introspection request
    /// authenticates a client. Emptied on any change made through this store; another replica's
    /// change is seen within `CLIENT_CACHE_TTL`.
    clients: moka::future::Cache<String, Application>,
}

/// How long an application record is reused without reading the database again.
pub const CLIENT_CACHE_TTL: Duration = Duration::from_secs(5);

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
        install_default_drivers();
        let backend = if database_url.starts_with("postgres") {
            Backend::Postgres
        } else {
            Backend::Sqlite
        };
        let url = match backend {
            Backend::Sqlite => sqlite_url(database_url)?,
            Backend::Postgres => database_url.to_owned(),
        };
        let max_connections = match backend {
            Backend::Sqlite if url.contains(":memory:") || url.contains("mode=memory") => 1,
            Backend::Sqlite => 8,
            Backend::Postgres => 16,
        };
        let options = |max_connections: u32| {
            AnyPoolOptions::new()
                .max_connections(max_connections)
                .acquire_timeout(Duration::from_secs(10))
                // A SQLite file cannot go stale under us; skip the ping on every acquire there.
                .test_before_acquire(backend == Backend::Postgres)
                .after_connect(move |conn, _| {
                    Box::pin(async move {
                        if backend == Backend::Sqlite {
                            for pragma in [
                                "PRAGMA foreign_keys = ON",
                                "PRAGMA journal_mode = WAL",
                                "PRAGMA busy_timeout = 5000",
                                "PRAGMA synchronous = NORMAL",
                            ] {
                                sqlx::query(pragma).execute(&mut *conn).await?;
                            }
                        }
                        Ok(())
                    })
                })
        };
        let pool = options(max_connections).connect(&url).await?;
        let writer = match backend {
            Backend::Sqlite if max_connections > 1 => options(1).connect(&url).await?,
            _ => pool.clone(),
        };
        let clients = moka::future::Cache::builder()
            .max_capacity(10_000)
            .time_to_live(CLIENT_CACHE_TTL)
            .build();
        let store = Store {
            pool,
            writer,
            backend,
            clients,
        };
        migrations::run(&store).await?;
        Ok(store)
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }
}

/// `sqlite://data/x.db` → the folder `data/` is created and the file is opened read-write-create.
fn sqlite_url(url: &str) -> StoreResult<String> {
    let rest = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:");
    let path = rest.split('?').next().unwrap_or_default();
    if path.is_empty() || path == ":memory:" {
        return Ok(url.to_owned());
    }
    if let Some(parent) = std::path::Path::new(path)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent).map_err(|error| {
            anyhow::anyhow!(
                "cannot create database folder {}: {error}",
                parent.display()
            )
        })?;
    }
    Ok(if url.contains("mode=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    })
}

/// Seconds since the Unix epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// Maps a unique-constraint violation to `Conflict(what)`.
fn conflict(what: &'static str) -> impl Fn(sqlx::Error) -> StoreError {
    move |error| match &error {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Conflict(what),
        _ => StoreError::Database(error),
    }
}

//! Helpers for tests across the workspace: fresh stores on SQLite and, when `DATABASE_URL`
//! names one, on PostgreSQL (each in a schema of its own), and a server on a loopback port. For
//! tests only (feature `testing`, which the crates whose tests use it enable in their
//! `[dev-dependencies]`); fixtures that need no authserver internals are in `test-support`.

use crate::config::Settings;
use crate::key_encryption::KeyEncryption;
use crate::store::{ApplicationInput, ClientType, GrantType, NewUser, Store};
use crate::{AppState, serve};
use std::net::SocketAddr;
use std::sync::Arc;

/// The secret tests encrypt signing keys with (what `AUTHSERVER_SECRETS_SYSTEM` gives a server).
pub const TEST_SECRET: &str = "tokengate-tests-key-encryption-secret-0001";

/// The key-encryption keys of [`TEST_SECRET`].
pub fn key_encryption() -> Arc<KeyEncryption> {
    Arc::new(
        KeyEncryption::from_secrets(&[TEST_SECRET], "the tests' secret").expect("a long secret"),
    )
}

/// The store at `url`, its signing keys encrypted with [`key_encryption`], as `serve` opens it.
pub async fn connect(url: &str) -> Store {
    let store = Store::connect(url).await.expect("open the database");
    store
        .use_key_encryption(key_encryption())
        .await
        .expect("the tests' key-encryption key");
    store
}

/// A fresh SQLite database in a new temporary file.
pub async fn sqlite_store() -> Store {
    connect(&sqlite_url()).await
}

/// The URL of a new temporary SQLite file (created on first connect).
pub fn sqlite_url() -> String {
    let dir = std::env::temp_dir().join(format!(
        "tokengate-test-{}",
        crate::secrets::random_client_id()
    ));
    format!("sqlite://{}/db.sqlite", dir.display())
}

/// [`sqlite_url`] with its folder and an empty file made: an existing database, which the
/// operator commands open (an empty file is an empty database, migrated when opened).
pub fn created_sqlite_url() -> String {
    let url = sqlite_url();
    let path = crate::store::sqlite_file(&url).expect("a file URL");
    crate::private_files::create_folder(path.parent().expect("in a folder"))
        .expect("make the folder");
    crate::private_files::create_new_file(&path).expect("make the file");
    url
}

/// The PostgreSQL URL from `DATABASE_URL`, when it names one.
pub fn postgres_url() -> Option<String> {
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|url| url.starts_with("postgres"))
}

/// A fresh, empty schema on the PostgreSQL server of `DATABASE_URL`, if set.
pub async fn postgres_store() -> Option<Store> {
    let scoped = postgres_schema_url().await?;
    Some(connect(&scoped).await)
}

/// The URL of a new, empty schema on the PostgreSQL server of `DATABASE_URL`, if set.
pub async fn postgres_schema_url() -> Option<String> {
    let url = postgres_url()?;
    // tg_<unix seconds>_<random>: schemas left by runs over an hour ago are dropped here.
    let schema = format!(
        "tg_{}_{}",
        crate::store::now(),
        crate::secrets::random_client_id()
            .to_lowercase()
            .replace(['-', '_'], "")
    );
    sqlx::any::install_default_drivers();
    let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&url)
        .await
        .expect("connect to DATABASE_URL");
    let old: Vec<String> =
        sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'tg\\_%'")
            .fetch_all(&mut conn)
            .await
            .unwrap_or_default();
    for stale in old {
        let created = stale.split('_').nth(1).and_then(|t| t.parse::<i64>().ok());
        if created.is_some_and(|t| t < crate::store::now() - 3600) {
            let _ = sqlx::query(&format!("DROP SCHEMA {stale} CASCADE"))
                .execute(&mut conn)
                .await;
        }
    }
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&mut conn)
        .await
        .expect("create a test schema");
    let separator = if url.contains('?') { '&' } else { '?' };
    Some(format!(
        "{url}{separator}options=-c%20search_path%3D{schema}"
    ))
}

/// Every backend this run can test: SQLite always, PostgreSQL when configured.
pub async fn all_stores() -> Vec<Store> {
    let mut stores = vec![sqlite_store().await];
    stores.extend(postgres_store().await);
    stores
}

/// The URL of a fresh, migrated database on every backend this run can test: SQLite always,
/// PostgreSQL when configured. (The operator commands other than serve, migrate and
/// createsuperuser refuse a SQLite file that does not exist.)
pub async fn all_database_urls() -> Vec<String> {
    let mut urls = vec![created_sqlite_url()];
    urls.extend(postgres_schema_url().await);
    urls
}

/// Two stores on one fresh database per backend, as two replicas of the server have: each with
/// its own pools and client cache.
pub async fn all_replica_pairs() -> Vec<(Store, Store)> {
    let mut pairs = Vec::new();
    for url in all_database_urls().await {
        let first = connect(&url).await;
        let second = connect(&url).await;
        pairs.push((first, second));
    }
    pairs
}

/// Waits until `store` hears other processes' changes to applications and caches them
/// (PostgreSQL; at most 5 s); returns at once on SQLite, whose cache is in use from the start.
pub async fn client_cache_ready(store: &Store) {
    if store.backend() != crate::store::Backend::Postgres {
        return;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !store.client_cache_active() {
        assert!(
            std::time::Instant::now() < deadline,
            "the store does not listen for application changes"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The store tests should use by default: PostgreSQL when `DATABASE_URL` names one, else SQLite.
pub async fn store() -> Store {
    match postgres_store().await {
        Some(store) => store,
        None => sqlite_store().await,
    }
}

/// A confidential application and its secret.
pub async fn application(
    store: &Store,
    grant_type: GrantType,
    may_introspect: bool,
) -> (String, String) {
    let input = ApplicationInput {
        name: format!("test {}", grant_type.as_str()),
        client_type: ClientType::Confidential,
        grant_type,
        redirect_uris: String::new(),
        allowed_scopes: vec![crate::domain::EVERY_SCOPE.into()],
        may_introspect,
        may_use_ssf: may_introspect,
        pkce_required: true,
        token_format: None,
    };
    let (app, secret) = store
        .create_application(&input, None, None, None)
        .await
        .expect("create an application");
    (
        app.client_id,
        secret.expect("confidential clients get a secret"),
    )
}

/// An active user with this password.
pub async fn user(store: &Store, username: &str, password: &str) -> crate::store::User {
    let new = NewUser {
        username: username.into(),
        password: Some(password.into()),
        is_active: true,
        ..Default::default()
    };
    store.create_user(&new).await.expect("create a user")
}

/// A running authorization server on a loopback port; dropping the handle stops it.
pub struct RunningServer {
    pub addr: SocketAddr,
    pub base_url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub task: tokio::task::JoinHandle<()>,
}

impl RunningServer {
    /// Stops accepting and waits for the server task to end.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Starts the authorization server over `store` on `addr` (use port 0 for any free port).
pub async fn spawn_server(store: Store, settings: Settings, addr: SocketAddr) -> RunningServer {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("bound address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let state = crate::server::ready(AppState::new(settings, store))
        .await
        .expect("the server's state");
    let task = tokio::spawn(async move {
        let _ = serve(listener, state, async move {
            let _ = stopped.await;
        })
        .await;
    });
    RunningServer {
        addr,
        base_url: format!("http://{addr}"),
        stop: Some(stop),
        task,
    }
}

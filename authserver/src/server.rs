//! Opening and serving the authorization server, the one way the command line, the stack and
//! the tests do it: storage with every storage setting, the key-encryption key, the signing keys
//! the registered applications need, then the state and the serve loop.

use crate::config::{self, Settings};
use crate::store::Store;
use crate::{AppState, app, jwt, metrics, oauth, protocol, purge};
use anyhow::{Context, bail};
use http_serving::{Limits, redact_url};
use std::future::Future;

/// Opens the storage `settings` name with every storage setting (the token cache's capacity, the
/// pools' size and wait), and installs the key-encryption key when the settings have one
/// (sealing signing keys stored in the clear); without one, the secret kept in `keep_in` (the
/// stack's data directory) or, when that is `None`, beside a SQLite database ([`kept_secret`]).
/// What every command that reads or writes the database starts with.
pub async fn open_store(
    settings: &mut Settings,
    keep_in: Option<&std::path::Path>,
) -> anyhow::Result<Store> {
    let store = Store::connect_with(
        &settings.database_url,
        settings.token_cache_capacity,
        settings.database_pools,
    )
    .await
    .with_context(|| {
        format!(
            "cannot open the database {}",
            redact_url(&settings.database_url)
        )
    })?;
    if settings.key_encryption.is_none() {
        let kept = match keep_in {
            Some(dir) => Some((dir.to_path_buf(), "the secret file in the data directory")),
            None => crate::store::sqlite_file(&settings.database_url).map(|database| {
                let dir = database.parent().unwrap_or(std::path::Path::new(""));
                (dir.to_path_buf(), "the secret file beside the database")
            }),
        };
        if let Some((dir, what)) = kept {
            settings.key_encryption = kept_secret(&dir, what, &store).await?;
        }
    }
    if let Some(kek) = &settings.key_encryption {
        let sealed = store.use_key_encryption(kek.clone()).await?;
        if sealed > 0 {
            tracing::info!(
                sealed,
                kek = kek.current_id(),
                "encrypted the signing keys stored in the clear"
            );
        }
    }
    Ok(store)
}

/// The one rule for the key-encryption secret of a server given none (neither
/// `AUTHSERVER_SECRETS_SYSTEM` nor `AUTHSERVER_SECRETS_SYSTEM_FILE`), the stack's and a standalone
/// server's: the file `secrets-system` in `dir` (the stack's data directory; a standalone
/// server's SQLite database's directory), made on first use, so that a server started with no
/// setting signs JWTs and its revocation stream works (as Keycloak's does). Not made when the
/// database already holds signing keys (a new secret would not open them: [`ready`] then names
/// the settings). A standalone server on PostgreSQL has no such directory: its replicas must
/// share one secret the operator gives them (as ZITADEL's master key), so there the stream is
/// off and the server says so in one line. `what` names the file in messages.
pub async fn kept_secret(
    dir: &std::path::Path,
    what: &str,
    store: &Store,
) -> anyhow::Result<Option<std::sync::Arc<crate::key_encryption::KeyEncryption>>> {
    let file = dir.join(crate::key_encryption::KEPT_FILE_NAME);
    if !file.exists() && store.has_signing_keys().await? {
        return Ok(None);
    }
    let kek = crate::key_encryption::kept_in(&file, what)?;
    Ok(Some(kek))
}

/// Opens the server: [`open_store`], then [`ready`].
pub async fn open(mut settings: Settings) -> anyhow::Result<AppState> {
    let store = open_store(&mut settings, None).await?;
    ready(AppState::new(settings, store)).await
}

/// The state of a server about to serve its store (opened by [`open_store`]): refuses a database
/// whose signing keys it could not read, and makes the signing keys the registered applications
/// need before the first request, so that the JWKS a validator reads early already has them and
/// no anonymous GET writes to the database. (Applications registered later get theirs from the
/// registration service.)
pub async fn ready(state: AppState) -> anyhow::Result<AppState> {
    if !state.store.has_key_encryption() {
        if state.store.has_signing_keys().await? {
            bail!(
                "the database holds JWT signing keys, kept encrypted at rest: set {} or {} (Kubernetes: the Secret key secrets-system)",
                crate::key_encryption::SECRETS_VAR,
                crate::key_encryption::SECRETS_FILE_VAR
            );
        }
        tracing::warn!("{}", oauth::ssf::STREAM_OFF);
    }
    let jwt = config::AccessTokenFormat::Jwt;
    // JWT access tokens (the server's default format or an application's own), or EdDSA ID
    // tokens: the EdDSA key.
    let issues_jwts = state.settings.access_token_format == jwt
        || state.store.any_application_with_format(jwt).await?
        || state.store.any_oidc_client_signing_with("EdDSA").await?;
    if issues_jwts {
        state
            .keys
            .keys_with_signer(&state.store, jwt::Alg::EdDSA)
            .await
            .context("JWT signing keys")?;
    }
    // OpenID Connect clients: the RS256 key of their ID tokens.
    let openid = state
        .store
        .any_application_allowing(protocol::oidc::OPENID)
        .await?;
    if openid && state.store.has_key_encryption() {
        state
            .keys
            .keys_with_signer(&state.store, jwt::Alg::RS256)
            .await
            .context("RS256 signing key")?;
    }
    Ok(state)
}

/// Serves the app on `listener` until `shutdown` completes, then drains in-flight requests
/// (with the limits of [`Limits::DEFAULT`]). Meanwhile purges expired data every
/// `purge_interval` ([`purge::spawn_periodic`]), pushes revocation events, and serves
/// `/metrics` on `metrics_listen` when set.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let metrics = match state.settings.metrics_listen {
        Some(addr) => {
            let (bound, task) = metrics::spawn(addr)
                .await
                .map_err(|e| std::io::Error::other(format!("metrics_listen {addr}: {e}")))?;
            tracing::info!(listen = %bound, "metrics listening");
            Some(task)
        }
        None => None,
    };
    let purge = purge::spawn_periodic(state.store.clone(), state.settings.clone());
    // Revocation-stream polls held open answer at once when the server stops.
    let store = state.store.clone();
    let shutdown = async move {
        shutdown.await;
        store.close_polls();
    };
    let pusher = oauth::ssf_push::spawn_pusher(state.clone());
    let served = http_serving::serve(listener, app(state), Limits::DEFAULT, shutdown).await;
    for task in [purge, metrics].into_iter().flatten() {
        task.abort();
    }
    pusher.abort();
    served
}

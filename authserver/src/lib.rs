//! tokengate's OAuth 2.0 authorization server: token, introspection, revocation and metadata
//! endpoints, storage on SQLite or PostgreSQL, and the operator command line.

pub mod cli;
pub mod client_ip;
pub mod config;
pub mod domain;
pub mod http_server;
pub mod jwt;
pub mod key_encryption;
pub mod metrics;
pub mod mtls;
pub mod oauth;
pub mod private_files;
pub mod protocol;
pub mod purge;
pub mod registration;
pub mod request_log;
pub mod secrets;
pub mod store;
pub mod testing;
pub mod throttle;
pub mod validation;
pub mod web;

use axum::Router;
use axum::routing::get;
use config::Settings;
use std::future::Future;
use std::sync::Arc;
use store::Store;

/// What every handler shares: one record, so that the clones every request makes (the router's,
/// each extractor's) are one reference count each.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// The fields of [`AppState`].
pub struct Shared {
    pub settings: Arc<Settings>,
    pub store: Store,
    /// This replica's copy of the JWT signing keys.
    pub keys: Arc<jwt::KeyRing>,
    /// This replica's copy of the key CSRF tokens are signed with.
    pub(crate) csrf_key: Arc<web::CsrfKey>,
    /// DPoP's replay cache and nonces at the token endpoint (RFC 9449).
    pub dpop: Arc<oauth::DpopState>,
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    pub fn new(settings: Settings, store: Store) -> Self {
        Self::with_keys(settings, store, jwt::KeyRing::new())
    }

    /// [`AppState::new`] with this key ring (a test's shorter key cache).
    pub fn with_keys(settings: Settings, store: Store, keys: jwt::KeyRing) -> Self {
        let dpop = Arc::new(oauth::DpopState::new(&settings));
        AppState(Arc::new(Shared {
            settings: Arc::new(settings),
            store,
            keys: Arc::new(keys),
            csrf_key: Arc::default(),
            dpop,
        }))
    }
}

/// The whole HTTP surface of the authorization server.
pub fn app(state: AppState) -> Router {
    let log = request_log::RequestLog(Some(Arc::new(resource_server::access_log::AccessLog::new(
        state.settings.access_log,
    ))));
    Router::new()
        .merge(oauth::router(&state))
        .merge(web::router())
        .route("/healthz", get(|| async { "ok" }))
        .layer(log)
        .with_state(state)
}

/// Serves the app on `listener` until `shutdown` completes, then drains in-flight requests
/// (with the limits of [`http_server::Limits::DEFAULT`]). Meanwhile purges expired data every
/// `purge_interval` ([`purge::spawn_periodic`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // With JWT access tokens (the server's default format, or any application's own), a
    // signing key exists before the first request: the JWKS is never empty for validators
    // starting early, and no anonymous GET writes to the database. An application switched to
    // JWT later gets the key when it is registered or changed (views, CLI), and in any case at
    // its first token, issued to an authenticated client.
    let jwt = config::AccessTokenFormat::Jwt;
    let reading = |e| std::io::Error::other(format!("reading the applications: {e}"));
    // An application whose ID tokens are EdDSA needs the same key before its first ID token.
    let issues_jwts = state.settings.access_token_format == jwt
        || state
            .store
            .any_application_with_format(jwt)
            .await
            .map_err(reading)?
        || state
            .store
            .any_oidc_client_signing_with("EdDSA")
            .await
            .map_err(reading)?;
    if issues_jwts {
        state
            .keys
            .keys_with_signer(&state.store, crate::jwt::Alg::EdDSA)
            .await
            .map_err(|e| std::io::Error::other(format!("JWT signing keys: {e}")))?;
    }
    if !state.store.has_key_encryption() {
        tracing::warn!("{}", oauth::ssf::STREAM_OFF);
    }
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
    // OpenID Connect: once an application lists `openid`, the RS256 key exists before the first
    // ID token, so that a relying party's first fetch of the JWKS has it (otherwise it is made
    // at the first ID token; relying parties fetch the JWKS again for a kid they do not know).
    let openid = state
        .store
        .any_application_allowing(protocol::oidc::OPENID)
        .await
        .map_err(|e| std::io::Error::other(format!("reading the applications: {e}")))?;
    if openid && state.store.has_key_encryption() {
        state
            .keys
            .keys_with_signer(&state.store, jwt::Alg::RS256)
            .await
            .map_err(|e| std::io::Error::other(format!("RS256 signing key: {e}")))?;
    }
    let purge = purge::spawn_periodic(state.store.clone(), state.settings.clone());
    // Revocation-stream polls held open answer at once when the server stops.
    let store = state.store.clone();
    let shutdown = async move {
        shutdown.await;
        store.close_polls();
    };
    let pusher = oauth::ssf_push::spawn_pusher(state.clone());
    let served =
        http_server::serve(listener, app(state), http_server::Limits::DEFAULT, shutdown).await;
    for task in [purge, metrics].into_iter().flatten() {
        task.abort();
    }
    pusher.abort();
    served
}

/// Resolves on Ctrl-C or SIGTERM (how Kubernetes stops a pod).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}

//! tokengate's OAuth 2.0 authorization server: token, introspection, revocation and metadata
//! endpoints, storage on SQLite or PostgreSQL, and the operator command line.

pub mod cli;
pub mod client_ip;
pub mod config;
pub mod domain;
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
pub mod server;
pub mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod throttle;
pub mod validation;
pub mod web;

use axum::Router;
use axum::routing::get;
use config::Settings;
use std::sync::Arc;
use store::Store;

pub use server::{open, serve};

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
    /// This server as a WebAuthn relying party (from the issuer, once); `None` when the issuer
    /// names no host, and passkeys are off.
    pub(crate) relying_party: Option<protocol::webauthn::RelyingParty>,
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
        let relying_party = protocol::webauthn::RelyingParty::from_issuer(&settings.issuer);
        AppState(Arc::new(Shared {
            settings: Arc::new(settings),
            store,
            keys: Arc::new(keys),
            csrf_key: Arc::default(),
            dpop,
            relying_party,
        }))
    }
}

/// The whole HTTP surface of the authorization server.
pub fn app(state: AppState) -> Router {
    let log = request_log::with_access(
        resource_server::access_log::AccessLog::new(state.settings.access_log),
        state.settings.trusted_proxies.clone(),
        state.settings.proxy_secret.clone(),
    );
    Router::new()
        .merge(oauth::router(&state))
        .merge(web::router())
        .route("/healthz", get(|| async { "ok" }))
        .layer(log)
        .with_state(state)
}

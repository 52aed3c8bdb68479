//! tokengate's example API: users and groups of the authorization server's directory, protected
//! by bearer tokens and scopes (SPEC §3), either checking tokens itself (introspection, local
//! validation of JWT access tokens, or both) or trusting the sidecar proxy's identity headers.
//!
//! [`app`] is the whole HTTP surface (tests drive it with `tower::ServiceExt::oneshot`);
//! [`serve`] runs it on a listener; [`run`] is what the binary does with a [`config::Config`].

pub mod config;
pub mod error;
pub mod fields;
pub mod groups;
pub mod guard;
pub mod id;
pub mod payload;
pub mod routes;
pub mod users;

use std::future::Future;
use std::sync::Arc;

use authserver::store::Store;
use axum::Router;

use config::Config;
use guard::Guard;
use resource_server::metrics::{Collect, Registry, Scrape};

/// What every handler shares.
#[derive(Clone, Debug)]
pub struct AppState {
    pub store: Store,
    pub guard: Arc<Guard>,
    /// The process's registry: the gate's metrics under `tokengate_example_api_`.
    pub metrics: Arc<Registry>,
}

impl AppState {
    pub fn new(store: Store, guard: Guard) -> Self {
        let guard = Arc::new(guard);
        let mut metrics = Registry::with_prefix("tokengate_example_api");
        let collected = guard.clone();
        metrics.register_collector(Box::new(Collect(move |s: &mut Scrape| {
            collected.collect(s)
        })));
        AppState {
            store,
            guard,
            metrics: Arc::new(metrics),
        }
    }

    /// Connects to the configured database and builds the guard the configuration describes.
    pub async fn from_config(config: &Config) -> anyhow::Result<Self> {
        let guard = Guard::from_config(config)?;
        let store = Store::connect(&config.database_url)
            .await
            .map_err(|error| {
                anyhow::anyhow!(
                    "cannot open {}: {error}",
                    http_serving::redact_url(&config.database_url)
                )
            })?;
        Ok(AppState::new(store, guard))
    }
}

/// The whole HTTP surface: the resources behind the access check, and `/readyz` and `/metrics`
/// (the gate's health and counters) before it.
pub fn app(state: AppState) -> Router {
    routes::router()
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::check,
        ))
        .route("/readyz", axum::routing::get(guard::readyz))
        .route("/metrics", axum::routing::get(guard::metrics))
        .layer(http_serving::RequestLog::errors_only())
        .with_state(state)
}

/// Serves [`app`] on `listener` until `shutdown` completes, then drains in-flight requests
/// (http-serving's server loop, as the authorization server's: header and body deadlines, bodies over
/// [`payload::MAX_BODY`] refused at once). Refuses a non-loopback listener when the guard
/// trusts identity headers (or checks nothing) and `allow_non_loopback` was not set.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    if state.guard.requires_loopback() && !addr.ip().is_loopback() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "refusing to listen on {addr}: only loopback is allowed in this mode (see allow_non_loopback)"
            ),
        ));
    }
    let limits = http_serving::Limits {
        max_body: payload::MAX_BODY,
        ..http_serving::Limits::DEFAULT
    };
    http_serving::serve(listener, app(state), limits, shutdown).await
}

/// Connects, binds the configured address and serves until Ctrl-C or SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let state = AppState::from_config(&config).await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|error| anyhow::anyhow!("cannot listen on {}: {error}", config.listen))?;
    tracing::info!(
        token_source = config.gate.token_source.as_str(),
        listen = %listener.local_addr()?,
        routes = config.gate.rules.routes().len(),
        "example API listening"
    );
    if config.gate.token_source == resource_server::TokenSource::Unchecked {
        tracing::warn!("token_source none: NO authentication or scope checks (benchmarks only)");
    }
    serve(listener, state, http_serving::shutdown_signal()).await?;
    Ok(())
}

#[cfg(test)]
mod tests;

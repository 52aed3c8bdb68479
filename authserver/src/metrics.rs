//! The authorization server's `/metrics`, served on an address of its own (`metrics_listen`),
//! never on the front door: tokens issued by grant, introspection answers by result, token cache
//! hits and misses, throttle refusals, the sizes of the store's write groups, store call latency
//! by operation, build info and the process metrics. One registry per process ([`METRICS`]),
//! encoded by the `prometheus-client` crate.
//!
//! Adding a metric: a field holding the crate's handle (a `Counter`, or one per label value, made
//! in `Metrics::new` so every series shows from the start at 0), registered there under
//! `tokengate_authserver_`, and a method that counts. The store's own histograms are kept in the
//! store (below this module) and only registered here.

use std::net::SocketAddr;
use std::sync::LazyLock;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use resource_server::metrics::Registry;

use crate::protocol::GrantKind;

/// This process's metrics and their registry.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// Where the password-guessing throttle refused an attempt.
#[derive(Clone, Copy, Debug)]
pub enum Throttled {
    PasswordGrant,
    SignIn,
    /// Dynamic client registration (RFC 7591), per address.
    Registration,
    /// Password-less sign-in passkey challenges (`/accounts/login/passkey/options/`), per address.
    PasskeyOptions,
}

impl Throttled {
    const ALL: [Throttled; 4] = [
        Throttled::PasswordGrant,
        Throttled::SignIn,
        Throttled::Registration,
        Throttled::PasskeyOptions,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Throttled::PasswordGrant => "password_grant",
            Throttled::SignIn => "sign_in",
            Throttled::Registration => "registration",
            Throttled::PasskeyOptions => "passkey_options",
        }
    }
}

type Labels = [(&'static str, &'static str); 1];

pub struct Metrics {
    /// By [`GrantKind::ALL`] position.
    tokens: [Counter; 4],
    /// Active, inactive.
    introspections: [Counter; 2],
    /// By [`Throttled::ALL`] position.
    throttled: [Counter; 4],
    /// Introspection lookups answered by the token cache (hit), read from the database (miss).
    token_cache: [Counter; 2],
    registry: Registry,
}

impl Metrics {
    /// Every series at 0, registered with the process metrics.
    fn new() -> Metrics {
        let mut root = Registry::default();
        resource_server::process::register(&mut root);
        let registry = root.sub_registry_with_prefix("tokengate_authserver");
        let tokens = Family::<Labels, Counter>::default();
        let introspections = Family::<Labels, Counter>::default();
        let throttled = Family::<Labels, Counter>::default();
        let token_cache = Family::<Labels, Counter>::default();
        let series = |family: &Family<Labels, Counter>, name, value| {
            family.get_or_create_owned(&[(name, value)])
        };
        let tokens_by_grant = GrantKind::ALL.map(|g| series(&tokens, "grant", g.as_str()));
        let by_result = ["active", "inactive"].map(|r| series(&introspections, "result", r));
        let by_endpoint = Throttled::ALL.map(|at| series(&throttled, "endpoint", at.as_str()));
        let hit_or_miss = ["hit", "miss"].map(|r| series(&token_cache, "result", r));
        registry.register(
            "tokens_issued",
            "Token responses sent, by grant type",
            tokens,
        );
        registry.register(
            "introspections",
            "Introspection answers, by result",
            introspections,
        );
        registry.register(
            "throttled",
            "Attempts refused by the password-guessing throttle, by endpoint",
            throttled,
        );
        registry.register(
            "store_duration_seconds",
            "Time the store took for a call on a request path, by operation",
            crate::store::call_durations().clone(),
        );
        registry.register(
            "write_group_size",
            "Writes committed together (one statement on PostgreSQL, one transaction on SQLite), by writer",
            crate::store::write_group_sizes().clone(),
        );
        registry.register(
            "token_cache",
            "Introspection lookups, by whether the token cache answered",
            token_cache,
        );
        resource_server::metrics::register_build_info(
            registry,
            "The authorization server's version (always 1)",
            env!("CARGO_PKG_VERSION"),
        );
        Metrics {
            tokens: tokens_by_grant,
            introspections: by_result,
            throttled: by_endpoint,
            token_cache: hit_or_miss,
            registry: root,
        }
    }

    /// The OpenMetrics text.
    pub fn render(&self) -> String {
        resource_server::metrics::encode(&self.registry)
    }

    /// A token response was sent for `grant`.
    pub fn token_issued(&self, grant: GrantKind) {
        if let Some(i) = GrantKind::ALL.iter().position(|g| *g == grant) {
            self.tokens[i].inc();
        }
    }

    /// An introspection answer was sent (to an allowed caller).
    pub fn introspected(&self, active: bool) {
        self.introspections[usize::from(!active)].inc();
    }

    /// The throttle refused an attempt at `at`.
    pub fn throttled(&self, at: Throttled) {
        self.throttled[at as usize].inc();
    }

    /// An introspection lookup was answered by the token cache (hit) or read (miss).
    pub fn token_cache(&self, hit: bool) {
        self.token_cache[usize::from(!hit)].inc();
    }
}

/// Serves `/metrics` on `addr` until the task is aborted; the bound address comes back.
pub async fn spawn(addr: SocketAddr) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new().route(
        "/metrics",
        get(|| async {
            (
                [(header::CONTENT_TYPE, resource_server::metrics::CONTENT_TYPE)],
                METRICS.render(),
            )
                .into_response()
        }),
    );
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::warn!(%error, "the metrics listener stopped");
        }
    });
    Ok((bound, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_is_rendered_with_its_labels() {
        let m = Metrics::new();
        m.token_cache(false);
        m.token_issued(GrantKind::RefreshToken);
        m.introspected(false);
        m.throttled(Throttled::SignIn);
        m.throttled(Throttled::SignIn);
        let text = m.render();
        let build_info = format!(
            "tokengate_authserver_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        for line in [
            "tokengate_authserver_tokens_issued_total{grant=\"refresh_token\"} 1",
            "tokengate_authserver_tokens_issued_total{grant=\"password\"} 0",
            "tokengate_authserver_introspections_total{result=\"inactive\"} 1",
            "tokengate_authserver_throttled_total{endpoint=\"sign_in\"} 2",
            "tokengate_authserver_throttled_total{endpoint=\"password_grant\"} 0",
            "tokengate_authserver_token_cache_total{result=\"miss\"} 1",
            "tokengate_authserver_token_cache_total{result=\"hit\"} 0",
            "# TYPE tokengate_authserver_store_duration_seconds histogram",
            "# TYPE tokengate_authserver_write_group_size histogram",
            &build_info,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
    }
}

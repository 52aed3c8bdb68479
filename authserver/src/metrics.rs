//! The authorization server's `/metrics`, served on an address of its own (`metrics_listen`),
//! never on the front door: tokens issued by grant, introspection answers by result, throttle
//! refusals, store call latency by operation, build info and the process metrics. One registry
//! per process ([`METRICS`]), encoded by the `prometheus-client` crate.
//!
//! Adding a metric: a field holding the crate's handle (a `Counter`, or one per label value, made
//! in `Metrics::new` so every series shows from the start at 0), registered there under
//! `tokengate_authserver_`, and a method that counts.

use std::net::SocketAddr;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use resource_server::metrics::Registry;

use crate::protocol::GrantKind;

/// This process's metrics and their registry.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// Where the password-guessing throttle refused an attempt.
#[derive(Clone, Copy, Debug)]
pub enum Throttled {
    PasswordGrant,
    SignIn,
}

impl Throttled {
    const ALL: [Throttled; 2] = [Throttled::PasswordGrant, Throttled::SignIn];

    fn as_str(self) -> &'static str {
        match self {
            Throttled::PasswordGrant => "password_grant",
            Throttled::SignIn => "sign_in",
        }
    }
}

/// The store calls timed by [`StoreTimer`]: those on the request paths (tokens, introspection,
/// client authentication, sign-in, sessions, authorization codes).
#[derive(Clone, Copy, Debug)]
pub enum StoreOp {
    IssueTokens,
    FindToken,
    ClaimRefreshToken,
    RevokeToken,
    RevokeFamily,
    FindApplication,
    GetApplication,
    UserWithPassword,
    CountLoginFailures,
    RecordLoginFailure,
    CreateSession,
    FindSession,
    IssueCode,
    ClaimCode,
}

impl StoreOp {
    const ALL: [StoreOp; 14] = [
        StoreOp::IssueTokens,
        StoreOp::FindToken,
        StoreOp::ClaimRefreshToken,
        StoreOp::RevokeToken,
        StoreOp::RevokeFamily,
        StoreOp::FindApplication,
        StoreOp::GetApplication,
        StoreOp::UserWithPassword,
        StoreOp::CountLoginFailures,
        StoreOp::RecordLoginFailure,
        StoreOp::CreateSession,
        StoreOp::FindSession,
        StoreOp::IssueCode,
        StoreOp::ClaimCode,
    ];

    fn as_str(self) -> &'static str {
        match self {
            StoreOp::IssueTokens => "issue_tokens",
            StoreOp::FindToken => "find_token",
            StoreOp::ClaimRefreshToken => "claim_refresh_token",
            StoreOp::RevokeToken => "revoke_token",
            StoreOp::RevokeFamily => "revoke_family",
            StoreOp::FindApplication => "find_application_by_client_id",
            StoreOp::GetApplication => "get_application",
            StoreOp::UserWithPassword => "user_with_password",
            StoreOp::CountLoginFailures => "count_login_failures",
            StoreOp::RecordLoginFailure => "record_login_failure",
            StoreOp::CreateSession => "create_session",
            StoreOp::FindSession => "find_session",
            StoreOp::IssueCode => "issue_code",
            StoreOp::ClaimCode => "claim_code",
        }
    }
}

/// Upper bounds of the store latency histogram's buckets, in seconds (`+Inf` implied).
pub const STORE_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
];

type Labels = [(&'static str, &'static str); 1];

pub struct Metrics {
    /// By [`GrantKind::ALL`] position.
    tokens: [Counter; 4],
    /// Active, inactive.
    introspections: [Counter; 2],
    /// By [`Throttled::ALL`] position.
    throttled: [Counter; 2],
    /// By [`StoreOp::ALL`] position.
    store: [Histogram; StoreOp::ALL.len()],
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
        let histogram: fn() -> Histogram = || Histogram::new(STORE_BUCKETS);
        let store = Family::<Labels, Histogram>::new_with_constructor(histogram);
        let series = |family: &Family<Labels, Counter>, name, value| {
            family.get_or_create_owned(&[(name, value)])
        };
        let tokens_by_grant = GrantKind::ALL.map(|g| series(&tokens, "grant", g.as_str()));
        let by_result = ["active", "inactive"].map(|r| series(&introspections, "result", r));
        let by_endpoint = Throttled::ALL.map(|at| series(&throttled, "endpoint", at.as_str()));
        let by_operation =
            StoreOp::ALL.map(|op| store.get_or_create_owned(&[("operation", op.as_str())]));
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
            store,
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
            store: by_operation,
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

    /// A store call `op` took `took`.
    pub fn store_call(&self, op: StoreOp, took: Duration) {
        self.store[op as usize].observe(took.as_secs_f64());
    }
}

/// Times a store call from its creation to its drop (whatever way the call ends):
/// `let _timer = StoreTimer::start(StoreOp::FindToken);` first in the method.
pub struct StoreTimer {
    op: StoreOp,
    started: Instant,
}

impl StoreTimer {
    pub fn start(op: StoreOp) -> StoreTimer {
        StoreTimer {
            op,
            started: Instant::now(),
        }
    }
}

impl Drop for StoreTimer {
    fn drop(&mut self) {
        METRICS.store_call(self.op, self.started.elapsed());
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
        m.token_issued(GrantKind::RefreshToken);
        m.introspected(false);
        m.throttled(Throttled::SignIn);
        m.throttled(Throttled::SignIn);
        m.store_call(StoreOp::FindToken, Duration::from_micros(300));
        let text = m.render();
        let store = "tokengate_authserver_store_duration_seconds";
        for line in [
            "tokengate_authserver_tokens_issued_total{grant=\"refresh_token\"} 1".to_owned(),
            "tokengate_authserver_tokens_issued_total{grant=\"password\"} 0".to_owned(),
            "tokengate_authserver_introspections_total{result=\"inactive\"} 1".to_owned(),
            "tokengate_authserver_throttled_total{endpoint=\"sign_in\"} 2".to_owned(),
            "tokengate_authserver_throttled_total{endpoint=\"password_grant\"} 0".to_owned(),
            format!("{store}_bucket{{le=\"0.00025\",operation=\"find_token\"}} 0"),
            format!("{store}_bucket{{le=\"0.0005\",operation=\"find_token\"}} 1"),
            format!("{store}_count{{operation=\"find_token\"}} 1"),
            format!("{store}_count{{operation=\"issue_tokens\"}} 0"),
            format!(
                "tokengate_authserver_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            ),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
    }
}

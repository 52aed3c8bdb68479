//! The authorization server's Prometheus `/metrics`, served on an address of its own
//! (`metrics_listen`), never on the front door: tokens issued by grant, introspection answers by
//! result, token cache hits and misses, throttle refusals, the sizes of the store's write groups,
//! build info and the process metrics. Counters are per process; the text is written by
//! hand, as the proxy's is.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::protocol::GrantKind;

/// This process's counters.
pub static METRICS: Metrics = Metrics {
    tokens: [const { AtomicU64::new(0) }; 4],
    introspections: [const { AtomicU64::new(0) }; 2],
    throttled: [const { AtomicU64::new(0) }; 2],
    token_cache: [const { AtomicU64::new(0) }; 2],
};

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

pub struct Metrics {
    /// By [`GrantKind::ALL`] position.
    tokens: [AtomicU64; 4],
    /// Active, inactive.
    introspections: [AtomicU64; 2],
    /// By [`Throttled::ALL`] position.
    throttled: [AtomicU64; 2],
    /// Introspection lookups answered by the token cache, read from the database.
    token_cache: [AtomicU64; 2],
}

impl Metrics {
    /// A token response was sent for `grant`.
    pub fn token_issued(&self, grant: GrantKind) {
        if let Some(i) = GrantKind::ALL.iter().position(|g| *g == grant) {
            self.tokens[i].fetch_add(1, Relaxed);
        }
    }

    /// An introspection answer was sent (to an allowed caller).
    pub fn introspected(&self, active: bool) {
        self.introspections[usize::from(!active)].fetch_add(1, Relaxed);
    }

    /// The throttle refused an attempt at `at`.
    pub fn throttled(&self, at: Throttled) {
        self.throttled[at as usize].fetch_add(1, Relaxed);
    }

    /// An introspection lookup was answered by the token cache (hit) or read (miss).
    pub fn token_cache(&self, hit: bool) {
        self.token_cache[usize::from(!hit)].fetch_add(1, Relaxed);
    }

    /// The Prometheus text.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(2048);
        let _ = writeln!(
            out,
            "# HELP tokengate_authserver_tokens_issued_total Token responses sent, by grant type.\n# TYPE tokengate_authserver_tokens_issued_total counter"
        );
        for (grant, n) in GrantKind::ALL.iter().zip(&self.tokens) {
            let _ = writeln!(
                out,
                "tokengate_authserver_tokens_issued_total{{grant=\"{}\"}} {}",
                grant.as_str(),
                n.load(Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP tokengate_authserver_introspections_total Introspection answers, by result.\n# TYPE tokengate_authserver_introspections_total counter"
        );
        for (result, n) in ["active", "inactive"].iter().zip(&self.introspections) {
            let _ = writeln!(
                out,
                "tokengate_authserver_introspections_total{{result=\"{result}\"}} {}",
                n.load(Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP tokengate_authserver_throttled_total Attempts refused by the password-guessing throttle, by endpoint.\n# TYPE tokengate_authserver_throttled_total counter"
        );
        for (at, n) in Throttled::ALL.iter().zip(&self.throttled) {
            let _ = writeln!(
                out,
                "tokengate_authserver_throttled_total{{endpoint=\"{}\"}} {}",
                at.as_str(),
                n.load(Relaxed)
            );
        }
        render_write_groups(&mut out);
        let _ = writeln!(
            out,
            "# HELP tokengate_authserver_token_cache_total Introspection lookups, by whether the token cache answered.\n# TYPE tokengate_authserver_token_cache_total counter"
        );
        for (result, n) in ["hit", "miss"].iter().zip(&self.token_cache) {
            let _ = writeln!(
                out,
                "tokengate_authserver_token_cache_total{{result=\"{result}\"}} {}",
                n.load(Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP tokengate_authserver_build_info The authorization server's version (always 1).\n# TYPE tokengate_authserver_build_info gauge\ntokengate_authserver_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        resource_server::process::render(&mut out);
        out
    }
}

/// The sizes of the groups the store's writers committed ([`crate::store::write_group_sizes`]).
fn render_write_groups(out: &mut String) {
    let _ = writeln!(
        out,
        "# HELP tokengate_authserver_write_group_size Writes committed together (one statement on PostgreSQL, one transaction on SQLite), by writer.\n# TYPE tokengate_authserver_write_group_size histogram"
    );
    for group in crate::store::write_group_sizes() {
        let writer = group.writer.as_str();
        for (bound, n) in crate::store::GROUP_SIZE_BOUNDS.iter().zip(group.at_most) {
            let _ = writeln!(
                out,
                "tokengate_authserver_write_group_size_bucket{{writer=\"{writer}\",le=\"{bound}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "tokengate_authserver_write_group_size_bucket{{writer=\"{writer}\",le=\"+Inf\"}} {count}\ntokengate_authserver_write_group_size_sum{{writer=\"{writer}\"}} {sum}\ntokengate_authserver_write_group_size_count{{writer=\"{writer}\"}} {count}",
            count = group.count,
            sum = group.sum
        );
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
                [(
                    header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
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
    fn every_counter_is_rendered_with_its_labels() {
        let m = Metrics {
            tokens: [const { AtomicU64::new(0) }; 4],
            introspections: [const { AtomicU64::new(0) }; 2],
            throttled: [const { AtomicU64::new(0) }; 2],
            token_cache: [const { AtomicU64::new(0) }; 2],
        };
        m.token_cache(false);
        m.token_issued(GrantKind::RefreshToken);
        m.introspected(false);
        m.throttled(Throttled::SignIn);
        m.throttled(Throttled::SignIn);
        let text = m.render();
        for line in [
            "tokengate_authserver_tokens_issued_total{grant=\"refresh_token\"} 1",
            "tokengate_authserver_tokens_issued_total{grant=\"password\"} 0",
            "tokengate_authserver_introspections_total{result=\"inactive\"} 1",
            "tokengate_authserver_throttled_total{endpoint=\"sign_in\"} 2",
            "tokengate_authserver_throttled_total{endpoint=\"password_grant\"} 0",
            "tokengate_authserver_token_cache_total{result=\"miss\"} 1",
            "tokengate_authserver_token_cache_total{result=\"hit\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
    }
}

//! The log setup of every tokengate binary: `RUST_LOG` (default `info`) to stderr, with the
//! crates that print requests and responses (headers, bodies) capped at `info` whatever
//! `RUST_LOG` says, unless [`UNSAFE_LOG_SECRETS`] is `1`.
//!
//! Pingora's debug lines print whole request and response headers (`Authorization: Basic …`,
//! `Set-Cookie`), its trace lines bodies (token responses); hyper's, h2's and reqwest's trace
//! lines print what they read and write. A cap added as a `RUST_LOG` directive would lose to a
//! more specific one (`pingora_core::protocols=trace`), so the cap is a filter of its own.

use std::io::IsTerminal;

use tracing::{Level, Metadata};
use tracing_subscriber::filter::{EnvFilter, FilterExt, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt};

/// Set to `1` to lift the cap: the logs then carry tokens, client secrets, passwords and session
/// cookies. For debugging on a machine of one's own only.
pub const UNSAFE_LOG_SECRETS: &str = "TOKENGATE_UNSAFE_LOG_SECRETS";

/// Targets (prefixes) whose debug and trace events may carry secrets.
pub const CAPPED_TARGETS: [&str; 5] = ["pingora", "hyper", "h2", "reqwest", "tower_http"];

/// Whether an event or span of `meta` may be written with the cap on.
pub fn within_cap(meta: &Metadata<'_>) -> bool {
    allowed(meta.target(), *meta.level())
}

fn allowed(target: &str, level: Level) -> bool {
    level <= Level::INFO || !CAPPED_TARGETS.iter().any(|t| target.starts_with(t))
}

/// Whether the environment lifts the cap.
pub fn cap_lifted() -> bool {
    std::env::var(UNSAFE_LOG_SECRETS).is_ok_and(|v| v == "1")
}

/// Installs the process's log subscriber (once; later calls do nothing). `log` records (Pingora's)
/// are bridged into it.
pub fn init() {
    let env = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let lifted = cap_lifted();
    let layer = fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(env.and(filter_fn(move |meta| lifted || within_cap(meta))));
    if tracing_subscriber::registry()
        .with(layer)
        .try_init()
        .is_ok()
        && lifted
    {
        tracing::warn!(
            "{UNSAFE_LOG_SECRETS}=1: debug logs of Pingora, hyper, h2 and reqwest are on and carry tokens, secrets and cookies"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_printing_crates_stop_at_info() {
        for target in [
            "pingora_core::protocols::http::v1::server",
            "pingora_proxy",
            "hyper::proto::h1::io",
            "hyper_util::client",
            "h2::codec",
            "reqwest::connect",
        ] {
            assert!(allowed(target, Level::INFO), "{target}");
            assert!(!allowed(target, Level::DEBUG), "{target}");
            assert!(!allowed(target, Level::TRACE), "{target}");
        }
        assert!(allowed("authserver::oauth::token", Level::TRACE));
        assert!(allowed("proxy::gateway", Level::DEBUG));
    }
}

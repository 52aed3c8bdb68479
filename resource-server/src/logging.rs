//! The log setup of every tokengate binary: `RUST_LOG` (default `info`) to stderr, as text
//! (colour only on a terminal) or one JSON object a line (`LOG_FORMAT=json`, or a binary's
//! `log_format:` key through [`set_format`]), with the crates that print requests and responses
//! (headers, bodies) capped at `info` whatever `RUST_LOG` says, unless [`UNSAFE_LOG_SECRETS`] is
//! `1`.
//!
//! Pingora's debug lines print whole request and response headers (`Authorization: Basic …`,
//! `Set-Cookie`), its trace lines bodies (token responses); hyper's, h2's and reqwest's trace
//! lines print what they read and write. A cap added as a `RUST_LOG` directive would lose to a
//! more specific one (`pingora_core::protocols=trace`), so the cap is a filter of its own.
//!
//! Pingora's own info lines (its start-up and shutdown steps, each service started) are
//! written as if at debug: only when `RUST_LOG` asks for debug globally or for a `pingora` target.

use std::io::IsTerminal;
use std::str::FromStr;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

use tracing::{Level, Metadata};
use tracing_subscriber::filter::{EnvFilter, FilterExt, LevelFilter, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry, fmt};

/// Set to `1` to lift the cap: the logs then carry tokens, client secrets, passwords and session
/// cookies. For debugging on a machine of one's own only.
pub const UNSAFE_LOG_SECRETS: &str = "TOKENGATE_UNSAFE_LOG_SECRETS";

/// The environment variable that picks the log format: `text` (default) or `json`. It wins over
/// a configuration file's `log_format:`.
pub const LOG_FORMAT: &str = "LOG_FORMAT";

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `2026-11-24T02:00:00Z  INFO target: message key=value`, coloured on a terminal only.
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target`, `message` and the event's fields
    /// at the top level.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("\"{other}\": expected text or json")),
        }
    }
}

impl<'de> serde::Deserialize<'de> for LogFormat {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The format in force (a [`LogFormat`] as `u8`): both layers are installed, each writes only
/// while it is the one, so a configuration file read after [`init`] can still choose.
static FORMAT: AtomicU8 = AtomicU8::new(LogFormat::Text as u8);

/// The format `LOG_FORMAT` asks for, if it is set; an unknown value is an error naming it.
pub fn env_format() -> Result<Option<LogFormat>, String> {
    match std::env::var(LOG_FORMAT) {
        Ok(v) if !v.is_empty() => v
            .parse()
            .map(Some)
            .map_err(|e| format!("environment variable {LOG_FORMAT}: {e}")),
        _ => Ok(None),
    }
}

/// Switches to `format` (a configuration file's `log_format:`), unless `LOG_FORMAT` is set.
pub fn set_format(format: LogFormat) {
    if !matches!(env_format(), Ok(Some(_))) {
        FORMAT.store(format as u8, Relaxed);
    }
}

/// The format in force.
pub fn format() -> LogFormat {
    if FORMAT.load(Relaxed) == LogFormat::Json as u8 {
        LogFormat::Json
    } else {
        LogFormat::Text
    }
}

/// Targets (prefixes) whose debug and trace events may carry secrets.
pub const CAPPED_TARGETS: [&str; 5] = ["pingora", "hyper", "h2", "reqwest", "tower_http"];

/// Whether an event or span of `meta` may be written with the cap on.
pub fn within_cap(meta: &Metadata<'_>) -> bool {
    allowed(meta.target(), *meta.level())
}

fn allowed(target: &str, level: Level) -> bool {
    level <= Level::INFO || !CAPPED_TARGETS.iter().any(|t| target.starts_with(t))
}

/// Whether an event of `target` at `level` is one of Pingora's info lines, written only when
/// `pingora_debug` (see [`debug_asked_for_pingora`]).
fn pingora_chatter(target: &str, level: Level) -> bool {
    level == Level::INFO && target.starts_with("pingora")
}

/// Whether the `RUST_LOG` directives `spec` let debug through for Pingora's targets: a bare
/// `debug` or `trace`, or one of those for a `pingora…` target.
fn debug_asked_for_pingora(spec: &str) -> bool {
    let verbose = |level: &str| {
        let level = level.trim().to_ascii_lowercase();
        level == "debug" || level == "trace"
    };
    spec.split(',')
        .any(|directive| match directive.split_once('=') {
            None => verbose(directive),
            Some((target, level)) => {
                let target = target.trim();
                let target = target.split('[').next().unwrap_or(target);
                target.starts_with("pingora") && verbose(level)
            }
        })
}

/// Whether the environment lifts the cap.
pub fn cap_lifted() -> bool {
    std::env::var(UNSAFE_LOG_SECRETS).is_ok_and(|v| v == "1")
}

/// Installs the process's log subscriber (once; later calls do nothing). `log` records (Pingora's)
/// are bridged into it.
/// `LOG_FORMAT` is read here; an unknown value is reported (in text) and text is kept.
pub fn init() {
    let env_format = env_format();
    if let Ok(Some(format)) = env_format {
        FORMAT.store(format as u8, Relaxed);
    }
    let lifted = cap_lifted();
    let pingora_debug = debug_asked_for_pingora(&std::env::var("RUST_LOG").unwrap_or_default());
    let env_filter =
        || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // The most verbose level written: callsites below it are off at the macro, for tracing and
    // for `log` alike (the format and cap filter gives no hint of its own: it takes this one).
    let most_verbose =
        Layer::<Registry>::max_level_hint(&env_filter()).unwrap_or(LevelFilter::TRACE);
    let filter = |format: LogFormat| {
        env_filter().and(
            filter_fn(move |meta| {
                FORMAT.load(Relaxed) == format as u8
                    && (lifted || within_cap(meta))
                    && (pingora_debug || !pingora_chatter(meta.target(), *meta.level()))
            })
            .with_max_level_hint(most_verbose),
        )
    };
    let text = fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter(LogFormat::Text))
        .boxed();
    let json = fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(std::io::stderr)
        .with_filter(filter(LogFormat::Json))
        .boxed();
    if tracing_subscriber::registry()
        .with(vec![text, json])
        .try_init()
        .is_ok()
    {
        // The bridge of `log` records starts at trace, which sends every debug record of
        // Pingora's request path through the filters (about 3 % of the proxy's CPU, perf): `log`
        // stops at the subscriber's own most verbose level instead.
        log::set_max_level(log_level(most_verbose));
        if let Err(e) = env_format {
            tracing::error!("{e}; logging as text");
        }
        if lifted {
            tracing::warn!(
                "{UNSAFE_LOG_SECRETS}=1: debug logs of Pingora, hyper, h2 and reqwest are on and carry tokens, secrets and cookies"
            );
        }
    }
}

/// The `log` crate's spelling of a tracing level filter.
fn log_level(filter: LevelFilter) -> log::LevelFilter {
    match filter.into_level() {
        None => log::LevelFilter::Off,
        Some(Level::ERROR) => log::LevelFilter::Error,
        Some(Level::WARN) => log::LevelFilter::Warn,
        Some(Level::INFO) => log::LevelFilter::Info,
        Some(Level::DEBUG) => log::LevelFilter::Debug,
        Some(Level::TRACE) => log::LevelFilter::Trace,
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

    #[test]
    fn pingoras_info_lines_only_when_debug_is_asked_for() {
        assert!(pingora_chatter("pingora_core::server", Level::INFO));
        assert!(!pingora_chatter("pingora_core::server", Level::WARN));
        assert!(!pingora_chatter("proxy::server", Level::INFO));
        for spec in ["", "info", "info,access=off", "warn,proxy=debug"] {
            assert!(!debug_asked_for_pingora(spec), "{spec}");
        }
        for spec in [
            "debug",
            "info,pingora_core=debug",
            "info,pingora=trace",
            "info,pingora_core::server=debug",
        ] {
            assert!(debug_asked_for_pingora(spec), "{spec}");
        }
    }

    #[test]
    fn formats_parse_by_name() {
        assert_eq!("json".parse(), Ok(LogFormat::Json));
        assert_eq!("text".parse(), Ok(LogFormat::Text));
        let e = "JSON".parse::<LogFormat>().unwrap_err();
        assert!(e.contains("expected text or json"), "{e}");
    }
}

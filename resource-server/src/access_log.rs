//! The access log shared by the proxy and the authorization server: the `access_log:` section
//! (on/off and a sample rate, with `<PREFIX>_ACCESS_LOG` and `<PREFIX>_ACCESS_LOG_SAMPLE`
//! overrides), the sampler, and the one line per request (target [`TARGET`], level info).
//!
//! A line names the method, the path without its query string (which may hold a token), the
//! route, the decision, the client id and the user, the status, the upstream's status and the
//! latency; never a token, a cookie or a header's value.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde::Deserialize;

use crate::settings::SettingError;

/// The `tracing` target of access lines (`RUST_LOG=access=off` silences them too).
pub const TARGET: &str = "access";

/// The `access_log:` section as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccessLog {
    /// Whether requests are logged (default `true`).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// The share of requests logged, 0 to 1 (default 1: all). Answers of 500 and above are
    /// always logged.
    #[serde(default)]
    pub sample: Option<f64>,
}

/// The validated section.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AccessLogSettings {
    pub enabled: bool,
    pub sample: f64,
}

impl Default for AccessLogSettings {
    fn default() -> Self {
        AccessLogSettings {
            enabled: true,
            sample: 1.0,
        }
    }
}

impl RawAccessLog {
    /// Validates the section, `<prefix>_ACCESS_LOG` (`true`/`false`, `on`/`off`, `1`/`0`) and
    /// `<prefix>_ACCESS_LOG_SAMPLE` from `env` winning over the file.
    pub fn resolve(
        self,
        prefix: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<AccessLogSettings, SettingError> {
        let enabled_var = format!("{prefix}_ACCESS_LOG");
        let enabled = match env(&enabled_var) {
            Some(v) => match v.as_str() {
                "true" | "on" | "1" => true,
                "false" | "off" | "0" => false,
                _ => {
                    return Err(SettingError {
                        field: format!("access_log.enabled (from {enabled_var})"),
                        value: v,
                        problem: "expected true or false".into(),
                    });
                }
            },
            None => self.enabled.unwrap_or(true),
        };
        let sample_var = format!("{prefix}_ACCESS_LOG_SAMPLE");
        let (sample, field) = match env(&sample_var) {
            Some(v) => (
                v.parse::<f64>().map_err(|_| SettingError {
                    field: format!("access_log.sample (from {sample_var})"),
                    value: v.clone(),
                    problem: "expected a number from 0 to 1".into(),
                })?,
                format!("access_log.sample (from {sample_var})"),
            ),
            None => (self.sample.unwrap_or(1.0), "access_log.sample".to_owned()),
        };
        if !(0.0..=1.0).contains(&sample) {
            return Err(SettingError {
                field,
                value: sample.to_string(),
                problem: "expected a number from 0 to 1".into(),
            });
        }
        Ok(AccessLogSettings { enabled, sample })
    }
}

/// Decides which requests are logged: every one at `sample` 1, none when off, else an even
/// share (a counter, no randomness); answers of 500 and above always.
#[derive(Debug)]
pub struct AccessLog {
    settings: AccessLogSettings,
    seen: AtomicU64,
}

impl AccessLog {
    pub fn new(settings: AccessLogSettings) -> Self {
        AccessLog {
            settings,
            seen: AtomicU64::new(0),
        }
    }

    pub fn settings(&self) -> AccessLogSettings {
        self.settings
    }

    /// Whether any request may get a line now: on, and `RUST_LOG` lets the access target's info
    /// level through. Cheap.
    pub fn active(&self) -> bool {
        self.settings.enabled && tracing::enabled!(target: TARGET, tracing::Level::INFO)
    }

    /// Whether the request answered with `status` gets a line. Cheap when off or when `RUST_LOG`
    /// leaves out the access target.
    pub fn wants(&self, status: u16) -> bool {
        if !self.active() {
            return false;
        }
        let sample = self.settings.sample;
        if status >= 500 || sample >= 1.0 {
            return true;
        }
        let n = self.seen.fetch_add(1, Relaxed) as f64;
        (n * sample).floor() != ((n + 1.0) * sample).floor()
    }
}

/// One request, as logged.
#[derive(Debug, Default)]
pub struct AccessLine<'a> {
    /// Which server answered (`proxy`, `forward_auth`, `authserver`): one process may run
    /// several.
    pub server: &'static str,
    pub method: &'a str,
    /// Without the query string.
    pub path: &'a str,
    pub route: Option<&'a str>,
    /// The decision (`allow`, `invalid_token`, …) or, at the authorization server, the error
    /// code of a refused request.
    pub decision: Option<&'a str>,
    pub client_id: Option<&'a str>,
    pub user: Option<&'a str>,
    pub status: u16,
    pub upstream_status: Option<u16>,
    /// The `grpc-status` of a gRPC call answered without its upstream (a refusal).
    pub grpc_status: Option<&'a str>,
    /// The request id (`X-Request-Id`), kept from a trusted peer or generated.
    pub request_id: Option<&'a str>,
    pub latency: Duration,
}

impl AccessLine<'_> {
    /// Writes the line (absent fields are left out).
    pub fn emit(&self) {
        tracing::info!(
            target: TARGET,
            server = self.server,
            method = self.method,
            path = self.path,
            route = self.route,
            decision = self.decision,
            client_id = self.client_id,
            user = self.user,
            status = self.status,
            upstream_status = self.upstream_status,
            grpc_status = self.grpc_status,
            request_id = self.request_id,
            // Whole microseconds: 41.779, not 41.779000000000004.
            latency_ms = self.latency.as_micros() as f64 / 1000.0,
            "request"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn defaults_on_and_everything() {
        let s = RawAccessLog::default().resolve("PROXY", &env(&[])).unwrap();
        assert_eq!(s, AccessLogSettings::default());
        assert!(s.enabled);
    }

    #[test]
    fn the_environment_wins_and_bad_values_are_named() {
        let raw = RawAccessLog {
            enabled: Some(true),
            sample: Some(0.5),
        };
        let s = raw
            .clone()
            .resolve(
                "PROXY",
                &env(&[
                    ("PROXY_ACCESS_LOG", "off"),
                    ("PROXY_ACCESS_LOG_SAMPLE", "0.1"),
                ]),
            )
            .unwrap();
        assert_eq!((s.enabled, s.sample), (false, 0.1));
        let e = raw
            .clone()
            .resolve("PROXY", &env(&[("PROXY_ACCESS_LOG", "maybe")]))
            .unwrap_err();
        assert_eq!(e.field, "access_log.enabled (from PROXY_ACCESS_LOG)");
        assert_eq!(e.value, "maybe");
        let e = RawAccessLog {
            sample: Some(2.0),
            ..raw
        }
        .resolve("PROXY", &env(&[]))
        .unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.value.as_str()),
            ("access_log.sample", "2")
        );
    }

    #[test]
    fn a_sample_logs_its_share_and_every_server_error() {
        // `wants` asks `tracing` whether the target is on: a subscriber for the test.
        let _guard = tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_writer(std::io::sink)
                .finish(),
        );
        let log = AccessLog::new(AccessLogSettings {
            enabled: true,
            sample: 0.25,
        });
        let logged = (0..1000).filter(|_| log.wants(200)).count();
        assert_eq!(logged, 250);
        assert!((0..10).all(|_| log.wants(502)));
        let off = AccessLog::new(AccessLogSettings {
            enabled: false,
            sample: 1.0,
        });
        assert!(!off.wants(500));
    }
}

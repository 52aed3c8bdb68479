//! `config/example-api.yaml` as written: serde mirror structs (`deny_unknown_fields`), no validation.

use resource_server::RouteSpec;
use serde::Deserialize;

/// The whole file; every key but `routes` is optional with a named default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `introspect`, `behind-proxy` or `none` (benchmarks only; unsafe). Default `behind-proxy`.
    #[serde(default)]
    pub mode: Option<String>,
    /// `host:port`, default `127.0.0.1:8002`.
    #[serde(default)]
    pub listen: Option<String>,
    /// Default `sqlite://data/authserver.db` (the authorization server's database).
    #[serde(default)]
    pub database_url: Option<String>,
    /// `behind-proxy` and `none` refuse a non-loopback `listen` unless this is `true`.
    #[serde(default)]
    pub allow_non_loopback: Option<bool>,
    /// Used in `introspect` mode (ignored, but still parsed, in the others).
    #[serde(default)]
    pub introspection: Option<RawIntrospection>,
    /// Access rules in the resource-server route format (`upstream` omitted).
    #[serde(default)]
    pub routes: Option<Vec<RouteSpec>>,
}

/// How to reach the authorization server's introspection endpoint (RFC 7662).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIntrospection {
    /// e.g. `http://127.0.0.1:8001/o/introspect/`.
    #[serde(default)]
    pub url: Option<String>,
    /// A bearer token with the `introspection` scope (env `EXAMPLE_API_AUTH_TOKEN`).
    #[serde(default)]
    pub auth_token: Option<String>,
    /// Client credentials of an application allowed to introspect.
    #[serde(default)]
    pub client_id: Option<String>,
    #[serde(default)]
    pub client_secret: Option<String>,
    /// Default `1s`.
    #[serde(default)]
    pub connect_timeout: Option<RawDuration>,
    /// Default `3s`.
    #[serde(default)]
    pub request_timeout: Option<RawDuration>,
    #[serde(default)]
    pub cache: Option<RawCache>,
}

/// The introspection cache.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    /// Longest life of an active answer (default `60s`; `0s` turns the cache off).
    #[serde(default)]
    pub max_ttl: Option<RawDuration>,
    /// Life of an inactive answer (default `5s`).
    #[serde(default)]
    pub negative_ttl: Option<RawDuration>,
    /// Most entries (default 100000).
    #[serde(default)]
    pub capacity: Option<u64>,
    /// Serve a cached active answer this long past its life while the server is down (default `0s`).
    #[serde(default)]
    pub stale_grace: Option<RawDuration>,
}

/// A duration as written: `"500ms"`, `"3s"`, `"5m"`, `"1h"` or a bare number of seconds.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawDuration {
    Seconds(u64),
    Text(String),
}

impl std::fmt::Display for RawDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RawDuration::Seconds(n) => write!(f, "{n}"),
            RawDuration::Text(s) => write!(f, "{s}"),
        }
    }
}

impl RawDuration {
    /// The duration, or a message saying what is expected.
    pub fn parse(&self) -> Result<std::time::Duration, String> {
        use std::time::Duration;
        let text = match self {
            RawDuration::Seconds(n) => return Ok(Duration::from_secs(*n)),
            RawDuration::Text(s) => s.trim(),
        };
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (digits, unit) = text.split_at(split);
        let n: u64 = digits
            .parse()
            .map_err(|_| "expected a duration such as 500ms, 3s, 5m or 1h".to_owned())?;
        match unit.trim() {
            "" | "s" => Ok(Duration::from_secs(n)),
            "ms" => Ok(Duration::from_millis(n)),
            "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
            "h" => Ok(Duration::from_secs(n.saturating_mul(3600))),
            other => Err(format!("unknown unit {other:?}: use ms, s, m or h")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RawDuration;
    use std::time::Duration;

    #[test]
    fn durations() {
        let p = |s: &str| RawDuration::Text(s.into()).parse();
        assert_eq!(p("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(p("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(p("3"), Ok(Duration::from_secs(3)));
        assert_eq!(p("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(p("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(RawDuration::Seconds(7).parse(), Ok(Duration::from_secs(7)));
        for bad in ["", "s", "3d", "-3s", "1.5s"] {
            assert!(p(bad).is_err(), "{bad}");
        }
    }
}

//! The `introspection:` section of a YAML configuration file as written (serde mirror structs,
//! `deny_unknown_fields`), its duration syntax, and the checks both binaries make alike.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::{AnswerPolicy, CacheSettings, ClientAuth, IntrospectionSettings};

/// How to reach the authorization server's introspection endpoint (RFC 7662).
///
/// `Url` is `Option<String>` where the key may be left out and `String` where it is required
/// (serde then refuses the file with ``missing field `url` ``). Each binary lets an environment
/// variable override the URL and the credentials. `Debug` redacts the token and the secret.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIntrospection<Url = Option<String>> {
    /// The RFC 7662 endpoint, e.g. `http://127.0.0.1:8001/o/introspect/`.
    pub url: Url,
    /// A bearer token with the `introspection` scope.
    #[serde(default)]
    pub auth_token: Option<String>,
    /// Client credentials of an application allowed to introspect.
    #[serde(default)]
    pub client_id: Option<String>,
    #[serde(default)]
    pub client_secret: Option<String>,
    /// A file holding the client secret instead (a mounted Kubernetes Secret): read at start,
    /// and again whenever the endpoint refuses the secret, so a rotated secret is picked up
    /// without a restart.
    #[serde(default)]
    pub client_secret_file: Option<String>,
    /// Default `1s` ([`IntrospectionSettings::DEFAULT_CONNECT_TIMEOUT`]).
    #[serde(default)]
    pub connect_timeout: Option<RawDuration>,
    /// Default `3s` ([`IntrospectionSettings::DEFAULT_REQUEST_TIMEOUT`]).
    #[serde(default)]
    pub request_timeout: Option<RawDuration>,
    #[serde(default)]
    pub cache: Option<RawCache>,
    /// How far past `exp`, or before `nbf`, a token is still accepted (default `5s`, at most
    /// `5m`).
    #[serde(default)]
    pub leeway: Option<RawDuration>,
    /// When set, only answers whose `iss` is exactly this are accepted.
    #[serde(default)]
    pub issuer: Option<String>,
    /// The old spelling of the gate's `audience` (read by [`crate::GateConfig::resolve`], with a
    /// deprecation warning; [`RawIntrospection::policy`] ignores it).
    #[serde(default)]
    pub audience: Option<String>,
}

// Secrets never reach a log line through `{:?}`.
impl<Url: fmt::Debug> fmt::Debug for RawIntrospection<Url> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |s: &Option<String>| s.as_ref().map(|_| "<redacted>");
        f.debug_struct("RawIntrospection")
            .field("url", &self.url)
            .field("auth_token", &redacted(&self.auth_token))
            .field("client_id", &self.client_id)
            .field("client_secret", &redacted(&self.client_secret))
            .field("client_secret_file", &self.client_secret_file)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("cache", &self.cache)
            .field("leeway", &self.leeway)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish()
    }
}

impl<Url> RawIntrospection<Url> {
    /// `leeway` and `issuer`, checked by [`AnswerPolicy::check`].
    pub fn policy(&self) -> Result<AnswerPolicy, SettingError> {
        let policy = AnswerPolicy {
            issuer: self.issuer.clone(),
            leeway: duration(
                "introspection.leeway",
                self.leeway.as_ref(),
                AnswerPolicy::DEFAULT_LEEWAY,
            )?,
        };
        policy.check().map_err(|(key, problem)| SettingError {
            field: format!("introspection.{key}"),
            value: match key {
                "issuer" => policy.issuer.clone().unwrap_or_default(),
                _ => self
                    .leeway
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            },
            problem,
        })?;
        Ok(policy)
    }
}

impl<Url> RawIntrospection<Url> {
    /// Everything but the endpoint and the credentials (which each binary takes from its own
    /// environment variables too), resolved with the one set of defaults both binaries use:
    /// timeouts [`IntrospectionSettings::DEFAULT_CONNECT_TIMEOUT`] and
    /// [`IntrospectionSettings::DEFAULT_REQUEST_TIMEOUT`] (never zero), the cache's
    /// [`CacheSettings::default`] (capacity 0 only with the cache off), and [`Self::policy`].
    pub fn resolve(
        &self,
        url: String,
        auth: ClientAuth,
    ) -> Result<(IntrospectionSettings, CacheSettings), SettingError> {
        let policy = self.policy()?;
        let timeout = |key: &str, value: &Option<RawDuration>, default: Duration| {
            let field = format!("introspection.{key}");
            let d = duration(&field, value.as_ref(), default)?;
            if d.is_zero() {
                return Err(SettingError {
                    field,
                    value: value.as_ref().map(ToString::to_string).unwrap_or_default(),
                    problem: "must be greater than zero".into(),
                });
            }
            Ok(d)
        };
        let connect_timeout = timeout(
            "connect_timeout",
            &self.connect_timeout,
            IntrospectionSettings::DEFAULT_CONNECT_TIMEOUT,
        )?;
        let request_timeout = timeout(
            "request_timeout",
            &self.request_timeout,
            IntrospectionSettings::DEFAULT_REQUEST_TIMEOUT,
        )?;
        let cache = match &self.cache {
            Some(c) => c.settings()?,
            None => CacheSettings::default(),
        };
        if cache.capacity == 0 && !cache.max_ttl.is_zero() {
            return Err(SettingError {
                field: "introspection.cache.capacity".into(),
                value: "0".into(),
                problem: "must be greater than zero (set max_ttl: 0s to turn the cache off)".into(),
            });
        }
        Ok((
            IntrospectionSettings {
                url,
                auth,
                connect_timeout,
                request_timeout,
                policy,
            },
            cache,
        ))
    }
}

/// The introspection cache; the defaults are [`CacheSettings::default`].
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
    /// Serve a cached active answer this long past its life while the authorization server is
    /// unreachable (default `0s` = off).
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

impl fmt::Display for RawDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RawDuration::Seconds(n) => write!(f, "{n}"),
            RawDuration::Text(s) => write!(f, "{s}"),
        }
    }
}

impl RawDuration {
    /// The duration, or a message saying what is expected.
    pub fn parse(&self) -> Result<Duration, String> {
        match self {
            RawDuration::Seconds(n) => Ok(Duration::from_secs(*n)),
            RawDuration::Text(s) => parse_duration(s),
        }
    }
}

/// A duration written the way every tokengate binary reads one: digits then `ms`, `s`, `m`, `h`
/// or `d`, or bare digits for seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| "expected a duration such as 500ms, 3s, 5m, 1h or 1d".to_owned())?;
    match unit.trim() {
        "" | "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(n.saturating_mul(3600))),
        "d" => Ok(Duration::from_secs(n.saturating_mul(86_400))),
        other => Err(format!("unknown unit {other:?}: use ms, s, m, h or d")),
    }
}

pub use crate::config_error::SettingError;

/// `value` parsed, or `default` when the key is absent.
pub fn duration(
    field: &str,
    value: Option<&RawDuration>,
    default: Duration,
) -> Result<Duration, SettingError> {
    let Some(value) = value else {
        return Ok(default);
    };
    value.parse().map_err(|problem| SettingError {
        field: field.to_owned(),
        value: value.to_string(),
        problem,
    })
}

impl RawCache {
    /// The durations parsed, absent keys from [`CacheSettings::default`]. The capacity is taken
    /// as written: the binaries disagree on when 0 is allowed.
    pub fn settings(&self) -> Result<CacheSettings, SettingError> {
        let defaults = CacheSettings::default();
        let d = |key: &str, value: &Option<RawDuration>, default| {
            duration(
                &format!("introspection.cache.{key}"),
                value.as_ref(),
                default,
            )
        };
        Ok(CacheSettings {
            max_ttl: d("max_ttl", &self.max_ttl, defaults.max_ttl)?,
            negative_ttl: d("negative_ttl", &self.negative_ttl, defaults.negative_ttl)?,
            capacity: self.capacity.unwrap_or(defaults.capacity),
            stale_grace: d("stale_grace", &self.stale_grace, defaults.stale_grace)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let p = |s: &str| RawDuration::Text(s.into()).parse();
        assert_eq!(p("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(p("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(p("3"), Ok(Duration::from_secs(3)));
        assert_eq!(p("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(p("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(RawDuration::Seconds(7).parse(), Ok(Duration::from_secs(7)));
        assert_eq!(p("1d"), Ok(Duration::from_secs(86_400)));
        for bad in ["", "s", "3w", "-3s", "1.5s"] {
            assert!(p(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn policy_defaults_and_errors() {
        let raw = |yaml: &str| serde_yaml_ng::from_str::<RawIntrospection>(yaml).unwrap();
        assert_eq!(raw("url: x").policy(), Ok(AnswerPolicy::default()));
        assert_eq!(
            raw("{leeway: 2s, issuer: 'https://a', audience: api}").policy(),
            Ok(AnswerPolicy {
                issuer: Some("https://a".into()),
                leeway: Duration::from_secs(2),
            })
        );
        assert_eq!(
            raw("leeway: 0").policy().map(|p| p.leeway),
            Ok(Duration::ZERO)
        );
        let e = raw("leeway: 1h").policy().unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.value.as_str(), e.problem.as_str()),
            ("introspection.leeway", "1h", "at most 300s")
        );
        let e = raw("leeway: soon").policy().unwrap_err();
        assert_eq!(e.field, "introspection.leeway");
        let e = raw("issuer: ' '").policy().unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.value.as_str()),
            ("introspection.issuer", " ")
        );
        assert!(serde_yaml_ng::from_str::<RawIntrospection>("audiences: [a]").is_err());
    }

    #[test]
    fn one_set_of_defaults_for_both_binaries() {
        let raw = |yaml: &str| serde_yaml_ng::from_str::<RawIntrospection>(yaml).unwrap();
        let auth = ClientAuth::Bearer("t".into());
        let (s, c) = raw("{}").resolve("http://a/".into(), auth.clone()).unwrap();
        assert_eq!(s, IntrospectionSettings::new("http://a/", auth.clone()));
        assert_eq!(
            (s.connect_timeout, s.request_timeout),
            (Duration::from_secs(1), Duration::from_secs(3))
        );
        assert_eq!(c, CacheSettings::default());
        let e = raw("request_timeout: 0s")
            .resolve(String::new(), auth.clone())
            .unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.value.as_str()),
            ("introspection.request_timeout", "0s")
        );
        let e = raw("cache: {capacity: 0}")
            .resolve(String::new(), auth.clone())
            .unwrap_err();
        assert_eq!(e.field, "introspection.cache.capacity");
        assert!(
            raw("cache: {capacity: 0, max_ttl: 0s}")
                .resolve(String::new(), auth)
                .is_ok()
        );
    }

    #[test]
    fn debug_redacts_the_credentials() {
        let raw: RawIntrospection = serde_yaml_ng::from_str(
            "{auth_token: s3cret-token, client_id: app, client_secret: s3cret}",
        )
        .unwrap();
        let text = format!("{raw:?}");
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("client_id: Some(\"app\")"), "{text}");
    }

    #[test]
    fn cache_defaults_and_errors() {
        assert_eq!(RawCache::default().settings(), Ok(CacheSettings::default()));
        let bad = RawCache {
            negative_ttl: Some(RawDuration::Text("5 parsecs".into())),
            ..RawCache::default()
        };
        let e = bad.settings().unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.value.as_str()),
            ("introspection.cache.negative_ttl", "5 parsecs")
        );
    }
}

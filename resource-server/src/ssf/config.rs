//! The `revocation:` section as written ([`RawRevocation`]) and resolved with the binary's
//! environment into [`RevocationSettings`].
//!
//! Variables, for a binary whose prefix is `PROXY` or `EXAMPLE_API`: `<PREFIX>_REVOCATION_URL`
//! (the transmitter's `/.well-known/ssf-configuration`; alone it turns the receiver on with the
//! defaults), `<PREFIX>_REVOCATION_CLIENT_ID`, `<PREFIX>_REVOCATION_CLIENT_SECRET` or
//! `<PREFIX>_REVOCATION_CLIENT_SECRET_FILE`, `<PREFIX>_REVOCATION_REPLICA_URLS` (comma-separated),
//! and `<PREFIX>_REVOCATION=off`. Credentials not given
//! are the introspection client's (`client_id` + `client_secret`).

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::revoked::Lifetimes;
use crate::settings::{RawDuration, SettingError, duration};

/// The `revocation:` section as written. `Debug` redacts the secret.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRevocation {
    /// `false` turns the receiver off (default `true` when the section is there).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// The transmitter's SSF configuration, e.g.
    /// `http://127.0.0.1:8001/.well-known/ssf-configuration`.
    #[serde(default)]
    pub configuration_url: Option<String>,
    /// The same transmitter's configuration URL at its other replicas (sharing its event log),
    /// turned to in order when the current one does not answer (transport failure or 5xx).
    #[serde(default)]
    pub replica_urls: Option<Vec<String>>,
    #[serde(default)]
    pub client_id: Option<String>,
    #[serde(default)]
    pub client_secret: Option<String>,
    #[serde(default)]
    pub client_secret_file: Option<String>,
    /// The token endpoint (default: from the RFC 8414 metadata of the transmitter's issuer).
    #[serde(default)]
    pub token_url: Option<String>,
    /// The `aud` the events must carry (default: `client_id`).
    #[serde(default)]
    pub audience: Option<String>,
    /// Overrides the configuration's `jwks_uri`.
    #[serde(default)]
    pub jwks_uri: Option<String>,
    #[serde(default)]
    pub healthy_max_ttl: Option<RawDuration>,
    #[serde(default)]
    pub fallback_ttl: Option<RawDuration>,
    #[serde(default)]
    pub unhealthy_after: Option<RawDuration>,
    /// How long an event is remembered for JWTs (default `1d`: longer than any token's life).
    #[serde(default)]
    pub remember: Option<RawDuration>,
}

impl fmt::Debug for RawRevocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawRevocation")
            .field("enabled", &self.enabled)
            .field("configuration_url", &self.configuration_url)
            .field("replica_urls", &self.replica_urls)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("client_secret_file", &self.client_secret_file)
            .field("token_url", &self.token_url)
            .field("audience", &self.audience)
            .field("jwks_uri", &self.jwks_uri)
            .finish_non_exhaustive()
    }
}

/// The receiver's settings, resolved. `Debug` redacts the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct RevocationSettings {
    pub configuration_url: String,
    /// Other replicas' configuration URLs, tried in turn after `configuration_url`.
    pub replica_urls: Vec<String>,
    pub client_id: String,
    pub client_secret: String,
    /// The file `client_secret` was read from (its own `client_secret_file`, or the
    /// introspection client's it shares): read again before each token request, so a rotated
    /// secret is used without a restart.
    pub client_secret_file: Option<std::path::PathBuf>,
    pub token_url: Option<String>,
    pub audience: String,
    pub jwks_uri: Option<String>,
    pub lifetimes: Lifetimes,
    /// Bound on connecting, and on every call but the long poll (which gets `unhealthy_after`).
    pub timeout: Duration,
}

impl fmt::Debug for RevocationSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RevocationSettings")
            .field("configuration_url", &self.configuration_url)
            .field("replica_urls", &self.replica_urls)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("client_secret_file", &self.client_secret_file)
            .field("token_url", &self.token_url)
            .field("audience", &self.audience)
            .field("jwks_uri", &self.jwks_uri)
            .field("lifetimes", &self.lifetimes)
            .finish()
    }
}

impl RevocationSettings {
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

    /// Settings with the default lifetimes.
    pub fn new(configuration_url: &str, client_id: &str, client_secret: &str) -> Self {
        RevocationSettings {
            configuration_url: configuration_url.into(),
            replica_urls: Vec::new(),
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            client_secret_file: None,
            token_url: None,
            audience: client_id.into(),
            jwks_uri: None,
            lifetimes: Lifetimes::default(),
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }
}

/// A setting that does not do, and where it came from when not the file (an environment
/// variable, an override).
pub type Invalid = (SettingError, Option<String>);

fn invalid(field: &str, env: Option<String>, value: &str, problem: &str) -> Invalid {
    (
        SettingError {
            field: format!("revocation.{field}"),
            value: value.to_owned(),
            problem: problem.to_owned(),
        },
        env,
    )
}

fn is_url(url: &str) -> bool {
    (url.starts_with("http://") || url.starts_with("https://"))
        && url.len() > "https://".len()
        && !url.contains(char::is_whitespace)
}

/// Resolves the section (if any) with the layers above the file (`var` gives the value for
/// `<PREFIX>_<name>`, with its origin: an override, or the variable when set and not empty) and the introspection client's credentials. `Ok(None)`: no
/// receiver.
pub fn resolve(
    raw: Option<RawRevocation>,
    var: &dyn Fn(&str) -> Option<(String, String)>,
    fallback: Option<(&str, &str)>,
) -> Result<Option<RevocationSettings>, Invalid> {
    if let Some((name, value)) = var("REVOCATION") {
        match value.as_str() {
            "off" | "false" | "0" => return Ok(None),
            "on" | "true" | "1" => {}
            _ => return Err(invalid("enabled", Some(name), &value, "expected on or off")),
        }
    }
    let url_env = var("REVOCATION_URL");
    let raw = match raw {
        Some(raw) => raw,
        None if url_env.is_some() => RawRevocation::default(),
        None => return Ok(None),
    };
    if raw.enabled == Some(false) {
        return Ok(None);
    }
    let (env, url) = match url_env {
        Some((name, value)) => (Some(name), Some(value)),
        None => (None, raw.configuration_url.clone()),
    };
    let Some(configuration_url) = url else {
        return Err(invalid(
            "configuration_url",
            None,
            "(missing)",
            "the transmitter's /.well-known/ssf-configuration URL is required",
        ));
    };
    if !is_url(&configuration_url) {
        return Err(invalid(
            "configuration_url",
            env,
            &configuration_url,
            "expected an http:// or https:// URL",
        ));
    }
    let replica_urls = match var("REVOCATION_REPLICA_URLS") {
        Some((name, list)) => (
            Some(name),
            list.split(',')
                .map(|u| u.trim().to_owned())
                .filter(|u| !u.is_empty())
                .collect(),
        ),
        None => (None, raw.replica_urls.clone().unwrap_or_default()),
    };
    if let Some(bad) = replica_urls.1.iter().find(|u| !is_url(u)) {
        return Err(invalid(
            "replica_urls",
            replica_urls.0,
            bad,
            "expected http:// or https:// URLs",
        ));
    }
    let replica_urls = replica_urls.1;
    for (key, value) in [("token_url", &raw.token_url), ("jwks_uri", &raw.jwks_uri)] {
        if let Some(v) = value
            && !is_url(v)
        {
            return Err(invalid(key, None, v, "expected an http:// or https:// URL"));
        }
    }
    let client_id = var("REVOCATION_CLIENT_ID")
        .map(|(_, v)| v)
        .or(raw.client_id.clone().filter(|v| !v.is_empty()))
        .or(fallback.map(|(id, _)| id.to_owned()));
    let secret_file = match var("REVOCATION_CLIENT_SECRET_FILE") {
        Some((name, path)) => Some((Some(name), path)),
        None => raw.client_secret_file.clone().map(|p| (None, p)),
    };
    let own_file = match (var("REVOCATION_CLIENT_SECRET"), &secret_file) {
        (None, Some((_, path))) => Some(std::path::PathBuf::from(path)),
        _ => None,
    };
    let secret = match (var("REVOCATION_CLIENT_SECRET"), secret_file) {
        (Some((_, v)), _) => Some(v),
        (None, Some((name, path))) => Some(
            crate::introspection::read_secret_file(std::path::Path::new(&path))
                .map_err(|problem| invalid("client_secret_file", name, &path, &problem))?,
        ),
        (None, None) => raw
            .client_secret
            .clone()
            .filter(|v| !v.is_empty())
            .or(fallback.map(|(_, s)| s.to_owned())),
    };
    let (Some(client_id), Some(client_secret)) = (client_id, secret) else {
        return Err(invalid(
            "client_id",
            None,
            "(missing)",
            "set client_id + client_secret (or client_secret_file), or give the introspection \
             section client credentials to share",
        ));
    };
    let d = |key: &str, value: &Option<RawDuration>, default| {
        duration(&format!("revocation.{key}"), value.as_ref(), default).map_err(|e| (e, None))
    };
    let defaults = Lifetimes::default();
    let lifetimes = Lifetimes {
        healthy_max_ttl: d(
            "healthy_max_ttl",
            &raw.healthy_max_ttl,
            defaults.healthy_max_ttl,
        )?,
        fallback_ttl: d("fallback_ttl", &raw.fallback_ttl, defaults.fallback_ttl)?,
        unhealthy_after: d(
            "unhealthy_after",
            &raw.unhealthy_after,
            defaults.unhealthy_after,
        )?,
        remember: d("remember", &raw.remember, defaults.remember)?,
    };
    let shown = |v: &Option<RawDuration>| v.as_ref().map(ToString::to_string).unwrap_or_default();
    if lifetimes.fallback_ttl > lifetimes.healthy_max_ttl {
        return Err(invalid(
            "fallback_ttl",
            None,
            &shown(&raw.fallback_ttl),
            "must not exceed healthy_max_ttl",
        ));
    }
    if lifetimes.unhealthy_after < Duration::from_secs(1) {
        return Err(invalid(
            "unhealthy_after",
            None,
            &shown(&raw.unhealthy_after),
            "at least 1s (it also bounds one long poll)",
        ));
    }
    if lifetimes.remember < lifetimes.healthy_max_ttl {
        return Err(invalid(
            "remember",
            None,
            &shown(&raw.remember),
            "must be at least healthy_max_ttl (and should outlast every token)",
        ));
    }
    let audience = raw
        .audience
        .clone()
        .filter(|a| !a.trim().is_empty())
        .unwrap_or_else(|| client_id.clone());
    Ok(Some(RevocationSettings {
        configuration_url,
        replica_urls,
        client_id,
        client_secret,
        client_secret_file: own_file,
        token_url: raw.token_url,
        audience,
        jwks_uri: raw.jwks_uri,
        lifetimes,
        timeout: RevocationSettings::DEFAULT_TIMEOUT,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn run(
        yaml: Option<&str>,
        vars: &[(&str, &str)],
        fallback: Option<(&str, &str)>,
    ) -> Result<Option<RevocationSettings>, Invalid> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (format!("PROXY_{k}"), v.to_string()))
            .collect();
        let var = move |name: &str| {
            let k = format!("PROXY_{name}");
            vars.get(&k).cloned().map(|v| (k, v))
        };
        let raw = yaml.map(|y| serde_yaml_ng::from_str::<RawRevocation>(y).unwrap());
        resolve(raw, &var, fallback)
    }

    #[test]
    fn defaults_env_and_shared_credentials() {
        assert_eq!(run(None, &[], Some(("p", "s"))).unwrap(), None);
        let s = run(
            None,
            &[("REVOCATION_URL", "http://a/.well-known/ssf-configuration")],
            Some(("p", "s")),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (
                s.client_id.as_str(),
                s.client_secret.as_str(),
                s.audience.as_str()
            ),
            ("p", "s", "p")
        );
        assert_eq!(s.lifetimes, Lifetimes::default());
        assert!(!format!("{s:?}").contains("\"s\""));
        let y = "{configuration_url: 'http://a/c', client_id: r, client_secret: t, healthy_max_ttl: 2h, fallback_ttl: 30s, audience: aud}";
        let s = run(Some(y), &[("REVOCATION_CLIENT_SECRET", "e")], None)
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                s.client_id.as_str(),
                s.client_secret.as_str(),
                s.audience.as_str()
            ),
            ("r", "e", "aud")
        );
        assert_eq!(s.lifetimes.healthy_max_ttl, Duration::from_secs(7200));
        assert_eq!(run(Some(y), &[("REVOCATION", "off")], None).unwrap(), None);
        let y = "{configuration_url: 'http://a/c', replica_urls: ['http://b/c']}";
        let s = run(Some(y), &[], Some(("p", "s"))).unwrap().unwrap();
        assert_eq!(s.replica_urls, ["http://b/c"]);
        let vars = [("REVOCATION_REPLICA_URLS", "http://c/x, http://d/x")];
        let s = run(Some(y), &vars, Some(("p", "s"))).unwrap().unwrap();
        assert_eq!(s.replica_urls, ["http://c/x", "http://d/x"]);
        assert_eq!(run(Some("{enabled: false}"), &[], None).unwrap(), None);
    }

    #[test]
    fn what_does_not_do_is_named() {
        let field = |r: Result<Option<RevocationSettings>, Invalid>| {
            let (e, env) = r.unwrap_err();
            (e.field, env)
        };
        assert_eq!(
            field(run(Some("{}"), &[], None)).0,
            "revocation.configuration_url"
        );
        assert_eq!(
            field(run(None, &[("REVOCATION_URL", "ftp://x")], None)),
            (
                "revocation.configuration_url".into(),
                Some("PROXY_REVOCATION_URL".into())
            )
        );
        assert_eq!(
            field(run(Some("{configuration_url: 'http://a/c'}"), &[], None)).0,
            "revocation.client_id"
        );
        let y = "{configuration_url: 'http://a/c', fallback_ttl: 2h}";
        assert_eq!(
            field(run(Some(y), &[], Some(("p", "s")))).0,
            "revocation.fallback_ttl"
        );
        let y = "{configuration_url: 'http://a/c', unhealthy_after: 0s}";
        assert_eq!(
            field(run(Some(y), &[], Some(("p", "s")))).0,
            "revocation.unhealthy_after"
        );
        // Its own file is kept, to be read again before each token request.
        let own = std::env::temp_dir().join(format!("ssf-secret-{}", std::process::id()));
        std::fs::write(&own, "own\n").unwrap();
        let y = format!(
            "{{configuration_url: 'http://a/c', client_secret_file: '{}'}}",
            own.display()
        );
        let s = run(Some(&y), &[], Some(("p", "s"))).unwrap().unwrap();
        assert_eq!(
            (s.client_secret.as_str(), s.client_secret_file),
            ("own", Some(own.clone()))
        );
        let s = run(
            Some(&y),
            &[("REVOCATION_CLIENT_SECRET", "env")],
            Some(("p", "s")),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (s.client_secret.as_str(), s.client_secret_file),
            ("env", None)
        );
        std::fs::remove_file(&own).unwrap();
        let y = "{configuration_url: 'http://a/c', client_secret_file: /nonexistent/x}";
        assert_eq!(
            field(run(Some(y), &[], Some(("p", "s")))).0,
            "revocation.client_secret_file"
        );
        let vars = [("REVOCATION_REPLICA_URLS", "http://c/x,c:8001")];
        assert_eq!(
            field(run(
                Some("{configuration_url: 'http://a/c'}"),
                &vars,
                Some(("p", "s"))
            )),
            (
                "revocation.replica_urls".into(),
                Some("PROXY_REVOCATION_REPLICA_URLS".into())
            )
        );
        assert_eq!(
            field(run(None, &[("REVOCATION", "maybe")], None)),
            ("revocation.enabled".into(), Some("PROXY_REVOCATION".into()))
        );
    }
}

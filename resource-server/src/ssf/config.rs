//! The `revocation:` section as written ([`RawRevocation`]) and resolved with the binary's
//! environment into [`RevocationSettings`].
//!
//! Variables, for a binary whose prefix is `PROXY` or `EXAMPLE_API`: `<PREFIX>_REVOCATION_URL`
//! (the transmitter's `/.well-known/ssf-configuration`; alone it turns the receiver on with the
//! defaults), `<PREFIX>_REVOCATION_CLIENT_ID`, `<PREFIX>_REVOCATION_CLIENT_SECRET` or
//! `<PREFIX>_REVOCATION_CLIENT_SECRET_FILE`, `<PREFIX>_REVOCATION_REPLICA_URLS` (comma-separated),
//! and `<PREFIX>_REVOCATION=off`, each read by the one precedence (the stack's override, the
//! variable, the file); `client_secret` or `client_secret_file` by
//! [`crate::layers::secret_or_file`]. Credentials not given are the introspection client's
//! (`client_id` and its secret, text or file).

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::config_error::{ConfigError, key_origin};
use crate::layers::{Picked, Secret, secret_or_file};
use crate::revoked::Lifetimes;
use crate::settings::{RawDuration, duration};

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

fn is_url(url: &str) -> bool {
    (url.starts_with("http://") || url.starts_with("https://"))
        && url.len() > "https://".len()
        && !url.contains(char::is_whitespace)
}

/// A value of the file that is there and not empty.
fn given(value: &Option<String>) -> Option<String> {
    value.clone().filter(|v| !v.is_empty())
}

/// The stream's credentials to fall back on: the introspection client's id and secret, if any.
pub type Shared<'a> = dyn Fn() -> Result<Option<(String, Secret)>, ConfigError> + 'a;

/// Resolves the section (if any) of the file named `file` with the layers above it: `pick`
/// gives a key's value by the one precedence ([`crate::layers::Layers::pick`]: the stack's
/// override, the variable, the file), and `shared` the introspection client's credentials, asked
/// for only when the section gives no credentials of its own. `Ok(None)`: no receiver.
pub fn resolve(
    raw: Option<RawRevocation>,
    file: &str,
    pick: &dyn Fn(&str, Option<String>) -> Picked,
    shared: &Shared<'_>,
) -> Result<Option<RevocationSettings>, ConfigError> {
    let enabled = pick(
        "revocation.enabled",
        raw.as_ref()
            .and_then(|r| r.enabled)
            .map(|on| on.to_string()),
    );
    match enabled.value.as_deref() {
        None | Some("on" | "true" | "1") => {}
        Some("off" | "false" | "0") => return Ok(None),
        Some(other) => return Err(bad(&enabled, other, "expected on or off")),
    }
    let url = pick(
        "revocation.configuration_url",
        raw.as_ref().and_then(|r| r.configuration_url.clone()),
    );
    let raw = match raw {
        Some(raw) => raw,
        // A variable (or the stack) naming the transmitter turns the receiver on.
        None if url.value.is_some() => RawRevocation::default(),
        None => return Ok(None),
    };
    let Some(configuration_url) = url.value.clone() else {
        return Err(bad(
            &url,
            "(missing)",
            "the transmitter's /.well-known/ssf-configuration URL is required",
        ));
    };
    if !is_url(&configuration_url) {
        return Err(bad(
            &url,
            &configuration_url,
            "expected an http:// or https:// URL",
        ));
    }
    // The file gives a list, a variable a comma-separated one.
    let replicas = pick("revocation.replica_urls", None);
    let replica_urls: Vec<String> = match &replicas.value {
        Some(list) => list
            .split(',')
            .map(|u| u.trim().to_owned())
            .filter(|u| !u.is_empty())
            .collect(),
        None => raw.replica_urls.clone().unwrap_or_default(),
    };
    if let Some(wrong) = replica_urls.iter().find(|u| !is_url(u)) {
        return Err(bad(&replicas, wrong, "expected http:// or https:// URLs"));
    }
    let token_url = pick("revocation.token_url", raw.token_url.clone());
    let jwks_uri = pick("revocation.jwks_uri", raw.jwks_uri.clone());
    for picked in [&token_url, &jwks_uri] {
        if let Some(v) = &picked.value
            && !is_url(v)
        {
            return Err(bad(picked, v, "expected an http:// or https:// URL"));
        }
    }
    let mut client_id = pick("revocation.client_id", given(&raw.client_id)).value;
    let mut secret = secret_or_file(
        "the revocation stream's client secret",
        pick("revocation.client_secret", given(&raw.client_secret)),
        pick(
            "revocation.client_secret_file",
            given(&raw.client_secret_file),
        ),
    )?;
    if (client_id.is_none() || secret.is_none())
        && let Some((shared_id, shared_secret)) = shared()?
    {
        client_id.get_or_insert(shared_id);
        secret.get_or_insert(shared_secret);
    }
    let (Some(client_id), Some(secret)) = (client_id, secret) else {
        return Err(ConfigError::at(
            key_origin(file, "revocation.client_id"),
            "(missing)",
            "set client_id + client_secret (or client_secret_file), or give the introspection \
             section client credentials to share",
        ));
    };
    let d = |key: &str, value: &Option<RawDuration>, default| {
        duration(&format!("revocation.{key}"), value.as_ref(), default)
            .map_err(|e| ConfigError::setting(file, e, None))
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
        return Err(ConfigError::key(
            file,
            "revocation.fallback_ttl",
            shown(&raw.fallback_ttl),
            "must not exceed healthy_max_ttl",
        ));
    }
    if lifetimes.unhealthy_after < Duration::from_secs(1) {
        return Err(ConfigError::key(
            file,
            "revocation.unhealthy_after",
            shown(&raw.unhealthy_after),
            "at least 1s (it also bounds one long poll)",
        ));
    }
    if lifetimes.remember < lifetimes.healthy_max_ttl {
        return Err(ConfigError::key(
            file,
            "revocation.remember",
            shown(&raw.remember),
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
        client_secret: secret.text,
        client_secret_file: secret.path,
        token_url: token_url.value,
        audience,
        jwks_uri: jwks_uri.value,
        lifetimes,
        timeout: RevocationSettings::DEFAULT_TIMEOUT,
    }))
}

/// A bad value, named by where it came from.
fn bad(picked: &Picked, value: impl fmt::Display, problem: &str) -> ConfigError {
    ConfigError::at(picked.origin.clone(), value, problem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::{Layer, Layers, Overrides};
    use std::collections::HashMap;

    /// The variable a key of the section has in these tests (`PROXY_REVOCATION_<KEY>`, but
    /// `PROXY_REVOCATION` and `PROXY_REVOCATION_URL`).
    fn var_of(key: &str) -> String {
        match key.trim_start_matches("revocation.") {
            "enabled" => "PROXY_REVOCATION".into(),
            "configuration_url" => "PROXY_REVOCATION_URL".into(),
            other => format!("PROXY_REVOCATION_{}", other.to_uppercase()),
        }
    }

    fn run_layers(
        yaml: Option<&str>,
        vars: &[(&str, &str)],
        overrides: &Overrides,
        fallback: Option<(&str, &str)>,
    ) -> Result<Option<RevocationSettings>, ConfigError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (format!("PROXY_{k}"), v.to_string()))
            .collect();
        let env = move |name: &str| vars.get(name).cloned();
        let layers = Layers::new("r.yaml", &env, overrides);
        let pick = |key: &str, from_file| layers.pick(key, Some(&var_of(key)), from_file);
        let shared = || {
            Ok(fallback.map(|(id, secret)| {
                let secret = Secret {
                    origin: "the introspection client".into(),
                    text: secret.into(),
                    path: None,
                    layer: Layer::File,
                };
                (id.to_owned(), secret)
            }))
        };
        let raw = yaml.map(|y| serde_yaml_ng::from_str::<RawRevocation>(y).unwrap());
        resolve(raw, "r.yaml", &pick, &shared)
    }

    fn run(
        yaml: Option<&str>,
        vars: &[(&str, &str)],
        fallback: Option<(&str, &str)>,
    ) -> Result<Option<RevocationSettings>, ConfigError> {
        run_layers(yaml, vars, &Overrides::default(), fallback)
    }

    /// Where the message says the bad value came from.
    fn origin(r: Result<Option<RevocationSettings>, ConfigError>) -> String {
        match r.unwrap_err() {
            ConfigError::Invalid { origin, .. } => origin,
            other => panic!("{other}"),
        }
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
        let key = |k: &str| format!("r.yaml: key \"revocation.{k}\"");
        assert_eq!(origin(run(Some("{}"), &[], None)), key("configuration_url"));
        assert_eq!(
            origin(run(None, &[("REVOCATION_URL", "ftp://x")], None)),
            "environment variable PROXY_REVOCATION_URL"
        );
        assert_eq!(
            origin(run(Some("{configuration_url: 'http://a/c'}"), &[], None)),
            key("client_id")
        );
        let y = "{configuration_url: 'http://a/c', fallback_ttl: 2h}";
        assert_eq!(
            origin(run(Some(y), &[], Some(("p", "s")))),
            key("fallback_ttl")
        );
        let y = "{configuration_url: 'http://a/c', unhealthy_after: 0s}";
        assert_eq!(
            origin(run(Some(y), &[], Some(("p", "s")))),
            key("unhealthy_after")
        );
        let y = "{configuration_url: 'http://a/c', client_secret_file: /nonexistent/x}";
        assert_eq!(
            origin(run(Some(y), &[], Some(("p", "s")))),
            key("client_secret_file")
        );
        let vars = [("REVOCATION_REPLICA_URLS", "http://c/x,c:8001")];
        assert_eq!(
            origin(run(
                Some("{configuration_url: 'http://a/c'}"),
                &vars,
                Some(("p", "s"))
            )),
            "environment variable PROXY_REVOCATION_REPLICA_URLS"
        );
        assert_eq!(
            origin(run(None, &[("REVOCATION", "maybe")], None)),
            "environment variable PROXY_REVOCATION"
        );
    }

    /// `client_secret` and `client_secret_file` follow the one rule of
    /// [`crate::layers::secret_or_file`]: both in the file are refused (the file used to win
    /// silently), a later layer wins over an earlier one, and the file read is kept to be read
    /// again before each token request (rotation).
    #[test]
    fn the_secret_and_its_file_follow_the_one_rule() {
        let dir = std::env::temp_dir().join(format!("ssf-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let own = dir.join("s");
        std::fs::write(&own, "own\n").unwrap();
        let y = format!(
            "{{configuration_url: 'http://a/c', client_secret_file: '{}'}}",
            own.display()
        );
        let s = run(Some(&y), &[], Some(("p", "s"))).unwrap().unwrap();
        assert_eq!(
            (s.client_id.as_str(), s.client_secret.as_str()),
            ("p", "own")
        );
        assert_eq!(s.client_secret_file, Some(own.clone()));
        // The environment's text wins over the file's file: nothing to read again.
        let vars = [("REVOCATION_CLIENT_SECRET", "env")];
        let s = run(Some(&y), &vars, Some(("p", "s"))).unwrap().unwrap();
        assert_eq!(
            (s.client_secret.as_str(), s.client_secret_file),
            ("env", None)
        );
        // Both in the file: refused, naming the file and both keys.
        let both = format!("{}, client_secret: t}}", y.trim_end_matches('}'));
        let e = run(Some(&both), &[], Some(("p", "s")))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "r.yaml: key \"revocation.client_secret_file\": r.yaml: key \"revocation.client_secret\" \
             is set too: give the revocation stream's client secret once, as text or as a file"
        );
        // The stack's text wins over both.
        let stack = Overrides::from([("revocation.client_secret", "stack")]);
        let s = run_layers(Some(&both), &[], &stack, Some(("p", "s")))
            .unwrap()
            .unwrap();
        assert_eq!(
            (s.client_secret.as_str(), s.client_secret_file),
            ("stack", None)
        );
        // A file named by the environment wins over the file's text.
        let text = "{configuration_url: 'http://a/c', client_id: r, client_secret: t}";
        let path = own.display().to_string();
        let vars = [("REVOCATION_CLIENT_SECRET_FILE", path.as_str())];
        let s = run(Some(text), &vars, None).unwrap().unwrap();
        assert_eq!(s.client_secret, "own");
        assert_eq!(s.client_secret_file, Some(own.clone()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_stack_decides_the_token_and_jwks_urls_over_none_in_the_file() {
        let y = "{configuration_url: 'http://a/c', token_url: 'http://file/t'}";
        let stack = Overrides::from([("revocation.jwks_uri", "http://stack/j")]);
        let s = run_layers(Some(y), &[], &stack, Some(("p", "s")))
            .unwrap()
            .unwrap();
        assert_eq!(
            (s.token_url.as_deref(), s.jwks_uri.as_deref()),
            (Some("http://file/t"), Some("http://stack/j"))
        );
        let bad = Overrides::from([("revocation.token_url", "ftp://x")]);
        assert_eq!(
            origin(run_layers(Some(y), &[], &bad, Some(("p", "s")))),
            "key \"revocation.token_url\" set by the stack"
        );
    }
}

//! Settings: `config/example-api.yaml` ([`raw`]) → `EXAMPLE_API_*` environment overrides →
//! validated [`Config`]. Every error names the file (or variable), the key and the bad value.

pub mod raw;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use resource_server::settings::SettingError;
use resource_server::{
    CacheSettings, ClientAuth, IntrospectionSettings, JwtSettings, RawJwt, Rules, RulesError,
};

use raw::{RawConfig, RawIntrospection};

/// Where the settings are read from unless `EXAMPLE_API_CONFIG` or `--config` says otherwise.
pub const DEFAULT_CONFIG_PATH: &str = "config/example-api.yaml";
/// The shipped configuration, used when the default file is absent (e.g. run from elsewhere).
pub const EXAMPLE_CONFIG: &str = include_str!("../../../config/example-api.yaml");
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8002";
pub const DEFAULT_DATABASE_URL: &str = authserver::config::DEFAULT_DATABASE_URL;

/// A configuration that failed to load; `Display` is the operator's message.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// YAML syntax, unknown key or wrong type (serde's message, with the location).
    #[error("{file}: {message}")]
    Syntax { file: String, message: String },
    /// `origin` is `<file>: key "<key>"` or `environment variable <NAME>`.
    #[error("{origin}: {value}: {message}")]
    Invalid {
        origin: String,
        value: String,
        message: String,
    },
    #[error(transparent)]
    Rules(#[from] RulesError),
}

/// How requests are authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every token is checked by introspection at the authorization server (cached).
    Introspect,
    /// Every token is a JWT validated locally with the issuer's JWKS (the `jwt:` section).
    Jwt,
    /// JWTs validated locally, any other (opaque) token introspected.
    JwtOrIntrospect,
    /// The sidecar proxy checked the token; its `X-Auth-*` headers are trusted. Loopback only.
    BehindProxy,
    /// **Unsafe, benchmarks only**: no checks at all; every request is let through.
    None,
}

impl Mode {
    /// Whether the API checks tokens itself (and so may listen on any address).
    pub fn checks_tokens(self) -> bool {
        matches!(self, Mode::Introspect | Mode::Jwt | Mode::JwtOrIntrospect)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Introspect => "introspect",
            Mode::Jwt => "jwt",
            Mode::JwtOrIntrospect => "jwt-or-introspect",
            Mode::BehindProxy => "behind-proxy",
            Mode::None => "none",
        }
    }
}

/// The introspection client and its cache (`introspect` mode).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntrospectConfig {
    pub settings: IntrospectionSettings,
    pub cache: CacheSettings,
}

/// Validated settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file they came from (for messages).
    pub file: String,
    pub mode: Mode,
    pub listen: SocketAddr,
    pub database_url: String,
    pub allow_non_loopback: bool,
    /// `Some` exactly in `introspect` and `jwt-or-introspect` modes.
    pub introspect: Option<IntrospectConfig>,
    /// `Some` exactly in `jwt` and `jwt-or-introspect` modes.
    pub jwt: Option<JwtSettings>,
    /// `introspection.leeway` (default 5 s, as the proxy's): how far past `exp`, or before `nbf`,
    /// a token is still accepted. In `introspect` mode the checker's; in `behind-proxy` mode the
    /// one applied to `X-Auth-Expires`, so that a token the proxy let in within the same leeway is
    /// not refused here.
    pub leeway: Duration,
    pub rules: Rules,
}

impl Config {
    /// Reads the file (`path`, else `EXAMPLE_API_CONFIG`, else the default path, else the shipped
    /// example), applies the environment overrides and validates.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        Self::load_with_env(path, |key| std::env::var(key).ok())
    }

    /// [`Config::load`] reading the environment through `env` (for tests).
    pub fn load_with_env(
        path: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let env = |key: &str| env(key).filter(|v| !v.is_empty());
        let explicit = path
            .map(Path::to_path_buf)
            .or_else(|| env("EXAMPLE_API_CONFIG").map(PathBuf::from));
        let path = explicit
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_PATH));
        let file = path.display().to_string();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if explicit.is_none() && e.kind() == std::io::ErrorKind::NotFound => {
                EXAMPLE_CONFIG.to_owned()
            }
            Err(source) => return Err(ConfigError::Read { file, source }),
        };
        Self::from_yaml_with_env(&text, &file, env)
    }

    /// Parses YAML text with no environment overrides; `file` is only for messages.
    pub fn from_yaml(text: &str, file: &str) -> Result<Config, ConfigError> {
        Self::from_yaml_with_env(text, file, |_| None)
    }

    /// Parses YAML text, then applies the overrides `env` gives.
    pub fn from_yaml_with_env(
        text: &str,
        file: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let raw = resource_server::yaml::from_str::<Option<RawConfig>>(text)
            .map_err(|e| ConfigError::Syntax {
                file: file.to_owned(),
                message: e.to_string(),
            })?
            .unwrap_or_default();
        Validator { file, env: &env }.config(raw)
    }
}

/// Validation with the file name and the environment at hand.
struct Validator<'a> {
    file: &'a str,
    env: &'a dyn Fn(&str) -> Option<String>,
}

/// A value and where it came from.
struct Picked {
    origin: String,
    value: Option<String>,
    from_env: bool,
}

impl Validator<'_> {
    /// The environment variable if set, else the file's value; `key` is the dotted YAML key.
    fn pick(&self, key: &str, var: Option<&str>, from_file: Option<String>) -> Picked {
        if let Some(var) = var
            && let Some(value) = (self.env)(var)
        {
            return Picked {
                origin: format!("environment variable {var}"),
                value: Some(value),
                from_env: true,
            };
        }
        Picked {
            origin: self.key(key),
            value: from_file,
            from_env: false,
        }
    }

    fn key(&self, key: &str) -> String {
        format!("{}: key \"{key}\"", self.file)
    }

    fn invalid(
        origin: impl Into<String>,
        value: impl std::fmt::Display,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Invalid {
            origin: origin.into(),
            value: format!("\"{value}\""),
            message: message.into(),
        }
    }

    /// The shared checks' error with this file's origin.
    fn setting(&self, e: SettingError) -> ConfigError {
        Self::invalid(self.key(&e.field), e.value, e.problem)
    }

    fn config(&self, raw: RawConfig) -> Result<Config, ConfigError> {
        let picked = self.pick("mode", Some("EXAMPLE_API_MODE"), raw.mode);
        let mode = match picked.value.as_deref().unwrap_or("behind-proxy") {
            "introspect" => Mode::Introspect,
            "jwt" => Mode::Jwt,
            "jwt-or-introspect" => Mode::JwtOrIntrospect,
            "behind-proxy" => Mode::BehindProxy,
            "none" => Mode::None,
            other => {
                return Err(Self::invalid(
                    picked.origin,
                    other,
                    "expected introspect, jwt, jwt-or-introspect, behind-proxy or none",
                ));
            }
        };

        let picked = self.pick("listen", Some("EXAMPLE_API_LISTEN"), raw.listen);
        let text = picked.value.unwrap_or_else(|| DEFAULT_LISTEN.into());
        let listen: SocketAddr = text.parse().map_err(|_| {
            Self::invalid(&picked.origin, &text, "not an address like 127.0.0.1:8002")
        })?;
        let allow_non_loopback = raw.allow_non_loopback.unwrap_or(false);
        if !mode.checks_tokens() && !allow_non_loopback && !listen.ip().is_loopback() {
            return Err(Self::invalid(
                picked.origin,
                listen,
                format!(
                    "not a loopback address: in {} mode anyone who can reach the API could claim any \
                     identity, so it listens on loopback only (set allow_non_loopback: true only if \
                     nothing but the proxy can reach this address)",
                    mode.as_str()
                ),
            ));
        }

        let picked = self.pick(
            "database_url",
            Some("EXAMPLE_API_DATABASE_URL"),
            raw.database_url,
        );
        let database_url = picked.value.unwrap_or_else(|| DEFAULT_DATABASE_URL.into());
        if !["sqlite:", "postgres://", "postgresql://"]
            .iter()
            .any(|p| database_url.starts_with(p))
        {
            return Err(Self::invalid(
                picked.origin,
                authserver::config::redact_url(&database_url),
                "must start with sqlite: or postgres://",
            ));
        }

        let raw_introspection = raw.introspection.unwrap_or_default();
        let leeway = raw_introspection
            .policy()
            .map_err(|e| self.setting(e))?
            .leeway;
        let introspect = match mode {
            Mode::Introspect | Mode::JwtOrIntrospect => {
                Some(self.introspection(raw_introspection, mode)?)
            }
            _ => None,
        };
        let jwt = match (mode, raw.jwt) {
            (Mode::Jwt | Mode::JwtOrIntrospect, Some(raw)) => Some(self.jwt(&raw)?),
            (Mode::Jwt | Mode::JwtOrIntrospect, None) => {
                return Err(Self::invalid(
                    self.key("jwt"),
                    "(missing)",
                    format!(
                        "{} mode needs the jwt section (jwks_url, issuer, audience)",
                        mode.as_str()
                    ),
                ));
            }
            // Checked even when unused, so that a mode switch finds no surprise.
            (_, Some(raw)) => {
                self.jwt(&raw)?;
                None
            }
            (_, None) => None,
        };

        let Some(routes) = raw.routes else {
            return Err(ConfigError::Invalid {
                origin: self.key("routes"),
                value: "(missing)".into(),
                message: "the access rules are required (see config/example-api.yaml)".into(),
            });
        };
        let rules = Rules::from_routes(routes, self.file)?;

        Ok(Config {
            file: self.file.to_owned(),
            mode,
            listen,
            database_url,
            allow_non_loopback,
            introspect,
            jwt,
            leeway,
            rules,
        })
    }

    fn jwt(&self, raw: &RawJwt) -> Result<JwtSettings, ConfigError> {
        raw.settings().map_err(|e| self.setting(e))
    }

    fn introspection(
        &self,
        raw: RawIntrospection,
        mode: Mode,
    ) -> Result<IntrospectConfig, ConfigError> {
        let picked = self.pick(
            "introspection.url",
            Some("EXAMPLE_API_INTROSPECTION_URL"),
            raw.url.clone(),
        );
        let Some(url) = picked.value else {
            return Err(Self::invalid(
                picked.origin,
                "(missing)",
                format!(
                    "{} mode needs the introspection endpoint's URL",
                    mode.as_str()
                ),
            ));
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(Self::invalid(picked.origin, url, "not an http(s) URL"));
        }

        let token = self.pick(
            "introspection.auth_token",
            Some("EXAMPLE_API_AUTH_TOKEN"),
            raw.auth_token.clone(),
        );
        let mut id = self.pick(
            "introspection.client_id",
            Some("EXAMPLE_API_CLIENT_ID"),
            raw.client_id.clone(),
        );
        let mut secret = self.pick(
            "introspection.client_secret",
            Some("EXAMPLE_API_CLIENT_SECRET"),
            raw.client_secret.clone(),
        );
        // EXAMPLE_API_AUTH_TOKEN replaces client credentials written in the file.
        if token.from_env {
            for p in [&mut id, &mut secret] {
                if !p.from_env {
                    p.value = None;
                }
            }
        }
        let auth = match (token.value, id.value, secret.value) {
            (Some(token), None, None) => ClientAuth::Bearer(token),
            (None, Some(client_id), Some(client_secret)) => ClientAuth::ClientSecret {
                client_id,
                client_secret,
            },
            (Some(_), _, _) => {
                return Err(Self::invalid(
                    token.origin,
                    "<redacted>",
                    "set auth_token or client_id/client_secret, not both",
                ));
            }
            (None, Some(client_id), None) => {
                return Err(Self::invalid(
                    secret.origin,
                    "(missing)",
                    format!("client_id \"{client_id}\" needs a client_secret"),
                ));
            }
            (None, None, Some(_)) => {
                return Err(Self::invalid(
                    id.origin,
                    "(missing)",
                    "client_secret is set without a client_id",
                ));
            }
            (None, None, None) => {
                return Err(Self::invalid(
                    token.origin,
                    "(missing)",
                    format!(
                        "{} mode needs auth_token (a token with the introspection scope) or client_id and client_secret",
                        mode.as_str()
                    ),
                ));
            }
        };

        let (settings, cache) = raw.resolve(url, auth).map_err(|e| self.setting(e))?;
        Ok(IntrospectConfig { settings, cache })
    }
}

#[cfg(test)]
mod tests;

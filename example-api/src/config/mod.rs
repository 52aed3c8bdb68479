//! Settings: `config/example-api.yaml` ([`raw`]), then `EXAMPLE_API_*` environment variables,
//! then the stack's overrides, by the one precedence of [`resource_server::layers`] → validated
//! [`Config`] (all of it applied at start: the example API does not reload). Every error names
//! the file (or variable, or override), the key and the bad value.

pub mod raw;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub use resource_server::ConfigError;
use resource_server::config_error::key_origin;
pub use resource_server::layers::{Document, Overrides};
use resource_server::layers::{Layers, Picked, Recorder};
use resource_server::yaml::YamlError;
use resource_server::{GateConfig, GateEnv, GateSettings, ProxySecret, TokenSource};

use raw::RawConfig;

/// Where the settings are read from unless `EXAMPLE_API_CONFIG` or `--config` says otherwise.
pub const DEFAULT_CONFIG_PATH: &str = "config/example-api.yaml";
/// The shipped configuration, used when the default file is absent (e.g. run from elsewhere).
pub const EXAMPLE_CONFIG: &str = include_str!("../../../config/example-api.yaml");
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8002";
pub const DEFAULT_DATABASE_URL: &str = authserver::config::DEFAULT_DATABASE_URL;

/// Validated settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file they came from (for messages).
    pub file: String,
    pub listen: SocketAddr,
    pub database_url: String,
    pub allow_non_loopback: bool,
    /// How callers are authenticated, and the access rules.
    pub gate: GateSettings,
    /// `log_format:`, applied by the binary (`LOG_FORMAT` wins).
    pub log_format: Option<resource_server::logging::LogFormat>,
    /// What this was validated from ([`Config::with_overrides`]).
    pub document: Document,
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
        let from_arg = path.is_some();
        let explicit = path
            .map(Path::to_path_buf)
            .or_else(|| env("EXAMPLE_API_CONFIG").map(PathBuf::from));
        let path = explicit
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_PATH));
        let file = path.display().to_string();
        let limits = resource_server::yaml::Limits::DEFAULT;
        let text = match resource_server::yaml::read_file(&path, &limits) {
            Ok(text) => text,
            Err(YamlError::Read(e))
                if explicit.is_none() && e.kind() == std::io::ErrorKind::NotFound =>
            {
                EXAMPLE_CONFIG.to_owned()
            }
            Err(YamlError::Read(source)) => {
                // A file named by the variable is named by it.
                let file = match (&explicit, from_arg) {
                    (Some(_), false) => format!("EXAMPLE_API_CONFIG={file}"),
                    _ => file,
                };
                return Err(ConfigError::Read {
                    file,
                    error: source,
                });
            }
            Err(error) => {
                return Err(ConfigError::Syntax {
                    file,
                    message: error.to_string(),
                });
            }
        };
        Self::from_yaml_with_env(&text, &file, env)
    }

    /// Parses YAML text with no environment overrides; `file` is only for messages.
    pub fn from_yaml(text: &str, file: &str) -> Result<Config, ConfigError> {
        Self::from_yaml_with_env(text, file, |_| None)
    }

    /// Parses YAML text, then applies the environment variables `env` gives.
    pub fn from_yaml_with_env(
        text: &str,
        file: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        validate(&Document::new(file, text), &env, false)
    }

    /// The same document validated again with `overrides` on top of its own (and the
    /// environment it was validated with): how the stack hands in its decisions.
    pub fn with_overrides(&self, overrides: &Overrides) -> Result<Config, ConfigError> {
        let document = self.document.with_overrides(overrides);
        validate(&document, &document.recorded_env(), true)
    }
}

/// Validates `document` with the environment `env`; `all_read`: refuse an override no key reads.
fn validate(
    document: &Document,
    env: &dyn Fn(&str) -> Option<String>,
    all_read: bool,
) -> Result<Config, ConfigError> {
    let file = document.name.as_str();
    let raw = resource_server::yaml::from_str::<Option<RawConfig>>(&document.text)
        .map_err(|e| ConfigError::Syntax {
            file: file.to_owned(),
            message: e.to_string(),
        })?
        .unwrap_or_default();
    let recorder = Recorder::new(env);
    // EXAMPLE_API_MODE, the old name of EXAMPLE_API_TOKEN_SOURCE, is still read.
    let env = |key: &str| match key {
        "EXAMPLE_API_TOKEN_SOURCE" => recorder
            .get(key)
            .or_else(|| recorder.get("EXAMPLE_API_MODE")),
        _ => recorder.get(key),
    };
    let validator = Validator {
        file,
        layers: Layers::new(file, &env, &document.overrides),
    };
    let mut config = validator.config(raw)?;
    if all_read {
        validator.layers.check_all_read()?;
    }
    config.document = document.having_read(recorder.into_seen());
    Ok(config)
}

/// Validation with the file name and the layers above it at hand.
struct Validator<'a> {
    file: &'a str,
    layers: Layers<'a>,
}

impl Validator<'_> {
    /// The value of `key` (the dotted YAML key) by the one precedence: its override, else the
    /// environment variable, else the file.
    fn pick(&self, key: &str, var: Option<&str>, from_file: Option<String>) -> Picked {
        self.layers.pick(key, var, from_file)
    }

    fn key(&self, key: &str) -> String {
        key_origin(self.file, key)
    }

    fn invalid(
        origin: impl Into<String>,
        value: impl std::fmt::Display,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError::at(origin.into(), value, message)
    }

    /// The proxy's secret: `EXAMPLE_API_PROXY_SECRET` (or the stack's override), or the file
    /// `EXAMPLE_API_PROXY_SECRET_FILE` or `proxy_secret_file` names, by the one rule of
    /// [`resource_server::layers::secret_or_file`].
    fn proxy_secret(&self, file: Option<String>) -> Result<Option<ProxySecret>, ConfigError> {
        let text = self.pick("proxy_secret", Some("EXAMPLE_API_PROXY_SECRET"), None);
        let file = self.pick(
            "proxy_secret_file",
            Some("EXAMPLE_API_PROXY_SECRET_FILE"),
            file,
        );
        let Some(secret) = resource_server::layers::secret_or_file("the proxy secret", text, file)?
        else {
            return Ok(None);
        };
        ProxySecret::new(&secret.text)
            .map(Some)
            .map_err(|message| Self::invalid(secret.origin, "<redacted>", message))
    }

    fn config(&self, raw: RawConfig) -> Result<Config, ConfigError> {
        if let Some(mode) = &raw.mode
            && let Err(message) = mode.parse::<TokenSource>()
        {
            return Err(Self::invalid(self.key("mode"), mode, message));
        }
        if raw.mode.is_some() && raw.token_source.is_some() {
            return Err(Self::invalid(
                self.key("mode"),
                raw.mode.unwrap_or_default(),
                "mode is the old name of token_source: keep only token_source",
            ));
        }
        let routes_missing = raw.routes.is_none();
        let mut gate = GateConfig {
            token_source: raw.token_source.or(raw.mode),
            introspection: raw.introspection,
            jwt: raw.jwt,
            routes: raw.routes.unwrap_or_default(),
            revocation: raw.revocation,
            resource: raw.resource,
            audience: raw.audience,
            authorization_servers: raw.authorization_servers,
            resource_name: raw.resource_name,
        }
        .resolve(
            self.file,
            TokenSource::BehindProxy,
            &GateEnv {
                prefix: "EXAMPLE_API",
                layers: &self.layers,
            },
        )?;
        gate.proxy_secret = self.proxy_secret(raw.proxy_secret_file)?;
        if routes_missing {
            return Err(Self::invalid(
                self.key("routes"),
                "(missing)",
                "the access rules are required (see config/example-api.yaml)",
            ));
        }

        let picked = self.pick("listen", Some("EXAMPLE_API_LISTEN"), raw.listen);
        let text = picked.value.unwrap_or_else(|| DEFAULT_LISTEN.into());
        let listen: SocketAddr = text.parse().map_err(|_| {
            Self::invalid(&picked.origin, &text, "not an address like 127.0.0.1:8002")
        })?;
        let allow_non_loopback = raw.allow_non_loopback.unwrap_or(false);
        let source = gate.token_source;
        if !source.checks_tokens() && !allow_non_loopback && !listen.ip().is_loopback() {
            return Err(Self::invalid(
                picked.origin,
                listen,
                format!(
                    "not a loopback address: with token_source {source} anyone who can reach the \
                     API could claim any identity, so it listens on loopback only (set \
                     allow_non_loopback: true only if nothing but the proxy can reach this address)"
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
                http_serving::redact_url(&database_url),
                "must start with sqlite: or postgres://",
            ));
        }

        Ok(Config {
            file: self.file.to_owned(),
            listen,
            database_url,
            allow_non_loopback,
            gate,
            log_format: raw.log_format,
            document: Document::default(),
        })
    }
}

#[cfg(test)]
mod tests;

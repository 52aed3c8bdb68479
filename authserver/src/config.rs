//! Settings: `config/authserver.yaml` mirrored by serde, then `AUTHSERVER_*` environment
//! variables, then the stack's overrides (the one precedence of [`resource_server::layers`]),
//! validated. All of them apply at start: the authorization server does not reload.

use crate::client_ip::{IpRange, ProxySecret};
use crate::domain::INTROSPECTION_SCOPE;
use crate::key_encryption::{KeyEncryption, SECRETS_VAR};
use crate::store::{Backend, DEFAULT_ACQUIRE_TIMEOUT, PoolSettings, default_max_connections};
use http_serving::redact_url;
use resource_server::access_log::{AccessLogSettings, RawAccessLog};
pub use resource_server::layers::{Document, Overrides};
use resource_server::layers::{Layers, Recorder};
use resource_server::logging::LogFormat;
use resource_server::yaml::YamlError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The config file as written (mirror of the YAML; every key optional with a named default).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    listen: Option<String>,
    issuer: Option<String>,
    database_url: Option<String>,
    database_max_connections: Option<i64>,
    database_acquire_timeout: Option<RawDuration>,
    scopes: Option<BTreeMap<String, String>>,
    default_scopes: Option<Vec<String>>,
    access_token_lifetime: Option<RawDuration>,
    refresh_token_lifetime: Option<RawDuration>,
    trusted_proxies: Option<Vec<String>>,
    proxy_secret: Option<String>,
    proxy_secret_file: Option<String>,
    mtls_endpoint_base: Option<String>,
    access_token_format: Option<String>,
    access_token_audience: Option<String>,
    jwks_max_age: Option<RawDuration>,
    authorization_code_lifetime: Option<RawDuration>,
    purge_interval: Option<RawDuration>,
    ssf_poll_timeout: Option<RawDuration>,
    ssf_push_networks: Option<Vec<String>>,
    token_cache_capacity: Option<u64>,
    secrets_system_file: Option<String>,
    access_log: Option<RawAccessLog>,
    log_format: Option<LogFormat>,
    cors_origins: Option<Vec<String>>,
    cors_metadata_origins: Option<Vec<String>>,
    metrics_listen: Option<String>,
    dynamic_registration: Option<String>,
    dynamic_registration_scopes: Option<Vec<String>>,
    require_mfa_for_staff: Option<bool>,
    dpop_nonce: Option<String>,
}

/// A duration as written in the file: a bare number of seconds, or text like `90s`, `15m`, `10h`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum RawDuration {
    Seconds(i64),
    Text(String),
}

impl std::fmt::Display for RawDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RawDuration::Seconds(n) => write!(f, "{n}"),
            RawDuration::Text(text) => f.write_str(text),
        }
    }
}

/// The longest lifetime, max-age or rotation delay accepted: ten years. Anything longer is a
/// typo, and unix-time arithmetic on it must never overflow.
pub const MAX_SECONDS: i64 = 10 * 365 * 86_400;

/// A lifetime in whole seconds, at least one, at most [`MAX_SECONDS`].
fn positive_seconds(text: &str) -> Result<i64, String> {
    let duration = resource_server::settings::parse_duration(text)?;
    if duration.is_zero() {
        return Err("must be at least 1s".into());
    }
    if duration.subsec_nanos() != 0 {
        return Err("must be a whole number of seconds".into());
    }
    i64::try_from(duration.as_secs())
        .ok()
        .filter(|&secs| secs <= MAX_SECONDS)
        .ok_or_else(|| format!("is longer than {MAX_SECONDS} s (ten years)"))
}

/// The entries of a list given as text (an environment variable): separated by commas,
/// whitespace, or both.
fn list_items(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|entry| !entry.is_empty())
}

/// The keys of the file, each overridable by `AUTHSERVER_<KEY>` (except `scopes`, a map).
const KEYS: [&str; 30] = [
    "listen",
    "issuer",
    "database_url",
    "database_max_connections",
    "database_acquire_timeout",
    "scopes",
    "default_scopes",
    "access_token_lifetime",
    "refresh_token_lifetime",
    "trusted_proxies",
    "proxy_secret",
    "proxy_secret_file",
    "mtls_endpoint_base",
    "access_token_format",
    "access_token_audience",
    "jwks_max_age",
    "authorization_code_lifetime",
    "purge_interval",
    "ssf_poll_timeout",
    "ssf_push_networks",
    "token_cache_capacity",
    "secrets_system_file",
    "access_log",
    "cors_origins",
    "cors_metadata_origins",
    "metrics_listen",
    "dynamic_registration",
    "dynamic_registration_scopes",
    "require_mfa_for_staff",
    "dpop_nonce",
];

/// `AUTHSERVER_*` variables that are not settings overrides but are documented elsewhere: the
/// settings file's path, the CLI's password input, the secrets that encrypt the signing keys
/// (never in the settings file), and the access log's sample rate.
pub const OTHER_VARIABLES: [&str; 4] = [
    "AUTHSERVER_CONFIG",
    "AUTHSERVER_PASSWORD",
    crate::key_encryption::SECRETS_VAR,
    "AUTHSERVER_ACCESS_LOG_SAMPLE",
];

/// Refuses `AUTHSERVER_*` variables that nothing reads (a typo would otherwise be silently
/// ignored) and `AUTHSERVER_SCOPES` (a map: declare scopes in the file).
pub fn check_environment<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<(), ConfigError> {
    for name in names {
        let Some(key) = name.strip_prefix("AUTHSERVER_") else {
            continue;
        };
        if OTHER_VARIABLES.contains(&name) {
            continue;
        }
        let lower = key.to_ascii_lowercase();
        if lower == "scopes" {
            return Err(ConfigError::problem(
                format!("environment variable {name}"),
                "scopes are a map of name to description: declare them under \"scopes\" in the settings file",
            ));
        }
        if !KEYS.contains(&lower.as_str()) || key != lower.to_ascii_uppercase() {
            let mut known: Vec<String> = KEYS
                .iter()
                .filter(|k| **k != "scopes")
                .map(|k| format!("AUTHSERVER_{}", k.to_ascii_uppercase()))
                .collect();
            known.extend(OTHER_VARIABLES.iter().map(|v| v.to_string()));
            return Err(ConfigError::problem(
                format!("environment variable {name}"),
                format!("not a setting (known: {})", known.join(", ")),
            ));
        }
    }
    Ok(())
}

/// Validated settings the server runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    pub issuer: String,
    pub database_url: String,
    /// `database_max_connections` (1 to 1000; default 4 on SQLite, where it sizes the readers'
    /// pool and the cold path's writer stays one connection, 8 on PostgreSQL) and
    /// `database_acquire_timeout` (100ms to 60s, default 10s: how long a request waits for a
    /// connection of any pool before it is answered `503`).
    pub database_pools: PoolSettings,
    /// Scope name to description, in name order.
    pub scopes: BTreeMap<String, String>,
    pub default_scopes: Vec<String>,
    pub access_token_lifetime: i64,
    pub refresh_token_lifetime: i64,
    /// Peers whose `X-Forwarded-For` is believed (see [`crate::client_ip`]); none by default.
    pub trusted_proxies: Vec<IpRange>,
    /// When set, a trusted peer's `X-Forwarded-For` is believed only if the request also
    /// carries this secret in [`crate::client_ip::PROXY_SECRET_HEADER`].
    pub proxy_secret: Option<ProxySecret>,
    /// `mtls_endpoint_base`: the origin (and path prefix) where a proxy listener that requires
    /// client certificates serves this server's endpoints; the metadata then announces RFC 8705
    /// `mtls_endpoint_aliases` under it. Needs `proxy_secret` (the certificate's only way in).
    pub mtls_endpoint_base: Option<String>,
    /// The access-token format of applications registered without a format of their own:
    /// opaque random strings (the default) or RFC 9068 JWTs. An application's own format
    /// (`--token-format`, the views) wins; refresh tokens are always opaque.
    pub access_token_format: AccessTokenFormat,
    /// The `aud` claim of JWT access tokens (default: the issuer).
    pub access_token_audience: String,
    /// Whether `issuer` was left to default (`http://` and the listen address), so that it
    /// follows the address actually bound ([`Settings::follow_bound_address`]).
    pub issuer_is_listen: bool,
    /// Whether `access_token_audience` was left to default, so that it follows the issuer to
    /// the bound address ([`Settings::follow_bound_address`]; the stack's front door is an
    /// override of the issuer, which the defaulted audience follows when validated).
    pub access_token_audience_is_issuer: bool,
    /// The `Cache-Control: max-age` of the JWKS, seconds; `keys rotate` waits longer than this
    /// before a new key signs.
    pub jwks_max_age: i64,
    /// How long an authorization code may be exchanged, seconds (default 60).
    pub authorization_code_lifetime: i64,
    /// How often `serve` deletes expired tokens, codes, sessions, revoked families and signing
    /// keys (see [`crate::purge`]), seconds, each wait jittered; 0 = never (default 3600).
    pub purge_interval: i64,
    /// How long a poll of the revocation stream (RFC 8936, `returnImmediately: false`) waits
    /// for an event before answering with none, seconds (default 25).
    pub ssf_poll_timeout: i64,
    /// Networks a revocation-stream push may go to although they are not public (loopback,
    /// private, link-local: [`crate::oauth::push_networks::is_public`]); none by default.
    pub ssf_push_networks: Vec<IpRange>,
    /// The most introspection lookups the token cache holds (0: no cache).
    pub token_cache_capacity: u64,
    /// `require_mfa_for_staff`: the operator views (`/o/applications/`, `/admin/`) need a
    /// sign-in with a second factor (issue 41).
    pub require_mfa_for_staff: bool,
    /// The key-encryption keys of the JWT signing keys, from `AUTHSERVER_SECRETS_SYSTEM` or the
    /// file of `secrets_system_file` (`AUTHSERVER_SECRETS_SYSTEM_FILE`); none configured: no
    /// signing key can be stored or read.
    pub key_encryption: Option<Arc<KeyEncryption>>,
    /// The `access_log:` section (`AUTHSERVER_ACCESS_LOG`, `AUTHSERVER_ACCESS_LOG_SAMPLE`).
    pub access_log: AccessLogSettings,
    /// `log_format:`, applied by the binary once the file is read (`LOG_FORMAT` wins).
    pub log_format: Option<LogFormat>,
    /// The origins whose pages may call the token and revocation endpoints (`cors_origins`;
    /// default none: a browser application on another origin is refused by its browser).
    pub cors_origins: Vec<String>,
    /// The origins whose pages may read the metadata and the JWKS (`cors_metadata_origins`;
    /// default `*`: they are public documents). `None`: no CORS there.
    pub cors_metadata_origins: Option<CorsOrigins>,
    /// Where Prometheus `/metrics` is served (`metrics_listen`, an address of its own, never
    /// the front door); default none.
    pub metrics_listen: Option<SocketAddr>,
    /// Who may register a client at `POST /o/register` (RFC 7591): nobody (the default), holders
    /// of an initial access token, or anyone for a public client.
    pub dynamic_registration: DynamicRegistration,
    /// The scopes a dynamically registered client may have (each declared; never
    /// `introspection` nor the revocation stream's). Default: `default_scopes` and OpenID
    /// Connect's.
    pub dynamic_registration_scopes: Vec<String>,
    /// Whether a DPoP proof at the token endpoint must carry a nonce this server issued (RFC
    /// 9449 §8; `dpop_nonce: required`, default `off`).
    pub dpop_nonce_required: bool,
    /// What these settings were validated from ([`Settings::with_overrides`]).
    pub document: Document,
}

/// The operator's policy for dynamic client registration (RFC 7591).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DynamicRegistration {
    /// No registration endpoint.
    Off,
    /// Registration with an initial access token issued by `authserver registration-token`.
    InitialAccessToken,
    /// Anyone may register a public client (PKCE required, https or loopback redirect URIs).
    Open,
}

impl DynamicRegistration {
    pub fn parse(name: &str) -> Option<DynamicRegistration> {
        match name {
            "off" => Some(DynamicRegistration::Off),
            "initial_access_token" => Some(DynamicRegistration::InitialAccessToken),
            "open" => Some(DynamicRegistration::Open),
            _ => None,
        }
    }
}

/// Which origins the CORS policy of an endpoint lets in.
pub use resource_server::cors::Origins as CorsOrigins;

pub use crate::domain::AccessTokenFormat;

pub const DEFAULT_CONFIG_PATH: &str = "config/authserver.yaml";
/// The shipped settings, used when no file is named and the default path has none (the binary
/// run from another directory).
pub const SHIPPED_CONFIG: &str = include_str!("../../config/authserver.yaml");
pub const DEFAULT_DATABASE_URL: &str = "sqlite://data/authserver.db";
const DEFAULT_LISTEN: &str = "127.0.0.1:8001";
const DEFAULT_ACCESS_TOKEN_LIFETIME: i64 = 36_000;
const DEFAULT_REFRESH_TOKEN_LIFETIME: i64 = 30 * 24 * 3600;
const DEFAULT_JWKS_MAX_AGE: i64 = 300;
const DEFAULT_AUTHORIZATION_CODE_LIFETIME: i64 = 60;
pub const DEFAULT_PURGE_INTERVAL: i64 = 3600;
const DEFAULT_SSF_POLL_TIMEOUT: i64 = 25;
/// The bounds of `database_max_connections`.
const DATABASE_MAX_CONNECTIONS: std::ops::RangeInclusive<u32> = 1..=1000;
/// The bounds of `database_acquire_timeout`.
const DATABASE_ACQUIRE_TIMEOUT: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(60);

/// The one configuration error of every binary (`resource_server::config_error`).
pub use resource_server::ConfigError;

impl Settings {
    /// Reads the file (a missing file at the default path means "all defaults"), applies the
    /// `AUTHSERVER_*` environment overrides, and validates.
    pub fn load(path: Option<&Path>) -> Result<Settings, ConfigError> {
        let names: Vec<String> = std::env::vars_os()
            .filter_map(|(name, _)| name.into_string().ok())
            .collect();
        check_environment(names.iter().map(String::as_str))?;
        Self::load_with_env(path, |key| std::env::var(key).ok())
    }

    /// Like [`Settings::load`], reading the environment through `env` (for tests).
    pub fn load_with_env(
        path: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Settings, ConfigError> {
        // A file named by the variable is named by it in a message about it.
        let (explicit, named) = match (path, env("AUTHSERVER_CONFIG")) {
            (Some(path), _) => (Some(path.to_path_buf()), path.display().to_string()),
            (None, Some(var)) => (
                Some(PathBuf::from(&var)),
                format!("AUTHSERVER_CONFIG={var}"),
            ),
            (None, None) => (None, DEFAULT_CONFIG_PATH.to_owned()),
        };
        let path = explicit
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_PATH));
        let file = path.display().to_string();
        // The bounded reader every binary uses: size, nesting and aliases limited.
        let text = match resource_server::yaml::read_file(
            &path,
            &resource_server::yaml::Limits::DEFAULT,
        ) {
            Ok(text) => text,
            Err(YamlError::Read(error))
                if explicit.is_none() && error.kind() == std::io::ErrorKind::NotFound =>
            {
                SHIPPED_CONFIG.to_owned()
            }
            Err(YamlError::Read(error)) => return Err(ConfigError::Read { file: named, error }),
            Err(error) => {
                return Err(ConfigError::Syntax {
                    file: named,
                    message: error.to_string(),
                });
            }
        };
        Self::validate(&Document::new(&file, &text), &env, false)
    }

    /// Parses YAML text (for tests and embedding), with no environment variables.
    pub fn from_yaml(text: &str, file: &str) -> Result<Settings, ConfigError> {
        Self::validate(&Document::new(file, text), &|_| None, false)
    }

    /// The same document validated again with `overrides` on top of its own (and the
    /// environment it was validated with): how the stack hands in its decisions.
    pub fn with_overrides(&self, overrides: &Overrides) -> Result<Settings, ConfigError> {
        let document = self.document.with_overrides(overrides);
        Self::validate(&document, &document.recorded_env(), true)
    }

    /// Validates `document` with the environment `env`; `all_read`: refuse an override that no
    /// key reads. The variables read are kept in the result's document.
    fn validate(
        document: &Document,
        env: &dyn Fn(&str) -> Option<String>,
        all_read: bool,
    ) -> Result<Settings, ConfigError> {
        let file = document.name.as_str();
        let raw = resource_server::yaml::from_str::<Option<RawSettings>>(&document.text)
            .map_err(|error| ConfigError::Syntax {
                file: file.to_owned(),
                message: error.to_string(),
            })?
            .unwrap_or_default();
        let recorder = Recorder::new(env);
        let env = |key: &str| recorder.get(key);
        let layers = Layers::new(file, &env, &document.overrides);
        let mut settings = Self::from_raw(raw, &Source { layers: &layers })?;
        if all_read {
            layers.check_all_read()?;
        }
        settings.document = document.having_read(recorder.into_seen());
        Ok(settings)
    }

    fn from_raw(raw: RawSettings, source: &Source<'_>) -> Result<Settings, ConfigError> {
        let file = source.layers.file;
        let env = source.layers.env;
        let (listen, issuer, issuer_is_listen) =
            source.listen_and_issuer(raw.listen, raw.issuer)?;
        let database_url = source.database_url(raw.database_url)?;
        let database_pools =
            source.database_pools(raw.database_max_connections, raw.database_acquire_timeout)?;
        let scopes = declared_scopes(raw.scopes, file)?;
        let default_scopes = source.default_scopes(raw.default_scopes, &scopes)?;
        let access_token_lifetime = source.lifetime(
            "access_token_lifetime",
            raw.access_token_lifetime,
            DEFAULT_ACCESS_TOKEN_LIFETIME,
        )?;
        let refresh_token_lifetime = source.lifetime(
            "refresh_token_lifetime",
            raw.refresh_token_lifetime,
            DEFAULT_REFRESH_TOKEN_LIFETIME,
        )?;
        let trusted_proxies = source.ip_ranges("trusted_proxies", raw.trusted_proxies)?;
        let ssf_push_networks = source.ip_ranges("ssf_push_networks", raw.ssf_push_networks)?;
        let proxy_secret = read_proxy_secret(
            source.layered("proxy_secret", raw.proxy_secret),
            source.layered("proxy_secret_file", raw.proxy_secret_file),
        )?;
        let mtls_endpoint_base =
            source.mtls_endpoint_base(raw.mtls_endpoint_base, proxy_secret.is_some())?;
        let access_token_format = source.access_token_format(raw.access_token_format)?;
        let (access_token_audience, access_token_audience_is_issuer) =
            source.audience(raw.access_token_audience, &issuer)?;
        let jwks_max_age =
            source.lifetime("jwks_max_age", raw.jwks_max_age, DEFAULT_JWKS_MAX_AGE)?;
        let authorization_code_lifetime = source.lifetime(
            "authorization_code_lifetime",
            raw.authorization_code_lifetime,
            DEFAULT_AUTHORIZATION_CODE_LIFETIME,
        )?;
        let purge_interval = source.purge_interval(raw.purge_interval)?;
        let ssf_poll_timeout = source.lifetime(
            "ssf_poll_timeout",
            raw.ssf_poll_timeout,
            DEFAULT_SSF_POLL_TIMEOUT,
        )?;
        let token_cache_capacity = source.token_cache_capacity(raw.token_cache_capacity)?;
        let require_mfa_for_staff =
            source.flag("require_mfa_for_staff", raw.require_mfa_for_staff)?;
        let cors_origins = match source.cors_origins("cors_origins", raw.cors_origins, false)? {
            Some(CorsOrigins::List(list)) => list,
            _ => Vec::new(),
        };
        let cors_metadata_origins = source
            .cors_origins("cors_metadata_origins", raw.cors_metadata_origins, true)?
            .or(Some(CorsOrigins::Any))
            .filter(|o| *o != CorsOrigins::List(Vec::new()));
        let key_encryption = source.key_encryption(raw.secrets_system_file)?;
        let dynamic_registration = source.dynamic_registration(raw.dynamic_registration)?;
        let dynamic_registration_scopes = source.dynamic_registration_scopes(
            raw.dynamic_registration_scopes,
            &scopes,
            &default_scopes,
        )?;
        let (origin, dpop_nonce) = source.pick("dpop_nonce", raw.dpop_nonce);
        let dpop_nonce_required = match dpop_nonce.as_deref().map(str::trim) {
            None | Some("off") => false,
            Some("required") => true,
            Some(other) => {
                return Err(fail(
                    &origin,
                    format!("\"{other}\" is not a policy (off or required)"),
                ));
            }
        };
        let (origin, metrics_listen) = source.pick("metrics_listen", raw.metrics_listen);
        let metrics_listen = metrics_listen
            .map(|text| {
                text.parse::<SocketAddr>().map_err(|_| {
                    fail(
                        &origin,
                        format!("\"{text}\" is not an address like 127.0.0.1:9101"),
                    )
                })
            })
            .transpose()?;
        let access_log = raw
            .access_log
            .unwrap_or_default()
            .resolve("AUTHSERVER", env)
            .map_err(|e| {
                let origin = match e.field.split_once(" (from ") {
                    Some((_, var)) => format!("environment variable {}", var.trim_end_matches(')')),
                    None => format!("{file}: key \"{}\"", e.field),
                };
                fail(&origin, format!("\"{}\": {}", e.value, e.problem))
            })?;
        Ok(Settings {
            listen,
            issuer,
            issuer_is_listen,
            database_url,
            database_pools,
            scopes,
            default_scopes,
            access_token_lifetime,
            refresh_token_lifetime,
            trusted_proxies,
            proxy_secret,
            mtls_endpoint_base,
            access_token_format,
            access_token_audience,
            access_token_audience_is_issuer,
            jwks_max_age,
            authorization_code_lifetime,
            purge_interval,
            ssf_poll_timeout,
            ssf_push_networks,
            token_cache_capacity,
            require_mfa_for_staff,
            key_encryption,
            access_log,
            log_format: raw.log_format,
            cors_origins,
            cors_metadata_origins,
            metrics_listen,
            dynamic_registration,
            dynamic_registration_scopes,
            dpop_nonce_required,
            document: Document::default(),
        })
    }

    /// The listener is bound to `bound`: a defaulted issuer names it (port 0 was asked, say),
    /// with a warning when clients elsewhere could not reach it by that name.
    pub fn follow_bound_address(&mut self, bound: SocketAddr) {
        if !self.issuer_is_listen {
            return;
        }
        self.issuer = format!("http://{bound}");
        if self.access_token_audience_is_issuer {
            self.access_token_audience = self.issuer.clone();
        }
        if !bound.ip().is_loopback() {
            tracing::warn!(
                issuer = %self.issuer,
                "the issuer defaults to the listen address: set issuer (AUTHSERVER_ISSUER) to the URL clients use"
            );
        }
    }

    /// Settings for tests: the example scopes, an in-memory database unless one is given.
    pub fn for_tests(database_url: &str) -> Settings {
        Settings {
            listen: DEFAULT_LISTEN.parse().expect("constant address"),
            issuer: "http://127.0.0.1:8000".into(),
            issuer_is_listen: false,
            database_url: database_url.into(),
            database_pools: PoolSettings::default(),
            scopes: example_scopes(),
            default_scopes: vec!["read".into(), "write".into(), "groups".into()],
            access_token_lifetime: DEFAULT_ACCESS_TOKEN_LIFETIME,
            refresh_token_lifetime: DEFAULT_REFRESH_TOKEN_LIFETIME,
            trusted_proxies: IpRange::loopback(),
            proxy_secret: None,
            mtls_endpoint_base: None,
            access_token_format: AccessTokenFormat::Opaque,
            access_token_audience: "http://127.0.0.1:8000".into(),
            access_token_audience_is_issuer: true,
            jwks_max_age: DEFAULT_JWKS_MAX_AGE,
            authorization_code_lifetime: DEFAULT_AUTHORIZATION_CODE_LIFETIME,
            purge_interval: DEFAULT_PURGE_INTERVAL,
            ssf_poll_timeout: DEFAULT_SSF_POLL_TIMEOUT,
            ssf_push_networks: Vec::new(),
            token_cache_capacity: crate::store::DEFAULT_TOKEN_CACHE_CAPACITY,
            require_mfa_for_staff: false,
            key_encryption: None,
            access_log: AccessLogSettings::default(),
            log_format: None,
            cors_origins: Vec::new(),
            cors_metadata_origins: Some(CorsOrigins::Any),
            metrics_listen: None,
            dynamic_registration: DynamicRegistration::Off,
            dynamic_registration_scopes: vec![
                "read".into(),
                "write".into(),
                "groups".into(),
                "openid".into(),
                "profile".into(),
                "email".into(),
            ],
            dpop_nonce_required: false,
            document: Document::default(),
        }
    }
}

/// Where each setting comes from: the stack's override, else `AUTHSERVER_<KEY>` when set, else
/// the file's key. Each value remembers its origin, so that an error names the file key, the
/// variable or the override.
struct Source<'a> {
    layers: &'a Layers<'a>,
}

fn fail(origin: &str, message: String) -> ConfigError {
    ConfigError::problem(origin, message)
}

impl Source<'_> {
    /// The value of `key` and where it came from.
    fn pick(&self, key: &str, from_file: Option<String>) -> (String, Option<String>) {
        let picked = self.layered(key, from_file);
        (picked.origin, picked.value)
    }

    /// The value of `key`, its origin and its layer.
    fn layered(&self, key: &str, from_file: Option<String>) -> resource_server::layers::Picked {
        let var = format!("AUTHSERVER_{}", key.to_uppercase());
        self.layers.pick(key, Some(&var), from_file)
    }

    /// `listen`, and `issuer` (default: `http://` and the listen address, no trailing `/`), and
    /// whether the issuer was left to default.
    fn listen_and_issuer(
        &self,
        listen: Option<String>,
        issuer: Option<String>,
    ) -> Result<(SocketAddr, String, bool), ConfigError> {
        let (origin, listen) = self.pick("listen", listen);
        let listen_text = listen.unwrap_or_else(|| DEFAULT_LISTEN.into());
        let listen = listen_text.parse::<SocketAddr>().map_err(|_| {
            fail(
                &origin,
                format!("\"{listen_text}\" is not an address like 127.0.0.1:8001"),
            )
        })?;
        let (origin, issuer) = self.pick("issuer", issuer);
        let defaulted = issuer.is_none();
        let issuer = issuer.unwrap_or_else(|| format!("http://{listen}"));
        if !(issuer.starts_with("http://") || issuer.starts_with("https://")) {
            return Err(fail(&origin, format!("\"{issuer}\" is not an http(s) URL")));
        }
        Ok((listen, issuer.trim_end_matches('/').to_owned(), defaulted))
    }

    /// `mtls_endpoint_base`: an `https://` URL (no query or fragment; trailing `/` dropped),
    /// only with a proxy secret: without one no certificate ever reaches this server, and the
    /// aliases would promise what it cannot do.
    fn mtls_endpoint_base(
        &self,
        from_file: Option<String>,
        has_proxy_secret: bool,
    ) -> Result<Option<String>, ConfigError> {
        let (origin, base) = self.pick("mtls_endpoint_base", from_file);
        let Some(base) = base.filter(|b| !b.trim().is_empty()) else {
            return Ok(None);
        };
        let base = base.trim();
        let host = base.strip_prefix("https://").unwrap_or("");
        if host.is_empty()
            || host.starts_with('/')
            || base.contains(['?', '#'])
            || base.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(fail(
                &origin,
                format!(
                    "\"{base}\" is not an https:// URL like https://mtls.auth.example.com \
                     (mutual TLS needs TLS)"
                ),
            ));
        }
        if !has_proxy_secret {
            return Err(fail(
                &origin,
                "needs proxy_secret (or proxy_secret_file): the client certificate reaches this \
                 server only from the proxy, proven by that secret"
                    .into(),
            ));
        }
        Ok(Some(base.trim_end_matches('/').to_owned()))
    }

    fn database_url(&self, from_file: Option<String>) -> Result<String, ConfigError> {
        let (origin, database_url) = self.pick("database_url", from_file);
        let database_url = database_url.unwrap_or_else(|| DEFAULT_DATABASE_URL.into());
        if !["sqlite:", "postgres://", "postgresql://"]
            .iter()
            .any(|p| database_url.starts_with(p))
        {
            return Err(fail(
                &origin,
                format!(
                    "\"{}\" must start with sqlite: or postgres://",
                    redact_url(&database_url)
                ),
            ));
        }
        Ok(database_url)
    }

    /// `database_max_connections` (a whole number in [`DATABASE_MAX_CONNECTIONS`]; default the
    /// backend's, [`default_max_connections`]) and `database_acquire_timeout` (a
    /// duration in [`DATABASE_ACQUIRE_TIMEOUT`]; default [`DEFAULT_ACQUIRE_TIMEOUT`]).
    fn database_pools(
        &self,
        max_connections: Option<i64>,
        acquire_timeout: Option<RawDuration>,
    ) -> Result<PoolSettings, ConfigError> {
        let (origin, max) = self.pick(
            "database_max_connections",
            max_connections.map(|n| n.to_string()),
        );
        let max_connections = max
            .map(|text| {
                text.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| DATABASE_MAX_CONNECTIONS.contains(n))
                    .ok_or_else(|| {
                        fail(
                            &origin,
                            format!(
                                "\"{text}\" is not a number of connections from {} to {} \
                                 (default {} on SQLite, {} on PostgreSQL)",
                                DATABASE_MAX_CONNECTIONS.start(),
                                DATABASE_MAX_CONNECTIONS.end(),
                                default_max_connections(Backend::Sqlite),
                                default_max_connections(Backend::Postgres)
                            ),
                        )
                    })
            })
            .transpose()?;
        let (origin, wait) = self.pick(
            "database_acquire_timeout",
            acquire_timeout.map(|v| v.to_string()),
        );
        let acquire_timeout = match wait {
            None => DEFAULT_ACQUIRE_TIMEOUT,
            Some(text) => resource_server::settings::parse_duration(&text)
                .and_then(|wait| {
                    if DATABASE_ACQUIRE_TIMEOUT.contains(&wait) {
                        Ok(wait)
                    } else {
                        // Duration's Debug: "100ms", "60s".
                        Err(format!(
                            "must be from {:?} to {:?}",
                            DATABASE_ACQUIRE_TIMEOUT.start(),
                            DATABASE_ACQUIRE_TIMEOUT.end()
                        ))
                    }
                })
                .map_err(|problem| {
                    fail(
                        &origin,
                        format!("\"{text}\" is not a wait ({problem}; like 500ms, 10s or 30s)"),
                    )
                })?,
        };
        Ok(PoolSettings {
            max_connections,
            acquire_timeout,
        })
    }

    /// `default_scopes` (a YAML list in the file; commas and/or spaces in the environment), each
    /// declared, never `introspection`.
    fn default_scopes(
        &self,
        from_file: Option<Vec<String>>,
        scopes: &BTreeMap<String, String>,
    ) -> Result<Vec<String>, ConfigError> {
        let (origin, defaults) = self.pick("default_scopes", from_file.map(|v| v.join(" ")));
        let default_scopes: Vec<String> = match defaults {
            Some(text) => list_items(&text).map(str::to_owned).collect(),
            None => ["read", "write", "groups"]
                .iter()
                .filter(|s| scopes.contains_key(**s))
                .map(|s| s.to_string())
                .collect(),
        };
        if let Some(unknown) = default_scopes.iter().find(|s| !scopes.contains_key(*s)) {
            return Err(fail(
                &origin,
                format!("scope \"{unknown}\" is not declared in scopes"),
            ));
        }
        if default_scopes.iter().any(|s| s == INTROSPECTION_SCOPE) {
            return Err(fail(
                &origin,
                format!(
                    "scope \"{INTROSPECTION_SCOPE}\" cannot be a default: it is granted only when asked for, to applications allowed to introspect"
                ),
            ));
        }
        Ok(default_scopes)
    }

    /// A positive duration in seconds; `default` when absent.
    fn lifetime(
        &self,
        key: &str,
        from_file: Option<RawDuration>,
        default: i64,
    ) -> Result<i64, ConfigError> {
        let (origin, value) = self.pick(key, from_file.map(|v| v.to_string()));
        let Some(text) = value else {
            return Ok(default);
        };
        positive_seconds(&text).map_err(|problem| {
            fail(
                &origin,
                format!(
                    "\"{text}\" is not a positive duration ({problem}; like 36000, 90s, 15m or 10h)"
                ),
            )
        })
    }

    /// A list of origins (a YAML list; commas and/or spaces in the environment), each exactly
    /// `scheme://host[:port]`; `*` alone when `any` may be. `None`: not set.
    fn cors_origins(
        &self,
        key: &str,
        from_file: Option<Vec<String>>,
        any: bool,
    ) -> Result<Option<CorsOrigins>, ConfigError> {
        let (origin, value) = self.pick(key, from_file.map(|v| v.join(",")));
        let Some(text) = value else {
            return Ok(None);
        };
        let items: Vec<&str> = list_items(&text).collect();
        if any && items == ["*"] {
            return Ok(Some(CorsOrigins::Any));
        }
        let mut list = Vec::with_capacity(items.len());
        for item in items {
            resource_server::cors::check_origin(item).map_err(|problem| {
                let star = if any { " (or * alone)" } else { "" };
                fail(&origin, format!("{problem}{star}"))
            })?;
            list.push(item.to_owned());
        }
        Ok(Some(CorsOrigins::List(list)))
    }

    /// A list of IP addresses or CIDR ranges (`trusted_proxies`, `ssf_push_networks`); none
    /// by default.
    fn ip_ranges(
        &self,
        key: &'static str,
        from_file: Option<Vec<String>>,
    ) -> Result<Vec<IpRange>, ConfigError> {
        let (origin, proxies) = self.pick(key, from_file.map(|v| v.join(",")));
        let Some(text) = proxies else {
            return Ok(Vec::new());
        };
        list_items(&text)
            .map(|entry| {
                entry.parse::<IpRange>().map_err(|()| {
                    fail(
                        &origin,
                        format!(
                            "\"{entry}\" is not an IP address or CIDR range (like 10.0.0.0/8 or ::1)"
                        ),
                    )
                })
            })
            .collect()
    }

    fn access_token_format(
        &self,
        from_file: Option<String>,
    ) -> Result<AccessTokenFormat, ConfigError> {
        let (origin, format) = self.pick("access_token_format", from_file);
        match format.as_deref().map(str::trim) {
            None => Ok(AccessTokenFormat::Opaque),
            Some(name) => AccessTokenFormat::parse(name).ok_or_else(|| {
                fail(
                    &origin,
                    format!("\"{name}\" is not a token format (opaque or jwt)"),
                )
            }),
        }
    }

    /// `access_token_audience`, and whether it was left to default (the issuer).
    fn audience(
        &self,
        from_file: Option<String>,
        issuer: &str,
    ) -> Result<(String, bool), ConfigError> {
        let (origin, audience) = self.pick("access_token_audience", from_file);
        match audience {
            None => Ok((issuer.to_owned(), true)),
            Some(text) if !text.trim().is_empty() => Ok((text.trim().to_owned(), false)),
            Some(_) => Err(fail(&origin, "the audience cannot be empty".into())),
        }
    }

    /// `purge_interval` in seconds; zero in any unit (0, 0s, 0h) turns the purge off.
    fn purge_interval(&self, from_file: Option<RawDuration>) -> Result<i64, ConfigError> {
        let (origin, purge) = self.pick("purge_interval", from_file.map(|v| v.to_string()));
        match purge {
            None => Ok(DEFAULT_PURGE_INTERVAL),
            Some(text)
                if resource_server::settings::parse_duration(&text)
                    .is_ok_and(|d| d.is_zero()) =>
            {
                Ok(0)
            }
            Some(text) => positive_seconds(&text).map_err(|problem| {
                fail(
                    &origin,
                    format!("\"{text}\" is not a duration ({problem}; like 3600, 15m or 1h; 0 turns the purge off)"),
                )
            }),
        }
    }

    /// A yes/no setting: `true`/`false` in the file, `true`/`false`/`1`/`0` in the environment;
    /// absent: false.
    fn flag(&self, key: &str, from_file: Option<bool>) -> Result<bool, ConfigError> {
        let (origin, value) = self.pick(key, from_file.map(|b| b.to_string()));
        match value.as_deref().map(str::trim) {
            None => Ok(false),
            Some("true" | "1") => Ok(true),
            Some("false" | "0") => Ok(false),
            Some(other) => Err(fail(&origin, format!("\"{other}\" is not true or false"))),
        }
    }

    /// The token cache's capacity in entries: a whole number, 0 for no cache.
    fn token_cache_capacity(&self, from_file: Option<u64>) -> Result<u64, ConfigError> {
        let (origin, capacity) =
            self.pick("token_cache_capacity", from_file.map(|n| n.to_string()));
        match capacity {
            None => Ok(crate::store::DEFAULT_TOKEN_CACHE_CAPACITY),
            Some(text) => text.trim().parse().map_err(|_| {
                fail(
                    &origin,
                    format!(
                        "\"{text}\" is not a number of entries (like 100000; 0 turns the cache off)"
                    ),
                )
            }),
        }
    }

    /// `dynamic_registration`: `off` (the default), `initial_access_token` or `open`.
    fn dynamic_registration(
        &self,
        from_file: Option<String>,
    ) -> Result<DynamicRegistration, ConfigError> {
        let (origin, policy) = self.pick("dynamic_registration", from_file);
        match policy.as_deref().map(str::trim) {
            None => Ok(DynamicRegistration::Off),
            Some(name) => DynamicRegistration::parse(name).ok_or_else(|| {
                fail(
                    &origin,
                    format!("\"{name}\" is not a policy (off, initial_access_token or open)"),
                )
            }),
        }
    }

    /// `dynamic_registration_scopes` (default: the default scopes and OpenID Connect's), each
    /// declared, none that needs a permission (`introspection`, `ssf.*`).
    fn dynamic_registration_scopes(
        &self,
        from_file: Option<Vec<String>>,
        scopes: &BTreeMap<String, String>,
        default_scopes: &[String],
    ) -> Result<Vec<String>, ConfigError> {
        let (origin, given) = self.pick(
            "dynamic_registration_scopes",
            from_file.map(|v| v.join(" ")),
        );
        let list: Vec<String> = match given {
            Some(text) => list_items(&text).map(str::to_owned).collect(),
            None => default_scopes
                .iter()
                .cloned()
                .chain(
                    crate::protocol::oidc::SCOPES
                        .iter()
                        .map(|(name, _)| name.to_string()),
                )
                .collect(),
        };
        let mut out: Vec<String> = Vec::new();
        for scope in list {
            if crate::domain::needs_permission(&scope) {
                return Err(fail(
                    &origin,
                    format!(
                        "scope \"{scope}\" needs a permission an operator grants: a client that registers itself cannot have it"
                    ),
                ));
            }
            if !scopes.contains_key(&scope)
                && crate::protocol::oidc::scope_description(&scope).is_none()
            {
                return Err(fail(
                    &origin,
                    format!("scope \"{scope}\" is not declared in scopes"),
                ));
            }
            if !out.contains(&scope) {
                out.push(scope);
            }
        }
        Ok(out)
    }

    /// The key-encryption keys: `AUTHSERVER_SECRETS_SYSTEM` (never in the file), or the file of
    /// `secrets_system_file` (one secret a line, the owner's only:
    /// [`crate::key_encryption::not_world_readable`], checked before the file is read), by the
    /// one rule of [`resource_server::layers::secret_or_file`]: the higher layer wins, both in
    /// one layer are refused.
    fn key_encryption(
        &self,
        from_file: Option<String>,
    ) -> Result<Option<Arc<KeyEncryption>>, ConfigError> {
        let text = self.layers.pick("secrets_system", Some(SECRETS_VAR), None);
        let file = self.layered("secrets_system_file", from_file);
        let file_origin = file.origin.clone();
        let origin_of = |path: &std::path::Path| format!("{file_origin}: file {}", path.display());
        let Some(secret) = resource_server::layers::secret_or_checked_file(
            "the key-encryption secrets",
            text,
            file,
            |path| {
                crate::key_encryption::not_world_readable(path)
                    .map_err(|problem| fail(&origin_of(path), problem))
            },
        )?
        else {
            return Ok(None);
        };
        let kek = match &secret.path {
            Some(path) => {
                let origin = origin_of(path);
                KeyEncryption::from_text(&secret.text, &origin)
                    .map_err(|problem| fail(&origin, problem))?
            }
            None => {
                let secrets: Vec<&str> = list_items(&secret.text).collect();
                KeyEncryption::from_secrets(&secrets, &secret.origin)
                    .map_err(|problem| fail(&secret.origin, problem))?
            }
        };
        Ok(Some(Arc::new(kek)))
    }
}

/// `scopes` (the example scopes when absent), each name a valid RFC 6749 scope-token.
fn declared_scopes(
    scopes: Option<BTreeMap<String, String>>,
    file: &str,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let scopes = scopes.unwrap_or_else(example_scopes);
    for name in scopes.keys() {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\')
        {
            return Err(fail(
                &format!("{file}: key \"scopes\""),
                format!("\"{name}\" is not a valid scope name"),
            ));
        }
    }
    Ok(scopes)
}

/// The proxy secret, given as text (`proxy_secret`) or as a file holding it (`proxy_secret_file`),
/// by the one rule of [`resource_server::layers::secret_or_file`]. Errors name the key, variable
/// or override (and the file), never the secret.
fn read_proxy_secret(
    text: resource_server::layers::Picked,
    file: resource_server::layers::Picked,
) -> Result<Option<ProxySecret>, ConfigError> {
    let Some(secret) = resource_server::layers::secret_or_file("the proxy secret", text, file)?
    else {
        return Ok(None);
    };
    ProxySecret::new(secret.text.trim_end())
        .map(Some)
        .map_err(|problem| ConfigError::problem(secret.origin, problem))
}

/// The scopes of the seed's example configuration.
pub fn example_scopes() -> BTreeMap<String, String> {
    [
        ("read", "Read scope"),
        ("write", "Write scope"),
        ("groups", "Access to your groups"),
        ("introspection", "Introspect token scope"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtls_endpoint_base_needs_https_and_the_proxy_secret() {
        let secret = "proxy_secret: 0123456789abcdef0123\n";
        let s = Settings::from_yaml(
            &format!("{secret}mtls_endpoint_base: https://mtls.auth.test/"),
            "c.yaml",
        )
        .unwrap();
        assert_eq!(
            s.mtls_endpoint_base.as_deref(),
            Some("https://mtls.auth.test")
        );
        assert_eq!(
            Settings::from_yaml(secret, "c.yaml")
                .unwrap()
                .mtls_endpoint_base,
            None
        );
        for (yaml, says) in [
            (
                "mtls_endpoint_base: https://mtls.auth.test",
                "needs proxy_secret",
            ),
            (
                &format!("{secret}mtls_endpoint_base: http://mtls.auth.test") as &str,
                "https://",
            ),
            (&format!("{secret}mtls_endpoint_base: https://"), "https://"),
            (
                &format!("{secret}mtls_endpoint_base: https://a.test/?x=1"),
                "https://",
            ),
        ] {
            let error = Settings::from_yaml(yaml, "c.yaml").unwrap_err().to_string();
            assert!(
                error.contains("mtls_endpoint_base") && error.contains(says),
                "{yaml}: {error}"
            );
        }
    }

    #[test]
    fn dynamic_registration_policy_and_scopes() {
        let shipped = Settings::from_yaml(SHIPPED_CONFIG, "authserver.yaml").unwrap();
        assert_eq!(shipped.dynamic_registration, DynamicRegistration::Off);
        assert_eq!(
            shipped.dynamic_registration_scopes,
            ["read", "write", "groups", "openid", "profile", "email"]
        );
        let open = Settings::from_yaml(
            "dynamic_registration: open\ndynamic_registration_scopes: [read, openid, read]",
            "c.yaml",
        )
        .unwrap();
        assert_eq!(open.dynamic_registration, DynamicRegistration::Open);
        assert_eq!(open.dynamic_registration_scopes, ["read", "openid"]);
        for (yaml, says) in [
            ("dynamic_registration: anyone", "is not a policy"),
            (
                "dynamic_registration_scopes: [read, introspection]",
                "needs a permission",
            ),
            (
                "dynamic_registration_scopes: [ssf.read]",
                "needs a permission",
            ),
            ("dynamic_registration_scopes: [admin]", "is not declared"),
        ] {
            let error = Settings::from_yaml(yaml, "c.yaml").unwrap_err().to_string();
            assert!(error.contains(says), "{yaml}: {error}");
        }
    }

    #[test]
    fn defaults_match_the_example() {
        let s = Settings::from_yaml("", "x.yaml").unwrap();
        assert_eq!(s.access_token_lifetime, 36000);
        assert_eq!(s.default_scopes, ["read", "write", "groups"]);
        assert_eq!(s.scopes["introspection"], "Introspect token scope");
        assert_eq!(s.database_url, DEFAULT_DATABASE_URL);
    }

    #[test]
    fn errors_name_file_key_and_value() {
        let err = Settings::from_yaml("default_scopes: [read, nope]", "config/a.yaml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "config/a.yaml: key \"default_scopes\": scope \"nope\" is not declared in scopes"
        );
        let err = Settings::from_yaml("listen: nowhere", "config/a.yaml").unwrap_err();
        assert!(
            err.to_string()
                .contains("config/a.yaml: key \"listen\": \"nowhere\""),
            "{err}"
        );
        let err = Settings::from_yaml("access_token_lifetime: -5", "c.yaml").unwrap_err();
        assert!(
            err.to_string()
                .contains("c.yaml: key \"access_token_lifetime\": \"-5\""),
            "{err}"
        );
        let err = Settings::from_yaml("colour: blue", "c.yaml").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("c.yaml: unknown field `colour`"),
            "{err}"
        );
    }

    #[test]
    fn environment_overrides_name_the_variable() {
        let env = |key: &str| match key {
            "AUTHSERVER_LISTEN" => Some("127.0.0.1:9999".to_owned()),
            "AUTHSERVER_ACCESS_TOKEN_LIFETIME" => Some("soon".to_owned()),
            _ => None,
        };
        let err = Settings::load_with_env(Some(Path::new("/nonexistent/a.yaml")), env).unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/a.yaml: cannot read"),
            "{err}"
        );
        let dir = std::env::temp_dir().join(format!("tg-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("a.yaml");
        std::fs::write(&file, "issuer: https://auth.example/\n").unwrap();
        let err = Settings::load_with_env(Some(&file), env).unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment variable AUTHSERVER_ACCESS_TOKEN_LIFETIME: \"soon\" is not a positive duration (expected a duration such as 500ms, 3s, 5m, 1h or 1d; like 36000, 90s, 15m or 10h)"
        );
        let ok = Settings::load_with_env(Some(&file), |k| {
            (k == "AUTHSERVER_LISTEN").then(|| "127.0.0.1:9999".to_owned())
        })
        .unwrap();
        assert_eq!(ok.listen.port(), 9999);
        assert_eq!(ok.issuer, "https://auth.example");
    }

    #[test]
    fn introspection_is_never_a_default_scope() {
        let err = Settings::from_yaml("default_scopes: [read, introspection]", "config/a.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "config/a.yaml: key \"default_scopes\": scope \"introspection\" cannot be a default"
            ),
            "{err}"
        );
        let env =
            |key: &str| (key == "AUTHSERVER_DEFAULT_SCOPES").then(|| "introspection".to_owned());
        let err = Settings::load_with_env(Some(Path::new("/dev/null")), env).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "environment variable AUTHSERVER_DEFAULT_SCOPES: scope \"introspection\""
            ),
            "{err}"
        );
    }

    #[test]
    fn trusted_proxies_default_to_none_and_are_validated() {
        let s = Settings::from_yaml("", "x.yaml").unwrap();
        assert!(s.trusted_proxies.is_empty());
        assert!(s.proxy_secret.is_none());
        let s = Settings::from_yaml(
            "trusted_proxies: [10.0.0.0/8, 'fd00::/8', 192.0.2.1]",
            "x.yaml",
        )
        .unwrap();
        let shown: Vec<String> = s.trusted_proxies.iter().map(|r| r.to_string()).collect();
        assert_eq!(shown, ["10.0.0.0/8", "fd00::/8", "192.0.2.1/32"]);
        assert!(
            Settings::from_yaml("trusted_proxies: []", "x.yaml")
                .unwrap()
                .trusted_proxies
                .is_empty()
        );
        let err = Settings::from_yaml(
            "trusted_proxies: [10.0.0.0/8, 10.0.0.0/33]",
            "config/a.yaml",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "config/a.yaml: key \"trusted_proxies\": \"10.0.0.0/33\" is not an IP address or CIDR range (like 10.0.0.0/8 or ::1)"
        );
        let env = |key: &str| {
            (key == "AUTHSERVER_TRUSTED_PROXIES").then(|| " 10.1.0.0/16 , ::1".to_owned())
        };
        let s = Settings::load_with_env(Some(Path::new("/dev/null")), env).unwrap();
        let shown: Vec<String> = s.trusted_proxies.iter().map(|r| r.to_string()).collect();
        assert_eq!(shown, ["10.1.0.0/16", "::1/128"]);
        let env =
            |key: &str| (key == "AUTHSERVER_TRUSTED_PROXIES").then(|| "proxy.local".to_owned());
        let err = Settings::load_with_env(Some(Path::new("/dev/null")), env).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "environment variable AUTHSERVER_TRUSTED_PROXIES: \"proxy.local\" is not"
            ),
            "{err}"
        );
    }

    #[test]
    fn the_shipped_file_is_valid() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/authserver.yaml");
        let s = Settings::load_with_env(Some(&file), |_| None).unwrap();
        assert!(s.trusted_proxies.is_empty());
        assert!(s.proxy_secret.is_none());
        assert_eq!(s.default_scopes, ["read", "write", "groups"]);
    }

    #[test]
    fn the_file_is_read_with_the_bounded_yaml_reader() {
        let path = std::env::temp_dir().join(format!(
            "tg-deep-{}.yaml",
            crate::secrets::random_client_id()
        ));
        std::fs::write(
            &path,
            format!("scopes: {}{}\n", "[".repeat(200), "]".repeat(200)),
        )
        .unwrap();
        let error = Settings::load_with_env(Some(&path), |_| None)
            .unwrap_err()
            .to_string();
        let _ = std::fs::remove_file(&path);
        assert!(error.contains("nested deeper than 128 levels"), "{error}");
        assert!(error.contains(&path.display().to_string()), "{error}");
    }

    #[test]
    fn the_stacks_overrides_are_validated_and_named_and_a_defaulted_audience_follows() {
        let env = |key: &str| (key == "AUTHSERVER_ISSUER").then(|| "http://127.0.0.1:1".to_owned());
        let read = Settings::validate(&Document::new("c.yaml", ""), &env, false).unwrap();
        assert_eq!(read.issuer, "http://127.0.0.1:1");
        let moved = read
            .with_overrides(&Overrides::from([("issuer", "http://127.0.0.1:9000")]))
            .unwrap();
        assert_eq!(
            moved.issuer, "http://127.0.0.1:9000",
            "the override wins over the variable"
        );
        assert_eq!(moved.access_token_audience, "http://127.0.0.1:9000");
        let err = read
            .with_overrides(&Overrides::from([("issuer", "ftp://x")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("key \"issuer\" set by the stack: "),
            "{err}"
        );
        let err = read
            .with_overrides(&Overrides::from([("isuer", "http://x")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("key \"isuer\" set by the stack: not a setting"),
            "{err}"
        );
    }

    #[test]
    fn a_defaulted_issuer_names_the_bound_address_and_a_given_one_stays() {
        let env = |key: &str| (key == "AUTHSERVER_LISTEN").then(|| "127.0.0.1:0".to_owned());
        let mut defaulted = Settings::validate(&Document::new("f.yaml", ""), &env, false).unwrap();
        assert!(defaulted.issuer_is_listen);
        defaulted.follow_bound_address("127.0.0.1:9123".parse().unwrap());
        assert_eq!(defaulted.issuer, "http://127.0.0.1:9123");
        assert_eq!(defaulted.access_token_audience, "http://127.0.0.1:9123");
        let given = |key: &str| match key {
            "AUTHSERVER_LISTEN" => Some("127.0.0.1:0".to_owned()),
            "AUTHSERVER_ISSUER" => Some("https://auth.example.com".to_owned()),
            _ => None,
        };
        let mut given = Settings::validate(&Document::new("f.yaml", ""), &given, false).unwrap();
        given.follow_bound_address("127.0.0.1:9123".parse().unwrap());
        assert_eq!(given.issuer, "https://auth.example.com");
    }

    /// `AUTHSERVER_SECRETS_SYSTEM` and `secrets_system_file` follow the one rule of a secret or
    /// its file: the environment wins over the file (both used to be refused whatever their
    /// layers), both in the environment are refused, and the file must be the owner's only.
    #[test]
    fn the_key_encryption_secrets_follow_the_one_rule() {
        use std::os::unix::fs::PermissionsExt;
        const A: &str = "a-secret-of-at-least-thirty-two-characters";
        const B: &str = "another-secret-of-thirty-two-characters-or-more";
        let dir = std::env::temp_dir().join(format!("tg-kek-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("secrets-system");
        std::fs::write(&path, format!("{B}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let yaml = format!("secrets_system_file: {}", path.display());
        let ids = |s: &Settings| {
            let kek = s.key_encryption.as_ref().unwrap();
            kek.ids()
                .iter()
                .map(|id| id.to_string())
                .collect::<Vec<_>>()
        };
        let of = |secret: &str| {
            KeyEncryption::from_secrets(&[secret], "t")
                .unwrap()
                .ids()
                .iter()
                .map(|id| id.to_string())
                .collect::<Vec<_>>()
        };
        let env_a = |key: &str| (key == SECRETS_VAR).then(|| A.to_owned());
        let from_file = Settings::validate(&Document::new("c.yaml", &yaml), &|_| None, false);
        assert_eq!(ids(&from_file.unwrap()), of(B));
        let s = Settings::validate(&Document::new("c.yaml", &yaml), &env_a, false).unwrap();
        assert_eq!(ids(&s), of(A), "the environment wins over the file");
        let file_var = path.display().to_string();
        let both = |key: &str| match key {
            SECRETS_VAR => Some(A.to_owned()),
            "AUTHSERVER_SECRETS_SYSTEM_FILE" => Some(file_var.clone()),
            _ => None,
        };
        let err = Settings::validate(&Document::new("c.yaml", ""), &both, false)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "environment variable AUTHSERVER_SECRETS_SYSTEM_FILE: environment variable \
             AUTHSERVER_SECRETS_SYSTEM is set too: give the key-encryption secrets once, as text \
             or as a file"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Settings::validate(&Document::new("c.yaml", &yaml), &|_| None, false)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "c.yaml: key \"secrets_system_file\": file {0}: mode 0644: others may read it \
                 or its group may write it; make it the owner's (chmod 600 {0}, or 640 to share \
                 it with a group)",
                path.display()
            )
        );
        assert!(!err.contains(B));
        // The mode is checked before the file is read: an empty file others may read is refused
        // for its mode, not for being empty.
        std::fs::write(&path, "").unwrap();
        let err = Settings::validate(&Document::new("c.yaml", &yaml), &|_| None, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains(": mode 0644: others may read it"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn access_token_format_audience_and_jwks_max_age() {
        let s = Settings::from_yaml("issuer: https://auth.example/", "x.yaml").unwrap();
        assert_eq!(s.access_token_format, AccessTokenFormat::Opaque);
        assert_eq!(s.access_token_audience, "https://auth.example");
        assert_eq!(s.jwks_max_age, 300);
        let s = Settings::from_yaml(
            "access_token_format: jwt\naccess_token_audience: https://api.example\njwks_max_age: 60",
            "x.yaml",
        )
        .unwrap();
        assert_eq!(s.access_token_format, AccessTokenFormat::Jwt);
        assert_eq!(s.access_token_audience, "https://api.example");
        assert_eq!(s.jwks_max_age, 60);
        // A moved issuer (the stack's override) takes a defaulted audience along, never a
        // configured one.
        let issuer = Overrides::from([("issuer", "http://127.0.0.1:9100")]);
        let moved = s.with_overrides(&issuer).unwrap();
        assert_eq!(moved.access_token_audience, "https://api.example");
        let moved = Settings::from_yaml("", "x.yaml")
            .unwrap()
            .with_overrides(&issuer)
            .unwrap();
        assert_eq!(moved.issuer, "http://127.0.0.1:9100");
        assert_eq!(moved.access_token_audience, "http://127.0.0.1:9100");
        let err = Settings::from_yaml("access_token_format: JWT", "c.yaml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "c.yaml: key \"access_token_format\": \"JWT\" is not a token format (opaque or jwt)"
        );
        let env = |key: &str| match key {
            "AUTHSERVER_ACCESS_TOKEN_FORMAT" => Some("jwt".to_owned()),
            "AUTHSERVER_JWKS_MAX_AGE" => Some("0".to_owned()),
            _ => None,
        };
        let err = Settings::load_with_env(Some(Path::new("/dev/null")), env).unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment variable AUTHSERVER_JWKS_MAX_AGE: \"0\" is not a positive duration (must be at least 1s; like 36000, 90s, 15m or 10h)"
        );
        // Huge values would overflow unix-time arithmetic (exp, a key's retirement): refused.
        for huge in ["9223372036854775807", "100000h"] {
            let env =
                |key: &str| (key == "AUTHSERVER_ACCESS_TOKEN_LIFETIME").then(|| huge.to_owned());
            let err = Settings::load_with_env(Some(Path::new("/dev/null")), env).unwrap_err();
            assert!(
                err.to_string()
                    .contains("is longer than 315360000 s (ten years)"),
                "{err}"
            );
        }
        let env = |key: &str| (key == "AUTHSERVER_ACCESS_TOKEN_AUDIENCE").then(|| " ".to_owned());
        let err = Settings::load_with_env(Some(Path::new("/dev/null")), env).unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment variable AUTHSERVER_ACCESS_TOKEN_AUDIENCE: the audience cannot be empty"
        );
    }

    #[test]
    fn durations_read_as_in_every_binary() {
        let env = |key: &str| (key == "AUTHSERVER_ACCESS_TOKEN_LIFETIME").then(|| "10h".to_owned());
        let s = Settings::load_with_env(Some(Path::new("/dev/null")), env).unwrap();
        assert_eq!(s.access_token_lifetime, 36_000);
        let s = Settings::from_yaml(
            "access_token_lifetime: 15m\nrefresh_token_lifetime: 720h\njwks_max_age: 300",
            "x.yaml",
        )
        .unwrap();
        assert_eq!(
            (
                s.access_token_lifetime,
                s.refresh_token_lifetime,
                s.jwks_max_age
            ),
            (900, 2_592_000, 300)
        );
        for (text, seconds) in [
            ("3", 3),
            ("3s", 3),
            ("2m", 120),
            ("1h", 3600),
            ("2000ms", 2),
        ] {
            assert_eq!(positive_seconds(text), Ok(seconds), "{text}");
        }
        for bad in ["", "s", "3w", "-3s", "1.5s", "0", "0s", "1500ms"] {
            assert!(positive_seconds(bad).is_err(), "{bad}");
        }
        let err = Settings::from_yaml("jwks_max_age: 1500ms", "c.yaml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "c.yaml: key \"jwks_max_age\": \"1500ms\" is not a positive duration (must be a whole number of seconds; like 36000, 90s, 15m or 10h)"
        );
    }

    #[test]
    fn lists_in_the_environment_take_commas_or_spaces() {
        for text in ["read,write", "read write", " read , write "] {
            let env = |key: &str| (key == "AUTHSERVER_DEFAULT_SCOPES").then(|| text.to_owned());
            let s = Settings::load_with_env(Some(Path::new("/dev/null")), env).unwrap();
            assert_eq!(s.default_scopes, ["read", "write"], "{text}");
        }
        let env =
            |key: &str| (key == "AUTHSERVER_TRUSTED_PROXIES").then(|| "10.0.0.0/8 ::1".to_owned());
        let s = Settings::load_with_env(Some(Path::new("/dev/null")), env).unwrap();
        assert_eq!(s.trusted_proxies.len(), 2);
    }

    #[test]
    fn unknown_and_unsettable_variables_are_refused_by_name() {
        assert!(
            check_environment([
                "PATH",
                "AUTHSERVER_LISTEN",
                "AUTHSERVER_CONFIG",
                "AUTHSERVER_PASSWORD",
                "AUTHSERVER_ACCESS_TOKEN_LIFETIME",
                "PROXY_LISTEN",
            ])
            .is_ok()
        );
        let err = check_environment(["AUTHSERVER_FOO"])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "environment variable AUTHSERVER_FOO: not a setting (known: AUTHSERVER_LISTEN,"
            ),
            "{err}"
        );
        let err = check_environment(["AUTHSERVER_LISTN"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("AUTHSERVER_LISTN"), "{err}");
        let err = check_environment(["AUTHSERVER_SCOPES"])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "environment variable AUTHSERVER_SCOPES: scopes are a map of name to description: declare them under \"scopes\" in the settings file"
        );
    }

    #[test]
    fn the_proxy_secret_comes_from_the_file_the_environment_or_a_file_and_is_never_shown() {
        let secret = "s3cret-0123456789-abcdef";
        let s = Settings::from_yaml(&format!("proxy_secret: {secret}"), "c.yaml").unwrap();
        let mut headers = axum::http::HeaderMap::new();
        assert!(!s.proxy_secret.as_ref().unwrap().proven_by(&headers));
        headers.insert(
            crate::client_ip::PROXY_SECRET_HEADER,
            secret.parse().unwrap(),
        );
        assert!(s.proxy_secret.as_ref().unwrap().proven_by(&headers));
        assert!(!format!("{s:?}").contains(secret), "Debug shows no secret");

        let dir = std::env::temp_dir().join(format!("tg-proxy-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("proxy.secret");
        std::fs::write(&file, format!("{secret}\n")).unwrap();
        let path = file.display().to_string();
        let env = |key: &str| (key == "AUTHSERVER_PROXY_SECRET_FILE").then(|| path.clone());
        let s = Settings::load_with_env(Some(Path::new("/dev/null")), env).unwrap();
        assert!(
            s.proxy_secret.unwrap().proven_by(&headers),
            "newline dropped"
        );
        let env = |key: &str| (key == "AUTHSERVER_PROXY_SECRET").then(|| secret.to_owned());
        let s = Settings::load_with_env(Some(Path::new("/dev/null")), env).unwrap();
        assert!(s.proxy_secret.unwrap().proven_by(&headers));
        assert!(
            check_environment(["AUTHSERVER_PROXY_SECRET", "AUTHSERVER_PROXY_SECRET_FILE"]).is_ok()
        );

        let short = "short-secret";
        let err = Settings::from_yaml(&format!("proxy_secret: {short}"), "c.yaml")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "c.yaml: key \"proxy_secret\": the proxy secret must be at least 16 characters long (it has 12)"
        );
        let env = |key: &str| {
            (key == "AUTHSERVER_PROXY_SECRET").then(|| "with a space 0123456789".to_owned())
        };
        let err = Settings::load_with_env(Some(Path::new("/dev/null")), env)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("environment variable AUTHSERVER_PROXY_SECRET: the proxy secret must be visible ASCII"), "{err}");
        assert!(!err.contains("with a space"), "{err}");
        let env = |key: &str| {
            (key == "AUTHSERVER_PROXY_SECRET_FILE").then(|| "/nonexistent/p".to_owned())
        };
        let err = Settings::load_with_env(Some(Path::new("/dev/null")), env)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "environment variable AUTHSERVER_PROXY_SECRET_FILE: \"/nonexistent/p\": cannot read"
            ),
            "{err}"
        );
        let both = format!("proxy_secret: {secret}\nproxy_secret_file: {path}");
        let err = Settings::from_yaml(&both, "c.yaml")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "c.yaml: key \"proxy_secret_file\": c.yaml: key \"proxy_secret\" is set too: give the proxy secret once, as text or as a file"
        );
        std::fs::write(&file, "short\n").unwrap();
        let err = Settings::from_yaml(&format!("proxy_secret_file: {path}"), "c.yaml")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "c.yaml: key \"proxy_secret_file\" ({path}): the proxy secret must be at least 16 characters long (it has 5)"
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn token_cache_capacity_defaults_and_refuses_what_is_no_count() {
        let default = Settings::from_yaml("", "c.yaml").unwrap();
        assert_eq!(
            default.token_cache_capacity,
            crate::store::DEFAULT_TOKEN_CACHE_CAPACITY
        );
        let set = Settings::from_yaml("token_cache_capacity: 0", "c.yaml").unwrap();
        assert_eq!(set.token_cache_capacity, 0);
        let env = |key: &str| (key == "AUTHSERVER_TOKEN_CACHE_CAPACITY").then(|| "lots".into());
        let refused = Settings::validate(&Document::new("c.yaml", ""), &env, false).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("\"lots\" is not a number of entries"),
            "{refused}"
        );
    }

    #[test]
    fn purge_interval_defaults_to_an_hour_and_zero_turns_it_off() {
        assert_eq!(
            Settings::from_yaml("", "c.yaml").unwrap().purge_interval,
            3600
        );
        assert_eq!(
            Settings::from_yaml("purge_interval: 15m", "c.yaml")
                .unwrap()
                .purge_interval,
            900
        );
        for off in ["0", "0s", "0h"] {
            let env = |key: &str| (key == "AUTHSERVER_PURGE_INTERVAL").then(|| off.to_owned());
            let s = Settings::load_with_env(Some(Path::new("/dev/null")), env).unwrap();
            assert_eq!(s.purge_interval, 0, "{off}");
        }
        let err = Settings::from_yaml("purge_interval: -1", "c.yaml").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("c.yaml: key \"purge_interval\": \"-1\" is not a duration"),
            "{err}"
        );
        assert!(check_environment(["AUTHSERVER_PURGE_INTERVAL"]).is_ok());
    }

    /// The error of loading the settings with only `var` set to `value` in the environment.
    fn error_with_env(var: &str, value: &str) -> String {
        let env = |key: &str| (key == var).then(|| value.to_owned());
        Settings::load_with_env(Some(Path::new("/dev/null")), env)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn database_pool_size_and_wait_from_the_file_or_the_environment() {
        let default = Settings::from_yaml("", "c.yaml").unwrap().database_pools;
        assert_eq!(default, PoolSettings::default());
        assert_eq!(default.max_connections, None, "the backend's default");
        assert_eq!(default.acquire_timeout, Duration::from_secs(10));
        let s = Settings::from_yaml(
            "database_max_connections: 32\ndatabase_acquire_timeout: 500ms",
            "c.yaml",
        )
        .unwrap();
        assert_eq!(s.database_pools.max_connections, Some(32));
        assert_eq!(s.database_pools.acquire_timeout, Duration::from_millis(500));
        let s = Settings::from_yaml("database_acquire_timeout: 60", "c.yaml").unwrap();
        assert_eq!(s.database_pools.acquire_timeout, Duration::from_secs(60));
        let env = |key: &str| match key {
            "AUTHSERVER_DATABASE_MAX_CONNECTIONS" => Some("1000".to_owned()),
            "AUTHSERVER_DATABASE_ACQUIRE_TIMEOUT" => Some("100ms".to_owned()),
            _ => None,
        };
        let yaml = "database_max_connections: 2\ndatabase_acquire_timeout: 5s";
        let s = Settings::validate(&Document::new("c.yaml", yaml), &env, false).unwrap();
        assert_eq!(
            s.database_pools,
            PoolSettings {
                max_connections: Some(1000),
                acquire_timeout: Duration::from_millis(100),
            },
            "the environment wins over the file"
        );
        assert!(
            check_environment([
                "AUTHSERVER_DATABASE_MAX_CONNECTIONS",
                "AUTHSERVER_DATABASE_ACQUIRE_TIMEOUT"
            ])
            .is_ok()
        );
        let err = Settings::from_yaml("database_max_connections: 0", "c.yaml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "c.yaml: key \"database_max_connections\": \"0\" is not a number of connections \
             from 1 to 1000 (default 4 on SQLite, 8 on PostgreSQL)"
        );
        for bad in ["1001", "-1", "many"] {
            let err = error_with_env("AUTHSERVER_DATABASE_MAX_CONNECTIONS", bad);
            assert!(
                err.starts_with(&format!(
                    "environment variable AUTHSERVER_DATABASE_MAX_CONNECTIONS: \"{bad}\" is not \
                     a number of connections from 1 to 1000"
                )),
                "{err}"
            );
        }
        let err = Settings::from_yaml("database_acquire_timeout: 2m", "c.yaml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "c.yaml: key \"database_acquire_timeout\": \"2m\" is not a wait (must be from \
             100ms to 60s; like 500ms, 10s or 30s)"
        );
        for bad in ["99ms", "0", "61s", "10x"] {
            let err = error_with_env("AUTHSERVER_DATABASE_ACQUIRE_TIMEOUT", bad);
            assert!(
                err.starts_with(&format!(
                    "environment variable AUTHSERVER_DATABASE_ACQUIRE_TIMEOUT: \"{bad}\" is not \
                     a wait ("
                )),
                "{err}"
            );
        }
    }

    #[test]
    fn dpop_nonce_is_off_or_required() {
        let read = |text: &str| Settings::from_yaml(text, "a.yaml");
        assert!(
            !read("issuer: https://as.example\n")
                .unwrap()
                .dpop_nonce_required
        );
        assert!(
            read("issuer: https://as.example\ndpop_nonce: required\n")
                .unwrap()
                .dpop_nonce_required
        );
        assert!(
            !read("issuer: https://as.example\ndpop_nonce: off\n")
                .unwrap()
                .dpop_nonce_required
        );
        let err = read("issuer: https://as.example\ndpop_nonce: sometimes\n").unwrap_err();
        assert!(err.to_string().contains("off or required"), "{err}");
    }
}

//! The proxy's configuration: YAML ([`raw`]) → environment overrides → validated [`ProxyConfig`].
//!
//! Every error names the file, the field (or rule and field) and the bad value; secrets are never
//! echoed.

pub mod raw;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use resource_server::settings::{self, SettingError};
use resource_server::yaml;
use resource_server::{
    AnswerPolicy, CacheSettings, ClientAuth, IntrospectionSettings, JwtSettings, JwtValidator,
    RawJwt, Rules, RulesError, TokenSource, TokenSourceKind,
};

use crate::app_probes::{self, AppProbes};
use raw::{RawConfig, RawDuration, RawIntrospection, RawUpstream};

/// Environment variables that override the file (empty values are ignored).
pub const ENV_OVERRIDES: [&str; 6] = [
    "PROXY_LISTEN",
    "PROXY_ADMIN_LISTEN",
    "PROXY_INTROSPECTION_URL",
    "PROXY_AUTH_TOKEN",
    "PROXY_CLIENT_ID",
    "PROXY_CLIENT_SECRET",
];

/// Worker threads of the proxy service when the file says none: a sidecar's budget is about one
/// core, and one thread costs the least CPU per request (bench/proxy.sh).
pub const DEFAULT_THREADS: usize = 1;

/// What to do about a rule set with no routes.
const NO_ROUTES_HINT: &str =
    "is the file cut short? add routes, or set allow_empty_routes: true to start without any";

/// A configuration that failed to load. `Display` is the message for the operator.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The cause is in the message, not a `source()`, so that a chain printer (anyhow's `{:#}`)
    /// does not say it twice.
    #[error("{file}: cannot read: {error}")]
    Read { file: String, error: std::io::Error },
    #[error("{file}: {message}")]
    Syntax { file: String, message: String },
    #[error("{file}: field \"{field}\" = {value}: {message}")]
    Invalid {
        file: String,
        field: String,
        value: String,
        message: String,
    },
    #[error("{file}: routes[{index}] ({name}): field \"{field}\" = {value}: {message}")]
    Route {
        file: String,
        index: usize,
        name: String,
        field: &'static str,
        value: String,
        message: String,
    },
    #[error(transparent)]
    Rules(#[from] RulesError),
}

/// The validated configuration.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// The file this was read from; watched for rule changes. `None` for a configuration built
    /// in memory (no reloads).
    pub source: Option<PathBuf>,
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub threads: usize,
    /// Whether the proxy's threads share one work-stealing runtime (default) or each run a
    /// single-threaded one (`false`: one proxy per process only, see `config/proxy.yaml`).
    pub work_stealing: bool,
    pub grace_period: Duration,
    pub shutdown_timeout: Duration,
    pub introspection: IntrospectionConfig,
    /// `token_source`: introspection, local JWT validation, or both.
    pub token_source: TokenSourceKind,
    /// The `jwt:` section; `Some` whenever the file has one (required by the JWT token sources).
    pub jwt: Option<JwtSettings>,
    /// Routes and upstreams: the part swapped on reload.
    pub routing: Arc<Routing>,
    /// Upstream addresses given by whoever started the proxy in process (the one-command stack),
    /// as `PROXY_UPSTREAM_<NAME>_ADDRESS` settings that win over the environment on every
    /// reload too. Empty when the proxy runs as its own binary.
    pub upstream_overrides: BTreeMap<String, String>,
    /// The application's probes the admin listener answers (`PROXY_APP_PROBES`, written by
    /// `proxy inject`); empty unless set.
    pub app_probes: Arc<AppProbes>,
}

/// The environment variable that overrides upstream `name`'s address:
/// `PROXY_UPSTREAM_<NAME>_ADDRESS`, the name upper-cased with `-` and `.` as `_`.
pub fn upstream_address_var(name: &str) -> String {
    format!(
        "PROXY_UPSTREAM_{}_ADDRESS",
        name.to_uppercase().replace(['-', '.'], "_")
    )
}

/// Routes and the upstreams they name; replaced as one on reload.
#[derive(Debug)]
pub struct Routing {
    pub rules: Rules,
    pub upstreams: HashMap<String, Arc<Upstream>>,
}

/// One named upstream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    pub name: String,
    pub address: UpstreamAddr,
    pub pass_authorization: bool,
    pub host: Option<HeaderValue>,
    pub connect_timeout: Duration,
    pub read_timeout: Option<Duration>,
}

/// Where an upstream listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamAddr {
    /// An IP literal and port.
    Socket(SocketAddr),
    /// A host name, resolved on each new connection.
    Name { host: String, port: u16 },
}

impl fmt::Display for UpstreamAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamAddr::Socket(a) => write!(f, "{a}"),
            UpstreamAddr::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// How the proxy authenticates to the introspection endpoint. `Debug` hides the secrets.
#[derive(Clone, PartialEq, Eq)]
pub enum IntrospectionAuth {
    Bearer(String),
    ClientSecret {
        client_id: String,
        client_secret: String,
    },
}

impl fmt::Debug for IntrospectionAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntrospectionAuth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            IntrospectionAuth::ClientSecret { client_id, .. } => {
                write!(
                    f,
                    "ClientSecret {{ client_id: {client_id:?}, client_secret: <redacted> }}"
                )
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntrospectionConfig {
    pub url: String,
    pub auth: IntrospectionAuth,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub max_ttl: Duration,
    pub negative_ttl: Duration,
    pub capacity: u64,
    pub stale_grace: Duration,
    /// `leeway`, `issuer`, `audience`.
    pub policy: AnswerPolicy,
}

impl IntrospectionConfig {
    /// No `introspection:` section (`token_source: jwt`): a placeholder the JWT-only gate and the
    /// readiness probe never call.
    fn unused() -> IntrospectionConfig {
        IntrospectionConfig {
            url: "http://127.0.0.1:9/no-introspection-configured".into(),
            auth: IntrospectionAuth::Bearer(String::new()),
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(1),
            max_ttl: Duration::ZERO,
            negative_ttl: Duration::ZERO,
            capacity: 1,
            stale_grace: Duration::ZERO,
            policy: AnswerPolicy::default(),
        }
    }

    /// The `resource-server` settings for [`resource_server::TokenChecker::new`].
    pub fn settings(&self) -> (IntrospectionSettings, CacheSettings) {
        let auth = client_auth(&self.auth);
        (
            IntrospectionSettings {
                url: self.url.clone(),
                auth,
                connect_timeout: self.connect_timeout,
                request_timeout: self.request_timeout,
                policy: self.policy.clone(),
            },
            CacheSettings {
                max_ttl: self.max_ttl,
                negative_ttl: self.negative_ttl,
                capacity: self.capacity,
                stale_grace: self.stale_grace,
            },
        )
    }
}

/// The resource-server form of the proxy's credentials.
fn client_auth(auth: &IntrospectionAuth) -> ClientAuth {
    match auth {
        IntrospectionAuth::Bearer(t) => ClientAuth::Bearer(t.clone()),
        IntrospectionAuth::ClientSecret {
            client_id,
            client_secret,
        } => ClientAuth::ClientSecret {
            client_id: client_id.clone(),
            client_secret: client_secret.clone(),
        },
    }
}

/// Where the configuration is read from unless `--config` or `PROXY_CONFIG` names a file.
pub const DEFAULT_CONFIG_PATH: &str = "config/proxy.yaml";
/// The shipped `config/proxy.yaml`, compiled in: the configuration when no file is named and the
/// working directory has no `config/proxy.yaml` (a binary run outside the repository).
pub const SHIPPED_CONFIG: &str = include_str!("../../../config/proxy.yaml");

/// The configuration `named` by `setting` (`PROXY_CONFIG`, `--config`), which must exist; else
/// [`DEFAULT_CONFIG_PATH`] when the working directory has it; else [`SHIPPED_CONFIG`] (no file to
/// reload). A named file that cannot be read is refused with the setting in the message.
pub fn load_named_or_default(
    named: Option<&Path>,
    setting: &str,
) -> Result<ProxyConfig, ConfigError> {
    match named {
        Some(path) => load_config(path).map_err(|e| match e {
            ConfigError::Read { error, .. } => ConfigError::Read {
                file: format!("{setting}={}", path.display()),
                error,
            },
            other => other,
        }),
        None if Path::new(DEFAULT_CONFIG_PATH).exists() => load_config(DEFAULT_CONFIG_PATH),
        None => {
            tracing::info!(
                "no {DEFAULT_CONFIG_PATH} here and no PROXY_CONFIG: the shipped configuration"
            );
            parse_config(SHIPPED_CONFIG, "(shipped config/proxy.yaml)", |k| {
                std::env::var(k).ok()
            })
        }
    }
}

/// Reads, overrides from the process environment, and validates a configuration file.
pub fn load_config(path: impl AsRef<Path>) -> Result<ProxyConfig, ConfigError> {
    load_config_with_env(path, |k| std::env::var(k).ok())
}

/// [`load_config`] with the environment given as a function (for tests).
pub fn load_config_with_env(
    path: impl AsRef<Path>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<ProxyConfig, ConfigError> {
    let path = path.as_ref();
    let file = path.display().to_string();
    let src = yaml::read_file(path, &yaml::Limits::DEFAULT).map_err(|e| match e {
        yaml::YamlError::Read(error) => ConfigError::Read {
            file: file.clone(),
            error,
        },
        other => ConfigError::Syntax {
            file: file.clone(),
            message: other.to_string(),
        },
    })?;
    let mut config = parse_config(&src, &file, env)?;
    config.source = Some(path.to_path_buf());
    Ok(config)
}

/// Parses and validates YAML text (`file` only names it in messages). `source` is left `None`.
pub fn parse_config(
    src: &str,
    file: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<ProxyConfig, ConfigError> {
    let raw: RawConfig = yaml::from_str(src).map_err(|e| ConfigError::Syntax {
        file: file.to_owned(),
        message: e.to_string(),
    })?;
    let env = |k: &str| env(k).filter(|v| !v.is_empty());
    Validator { file }.config(raw, &env)
}

struct Validator<'a> {
    file: &'a str,
}

impl Validator<'_> {
    fn invalid(
        &self,
        field: impl Into<String>,
        value: impl fmt::Display,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Invalid {
            file: self.file.to_owned(),
            field: field.into(),
            value: value.to_string(),
            message: message.into(),
        }
    }

    /// The shared checks' error, worded like the others (value quoted).
    fn setting(&self, e: SettingError) -> ConfigError {
        self.invalid(e.field, format!("{:?}", e.value), e.problem)
    }

    fn config(
        &self,
        raw: RawConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ProxyConfig, ConfigError> {
        let listen = self.listen("listen", "PROXY_LISTEN", raw.listen, env)?;
        let admin_listen =
            self.listen("admin_listen", "PROXY_ADMIN_LISTEN", raw.admin_listen, env)?;
        if listen == admin_listen && listen.port() != 0 {
            return Err(self.invalid("admin_listen", admin_listen, "must differ from listen"));
        }
        let threads = raw.threads.unwrap_or(DEFAULT_THREADS);
        if !(1..=256).contains(&threads) {
            return Err(self.invalid("threads", threads, "expected 1 to 256"));
        }
        let grace_period = self.duration("grace_period", raw.grace_period, 5)?;
        let shutdown_timeout = self.duration("shutdown_timeout", raw.shutdown_timeout, 5)?;
        let (token_source, jwt, source) = self.token_source(raw.token_source, raw.jwt)?;
        let introspection = match raw.introspection {
            Some(section) => self.introspection(section, env)?,
            None if !token_source.uses_introspection() => IntrospectionConfig::unused(),
            None => {
                return Err(self.invalid(
                    "introspection",
                    "(missing)",
                    format!(
                        "required with token_source {} (only token_source jwt does without)",
                        token_source.as_str()
                    ),
                ));
            }
        };

        if raw.upstreams.is_empty() {
            return Err(self.invalid("upstreams", "{}", "declare at least one upstream"));
        }
        let mut upstreams = HashMap::new();
        for (name, u) in raw.upstreams {
            let upstream = self.upstream(&name, u, env)?;
            upstreams.insert(name, Arc::new(upstream));
        }
        let rules = Rules::from_routes(raw.routes, self.file)?.with_token_source(source);
        if rules.routes().is_empty() && !raw.allow_empty_routes {
            return Err(self.invalid(
                "routes",
                "[]",
                format!("no routes: every request would be refused 404 ({NO_ROUTES_HINT})"),
            ));
        }
        for route in rules.routes() {
            let error = |value: String, message: String| ConfigError::Route {
                file: self.file.to_owned(),
                index: route.index(),
                name: route.name.clone(),
                field: "upstream",
                value,
                message,
            };
            match &route.upstream {
                None => {
                    return Err(error(
                        "(missing)".into(),
                        "every route must name an upstream".into(),
                    ));
                }
                Some(u) if !upstreams.contains_key(u) => {
                    let mut known: Vec<&str> = upstreams.keys().map(String::as_str).collect();
                    known.sort_unstable();
                    return Err(error(
                        format!("{u:?}"),
                        format!("no such upstream (declared: {})", known.join(", ")),
                    ));
                }
                Some(_) => {}
            }
        }
        let app_probes = match env(app_probes::ENV) {
            Some(json) => AppProbes::parse(&json).map_err(|message| {
                self.invalid(app_probes::ENV, "(from the environment)", message)
            })?,
            None => AppProbes::default(),
        };
        Ok(ProxyConfig {
            source: None,
            listen,
            admin_listen,
            threads,
            work_stealing: raw.work_stealing.unwrap_or(true),
            grace_period,
            shutdown_timeout,
            introspection,
            token_source,
            jwt,
            routing: Arc::new(Routing { rules, upstreams }),
            upstream_overrides: BTreeMap::new(),
            app_probes: Arc::new(app_probes),
        })
    }

    fn listen(
        &self,
        field: &str,
        var: &str,
        value: String,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<SocketAddr, ConfigError> {
        let (field, value) = match env(var) {
            Some(v) => (format!("{field} (from {var})"), v),
            None => (field.to_owned(), value),
        };
        value.trim().parse().map_err(|_| {
            self.invalid(
                field,
                format!("{value:?}"),
                "expected IP:port, e.g. 127.0.0.1:8000",
            )
        })
    }

    fn duration(
        &self,
        field: &str,
        value: Option<RawDuration>,
        default_secs: u64,
    ) -> Result<Duration, ConfigError> {
        settings::duration(field, value.as_ref(), Duration::from_secs(default_secs))
            .map_err(|e| self.setting(e))
    }

    fn upstream(
        &self,
        name: &str,
        u: RawUpstream,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Upstream, ConfigError> {
        let prefix = format!("upstreams.{name}");
        if name.trim().is_empty() {
            return Err(self.invalid("upstreams", format!("{name:?}"), "empty upstream name"));
        }
        let var = upstream_address_var(name);
        let (field, address) = match env(&var) {
            Some(v) => (format!("{prefix}.address (from {var})"), v),
            None => (format!("{prefix}.address"), u.address),
        };
        let address = parse_upstream_addr(&address)
            .map_err(|m| self.invalid(field, format!("{address:?}"), m))?;
        let host = match u.host {
            None => None,
            Some(h) => Some(
                HeaderValue::from_str(&h)
                    .ok()
                    .filter(|_| !h.is_empty())
                    .ok_or_else(|| {
                        self.invalid(
                            format!("{prefix}.host"),
                            format!("{h:?}"),
                            "not a valid Host header value",
                        )
                    })?,
            ),
        };
        let connect_timeout =
            self.duration(&format!("{prefix}.connect_timeout"), u.connect_timeout, 5)?;
        let read_timeout = match u.read_timeout {
            None => None,
            Some(v) => Some(self.duration(&format!("{prefix}.read_timeout"), Some(v), 0)?),
        };
        if connect_timeout.is_zero() {
            return Err(self.invalid(format!("{prefix}.connect_timeout"), "0", "must be positive"));
        }
        Ok(Upstream {
            name: name.to_owned(),
            address,
            pass_authorization: u.pass_authorization,
            host,
            connect_timeout,
            read_timeout: read_timeout.filter(|d| !d.is_zero()),
        })
    }

    fn introspection(
        &self,
        raw: RawIntrospection,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<IntrospectionConfig, ConfigError> {
        raw.policy().map_err(|e| self.setting(e))?;
        let (url_field, url) = match env("PROXY_INTROSPECTION_URL") {
            Some(v) => (
                "introspection.url (from PROXY_INTROSPECTION_URL)".to_owned(),
                v,
            ),
            None => ("introspection.url".to_owned(), raw.url.clone()),
        };
        let url_ok = (url.starts_with("http://") || url.starts_with("https://"))
            && url.len() > "https://".len()
            && !url.contains(char::is_whitespace);
        if !url_ok {
            return Err(self.invalid(
                url_field,
                format!("{url:?}"),
                "expected an http:// or https:// URL",
            ));
        }
        let auth = self.auth(
            raw.auth_token.clone(),
            raw.client_id.clone(),
            raw.client_secret.clone(),
            env,
        )?;
        // Timeouts, cache and policy: resolved where the example API resolves its own, with the
        // same defaults.
        let (settings, cache) = raw
            .resolve(url.clone(), client_auth(&auth))
            .map_err(|e| self.setting(e))?;
        Ok(IntrospectionConfig {
            url,
            auth,
            connect_timeout: settings.connect_timeout,
            request_timeout: settings.request_timeout,
            max_ttl: cache.max_ttl,
            negative_ttl: cache.negative_ttl,
            capacity: cache.capacity,
            stale_grace: cache.stale_grace,
            policy: settings.policy,
        })
    }

    /// `token_source` and the `jwt:` section (checked whenever present). A JWT token source gets
    /// the process's validator for these settings ([`JwtValidator::shared`]): a reload that keeps
    /// them keeps its keys and cache.
    fn token_source(
        &self,
        kind: Option<String>,
        raw: Option<RawJwt>,
    ) -> Result<(TokenSourceKind, Option<JwtSettings>, TokenSource), ConfigError> {
        let kind = match kind {
            None => TokenSourceKind::default(),
            Some(k) => k
                .parse()
                .map_err(|m: String| self.invalid("token_source", format!("{k:?}"), m))?,
        };
        let jwt = raw
            .map(|r| r.settings().map_err(|e| self.setting(e)))
            .transpose()?;
        let source = match (kind, &jwt) {
            (TokenSourceKind::Introspection, _) => TokenSource::Introspection,
            (_, None) => {
                return Err(self.invalid(
                    "jwt",
                    "(missing)",
                    format!(
                        "token_source {} needs the jwt section (jwks_url, issuer, audience)",
                        kind.as_str()
                    ),
                ));
            }
            (kind, Some(settings)) => {
                let v = JwtValidator::shared(settings.clone())
                    .map_err(|m| self.invalid("jwt", "(section)", m))?;
                match kind {
                    TokenSourceKind::Jwt => TokenSource::Jwt(v),
                    _ => TokenSource::JwtOrIntrospection(v),
                }
            }
        };
        Ok((kind, jwt, source))
    }

    fn auth(
        &self,
        token: Option<String>,
        client_id: Option<String>,
        client_secret: Option<String>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<IntrospectionAuth, ConfigError> {
        // PROXY_AUTH_TOKEN is the deployment's final word: it replaces whatever the file says.
        if let Some(t) = env("PROXY_AUTH_TOKEN") {
            return Ok(IntrospectionAuth::Bearer(t));
        }
        let client_id = env("PROXY_CLIENT_ID")
            .or(client_id)
            .filter(|s| !s.is_empty());
        let client_secret = env("PROXY_CLIENT_SECRET")
            .or(client_secret)
            .filter(|s| !s.is_empty());
        let token = token.filter(|s| !s.is_empty());
        match (token, client_id, client_secret) {
            (Some(t), None, None) => Ok(IntrospectionAuth::Bearer(t)),
            (None, Some(client_id), Some(client_secret)) => Ok(IntrospectionAuth::ClientSecret {
                client_id,
                client_secret,
            }),
            (Some(_), _, _) => Err(self.invalid(
                "introspection.auth_token",
                "(hidden)",
                "set either auth_token or client_id + client_secret, not both",
            )),
            (None, Some(_), None) => Err(self.invalid(
                "introspection.client_secret",
                "(missing)",
                "client_id needs client_secret (or env PROXY_CLIENT_SECRET)",
            )),
            (None, None, Some(_)) => Err(self.invalid(
                "introspection.client_id",
                "(missing)",
                "client_secret needs client_id (or env PROXY_CLIENT_ID)",
            )),
            (None, None, None) => Err(self.invalid(
                "introspection",
                "(no credentials)",
                "set auth_token (env PROXY_AUTH_TOKEN) or client_id + client_secret (env PROXY_CLIENT_SECRET)",
            )),
        }
    }
}

/// `host:port` with a non-zero port; an IP literal (`[::1]:80` for IPv6) or a DNS name.
fn parse_upstream_addr(s: &str) -> Result<UpstreamAddr, String> {
    if let Ok(addr) = s.parse::<SocketAddr>() {
        if addr.port() == 0 {
            return Err("port 0".into());
        }
        return Ok(UpstreamAddr::Socket(addr));
    }
    let (host, port) = s.rsplit_once(':').ok_or("expected host:port")?;
    let port: u16 = port
        .parse()
        .map_err(|_| "port is not a number from 1 to 65535".to_owned())?;
    let valid_host = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if port == 0 || !valid_host {
        return Err("expected host:port, e.g. 127.0.0.1:8002 or api:8002".into());
    }
    Ok(UpstreamAddr::Name {
        host: host.to_owned(),
        port,
    })
}

#[cfg(test)]
mod tests;

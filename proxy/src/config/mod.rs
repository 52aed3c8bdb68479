//! The proxy's configuration: YAML ([`raw`]), then `PROXY_*` environment variables, then the
//! overrides of an embedding process (the stack), by the one precedence of
//! [`resource_server::layers`] → validated [`ProxyConfig`], split into what a reload may change
//! and what needs a restart ([`ProxyConfig::restart_settings`]).
//!
//! Every error names the file, the field (or rule and field) and the bad value; secrets are never
//! echoed.

pub mod raw;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
pub use resource_server::ConfigError;
use resource_server::access_log::AccessLogSettings;
use resource_server::config_error::{env_origin, key_origin, quoted};
pub use resource_server::layers::{Document, Overrides};
use resource_server::layers::{Layers, Picked, Recorder};
use resource_server::logging::LogFormat;
use resource_server::settings::{self, SettingError};
use resource_server::yaml;
use resource_server::{GateConfig, GateEnv, GateSettings, ProxySecret, TokenSource};

use crate::app_probes::{self, AppProbes};
use crate::downstream::ConnectionLimits;
use crate::ingress::{Cidr, ForwardAuthConfig, Ingress};
use crate::tls::{self, TlsFiles, UpstreamTls};
use raw::{
    RawAddress, RawConfig, RawConnections, RawDuration, RawEject, RawForwardAuth, RawHealthCheck,
    RawTls, RawUpstream, RawUpstreamTls,
};

/// Environment variables that override the file (empty values are ignored).
pub const ENV_OVERRIDES: [&str; 8] = [
    "PROXY_LISTEN",
    "PROXY_ADMIN_LISTEN",
    "PROXY_FORWARD_AUTH_LISTEN",
    "PROXY_TOKEN_SOURCE",
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

/// The validated configuration.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// The file this was read from; watched for rule changes. `None` for a configuration built
    /// in memory (no reloads).
    pub source: Option<PathBuf>,
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    /// TLS on `listen` (checked when the file is loaded; the files are re-read when they change
    /// or on SIGHUP). `None`: cleartext.
    pub tls: Option<TlsFiles>,
    /// The admin listener serves TLS with the same certificate.
    pub admin_tls: bool,
    /// HTTP/2 with prior knowledge on a cleartext `listen` (opt-in).
    pub h2c: bool,
    /// The forward-auth decision endpoint, if any.
    pub forward_auth: Option<ForwardAuthConfig>,
    /// The `connections:` section: head deadline, idle timeouts and caps of both listeners.
    pub connections: ConnectionLimits,
    pub threads: usize,
    /// Whether the proxy's threads share one work-stealing runtime or each run a single-threaded
    /// one, like nginx workers. Unset: single-threaded ones for a proxy that owns its process (the
    /// `proxy` binary, [`crate::Signals::Handle`]), the shared one for a proxy started inside
    /// another program ([`crate::spawn`]): Pingora 0.9 keeps the single-threaded runtimes' handles
    /// in thread-locals that outlive their threads, so a second proxy started in the same process
    /// after one stopped may be handed a stopped runtime.
    pub work_stealing: Option<bool>,
    pub grace_period: Duration,
    pub shutdown_timeout: Duration,
    /// The gate: token source, introspection, JWT and routes. Swapped on reload together with
    /// the upstreams (introspection settings only on restart).
    pub gate: GateSettings,
    /// The upstreams the routes name.
    pub upstreams: HashMap<String, Arc<Upstream>>,
    /// The text this was validated from, the environment variables it read, and the overrides
    /// of whoever started the proxy in process (the one-command stack: [`Self::with_overrides`]),
    /// which win over the environment on every reload too. No overrides when the proxy runs as
    /// its own binary.
    pub document: Document,
    /// The application's probes the admin listener answers (`PROXY_APP_PROBES`, written by
    /// `proxy inject`); empty unless set.
    pub app_probes: Arc<AppProbes>,
    /// The `access_log:` section (`PROXY_ACCESS_LOG`, `PROXY_ACCESS_LOG_SAMPLE`); on by default.
    pub access_log: AccessLogSettings,
    /// `log_format:`, applied by the binary once the file is read (`LOG_FORMAT` wins).
    pub log_format: Option<LogFormat>,
    /// `trusted_peers:`: whose `X-Request-Id` is kept (see [`resource_server::request_id`]).
    pub trusted_peers: Vec<Cidr>,
}

/// What only a restart changes: the listeners, their TLS and limits, the runtime, and the
/// token checker's clients (introspection, revocation stream). A reload that changes any of it
/// is applied for the rest (upstreams, routes, the gate's rules) and warns.
#[derive(Debug, PartialEq)]
pub struct RestartSettings<'a> {
    pub listen: &'a SocketAddr,
    pub admin_listen: &'a SocketAddr,
    pub tls: &'a Option<TlsFiles>,
    pub admin_tls: &'a bool,
    pub h2c: &'a bool,
    pub forward_auth: &'a Option<ForwardAuthConfig>,
    pub connections: &'a ConnectionLimits,
    pub threads: &'a usize,
    pub work_stealing: &'a Option<bool>,
    pub grace_period: &'a Duration,
    pub shutdown_timeout: &'a Duration,
    pub introspection: &'a Option<resource_server::IntrospectionConfig>,
    pub revocation: &'a Option<resource_server::RevocationSettings>,
    pub app_probes: &'a AppProbes,
    pub access_log: &'a AccessLogSettings,
    pub log_format: &'a Option<LogFormat>,
    pub trusted_peers: &'a [Cidr],
}

impl ProxyConfig {
    /// The part of the configuration only a restart applies. Every field of [`ProxyConfig`] is
    /// named here, as restart-only or as reloaded, so that a new field must be sorted into one.
    pub fn restart_settings(&self) -> RestartSettings<'_> {
        let ProxyConfig {
            source: _,
            listen,
            admin_listen,
            tls,
            admin_tls,
            h2c,
            forward_auth,
            connections,
            threads,
            work_stealing,
            grace_period,
            shutdown_timeout,
            gate,
            upstreams: _,
            document: _,
            app_probes,
            access_log,
            log_format,
            trusted_peers,
        } = self;
        let GateSettings {
            introspection,
            revocation,
            token_source: _,
            jwt: _,
            leeway: _,
            proxy_secret: _,
            rules: _,
            audience: _,
            resource: _,
        } = gate;
        RestartSettings {
            listen,
            admin_listen,
            tls,
            admin_tls,
            h2c,
            forward_auth,
            connections,
            threads,
            work_stealing,
            grace_period,
            shutdown_timeout,
            introspection,
            revocation,
            app_probes,
            access_log,
            log_format,
            trusted_peers,
        }
    }

    /// The same document validated again with `overrides` on top of its own (and the
    /// environment it was validated with): how an embedding process hands in its decisions,
    /// before validation, and keeps them across reloads.
    pub fn with_overrides(&self, overrides: &Overrides) -> Result<ProxyConfig, ConfigError> {
        let document = self.document.with_overrides(overrides);
        let env = document.recorded_env();
        let mut config = validate(&document, &env, Check::Start)?;
        config.source = self.source.clone();
        Ok(config)
    }
}

/// The environment variable that overrides upstream `name`'s address:
/// `PROXY_UPSTREAM_<NAME>_ADDRESS`, the name upper-cased with `-` and `.` as `_`.
pub fn upstream_address_var(name: &str) -> String {
    upstream_var(name, "ADDRESS")
}

/// The environment variable that gives upstream `name`'s `proxy_secret`:
/// `PROXY_UPSTREAM_<NAME>_PROXY_SECRET`.
pub fn upstream_secret_var(name: &str) -> String {
    upstream_var(name, "PROXY_SECRET")
}

fn upstream_var(name: &str, setting: &str) -> String {
    format!(
        "PROXY_UPSTREAM_{}_{setting}",
        name.to_uppercase().replace(['-', '.'], "_")
    )
}

/// One named upstream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    pub name: String,
    /// One or more addresses (a DNS name stands for every address it resolves to).
    pub addresses: Vec<UpstreamAddr>,
    /// The weight of each entry of `addresses` (1 to [`MAX_WEIGHT`]; every address a name
    /// stands for has the name's weight).
    pub weights: Vec<usize>,
    /// How a request picks one of the addresses.
    pub balance: Balance,
    /// Active health checks, if any.
    pub health_check: Option<HealthCheck>,
    /// Passive ejection of an address that refuses connections.
    pub eject: Eject,
    /// How often DNS names are resolved again.
    pub resolve_interval: Duration,
    pub pass_authorization: bool,
    /// HTTP/2 with prior knowledge to this upstream (gRPC servers); else HTTP/1.1.
    pub h2c: bool,
    /// TLS to this upstream (ALPN h2 and http/1.1); `None`: cleartext.
    pub tls: Option<UpstreamTls>,
    pub host: Option<HeaderValue>,
    /// Header names sent as the client spelled them (`preserve_header_case`); else standard
    /// names titled and others in lower case.
    pub preserve_header_case: bool,
    pub connect_timeout: Duration,
    pub read_timeout: Option<Duration>,
    /// Sent in `X-Tokengate-Proxy-Secret` on every request to this upstream (a sensitive
    /// header value: `Debug` does not show it).
    pub proxy_secret: Option<HeaderValue>,
}

/// How a request picks one of an upstream's addresses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Balance {
    /// In turn (Pingora's `RoundRobin`).
    #[default]
    RoundRobin,
    /// The one with the fewest requests in flight through this proxy (ties in turn).
    LeastConnections,
}

/// An upstream's active health check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthCheck {
    /// `Some(path)`: an HTTP GET, healthy on 200; `None`: a TCP connect (and TLS handshake).
    pub path: Option<String>,
    pub interval: Duration,
    pub timeout: Duration,
    pub unhealthy_after: usize,
    pub healthy_after: usize,
}

/// The largest weight of an address: its share of the requests relative to the others.
pub const MAX_WEIGHT: usize = 100;

/// Passive ejection: after `after_failures` consecutive failures (failed connections, and
/// answers whose status is in `statuses`) an address is left out for `duration` (or until an
/// active check sees it healthy again).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eject {
    pub after_failures: u32,
    pub duration: Duration,
    /// Upstream statuses (5xx) that count as failures; empty: none do.
    pub statuses: Vec<u16>,
}

impl Default for Eject {
    fn default() -> Self {
        Eject {
            after_failures: 1,
            duration: Duration::from_secs(10),
            statuses: Vec::new(),
        }
    }
}

/// Where an upstream listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamAddr {
    /// An IP literal and port.
    Socket(SocketAddr),
    /// A host name, resolved at start, on reload and every `resolve_interval`.
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

/// What `--check-config` says of a valid configuration: `3 routes, 1 upstream`.
pub fn summary(config: &ProxyConfig) -> String {
    let count = |n: usize, one: &str| match n {
        1 => format!("1 {one}"),
        n => format!("{n} {one}s"),
    };
    format!(
        "{}, {}",
        count(config.gate.rules.routes().len(), "route"),
        count(config.upstreams.len(), "upstream")
    )
}

/// The upstreams that routes needing a token send identity headers (`X-Auth-*`) to although
/// they have no `proxy_secret`: a service there cannot tell the proxy's headers from any other
/// caller's that reaches it. Sorted, each once.
pub fn identity_without_proxy_secret(config: &ProxyConfig) -> Vec<&str> {
    let mut names: Vec<&str> = config
        .gate
        .rules
        .routes()
        .iter()
        .filter(|route| route.access != resource_server::rules::Access::Public)
        .filter_map(|route| route.upstream.as_deref())
        .filter(|name| {
            config
                .upstreams
                .get(*name)
                .is_some_and(|up| up.proxy_secret.is_none())
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// The start-up warning of [`identity_without_proxy_secret`], one line; `None` when every such
/// upstream has its secret.
pub fn identity_warning(config: &ProxyConfig) -> Option<String> {
    let names = identity_without_proxy_secret(config);
    let first = names.first()?;
    Some(format!(
        "upstreams without a proxy secret receive identity headers (X-Auth-*): {}; a service that believes them cannot tell the proxy from any caller that reaches it: set upstreams.{first}.proxy_secret_file (docs/proxy.md#the-proxy-secret)",
        names.join(", ")
    ))
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
    let src = read_yaml(path, &file)?;
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
    validate(&Document::new(file, src), &env, Check::Start)
}

/// [`load_config_with_env`] for a rules reload, with the `overrides` the proxy was started with:
/// the listener's certificate files are not read (they have a reload of their own), so a bad
/// certificate on disk holds back only that one.
pub fn reload_config(
    path: impl AsRef<Path>,
    env: impl Fn(&str) -> Option<String>,
    overrides: &Overrides,
) -> Result<ProxyConfig, ConfigError> {
    let path = path.as_ref();
    let file = path.display().to_string();
    let src = read_yaml(path, &file)?;
    let document = Document::new(&file, &src).with_overrides(overrides);
    let mut config = validate(&document, &env, Check::Reload)?;
    config.source = Some(path.to_path_buf());
    Ok(config)
}

/// What a validation is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    /// A start: the listener's certificate files are read, and every override must be read (a
    /// key the proxy does not take from the stack is refused).
    Start,
    /// A rules reload: neither (the certificates have a reload of their own, and a file that
    /// dropped a section leaves its overrides unread).
    Reload,
}

/// Validates `document` with the environment `env` (variables set but empty count as unset);
/// the variables read are kept in the result's document.
fn validate(
    document: &Document,
    env: &dyn Fn(&str) -> Option<String>,
    check: Check,
) -> Result<ProxyConfig, ConfigError> {
    let file = document.name.as_str();
    let raw: RawConfig = yaml::from_str(&document.text).map_err(|e| ConfigError::Syntax {
        file: file.to_owned(),
        message: e.to_string(),
    })?;
    let recorder = Recorder::new(env);
    let env = |k: &str| recorder.get(k).filter(|v| !v.is_empty());
    let validator = Validator {
        file,
        tls_files: check == Check::Start,
        layers: Layers::new(file, &env, &document.overrides),
    };
    let mut config = validator.config(raw)?;
    if check == Check::Start {
        validator.layers.check_all_read()?;
    }
    config.document = document.having_read(recorder.into_seen());
    Ok(config)
}

fn read_yaml(path: &Path, file: &str) -> Result<String, ConfigError> {
    yaml::read_file(path, &yaml::Limits::DEFAULT).map_err(|e| match e {
        yaml::YamlError::Read(error) => ConfigError::Read {
            file: file.to_owned(),
            error,
        },
        other => ConfigError::Syntax {
            file: file.to_owned(),
            message: other.to_string(),
        },
    })
}

struct Validator<'a> {
    file: &'a str,
    /// Whether the listener's certificate and key are read and checked (not on a rules reload).
    tls_files: bool,
    /// The environment and the overrides above the file.
    layers: Layers<'a>,
}

impl Validator<'_> {
    /// A bad value of `field` (dotted key); `value` is shown as given (quote it with [`quoted`]).
    fn invalid(
        &self,
        field: impl AsRef<str>,
        value: impl fmt::Display,
        message: impl Into<String>,
    ) -> ConfigError {
        Self::at(key_origin(self.file, field.as_ref()), value, message)
    }

    /// A bad value at `origin`: a file's key or an environment variable.
    fn at(origin: String, value: impl fmt::Display, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            origin,
            value: Some(value.to_string()),
            problem: message.into(),
        }
    }

    /// The value of `field` by the one precedence: its override, else the environment variable
    /// `var`, else the file.
    fn pick(&self, field: &str, var: Option<&str>, from_file: Option<String>) -> Picked {
        self.layers.pick(field, var, from_file)
    }

    /// The environment (no file key, no override).
    fn env(&self, var: &str) -> Option<String> {
        (self.layers.env)(var)
    }

    /// The shared checks' error, worded like the others.
    fn setting(&self, e: SettingError) -> ConfigError {
        ConfigError::setting(self.file, e, None)
    }

    fn config(&self, raw: RawConfig) -> Result<ProxyConfig, ConfigError> {
        let env = self.layers.env;
        let listen = self.listen("listen", "PROXY_LISTEN", raw.listen)?;
        let admin_listen = self.listen("admin_listen", "PROXY_ADMIN_LISTEN", raw.admin_listen)?;
        if listen == admin_listen && listen.port() != 0 {
            return Err(self.invalid("admin_listen", admin_listen, "must differ from listen"));
        }
        let tls = raw.tls.map(|t| self.tls(t)).transpose()?;
        if raw.h2c && tls.is_some() {
            return Err(self.invalid(
                "h2c",
                "true",
                "h2c is for a cleartext listener; over TLS, clients get HTTP/2 by ALPN",
            ));
        }
        let forward_auth = raw.forward_auth.map(|f| self.forward_auth(f)).transpose()?;
        let tls_elsewhere = [
            ("admin_tls", raw.admin_tls),
            (
                "forward_auth.tls",
                forward_auth.as_ref().is_some_and(|f| f.tls),
            ),
        ];
        for (field, on) in tls_elsewhere {
            if on && tls.is_none() {
                return Err(self.invalid(
                    field,
                    "true",
                    "serves the certificate of the tls: section, which is missing",
                ));
            }
        }
        if let Some(f) = &forward_auth
            && f.listen.port() != 0
            && (f.listen == listen || f.listen == admin_listen)
        {
            return Err(self.invalid(
                "forward_auth.listen",
                f.listen,
                "must differ from listen and admin_listen",
            ));
        }
        let connections = self.connections(raw.connections.unwrap_or_default())?;
        let access_log = raw
            .access_log
            .unwrap_or_default()
            .resolve("PROXY", env)
            .map_err(|e| self.setting(e))?;
        let mut trusted_peers = Vec::new();
        for (i, p) in raw.trusted_peers.iter().enumerate() {
            let cidr: Cidr = p
                .parse()
                .map_err(|m: String| self.invalid(format!("trusted_peers[{i}]"), quoted(p), m))?;
            trusted_peers.push(cidr);
        }
        let threads = raw.threads.unwrap_or(DEFAULT_THREADS);
        if !(1..=256).contains(&threads) {
            return Err(self.invalid("threads", threads, "expected 1 to 256"));
        }
        let grace_period = self.duration("grace_period", raw.grace_period, 5)?;
        let shutdown_timeout = self.duration("shutdown_timeout", raw.shutdown_timeout, 5)?;
        let gate = GateConfig {
            token_source: raw.token_source,
            introspection: raw.introspection,
            jwt: raw.jwt,
            routes: raw.routes,
            revocation: raw.revocation,
            resource: raw.resource,
            audience: raw.audience,
            authorization_servers: raw.authorization_servers,
            resource_name: raw.resource_name,
        }
        .resolve(
            self.file,
            TokenSource::Introspection,
            &GateEnv {
                prefix: "PROXY",
                layers: &self.layers,
            },
        )?;
        if !gate.token_source.checks_tokens() {
            return Err(self.invalid(
                "token_source",
                format!("{:?}", gate.token_source.as_str()),
                "the proxy checks tokens itself: use introspection, jwt or jwt_or_introspection",
            ));
        }

        if raw.upstreams.is_empty() {
            return Err(self.invalid("upstreams", "{}", "declare at least one upstream"));
        }
        let mut upstreams = HashMap::new();
        for (name, u) in raw.upstreams {
            let upstream = self.upstream(&name, u)?;
            upstreams.insert(name, Arc::new(upstream));
        }
        let rules = &gate.rules;
        if rules.routes().is_empty() && !raw.allow_empty_routes {
            return Err(self.invalid(
                "routes",
                "[]",
                format!("no routes: every request would be refused 404 ({NO_ROUTES_HINT})"),
            ));
        }
        for route in rules.routes() {
            let error = |value: &str, message: String| {
                let (index, name) = (route.index(), &route.name);
                ConfigError::route(self.file, index, name, "upstream", Some(value), message)
            };
            match &route.upstream {
                None => {
                    return Err(error(
                        "(missing)",
                        "every route must name an upstream".into(),
                    ));
                }
                Some(u) if !upstreams.contains_key(u) => {
                    let mut known: Vec<&str> = upstreams.keys().map(String::as_str).collect();
                    known.sort_unstable();
                    return Err(error(
                        u,
                        format!("no such upstream (declared: {})", known.join(", ")),
                    ));
                }
                Some(_) => {}
            }
        }
        let app_probes = match self.env(app_probes::ENV) {
            Some(json) => AppProbes::parse(&json)
                .map_err(|message| ConfigError::problem(env_origin(app_probes::ENV), message))?,
            None => AppProbes::default(),
        };
        Ok(ProxyConfig {
            source: None,
            listen,
            admin_listen,
            tls,
            admin_tls: raw.admin_tls,
            h2c: raw.h2c,
            forward_auth,
            connections,
            threads,
            work_stealing: raw.work_stealing,
            grace_period,
            shutdown_timeout,
            gate,
            upstreams,
            document: Document::default(),
            app_probes: Arc::new(app_probes),
            access_log,
            log_format: raw.log_format,
            trusted_peers,
        })
    }

    fn forward_auth(&self, raw: RawForwardAuth) -> Result<ForwardAuthConfig, ConfigError> {
        let listen = self.listen(
            "forward_auth.listen",
            "PROXY_FORWARD_AUTH_LISTEN",
            raw.listen,
        )?;
        let ingress = match raw.ingress.as_deref() {
            Some(name) => Ingress::parse(name).ok_or_else(|| {
                self.invalid(
                    "forward_auth.ingress",
                    quoted(name),
                    format!("expected {}", Ingress::NAMES),
                )
            })?,
            None => {
                return Err(self.invalid(
                    "forward_auth.ingress",
                    "(missing)",
                    format!(
                        "say which ingress asks ({}): only its headers name the original request",
                        Ingress::NAMES
                    ),
                ));
            }
        };
        let mut trusted_peers = Vec::new();
        for (i, p) in raw.trusted_peers.iter().enumerate() {
            let cidr: Cidr = p.parse().map_err(|m: String| {
                self.invalid(format!("forward_auth.trusted_peers[{i}]"), quoted(p), m)
            })?;
            trusted_peers.push(cidr);
        }
        if let Some(p) = &raw.path_prefix
            && (!p.starts_with('/') || p.ends_with('/'))
        {
            return Err(self.invalid(
                "forward_auth.path_prefix",
                quoted(p),
                "expected a path starting with / and not ending with / (e.g. /ext-authz)",
            ));
        }
        if raw.path_prefix.is_some() && ingress != Ingress::Envoy {
            return Err(self.invalid(
                "forward_auth.path_prefix",
                quoted(raw.path_prefix.as_deref().unwrap_or_default()),
                "only for ingress: envoy (nginx and Traefik name the original target in headers)",
            ));
        }
        Ok(ForwardAuthConfig {
            listen,
            ingress,
            trusted_peers,
            path_prefix: raw.path_prefix,
            client_cert_header: raw.client_cert_header,
            tls: raw.tls,
        })
    }

    /// The `tls:` section, its files loaded and checked now (see [`tls::load`]).
    fn tls(&self, raw: RawTls) -> Result<TlsFiles, ConfigError> {
        let required = match raw.client_auth.as_deref() {
            None | Some("required") => true,
            Some("optional") => false,
            Some(other) => {
                return Err(self.invalid(
                    "tls.client_auth",
                    quoted(other),
                    "expected required or optional",
                ));
            }
        };
        let client_auth = match raw.client_ca_file {
            Some(ca_file) => Some(tls::ClientAuth {
                ca_file: ca_file.into(),
                required,
            }),
            None if raw.client_auth.is_some() => {
                return Err(self.invalid(
                    "tls.client_auth",
                    quoted(raw.client_auth.as_deref().unwrap_or_default()),
                    "client certificates need tls.client_ca_file, the CA bundle to verify them",
                ));
            }
            None => None,
        };
        let files = TlsFiles {
            cert_file: raw.cert_file.into(),
            key_file: raw.key_file.into(),
            client_auth,
        };
        if self.tls_files {
            tls::load(&files, tls::unix_now()).map_err(|e| {
                self.invalid(
                    format!("tls.{}", e.field),
                    quoted(&e.file.display().to_string()),
                    e.message,
                )
            })?;
        }
        Ok(files)
    }

    /// An upstream's `tls:` section: the SNI defaults to the address's host, the CA bundle is
    /// read now.
    fn upstream_tls(
        &self,
        prefix: &str,
        raw: RawUpstreamTls,
        addresses: &[UpstreamAddr],
    ) -> Result<UpstreamTls, ConfigError> {
        let host = |a: &UpstreamAddr| match a {
            UpstreamAddr::Socket(a) => a.ip().to_string(),
            UpstreamAddr::Name { host, .. } => host.clone(),
        };
        let sni = match raw.sni {
            Some(s) if s.trim().is_empty() || s.contains(char::is_whitespace) => {
                return Err(self.invalid(
                    format!("{prefix}.tls.sni"),
                    quoted(&s),
                    "expected a host name",
                ));
            }
            Some(s) => s,
            None => {
                let first = host(&addresses[0]);
                if addresses.iter().any(|a| host(a) != first) {
                    return Err(self.invalid(
                        format!("{prefix}.tls.sni"),
                        "(missing)",
                        "the addresses name different hosts: say which name to send and verify",
                    ));
                }
                first
            }
        };
        let ca_file = raw.ca_file.map(PathBuf::from);
        let ca = match &ca_file {
            None => None,
            Some(path) => Some(tls::load_ca(path).map_err(|message| {
                self.invalid(
                    format!("{prefix}.tls.ca_file"),
                    quoted(&path.display().to_string()),
                    message,
                )
            })?),
        };
        let client = match (raw.client_cert_file, raw.client_key_file) {
            (None, None) => None,
            (Some(cert_file), Some(key_file)) => {
                let files = TlsFiles {
                    cert_file: cert_file.into(),
                    key_file: key_file.into(),
                    client_auth: None,
                };
                let pair = tls::load_client_pair(&files).map_err(|e| {
                    let field = e.field.strip_prefix("client_").unwrap_or(e.field);
                    self.invalid(
                        format!("{prefix}.tls.client_{field}"),
                        quoted(&e.file.display().to_string()),
                        e.message,
                    )
                })?;
                Some((files, pair))
            }
            (cert, _) => {
                let (field, other) = if cert.is_some() {
                    ("client_cert_file", "client_key_file")
                } else {
                    ("client_key_file", "client_cert_file")
                };
                return Err(self.invalid(
                    format!("{prefix}.tls.{field}"),
                    "(set)",
                    format!("needs {prefix}.tls.{other} too"),
                ));
            }
        };
        Ok(UpstreamTls::new(
            sni,
            ca_file,
            ca,
            !raw.insecure_skip_verify,
            client,
        ))
    }

    fn listen(&self, field: &str, var: &str, value: String) -> Result<SocketAddr, ConfigError> {
        let picked = self.pick(field, Some(var), Some(value));
        let value = picked.value.unwrap_or_default();
        value.trim().parse().map_err(|_| {
            Self::at(
                picked.origin,
                format!("{value:?}"),
                "expected IP:port, e.g. 127.0.0.1:8000",
            )
        })
    }

    /// A duration of the file (or its override), `default_secs` when absent.
    fn duration(
        &self,
        field: &str,
        value: Option<RawDuration>,
        default_secs: u64,
    ) -> Result<Duration, ConfigError> {
        let picked = self.pick(field, None, value.map(|v| v.to_string()));
        let value = picked.value.map(RawDuration::Text);
        settings::duration(field, value.as_ref(), Duration::from_secs(default_secs))
            .map_err(|e| Self::at(picked.origin, quoted(&e.value), e.problem))
    }

    fn connections(&self, raw: RawConnections) -> Result<ConnectionLimits, ConfigError> {
        let defaults = ConnectionLimits::default();
        let positive = |key: &str, value: Option<RawDuration>, default: Duration| {
            let field = format!("connections.{key}");
            let d =
                settings::duration(&field, value.as_ref(), default).map_err(|e| self.setting(e))?;
            if d.is_zero() {
                return Err(self.invalid(field, "0", "must be positive"));
            }
            Ok(d)
        };
        let count = |key: &str, value: Option<usize>, default: usize| match value {
            None => Ok(default),
            Some(n) if (1..=1_000_000).contains(&n) => Ok(n),
            Some(n) => Err(self.invalid(format!("connections.{key}"), n, "expected 1 to 1000000")),
        };
        Ok(ConnectionLimits {
            head_timeout: positive("head_timeout", raw.head_timeout, defaults.head_timeout)?,
            body_idle_timeout: positive(
                "body_idle_timeout",
                raw.body_idle_timeout,
                defaults.body_idle_timeout,
            )?,
            keepalive_timeout: positive(
                "keepalive_timeout",
                raw.keepalive_timeout,
                defaults.keepalive_timeout,
            )?,
            max: count("max", raw.max, defaults.max)?,
            admin_max: count("admin_max", raw.admin_max, defaults.admin_max)?,
        })
    }

    fn upstream(&self, name: &str, u: RawUpstream) -> Result<Upstream, ConfigError> {
        let prefix = format!("upstreams.{name}");
        if name.trim().is_empty() {
            return Err(self.invalid("upstreams", format!("{name:?}"), "empty upstream name"));
        }
        let (addresses, weights) = self.addresses(&prefix, name, u.address, u.addresses)?;
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
        let proxy_secret = self.proxy_secret(&prefix, name, u.proxy_secret_file)?;
        let tls = match u.tls {
            None => None,
            Some(t) => Some(self.upstream_tls(&prefix, t, &addresses)?),
        };
        if u.h2c && tls.is_some() {
            return Err(self.invalid(
                format!("{prefix}.h2c"),
                "true",
                "h2c is cleartext HTTP/2; over tls, HTTP/2 is negotiated by ALPN",
            ));
        }
        let balance = match u.balance.as_deref() {
            None | Some("round_robin") => Balance::RoundRobin,
            Some("least_connections") => Balance::LeastConnections,
            Some(other) => {
                return Err(self.invalid(
                    format!("{prefix}.balance"),
                    quoted(other),
                    "expected round_robin or least_connections",
                ));
            }
        };
        let several = addresses.len() > 1
            || addresses
                .iter()
                .any(|a| matches!(a, UpstreamAddr::Name { .. }));
        let health_check = self.health_check(&prefix, u.health_check, several)?;
        let eject = self.eject(&prefix, u.eject.unwrap_or_default())?;
        let resolve_interval =
            self.duration(&format!("{prefix}.resolve_interval"), u.resolve_interval, 5)?;
        if resolve_interval.is_zero() {
            return Err(self.invalid(
                format!("{prefix}.resolve_interval"),
                "0",
                "must be positive",
            ));
        }
        Ok(Upstream {
            name: name.to_owned(),
            addresses,
            weights,
            balance,
            health_check,
            eject,
            resolve_interval,
            pass_authorization: u.pass_authorization,
            h2c: u.h2c,
            tls,
            host,
            preserve_header_case: u.preserve_header_case,
            connect_timeout,
            read_timeout: read_timeout.filter(|d| !d.is_zero()),
            proxy_secret,
        })
    }

    /// The upstream's addresses and their weights: the override of `upstreams.<name>.address`
    /// or env `PROXY_UPSTREAM_<NAME>_ADDRESS` (one, or several separated by commas, each weight
    /// 1), else `address` or `addresses` (exactly one of the two; an entry of `addresses` may
    /// carry a `weight`).
    fn addresses(
        &self,
        prefix: &str,
        name: &str,
        address: Option<String>,
        addresses: Option<Vec<RawAddress>>,
    ) -> Result<(Vec<UpstreamAddr>, Vec<usize>), ConfigError> {
        let var = upstream_address_var(name);
        let above_file = self.layers.given(&format!("{prefix}.address"), Some(&var));
        // The key the addresses came from (else the variable or override, named by its origin).
        let (key, list): (Result<String, String>, Vec<RawAddress>) =
            match (above_file, address, addresses) {
                (Some((origin, v)), _, _) => (
                    Err(origin),
                    v.split(',')
                        .map(|a| RawAddress::Plain(a.trim().to_owned()))
                        .collect(),
                ),
                (None, Some(_), Some(_)) => {
                    return Err(self.invalid(
                        format!("{prefix}.addresses"),
                        "(both)",
                        "give address or addresses, not both",
                    ));
                }
                (None, Some(a), None) => {
                    (Ok(format!("{prefix}.address")), vec![RawAddress::Plain(a)])
                }
                (None, None, Some(list)) if !list.is_empty() => {
                    (Ok(format!("{prefix}.addresses")), list)
                }
                (None, None, _) => {
                    return Err(self.invalid(
                        format!("{prefix}.address"),
                        "(missing)",
                        "every upstream needs an address (or a list under addresses)",
                    ));
                }
            };
        let several = list.len() > 1;
        let origin = |i: usize| match &key {
            Err(origin) => origin.clone(),
            Ok(k) if several => key_origin(self.file, &format!("{k}[{i}]")),
            Ok(k) => key_origin(self.file, k),
        };
        let mut parsed = Vec::with_capacity(list.len());
        let mut weights = Vec::with_capacity(list.len());
        for (i, entry) in list.iter().enumerate() {
            let (a, weight) = match entry {
                RawAddress::Plain(a) => (a, None),
                RawAddress::Weighted(w) => (&w.address, w.weight),
            };
            let addr =
                parse_upstream_addr(a).map_err(|m| Self::at(origin(i), format!("{a:?}"), m))?;
            if parsed.contains(&addr) {
                return Err(Self::at(origin(i), format!("{a:?}"), "listed twice"));
            }
            let weight = match weight {
                None => 1,
                Some(w) if w.fract() == 0.0 && (1.0..=MAX_WEIGHT as f64).contains(&w) => w as usize,
                Some(w) => {
                    return Err(Self::at(
                        key_origin(self.file, &format!("{prefix}.addresses[{i}].weight")),
                        w,
                        format!(
                            "expected a whole number from 1 to {MAX_WEIGHT} (to send an address \
                             nothing, leave it out)"
                        ),
                    ));
                }
            };
            parsed.push(addr);
            weights.push(weight);
        }
        Ok((parsed, weights))
    }

    /// The `health_check:` section; without one, a TCP check when the upstream can have several
    /// addresses (`several`), none otherwise.
    fn health_check(
        &self,
        prefix: &str,
        raw: Option<RawHealthCheck>,
        several: bool,
    ) -> Result<Option<HealthCheck>, ConfigError> {
        let on = match &raw {
            Some(r) => r.enabled.unwrap_or(true),
            None => several,
        };
        if !on {
            return Ok(None);
        }
        let raw = raw.unwrap_or_default();
        let field = |key: &str| format!("{prefix}.health_check.{key}");
        if let Some(p) = &raw.path
            && (!p.starts_with('/') || p.contains(char::is_whitespace))
        {
            return Err(self.invalid(field("path"), quoted(p), "expected a path such as /healthz"));
        }
        let positive = |key: &str, v: Option<RawDuration>, default: Duration| {
            let d = settings::duration(&field(key), v.as_ref(), default)
                .map_err(|e| self.setting(e))?;
            if d.is_zero() {
                return Err(self.invalid(field(key), "0", "must be positive"));
            }
            Ok(d)
        };
        let count = |key: &str, v: Option<usize>, default: usize| match v {
            None => Ok(default),
            Some(n) if (1..=100).contains(&n) => Ok(n),
            Some(n) => Err(self.invalid(field(key), n, "expected 1 to 100")),
        };
        Ok(Some(HealthCheck {
            path: raw.path,
            interval: positive("interval", raw.interval, Duration::from_secs(5))?,
            timeout: positive("timeout", raw.timeout, Duration::from_secs(1))?,
            unhealthy_after: count("unhealthy_after", raw.unhealthy_after, 2)?,
            healthy_after: count("healthy_after", raw.healthy_after, 1)?,
        }))
    }

    /// The `eject:` section.
    fn eject(&self, prefix: &str, raw: RawEject) -> Result<Eject, ConfigError> {
        let defaults = Eject::default();
        let after_failures = match raw.after_failures {
            None => defaults.after_failures,
            Some(n) if (1..=1000).contains(&n) => n,
            Some(n) => {
                return Err(self.invalid(
                    format!("{prefix}.eject.after_failures"),
                    n,
                    "expected 1 to 1000",
                ));
            }
        };
        let field = format!("{prefix}.eject.duration");
        let duration = settings::duration(&field, raw.duration.as_ref(), defaults.duration)
            .map_err(|e| self.setting(e))?;
        if duration.is_zero() {
            return Err(self.invalid(field, "0", "must be positive"));
        }
        let mut statuses = Vec::new();
        for (i, status) in raw.statuses.unwrap_or_default().into_iter().enumerate() {
            let field = format!("{prefix}.eject.statuses[{i}]");
            let Some(status) = u16::try_from(status)
                .ok()
                .filter(|s| (500..=599).contains(s))
            else {
                return Err(self.invalid(field, status, "expected a status from 500 to 599"));
            };
            if statuses.contains(&status) {
                return Err(self.invalid(field, status, "listed twice"));
            }
            statuses.push(status);
        }
        Ok(Eject {
            after_failures,
            duration,
            statuses,
        })
    }

    /// The upstream's `proxy_secret`: its override or env `PROXY_UPSTREAM_<NAME>_PROXY_SECRET`,
    /// else the file `proxy_secret_file` names ([`resource_server::layers::secret_or_file`]).
    fn proxy_secret(
        &self,
        prefix: &str,
        name: &str,
        file: Option<String>,
    ) -> Result<Option<HeaderValue>, ConfigError> {
        let var = upstream_secret_var(name);
        let text = self.pick(&format!("{prefix}.proxy_secret"), Some(&var), None);
        let file = self.pick(&format!("{prefix}.proxy_secret_file"), None, file);
        let Some(secret) = resource_server::layers::secret_or_file("the proxy secret", text, file)?
        else {
            return Ok(None);
        };
        let origin = secret.origin;
        let secret =
            ProxySecret::new(&secret.text).map_err(|m| Self::at(origin.clone(), "(hidden)", m))?;
        let mut value = HeaderValue::from_str(secret.expose())
            .map_err(|_| Self::at(origin, "(hidden)", "not a header value"))?;
        value.set_sensitive(true);
        Ok(Some(value))
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

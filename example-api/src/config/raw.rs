//! `config/example-api.yaml` as written: serde mirror structs (`deny_unknown_fields`), no validation.

use resource_server::RouteSpec;
pub use resource_server::settings::{RawCache, RawDuration, RawIntrospection};
pub use resource_server::yaml::OneOrMany;
pub use resource_server::{RawAudience, RawJwt, RawRevocation};
use serde::Deserialize;

/// The whole file; every key but `routes` is optional with a named default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `behind_proxy` (the default), `introspection`, `jwt`, `jwt_or_introspection` or `none`
    /// (benchmarks only; unsafe): the proxy's `token_source`, and the same names.
    #[serde(default)]
    pub token_source: Option<String>,
    /// The old name of `token_source` (`behind-proxy`, `introspect`, `jwt`, `jwt-or-introspect`,
    /// `none`): still read, with a deprecation warning.
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
    /// Used in `introspect` mode; its `leeway` also in `behind-proxy` mode (the rest is ignored,
    /// but still parsed and checked, in the others).
    #[serde(default)]
    pub introspection: Option<RawIntrospection>,
    /// Local JWT validation (`jwt` and `jwt-or-introspect` modes), see `resource_server::jwt::raw`.
    #[serde(default)]
    pub jwt: Option<RawJwt>,
    /// The authorization server's revocation stream (see `resource_server::ssf`).
    #[serde(default)]
    pub revocation: Option<RawRevocation>,
    /// `behind_proxy`: a file holding the secret the proxy sends in `X-Tokengate-Proxy-Secret`
    /// (or env `EXAMPLE_API_PROXY_SECRET`, `EXAMPLE_API_PROXY_SECRET_FILE`).
    #[serde(default)]
    pub proxy_secret_file: Option<String>,
    /// This API's resource identifier (RFC 8707, RFC 9728; `EXAMPLE_API_RESOURCE`): the default
    /// audience; with it, the metadata is served and named in every 401 (when the API checks
    /// tokens itself).
    #[serde(default)]
    pub resource: Option<String>,
    /// The audiences a token must name one of (default: `[resource]`).
    #[serde(default)]
    pub audience: Option<RawAudience>,
    /// The metadata's `authorization_servers` (default: the issuer of `jwt` or `introspection`).
    #[serde(default)]
    pub authorization_servers: Option<OneOrMany>,
    /// The metadata's `resource_name`.
    #[serde(default)]
    pub resource_name: Option<String>,
    /// Access rules in the resource-server route format (`upstream` omitted).
    #[serde(default)]
    pub routes: Option<Vec<RouteSpec>>,
    /// `text` (default) or `json`; the `LOG_FORMAT` environment variable wins.
    #[serde(default)]
    pub log_format: Option<resource_server::logging::LogFormat>,
}

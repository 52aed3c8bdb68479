//! `config/example-api.yaml` as written: serde mirror structs (`deny_unknown_fields`), no validation.

pub use resource_server::RawJwt;
use resource_server::RouteSpec;
pub use resource_server::settings::{RawCache, RawDuration, RawIntrospection};
use serde::Deserialize;

/// The whole file; every key but `routes` is optional with a named default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `introspect`, `jwt`, `jwt-or-introspect`, `behind-proxy` or `none` (benchmarks only;
    /// unsafe). Default `behind-proxy`.
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
    /// Access rules in the resource-server route format (`upstream` omitted).
    #[serde(default)]
    pub routes: Option<Vec<RouteSpec>>,
}

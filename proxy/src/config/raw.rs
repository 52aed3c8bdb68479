//! The proxy's YAML file as written: serde mirror structs (`deny_unknown_fields`), no validation.

use std::collections::BTreeMap;

use resource_server::RouteSpec;
use serde::Deserialize;

/// The whole file. Durations are strings such as `500ms`, `3s`, `5m` (a bare number = seconds).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Address of the proxy listener, `host:port`.
    pub listen: String,
    /// Address of the admin listener (`/healthz`, `/readyz`, `/metrics`), `host:port`.
    pub admin_listen: String,
    /// Worker threads of the proxy service (default 2).
    #[serde(default)]
    pub threads: Option<usize>,
    /// After SIGTERM: how long the listeners stay open and in-flight requests may finish
    /// (default `5s`, well under Kubernetes' default 30 s termination grace period).
    #[serde(default)]
    pub grace_period: Option<RawDuration>,
    /// After the grace period: how long the runtimes get to finish their tasks (default `5s`).
    #[serde(default)]
    pub shutdown_timeout: Option<RawDuration>,
    pub upstreams: BTreeMap<String, RawUpstream>,
    pub introspection: RawIntrospection,
    pub routes: Vec<RouteSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    /// `host:port`; an IP literal is used as is, a name is resolved on each connection.
    pub address: String,
    /// Whether the client's `Authorization` header is forwarded (default false).
    #[serde(default)]
    pub pass_authorization: bool,
    /// `Host` header sent upstream; default: the client's `Host`.
    #[serde(default)]
    pub host: Option<String>,
    /// TCP connect timeout (default `5s`).
    #[serde(default)]
    pub connect_timeout: Option<RawDuration>,
    /// Longest wait for the upstream to send data (default: none).
    #[serde(default)]
    pub read_timeout: Option<RawDuration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIntrospection {
    /// The RFC 7662 endpoint, e.g. `http://127.0.0.1:8001/o/introspect/`.
    pub url: String,
    /// A bearer token with the `introspection` scope (env `PROXY_AUTH_TOKEN`).
    #[serde(default)]
    pub auth_token: Option<String>,
    /// Client credentials of an application allowed to introspect (env `PROXY_CLIENT_ID`).
    #[serde(default)]
    pub client_id: Option<String>,
    /// (env `PROXY_CLIENT_SECRET`)
    #[serde(default)]
    pub client_secret: Option<String>,
    /// Default `1s`.
    #[serde(default)]
    pub connect_timeout: Option<RawDuration>,
    /// Default `3s`.
    #[serde(default)]
    pub request_timeout: Option<RawDuration>,
    #[serde(default)]
    pub cache: Option<RawCache>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    /// Longest life of an active answer (default `60s`; `0s` disables the cache).
    #[serde(default)]
    pub max_ttl: Option<RawDuration>,
    /// Life of an inactive answer (default `5s`).
    #[serde(default)]
    pub negative_ttl: Option<RawDuration>,
    /// Entries (default 100000).
    #[serde(default)]
    pub capacity: Option<u64>,
    /// Serve a cached active answer this long after it expired while the authorization server
    /// is unreachable (default `0s` = off).
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

impl std::fmt::Display for RawDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RawDuration::Seconds(n) => write!(f, "{n}"),
            RawDuration::Text(s) => write!(f, "{s}"),
        }
    }
}

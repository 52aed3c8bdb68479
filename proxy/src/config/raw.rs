//! The proxy's YAML file as written: serde mirror structs (`deny_unknown_fields`), no validation.

use std::collections::BTreeMap;

use resource_server::RouteSpec;
pub use resource_server::access_log::RawAccessLog;
pub use resource_server::logging::LogFormat;
pub use resource_server::settings::{RawCache, RawDuration};
pub use resource_server::yaml::OneOrMany;
pub use resource_server::{RawAudience, RawJwt, RawRevocation};
use serde::Deserialize;

/// The whole file. Durations are strings such as `500ms`, `3s`, `5m` (a bare number = seconds).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Address of the proxy listener, `host:port`.
    pub listen: String,
    /// Address of the admin listener (`/healthz`, `/readyz`, `/metrics`), `host:port`.
    pub admin_listen: String,
    /// The admin listener serves TLS too, with the `tls:` certificate (default false).
    #[serde(default)]
    pub admin_tls: bool,
    /// TLS on the proxy listener (`listen`): certificate and key PEM files. Default: cleartext.
    #[serde(default)]
    pub tls: Option<RawTls>,
    /// HTTP/2 in cleartext with prior knowledge (h2c) on the proxy listener, besides HTTP/1.1
    /// (default false). With `tls`, HTTP/2 is negotiated by ALPN instead.
    #[serde(default)]
    pub h2c: bool,
    /// The forward-auth decision endpoint on a listener of its own (default: none).
    #[serde(default)]
    pub forward_auth: Option<RawForwardAuth>,
    /// Limits on client connections, for each listener (see [`RawConnections`]).
    #[serde(default)]
    pub connections: Option<RawConnections>,
    /// Worker threads of the proxy service (default 1).
    #[serde(default)]
    pub threads: Option<usize>,
    /// One work-stealing runtime over the threads (`true`, the default), or one single-threaded
    /// runtime per thread, as nginx workers are (`false`; only for a process that starts one
    /// proxy: Pingora 0.9's single-threaded runtimes cannot be restarted in a process).
    #[serde(default)]
    pub work_stealing: Option<bool>,
    /// After SIGTERM: how long the listeners stay open and in-flight requests may finish
    /// (default `5s`, well under Kubernetes' default 30 s termination grace period).
    #[serde(default)]
    pub grace_period: Option<RawDuration>,
    /// After the grace period: how long the runtimes get to finish their tasks (default `5s`).
    #[serde(default)]
    pub shutdown_timeout: Option<RawDuration>,
    pub upstreams: BTreeMap<String, RawUpstream>,
    /// Required unless `token_source: jwt` (which never introspects).
    #[serde(default)]
    pub introspection: Option<RawIntrospection>,
    /// How tokens are checked: `introspection` (default), `jwt` (local validation with the
    /// `jwt:` section) or `jwt_or_introspection` (JWTs locally, opaque tokens introspected).
    #[serde(default)]
    pub token_source: Option<String>,
    /// Local JWT validation (see `resource_server::jwt::raw`).
    #[serde(default)]
    pub jwt: Option<RawJwt>,
    /// The authorization server's revocation stream (see `resource_server::ssf`).
    #[serde(default)]
    pub revocation: Option<RawRevocation>,
    #[serde(default)]
    pub routes: Vec<RouteSpec>,
    /// This API's resource identifier (RFC 8707, RFC 9728; `PROXY_RESOURCE`): the default
    /// audience, and with it the protected resource metadata is served and named in every 401.
    #[serde(default)]
    pub resource: Option<String>,
    /// The audiences a token must name one of, for every token source (default: `[resource]`).
    #[serde(default)]
    pub audience: Option<RawAudience>,
    /// The metadata's `authorization_servers` (`PROXY_AUTHORIZATION_SERVERS`; default: the
    /// issuer of `jwt` or `introspection`).
    #[serde(default)]
    pub authorization_servers: Option<OneOrMany>,
    /// The metadata's `resource_name`.
    #[serde(default)]
    pub resource_name: Option<String>,
    /// Start with no routes at all (every request answered 404). Off by default: an empty rule
    /// set is almost always a truncated file. A reload never swaps in an empty rule set.
    #[serde(default)]
    pub allow_empty_routes: bool,
    /// Peers (an ingress, a load balancer) whose `X-Request-Id` is kept: CIDR blocks or
    /// addresses (default none: every request gets an id of the proxy's making).
    #[serde(default)]
    pub trusted_peers: Vec<String>,
    /// One line per request at info, target `access` (see `resource_server::access_log`).
    #[serde(default)]
    pub access_log: Option<RawAccessLog>,
    /// `text` (default) or `json`; the `LOG_FORMAT` environment variable wins.
    #[serde(default)]
    pub log_format: Option<LogFormat>,
}

/// The `tls:` section of the proxy listener.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    /// The certificate chain, leaf first (PEM).
    pub cert_file: String,
    /// Its private key (PEM: PKCS#8, PKCS#1 RSA or SEC1 EC, unencrypted).
    pub key_file: String,
    /// Client certificates (mTLS): the CA bundle (PEM) they must chain to. Default: none asked
    /// for. Reloaded with the certificate.
    #[serde(default)]
    pub client_ca_file: Option<String>,
    /// With `client_ca_file`: `required` (the default; a connection without a valid client
    /// certificate fails its handshake) or `optional` (one without is let through, and a
    /// certificate-bound token is refused on it).
    #[serde(default)]
    pub client_auth: Option<String>,
}

/// The `forward_auth:` section.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawForwardAuth {
    /// Address of the decision endpoint, `host:port`.
    pub listen: String,
    /// `nginx`, `traefik` or `envoy` (required): the one header family read.
    #[serde(default)]
    pub ingress: Option<String>,
    /// IP addresses or CIDR blocks whose `X-Original-*` (nginx) or `X-Forwarded-*` (Traefik)
    /// headers are believed (default: none).
    #[serde(default)]
    pub trusted_peers: Vec<String>,
    /// Believe `X-Tokengate-Client-Cert` from trusted peers (default false): only when the
    /// ingress sets it from the verified client certificate, or clears it, on every check.
    #[serde(default)]
    pub client_cert_header: bool,
    /// Envoy `ext_authz`: the original path follows this prefix (default: the path as is).
    #[serde(default)]
    pub path_prefix: Option<String>,
    /// Serve TLS with the `tls:` certificate (default false).
    #[serde(default)]
    pub tls: bool,
}

/// The `connections:` section: how long and how many clients may hold a connection open.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConnections {
    /// Time to send a whole request head (request line and headers), from the connection's
    /// start or a later request's first byte (default `10s`).
    #[serde(default)]
    pub head_timeout: Option<RawDuration>,
    /// Longest silence while a request body is read or the response written (default `10s`).
    #[serde(default)]
    pub body_idle_timeout: Option<RawDuration>,
    /// Longest wait for the next request on a kept-alive connection (default `60s`).
    #[serde(default)]
    pub keepalive_timeout: Option<RawDuration>,
    /// Most connections open at once on the proxy listener (default 1024).
    #[serde(default)]
    pub max: Option<usize>,
    /// Most connections open at once on the admin listener (default 64).
    #[serde(default)]
    pub admin_max: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    /// `host:port`; an IP literal is used as is, a name is resolved at start, on reload and
    /// every `resolve_interval`, every address it has taking traffic. Give this or `addresses`.
    #[serde(default)]
    pub address: Option<String>,
    /// Several `host:port`s, traffic spread over them (see `balance`); an entry may be
    /// `{ address: host:port, weight: 3 }` (default weight 1).
    #[serde(default)]
    pub addresses: Option<Vec<RawAddress>>,
    /// `round_robin` (default) or `least_connections` (fewest requests in flight through this
    /// proxy).
    #[serde(default)]
    pub balance: Option<String>,
    /// Active health checks (default: a TCP connect every 5 s when the upstream can have several
    /// addresses, none for one IP address).
    #[serde(default)]
    pub health_check: Option<RawHealthCheck>,
    /// Passive ejection: an address that refuses connections is left out for a while.
    #[serde(default)]
    pub eject: Option<RawEject>,
    /// How often DNS names are resolved again (default `5s`).
    #[serde(default)]
    pub resolve_interval: Option<RawDuration>,
    /// Whether the client's `Authorization` header is forwarded (default false).
    #[serde(default)]
    pub pass_authorization: bool,
    /// `Host` header sent upstream; default: the client's `Host`.
    #[serde(default)]
    pub host: Option<String>,
    /// Whether request header names reach this upstream spelled as the client sent them (default
    /// false: standard names titled, `Host`, others in lower case, as Envoy and HTTP/2 send them;
    /// field names are case-insensitive, RFC 9110 §5.1). True costs each proxied request about
    /// 7,000 instructions more (Pingora's head keeps the spellings in a second map).
    #[serde(default)]
    pub preserve_header_case: bool,
    /// TCP connect timeout (default `5s`).
    #[serde(default)]
    pub connect_timeout: Option<RawDuration>,
    /// Longest wait for the upstream to send data (default: none).
    #[serde(default)]
    pub read_timeout: Option<RawDuration>,
    /// A file holding the secret sent to this upstream in `X-Tokengate-Proxy-Secret`, by which
    /// it tells the proxy from any other local process (or env
    /// `PROXY_UPSTREAM_<NAME>_PROXY_SECRET`). Default: none sent.
    #[serde(default)]
    pub proxy_secret_file: Option<String>,
    /// Speak HTTP/2 with prior knowledge (h2c) to this upstream, as gRPC servers expect
    /// (default false: HTTP/1.1).
    #[serde(default)]
    pub h2c: bool,
    /// TLS to this upstream (default: cleartext).
    #[serde(default)]
    pub tls: Option<RawUpstreamTls>,
}

/// One entry of `addresses:`: `host:port`, or with a weight.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawAddress {
    Plain(String),
    Weighted(RawWeighted),
}

/// `{ address: host:port, weight: N }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWeighted {
    pub address: String,
    /// Relative share of the requests, 1 to 100 (default 1). A number of any shape is read so
    /// that 0, negative, fractional or huge weights get a message naming the key.
    #[serde(default)]
    pub weight: Option<f64>,
}

/// An upstream's `health_check:` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealthCheck {
    /// `false` turns active checks off (default true when the section is given).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// An HTTP GET of this path, healthy on 200 (default: a TCP connect, plus the TLS handshake
    /// for a TLS upstream).
    #[serde(default)]
    pub path: Option<String>,
    /// Time between checks (default `5s`).
    #[serde(default)]
    pub interval: Option<RawDuration>,
    /// Connect (and read) timeout of one check (default `1s`).
    #[serde(default)]
    pub timeout: Option<RawDuration>,
    /// Consecutive failed checks that mark an address down (default 2).
    #[serde(default)]
    pub unhealthy_after: Option<usize>,
    /// Consecutive good checks that bring it back (default 1).
    #[serde(default)]
    pub healthy_after: Option<usize>,
}

/// An upstream's `eject:` section (passive health).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEject {
    /// Consecutive failures that eject an address (default 1): failed connections, and
    /// answers with one of `statuses`.
    #[serde(default)]
    pub after_failures: Option<u32>,
    /// Upstream answer statuses counted as failures, each 500 to 599 (default none: only
    /// failed connections count).
    #[serde(default)]
    pub statuses: Option<Vec<i64>>,
    /// How long it is left out, unless an active check sees it healthy sooner (default `10s`).
    #[serde(default)]
    pub duration: Option<RawDuration>,
}

/// An upstream's `tls:` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstreamTls {
    /// The name sent as SNI and verified (default: the address's host name or IP).
    #[serde(default)]
    pub sni: Option<String>,
    /// A PEM bundle of the CAs to trust (default: the system's roots).
    #[serde(default)]
    pub ca_file: Option<String>,
    /// Accept any certificate (default false). For tests only: anyone on the path can then
    /// read and change the traffic.
    #[serde(default)]
    pub insecure_skip_verify: bool,
    /// A client certificate chain (PEM, leaf first) shown to an upstream that asks for one
    /// (mTLS); with `client_key_file`. Read at start and on reload.
    #[serde(default)]
    pub client_cert_file: Option<String>,
    /// The private key of `client_cert_file` (PEM, unencrypted).
    #[serde(default)]
    pub client_key_file: Option<String>,
}

pub use resource_server::settings::RawIntrospection;

//! Token checking shared by the proxy and the example API: bearer parsing, route rules, the
//! allow/deny decision, an RFC 7662 introspection client and its moka cache, and local
//! validation of JWT access tokens (RFC 9068). No web framework.
//!
//! The data path of one request: a binary's YAML holds a [`GateConfig`] (`token_source`,
//! `introspection`, `jwt`, `routes`), resolved once with the binary's environment into
//! [`GateSettings`], from which [`Gate::build`] makes the [`Gate`]: the route [`rules::Rules`]
//! and the token [`gate::Check`] (introspection by [`checker::TokenChecker`] with a strict
//! [`claims::Claims`] read and refusals by [`policy::AnswerPolicy`]; local JWT validation by
//! [`jwt::JwtValidator`]; both; or the proxy's identity headers, [`forwarded::ForwardedIdentity`]).
//! Per request, [`Gate::authorize`] finds the route, parses the bearer once, asks the check only
//! when the route needs a token, and [`decision::decide`] (with the check's leeway) gives
//! `Ok(Allow)` with the caller's [`identity::Identity`], or `Err(Denial)` with its refusal and
//! metrics label; each binary only writes the refusal. While the authorization server is failing,
//! [`outage`] keeps the checker to one probe at a time and its failure logs to one line per
//! interval.
//!
//! With a `revocation:` section, [`ssf::Receiver`] follows the authorization server's revocation
//! stream (OpenID SSF, RFC 8936 poll delivery of RFC 8417 SETs) and writes [`revoked::Revoked`]:
//! events evict cached answers and fill a deny-list the gate screens every checked token with,
//! and the stream's health bounds how long cached answers live.
//!
//! With an `audience` (or a `resource`, its default), [`audience`] refuses every checked token
//! that is not meant for this API; with a `resource`, [`protected_resource`] serves its RFC 9728
//! metadata and names it in every challenge.
//!
//! [`settings`] is the `introspection:` section as written and its durations, [`jwt::raw`] the
//! `jwt:` section, [`gate_config`] the gate's keys together.

pub mod access_log;
pub mod allocator;
pub mod audience;
pub mod bearer;
pub mod bounded_body;
pub mod checker;
pub mod claims;
pub mod client_cert;
pub mod config_error;
pub mod cors;
pub mod decision;
pub mod dpop;
pub mod dpop_gate;
pub mod forwarded;
pub mod gate;
pub mod gate_config;
pub mod identity;
pub mod introspection;
pub mod jwt;
pub mod layers;
pub mod logging;
pub mod metrics;
pub mod open_files;
pub mod outage;
pub mod policy;
pub mod process;
pub mod protected_resource;
pub mod request_id;
pub mod revoked;
pub mod rules;
pub mod secret_file;
pub mod settings;
pub mod ssf;
mod token_key;
pub mod yaml;

pub use audience::{Audience, RawAudience, WRONG_AUDIENCE};
pub use bearer::{Bearer, bearer_token};
pub use checker::{CacheSettings, CheckerError, CheckerMetrics, TokenChecker, Unavailable};
pub use claims::Claims;
pub use client_cert::{CLIENT_CERT_HEADER, CertThumbprint};
pub use config_error::ConfigError;
pub use decision::{Credential, Decision, Denial, Outcome, Refusal, decide};
pub use forwarded::{ForwardedIdentity, PROXY_SECRET_HEADER, ProxySecret};
pub use gate::{Allow, Check, Gate};
pub use gate_config::{GateConfig, GateEnv, GateSettings, IntrospectionConfig, TokenSource};
pub use identity::{EncodedIdentity, IDENTITY_HEADERS, Identity};
pub use introspection::{ClientAuth, IntrospectionSettings};
pub use jwt::raw::RawJwt;
pub use jwt::{JwtSettings, JwtValidator};
pub use policy::AnswerPolicy;
pub use protected_resource::{MetadataAnswer, ProtectedResource, ResourceSettings};
pub use revoked::Revoked;
pub use rules::{Access, Route, RouteSpec, Rules};
pub use ssf::{RawRevocation, Receiver, RevocationSettings};

use sha2::{Digest, Sha256};

/// SHA-256 of a token (or of other text): how a token is named in logs ([`token_log_id`]) and
/// how a JWKS key's material is fingerprinted. (Both caches of checked tokens key them by a keyed
/// hash instead: `token_key::TokenKeys`.)
pub fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The first 8 hex digits of a token's SHA-256: the most of a token that may appear in a log
/// (computed for the line only).
pub fn token_log_id(token: &str) -> String {
    hex::encode(&token_digest(token)[..4])
}

//! Token checking shared by the proxy and the example API: bearer parsing, route rules, the
//! allow/deny decision, an RFC 7662 introspection client and its moka cache, and local
//! validation of JWT access tokens (RFC 9068). No web framework.
//!
//! The data path of one request: the caller's [`rules::Rules::find`] → [`gate::Gate::authorize`],
//! which asks the deployment's [`gate::TokenCheck`] only for routes that need a token:
//! introspection ([`checker::TokenChecker`]: a strict [`claims::Claims`] read, refusals by
//! [`policy::AnswerPolicy`]), local JWT validation ([`jwt::JwtValidator`]), both
//! ([`gate::JwtOrIntrospection`]), or the proxy's identity headers
//! ([`forwarded::ForwardedIdentity`]) → [`decision::decide`] (with the check's leeway) →
//! `Ok(Allow)` with the caller's [`identity::Identity`], or `Err(Denial)` with its refusal and
//! metrics label. While the authorization server is failing, [`outage`] keeps the checker to one
//! probe at a time and its failure logs to one line per interval.
//!
//! [`settings`] is the `introspection:` section of the binaries' YAML files, [`jwt::raw`] the
//! `jwt:` section and the `token_source` setting.

pub mod bearer;
pub mod checker;
pub mod claims;
pub mod decision;
pub mod forwarded;
pub mod gate;
pub mod identity;
pub mod introspection;
pub mod jwt;
pub mod outage;
pub mod policy;
pub mod rules;
pub mod settings;
pub mod yaml;

pub use bearer::{Bearer, bearer_token};
pub use checker::{CacheSettings, CheckerError, CheckerMetrics, TokenChecker, Unavailable};
pub use claims::Claims;
pub use decision::{Decision, Refusal, TokenState, decide};
pub use forwarded::ForwardedIdentity;
pub use gate::{
    Allow, Credential, Denial, Gate, JwtOrIntrospection, Outcome, TokenCheck, TokenSource,
};
pub use identity::{IDENTITY_HEADERS, Identity};
pub use introspection::{ClientAuth, IntrospectionSettings};
pub use jwt::raw::{RawJwt, TokenSourceKind};
pub use jwt::{JwtSettings, JwtValidator};
pub use policy::AnswerPolicy;
pub use rules::{Access, Route, RouteSpec, Rules, RulesError};

use sha2::{Digest, Sha256};

/// SHA-256 of a token: the only form in which a token is kept (cache key) or named (logs).
pub fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The first 8 hex digits of a token's SHA-256: the most of a token that may appear in a log.
pub fn token_log_id(digest: &[u8; 32]) -> String {
    hex::encode(&digest[..4])
}

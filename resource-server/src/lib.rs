//! Token checking shared by the proxy and the example API: bearer parsing, route rules, the
//! allow/deny decision, an RFC 7662 introspection client and its moka cache. No web framework.
//!
//! The data path of one request:
//! [`bearer::bearer_token`] → [`rules::Rules::find`] → (for protected routes)
//! [`checker::TokenChecker::check`] (a strict [`claims::Claims`] read, refusals by
//! [`policy::AnswerPolicy`]) → [`decision::decide`] (with the policy's leeway) →
//! [`decision::Decision::refusal`], or the caller's [`identity::Identity`] headers. While the
//! authorization server is failing, [`outage`] keeps the checker to one probe at a time and its
//! failure logs to one line per interval.
//!
//! [`settings`] is the `introspection:` section of the binaries' YAML files.

pub mod bearer;
pub mod checker;
pub mod claims;
pub mod decision;
pub mod identity;
pub mod introspection;
pub mod outage;
pub mod policy;
pub mod rules;
pub mod settings;

pub use bearer::{Bearer, bearer_token};
pub use checker::{CacheSettings, CheckerError, CheckerMetrics, TokenChecker, Unavailable};
pub use claims::Claims;
pub use decision::{Decision, Refusal, TokenState, decide};
pub use identity::{IDENTITY_HEADERS, Identity};
pub use introspection::{ClientAuth, IntrospectionSettings};
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

//! The OAuth 2.0 protocol without HTTP or SQL: typed requests, the checks each grant and the
//! authorization request make, scopes and PKCE as pure functions. `crate::oauth` and
//! `crate::web` extract requests into these types, call the store, and write the responses.

pub mod acr;
pub mod authorize;
pub mod cbor;
mod error;
pub mod grant;
pub mod oidc;
pub mod pkce;
pub mod resource;
pub mod scope;
pub mod totp;
pub mod webauthn;

pub use error::{AuthorizeError, OAuthError};
pub use grant::{CodeBinding, GrantKind, GrantRequest};

/// Request parameters by name, each at most once, an empty value read as absent (RFC 6749 §3.1).
pub trait Parameters {
    fn get(&self, name: &str) -> Option<&str>;

    /// Every non-empty value of a parameter that may be repeated (RFC 8707 `resource`).
    fn get_all(&self, name: &str) -> Vec<&str> {
        self.get(name).into_iter().collect()
    }
}

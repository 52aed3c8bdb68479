//! JWT access tokens (RFC 9068): Ed25519 signing keys kept in the database and shared by every
//! replica, the JWKS that publishes them, and signing and verifying the tokens.

pub mod access_token;
pub mod keyring;
pub mod keys;
pub mod rotation;

pub use access_token::{AccessTokenClaims, Verified};
pub use keyring::{KEY_CACHE_TTL, KeyRing};
pub use keys::{KeySet, KeyState, SigningKey};

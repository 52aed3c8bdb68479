//! JWTs: Ed25519 and RSA signing keys kept in the database and shared by every replica, the
//! JWKS that publishes them, access tokens (RFC 9068) and OpenID Connect ID tokens.

pub mod access_token;
pub mod id_token;
pub mod keyring;
pub mod keys;
pub mod rotation;

pub use access_token::{AccessTokenClaims, Verified};
pub use keyring::{KEY_CACHE_TTL, KeyRing};
pub use keys::{Alg, KeySet, KeyState, SigningKey};
pub mod set;

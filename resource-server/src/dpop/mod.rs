//! DPoP (RFC 9449): the proof a client sends in the `DPoP` header, checked once for the
//! authorization server's token endpoint and the gate ([`proof::verify`]); the JWK thumbprint a
//! bound token's `cnf.jkt` names ([`jwk`]); the bounded replay cache of proof identifiers
//! ([`replay::ReplayCache`]); and server nonces ([`nonce::Nonces`]), stateless so that every
//! replica and both servers of one origin accept each other's.

pub mod jwk;
pub mod nonce;
pub mod proof;
pub mod replay;
pub mod signer;

pub use jwk::thumbprint_matches;
pub use nonce::Nonces;
pub use proof::{Expected, Proof, ProofError, verify};
pub use replay::ReplayCache;

/// A route's `dpop:` setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DpopPolicy {
    /// A bound token must be proven; an unbound one passes as a bearer token (the default).
    #[default]
    Allowed,
    /// Only a DPoP-bound token, proven, passes.
    Required,
}

impl DpopPolicy {
    pub fn parse(text: &str) -> Option<DpopPolicy> {
        match text {
            "allowed" => Some(DpopPolicy::Allowed),
            "required" => Some(DpopPolicy::Required),
            _ => None,
        }
    }
}

/// The request header that carries the proof.
pub const DPOP_HEADER: &str = "dpop";
/// The response header that carries a server nonce (§8).
pub const NONCE_HEADER: &str = "dpop-nonce";
/// The `Authorization` scheme of a DPoP-bound token (§7.1).
pub const SCHEME: &str = "DPoP";
/// The algorithms a proof may be signed with, as the metadata and challenges list them.
/// `Ed25519` is RFC 9864's fully-specified name of `EdDSA` over Ed25519, which clients such
/// as oauth4webapi sign with.
pub const ALGORITHMS: [&str; 4] = ["ES256", "EdDSA", "Ed25519", "RS256"];
/// The `algs` parameter of a `WWW-Authenticate: DPoP` challenge (§7.1).
pub const ALGS_PARAMETER: &str = "ES256 EdDSA Ed25519 RS256";
/// How old (seconds) a proof's `iat` may be; also how long its `jti` is remembered.
pub const DEFAULT_WINDOW: i64 = 300;
/// How far (seconds) a proof's `iat` may be ahead of this server's clock.
pub const CLOCK_LEEWAY: i64 = 5;
/// `error` of a proof that is missing, malformed or does not fit the request (§7.1).
pub const INVALID_DPOP_PROOF: &str = "invalid_dpop_proof";
/// `error` asking the client to retry with the nonce in `DPoP-Nonce` (§8).
pub const USE_DPOP_NONCE: &str = "use_dpop_nonce";

/// The `htu` of a request: `url` without query and fragment, its scheme and host in lower
/// case and the scheme's default port dropped (the syntax-based normalization of §4.3,
/// RFC 3986 §6.2.2); both sides of the comparison go through it.
pub fn normalize_htu(url: &str) -> Option<String> {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    let url = &url[..end];
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "https" && scheme != "http" {
        return None;
    }
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    let mut host = authority.to_ascii_lowercase();
    let default_port = if scheme == "https" { ":443" } else { ":80" };
    if let Some(stripped) = host.strip_suffix(default_port) {
        host = stripped.to_owned();
    }
    Some(format!("{scheme}://{host}{path}"))
}

/// base64url (no padding) of the SHA-256 of `token`: a proof's `ath` (§4.2).
pub fn access_token_hash(token: &str) -> String {
    use base64::Engine;
    use sha2::{Digest, Sha256};
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(token.as_bytes()))
}

/// The value of a `WWW-Authenticate: DPoP` challenge with this `error` (and description).
pub fn challenge(error: &str, description: Option<&str>) -> String {
    let mut value = format!("DPoP error=\"{error}\"");
    if let Some(description) = description {
        value.push_str(&format!(", error_description=\"{description}\""));
    }
    value.push_str(&format!(", algs=\"{ALGS_PARAMETER}\""));
    value
}

#[cfg(test)]
mod tests;

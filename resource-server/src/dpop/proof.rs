//! One DPoP proof checked against the request it came with (RFC 9449 §4.3): a compact JWS of
//! `typ` `dpop+jwt`, signed with an allowed algorithm by the public key in its `jwk`, whose
//! `htm`, `htu`, `iat`, `ath` and `nonce` fit the request. Replay (`jti`) is the caller's
//! ([`super::ReplayCache`]), after the proof is otherwise valid.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};
use subtle::ConstantTimeEq;

use super::jwk::PublicJwk;
use super::nonce::Nonces;

/// The longest proof read (an RSA key of 4096 bits fits well within it).
pub const MAX_PROOF_LEN: usize = 8 * 1024;
/// The longest `jti` accepted.
const MAX_JTI_LEN: usize = 256;

/// What the request a proof came with requires of it.
pub struct Expected<'a> {
    /// The request's method.
    pub htm: &'a str,
    /// The URLs the request may have been sent to, as the client saw them (already through
    /// [`super::normalize_htu`]); the proof's `htu` must be one.
    pub htu: &'a [String],
    /// The access token presented with the proof (a resource request): `ath` must hash it.
    pub access_token: Option<&'a str>,
    /// When set, the proof must carry a current nonce of these.
    pub nonces: Option<&'a Nonces>,
    /// Now (seconds since the epoch).
    pub now: i64,
    /// How old `iat` may be (seconds).
    pub window: i64,
}

/// A valid proof: the thumbprint of its key, and its `jti` (for the replay check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    pub jkt: String,
    pub jti: String,
    pub iat: i64,
}

/// Why a proof was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProofError {
    /// `invalid_dpop_proof`, with a description safe to send.
    Invalid(&'static str),
    /// `use_dpop_nonce`: no nonce, or a stale one, where one is required.
    UseNonce,
}

impl ProofError {
    /// The `error` code.
    pub fn code(&self) -> &'static str {
        match self {
            ProofError::Invalid(_) => super::INVALID_DPOP_PROOF,
            ProofError::UseNonce => super::USE_DPOP_NONCE,
        }
    }

    /// The `error_description`.
    pub fn description(&self) -> &'static str {
        match self {
            ProofError::Invalid(description) => description,
            ProofError::UseNonce => {
                "Resend the request with a DPoP proof carrying the nonce given."
            }
        }
    }
}

fn invalid(description: &'static str) -> ProofError {
    ProofError::Invalid(description)
}

/// Checks `proof` (the `DPoP` header's value) against `expected`.
pub fn verify(proof: &str, expected: &Expected<'_>) -> Result<Proof, ProofError> {
    if proof.len() > MAX_PROOF_LEN {
        return Err(invalid("The DPoP proof is too long."));
    }
    let mut parts = proof.split('.');
    let (Some(header64), Some(payload64), Some(signature64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid("The DPoP proof is not a compact JWS."));
    };
    let header = json_object(header64).ok_or(invalid("The DPoP proof's header is malformed."))?;
    if header.get("typ").and_then(Value::as_str) != Some("dpop+jwt") {
        return Err(invalid("The DPoP proof's typ is not dpop+jwt."));
    }
    let alg = header.get("alg").and_then(Value::as_str).unwrap_or("");
    if !super::ALGORITHMS.contains(&alg) {
        return Err(invalid("The DPoP proof's algorithm is not supported."));
    }
    let jwk = header
        .get("jwk")
        .and_then(Value::as_object)
        .and_then(|jwk| PublicJwk::read(jwk, alg))
        .ok_or(invalid(
            "The DPoP proof's jwk is no public key of its algorithm.",
        ))?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature64)
        .map_err(|_| invalid("The DPoP proof's signature is malformed."))?;
    let signed = &proof[..header64.len() + 1 + payload64.len()];
    if !jwk.verifies(signed.as_bytes(), &signature) {
        return Err(invalid("The DPoP proof's signature does not verify."));
    }
    let claims = json_object(payload64).ok_or(invalid("The DPoP proof's claims are malformed."))?;
    let text = |name: &str| claims.get(name).and_then(Value::as_str);
    let jti = text("jti")
        .filter(|jti| !jti.is_empty() && jti.len() <= MAX_JTI_LEN)
        .ok_or(invalid("The DPoP proof has no valid jti."))?;
    if text("htm") != Some(expected.htm) {
        return Err(invalid(
            "The DPoP proof's htm does not match the request method.",
        ));
    }
    let htu = text("htu")
        .and_then(super::normalize_htu)
        .ok_or(invalid("The DPoP proof has no valid htu."))?;
    if !expected.htu.contains(&htu) {
        return Err(invalid(
            "The DPoP proof's htu does not match the request URL.",
        ));
    }
    let iat = claims
        .get("iat")
        .and_then(Value::as_f64)
        .filter(|iat| iat.is_finite())
        .ok_or(invalid("The DPoP proof has no valid iat."))? as i64;
    if iat > expected.now + super::CLOCK_LEEWAY || iat < expected.now - expected.window {
        return Err(invalid(
            "The DPoP proof's iat is outside the accepted window.",
        ));
    }
    if let Some(token) = expected.access_token {
        let ath = text("ath").ok_or(invalid("The DPoP proof has no ath."))?;
        let wanted = super::access_token_hash(token);
        if !bool::from(ath.as_bytes().ct_eq(wanted.as_bytes())) {
            return Err(invalid(
                "The DPoP proof's ath does not match the access token.",
            ));
        }
    }
    if let Some(nonces) = expected.nonces {
        match text("nonce") {
            Some(nonce) if nonces.is_current(nonce, expected.now) => {}
            _ => return Err(ProofError::UseNonce),
        }
    }
    Ok(Proof {
        jkt: jwk.thumbprint(),
        jti: jti.to_owned(),
        iat,
    })
}

/// A base64url JSON object, or `None`.
fn json_object(part: &str) -> Option<Map<String, Value>> {
    let bytes = URL_SAFE_NO_PAD.decode(part).ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

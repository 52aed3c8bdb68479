//! The public key a DPoP proof embeds (`jwk`, RFC 7517): read for one algorithm, with no
//! private member; its signature check, and its RFC 7638 thumbprint (what `cnf.jkt` names).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{self, UnparsedPublicKey};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Members only a private key has (RFC 7518 §6.2.2, §6.3.2; `k` of a symmetric key).
const PRIVATE_MEMBERS: [&str; 7] = ["d", "p", "q", "dp", "dq", "qi", "oth"];

/// A proof's public key, checked against its algorithm.
#[derive(Debug)]
pub enum PublicJwk {
    /// P-256 (`ES256`): the uncompressed point `04 || x || y`.
    P256 {
        point: Vec<u8>,
        x: String,
        y: String,
    },
    /// Ed25519 (`EdDSA`): the 32-byte public key.
    Ed25519 { key: Vec<u8>, x: String },
    /// RSA (`RS256`), at least 2048 bits.
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
        n64: String,
        e64: String,
    },
}

impl PublicJwk {
    /// Reads `jwk` for `alg` (one of [`super::ALGORITHMS`]); `None` when it is no public key of
    /// that algorithm's type, or carries a private member.
    pub fn read(jwk: &Map<String, Value>, alg: &str) -> Option<PublicJwk> {
        if PRIVATE_MEMBERS.iter().any(|m| jwk.contains_key(*m)) || jwk.contains_key("k") {
            return None;
        }
        let text = |name: &str| jwk.get(name).and_then(Value::as_str);
        let bytes = |name: &str| {
            text(name).and_then(|value| URL_SAFE_NO_PAD.decode(value).ok().map(|b| (b, value)))
        };
        match (alg, text("kty")?) {
            ("ES256", "EC") if text("crv")? == "P-256" => {
                let (x, x64) = bytes("x")?;
                let (y, y64) = bytes("y")?;
                if x.len() != 32 || y.len() != 32 {
                    return None;
                }
                let mut point = Vec::with_capacity(65);
                point.push(4);
                point.extend_from_slice(&x);
                point.extend_from_slice(&y);
                Some(PublicJwk::P256 {
                    point,
                    x: x64.to_owned(),
                    y: y64.to_owned(),
                })
            }
            ("EdDSA" | "Ed25519", "OKP") if text("crv")? == "Ed25519" => {
                let (key, x64) = bytes("x")?;
                (key.len() == 32).then(|| PublicJwk::Ed25519 {
                    key,
                    x: x64.to_owned(),
                })
            }
            ("RS256", "RSA") => {
                let (n, n64) = bytes("n")?;
                let (e, e64) = bytes("e")?;
                let bits = n.iter().skip_while(|b| **b == 0).count() * 8;
                (bits >= 2048 && !e.is_empty()).then(|| PublicJwk::Rsa {
                    n,
                    e,
                    n64: n64.to_owned(),
                    e64: e64.to_owned(),
                })
            }
            _ => None,
        }
    }

    /// Whether `signature` (as JWS carries it) signs `message` with this key.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        match self {
            PublicJwk::P256 { point, .. } => {
                UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(message, signature)
                    .is_ok()
            }
            PublicJwk::Ed25519 { key, .. } => UnparsedPublicKey::new(&signature::ED25519, key)
                .verify(message, signature)
                .is_ok(),
            PublicJwk::Rsa { n, e, .. } => signature::RsaPublicKeyComponents { n, e }
                .verify(&signature::RSA_PKCS1_2048_8192_SHA256, message, signature)
                .is_ok(),
        }
    }

    /// The RFC 7638 thumbprint: base64url of the SHA-256 of the required members, in
    /// lexicographic order, without whitespace.
    pub fn thumbprint(&self) -> String {
        // Every member is base64url or a fixed name: nothing to escape.
        let canonical = match self {
            PublicJwk::P256 { x, y, .. } => {
                format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#)
            }
            PublicJwk::Ed25519 { x, .. } => {
                format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#)
            }
            PublicJwk::Rsa { n64, e64, .. } => {
                format!(r#"{{"e":"{e64}","kty":"RSA","n":"{n64}"}}"#)
            }
        };
        URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
    }
}

/// Whether `jkt` (a token's `cnf.jkt`) equals `thumbprint`, in constant time.
pub fn thumbprint_matches(jkt: &str, thumbprint: &str) -> bool {
    jkt.len() == thumbprint.len() && bool::from(jkt.as_bytes().ct_eq(thumbprint.as_bytes()))
}

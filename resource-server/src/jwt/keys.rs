//! A JWKS (RFC 7517) read into verification keys. Keys that cannot verify an accepted algorithm
//! are left out one by one (symmetric `oct` keys, `use: enc`, unknown types or curves, broken
//! parameters), so that one odd key does not cost the others.

use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

/// The algorithms a key can verify, from its type and curve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl KeyKind {
    /// Whether a key of this kind verifies `alg`.
    pub fn verifies(self, alg: Algorithm) -> bool {
        use Algorithm::*;
        matches!(
            (self, alg),
            (KeyKind::Rsa, RS256 | RS384 | RS512 | PS256 | PS384 | PS512)
                | (KeyKind::P256, ES256)
                | (KeyKind::P384, ES384)
                | (KeyKind::Ed25519, EdDSA)
        )
    }
}

/// One public key.
#[derive(Clone)]
pub struct Key {
    pub kid: Option<String>,
    /// The JWK's `alg`, when it names one: the key is then used for that algorithm only.
    pub alg: Option<String>,
    pub kind: KeyKind,
    /// SHA-256 of the key's public parameters (and its `alg`): which key this is, whatever its
    /// `kid`, for telling whether a cached token's key is still published.
    pub fingerprint: [u8; 32],
    verifier: Verifier,
}

/// What checks a signature with one key.
#[derive(Clone)]
enum Verifier {
    /// RSA and ECDSA keys: jsonwebtoken's ring backend.
    Jose(DecodingKey),
    /// Ed25519: ed25519-dalek, with the point decoded once when the JWKS is read (ring decodes
    /// it again for every signature). The check is RFC 8032's with a canonical `S`, as ring's
    /// is; small-order keys, which would accept forgeries, are refused when the JWKS is read.
    Ed25519(ed25519_dalek::VerifyingKey),
}

/// A signature that is not base64url.
#[derive(Debug, PartialEq, Eq)]
pub struct MalformedSignature;

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl Key {
    /// Whether this key may verify a token signed with `alg` (named `alg_name` in its header).
    pub fn fits(&self, alg: Algorithm, alg_name: &str) -> bool {
        self.kind.verifies(alg) && self.alg.as_deref().is_none_or(|a| a == alg_name)
    }

    /// Whether `signature` (base64url, the JWS's third part) signs `message` (its first two
    /// parts) with this key and `alg`, which the caller has checked [`Key::fits`].
    pub fn check_signature(
        &self,
        message: &[u8],
        signature: &str,
        alg: Algorithm,
    ) -> Result<bool, MalformedSignature> {
        match &self.verifier {
            Verifier::Jose(key) => jsonwebtoken::crypto::verify(signature, message, key, alg)
                .map_err(|_| MalformedSignature),
            Verifier::Ed25519(key) => {
                let bytes = URL_SAFE_NO_PAD
                    .decode(signature)
                    .map_err(|_| MalformedSignature)?;
                let Ok(bytes) = <[u8; 64]>::try_from(bytes.as_slice()) else {
                    return Ok(false);
                };
                let signature = ed25519_dalek::Signature::from_bytes(&bytes);
                Ok(ed25519_dalek::Verifier::verify(key, message, &signature).is_ok())
            }
        }
    }
}

/// The keys of one JWKS, by `kid`.
#[derive(Clone, Debug, Default)]
pub struct KeySet {
    by_kid: HashMap<String, Vec<Key>>,
    without_kid: Vec<Key>,
}

/// Why a JWKS document could not be read at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JwksError {
    #[error("not a JSON object with a `keys` array")]
    Shape,
}

impl KeySet {
    /// Reads a JWKS document; keys that do not do are skipped (see the module docs).
    pub fn from_json(body: &[u8]) -> Result<KeySet, JwksError> {
        let value: Value = serde_json::from_slice(body).map_err(|_| JwksError::Shape)?;
        let Some(Value::Array(keys)) = value.get("keys") else {
            return Err(JwksError::Shape);
        };
        let mut set = KeySet::default();
        for raw in keys {
            if let Some(key) = key_from(raw) {
                match key.kid.clone() {
                    Some(kid) => set.by_kid.entry(kid).or_default().push(key),
                    None => set.without_kid.push(key),
                }
            }
        }
        Ok(set)
    }

    /// Number of usable keys.
    pub fn len(&self) -> usize {
        self.by_kid.values().map(Vec::len).sum::<usize>() + self.without_kid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether both sets hold the same keys under the same kids.
    pub fn same_keys(&self, other: &KeySet) -> bool {
        self.identities() == other.identities()
    }

    fn identities(&self) -> Vec<(Option<&str>, [u8; 32])> {
        let mut all: Vec<_> = self
            .by_kid
            .values()
            .flatten()
            .chain(&self.without_kid)
            .map(|k| (k.kid.as_deref(), k.fingerprint))
            .collect();
        all.sort_unstable();
        all
    }

    /// Whether the key with this `kid` (as published) and fingerprint is in the set.
    pub fn holds(&self, kid: Option<&str>, fingerprint: &[u8; 32]) -> bool {
        let keys = match kid {
            Some(kid) => self.by_kid.get(kid).map_or(&[][..], Vec::as_slice),
            None => &self.without_kid,
        };
        keys.iter().any(|k| k.fingerprint == *fingerprint)
    }

    /// The key for a token's `kid` and algorithm. A token without `kid` is verified only when
    /// exactly one key of the set fits its algorithm.
    pub fn find(&self, kid: Option<&str>, alg: Algorithm, alg_name: &str) -> Option<&Key> {
        match kid {
            Some(kid) => self.by_kid.get(kid)?.iter().find(|k| k.fits(alg, alg_name)),
            None => {
                let mut fitting = self
                    .by_kid
                    .values()
                    .flatten()
                    .chain(&self.without_kid)
                    .filter(|k| k.fits(alg, alg_name));
                match (fitting.next(), fitting.next()) {
                    (Some(only), None) => Some(only),
                    _ => None,
                }
            }
        }
    }
}

fn key_from(raw: &Value) -> Option<Key> {
    let text = |name: &str| raw.get(name).and_then(Value::as_str).map(str::to_owned);
    if raw.get("use").is_some() && text("use").as_deref() != Some("sig") {
        return None;
    }
    let jwk: Jwk = serde_json::from_value(raw.clone()).ok()?;
    let kind = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => KeyKind::Rsa,
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => KeyKind::P256,
            EllipticCurve::P384 => KeyKind::P384,
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            KeyKind::Ed25519
        }
        // Symmetric keys are never published for verification; other curves are not supported.
        _ => return None,
    };
    let verifier = match &jwk.algorithm {
        AlgorithmParameters::EllipticCurve(p) => {
            let size = if kind == KeyKind::P256 { 32 } else { 48 };
            Verifier::Jose(
                DecodingKey::from_ec_components(
                    &fixed_width(&p.x, size)?,
                    &fixed_width(&p.y, size)?,
                )
                .ok()?,
            )
        }
        AlgorithmParameters::OctetKeyPair(p) => {
            let x = URL_SAFE_NO_PAD.decode(&p.x).ok()?;
            let key = ed25519_dalek::VerifyingKey::from_bytes(&x.try_into().ok()?).ok()?;
            // A small-order point verifies forged signatures: never a real issuer's key.
            if key.is_weak() {
                return None;
            }
            Verifier::Ed25519(key)
        }
        _ => Verifier::Jose(DecodingKey::from_jwk(&jwk).ok()?),
    };
    let material =
        ["kty", "crv", "x", "y", "n", "e", "alg"].map(|name| text(name).unwrap_or_default());
    Some(Key {
        kid: text("kid"),
        alg: text("alg"),
        kind,
        fingerprint: crate::token_digest(&material.join("|")),
        verifier,
    })
}

/// An EC coordinate as exactly `size` bytes, base64url: RFC 7518 §6.2.1.2 says full size, but
/// some libraries (Authlib among them) drop leading zero bytes; the point is the same, so a short
/// coordinate is padded back. A longer one is refused.
fn fixed_width(coordinate: &str, size: usize) -> Option<String> {
    let bytes = URL_SAFE_NO_PAD
        .decode(coordinate.trim_end_matches('='))
        .ok()?;
    if bytes.len() > size || bytes.is_empty() {
        return None;
    }
    let mut out = vec![0u8; size - bytes.len()];
    out.extend_from_slice(&bytes);
    Some(URL_SAFE_NO_PAD.encode(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED: &str = r#"{"kty":"OKP","crv":"Ed25519","kid":"ed","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#;
    const RSA: &str = r#"{"kty":"RSA","kid":"rsa","alg":"RS256","use":"sig","e":"AQAB","n":"0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"}"#;

    fn set(keys: &[&str]) -> KeySet {
        KeySet::from_json(format!(r#"{{"keys":[{}]}}"#, keys.join(",")).as_bytes()).unwrap()
    }

    #[test]
    fn keys_by_kid_and_algorithm() {
        let s = set(&[ED, RSA]);
        assert_eq!(s.len(), 2);
        assert!(s.find(Some("ed"), Algorithm::EdDSA, "EdDSA").is_some());
        assert!(s.find(Some("rsa"), Algorithm::RS256, "RS256").is_some());
        // The JWK says RS256: not for PS256, nor an RSA key for EdDSA.
        assert!(s.find(Some("rsa"), Algorithm::PS256, "PS256").is_none());
        assert!(s.find(Some("ed"), Algorithm::RS256, "RS256").is_none());
        assert!(s.find(Some("nope"), Algorithm::EdDSA, "EdDSA").is_none());
        // No kid: the only key that fits.
        assert!(s.find(None, Algorithm::EdDSA, "EdDSA").is_some());
        let two = set(&[ED, &ED.replace("\"ed\"", "\"ed2\"")]);
        assert!(two.find(None, Algorithm::EdDSA, "EdDSA").is_none());
    }

    #[test]
    fn sets_compare_by_their_keys() {
        let ed2 = ED.replace("\"ed\"", "\"ed2\"");
        let no_kid = ED.replace("\"kid\":\"ed\",", "");
        // The same kid, another key.
        let replaced = ED.replace(
            "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
            "mmSKZcyxPl3lkcPAzAV2duCt7NszSQwv6d-KGl59WBI",
        );
        assert!(set(&[ED, RSA]).same_keys(&set(&[RSA, ED])));
        assert!(!set(&[ED]).same_keys(&set(&[ED, &no_kid])));
        assert!(!set(&[ED, RSA]).same_keys(&set(&[ED])));
        assert!(!set(&[ED]).same_keys(&set(&[&ed2])));
        assert!(!set(&[ED]).same_keys(&set(&[&replaced])));

        let fingerprint = |json: &str| {
            set(&[json])
                .by_kid
                .values()
                .chain([&set(&[json]).without_kid])
                .flatten()
                .next()
                .unwrap()
                .fingerprint
        };
        let s = set(&[ED, &no_kid]);
        assert!(s.holds(Some("ed"), &fingerprint(ED)));
        assert!(s.holds(None, &fingerprint(&no_kid)));
        assert_eq!(
            fingerprint(ED),
            fingerprint(&no_kid),
            "the kid is not part of the key"
        );
        assert!(!s.holds(Some("ed"), &fingerprint(&replaced)));
        assert!(!s.holds(Some("ed2"), &fingerprint(ED)));
        assert!(!set(&[ED]).holds(None, &fingerprint(ED)));
    }

    #[test]
    fn short_ec_coordinates_are_padded_long_ones_refused() {
        let short = URL_SAFE_NO_PAD.encode([7u8; 31]);
        let padded = fixed_width(&short, 32).unwrap();
        let bytes = URL_SAFE_NO_PAD.decode(&padded).unwrap();
        assert_eq!((bytes.len(), bytes[0], bytes[1]), (32, 0, 7));
        assert_eq!(fixed_width(&padded, 32).as_deref(), Some(padded.as_str()));
        assert_eq!(fixed_width(&URL_SAFE_NO_PAD.encode([1u8; 33]), 32), None);
        assert_eq!(fixed_width("", 32), None);
        assert_eq!(fixed_width("!!", 32), None);
    }

    #[test]
    fn odd_keys_are_skipped_not_fatal() {
        let s = set(&[
            r#"{"kty":"oct","kid":"h","k":"c2VjcmV0"}"#,
            &RSA.replace("\"use\":\"sig\"", "\"use\":\"enc\""),
            r#"{"kty":"EC","crv":"P-521","kid":"p521","x":"AA","y":"AA"}"#,
            r#"{"kty":"XYZ","kid":"x"}"#,
            r#"{"kty":"RSA","kid":"bad"}"#,
            ED,
        ]);
        assert_eq!(s.len(), 1);
        assert!(s.by_kid.contains_key("ed"));
        assert!(!s.by_kid.contains_key("h"));
        // Ed25519: the identity point (y = 1, small order), y = 2 (no point has it), a short x.
        let (mut identity, mut not_a_point) = ([0u8; 32], [0u8; 32]);
        identity[0] = 1;
        not_a_point[0] = 2;
        let x_of = |x: &[u8]| {
            ED.replace(
                "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
                &URL_SAFE_NO_PAD.encode(x),
            )
        };
        for bad in [&identity[..], &not_a_point[..], &[7; 31][..]] {
            assert!(set(&[&x_of(bad)]).is_empty(), "{bad:?}");
        }
        for bad in ["", "[]", "{}", r#"{"keys":{}}"#] {
            assert_eq!(
                KeySet::from_json(bad.as_bytes()).unwrap_err(),
                JwksError::Shape
            );
        }
        assert!(KeySet::from_json(br#"{"keys":[]}"#).unwrap().is_empty());
    }
}

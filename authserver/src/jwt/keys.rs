//! Signing keys of two types, Ed25519 (`EdDSA`: access tokens, and ID tokens on request) and
//! RSA (`RS256`: ID tokens, which OpenID Connect requires every provider to offer): generated,
//! read from their stored form, and which of them signs and which are published at a given
//! moment. Generations are numbered across both types; each type has its own signer.
//!
//! Each key also seals the `jti` of the tokens it signs (ChaCha20-Poly1305, with a key derived
//! from the private key by HKDF): the `jti` carries the token's stored value, which only we can
//! read back, so a `jti` seen in a log of claims is not itself a token.
//!
//! A key is published from its creation. It signs from its `signs_from` until a later
//! generation's `signs_from` passes (its retirement), and stays published until every token it
//! may have signed has expired: retirement + the access-token lifetime + [`CLOCK_LEEWAY`].

use crate::store::signing_keys::StoredSigningKey;
use anyhow::{Context, anyhow, bail};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::hkdf::{HKDF_SHA256, Salt};
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{Ed25519KeyPair, KeyPair, RsaKeyPair, RsaPublicKeyComponents};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The JWS algorithm a key signs with, one per key type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Alg {
    /// Ed25519 (RFC 8037).
    EdDSA,
    /// RSASSA-PKCS1-v1_5 with SHA-256 and a 2048-bit key (RFC 7518 §3.3).
    RS256,
}

impl Alg {
    pub const ALL: [Alg; 2] = [Alg::EdDSA, Alg::RS256];

    /// The JWS `alg` name, also the stored one.
    pub fn as_str(self) -> &'static str {
        match self {
            Alg::EdDSA => "EdDSA",
            Alg::RS256 => "RS256",
        }
    }

    /// The algorithm of this exact `alg` name.
    pub fn parse(name: &str) -> Option<Alg> {
        Alg::ALL.into_iter().find(|a| a.as_str() == name)
    }

    pub fn jwt(self) -> Algorithm {
        match self {
            Alg::EdDSA => Algorithm::EdDSA,
            Alg::RS256 => Algorithm::RS256,
        }
    }
}

/// The size of the RSA keys we generate.
pub const RSA_BITS: usize = 2048;

/// Slack for clocks that disagree between replicas and validators (seconds).
pub const CLOCK_LEEWAY: i64 = 60;

/// A signing key ready to sign and verify.
pub struct SigningKey {
    pub kid: String,
    pub generation: i64,
    pub created_at: i64,
    pub signs_from: i64,
    pub alg: Alg,
    /// The public key as stored: the JWK's `x` (Ed25519), or its `n` and `e` joined by a dot
    /// (RSA), each base64url.
    pub public_key: String,
    pub(super) encoding: EncodingKey,
    pub(super) decoding: DecodingKey,
    /// Seals and opens the `jti` of the tokens this key signs.
    jti_key: LessSafeKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .field("generation", &self.generation)
            .field("alg", &self.alg)
            .field("signs_from", &self.signs_from)
            .finish_non_exhaustive()
    }
}

/// A new Ed25519 key of `generation`, created `now`, signing from `signs_from`.
pub fn generate(generation: i64, now: i64, signs_from: i64) -> anyhow::Result<StoredSigningKey> {
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng)
        .map_err(|_| anyhow!("cannot generate an Ed25519 key"))?;
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref())
        .map_err(|_| anyhow!("the generated Ed25519 key does not parse"))?;
    let x = URL_SAFE_NO_PAD.encode(pair.public_key().as_ref());
    Ok(StoredSigningKey {
        kid: thumbprint(&x),
        generation,
        algorithm: Alg::EdDSA.as_str().to_owned(),
        private_key: STANDARD.encode(pkcs8.as_ref()),
        public_key: x,
        created_at: now,
        signs_from,
    })
}

/// A new key of `alg` ([`generate`] for Ed25519, a 2048-bit RSA key for RS256).
pub fn generate_for(
    alg: Alg,
    generation: i64,
    now: i64,
    signs_from: i64,
) -> anyhow::Result<StoredSigningKey> {
    match alg {
        Alg::EdDSA => generate(generation, now, signs_from),
        Alg::RS256 => generate_rsa(generation, now, signs_from),
    }
}

/// A new RSA key (the `rsa` crate makes it; ring reads it back, as every stored key).
fn generate_rsa(generation: i64, now: i64, signs_from: i64) -> anyhow::Result<StoredSigningKey> {
    use rsa::pkcs8::EncodePrivateKey;
    let private = rsa::RsaPrivateKey::new(&mut rand::rngs::OsRng, RSA_BITS)
        .context("cannot generate an RSA key")?;
    let pkcs8 = private
        .to_pkcs8_der()
        .context("cannot encode the RSA key as PKCS#8")?;
    let (n, e) = rsa_components(pkcs8.as_bytes())?;
    let public_key = format!("{n}.{e}");
    Ok(StoredSigningKey {
        kid: rsa_thumbprint(&n, &e),
        generation,
        algorithm: Alg::RS256.as_str().to_owned(),
        private_key: STANDARD.encode(pkcs8.as_bytes()),
        public_key,
        created_at: now,
        signs_from,
    })
}

/// The modulus and exponent (base64url) of an RSA key in PKCS#8, as ring reads it.
fn rsa_components(pkcs8: &[u8]) -> anyhow::Result<(String, String)> {
    let pair = RsaKeyPair::from_pkcs8(pkcs8)
        .map_err(|e| anyhow!("the private key is not RSA PKCS#8 of 2048 to 4096 bits: {e}"))?;
    let parts = RsaPublicKeyComponents::<Vec<u8>>::from(pair.public());
    Ok((
        URL_SAFE_NO_PAD.encode(&parts.n),
        URL_SAFE_NO_PAD.encode(&parts.e),
    ))
}

/// The RFC 7638 JWK thumbprint (SHA-256, base64url) of an Ed25519 public key.
pub fn thumbprint(x: &str) -> String {
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
    URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
}

/// The RFC 7638 JWK thumbprint of an RSA public key.
pub fn rsa_thumbprint(n: &str, e: &str) -> String {
    let canonical = format!(r#"{{"e":"{e}","kty":"RSA","n":"{n}"}}"#);
    URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
}

impl SigningKey {
    /// Reads a stored key, refusing one whose halves do not match or whose kid is not the
    /// thumbprint of its public key.
    pub fn from_stored(stored: &StoredSigningKey) -> anyhow::Result<SigningKey> {
        let kid = &stored.kid;
        let Some(alg) = Alg::parse(&stored.algorithm) else {
            bail!(
                "signing key {kid}: unsupported algorithm {}",
                stored.algorithm
            );
        };
        let pkcs8 = STANDARD
            .decode(&stored.private_key)
            .with_context(|| format!("signing key {kid}: the private key is not base64"))?;
        let (public_key, expected_kid, encoding, decoding) = match alg {
            Alg::EdDSA => {
                let pair = Ed25519KeyPair::from_pkcs8(&pkcs8).map_err(|_| {
                    anyhow!("signing key {kid}: the private key is not Ed25519 PKCS#8")
                })?;
                let x = URL_SAFE_NO_PAD.encode(pair.public_key().as_ref());
                let decoding = DecodingKey::from_ed_components(&x)
                    .with_context(|| format!("signing key {kid}: bad public key"))?;
                let thumb = thumbprint(&x);
                (x, thumb, EncodingKey::from_ed_der(&pkcs8), decoding)
            }
            Alg::RS256 => {
                let (n, e) =
                    rsa_components(&pkcs8).with_context(|| format!("signing key {kid}"))?;
                // jsonwebtoken's ring backend signs with the PKCS#1 key inside the PKCS#8.
                let info = rsa::pkcs8::PrivateKeyInfo::try_from(pkcs8.as_slice())
                    .map_err(|e| anyhow!("signing key {kid}: bad PKCS#8: {e}"))?;
                let encoding = EncodingKey::from_rsa_der(info.private_key);
                let decoding = DecodingKey::from_rsa_components(&n, &e)
                    .with_context(|| format!("signing key {kid}: bad public key"))?;
                let thumb = rsa_thumbprint(&n, &e);
                (format!("{n}.{e}"), thumb, encoding, decoding)
            }
        };
        if public_key != stored.public_key || expected_kid != *kid {
            bail!("signing key {kid}: the public key or kid does not match the private key");
        }
        let prk = Salt::new(HKDF_SHA256, b"tokengate jti sealing v1").extract(&pkcs8);
        let info = [kid.as_bytes()];
        let jti_key = prk
            .expand(&info, &CHACHA20_POLY1305)
            .map(UnboundKey::from)
            .map_err(|_| anyhow!("signing key {kid}: cannot derive the jti key"))?;
        Ok(SigningKey {
            kid: kid.clone(),
            generation: stored.generation,
            created_at: stored.created_at,
            signs_from: stored.signs_from,
            alg,
            public_key,
            encoding,
            decoding,
            jti_key: LessSafeKey::new(jti_key),
        })
    }

    /// The `jti` for a token whose stored value is `value`: base64url of a random nonce and the
    /// sealed value (unique, as the nonce is random; readable by this key only).
    pub fn seal_jti(&self, value: &str) -> anyhow::Result<String> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| anyhow!("no randomness for a jti nonce"))?;
        let mut sealed = value.as_bytes().to_vec();
        self.jti_key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::empty(),
                &mut sealed,
            )
            .map_err(|_| anyhow!("cannot seal a jti"))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Ok(URL_SAFE_NO_PAD.encode(out))
    }

    /// The stored value a `jti` of this key carries; `None` for anything this key did not seal.
    pub fn open_jti(&self, jti: &str) -> Option<String> {
        let bytes = URL_SAFE_NO_PAD.decode(jti).ok()?;
        if bytes.len() <= NONCE_LEN {
            return None;
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut sealed = sealed.to_vec();
        let value = self
            .jti_key
            .open_in_place(nonce, Aad::empty(), &mut sealed)
            .ok()?;
        String::from_utf8(value.to_vec()).ok()
    }

    /// The public JWK (RFC 8037 for Ed25519, RFC 7518 §6.3 for RSA).
    pub fn jwk(&self) -> Value {
        match self.alg {
            Alg::EdDSA => json!({
                "kty": "OKP",
                "crv": "Ed25519",
                "x": self.public_key,
                "kid": self.kid,
                "use": "sig",
                "alg": self.alg.as_str(),
            }),
            Alg::RS256 => {
                let (n, e) = self.public_key.split_once('.').unwrap_or_default();
                json!({
                    "kty": "RSA",
                    "n": n,
                    "e": e,
                    "kid": self.kid,
                    "use": "sig",
                    "alg": self.alg.as_str(),
                })
            }
        }
    }

    /// The key that verifies this key's signatures.
    pub fn decoding(&self) -> &DecodingKey {
        &self.decoding
    }
}

/// Where a key stands at a given moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// Published, signing from the given time.
    Pending { signs_from: i64 },
    /// Published and signing new tokens.
    Signing,
    /// Published for the tokens it signed, until the given time.
    Retired { published_until: i64 },
    /// No longer published: every token it signed has expired.
    Expired,
}

/// Every key, oldest generation first.
#[derive(Debug)]
pub struct KeySet {
    keys: Vec<SigningKey>,
}

impl KeySet {
    /// Reads every stored key; one that does not read is an error (fail closed).
    pub fn from_stored(stored: &[StoredSigningKey]) -> anyhow::Result<KeySet> {
        let mut keys = stored
            .iter()
            .map(SigningKey::from_stored)
            .collect::<anyhow::Result<Vec<_>>>()?;
        keys.sort_by_key(|k| k.generation);
        Ok(KeySet { keys })
    }

    pub fn all(&self) -> &[SigningKey] {
        &self.keys
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The generation a new key takes.
    pub fn next_generation(&self) -> i64 {
        self.keys.last().map_or(1, |k| k.generation + 1)
    }

    /// The key of `alg` that signs at `now`: the latest generation of that type whose
    /// `signs_from` has passed.
    pub fn signer(&self, alg: Alg, now: i64) -> Option<&SigningKey> {
        self.keys
            .iter()
            .rev()
            .find(|k| k.alg == alg && k.signs_from <= now)
    }

    /// Whether any key of `alg` is stored.
    pub fn has(&self, alg: Alg) -> bool {
        self.keys.iter().any(|k| k.alg == alg)
    }

    /// When a later generation of the same type took (or takes) over from the key at `index`.
    fn retired_at(&self, index: usize) -> Option<i64> {
        let alg = self.keys[index].alg;
        self.keys[index + 1..]
            .iter()
            .filter(|k| k.alg == alg)
            .map(|k| k.signs_from)
            .min()
    }

    /// The state of the key at `index` at `now`, with access tokens living `token_lifetime`.
    fn state_at(&self, index: usize, now: i64, token_lifetime: i64) -> KeyState {
        let key = &self.keys[index];
        if key.signs_from > now {
            return KeyState::Pending {
                signs_from: key.signs_from,
            };
        }
        match self.retired_at(index) {
            Some(retired) if retired <= now => {
                let published_until = retired + token_lifetime + CLOCK_LEEWAY;
                if now < published_until {
                    KeyState::Retired { published_until }
                } else {
                    KeyState::Expired
                }
            }
            _ => KeyState::Signing,
        }
    }

    /// Every key with its state at `now`.
    pub fn states(&self, now: i64, token_lifetime: i64) -> Vec<(&SigningKey, KeyState)> {
        (0..self.keys.len())
            .map(|i| (&self.keys[i], self.state_at(i, now, token_lifetime)))
            .collect()
    }

    /// The keys published at `now`, newest generation first.
    pub fn published(&self, now: i64, token_lifetime: i64) -> Vec<&SigningKey> {
        let mut out: Vec<&SigningKey> = self
            .states(now, token_lifetime)
            .into_iter()
            .filter(|(_, state)| *state != KeyState::Expired)
            .map(|(key, _)| key)
            .collect();
        out.reverse();
        out
    }

    /// The published key with this kid.
    pub fn find_published(&self, kid: &str, now: i64, token_lifetime: i64) -> Option<&SigningKey> {
        let i = self.keys.iter().position(|k| k.kid == kid)?;
        (self.state_at(i, now, token_lifetime) != KeyState::Expired).then(|| &self.keys[i])
    }

    /// The JWKS document (RFC 7517) of the keys published at `now`.
    pub fn jwks(&self, now: i64, token_lifetime: i64) -> Value {
        let keys: Vec<Value> = self
            .published(now, token_lifetime)
            .iter()
            .map(|k| k.jwk())
            .collect();
        json!({ "keys": keys })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(schedule: &[i64]) -> KeySet {
        let stored: Vec<StoredSigningKey> = schedule
            .iter()
            .enumerate()
            .map(|(i, signs_from)| generate(i as i64 + 1, *signs_from, *signs_from).unwrap())
            .collect();
        KeySet::from_stored(&stored).unwrap()
    }

    #[test]
    fn rfc7638_thumbprint_of_the_rfc8037_example_key() {
        // RFC 8037 appendix A.3.
        assert_eq!(
            thumbprint("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"),
            "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
        );
    }

    #[test]
    fn stored_keys_read_back_and_tampered_ones_do_not() {
        let stored = generate(1, 10, 10).unwrap();
        let key = SigningKey::from_stored(&stored).unwrap();
        assert_eq!(key.kid, stored.kid);
        assert_eq!(key.jwk()["x"], stored.public_key.as_str());
        assert_eq!(key.alg, Alg::EdDSA);
        let other = generate(2, 10, 10).unwrap();
        let swapped = StoredSigningKey {
            public_key: other.public_key,
            ..stored.clone()
        };
        assert!(SigningKey::from_stored(&swapped).is_err());
        let wrong_kid = StoredSigningKey {
            kid: other.kid,
            ..stored.clone()
        };
        assert!(SigningKey::from_stored(&wrong_kid).is_err());
        let hmac = StoredSigningKey {
            algorithm: "HS256".into(),
            ..stored
        };
        assert!(SigningKey::from_stored(&hmac).is_err());
    }

    #[test]
    fn a_rotated_key_signs_only_after_its_delay_and_the_old_one_stays_published() {
        let lifetime = 100;
        let keys = set(&[0, 1000]);
        let (first, second) = (&keys.all()[0], &keys.all()[1]);
        // Before the switch: the first signs, both are published.
        assert_eq!(keys.signer(Alg::EdDSA, 999).unwrap().kid, first.kid);
        assert_eq!(keys.published(999, lifetime).len(), 2);
        assert_eq!(
            keys.states(999, lifetime)[1].1,
            KeyState::Pending { signs_from: 1000 }
        );
        // After: the second signs; the first stays published for its last tokens.
        assert_eq!(keys.signer(Alg::EdDSA, 1000).unwrap().kid, second.kid);
        let until = 1000 + lifetime + CLOCK_LEEWAY;
        assert_eq!(
            keys.states(1000, lifetime)[0].1,
            KeyState::Retired {
                published_until: until
            }
        );
        assert!(
            keys.find_published(&first.kid, until - 1, lifetime)
                .is_some()
        );
        assert!(keys.find_published(&first.kid, until, lifetime).is_none());
        assert_eq!(keys.published(until, lifetime)[0].kid, second.kid);
        assert_eq!(keys.states(until, lifetime)[0].1, KeyState::Expired);
    }

    #[test]
    fn an_emergency_rotation_overtakes_a_pending_one() {
        let keys = set(&[0, 1000, 500]);
        assert_eq!(keys.signer(Alg::EdDSA, 600).unwrap().generation, 3);
        assert_eq!(keys.signer(Alg::EdDSA, 1200).unwrap().generation, 3);
        // The first retired when the third took over; the second never signed.
        assert_eq!(
            keys.states(550, 10)[0].1,
            KeyState::Retired {
                published_until: 500 + 10 + CLOCK_LEEWAY
            }
        );
    }

    #[test]
    fn a_sealed_jti_opens_with_its_key_only_and_not_once_altered() {
        let keys = set(&[0, 0]);
        let (first, second) = (&keys.all()[0], &keys.all()[1]);
        let jti = first.seal_jti("stored-value").unwrap();
        assert_ne!(jti, first.seal_jti("stored-value").unwrap(), "random nonce");
        assert!(!jti.contains("stored"));
        assert_eq!(first.open_jti(&jti).as_deref(), Some("stored-value"));
        assert_eq!(second.open_jti(&jti), None);
        let mut bytes = URL_SAFE_NO_PAD.decode(&jti).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert_eq!(first.open_jti(&URL_SAFE_NO_PAD.encode(bytes)), None);
        assert_eq!(first.open_jti("stored-value"), None);
        assert_eq!(first.open_jti(""), None);
    }

    #[test]
    fn rsa_keys_read_back_publish_n_and_e_and_rotate_apart_from_ed25519() {
        let rsa = generate_for(Alg::RS256, 2, 10, 10).unwrap();
        let key = SigningKey::from_stored(&rsa).unwrap();
        assert_eq!(key.alg, Alg::RS256);
        let jwk = key.jwk();
        assert_eq!(
            (&jwk["kty"], &jwk["alg"], &jwk["e"]),
            (&json!("RSA"), &json!("RS256"), &json!("AQAB"))
        );
        assert_eq!(
            URL_SAFE_NO_PAD
                .decode(jwk["n"].as_str().unwrap())
                .unwrap()
                .len(),
            256
        );
        let other = generate_for(Alg::RS256, 3, 10, 10).unwrap();
        let swapped = StoredSigningKey {
            public_key: other.public_key.clone(),
            ..rsa.clone()
        };
        assert!(SigningKey::from_stored(&swapped).is_err());
        // An RSA key claimed as Ed25519 does not read.
        let mislabelled = StoredSigningKey {
            algorithm: "EdDSA".into(),
            ..rsa.clone()
        };
        assert!(SigningKey::from_stored(&mislabelled).is_err());
        // Ed25519 generation 1, RSA generation 2; a new Ed25519 key (3) retires only the first.
        let ed1 = generate(1, 0, 0).unwrap();
        let ed3 = generate(3, 100, 100).unwrap();
        let keys = KeySet::from_stored(&[ed1, rsa, ed3]).unwrap();
        assert_eq!(keys.signer(Alg::RS256, 200).unwrap().generation, 2);
        assert_eq!(keys.signer(Alg::EdDSA, 200).unwrap().generation, 3);
        assert_eq!(keys.signer(Alg::EdDSA, 50).unwrap().generation, 1);
        let states = keys.states(10_000, 10);
        assert_eq!(states[0].1, KeyState::Expired);
        assert_eq!(states[1].1, KeyState::Signing);
        assert_eq!(states[2].1, KeyState::Signing);
        assert_eq!(keys.jwks(10_000, 10)["keys"].as_array().unwrap().len(), 2);
    }
}

//! OpenID Connect ID tokens (Core 1.0 §2): the claims, signing with the key of the algorithm an
//! application chose, `at_hash` (§3.1.3.6), and reading back an ID token of ours presented as an
//! `id_token_hint`.

use super::keys::{Alg, KeySet, SigningKey};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256, Sha512};

/// The claims of an ID token of the authorization code flow.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IdTokenClaims {
    pub iss: String,
    /// The user's id (a public, stable identifier: the same for every client).
    pub sub: String,
    /// The client id of the application (one audience).
    pub aud: String,
    pub exp: i64,
    pub iat: i64,
    /// When the user last signed in with their password (Unix seconds).
    pub auth_time: i64,
    /// The authentication context class of that sign-in (`crate::protocol::acr`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acr: Option<String>,
    /// Its methods (RFC 8176).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amr: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_hash: Option<String>,
    /// The authorized party: the client id, as in `aud`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azp: Option<String>,
}

/// `at_hash`: the left half of the hash of the access token, base64url; SHA-256 for RS256,
/// SHA-512 for EdDSA with Ed25519 (Core 1.0 errata set 2, §3.1.3.6).
pub fn at_hash(access_token: &str, alg: Alg) -> String {
    let digest: Vec<u8> = match alg {
        Alg::RS256 => Sha256::digest(access_token.as_bytes()).to_vec(),
        Alg::EdDSA => Sha512::digest(access_token.as_bytes()).to_vec(),
    };
    URL_SAFE_NO_PAD.encode(&digest[..digest.len() / 2])
}

/// Signs `claims` with `key`: `{"alg":…,"typ":"JWT","kid":…}`.
pub fn sign(key: &SigningKey, claims: &IdTokenClaims) -> jsonwebtoken::errors::Result<String> {
    let mut header = Header::new(key.alg.jwt());
    header.typ = Some("JWT".to_owned());
    header.kid = Some(key.kid.clone());
    jsonwebtoken::encode(&header, claims, &key.encoding)
}

/// The claims of `token` when one of the keys published at `now` signed it (its header naming
/// that key's algorithm) and its issuer is ours. Expiry is not checked: an `id_token_hint` may
/// be an expired ID token (Core 1.0 §3.1.2.1, RP-Initiated Logout 1.0 §2).
pub fn verify_hint(
    keys: &KeySet,
    token: &str,
    issuer: &str,
    now: i64,
    token_lifetime: i64,
) -> Option<IdTokenClaims> {
    let header = jsonwebtoken::decode_header(token).ok()?;
    let key = keys.find_published(header.kid.as_deref()?, now, token_lifetime)?;
    if header.alg != key.alg.jwt() {
        return None;
    }
    let mut validation = Validation::new(key.alg.jwt());
    validation.set_issuer(&[issuer]);
    validation.set_required_spec_claims(&["iss", "sub", "aud"]);
    validation.validate_exp = false;
    validation.validate_aud = false;
    jsonwebtoken::decode::<IdTokenClaims>(token, key.decoding(), &validation)
        .ok()
        .map(|data| data.claims)
        // An access token of ours (typ at+jwt) has no auth_time and fails above; this refuses
        // any other JWT we sign that might one day carry one.
        .filter(|_| header.typ.as_deref() == Some("JWT"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jwt::keys::{generate, generate_for};

    const ISSUER: &str = "https://auth.example";

    fn claims() -> IdTokenClaims {
        IdTokenClaims {
            iss: ISSUER.into(),
            sub: "7".into(),
            aud: "client".into(),
            exp: 200,
            iat: 100,
            auth_time: 90,
            acr: None,
            amr: None,
            nonce: Some("n-0S6_WzA2Mj".into()),
            at_hash: Some(at_hash("token", Alg::RS256)),
            azp: Some("client".into()),
        }
    }

    #[test]
    fn at_hash_of_the_openid_example() {
        // OpenID Connect Core 1.0 appendix A.3: the access token and its at_hash (RS256).
        assert_eq!(
            at_hash("jHkWEdUXMU1BwAsC4vtUsZwnNvTIxEl0z9K3vx5KF0Y", Alg::RS256),
            "77QmUPtjPfzWtF2AnpK9RQ"
        );
        assert_eq!(at_hash("x", Alg::EdDSA).len(), 43);
    }

    #[test]
    fn hints_of_our_keys_read_back_and_others_do_not() {
        let rsa = generate_for(Alg::RS256, 1, 0, 0).unwrap();
        let ed = generate(2, 0, 0).unwrap();
        let keys = KeySet::from_stored(&[rsa, ed]).unwrap();
        for alg in Alg::ALL {
            let key = keys.signer(alg, 0).unwrap();
            let token = sign(key, &claims()).unwrap();
            // Expired long ago, still a valid hint.
            assert_eq!(
                verify_hint(&keys, &token, ISSUER, 1_000_000, 3600),
                Some(claims()),
                "{alg:?}"
            );
            assert_eq!(verify_hint(&keys, &token, "https://other", 0, 3600), None);
            let foreign = KeySet::from_stored(&[generate_for(alg, 1, 0, 0).unwrap()]).unwrap();
            assert_eq!(verify_hint(&foreign, &token, ISSUER, 0, 3600), None);
            let mut parts: Vec<&str> = token.split('.').collect();
            let forged = URL_SAFE_NO_PAD.encode(
                serde_json::to_vec(&IdTokenClaims {
                    sub: "1".into(),
                    ..claims()
                })
                .unwrap(),
            );
            parts[1] = &forged;
            assert_eq!(verify_hint(&keys, &parts.join("."), ISSUER, 0, 3600), None);
        }
        assert_eq!(verify_hint(&keys, "a.b.c", ISSUER, 0, 3600), None);
    }
}

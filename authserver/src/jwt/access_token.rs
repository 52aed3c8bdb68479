//! RFC 9068 access tokens: the claims, signing with the current key, and verifying one of ours.

use super::keys::{Alg, KeySet, SigningKey};
use jsonwebtoken::{Algorithm, Header, Validation};
use serde::{Deserialize, Serialize};

/// The `typ` header of an RFC 9068 access token.
pub const TYP: &str = "at+jwt";

/// The claims of an access token (RFC 9068 §2.2, plus `username` for tokens of a user).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AccessTokenClaims {
    pub iss: String,
    /// The user's id, or the client id for a token of the client itself (client_credentials).
    pub sub: String,
    pub aud: Audience,
    pub client_id: String,
    pub iat: i64,
    pub exp: i64,
    /// The public id of the token's rotation family (`crate::store::family_jti`): what its
    /// introspection answers and its revocation events name (issue 24). Shared by the access
    /// tokens a refresh rotation issues into one family, which end together.
    pub jti: String,
    /// The token's stored value sealed by the signing key ([`SigningKey::seal_jti`]): unique,
    /// and its row is found by the digest of what it opens to.
    #[serde(rename = "ref")]
    pub reference: String,
    pub scope: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The user's groups when the token has the `groups` scope (at issuance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<String>>,
    /// The client certificate (RFC 8705 §3.1) or the DPoP key (RFC 9449 §6.1) the token is
    /// bound to, if it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cnf: Option<Confirmation>,
    /// A user's token: when they signed in, its authentication context class and methods
    /// (RFC 9068 §2.2.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_time: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amr: Option<Vec<String>>,
}

/// `aud`: one audience as a string, several as an array (RFC 7519 §4.1.3).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum Audience {
    One(String),
    Many(Vec<String>),
}

/// `cnf` of a certificate-bound or DPoP-bound token.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Confirmation {
    /// The RFC 7638 thumbprint of the DPoP key (base64url SHA-256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jkt: Option<String>,
    /// The base64url SHA-256 of the certificate (DER).
    #[serde(rename = "x5t#S256", default, skip_serializing_if = "Option::is_none")]
    pub x5t_s256: Option<String>,
}

impl Confirmation {
    /// The `cnf` of a token bound to this certificate and/or key; None for a bearer token.
    pub fn of(x5t_s256: Option<&str>, jkt: Option<&str>) -> Option<Confirmation> {
        (x5t_s256.is_some() || jkt.is_some()).then(|| Confirmation {
            jkt: jkt.map(str::to_owned),
            x5t_s256: x5t_s256.map(str::to_owned),
        })
    }
}

/// Signs `claims` with `key`: `{"alg":"EdDSA","typ":"at+jwt","kid":…}`.
pub fn sign(key: &SigningKey, claims: &AccessTokenClaims) -> jsonwebtoken::errors::Result<String> {
    let mut header = Header::new(Algorithm::EdDSA);
    header.typ = Some(TYP.to_owned());
    header.kid = Some(key.kid.clone());
    jsonwebtoken::encode(&header, claims, &key.encoding)
}

/// Whether a presented token has the shape of a JWS (opaque tokens are base64url, no dots).
pub fn looks_like_jwt(token: &str) -> bool {
    token.bytes().filter(|b| *b == b'.').count() == 2
}

/// What checking a presented JWT against our keys found.
#[derive(Debug, PartialEq, Eq)]
pub enum Verified {
    /// Signed by one of our published keys, `typ` `at+jwt`, our issuer, not expired: the
    /// stored value its `ref` opens to.
    StoredValue(String),
    /// Well-formed, but its kid is not among the keys given (perhaps one this copy lacks).
    UnknownKid,
    /// Anything else: malformed, another algorithm or typ, a bad signature, expired, not ours.
    Invalid,
}

#[derive(Deserialize)]
struct ReferenceOnly {
    #[serde(rename = "ref")]
    reference: String,
}

/// Checks `token` against the keys published at `now`.
pub fn verify(keys: &KeySet, token: &str, issuer: &str, now: i64, token_lifetime: i64) -> Verified {
    let Ok(header) = jsonwebtoken::decode_header(token) else {
        return Verified::Invalid;
    };
    if header.alg != Algorithm::EdDSA || header.typ.as_deref() != Some(TYP) {
        return Verified::Invalid;
    }
    let Some(kid) = header.kid else {
        return Verified::Invalid;
    };
    let Some(key) = keys.find_published(&kid, now, token_lifetime) else {
        return Verified::UnknownKid;
    };
    if key.alg != Alg::EdDSA {
        return Verified::Invalid;
    }
    let mut validation = Validation::new(Algorithm::EdDSA);
    validation.set_issuer(&[issuer]);
    validation.set_required_spec_claims(&["exp", "iss"]);
    validation.validate_aud = false;
    validation.leeway = 0;
    match jsonwebtoken::decode::<ReferenceOnly>(token, &key.decoding, &validation) {
        Ok(data) => key
            .open_jti(&data.claims.reference)
            .map_or(Verified::Invalid, Verified::StoredValue),
        Err(_) => Verified::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jwt::keys::generate;
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    const ISSUER: &str = "https://auth.example";

    fn keys() -> KeySet {
        KeySet::from_stored(&[generate(1, 0, 0).unwrap()]).unwrap()
    }

    fn claims(key: &SigningKey, exp: i64) -> AccessTokenClaims {
        AccessTokenClaims {
            iss: ISSUER.into(),
            sub: "7".into(),
            aud: Audience::One(ISSUER.into()),
            client_id: "client".into(),
            iat: 100,
            exp,
            jti: "family".into(),
            reference: key.seal_jti("the-value").unwrap(),
            scope: "read".into(),
            username: Some("alice".into()),
            groups: None,
            cnf: None,
            auth_time: None,
            acr: None,
            amr: None,
        }
    }

    fn now() -> i64 {
        crate::store::now()
    }

    #[test]
    fn a_signed_token_verifies_to_its_jti() {
        let keys = keys();
        let key = keys.signer(Alg::EdDSA, 0).unwrap();
        let token = sign(key, &claims(key, now() + 60)).unwrap();
        assert!(looks_like_jwt(&token));
        let header = jsonwebtoken::decode_header(&token).unwrap();
        assert_eq!(header.typ.as_deref(), Some("at+jwt"));
        assert_eq!(header.kid.as_deref(), Some(keys.all()[0].kid.as_str()));
        assert_eq!(
            verify(&keys, &token, ISSUER, now(), 3600),
            Verified::StoredValue("the-value".into())
        );
    }

    #[test]
    fn tampered_expired_foreign_and_other_issuers_tokens_are_refused() {
        let keys = keys();
        let key = keys.signer(Alg::EdDSA, 0).unwrap();
        let token = sign(key, &claims(key, now() + 60)).unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        let mut forged = claims(key, now() + 60);
        forged.scope = "read write".into();
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        let tampered = format!("{}.{payload}.{}", parts[0], parts[2]);
        assert_eq!(
            verify(&keys, &tampered, ISSUER, now(), 3600),
            Verified::Invalid
        );
        let expired = sign(key, &claims(key, now() - 1)).unwrap();
        // Signed by our key, with a reference it did not seal.
        let mut unsealed = claims(key, now() + 60);
        unsealed.reference = "the-value".into();
        let unsealed = sign(key, &unsealed).unwrap();
        assert_eq!(
            verify(&keys, &unsealed, ISSUER, now(), 3600),
            Verified::Invalid
        );
        assert_eq!(
            verify(&keys, &expired, ISSUER, now(), 3600),
            Verified::Invalid
        );
        assert_eq!(
            verify(&keys, &token, "https://other.example", now(), 3600),
            Verified::Invalid
        );
        let foreign = self::keys();
        assert_eq!(
            verify(&foreign, &token, ISSUER, now(), 3600),
            Verified::UnknownKid
        );
        // Same kid, header claiming another algorithm: refused before any key is used.
        let hs256 = format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(format!(
                r#"{{"alg":"HS256","typ":"at+jwt","kid":"{}"}}"#,
                key.kid
            )),
            parts[1],
            parts[2]
        );
        assert_eq!(
            verify(&keys, &hs256, ISSUER, now(), 3600),
            Verified::Invalid
        );
        let plain_jwt = format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(format!(
                r#"{{"alg":"EdDSA","typ":"JWT","kid":"{}"}}"#,
                key.kid
            )),
            parts[1],
            parts[2]
        );
        assert_eq!(
            verify(&keys, &plain_jwt, ISSUER, now(), 3600),
            Verified::Invalid
        );
        assert_eq!(
            verify(&keys, "a.b.c", ISSUER, now(), 3600),
            Verified::Invalid
        );
    }
}

//! A DPoP client's side: a key pair that signs proofs (ES256 or EdDSA). For tests, benchmarks
//! and tools; the servers only verify.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use serde_json::{Value, json};

/// A key pair that signs DPoP proofs.
pub enum ProofSigner {
    Es256(EcdsaKeyPair),
    EdDsa(Ed25519KeyPair),
}

/// The claims of one proof; `None` members are left out.
#[derive(Debug, Clone, Default)]
pub struct ProofClaims {
    pub htm: String,
    pub htu: String,
    pub iat: i64,
    pub jti: String,
    pub ath: Option<String>,
    pub nonce: Option<String>,
}

impl ProofSigner {
    /// A new P-256 key (`ES256`).
    pub fn es256() -> ProofSigner {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).expect("P-256 key generation");
        ProofSigner::Es256(EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).expect("P-256 key"))
    }

    /// A new Ed25519 key (`EdDSA`).
    pub fn eddsa() -> ProofSigner {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("Ed25519 key");
        ProofSigner::EdDsa(Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("Ed25519 key"))
    }

    /// The `alg` of its proofs.
    pub fn alg(&self) -> &'static str {
        match self {
            ProofSigner::Es256(_) => "ES256",
            ProofSigner::EdDsa(_) => "EdDSA",
        }
    }

    /// Its public key as a JWK.
    pub fn jwk(&self) -> Value {
        match self {
            ProofSigner::Es256(pair) => {
                let point = pair.public_key().as_ref();
                json!({
                    "kty": "EC",
                    "crv": "P-256",
                    "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
                    "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
                })
            }
            ProofSigner::EdDsa(pair) => json!({
                "kty": "OKP",
                "crv": "Ed25519",
                "x": URL_SAFE_NO_PAD.encode(pair.public_key().as_ref()),
            }),
        }
    }

    /// Its RFC 7638 thumbprint (what `cnf.jkt` of its tokens names).
    pub fn thumbprint(&self) -> String {
        let jwk = self.jwk();
        let jwk = jwk.as_object().expect("a JWK is an object");
        super::jwk::PublicJwk::read(jwk, self.alg())
            .expect("its own key")
            .thumbprint()
    }

    /// A proof of `claims`, with this header (`typ` and `jwk` may be overridden by `header`).
    pub fn sign_with_header(&self, header: Value, claims: &ProofClaims) -> String {
        let mut payload = json!({
            "htm": claims.htm,
            "htu": claims.htu,
            "iat": claims.iat,
            "jti": claims.jti,
        });
        if let Some(ath) = &claims.ath {
            payload["ath"] = ath.clone().into();
        }
        if let Some(nonce) = &claims.nonce {
            payload["nonce"] = nonce.clone().into();
        }
        let encode = |value: &Value| URL_SAFE_NO_PAD.encode(value.to_string());
        let signed = format!("{}.{}", encode(&header), encode(&payload));
        let signature = match self {
            ProofSigner::Es256(pair) => pair
                .sign(&SystemRandom::new(), signed.as_bytes())
                .expect("P-256 signature")
                .as_ref()
                .to_vec(),
            ProofSigner::EdDsa(pair) => pair.sign(signed.as_bytes()).as_ref().to_vec(),
        };
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
    }

    /// A proof of `claims` with the usual header.
    pub fn sign(&self, claims: &ProofClaims) -> String {
        let header = json!({ "typ": "dpop+jwt", "alg": self.alg(), "jwk": self.jwk() });
        self.sign_with_header(header, claims)
    }

    /// A fresh proof (new `jti`) for `htm` `htu` at `now`, with the hash of `access_token`.
    pub fn proof(&self, htm: &str, htu: &str, now: i64, access_token: Option<&str>) -> String {
        self.sign(&ProofClaims {
            htm: htm.to_owned(),
            htu: htu.to_owned(),
            iat: now,
            jti: new_jti(),
            ath: access_token.map(super::access_token_hash),
            nonce: None,
        })
    }
}

/// A random `jti`.
pub fn new_jti() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    let _ = SystemRandom::new().fill(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

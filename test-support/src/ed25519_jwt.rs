//! JWT access tokens signed here with Ed25519 keys, and a JWKS file of their public keys that a
//! test may rewrite, for the tests of local JWT validation.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::{Signer, SigningKey};
use resource_server::JwtSettings;
use resource_server::jwt::{JwksSettings, JwksSource};
use serde_json::{Value, json};

pub fn b64(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

pub fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

/// The public JWK of `sk`, with `kid` when given.
pub fn jwk(sk: &SigningKey, kid: Option<&str>) -> Value {
    let mut k = json!({"kty": "OKP", "crv": "Ed25519", "use": "sig",
                       "x": b64(sk.verifying_key().to_bytes())});
    if let Some(kid) = kid {
        k["kid"] = json!(kid);
    }
    k
}

/// A JWS signed by `sk` with this header and payload.
pub fn sign_raw(sk: &SigningKey, header: &Value, payload: &Value) -> String {
    let message = format!("{}.{}", b64(header.to_string()), b64(payload.to_string()));
    let sig = sk.sign(message.as_bytes());
    format!("{message}.{}", b64(sig.to_bytes()))
}

pub fn sign(sk: &SigningKey, kid: Option<&str>, payload: &Value) -> String {
    let mut header = json!({"alg": "EdDSA", "typ": "at+jwt"});
    if let Some(kid) = kid {
        header["kid"] = json!(kid);
    }
    sign_raw(sk, &header, payload)
}

/// A JWKS file of its own for each test.
pub struct JwksFile(pub PathBuf);

impl JwksFile {
    pub fn new(keys: &[Value]) -> JwksFile {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "tokengate-test-jwks-{}-{}.json",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let f = JwksFile(path);
        f.set(keys);
        f
    }

    pub fn set(&self, keys: &[Value]) {
        std::fs::write(&self.0, json!({ "keys": keys }).to_string()).unwrap();
    }

    /// Validator settings for tokens of `issuer` with this file's keys (re-read at most every
    /// 50 ms).
    pub fn settings(&self, issuer: &str) -> JwtSettings {
        let mut jwks = JwksSettings::new(JwksSource::File(self.0.clone()));
        jwks.refresh_min = Duration::from_millis(50);
        JwtSettings::new(issuer, jwks)
    }
}

impl Drop for JwksFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

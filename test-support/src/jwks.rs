//! JWT test fixtures shared by the resource-server, proxy and example-api tests: a JWKS server
//! whose document can be swapped and whose fetches are counted, and a corpus of access tokens
//! signed by a third-party library (Python's Authlib, see `jwt_tokens.py`).
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Tokens, and the JWKS before and after a rotation (rsa-a out, rsa-b in).
/// The corpus tokens every validator must refuse with 401 `invalid_token`.
#[allow(dead_code)]
pub const ADVERSARIAL: [&str; 12] = [
    "alg_none",
    "hs256_public_key",
    "wrong_iss",
    "wrong_aud",
    "expired",
    "not_yet_valid",
    "unknown_kid",
    "stray_key_known_kid",
    "tampered_payload",
    "tampered_signature",
    "wrong_typ",
    "missing_typ",
];

pub struct Corpus {
    pub jwks: Value,
    pub jwks_rotated: Value,
    pub tokens: HashMap<String, String>,
}

impl Corpus {
    /// Runs `jwt_tokens.py` (python3 with Authlib).
    pub fn generate(issuer: &str, audience: &str) -> Corpus {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/jwt_tokens.py");
        let out = std::process::Command::new("python3")
            .arg(&script)
            .args([issuer, audience])
            .output()
            .expect("python3 runs (with authlib: pip install authlib)");
        assert!(
            out.status.success(),
            "{}: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("JSON from jwt_tokens.py");
        let tokens = v["tokens"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, t)| (k.clone(), t.as_str().unwrap().to_owned()))
            .collect();
        Corpus {
            jwks: v["jwks"].clone(),
            jwks_rotated: v["jwks_rotated"].clone(),
            tokens,
        }
    }

    pub fn token(&self, name: &str) -> &str {
        self.tokens
            .get(name)
            .unwrap_or_else(|| panic!("no token {name}"))
    }
}

/// Serves a JWKS on `GET` (any path) with a `Cache-Control` line; counts the fetches.
#[derive(Clone)]
pub struct JwksServer {
    pub addr: SocketAddr,
    state: Arc<Mutex<(String, String, u16)>>,
    fetches: Arc<AtomicUsize>,
}

impl JwksServer {
    pub async fn start(jwks: &Value, cache_control: &str) -> JwksServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new((
            jwks.to_string(),
            cache_control.to_owned(),
            200,
        )));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (s, f) = (state.clone(), fetches.clone());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (s, f) = (s.clone(), f.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut seen = Vec::new();
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                    }
                    f.fetch_add(1, Ordering::SeqCst);
                    let (body, cc, status) = s.lock().unwrap().clone();
                    let head = format!(
                        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nCache-Control: {cc}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(body.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        JwksServer {
            addr,
            state,
            fetches,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/.well-known/jwks.json", self.addr)
    }

    /// Serves `jwks` from now on.
    pub fn set(&self, jwks: &Value) {
        self.state.lock().unwrap().0 = jwks.to_string();
    }

    /// Answers with `status` from now on (the body stays).
    pub fn set_status(&self, status: u16) {
        self.state.lock().unwrap().2 = status;
    }

    /// Fetches so far.
    pub fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

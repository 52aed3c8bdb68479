//! In-process cost of one token check: JWT cache hit, JWT miss (EdDSA and RS256 signature
//! verification, every check a new token), and introspection cache hit, on one thread.
//!
//! `cargo run --release -p resource-server --example jwt_bench` (needs python3 with Authlib).

use test_support::jwks;

use std::time::{Duration, Instant};

use jwks::JwksServer;
use resource_server::jwt::{JwksSettings, JwksSource};
use resource_server::{
    CacheSettings, ClientAuth, Credential, IntrospectionSettings, JwtSettings, JwtValidator,
    TokenChecker,
};

const N: usize = 2000;

fn per_check(label: &str, elapsed: Duration, n: usize) {
    println!(
        "{label:<28} {:>9.2} µs/check  ({n} checks)",
        elapsed.as_secs_f64() * 1e6 / n as f64
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let corpus = {
        let out = std::process::Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/support/jwt_tokens.py"
            ))
            .args(["https://issuer", "api"])
            .env("JWT_TOKENS_BULK", N.to_string())
            .output()
            .expect("python3");
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (v["jwks"].clone(), v["tokens"].clone())
    };
    let (jwks_doc, tokens) = corpus;
    let token = |name: &str| tokens[name].as_str().unwrap().to_owned();
    let server = JwksServer::start(&jwks_doc, "max-age=3600").await;
    let v = JwtValidator::new(JwtSettings::new(
        "https://issuer",
        JwksSettings::new(JwksSource::Url(server.url())),
    ))
    .unwrap();
    let hit = token("eddsa");
    assert!(matches!(v.validate(&hit).await, Credential::Checked(_)));

    for alg in ["eddsa", "rs256"] {
        let bulk: Vec<String> = (0..N).map(|i| token(&format!("bulk_{alg}_{i}"))).collect();
        let start = Instant::now();
        for t in &bulk {
            assert!(matches!(v.validate(t).await, Credential::Checked(_)));
        }
        per_check(&format!("jwt miss ({alg})"), start.elapsed(), N);
    }
    let rounds = 200_000;
    let start = Instant::now();
    for _ in 0..rounds {
        assert!(matches!(v.validate(&hit).await, Credential::Checked(_)));
    }
    per_check("jwt cache hit", start.elapsed(), rounds);

    // Introspection cache hit: the same server answers the POST with an active answer.
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let answer = serde_json::json!({"active": true, "scope": "read", "exp": exp});
    let introspection = JwksServer::start(&answer, "no-store").await;
    let c = TokenChecker::new(
        IntrospectionSettings::new(introspection.url(), ClientAuth::Bearer("t".into())),
        CacheSettings::default(),
    )
    .unwrap();
    assert!(c.check(&hit).await.unwrap().active);
    let start = Instant::now();
    for _ in 0..rounds {
        assert!(c.check(&hit).await.unwrap().active);
    }
    per_check("introspection cache hit", start.elapsed(), rounds);
}

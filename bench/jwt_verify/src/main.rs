//! Micro-benchmark of one JWT verification (issue 10): jsonwebtoken 9 + ring (today) against
//! jsonwebtoken 11 + rust_crypto and ed25519-dalek with a cached key; times are the best of 5
//! runs of n verifications of the same token, candidates interleaved in one process.
//!
//! `cargo run --release --manifest-path bench/jwt_verify/Cargo.toml` (python3 with Authlib);
//! `... -- raw <ring|dalek> <n>` runs n bare Ed25519 verifications only (for callgrind).

use std::hint::black_box;
use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

fn time(label: &str, n: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..n / 10 {
        f();
    }
    let mut best = f64::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..n {
            f();
        }
        best = best.min(start.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    println!("{label:<52} {best:>8.2} µs");
    best
}

fn raw(which: &str, n: usize) {
    use ring::signature::{Ed25519KeyPair, KeyPair};
    let rng = ring::rand::SystemRandom::new();
    let pk8 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
    let kp = Ed25519KeyPair::from_pkcs8(pk8.as_ref()).unwrap();
    let msg = vec![b'x'; 300];
    let sig = kp.sign(&msg).as_ref().to_vec();
    let pk: [u8; 32] = kp.public_key().as_ref().try_into().unwrap();
    let rk = ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, pk);
    let vk = ed25519_dalek::VerifyingKey::from_bytes(&pk).unwrap();
    let ds = ed25519_dalek::Signature::from_slice(&sig).unwrap();
    let mut ok = 0;
    for _ in 0..n {
        ok += match which {
            "ring" => rk.verify(black_box(&msg), &sig).is_ok(),
            _ => ed25519_dalek::Verifier::verify(&vk, black_box(&msg), &ds).is_ok(),
        } as usize;
    }
    assert_eq!(ok, n);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("raw") {
        return raw(&args[2], args[3].parse().unwrap());
    }
    let out = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../resource-server/tests/support/jwt_tokens.py"
        ))
        .args(["https://issuer", "api"])
        .output()
        .expect("python3");
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let jwk = |kid: &str| {
        v["jwks"]["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["kid"] == kid)
            .unwrap()
            .clone()
    };
    let token = |name: &str| v["tokens"][name].as_str().unwrap().to_owned();
    let n = 20_000;

    for (name, kid, alg9, alg11) in [
        (
            "eddsa",
            "ed-1",
            jsonwebtoken::Algorithm::EdDSA,
            jsonwebtoken11::Algorithm::EdDSA,
        ),
        (
            "rs256",
            "rsa-a",
            jsonwebtoken::Algorithm::RS256,
            jsonwebtoken11::Algorithm::RS256,
        ),
        (
            "es256",
            "ec-1",
            jsonwebtoken::Algorithm::ES256,
            jsonwebtoken11::Algorithm::ES256,
        ),
    ] {
        let t = token(name);
        let k = jwk(kid);
        let mut val9 = jsonwebtoken::Validation::new(alg9);
        val9.validate_exp = false;
        val9.validate_aud = false;
        val9.required_spec_claims.clear();
        let key9 = jsonwebtoken::DecodingKey::from_jwk(&serde_json::from_value(k.clone()).unwrap())
            .unwrap();
        assert!(jsonwebtoken::decode::<Value>(&t, &key9, &val9).is_ok());
        let a = time(&format!("{name}: jsonwebtoken 9 + ring, decode"), n, || {
            black_box(jsonwebtoken::decode::<Value>(black_box(&t), &key9, &val9).is_ok());
        });
        let mut val11 = jsonwebtoken11::Validation::new(alg11);
        val11.validate_exp = false;
        val11.validate_aud = false;
        val11.required_spec_claims.clear();
        let key11 =
            jsonwebtoken11::DecodingKey::from_jwk(&serde_json::from_value(k.clone()).unwrap())
                .unwrap();
        assert!(jsonwebtoken11::decode::<Value>(&t, &key11, &val11).is_ok());
        let b = time(
            &format!("{name}: jsonwebtoken 11 + rust_crypto, decode"),
            n,
            || {
                black_box(jsonwebtoken11::decode::<Value>(black_box(&t), &key11, &val11).is_ok());
            },
        );
        println!("{name}: jsonwebtoken 9 / 11 time ratio {:.2}x", a / b);

        if name == "eddsa" {
            let x = URL_SAFE_NO_PAD.decode(k["x"].as_str().unwrap()).unwrap();
            let (input, sig) = t.rsplit_once('.').unwrap();
            let sig = URL_SAFE_NO_PAD.decode(sig).unwrap();
            let ring_key = ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, &x);
            assert!(ring_key.verify(input.as_bytes(), &sig).is_ok());
            let r = time("eddsa: ring verify only", n, || {
                black_box(ring_key.verify(black_box(input.as_bytes()), &sig).is_ok());
            });
            let xa: [u8; 32] = x.as_slice().try_into().unwrap();
            let sig_d = ed25519_dalek::Signature::from_slice(&sig).unwrap();
            time("eddsa: dalek VerifyingKey::from_bytes + verify", n, || {
                let vk = ed25519_dalek::VerifyingKey::from_bytes(black_box(&xa)).unwrap();
                black_box(
                    ed25519_dalek::Verifier::verify(&vk, black_box(input.as_bytes()), &sig_d)
                        .is_ok(),
                );
            });
            let vk = ed25519_dalek::VerifyingKey::from_bytes(&xa).unwrap();
            assert!(ed25519_dalek::Verifier::verify(&vk, input.as_bytes(), &sig_d).is_ok());
            let d = time("eddsa: dalek cached VerifyingKey, verify only", n, || {
                black_box(
                    ed25519_dalek::Verifier::verify(&vk, black_box(input.as_bytes()), &sig_d)
                        .is_ok(),
                );
            });
            println!("eddsa: ring / dalek-cached verify time ratio {:.2}x", r / d);
            let e = time(
                "eddsa: dalek cached verify + jsonwebtoken 9 decode (no sig)",
                n,
                || {
                    let sig_d = ed25519_dalek::Signature::from_slice(
                        &URL_SAFE_NO_PAD
                            .decode(black_box(&t).rsplit_once('.').unwrap().1)
                            .unwrap(),
                    )
                    .unwrap();
                    let ok = ed25519_dalek::Verifier::verify(
                        &vk,
                        t.rsplit_once('.').unwrap().0.as_bytes(),
                        &sig_d,
                    )
                    .is_ok();
                    let mut val = val9.clone();
                    val.insecure_disable_signature_validation();
                    black_box(ok && jsonwebtoken::decode::<Value>(&t, &key9, &val).is_ok());
                },
            );
            println!(
                "eddsa: today / (dalek cached + jsonwebtoken 9) ratio {:.2}x",
                a / e
            );
        }
    }
}

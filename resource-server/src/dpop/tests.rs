//! The proof check against hand-signed proofs: each rule of RFC 9449 §4.3 refuses its case.

use super::signer::{ProofClaims, ProofSigner, new_jti};
use super::*;
use serde_json::json;

const HTU: &str = "https://as.example/o/token/";
const NOW: i64 = 1_800_000_000;

fn urls() -> Vec<String> {
    vec![normalize_htu(HTU).unwrap()]
}

fn claims() -> ProofClaims {
    ProofClaims {
        htm: "POST".into(),
        htu: HTU.into(),
        iat: NOW,
        jti: new_jti(),
        ath: None,
        nonce: None,
    }
}

fn check(proof: &str, token: Option<&str>, nonces: Option<&Nonces>) -> Result<Proof, ProofError> {
    let htu = urls();
    verify(
        proof,
        &Expected {
            htm: "POST",
            htu: &htu,
            access_token: token,
            nonces,
            now: NOW,
            window: DEFAULT_WINDOW,
        },
    )
}

fn refused(result: Result<Proof, ProofError>) -> &'static str {
    match result {
        Err(ProofError::Invalid(description)) => description,
        other => panic!("expected invalid_dpop_proof, got {other:?}"),
    }
}

#[test]
fn es256_and_eddsa_proofs_verify_and_name_their_key() {
    for signer in [ProofSigner::es256(), ProofSigner::eddsa()] {
        let proof = check(&signer.sign(&claims()), None, None).unwrap();
        assert_eq!(proof.jkt, signer.thumbprint());
        assert_eq!(proof.jkt.len(), 43);
    }
    // RFC 9864's fully-specified name of EdDSA over Ed25519 (oauth4webapi signs with it).
    let signer = ProofSigner::eddsa();
    let header = json!({ "typ": "dpop+jwt", "alg": "Ed25519", "jwk": signer.jwk() });
    let proof = check(&signer.sign_with_header(header, &claims()), None, None).unwrap();
    assert_eq!(proof.jkt, signer.thumbprint());
}

#[test]
fn rfc7638_thumbprint_of_the_rfcs_example_key() {
    // RFC 7638 §3.1's RSA key and its thumbprint.
    let n = "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw";
    let jwk = json!({ "kty": "RSA", "n": n, "e": "AQAB", "alg": "RS256", "kid": "2011-04-29" });
    let key = jwk::PublicJwk::read(jwk.as_object().unwrap(), "RS256").unwrap();
    assert_eq!(
        key.thumbprint(),
        "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
    );
}

#[test]
fn htu_is_compared_without_query_fragment_default_port_or_case() {
    let signer = ProofSigner::es256();
    let mut c = claims();
    c.htu = "HTTPS://AS.example:443/o/token/?x=1#f".into();
    assert!(check(&signer.sign(&c), None, None).is_ok());
    c.htu = "https://as.example/o/token/other".into();
    assert!(refused(check(&signer.sign(&c), None, None)).contains("htu"));
    c.htu = "https://as.example:8443/o/token/".into();
    assert!(refused(check(&signer.sign(&c), None, None)).contains("htu"));
}

#[test]
fn wrong_htm_stale_or_future_iat_refused() {
    let signer = ProofSigner::eddsa();
    let mut c = claims();
    c.htm = "GET".into();
    assert!(refused(check(&signer.sign(&c), None, None)).contains("htm"));
    let mut c = claims();
    c.iat = NOW - DEFAULT_WINDOW - 1;
    assert!(refused(check(&signer.sign(&c), None, None)).contains("iat"));
    c.iat = NOW + 60;
    assert!(refused(check(&signer.sign(&c), None, None)).contains("iat"));
}

#[test]
fn header_rules_typ_alg_private_key_and_signature() {
    let signer = ProofSigner::es256();
    let c = claims();
    let with = |header| check(&signer.sign_with_header(header, &c), None, None);
    let jwk = signer.jwk();
    assert!(refused(with(json!({"typ": "JWT", "alg": "ES256", "jwk": jwk}))).contains("typ"));
    assert!(
        refused(with(json!({"typ": "dpop+jwt", "alg": "none", "jwk": jwk}))).contains("algorithm")
    );
    assert!(
        refused(with(json!({"typ": "dpop+jwt", "alg": "HS256", "jwk": jwk}))).contains("algorithm")
    );
    let mut private = jwk.clone();
    private["d"] = "AAAA".into();
    assert!(
        refused(with(
            json!({"typ": "dpop+jwt", "alg": "ES256", "jwk": private})
        ))
        .contains("jwk")
    );
    // Another key's jwk in the header: the signature does not verify with it.
    let other = ProofSigner::es256().jwk();
    assert!(
        refused(with(
            json!({"typ": "dpop+jwt", "alg": "ES256", "jwk": other})
        ))
        .contains("signature")
    );
    // A key of another type than the algorithm.
    let ed = ProofSigner::eddsa().jwk();
    assert!(refused(with(json!({"typ": "dpop+jwt", "alg": "ES256", "jwk": ed}))).contains("jwk"));
    assert!(refused(check("a.b", None, None)).contains("compact"));
    assert!(refused(check("not a proof at all", None, None)).contains("compact"));
}

#[test]
fn ath_must_hash_the_presented_token() {
    let signer = ProofSigner::es256();
    let mut c = claims();
    assert!(refused(check(&signer.sign(&c), Some("tok"), None)).contains("ath"));
    c.ath = Some(access_token_hash("other"));
    assert!(refused(check(&signer.sign(&c), Some("tok"), None)).contains("ath"));
    c.ath = Some(access_token_hash("tok"));
    assert!(check(&signer.sign(&c), Some("tok"), None).is_ok());
}

#[test]
fn nonces_are_required_current_and_shared_by_one_key() {
    let signer = ProofSigner::es256();
    let here = Nonces::new(b"one origin", 60);
    let there = Nonces::new(b"one origin", 60);
    let mut c = claims();
    assert_eq!(
        check(&signer.sign(&c), None, Some(&here)),
        Err(ProofError::UseNonce)
    );
    c.nonce = Some(there.issue(NOW - 30));
    assert!(check(&signer.sign(&c), None, Some(&here)).is_ok());
    c.nonce = Some(there.issue(NOW - 200));
    assert_eq!(
        check(&signer.sign(&c), None, Some(&here)),
        Err(ProofError::UseNonce)
    );
    c.nonce = Some(Nonces::new(b"another", 60).issue(NOW));
    assert_eq!(
        check(&signer.sign(&c), None, Some(&here)),
        Err(ProofError::UseNonce)
    );
}

#[test]
fn replay_cache_accepts_a_jti_once_per_key() {
    let cache = ReplayCache::new(1000, DEFAULT_WINDOW);
    assert!(cache.first_use("key", "jti-1"));
    assert!(!cache.first_use("key", "jti-1"));
    assert!(cache.first_use("other key", "jti-1"));
    assert_eq!(cache.len(), 2);
}

#[test]
fn replay_cache_keeps_a_window_of_proofs_within_its_capacity() {
    // 16 shards of two generations of 100: about 3 200 proofs at most.
    let cache = ReplayCache::new(3_200, DEFAULT_WINDOW);
    for i in 0..10_000 {
        assert!(cache.first_use("key", &i.to_string()));
    }
    assert!(cache.len() <= 3_200, "{}", cache.len());
    // The most recent are still remembered.
    for i in 9_900..10_000 {
        assert!(!cache.first_use("key", &i.to_string()), "{i}");
    }
}

#[test]
fn challenge_names_error_and_algorithms() {
    assert_eq!(
        challenge(INVALID_DPOP_PROOF, None),
        "DPoP error=\"invalid_dpop_proof\", algs=\"ES256 EdDSA Ed25519 RS256\""
    );
}

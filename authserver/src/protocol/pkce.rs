//! PKCE (RFC 7636), `S256` only: `plain` sends the verifier itself through the browser.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

/// The only method accepted.
pub const S256: &str = "S256";

/// Whether `value` is 43 to 128 characters of `[A-Za-z0-9-._~]` (§4.1, the verifier's syntax).
pub fn is_verifier(value: &str) -> bool {
    (43..=128).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// Whether `value` can be an S256 challenge: the unpadded base64url of 32 bytes.
pub fn is_s256_challenge(value: &str) -> bool {
    value.len() == 43
        && URL_SAFE_NO_PAD
            .decode(value)
            .is_ok_and(|bytes| bytes.len() == 32)
}

/// `BASE64URL(SHA256(verifier))`.
pub fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Whether `verifier` is well-formed and hashes to `challenge` (compared in constant time).
pub fn verify(verifier: &str, challenge: &str) -> bool {
    is_verifier(verifier) && crate::secrets::constant_time_eq(&s256(verifier), challenge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rfc_7636_example_verifies() {
        // RFC 7636 Appendix B.
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        let challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
        assert_eq!(s256(verifier), challenge);
        assert!(is_s256_challenge(challenge));
        assert!(verify(verifier, challenge));
        assert!(!verify(
            "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXK",
            challenge
        ));
        // The challenge itself as verifier (what `plain` would send) does not verify.
        assert!(!verify(challenge, challenge));
    }

    #[test]
    fn malformed_values_are_refused() {
        assert!(!is_verifier("short"));
        assert!(!is_verifier(&"a".repeat(129)));
        assert!(!is_verifier(&format!("{}+", "a".repeat(43))));
        assert!(is_verifier(&"a~._-".repeat(9)));
        assert!(!is_s256_challenge(
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-c"
        ));
        assert!(!is_s256_challenge(
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw+cM"
        ));
    }
}

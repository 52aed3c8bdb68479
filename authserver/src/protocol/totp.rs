//! Time-based one-time passwords (RFC 6238 over RFC 4226's HOTP): HMAC-SHA1, 6 digits, 30-second
//! steps, the `otpauth://` URI authenticator apps read, and the recovery codes that stand in for
//! the app once each. Pure functions: the store remembers the last step used.

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use subtle::ConstantTimeEq;

/// Seconds per step (RFC 6238 §4: X = 30).
pub const STEP: i64 = 30;
/// Digits of a code.
pub const DIGITS: usize = 6;
/// Steps accepted either side of the current one: a clock one step off still signs in.
pub const DRIFT: i64 = 1;
/// Bytes of a new secret: 160 bits, the HMAC-SHA1 output size RFC 4226 §4 recommends.
pub const SECRET_LEN: usize = 20;
/// How many recovery codes a user gets at once.
pub const RECOVERY_CODES: usize = 10;

/// A new random secret.
pub fn new_secret() -> Vec<u8> {
    let mut secret = vec![0u8; SECRET_LEN];
    SystemRandom::new()
        .fill(&mut secret)
        .expect("the system's randomness");
    secret
}

/// The step `time` (seconds since the epoch) falls in.
pub fn step_of(time: i64) -> i64 {
    time.div_euclid(STEP)
}

/// The code of `secret` at `step` (RFC 4226 §5.3 dynamic truncation), zero-padded.
pub fn code_at(secret: &[u8], step: i64) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret);
    let mac = hmac::sign(&key, &step.to_be_bytes());
    let mac = mac.as_ref();
    let offset = usize::from(mac[mac.len() - 1] & 0x0f);
    let binary = u32::from_be_bytes([
        mac[offset] & 0x7f,
        mac[offset + 1],
        mac[offset + 2],
        mac[offset + 3],
    ]);
    format!(
        "{:0width$}",
        binary % 10u32.pow(DIGITS as u32),
        width = DIGITS
    )
}

/// The step whose code `code` is, within [`DRIFT`] of `now`'s and later than `last_step` (a
/// code is accepted once: the caller stores the step returned). Every candidate is compared in
/// constant time.
pub fn verify(secret: &[u8], code: &str, now: i64, last_step: i64) -> Option<i64> {
    let code = code.trim();
    if code.len() != DIGITS || !code.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let current = step_of(now);
    let mut found = None;
    for step in current - DRIFT..=current + DRIFT {
        let matches: bool = code_at(secret, step)
            .as_bytes()
            .ct_eq(code.as_bytes())
            .into();
        if matches && step > last_step && found.is_none() {
            found = Some(step);
        }
    }
    found
}

/// RFC 4648 base32 without padding: how the secret is shown and put in the URI.
pub fn base32(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut out = String::new();
    let (mut buffer, mut bits) = (0u32, 0u32);
    for &byte in bytes {
        buffer = (buffer << 8) | u32::from(byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((buffer >> bits) & 31) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((buffer << (5 - bits)) & 31) as usize]));
    }
    out
}

/// The key URI authenticator apps read (Google Authenticator's `otpauth://totp/…` format):
/// `issuer:account` as the label, the issuer again as a parameter.
pub fn otpauth_uri(secret: &[u8], issuer: &str, account: &str) -> String {
    let encode = |text: &str| -> String {
        // Path and query escaping alike: only unreserved characters stay as they are.
        text.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect()
    };
    format!(
        "otpauth://totp/{}:{}?secret={}&issuer={}&algorithm=SHA1&digits={DIGITS}&period={STEP}",
        encode(issuer),
        encode(account),
        base32(secret),
        encode(issuer)
    )
}

/// New recovery codes: `xxxxx-xxxxx` from a 32-letter alphabet without look-alikes (50 bits
/// each).
pub fn new_recovery_codes() -> Vec<String> {
    const ALPHABET: &[u8; 32] = b"abcdefghijkmnpqrstuvwxyz23456789";
    let random = SystemRandom::new();
    (0..RECOVERY_CODES)
        .map(|_| {
            let mut bytes = [0u8; 10];
            random.fill(&mut bytes).expect("the system's randomness");
            let letters: String = bytes
                .iter()
                .map(|b| char::from(ALPHABET[usize::from(b & 31)]))
                .collect();
            format!("{}-{}", &letters[..5], &letters[5..])
        })
        .collect()
}

/// A recovery code as typed, in the form it was stored under: lowercase, without spaces or
/// dashes. None when it cannot be one.
pub fn normalize_recovery_code(typed: &str) -> Option<String> {
    let code: String = typed
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    (code.len() == 10 && code.bytes().all(|b| b.is_ascii_alphanumeric())).then_some(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6238 Appendix B, SHA-1 rows (8 digits there: their last 6 are ours).
    #[test]
    fn rfc_6238_test_vectors() {
        let secret = b"12345678901234567890";
        for (time, eight) in [
            (59, "94287082"),
            (1_111_111_109, "07081804"),
            (1_111_111_111, "14050471"),
            (1_234_567_890, "89005924"),
            (2_000_000_000, "69279037"),
            (20_000_000_000, "65353130"),
        ] {
            assert_eq!(code_at(secret, step_of(time)), eight[2..], "T={time}");
        }
    }

    #[test]
    fn one_step_of_drift_and_never_twice() {
        let secret = new_secret();
        let now = 1_700_000_000;
        let step = step_of(now);
        for off in -1..=1 {
            assert_eq!(
                verify(&secret, &code_at(&secret, step + off), now, 0),
                Some(step + off)
            );
        }
        assert_eq!(verify(&secret, &code_at(&secret, step + 2), now, 0), None);
        assert_eq!(verify(&secret, &code_at(&secret, step - 2), now, 0), None);
        // The step used last, or an earlier one, is refused.
        assert_eq!(verify(&secret, &code_at(&secret, step), now, step), None);
        assert_eq!(
            verify(&secret, &code_at(&secret, step - 1), now, step),
            None
        );
        assert_eq!(verify(&secret, "12345", now, 0), None);
        assert_eq!(verify(&secret, "abcdef", now, 0), None);
    }

    #[test]
    fn base32_and_the_key_uri() {
        assert_eq!(base32(b"foobar"), "MZXW6YTBOI");
        assert_eq!(
            base32(b"12345678901234567890"),
            "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
        );
        assert_eq!(
            otpauth_uri(b"12345678901234567890", "Token Gate", "alice@x"),
            "otpauth://totp/Token%20Gate:alice%40x?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ&issuer=Token%20Gate&algorithm=SHA1&digits=6&period=30"
        );
    }

    #[test]
    fn recovery_codes_are_distinct_and_read_back() {
        let codes = new_recovery_codes();
        assert_eq!(codes.len(), RECOVERY_CODES);
        let mut unique = codes.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), RECOVERY_CODES);
        let typed = format!(" {} ", codes[0].to_uppercase());
        assert_eq!(
            normalize_recovery_code(&typed).as_deref(),
            Some(codes[0].replace('-', "").as_str())
        );
        assert_eq!(normalize_recovery_code("short"), None);
    }
}

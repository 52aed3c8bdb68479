//! Random secrets, SHA-256 digests, constant-time comparison and argon2id password hashing.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use rand::rngs::OsRng;
use sha2::{Digest, Sha256};
use std::sync::OnceLock;
use subtle::ConstantTimeEq;

/// A new random secret: 32 bytes from [`rand::thread_rng`] (ChaCha12, a cryptographically
/// secure generator seeded, and reseeded every 64 KiB, from the OS: no system call per secret),
/// base64url without padding (43 characters).
pub fn random_token() -> String {
    let mut token = String::with_capacity(43);
    push_random(&mut token, 32);
    token
}

/// A new token family's identifier: its time ([`push_time_prefix`]), then 16 random bytes
/// (as in [`random_token`]; base64url, 22 characters). Families made together sort together,
/// so a group of new tokens adds to one page of the family index instead of one page each
/// (SQLite writes each page it changes to the WAL at every commit); the random part keeps it
/// unguessable. Only its digest ([`crate::store::family_jti`]) is ever shown.
pub fn new_family() -> String {
    let mut family = String::with_capacity(TIME_PREFIX_LEN + 22);
    push_time_prefix(&mut family);
    push_random(&mut family, 16);
    family
}

/// A new access or refresh token: its time ([`push_time_prefix`]), then a [`random_token`]
/// (56 characters in all). Its storage key ([`token_key`]) starts with the same prefix, so the
/// tokens of a write group add to one page of the key's index, not one page each.
pub fn new_token() -> String {
    let mut token = String::with_capacity(TIME_PREFIX_LEN + 43);
    push_time_prefix(&mut token);
    push_random(&mut token, 32);
    token
}

/// Appends `count` (at most 32) random bytes from [`rand::thread_rng`] in base64url.
fn push_random(to: &mut String, count: usize) {
    let mut bytes = [0u8; 32];
    let bytes = &mut bytes[..count];
    rand::thread_rng().fill_bytes(bytes);
    URL_SAFE_NO_PAD.encode_string(bytes, to);
}

/// Appends the time in microseconds since the epoch, as [`TIME_PREFIX_LEN`] lowercase hex
/// digits (they sort as the times do until 2112, when 13 digits wrap).
fn push_time_prefix(to: &mut String) {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as u64);
    for place in (0..TIME_PREFIX_LEN).rev() {
        to.push(char::from(
            b"0123456789abcdef"[((micros >> (4 * place)) & 0xf) as usize],
        ));
    }
}

/// Length of a time prefix ([`push_time_prefix`]).
const TIME_PREFIX_LEN: usize = 13;

/// Where storage finds a token: the hex SHA-256 of the token, after the time prefix of a token
/// of [`new_token`]'s shape (56 characters, 13 lowercase hex digits first). A token made before
/// tokens had the prefix (43 characters) is kept under its bare digest, and still found.
pub fn token_key(token: &str) -> String {
    token_key_of(token, &digest_bytes(token))
}

/// [`token_key`] of a token whose SHA-256 ([`digest_bytes`]) is already known.
pub fn token_key_of(token: &str, sha256: &[u8; 32]) -> String {
    let hex = hex_digits(sha256);
    let prefix = token
        .get(..TIME_PREFIX_LEN)
        .filter(|prefix| {
            token.len() == TIME_PREFIX_LEN + 43
                && prefix
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        })
        .unwrap_or_default();
    let mut key = String::with_capacity(prefix.len() + hex.len());
    key.push_str(prefix);
    key.push_str(std::str::from_utf8(&hex).unwrap_or_default());
    key
}

/// A new random client identifier: 20 bytes, base64url (27 characters).
pub fn random_client_id() -> String {
    let mut client_id = String::with_capacity(27);
    push_random(&mut client_id, 20);
    client_id
}

/// Hex SHA-256 of a secret: what storage keeps instead of the secret itself.
pub fn digest(secret: &str) -> String {
    digest_hex(&digest_bytes(secret))
}

/// SHA-256 of a secret, as bytes ([`digest`] is their hex).
pub fn digest_bytes(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// A SHA-256 in lowercase hex, as [`digest`] stores it (through a table into one buffer: the
/// `hex` crate's `encode` collects a `String` one `char` at a time).
fn digest_hex(digest: &[u8; 32]) -> String {
    String::from_utf8(hex_digits(digest).to_vec()).unwrap_or_default()
}

/// The 64 hex digits of a SHA-256.
fn hex_digits(digest: &[u8; 32]) -> [u8; 64] {
    let mut hex = [0u8; 64];
    // Cannot fail: 64 bytes of room for 32 bytes in hex.
    let _ = hex::encode_to_slice(digest, &mut hex);
    hex
}

/// Whether `secret`'s [`digest`] is `stored`, compared in constant time (and on the stack).
pub fn digest_matches(stored: &str, secret: &str) -> bool {
    stored
        .as_bytes()
        .ct_eq(&hex_digits(&digest_bytes(secret)))
        .into()
}

/// What a log line or a page may show of a secret: the first 8 hex digits of its digest.
pub fn fingerprint(secret_digest: &str) -> &str {
    secret_digest.get(..8).unwrap_or(secret_digest)
}

/// Compares two strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

/// Hashes a password with argon2id (OWASP parameters, the crate's defaults) on the blocking pool.
pub async fn hash_password(password: String) -> anyhow::Result<String> {
    let _permit = hashing_permit().await;
    tokio::task::spawn_blocking(move || hash_password_blocking(&password)).await?
}

/// One argon2 computation per core at a time: each needs 19 MiB of memory, and more of them at
/// once only thrash the caches and the scheduler. Waiters queue here, not on the blocking pool.
async fn hashing_permit() -> Option<tokio::sync::SemaphorePermit<'static>> {
    static HASHING: OnceLock<tokio::sync::Semaphore> = OnceLock::new();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    HASHING
        .get_or_init(|| tokio::sync::Semaphore::new(cores))
        .acquire()
        .await
        .ok()
}

fn hash_password_blocking(password: &str) -> anyhow::Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|error| anyhow::anyhow!("argon2: {error}"))
}

/// Checks a password against a stored hash on the blocking pool. With no hash (unknown user,
/// or a user without a password) it still spends one verification, so that timing does not
/// tell which usernames exist, and answers false.
pub async fn verify_password(password: String, stored_hash: Option<String>) -> bool {
    let _permit = hashing_permit().await;
    tokio::task::spawn_blocking(move || {
        let (hash, real) = match stored_hash {
            Some(hash) => (hash, true),
            None => (dummy_hash().to_owned(), false),
        };
        let ok = PasswordHash::new(&hash)
            .map(|parsed| {
                Argon2::default()
                    .verify_password(password.as_bytes(), &parsed)
                    .is_ok()
            })
            .unwrap_or(false);
        ok && real
    })
    .await
    .unwrap_or(false)
}

fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| {
        hash_password_blocking("tokengate-dummy-password").unwrap_or_else(|_| String::new())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn password_round_trip_and_dummy() {
        let hash = hash_password("s3cret".into()).await.unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("s3cret".into(), Some(hash.clone())).await);
        assert!(!verify_password("wrong".into(), Some(hash)).await);
        assert!(!verify_password("tokengate-dummy-password".into(), None).await);
    }

    #[test]
    fn tokens_are_kept_under_their_time_then_their_digest() {
        let first = new_token();
        std::thread::sleep(std::time::Duration::from_millis(1));
        let second = new_token();
        assert_eq!(first.len(), 56);
        let micros = u64::from_str_radix(&first[..13], 16).unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let since = now.unwrap().as_micros() as u64 - micros;
        assert!(since < 60_000_000, "the prefix is the time it was made");
        let family = new_family();
        assert_eq!(family.len(), 35);
        assert!(u64::from_str_radix(&family[..13], 16).unwrap() >= micros);
        let (first_key, second_key) = (token_key(&first), token_key(&second));
        assert_eq!(first_key, format!("{}{}", &first[..13], digest(&first)));
        assert!(first_key < second_key, "keys sort as the tokens were made");
        assert_eq!(token_key_of(&first, &digest_bytes(&first)), first_key);
        // Only the exact shape has a prefix: another length, or upper-case hex.
        let upper_case = format!("ABCDEF0123456{}", &first[13..]);
        // Hostile shapes: a character of two bytes across the prefix's end, an empty token.
        let split_char = format!("{}é{}", &first[..12], &first[14..]);
        assert_eq!(split_char.len(), 56);
        for other in [
            format!("{first}x"),
            upper_case,
            first[..55].to_owned(),
            split_char,
            String::new(),
        ] {
            assert_eq!(token_key(&other), digest(&other), "{other}");
        }
    }

    #[test]
    fn digests_and_tokens() {
        let token = random_token();
        assert_eq!(token.len(), 43);
        assert_ne!(token, random_token());
        assert_eq!(digest("abc").len(), 64);
        assert_eq!(fingerprint(&digest("abc")), "ba7816bf");
        assert_eq!(
            token_key(&token),
            digest(&token),
            "a token without the prefix"
        );
        assert!(constant_time_eq("same", "same"));
        assert!(!constant_time_eq("same", "diff"));
    }
}

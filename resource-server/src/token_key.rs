//! How a token becomes a cache key, for both caches of checked tokens (introspection answers in
//! [`crate::checker`], verified JWTs in [`crate::jwt`]): [`TokenKeys`], a keyed SipHash-2-4-128,
//! and [`KeyHash`], moka's hasher over the result (no second hash).

use std::hash::{BuildHasher, Hasher};

/// A token's cache key ([`TokenKeys::of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TokenKey(pub(crate) u128);

/// How a token becomes its cache key: SipHash-2-4 with a 128-bit output, under a 128-bit key
/// drawn at random for each cache, never written anywhere.
///
/// Why not the token's SHA-256, as before: it is the cost of a cache hit that matters (it was
/// about 4,000 of a proxied request's instructions where SHA-256 runs in software, as on CPUs
/// without SHA extensions; SipHash costs a few hundred). Why this is as safe for a cache that
/// maps a token to its introspection answer or to its verified claims:
/// - The token is still never kept: an entry holds 16 bytes of a keyed hash, not the token.
/// - A wrong answer needs two tokens with one key. SipHash is a pseudorandom function: without
///   the key (drawn in this process, never logged or sent) an attacker cannot compute keys or
///   search for a collision offline, and online each try costs an introspection call or a
///   signature check; by chance, with a million cached tokens, the odds of any collision are
///   about 2^-88.
/// - Where a token must be named outside the process (a log line), its SHA-256 prefix is used
///   ([`crate::token_log_id`]), computed only for that line.
pub(crate) struct TokenKeys(siphasher::sip128::SipHasher24);

impl TokenKeys {
    /// Keys under a random SipHash key (from the operating system's generator); `None` if the
    /// system has no randomness to give.
    pub(crate) fn random() -> Option<Self> {
        use ring::rand::SecureRandom as _;
        let mut key = [0u8; 16];
        ring::rand::SystemRandom::new().fill(&mut key).ok()?;
        Some(TokenKeys(siphasher::sip128::SipHasher24::new_with_key(
            &key,
        )))
    }

    pub(crate) fn of(&self, token: &str) -> TokenKey {
        TokenKey(self.0.hash(token.as_bytes()).as_u128())
    }
}

/// moka's hasher for [`TokenKey`]s: a key is already a keyed hash, its low 64 bits are the hash
/// (no second SipHash over it at each lookup).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KeyHash;

#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl BuildHasher for KeyHash {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher::default()
    }
}

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write_u128(&mut self, n: u128) {
        self.0 ^= n as u64;
    }
    /// Only [`TokenKey`] is hashed here (by `write_u128`); anything else still spreads over 64
    /// bits.
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// A cache of checked tokens.
pub(crate) type KeyCache<V> = moka::future::Cache<TokenKey, V, KeyHash>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_keys_are_keyed_per_cache_and_never_the_token() {
        let one = TokenKeys::random().unwrap();
        let other = TokenKeys::random().unwrap();
        let token = "a-token-of-some-length-0123456789abcdefghijklmnopqrstuvwxyz";
        assert_eq!(one.of(token), one.of(token), "one token, one key");
        assert_ne!(one.of(token), one.of("another-token"));
        assert_ne!(
            one.of(token),
            other.of(token),
            "another cache (another random key) has other keys: none can be computed outside"
        );
        // The key is no function of the token alone: not its SHA-256 (or a part of it).
        let TokenKey(k) = one.of(token);
        let digest = crate::token_digest(token);
        assert_ne!(&k.to_le_bytes()[..], &digest[..16]);
        assert_ne!(&k.to_be_bytes()[..], &digest[..16]);
        // moka's hash of a key is the key's low 64 bits (no second hash).
        assert_eq!(KeyHash.hash_one(TokenKey(k)), k as u64);
    }
}

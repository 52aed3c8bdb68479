//! Server nonces (RFC 9449 §8) without state: a nonce is its time slot and an HMAC-SHA256 of it
//! under a key; it is current during its slot and the next. Every holder of the key issues and
//! accepts the same nonces, so replicas (and the authorization server and the proxy of one
//! origin, given one key) never make a client alternate between two.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use subtle::ConstantTimeEq;

/// Bytes of the HMAC kept in a nonce.
const TAG_LEN: usize = 16;

/// Issues and checks nonces under one key.
pub struct Nonces {
    key: hmac::Key,
    /// Seconds of one slot.
    period: i64,
}

impl std::fmt::Debug for Nonces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nonces")
            .field("period", &self.period)
            .finish()
    }
}

impl Nonces {
    /// Nonces under `secret`, each current for one to two `period`s (seconds, at least 1).
    pub fn new(secret: &[u8], period: i64) -> Nonces {
        Nonces {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
            period: period.max(1),
        }
    }

    /// Nonces under a random key, known to this process only.
    pub fn random(period: i64) -> Nonces {
        let rng = ring::rand::SystemRandom::new();
        // Without the system's randomness there is no key to keep nonces unpredictable: stop
        // rather than fall back to a guessable one.
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng).expect("the system's randomness");
        Nonces {
            key,
            period: period.max(1),
        }
    }

    /// The nonce to hand out at `now`.
    pub fn issue(&self, now: i64) -> String {
        self.of_slot(now.div_euclid(self.period))
    }

    /// Whether `nonce` is one this key issued in the current slot or the one before.
    pub fn is_current(&self, nonce: &str, now: i64) -> bool {
        let slot = now.div_euclid(self.period);
        [slot, slot - 1].iter().fold(false, |found, slot| {
            let expected = self.of_slot(*slot);
            found | bool::from(expected.as_bytes().ct_eq(nonce.as_bytes()))
        })
    }

    fn of_slot(&self, slot: i64) -> String {
        let slot = slot.to_be_bytes();
        let tag = hmac::sign(&self.key, &slot);
        let mut bytes = Vec::with_capacity(slot.len() + TAG_LEN);
        bytes.extend_from_slice(&slot);
        bytes.extend_from_slice(&tag.as_ref()[..TAG_LEN]);
        URL_SAFE_NO_PAD.encode(bytes)
    }
}

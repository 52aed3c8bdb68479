//! `authserver keys rotate`: a new key of each type (Ed25519 and RSA), published at once and
//! signing after a delay, so that validators that cached the JWKS before the rotation never meet
//! an unknown kid.

use super::keyring::KEY_CACHE_TTL;
use super::keys::{self, Alg, KeySet, KeyState};
use crate::store::signing_keys::StoredSigningKey;
use crate::store::{Store, StoreError, StoreResult, now};

/// What a rotation did.
#[derive(Debug)]
pub struct Rotated {
    /// The new Ed25519 key (access tokens).
    pub key: StoredSigningKey,
    /// The new RSA key (ID tokens), one generation later: when RSA keys are in use.
    pub rsa: Option<StoredSigningKey>,
    /// Keys deleted because every token they signed has expired.
    pub pruned: Vec<String>,
}

/// The delay a rotation waits by default: twice the JWKS max-age plus the replicas' key cache,
/// so every replica publishes the new key and every validator refetches before it signs.
pub fn default_delay(jwks_max_age: i64) -> i64 {
    2 * jwks_max_age + KEY_CACHE_TTL.as_secs() as i64
}

/// The shortest delay with which no validator honouring the JWKS max-age meets an unknown kid.
pub fn safe_delay(jwks_max_age: i64) -> i64 {
    jwks_max_age + KEY_CACHE_TTL.as_secs() as i64
}

/// Adds an Ed25519 key, and an RSA key one generation later when RSA keys are in use (OpenID
/// Connect made one), signing `delay` seconds from now (at once for the first key of its type:
/// nobody can have cached a JWKS that has one), and deletes the keys no longer published for
/// tokens living `token_lifetime`.
pub async fn rotate(store: &Store, delay: i64, token_lifetime: i64) -> StoreResult<Rotated> {
    let at = now();
    let keys = KeySet::from_stored(&store.signing_keys().await?).map_err(StoreError::Other)?;
    let signs_from = |alg| {
        if keys.has(alg) {
            at.saturating_add(delay.clamp(0, crate::config::MAX_SECONDS))
        } else {
            at
        }
    };
    let generation = keys.next_generation();
    let key = keys::generate(generation, at, signs_from(Alg::EdDSA))?;
    let rsa = match keys.has(Alg::RS256) {
        true => Some(keys::generate_for(
            Alg::RS256,
            generation + 1,
            at,
            signs_from(Alg::RS256),
        )?),
        false => None,
    };
    for new in std::iter::once(&key).chain(&rsa) {
        if !store.add_signing_key(new).await? {
            return Err(StoreError::Conflict(
                "a key of that generation (another rotation ran at the same time)",
            ));
        }
    }
    let pruned = delete_expired(store, &keys, at, token_lifetime).await?;
    tracing::info!(kid = %key.kid, rsa_kid = rsa.as_ref().map(|k| k.kid.as_str()), generation = key.generation, signs_from = key.signs_from, "rotated the signing keys");
    Ok(Rotated { key, rsa, pruned })
}

/// Deletes the keys no longer published for tokens living `token_lifetime` (every token they
/// signed has expired); returns their kids. `keys rotate` does this too; the purge
/// (`cleartokens`, `serve`) does it without rotating.
pub async fn prune_expired(store: &Store, token_lifetime: i64) -> StoreResult<Vec<String>> {
    let keys = KeySet::from_stored(&store.signing_keys().await?).map_err(StoreError::Other)?;
    delete_expired(store, &keys, now(), token_lifetime).await
}

async fn delete_expired(
    store: &Store,
    keys: &KeySet,
    at: i64,
    token_lifetime: i64,
) -> StoreResult<Vec<String>> {
    let mut pruned = Vec::new();
    for (old, state) in keys.states(at, token_lifetime) {
        if state == KeyState::Expired && store.delete_signing_key(&old.kid).await? {
            pruned.push(old.kid.clone());
        }
    }
    Ok(pruned)
}

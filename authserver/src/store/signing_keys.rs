//! The keys that sign JWT access tokens, shared by every replica (cold path: read through
//! [`crate::jwt::KeyRing`]'s cache).

use super::{Store, StoreResult};
use sqlx::Row;

/// One row of `signing_keys`. The private key is PKCS#8 DER, base64; never shown or logged.
#[derive(Clone)]
pub struct StoredSigningKey {
    /// RFC 7638 thumbprint of the public key: the `kid` of the JWKS and of token headers.
    pub kid: String,
    /// 1 for the first key, one more for each rotation (unique: two rotations cannot both win).
    pub generation: i64,
    /// The JWS `alg`, `EdDSA`.
    pub algorithm: String,
    pub private_key: String,
    /// The raw public key, base64url (the JWK's `x`).
    pub public_key: String,
    pub created_at: i64,
    /// When it starts signing (Unix seconds); it is published from its creation.
    pub signs_from: i64,
}

impl std::fmt::Debug for StoredSigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredSigningKey")
            .field("kid", &self.kid)
            .field("generation", &self.generation)
            .field("algorithm", &self.algorithm)
            .field("created_at", &self.created_at)
            .field("signs_from", &self.signs_from)
            .finish_non_exhaustive()
    }
}

fn from_row(row: &sqlx::any::AnyRow) -> StoreResult<StoredSigningKey> {
    Ok(StoredSigningKey {
        kid: row.try_get("kid")?,
        generation: row.try_get("generation")?,
        algorithm: row.try_get("algorithm")?,
        private_key: row.try_get("private_key")?,
        public_key: row.try_get("public_key")?,
        created_at: row.try_get("created_at")?,
        signs_from: row.try_get("signs_from")?,
    })
}

impl Store {
    /// Every signing key, oldest generation first.
    pub async fn signing_keys(&self) -> StoreResult<Vec<StoredSigningKey>> {
        let rows = sqlx::query(
            "SELECT kid, generation, algorithm, private_key, public_key, created_at, signs_from
             FROM signing_keys ORDER BY generation",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(from_row).collect()
    }

    /// Adds a key; false when its generation (or kid) is taken already, by another replica or
    /// another rotation that got there first.
    pub async fn add_signing_key(&self, key: &StoredSigningKey) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let done = sqlx::query(
            "INSERT INTO signing_keys (kid, generation, algorithm, private_key, public_key, created_at, signs_from)
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
        )
        .bind(&key.kid)
        .bind(key.generation)
        .bind(&key.algorithm)
        .bind(&key.private_key)
        .bind(&key.public_key)
        .bind(key.created_at)
        .bind(key.signs_from)
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Deletes a key (its private half included); false when there was none.
    pub async fn delete_signing_key(&self, kid: &str) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let done = sqlx::query("DELETE FROM signing_keys WHERE kid = $1")
            .bind(kid)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected() == 1)
    }
}

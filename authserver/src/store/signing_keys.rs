//! The keys that sign JWT access tokens, shared by every replica (cold path: read through
//! [`crate::jwt::KeyRing`]'s cache), their private halves encrypted at rest under the
//! key-encryption keys of [`crate::key_encryption`]: sealed here on the way in, opened on the
//! way out, so nothing above this module sees a sealed key and the database never holds one in
//! the clear.

use super::{Store, StoreError, StoreResult};
use crate::key_encryption::{KeyEncryption, OpenError, SECRETS_FILE_VAR, SECRETS_VAR};
use sqlx::Row;
use std::sync::Arc;

/// One signing key. The private key is PKCS#8 DER, base64 (in memory only: the row holds it
/// sealed); never shown or logged.
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

/// What the database holds of a key: its columns, the private key as stored.
struct SealedRow {
    key: StoredSigningKey,
    /// The key-encryption key the private key is sealed with; `None` when stored in the clear
    /// (before encryption at rest).
    kek_id: Option<String>,
}

fn from_row(row: &sqlx::any::AnyRow) -> StoreResult<SealedRow> {
    Ok(SealedRow {
        key: StoredSigningKey {
            kid: row.try_get("kid")?,
            generation: row.try_get("generation")?,
            algorithm: row.try_get("algorithm")?,
            private_key: row.try_get("private_key")?,
            public_key: row.try_get("public_key")?,
            created_at: row.try_get("created_at")?,
            signs_from: row.try_get("signs_from")?,
        },
        kek_id: row.try_get("kek_id")?,
    })
}

/// The error of a store that has no key-encryption key when a signing key is stored or read.
fn no_key_encryption(doing: &str) -> StoreError {
    StoreError::Other(anyhow::anyhow!(
        "cannot {doing} the JWT signing keys: they are encrypted at rest with a key-encryption key, and none is set (set {SECRETS_VAR} or {SECRETS_FILE_VAR})"
    ))
}

impl SealedRow {
    /// The key with its private half opened with `kek`.
    fn open(self, kek: &KeyEncryption) -> StoreResult<StoredSigningKey> {
        let SealedRow { mut key, kek_id } = self;
        let kid = &key.kid;
        let Some(kek_id) = kek_id else {
            return Err(anyhow::anyhow!(
                "signing key {kid} is stored unencrypted: restart the authorization server with {} to encrypt it",
                kek.origin()
            )
            .into());
        };
        let pkcs8 = kek
            .open(kid, &kek_id, &key.private_key)
            .map_err(|error| match error {
                OpenError::UnknownKek => anyhow::anyhow!(
                    "signing key {kid} is encrypted with key-encryption key {kek_id}, which no secret of {} gives (they give {}): a wrong secret, or the one it was encrypted with is missing from the list",
                    kek.origin(),
                    kek.ids().join(", ")
                ),
                OpenError::Altered => anyhow::anyhow!(
                    "signing key {kid} does not decrypt with key-encryption key {kek_id} of {}: the row was altered",
                    kek.origin()
                ),
            })?;
        use base64::Engine;
        key.private_key = base64::engine::general_purpose::STANDARD.encode(pkcs8);
        Ok(key)
    }
}

const COLUMNS: &str =
    "kid, generation, algorithm, private_key, public_key, created_at, signs_from, kek_id";

impl Store {
    /// Every signing key, oldest generation first, opened with the key-encryption key.
    pub async fn signing_keys(&self) -> StoreResult<Vec<StoredSigningKey>> {
        let rows = self.signing_key_rows().await?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let kek = self
            .key_encryption
            .get()
            .ok_or_else(|| no_key_encryption("read"))?;
        rows.into_iter().map(|row| row.open(kek)).collect()
    }

    async fn signing_key_rows(&self) -> StoreResult<Vec<SealedRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM signing_keys ORDER BY generation"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(from_row).collect()
    }

    /// Whether the store has key-encryption keys, so signing keys can be stored.
    pub fn has_key_encryption(&self) -> bool {
        self.key_encryption.get().is_some()
    }

    /// Whether any signing key is stored (readable or not).
    pub async fn has_signing_keys(&self) -> StoreResult<bool> {
        Ok(!self.signing_key_rows().await?.is_empty())
    }

    /// Gives the store the key-encryption keys (once; `serve` and every command do it at start
    /// when they are configured), seals the keys stored in the clear before encryption at rest
    /// under the current one, and checks that every key opens: a wrong or missing secret is an
    /// error here, not at the first token. Returns how many keys were sealed.
    pub async fn use_key_encryption(&self, kek: Arc<KeyEncryption>) -> StoreResult<u64> {
        if self.key_encryption.set(kek.clone()).is_err()
            && self.key_encryption.get().map(|k| k.ids()) != Some(kek.ids())
        {
            return Err(anyhow::anyhow!("the store has other key-encryption keys already").into());
        }
        let mut sealed = 0;
        for row in self.signing_key_rows().await? {
            if row.kek_id.is_some() {
                continue;
            }
            let kid = &row.key.kid;
            if self
                .seal_row(&kek, kid, &row.key.private_key, &row.key.private_key)
                .await?
            {
                tracing::warn!(%kid, "encrypted a signing key stored in the clear (rotate the keys if the database may have been read)");
                sealed += 1;
            }
        }
        self.signing_keys().await?;
        Ok(sealed)
    }

    /// Seals every signing key under the current key-encryption key (after a new secret was put
    /// first in the list); returns how many keys changed.
    pub async fn reencrypt_signing_keys(&self) -> StoreResult<u64> {
        let kek = self
            .key_encryption
            .get()
            .ok_or_else(|| no_key_encryption("re-encrypt"))?
            .clone();
        let mut changed = 0;
        for row in self.signing_key_rows().await? {
            if row.kek_id.as_deref() == Some(kek.current_id()) {
                continue;
            }
            let stored = row.key.private_key.clone();
            let opened = row.open(&kek)?;
            if self
                .seal_row(&kek, &opened.kid, &stored, &opened.private_key)
                .await?
            {
                changed += 1;
            }
        }
        Ok(changed)
    }

    /// Replaces the private key of `kid`, stored as `stored`, by `private_key` (base64 PKCS#8)
    /// sealed under the current key-encryption key, unless another process changed the row
    /// meanwhile.
    async fn seal_row(
        &self,
        kek: &KeyEncryption,
        kid: &str,
        stored: &str,
        private_key: &str,
    ) -> StoreResult<bool> {
        let (kek_id, sealed) = seal(kek, kid, private_key)?;
        let _exclusive = self.exclusive().await?;
        let done = sqlx::query(
            "UPDATE signing_keys SET private_key = $1, kek_id = $2
             WHERE kid = $3 AND private_key = $4",
        )
        .bind(&sealed)
        .bind(&kek_id)
        .bind(kid)
        .bind(stored)
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Adds a key; false when its generation (or kid) is taken already, by another replica or
    /// another rotation that got there first.
    /// The private key is sealed under the current key-encryption key.
    pub async fn add_signing_key(&self, key: &StoredSigningKey) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        let added = self.insert_signing_key(&mut tx, key).await?;
        tx.commit().await?;
        Ok(added)
    }

    /// Whether the store can keep signing keys: an error naming the settings that give it the
    /// key-encryption keys when it cannot.
    pub fn can_store_signing_keys(&self) -> StoreResult<()> {
        self.key_encryption
            .get()
            .map(|_| ())
            .ok_or_else(|| no_key_encryption("store"))
    }

    /// [`Store::add_signing_key`] inside the transaction `tx` (an application's registration
    /// adds the keys it needs with it: [`Store::register`]).
    pub(super) async fn insert_signing_key(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        key: &StoredSigningKey,
    ) -> StoreResult<bool> {
        let kek = self
            .key_encryption
            .get()
            .ok_or_else(|| no_key_encryption("store"))?;
        let (kek_id, sealed) = seal(kek, &key.kid, &key.private_key)?;
        let done = sqlx::query(&format!(
            "INSERT INTO signing_keys ({COLUMNS})
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING"
        ))
        .bind(&key.kid)
        .bind(key.generation)
        .bind(&key.algorithm)
        .bind(&sealed)
        .bind(&key.public_key)
        .bind(key.created_at)
        .bind(key.signs_from)
        .bind(&kek_id)
        .execute(&mut **tx)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Deletes a key (its private half included); false when there was none.
    pub async fn delete_signing_key(&self, kid: &str) -> StoreResult<bool> {
        let exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        let done = sqlx::query("DELETE FROM signing_keys WHERE kid = $1")
            .bind(kid)
            .execute(&mut *tx)
            .await?;
        let deleted = done.rows_affected() == 1;
        let event = super::Revocation::SigningKey {
            kid: kid.to_owned(),
        };
        let appended = match deleted {
            true => Some(self.append_event(&mut tx, &event).await?),
            false => None,
        };
        tx.commit().await?;
        drop(exclusive);
        if let Some(appended) = &appended {
            self.changed(appended);
        }
        Ok(deleted)
    }
}

/// `private_key` (base64 PKCS#8) sealed for the row `kid`: (KEK id, sealed text).
fn seal(kek: &KeyEncryption, kid: &str, private_key: &str) -> StoreResult<(String, String)> {
    use base64::Engine;
    let pkcs8 = base64::engine::general_purpose::STANDARD
        .decode(private_key)
        .map_err(|_| anyhow::anyhow!("signing key {kid}: the private key is not base64"))?;
    Ok(kek.seal(kid, &pkcs8)?)
}

//! Passkeys (issue 41 item 2): each user's WebAuthn credentials (named, several per user, their
//! signature counters kept), and the challenges of ceremonies under way (the SHA-256 of each,
//! single use, bound to what started it, expiring). The checks of the ceremonies themselves are
//! [`crate::protocol::webauthn`]'s.

use super::{Store, StoreResult, now};
use crate::protocol::webauthn;
use crate::secrets;
use sqlx::Row;

/// A passkey as its user's page lists it.
pub struct PasskeyListed {
    /// base64url, as WebAuthn's JSON carries it.
    pub credential_id: String,
    pub name: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
}

/// A passkey as a sign-in checks it.
pub struct StoredPasskey {
    pub user_id: i64,
    /// The COSE public key.
    pub public_key: Vec<u8>,
    pub sign_count: u32,
}

/// A passkey a registration verified, to store.
pub struct NewPasskey<'a> {
    pub credential: &'a webauthn::NewCredential,
    pub name: &'a str,
}

/// What a ceremony's challenge was issued for: it is taken back only for the same purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengePurpose {
    /// Registering a passkey, bound to the signed-in session.
    Register,
    /// The second step of a sign-in whose password was right, bound to its pending sign-in.
    SecondFactor,
    /// A sign-in without password, bound to the sign-in page's pre-session cookie.
    Passwordless,
}

impl ChallengePurpose {
    fn label(self) -> &'static str {
        match self {
            ChallengePurpose::Register => "register",
            ChallengePurpose::SecondFactor => "second-factor",
            ChallengePurpose::Passwordless => "passwordless",
        }
    }
}

impl Store {
    /// `user_id`'s passkeys, oldest first.
    pub async fn passkeys_of(&self, user_id: i64) -> StoreResult<Vec<PasskeyListed>> {
        let rows = sqlx::query(
            "SELECT credential_id, name, created_at, last_used_at FROM passkeys
             WHERE user_id = $1 ORDER BY created_at, credential_id",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(PasskeyListed {
                    credential_id: row.try_get("credential_id")?,
                    name: row.try_get("name")?,
                    created_at: row.try_get("created_at")?,
                    last_used_at: row.try_get("last_used_at")?,
                })
            })
            .collect()
    }

    /// The passkey whose credential id is `credential_id` (raw bytes), whoever's it is.
    pub async fn passkey(&self, credential_id: &[u8]) -> StoreResult<Option<StoredPasskey>> {
        let row = sqlx::query(
            "SELECT user_id, public_key, sign_count FROM passkeys WHERE credential_id = $1",
        )
        .bind(webauthn::encode(credential_id))
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let key: String = row.try_get("public_key")?;
        let count: i64 = row.try_get("sign_count")?;
        Ok(Some(StoredPasskey {
            user_id: row.try_get("user_id")?,
            public_key: webauthn::decode(&key, webauthn::MAX_ATTESTATION_OBJECT)
                .map_err(|_| anyhow::anyhow!("a stored passkey's key is not base64url"))?,
            sign_count: u32::try_from(count).unwrap_or(u32::MAX),
        }))
    }

    /// Stores `passkey` as `user_id`'s; false (nothing stored) when its credential id is
    /// registered already, to this user or another.
    pub async fn add_passkey(&self, user_id: i64, passkey: &NewPasskey<'_>) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let done = sqlx::query(
            "INSERT INTO passkeys
                 (credential_id, user_id, public_key, algorithm, sign_count, name, created_at, last_used_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, NULL)
             ON CONFLICT (credential_id) DO NOTHING",
        )
        .bind(webauthn::encode(&passkey.credential.credential_id))
        .bind(user_id)
        .bind(webauthn::encode(&passkey.credential.public_key))
        .bind(passkey.credential.algorithm)
        .bind(i64::from(passkey.credential.sign_count))
        .bind(passkey.name)
        .bind(now())
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Records a verified assertion of `user_id`'s passkey `credential_id`: its counter is now
    /// `sign_count`, if that still moves on from the stored one
    /// ([`webauthn::counter_moved_on`], checked again here so that two requests presenting the
    /// same assertion cannot both pass); true for the one that records it.
    pub async fn use_passkey(
        &self,
        user_id: i64,
        credential_id: &[u8],
        sign_count: u32,
    ) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let count = i64::from(sign_count);
        let done = sqlx::query(
            "UPDATE passkeys SET sign_count = $3, last_used_at = $4
             WHERE credential_id = $1 AND user_id = $2
               AND ((sign_count = 0 AND $3 = 0) OR sign_count < $3)",
        )
        .bind(webauthn::encode(credential_id))
        .bind(user_id)
        .bind(count)
        .bind(now())
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Whether `user_id` has a passkey.
    pub async fn has_passkey(&self, user_id: i64) -> StoreResult<bool> {
        let found: Option<i64> = sqlx::query_scalar("SELECT 1 FROM passkeys WHERE user_id = $1")
            .bind(user_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(found.is_some())
    }

    /// The credential ids (raw bytes) of `user_id`'s passkeys: a sign-in's `allowCredentials`,
    /// a registration's `excludeCredentials`.
    pub async fn passkey_ids(&self, user_id: i64) -> StoreResult<Vec<Vec<u8>>> {
        let ids: Vec<String> =
            sqlx::query_scalar("SELECT credential_id FROM passkeys WHERE user_id = $1")
                .bind(user_id)
                .fetch_all(&self.pool)
                .await?;
        Ok(ids
            .iter()
            .filter_map(|id| webauthn::decode(id, webauthn::MAX_CREDENTIAL_ID).ok())
            .collect())
    }

    /// A new challenge for `purpose`, bound to `binding` (a secret of the session, pending
    /// sign-in or sign-in page that asked: the store keeps its digest) and to `user_id` when the
    /// user is known, valid `lifetime` seconds: its base64url (of [`webauthn::CHALLENGE_BYTES`]), as sent to the browser. Forgets
    /// expired ones.
    pub async fn start_passkey_challenge(
        &self,
        purpose: ChallengePurpose,
        binding: &str,
        user_id: Option<i64>,
        lifetime: i64,
    ) -> StoreResult<String> {
        let challenge = secrets::random_token();
        let now = now();
        let _exclusive = self.exclusive().await?;
        sqlx::query("DELETE FROM passkey_challenges WHERE expires_at <= $1")
            .bind(now)
            .execute(&self.writer)
            .await?;
        sqlx::query(
            "INSERT INTO passkey_challenges (digest, purpose, binding, user_id, expires_at)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(secrets::digest(&challenge))
        .bind(purpose.label())
        .bind(secrets::digest(binding))
        .bind(user_id)
        .bind(now + lifetime)
        .execute(&self.writer)
        .await?;
        Ok(challenge)
    }

    /// Takes back `challenge` (base64url, from the client data) issued for `purpose` and bound
    /// to `binding`: `Some(user)` (the user it was issued for, if any) once, for the one request
    /// that takes it before it expires; `None` for an unknown, used, expired or other-bound one.
    pub async fn take_passkey_challenge(
        &self,
        challenge: &str,
        purpose: ChallengePurpose,
        binding: &str,
    ) -> StoreResult<Option<Option<i64>>> {
        let digest = secrets::digest(challenge);
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        let row = sqlx::query(
            "SELECT user_id, expires_at FROM passkey_challenges
             WHERE digest = $1 AND purpose = $2 AND binding = $3",
        )
        .bind(&digest)
        .bind(purpose.label())
        .bind(secrets::digest(binding))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let done = sqlx::query("DELETE FROM passkey_challenges WHERE digest = $1")
            .bind(&digest)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        let expires_at: i64 = row.try_get("expires_at")?;
        if done.rows_affected() != 1 || expires_at <= now() {
            return Ok(None);
        }
        Ok(Some(row.try_get("user_id")?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::NewUser;
    use crate::testing::all_stores;

    async fn user(store: &Store, name: &str) -> i64 {
        store
            .create_user(&NewUser {
                username: name.into(),
                password: Some("pw-0123456789".into()),
                is_active: true,
                ..NewUser::default()
            })
            .await
            .unwrap()
            .id
    }

    fn credential(id: &[u8], count: u32) -> webauthn::NewCredential {
        webauthn::NewCredential {
            credential_id: id.to_vec(),
            public_key: vec![0xa1, 0x01, 0x02],
            algorithm: -7,
            sign_count: count,
            user_verified: true,
        }
    }

    #[tokio::test]
    async fn passkeys_are_unique_counted_and_reset_with_the_other_factors() {
        for store in all_stores().await {
            let alice = user(&store, "passkey-alice").await;
            let bob = user(&store, "passkey-bob").await;
            assert!(!store.has_second_factor(alice).await.unwrap());
            let first = credential(b"cred-1", 3);
            let new = NewPasskey {
                credential: &first,
                name: "Laptop",
            };
            assert!(store.add_passkey(alice, &new).await.unwrap());
            // The same credential id again, for alice or for bob: refused.
            assert!(!store.add_passkey(alice, &new).await.unwrap());
            assert!(!store.add_passkey(bob, &new).await.unwrap());
            assert!(store.has_second_factor(alice).await.unwrap());
            assert!(!store.has_second_factor(bob).await.unwrap());
            let stored = store.passkey(b"cred-1").await.unwrap().unwrap();
            assert_eq!((stored.user_id, stored.sign_count), (alice, 3));
            assert_eq!(stored.public_key, first.public_key);
            // Only its owner's sign-in moves its counter, and only forward.
            assert!(!store.use_passkey(bob, b"cred-1", 4).await.unwrap());
            assert!(!store.use_passkey(alice, b"cred-1", 3).await.unwrap());
            assert!(!store.use_passkey(alice, b"cred-1", 0).await.unwrap());
            assert!(store.use_passkey(alice, b"cred-1", 4).await.unwrap());
            assert!(!store.use_passkey(alice, b"cred-1", 4).await.unwrap());
            let listed = store.passkeys_of(alice).await.unwrap();
            assert_eq!(listed.len(), 1);
            assert_eq!(listed[0].name, "Laptop");
            assert!(listed[0].last_used_at.is_some());
            // A passkey that never counts: zero after zero passes.
            let synced = credential(b"cred-2", 0);
            let new = NewPasskey {
                credential: &synced,
                name: "Phone",
            };
            assert!(store.add_passkey(alice, &new).await.unwrap());
            assert!(store.use_passkey(alice, b"cred-2", 0).await.unwrap());
            assert!(store.use_passkey(alice, b"cred-2", 0).await.unwrap());
            assert_eq!(store.passkey_ids(alice).await.unwrap().len(), 2);
            // Removing one keeps the other; removing the last one leaves no factor.
            assert!(!store.remove_passkey(bob, b"cred-1").await.unwrap());
            assert!(store.remove_passkey(alice, b"cred-1").await.unwrap());
            assert!(store.has_second_factor(alice).await.unwrap());
            let pending = store.start_pending_sign_in(alice, 60).await.unwrap();
            assert!(store.remove_passkey(alice, b"cred-2").await.unwrap());
            assert!(!store.has_second_factor(alice).await.unwrap());
            assert!(store.pending_sign_in(&pending).await.unwrap().is_none());
            // An operator's reset takes passkeys along.
            assert!(store.add_passkey(alice, &new).await.unwrap());
            assert!(
                store
                    .reset_second_factors_and_sign_out(alice)
                    .await
                    .unwrap()
            );
            assert!(store.passkeys_of(alice).await.unwrap().is_empty());
            assert!(!store.has_second_factor(alice).await.unwrap());
        }
    }

    #[tokio::test]
    async fn challenges_are_single_use_bound_and_of_one_purpose() {
        for store in all_stores().await {
            let alice = user(&store, "challenge-alice").await;
            let purpose = ChallengePurpose::SecondFactor;
            let challenge = store
                .start_passkey_challenge(purpose, "pending-a", Some(alice), 60)
                .await
                .unwrap();
            // Another binding, another purpose: refused, and the challenge stays.
            assert_eq!(
                store
                    .take_passkey_challenge(&challenge, purpose, "pending-b")
                    .await
                    .unwrap(),
                None
            );
            assert_eq!(
                store
                    .take_passkey_challenge(&challenge, ChallengePurpose::Passwordless, "pending-a")
                    .await
                    .unwrap(),
                None
            );
            assert_eq!(
                store
                    .take_passkey_challenge(&challenge, purpose, "pending-a")
                    .await
                    .unwrap(),
                Some(Some(alice))
            );
            // Replayed.
            assert_eq!(
                store
                    .take_passkey_challenge(&challenge, purpose, "pending-a")
                    .await
                    .unwrap(),
                None
            );
            // Expired.
            let old = store
                .start_passkey_challenge(ChallengePurpose::Passwordless, "page", None, -1)
                .await
                .unwrap();
            assert_eq!(
                store
                    .take_passkey_challenge(&old, ChallengePurpose::Passwordless, "page")
                    .await
                    .unwrap(),
                None
            );
        }
    }
}

//! Second factors (issue 41): each user's TOTP secret (sealed under the key-encryption key when
//! the server has one), the last step it accepted, their recovery codes (SHA-256 digests, each
//! spent once), the sign-ins that wait for a second factor, and the removal of factors (one by its
//! user; all of them by an operator). The passkeys themselves: [`super::passkeys`].

use super::Revocation;
use super::tokens::revoke_user_families;
use super::{Store, StoreResult, User, now};
use crate::secrets;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sqlx::Row;

/// A user's TOTP factor as stored. No `Debug`: the secret must not reach a log line.
pub struct TotpFactor {
    pub secret: Vec<u8>,
    /// Confirmed by a first code: asked at every sign-in from then on.
    pub confirmed: bool,
    /// The last step accepted (a code of that step or an earlier one is refused).
    pub last_step: i64,
}

/// The associated data a user's sealed secret is bound to: a secret copied to another user's row
/// does not open.
fn context(user_id: i64) -> Vec<u8> {
    format!("tokengate totp user={user_id}").into_bytes()
}

/// Replaces `user_id`'s recovery codes with the digests of `recovery_codes`, in `tx`.
async fn store_recovery_codes(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    user_id: i64,
    recovery_codes: &[String],
) -> StoreResult<()> {
    sqlx::query("DELETE FROM recovery_codes WHERE user_id = $1")
        .bind(user_id)
        .execute(&mut **tx)
        .await?;
    for code in recovery_codes {
        sqlx::query("INSERT INTO recovery_codes (user_id, digest, used_at) VALUES ($1, $2, NULL)")
            .bind(user_id)
            .bind(secrets::digest(code))
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

impl Store {
    /// `user_id`'s TOTP factor, confirmed or still being enrolled.
    pub async fn totp_factor(&self, user_id: i64) -> StoreResult<Option<TotpFactor>> {
        let row = sqlx::query(
            "SELECT secret, kek_id, confirmed_at, last_step FROM totp_factors WHERE user_id = $1",
        )
        .bind(user_id)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let stored: String = row.try_get("secret")?;
        let kek_id: Option<String> = row.try_get("kek_id")?;
        let secret = match kek_id {
            Some(kek_id) => {
                let kek = self.key_encryption.get().ok_or_else(|| {
                    anyhow::anyhow!(
                        "a TOTP secret is sealed but no key-encryption secret is configured"
                    )
                })?;
                kek.open_bound(&context(user_id), &kek_id, &stored)
                    .map_err(|why| anyhow::anyhow!("a TOTP secret does not open: {why:?}"))?
            }
            None => STANDARD
                .decode(&stored)
                .map_err(|_| anyhow::anyhow!("a stored TOTP secret is not base64"))?,
        };
        let confirmed_at: Option<i64> = row.try_get("confirmed_at")?;
        Ok(Some(TotpFactor {
            secret,
            confirmed: confirmed_at.is_some(),
            last_step: row.try_get("last_step")?,
        }))
    }

    /// Whether `user_id` signs in with a second factor: a confirmed TOTP factor or a passkey.
    pub async fn has_second_factor(&self, user_id: i64) -> StoreResult<bool> {
        Ok(self.has_totp(user_id).await? || self.has_passkey(user_id).await?)
    }

    /// Whether `user_id` has a confirmed TOTP factor.
    pub async fn has_totp(&self, user_id: i64) -> StoreResult<bool> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM totp_factors WHERE user_id = $1 AND confirmed_at IS NOT NULL",
        )
        .bind(user_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(found.is_some())
    }

    /// Stores `secret` as `user_id`'s factor being enrolled; false (nothing changed) when the user
    /// has a factor already, confirmed or being enrolled (two first visits at once keep one).
    pub async fn start_totp_enrolment(&self, user_id: i64, secret: &[u8]) -> StoreResult<bool> {
        let (kek_id, sealed) = match self.key_encryption.get() {
            Some(kek) => {
                let (id, sealed) = kek.seal_bound(&context(user_id), secret)?;
                (Some(id), sealed)
            }
            None => (None, STANDARD.encode(secret)),
        };
        let _exclusive = self.exclusive().await?;
        let done = sqlx::query(
            "INSERT INTO totp_factors (user_id, secret, kek_id, confirmed_at, last_step, created_at)
             VALUES ($1, $2, $3, NULL, 0, $4)
             ON CONFLICT (user_id) DO NOTHING",
        )
        .bind(user_id)
        .bind(sealed)
        .bind(kek_id)
        .bind(now())
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Confirms `user_id`'s factor being enrolled with the step of its first code, and stores the
    /// digests of their new recovery codes (replacing any); false when there was none to confirm.
    pub async fn confirm_totp(
        &self,
        user_id: i64,
        step: i64,
        recovery_codes: &[String],
    ) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        let done = sqlx::query(
            "UPDATE totp_factors SET confirmed_at = $2, last_step = $3
             WHERE user_id = $1 AND confirmed_at IS NULL",
        )
        .bind(user_id)
        .bind(now())
        .bind(step)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Ok(false);
        }
        store_recovery_codes(&mut tx, user_id, recovery_codes).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Replaces `user_id`'s recovery codes with the digests of `recovery_codes` (normalized):
    /// the old ones, used or not, stop working.
    pub async fn replace_recovery_codes(
        &self,
        user_id: i64,
        recovery_codes: &[String],
    ) -> StoreResult<()> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        store_recovery_codes(&mut tx, user_id, recovery_codes).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Takes `step` as the last one `user_id`'s confirmed factor accepted, if it is later than the
    /// last: true for exactly one of several requests presenting the same code.
    pub async fn use_totp_step(&self, user_id: i64, step: i64) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let done = sqlx::query(
            "UPDATE totp_factors SET last_step = $2
             WHERE user_id = $1 AND last_step < $2 AND confirmed_at IS NOT NULL",
        )
        .bind(user_id)
        .bind(step)
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Spends the unused recovery code `code` (normalized) of `user_id`: true once.
    pub async fn use_recovery_code(&self, user_id: i64, code: &str) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let done = sqlx::query(
            "UPDATE recovery_codes SET used_at = $3
             WHERE user_id = $1 AND digest = $2 AND used_at IS NULL",
        )
        .bind(user_id)
        .bind(secrets::digest(code))
        .bind(now())
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// How many of `user_id`'s recovery codes are still unused.
    pub async fn recovery_codes_left(&self, user_id: i64) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM recovery_codes WHERE user_id = $1 AND used_at IS NULL",
        )
        .bind(user_id)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Removes `user_id`'s TOTP factor, by its user ([`Self::remove_factor`]); whether they had
    /// one.
    pub async fn remove_totp(&self, user_id: i64) -> StoreResult<bool> {
        self.remove_factor(user_id, None).await
    }

    /// Removes `user_id`'s passkey `credential_id` (raw bytes), by its user
    /// ([`Self::remove_factor`]); false when they have no such passkey.
    pub async fn remove_passkey(&self, user_id: i64, credential_id: &[u8]) -> StoreResult<bool> {
        self.remove_factor(user_id, Some(credential_id)).await
    }

    /// Removes one of `user_id`'s factors (their TOTP factor for `None`, else that passkey); when
    /// it was the last, their recovery codes and sign-ins waiting for a factor go with it, in the
    /// same transaction. Whether there was such a factor.
    async fn remove_factor(&self, user_id: i64, passkey: Option<&[u8]>) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        let done = match passkey {
            None => {
                sqlx::query("DELETE FROM totp_factors WHERE user_id = $1")
                    .bind(user_id)
                    .execute(&mut *tx)
                    .await?
            }
            Some(id) => {
                sqlx::query("DELETE FROM passkeys WHERE user_id = $1 AND credential_id = $2")
                    .bind(user_id)
                    .bind(crate::protocol::webauthn::encode(id))
                    .execute(&mut *tx)
                    .await?
            }
        };
        let left: i64 = sqlx::query_scalar(
            "SELECT (SELECT COUNT(*) FROM totp_factors WHERE user_id = $1 AND confirmed_at IS NOT NULL)
                  + (SELECT COUNT(*) FROM passkeys WHERE user_id = $1)",
        )
        .bind(user_id)
        .fetch_one(&mut *tx)
        .await?;
        if left == 0 {
            for table in ["recovery_codes", "pending_sign_ins"] {
                sqlx::query(&format!("DELETE FROM {table} WHERE user_id = $1"))
                    .bind(user_id)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    /// An operator's reset of `user_id`'s second factors (TOTP, passkeys and recovery codes;
    /// lost or exposed): with them, in the same transaction, every session and token of the user
    /// ends, and the revocation stream carries a `session-revoked` event for the user; whether
    /// they had a factor.
    pub async fn reset_second_factors_and_sign_out(&self, user_id: i64) -> StoreResult<bool> {
        let exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        let mut had = 0;
        for table in ["totp_factors", "passkeys"] {
            let done = sqlx::query(&format!("DELETE FROM {table} WHERE user_id = $1"))
                .bind(user_id)
                .execute(&mut *tx)
                .await?;
            had += done.rows_affected();
        }
        for table in [
            "recovery_codes",
            "pending_sign_ins",
            "passkey_challenges",
            "sessions",
        ] {
            sqlx::query(&format!("DELETE FROM {table} WHERE user_id = $1"))
                .bind(user_id)
                .execute(&mut *tx)
                .await?;
        }
        let event = Revocation::User {
            sub: user_id.to_string(),
        };
        revoke_user_families(&mut tx, user_id, None).await?;
        let appended = self.append_event(&mut tx, &event).await?;
        tx.commit().await?;
        drop(exclusive);
        self.changed(&appended);
        Ok(had > 0)
    }

    /// A sign-in of `user_id` whose password was right, waiting `lifetime` seconds for its second
    /// factor: the cookie value that names it (the store keeps its digest). Forgets expired ones.
    pub async fn start_pending_sign_in(&self, user_id: i64, lifetime: i64) -> StoreResult<String> {
        let token = secrets::random_token();
        let now = now();
        let _exclusive = self.exclusive().await?;
        sqlx::query("DELETE FROM pending_sign_ins WHERE expires_at <= $1")
            .bind(now)
            .execute(&self.writer)
            .await?;
        sqlx::query(
            "INSERT INTO pending_sign_ins (digest, user_id, created_at, expires_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(secrets::digest(&token))
        .bind(user_id)
        .bind(now)
        .bind(now + lifetime)
        .execute(&self.writer)
        .await?;
        Ok(token)
    }

    /// The user of the unexpired pending sign-in named by `token`.
    pub async fn pending_sign_in(&self, token: &str) -> StoreResult<Option<User>> {
        let user_id: Option<i64> = sqlx::query_scalar(
            "SELECT user_id FROM pending_sign_ins WHERE digest = $1 AND expires_at > $2",
        )
        .bind(secrets::digest(token))
        .bind(now())
        .fetch_optional(&self.pool)
        .await?;
        match user_id {
            Some(id) => self.get_user(id).await,
            None => Ok(None),
        }
    }

    /// Ends the pending sign-in named by `token`: true for the one request that ends it.
    pub async fn end_pending_sign_in(&self, token: &str) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let done = sqlx::query("DELETE FROM pending_sign_ins WHERE digest = $1")
            .bind(secrets::digest(token))
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected() == 1)
    }
}

#[cfg(test)]
mod tests {
    use crate::protocol::totp;
    use crate::store::NewUser;
    use crate::testing::all_stores;

    async fn user(store: &crate::store::Store, name: &str) -> i64 {
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

    #[tokio::test]
    async fn enrolment_confirmation_replay_and_recovery_codes() {
        for store in all_stores().await {
            let id = user(&store, "totp-user").await;
            assert!(store.totp_factor(id).await.unwrap().is_none());
            let secret = totp::new_secret();
            assert!(store.start_totp_enrolment(id, &secret).await.unwrap());
            // Sealed: the stored text is neither the secret nor its base64.
            let stored: String =
                sqlx::query_scalar("SELECT secret FROM totp_factors WHERE user_id = $1")
                    .bind(id)
                    .fetch_one(store.pool())
                    .await
                    .unwrap();
            assert!(!stored.contains(&totp::base32(&secret)));
            let factor = store.totp_factor(id).await.unwrap().unwrap();
            assert_eq!(factor.secret, secret);
            assert!(!factor.confirmed);
            assert!(!store.has_second_factor(id).await.unwrap());
            let codes = totp::new_recovery_codes();
            let normalized: Vec<String> = codes
                .iter()
                .filter_map(|c| totp::normalize_recovery_code(c))
                .collect();
            assert!(store.confirm_totp(id, 100, &normalized).await.unwrap());
            assert!(store.has_second_factor(id).await.unwrap());
            // Confirmed: enrolment again changes nothing.
            assert!(!store.start_totp_enrolment(id, b"other").await.unwrap());
            assert!(!store.use_totp_step(id, 100).await.unwrap());
            assert!(store.use_totp_step(id, 101).await.unwrap());
            assert!(!store.use_totp_step(id, 101).await.unwrap());
            assert_eq!(store.recovery_codes_left(id).await.unwrap(), 10);
            assert!(store.use_recovery_code(id, &normalized[3]).await.unwrap());
            assert!(!store.use_recovery_code(id, &normalized[3]).await.unwrap());
            assert_eq!(store.recovery_codes_left(id).await.unwrap(), 9);
            // Made anew: the old ones stop working, the new ones work once.
            let fresh: Vec<String> = totp::new_recovery_codes()
                .iter()
                .filter_map(|c| totp::normalize_recovery_code(c))
                .collect();
            store.replace_recovery_codes(id, &fresh).await.unwrap();
            assert_eq!(store.recovery_codes_left(id).await.unwrap(), 10);
            assert!(!store.use_recovery_code(id, &normalized[4]).await.unwrap());
            assert!(store.use_recovery_code(id, &fresh[0]).await.unwrap());
            assert!(!store.use_recovery_code(id, &fresh[0]).await.unwrap());
            let pending = store.start_pending_sign_in(id, 60).await.unwrap();
            assert_eq!(
                store.pending_sign_in(&pending).await.unwrap().unwrap().id,
                id
            );
            assert!(store.remove_totp(id).await.unwrap());
            assert!(store.pending_sign_in(&pending).await.unwrap().is_none());
            assert!(!store.has_second_factor(id).await.unwrap());
            assert_eq!(store.recovery_codes_left(id).await.unwrap(), 0);
        }
    }
}

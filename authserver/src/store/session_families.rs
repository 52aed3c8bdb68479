//! What a browser session led to: the token family of every authorization code issued while it
//! was signed in, so that signing out (RP-initiated logout, the sign-out button) revokes those
//! families, each with its `session-revoked` event on the revocation stream.

use super::{Store, StoreResult, now};
use crate::secrets;

impl Store {
    /// Records that the tokens of `family` come from the session whose digest is
    /// `session_key` ([`super::Session::key`]), in `tx` (the code's own transaction).
    pub(super) async fn record_session_family(
        tx: &mut sqlx::AnyConnection,
        session_key: &str,
        family: &str,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO session_families (session_digest, family, created_at) VALUES ($1, $2, $3)
             ON CONFLICT DO NOTHING",
        )
        .bind(session_key)
        .bind(family)
        .bind(now())
        .execute(&mut *tx)
        .await?;
        Ok(())
    }

    /// Ends the session whose cookie value is `session_id` and revokes the token family of
    /// every code issued in it ([`Store::revoke_family`]: each with its event, in its own
    /// transaction). The families are read before the session ends (the purge leaves a live
    /// session's alone) and after (a code issued meanwhile; the purge spares rows younger than
    /// [`super::purge::TOKEN_GRACE`]). How many families this revoked (families revoked before
    /// are not counted again).
    pub async fn sign_out(&self, session_id: &str) -> StoreResult<u64> {
        let digest = secrets::digest(session_id);
        let mut families = self.session_families(&digest).await?;
        self.delete_session(session_id).await?;
        families.extend(self.session_families(&digest).await?);
        families.sort_unstable();
        families.dedup();
        let mut revoked = 0;
        for family in &families {
            if self.revoke_family(family).await? {
                revoked += 1;
            }
        }
        let _exclusive = self.exclusive().await?;
        sqlx::query("DELETE FROM session_families WHERE session_digest = $1")
            .bind(&digest)
            .execute(&self.writer)
            .await?;
        Ok(revoked)
    }

    async fn session_families(&self, digest: &str) -> StoreResult<Vec<String>> {
        Ok(
            sqlx::query_scalar("SELECT family FROM session_families WHERE session_digest = $1")
                .bind(digest)
                .fetch_all(&self.writer)
                .await?,
        )
    }

    /// A user who signs in again in the same browser (`prompt=login`, `max_age`) keeps what
    /// the older session led to: its families move to the new session `new_id`, when `old_id`
    /// was a session of the same `user_id`. Then the older session ends.
    pub async fn replace_session(
        &self,
        old_id: &str,
        new_id: &str,
        user_id: i64,
    ) -> StoreResult<()> {
        {
            let _exclusive = self.exclusive().await?;
            sqlx::query(
                "UPDATE session_families SET session_digest = $1 WHERE session_digest = $2
                 AND EXISTS (SELECT 1 FROM sessions WHERE id_digest = $2 AND user_id = $3)",
            )
            .bind(secrets::digest(new_id))
            .bind(secrets::digest(old_id))
            .bind(user_id)
            .execute(&self.writer)
            .await?;
        }
        self.delete_session(old_id).await?;
        Ok(())
    }
}

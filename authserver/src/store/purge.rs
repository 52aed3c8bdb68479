//! Deleting what nothing needs any more (`authserver cleartokens`, and `serve` every
//! `purge_interval`): expired tokens, forgotten authorization codes, revoked families none of
//! whose tokens or codes is left, expired browser sessions and one-time messages never taken. In batches, each a statement of
//! its own under the writer (on SQLite the hot path's writer pauses for one batch at a time, not
//! for the whole backlog).
//!
//! What stays, and why:
//! - a token until [`TOKEN_GRACE`] after its expiry: a spent (rotated) refresh token presented
//!   again revokes its family for as long as its row exists, and a refresh claimed just before
//!   its expiry still issues into its family (which must still be seen if revoked);
//! - a code until a day after its expiry ([`super::codes::KEPT_AFTER_EXPIRY`]), so a late second
//!   use still revokes the tokens issued from it;
//! - a revoked family while any token or code of it is stored (and for [`TOKEN_GRACE`] after its
//!   revocation): those tokens are dead only because the family is listed;
//! - a session until its expiry, and a one-time message ([`super::flash`]) until its own.
//! - a session until its expiry, and the record of the token families begun in it
//!   (`session_families`) while it exists, and for [`TOKEN_GRACE`] after it was made.
//!
//! Previous client secrets are cleared once their grace period has ended.
//!
//! Signing keys are pruned by [`crate::jwt::rotation::prune_expired`].

use super::{Store, StoreResult, now};

/// Rows deleted per statement by [`Store::purge_expired`].
pub const PURGE_BATCH: i64 = 1000;

/// How long a token's row outlives its expiry (seconds): slack for a refresh claimed at the last
/// moment and for replicas' clocks.
pub const TOKEN_GRACE: i64 = 600;

/// What a purge deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Purged {
    pub tokens: u64,
    pub authorization_codes: u64,
    pub revoked_families: u64,
    pub sessions: u64,
    /// One-time messages left untaken past their short life.
    pub flash_messages: u64,
    /// Records of the token families begun in sessions that are gone.
    pub session_families: u64,
    /// Signing keys no longer published (filled in by [`crate::purge`], not by the store).
    pub signing_keys: u64,
    /// Sign-in times of token families with no token left (filled in by [`crate::purge`]).
    pub oidc_families: u64,
    /// Statements run (each deleting at most one batch).
    pub batches: u64,
}

/// The batched deletes, in order: each deletes at most `$2` rows that expired at or before `$1`
/// (the cut-off time of its table).
const STATEMENTS: [(Table, &str); 6] = [
    (
        Table::Tokens,
        "DELETE FROM tokens WHERE id IN (SELECT id FROM tokens WHERE expires_at <= $1 LIMIT $2)",
    ),
    (
        Table::Codes,
        "DELETE FROM authorization_codes WHERE digest IN
         (SELECT digest FROM authorization_codes WHERE expires_at <= $1 LIMIT $2)",
    ),
    // After tokens and codes: a family goes once nothing of it is left.
    (
        Table::Families,
        "DELETE FROM revoked_families WHERE family IN
         (SELECT f.family FROM revoked_families f WHERE f.revoked_at <= $1
          AND NOT EXISTS (SELECT 1 FROM tokens t WHERE t.family = f.family)
          AND NOT EXISTS (SELECT 1 FROM authorization_codes c WHERE c.family = f.family)
          LIMIT $2)",
    ),
    (
        Table::Sessions,
        "DELETE FROM sessions WHERE id_digest IN
         (SELECT id_digest FROM sessions WHERE expires_at <= $1 LIMIT $2)",
    ),
    (
        Table::FlashMessages,
        "DELETE FROM flash_messages WHERE id_digest IN
         (SELECT id_digest FROM flash_messages WHERE expires_at <= $1 LIMIT $2)",
    ),
    // After sessions: the families of at most `$2` sessions that are gone.
    (
        Table::SessionFamilies,
        "DELETE FROM session_families WHERE created_at <= $1 AND session_digest IN
         (SELECT f.session_digest FROM session_families f WHERE f.created_at <= $1
          AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id_digest = f.session_digest)
          LIMIT $2)",
    ),
];

#[derive(Debug, Clone, Copy)]
enum Table {
    Tokens,
    Codes,
    Families,
    Sessions,
    FlashMessages,
    SessionFamilies,
}

impl Store {
    /// Deletes everything expired beyond its grace (see the module), [`PURGE_BATCH`] rows at a
    /// time.
    pub async fn purge_expired(&self) -> StoreResult<Purged> {
        self.purge_expired_in_batches(PURGE_BATCH).await
    }

    /// [`Store::purge_expired`] with another batch size (at least 1).
    pub async fn purge_expired_in_batches(&self, batch: i64) -> StoreResult<Purged> {
        let batch = batch.max(1);
        let at = now();
        let mut purged = Purged::default();
        for (table, statement) in STATEMENTS {
            let cutoff = match table {
                Table::Tokens | Table::Families | Table::SessionFamilies => at - TOKEN_GRACE,
                Table::Codes => at - super::codes::KEPT_AFTER_EXPIRY,
                Table::Sessions | Table::FlashMessages => at,
            };
            loop {
                let deleted = {
                    let _exclusive = self.exclusive().await?;
                    sqlx::query(statement)
                        .bind(cutoff)
                        .bind(batch)
                        .execute(&self.writer)
                        .await?
                        .rows_affected()
                };
                purged.batches += 1;
                *match table {
                    Table::Tokens => &mut purged.tokens,
                    Table::Codes => &mut purged.authorization_codes,
                    Table::Families => &mut purged.revoked_families,
                    Table::Sessions => &mut purged.sessions,
                    Table::FlashMessages => &mut purged.flash_messages,
                    Table::SessionFamilies => &mut purged.session_families,
                } += deleted;
                if deleted < batch as u64 {
                    break;
                }
                // Let the requests queued behind this batch's lock run before the next.
                tokio::task::yield_now().await;
            }
        }
        // Previous client secrets past their grace (refused already; a few rows at most).
        self.purge_expired_previous_secrets(at).await?;
        Ok(purged)
    }
}

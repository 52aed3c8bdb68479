//! What each user has let each application do (its scopes), remembered so that a second
//! authorization for the same or fewer scopes skips the consent page; withdrawn from the
//! "Authorized applications" page, which also revokes the tokens the application holds.

use super::Revocation;
use super::tokens::revoke_user_families;
use super::{Store, StoreResult, now};
use sqlx::Row;

/// An application a user has authorized.
#[derive(Debug, Clone)]
pub struct AuthorizedApplication {
    pub application_id: i64,
    pub name: String,
    pub client_id: String,
    pub scope: String,
    pub granted_at: i64,
}

impl Store {
    /// The scope `user_id` consented to for `application_id`, if any.
    pub async fn consent(&self, user_id: i64, application_id: i64) -> StoreResult<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT scope FROM consents WHERE user_id = $1 AND application_id = $2",
        )
        .bind(user_id)
        .bind(application_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Remembers that `user_id` consented to `scope` for `application_id` (replacing what was
    /// remembered: callers pass the union with it).
    pub async fn remember_consent(
        &self,
        user_id: i64,
        application_id: i64,
        scope: &str,
    ) -> StoreResult<()> {
        let _exclusive = self.exclusive().await?;
        sqlx::query(
            "INSERT INTO consents (user_id, application_id, scope, granted_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (user_id, application_id) DO UPDATE SET scope = excluded.scope, granted_at = excluded.granted_at",
        )
        .bind(user_id)
        .bind(application_id)
        .bind(scope)
        .bind(now())
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// The applications `user_id` has authorized, by name.
    pub async fn authorized_applications(
        &self,
        user_id: i64,
    ) -> StoreResult<Vec<AuthorizedApplication>> {
        let rows = sqlx::query(
            "SELECT a.id, a.name, a.client_id, c.scope, c.granted_at FROM consents c
             JOIN applications a ON a.id = c.application_id WHERE c.user_id = $1 ORDER BY a.name, a.id",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(AuthorizedApplication {
                    application_id: row.try_get(0)?,
                    name: row.try_get(1)?,
                    client_id: row.try_get(2)?,
                    scope: row.try_get(3)?,
                    granted_at: row.try_get(4)?,
                })
            })
            .collect()
    }

    /// Forgets `user_id`'s consent for `application_id` and revokes every token family the
    /// application holds for the user (from any grant), codes not yet exchanged included.
    /// Whether there was a consent.
    pub async fn revoke_authorization(
        &self,
        user_id: i64,
        application_id: i64,
    ) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        revoke_user_families(&mut tx, user_id, Some(application_id)).await?;
        let done = sqlx::query("DELETE FROM consents WHERE user_id = $1 AND application_id = $2")
            .bind(user_id)
            .bind(application_id)
            .execute(&mut *tx)
            .await?;
        let client_id: Option<String> =
            sqlx::query_scalar("SELECT client_id FROM applications WHERE id = $1")
                .bind(application_id)
                .fetch_optional(&mut *tx)
                .await?;
        let appended = match client_id {
            Some(client_id) => {
                let event = Revocation::Consent {
                    sub: user_id.to_string(),
                    client_id,
                };
                Some(self.append_event(&mut tx, &event).await?)
            }
            None => None,
        };
        tx.commit().await?;
        if let Some(appended) = &appended {
            self.changed(appended);
        }
        Ok(done.rows_affected() == 1)
    }
}

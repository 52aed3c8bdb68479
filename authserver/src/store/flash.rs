//! One-time messages between a form's POST and the page it redirects to, shared by every replica
//! (sealed by [`crate::web::flash`]; the store sees only digests and ciphertext). Taking one
//! deletes it in the same statement, so of two replicas asked at once only one gets it.

use super::{Store, StoreResult, now};

/// A message to leave: all of it as [`crate::web::flash`] made it.
pub struct NewFlash<'a> {
    /// SHA-256 of the message's id (the id is in the redirect's URL only).
    pub id_digest: &'a str,
    /// SHA-256 of the session's cookie value, as `sessions.id_digest` keeps it.
    pub session_digest: &'a str,
    /// The page it is for.
    pub path: &'a str,
    pub sealed: &'a str,
    /// Seconds it waits to be taken.
    pub lifetime: i64,
}

impl Store {
    /// Leaves a message for one session and page.
    pub async fn put_flash(&self, flash: &NewFlash<'_>) -> StoreResult<()> {
        let _exclusive = self.exclusive().await?;
        sqlx::query(
            "INSERT INTO flash_messages (id_digest, session_digest, path, sealed, expires_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(flash.id_digest)
        .bind(flash.session_digest)
        .bind(flash.path)
        .bind(flash.sealed)
        .bind(now() + flash.lifetime)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// The sealed message `id_digest` if it is this session's, for this page and unexpired,
    /// deleted as it is read; anyone else's request leaves it in place.
    pub async fn take_flash(
        &self,
        id_digest: &str,
        session_digest: &str,
        path: &str,
    ) -> StoreResult<Option<String>> {
        let _exclusive = self.exclusive().await?;
        let sealed = sqlx::query_scalar(
            "DELETE FROM flash_messages WHERE id_digest = $1 AND session_digest = $2 AND path = $3 AND expires_at > $4 RETURNING sealed",
        )
        .bind(id_digest)
        .bind(session_digest)
        .bind(path)
        .bind(now())
        .fetch_optional(&self.writer)
        .await?;
        Ok(sealed)
    }
}

#[cfg(test)]
mod tests {
    use super::NewFlash;
    use crate::secrets::{digest, random_token};
    use crate::store::NewUser;

    #[tokio::test]
    async fn a_message_is_taken_once_by_its_session_on_its_page_before_it_expires() {
        for store in crate::testing::all_stores().await {
            let user = store
                .create_user(&NewUser {
                    username: format!("flash-{}", crate::secrets::random_client_id()),
                    is_active: true,
                    ..Default::default()
                })
                .await
                .unwrap();
            let session = store.create_session(user.id, 60).await.unwrap();
            let other = store.create_session(user.id, 60).await.unwrap();
            let (mine, theirs) = (digest(&session.session_id), digest(&other.session_id));
            let put = |id: &str, lifetime| {
                let (store, id, mine) = (store.clone(), digest(id), mine.clone());
                async move {
                    store
                        .put_flash(&NewFlash {
                            id_digest: &id,
                            session_digest: &mine,
                            path: "/p/",
                            sealed: "sealed",
                            lifetime,
                        })
                        .await
                        .unwrap()
                }
            };
            let id = random_token();
            put(&id, 60).await;
            let id_digest = digest(&id);
            for (session, path, expected, why) in [
                (&theirs, "/p/", None, "another session"),
                (&mine, "/q/", None, "another page"),
                (&mine, "/p/", Some("sealed"), "its session and page"),
                (&mine, "/p/", None, "taken once"),
            ] {
                let taken = store.take_flash(&id_digest, session, path).await.unwrap();
                assert_eq!(taken.as_deref(), expected, "{why}");
            }

            let expired = random_token();
            put(&expired, -1).await;
            assert_eq!(
                store
                    .take_flash(&digest(&expired), &mine, "/p/")
                    .await
                    .unwrap(),
                None
            );
            assert_eq!(store.purge_expired().await.unwrap().flash_messages, 1);

            // Signing out takes the session's messages along.
            let left = random_token();
            put(&left, 60).await;
            assert!(store.delete_session(&session.session_id).await.unwrap());
            let rows: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM flash_messages WHERE id_digest = $1")
                    .bind(digest(&left))
                    .fetch_one(store.pool())
                    .await
                    .unwrap();
            assert_eq!(rows, 0);
        }
    }
}

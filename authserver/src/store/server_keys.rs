//! Secrets of the server itself (not of a client or a user), one per name, shared by every
//! replica on the database and kept across restarts: the first replica to ask creates it.

use super::{Store, StoreResult, now};
use crate::secrets;

impl Store {
    /// The secret named `name` (32 random bytes, base64url), created on first use. Replicas
    /// asking at once all get the one that was stored first.
    pub async fn server_key(&self, name: &str) -> StoreResult<String> {
        let stored = || async {
            sqlx::query_scalar::<_, String>("SELECT secret FROM server_keys WHERE name = $1")
                .bind(name)
                .fetch_optional(&self.pool)
                .await
        };
        if let Some(secret) = stored().await? {
            return Ok(secret);
        }
        {
            let _exclusive = self.exclusive().await?;
            sqlx::query(
                "INSERT INTO server_keys (name, secret, created_at) VALUES ($1, $2, $3)
                 ON CONFLICT (name) DO NOTHING",
            )
            .bind(name)
            .bind(secrets::random_token())
            .bind(now())
            .execute(&self.writer)
            .await?;
        }
        stored().await?.ok_or_else(|| {
            anyhow::anyhow!("the server key {name:?} was stored but cannot be read back").into()
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::all_stores;

    #[tokio::test]
    async fn a_key_is_made_once_and_read_back_by_every_store() {
        for store in all_stores().await {
            let first = store.server_key("csrf").await.unwrap();
            assert_eq!(first.len(), 43);
            assert_eq!(store.server_key("csrf").await.unwrap(), first);
            assert_ne!(store.server_key("other").await.unwrap(), first);
        }
    }
}

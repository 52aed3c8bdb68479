//! Browser sessions of signed-in operators (kept as SHA-256 digests of the cookie value) and the
//! failed sign-in log that throttles password guessing.

use super::hot::postgres_groups::ThrottleWrite;
use super::hot::{self, Hot};
use super::timing::{StoreOp, StoreTimer};
use super::{Store, StoreResult, User, now};
use crate::secrets;
use sqlx::Row;

/// A live session: whose it is and the CSRF token its forms carry. No `Debug`: the token
/// must not reach a log line.
#[derive(Clone)]
pub struct Session {
    pub user: User,
    pub csrf_token: String,
    /// When the user signed in (OpenID Connect's `auth_time`).
    pub signed_in_at: i64,
    /// The digest its row is stored under (never the cookie value): what the codes issued in
    /// it are recorded by ([`Store::sign_out`]).
    pub key: String,
    /// How the user signed in: RFC 8176 method values, space-separated (`pwd`, `pwd otp mfa`).
    pub amr: String,
}

/// What a sign-in hands back once: the cookie value (never stored) and the session's CSRF token.
/// No `Debug`, for the same reason.
#[derive(Clone)]
pub struct NewSession {
    pub session_id: String,
    pub csrf_token: String,
}

impl Store {
    /// Opens a session for `user_id` that lasts `lifetime` seconds. Expired sessions are never
    /// found, and are deleted by the purge ([`Store::purge_expired`]).
    pub async fn create_session(&self, user_id: i64, lifetime: i64) -> StoreResult<NewSession> {
        self.create_session_signed_in_with(user_id, lifetime, "pwd")
            .await
    }

    /// [`Store::create_session`] for a sign-in made with the methods `amr` (RFC 8176 values,
    /// space-separated).
    pub async fn create_session_signed_in_with(
        &self,
        user_id: i64,
        lifetime: i64,
        amr: &str,
    ) -> StoreResult<NewSession> {
        let _timer = StoreTimer::start(StoreOp::CreateSession);
        let now = now();
        let _exclusive = self.exclusive().await?;
        let session_id = secrets::random_token();
        let csrf_token = secrets::random_token();
        sqlx::query("INSERT INTO sessions (id_digest, user_id, csrf_token, created_at, expires_at, amr) VALUES ($1, $2, $3, $4, $5, $6)")
            .bind(secrets::digest(&session_id))
            .bind(user_id)
            .bind(&csrf_token)
            .bind(now)
            .bind(now + lifetime)
            .bind(amr)
            .execute(&self.writer)
            .await?;
        Ok(NewSession {
            session_id,
            csrf_token,
        })
    }

    /// The unexpired session whose cookie value is `session_id`, with its user as stored now.
    pub async fn find_session(&self, session_id: &str) -> StoreResult<Option<Session>> {
        let _timer = StoreTimer::start(StoreOp::FindSession);
        let key = secrets::digest(session_id);
        let row = sqlx::query(
            "SELECT user_id, csrf_token, created_at, amr FROM sessions WHERE id_digest = $1 AND expires_at > $2",
        )
        .bind(&key)
        .bind(now())
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let user_id: i64 = row.try_get("user_id")?;
        let Some(user) = self.get_user(user_id).await? else {
            return Ok(None);
        };
        Ok(Some(Session {
            user,
            csrf_token: row.try_get("csrf_token")?,
            signed_in_at: row.try_get("created_at")?,
            key,
            amr: row
                .try_get::<Option<String>, _>("amr")?
                .unwrap_or_else(|| "pwd".to_owned()),
        }))
    }

    pub async fn delete_session(&self, session_id: &str) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let done = sqlx::query("DELETE FROM sessions WHERE id_digest = $1")
            .bind(secrets::digest(session_id))
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Signs a user out everywhere (after a password reset or deactivation).
    pub async fn delete_user_sessions(&self, user_id: i64) -> StoreResult<u64> {
        // No session has an empty CSRF token: none is kept.
        self.delete_user_sessions_but(user_id, "").await
    }

    /// Ends every session of the user except the one whose CSRF token is `kept_csrf_token` (the
    /// session asking, when a user changes their own password).
    pub async fn delete_user_sessions_but(
        &self,
        user_id: i64,
        kept_csrf_token: &str,
    ) -> StoreResult<u64> {
        let _exclusive = self.exclusive().await?;
        let done = sqlx::query("DELETE FROM sessions WHERE user_id = $1 AND csrf_token <> $2")
            .bind(user_id)
            .bind(kept_csrf_token)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected())
    }

    /// Records one failed sign-in under each bucket (see [`crate::throttle`]) and
    /// forgets failures older than `window` seconds (on PostgreSQL in the throttle writer's next
    /// group).
    pub async fn record_login_failure(&self, buckets: &[String], window: i64) -> StoreResult<()> {
        let _timer = StoreTimer::start(StoreOp::RecordLoginFailure);
        let now = now();
        if let Hot::Postgres(pg) = &self.hot {
            let failed = ThrottleWrite::Failed {
                buckets: buckets.to_vec(),
                at: now,
                expired: now - window,
            };
            return pg.throttle(failed).await;
        }
        let _exclusive = self.exclusive().await?;
        sqlx::query("DELETE FROM login_failures WHERE failed_at <= $1")
            .bind(now - window)
            .execute(&self.writer)
            .await?;
        for bucket in buckets {
            sqlx::query("INSERT INTO login_failures (bucket, failed_at) VALUES ($1, $2)")
                .bind(bucket)
                .bind(now)
                .execute(&self.writer)
                .await?;
        }
        Ok(())
    }

    /// How many sign-ins failed under each of two buckets in the last `window` seconds, in one
    /// query (an attempt is checked against its username's and its address's bucket).
    pub async fn count_login_failures(
        &self,
        buckets: [&str; 2],
        window: i64,
    ) -> StoreResult<[i64; 2]> {
        let _timer = StoreTimer::start(StoreOp::CountLoginFailures);
        let since = now() - window;
        match &self.hot {
            Hot::Sqlite(local) => {
                local.read(|conn| hot::sqlite::login_failures(conn, buckets, since))
            }
            Hot::Postgres(pool) => hot::postgres::login_failures(pool, buckets, since).await,
        }
    }

    /// Forgets the failures of one bucket (a successful sign-in clears its username's count; on
    /// PostgreSQL in the throttle writer's next group).
    pub async fn clear_login_failures(&self, bucket: &str) -> StoreResult<()> {
        if let Hot::Postgres(pg) = &self.hot {
            let bucket = bucket.to_owned();
            return pg.throttle(ThrottleWrite::Cleared { bucket }).await;
        }
        let _exclusive = self.exclusive().await?;
        sqlx::query("DELETE FROM login_failures WHERE bucket = $1")
            .bind(bucket)
            .execute(&self.writer)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::store::NewUser;

    #[tokio::test]
    async fn sessions_and_failures_round_trip() {
        for store in crate::testing::all_stores().await {
            let name = format!("sess-{}", crate::secrets::random_client_id());
            let user = store
                .create_user(&NewUser {
                    username: name.clone(),
                    is_active: true,
                    is_staff: true,
                    ..Default::default()
                })
                .await
                .unwrap();
            let new = store.create_session(user.id, 60).await.unwrap();
            let found = store.find_session(&new.session_id).await.unwrap().unwrap();
            assert_eq!(found.user.id, user.id);
            assert_eq!(found.csrf_token, new.csrf_token);
            assert!(store.find_session("not-a-session").await.unwrap().is_none());
            // Stored as a digest, never as the cookie value.
            let raw: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sessions WHERE id_digest = $1")
                .bind(&new.session_id)
                .fetch_one(store.pool())
                .await
                .unwrap();
            assert_eq!(raw, 0);
            assert!(store.delete_session(&new.session_id).await.unwrap());
            assert!(store.find_session(&new.session_id).await.unwrap().is_none());
            let expired = store.create_session(user.id, -1).await.unwrap();
            assert!(
                store
                    .find_session(&expired.session_id)
                    .await
                    .unwrap()
                    .is_none()
            );
            let other = store.create_session(user.id, 60).await.unwrap();
            store.delete_user(user.id).await.unwrap();
            assert!(
                store
                    .find_session(&other.session_id)
                    .await
                    .unwrap()
                    .is_none()
            );

            let bucket = format!("user:{name}");
            store
                .record_login_failure(&[bucket.clone(), format!("addr:{name}")], 900)
                .await
                .unwrap();
            store
                .record_login_failure(std::slice::from_ref(&bucket), 900)
                .await
                .unwrap();
            let both = [bucket.as_str(), &format!("addr:{name}")];
            assert_eq!(store.count_login_failures(both, 900).await.unwrap(), [2, 1]);
            store.clear_login_failures(&bucket).await.unwrap();
            assert_eq!(store.count_login_failures(both, 900).await.unwrap(), [0, 1]);
        }
    }
}

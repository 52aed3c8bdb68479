//! What OpenID Connect keeps beside the OAuth tables: each application's OIDC registration (the
//! ID-token algorithm, the post-logout redirect URIs), the sign-in time of a token family (the
//! `auth_time` of the ID tokens its refreshes return), and the directory's `email_verified` and
//! `updated_at`.

use super::{Store, StoreResult, User, now};
use sqlx::Row;

/// The `amr` of a sign-in whose methods were not recorded: a password.
const PASSWORD_AMR: &str = "pwd";

/// An application's OpenID Connect registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcClient {
    /// `id_token_signed_response_alg`: `RS256` (the default) or `EdDSA`.
    pub id_token_alg: String,
    /// Where RP-initiated logout may send the browser back to, space-separated, matched exactly.
    pub post_logout_redirect_uris: String,
    /// Its users sign in with a second factor (issue 41): an authorization of a session signed
    /// in with a password alone asks for the code, and a user without a factor is refused.
    pub require_mfa: bool,
}

/// The ID-token algorithm of an application that chose none (OpenID Connect Registration 1.0).
pub const DEFAULT_ID_TOKEN_ALG: &str = "RS256";

impl Default for OidcClient {
    fn default() -> Self {
        OidcClient {
            id_token_alg: DEFAULT_ID_TOKEN_ALG.to_owned(),
            post_logout_redirect_uris: String::new(),
            require_mfa: false,
        }
    }
}

/// Sets the OIDC registration of application `id` in `tx`.
pub(super) async fn set_oidc_client_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    application_id: i64,
    client: &OidcClient,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO oidc_clients (application_id, id_token_alg, post_logout_redirect_uris, require_mfa)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (application_id) DO UPDATE
         SET id_token_alg = excluded.id_token_alg,
             post_logout_redirect_uris = excluded.post_logout_redirect_uris,
             require_mfa = excluded.require_mfa",
    )
    .bind(application_id)
    .bind(&client.id_token_alg)
    .bind(&client.post_logout_redirect_uris)
    .bind(i64::from(client.require_mfa))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// A user with the directory fields only OpenID Connect reads.
#[derive(Debug, Clone)]
pub struct Profile {
    pub user: User,
    pub email_verified: bool,
    /// When the profile last changed (Unix seconds): `date_joined` until it does.
    pub updated_at: i64,
}

/// When and how the user of a token family signed in (issue 41).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilySignIn {
    /// Seconds since the epoch (OpenID Connect's `auth_time`).
    pub auth_time: i64,
    /// RFC 8176 method values, space-separated.
    pub amr: String,
}

impl Store {
    /// The OIDC registration of application `id` (the defaults when it has none).
    pub async fn oidc_client(&self, application_id: i64) -> StoreResult<OidcClient> {
        let row = sqlx::query(
            "SELECT id_token_alg, post_logout_redirect_uris, require_mfa FROM oidc_clients WHERE application_id = $1",
        )
        .bind(application_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(match row {
            Some(row) => OidcClient {
                id_token_alg: row.try_get("id_token_alg")?,
                post_logout_redirect_uris: row.try_get("post_logout_redirect_uris")?,
                require_mfa: row.try_get::<i64, _>("require_mfa")? != 0,
            },
            None => OidcClient::default(),
        })
    }

    /// Sets the OIDC registration of application `id`.
    pub async fn set_oidc_client(
        &self,
        application_id: i64,
        client: &OidcClient,
    ) -> StoreResult<()> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        set_oidc_client_in(&mut tx, application_id, client).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Whether any application signs its ID tokens with `alg`.
    pub async fn any_oidc_client_signing_with(&self, alg: &str) -> StoreResult<bool> {
        let found: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM oidc_clients WHERE id_token_alg = $1 LIMIT 1")
                .bind(alg)
                .fetch_optional(&self.pool)
                .await?;
        Ok(found.is_some())
    }

    /// Whether any application lists `scope` among its allowed scopes.
    pub async fn any_application_allowing(&self, scope: &str) -> StoreResult<bool> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM applications WHERE ' ' || allowed_scopes || ' ' LIKE $1 LIMIT 1",
        )
        .bind(format!("% {scope} %"))
        .fetch_optional(&self.pool)
        .await?;
        Ok(found.is_some())
    }

    /// Remembers when `user_id` signed in for the tokens of `family` (first write wins).
    pub async fn remember_auth_time(
        &self,
        family: &str,
        user_id: i64,
        auth_time: i64,
    ) -> StoreResult<()> {
        self.remember_sign_in(family, user_id, auth_time, PASSWORD_AMR)
            .await
    }

    /// Remembers when and how (`amr`, RFC 8176 values space-separated) `user_id` signed in for
    /// the tokens of `family` (first write wins): what their ID tokens, JWTs and introspection
    /// answers say.
    pub async fn remember_sign_in(
        &self,
        family: &str,
        user_id: i64,
        auth_time: i64,
        amr: &str,
    ) -> StoreResult<()> {
        let _exclusive = self.exclusive().await?;
        sqlx::query(
            "INSERT INTO oidc_families (family, user_id, auth_time, created_at, amr)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(family)
        .bind(user_id)
        .bind(auth_time)
        .bind(now())
        .bind(amr)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// When the user of the tokens of `family` signed in, if it was remembered.
    pub async fn auth_time_of(&self, family: &str) -> StoreResult<Option<i64>> {
        Ok(self.sign_in_of(family).await?.map(|s| s.auth_time))
    }

    /// When and how the user of the tokens of `family` signed in, if it was remembered.
    pub async fn sign_in_of(&self, family: &str) -> StoreResult<Option<FamilySignIn>> {
        let row = sqlx::query("SELECT auth_time, amr FROM oidc_families WHERE family = $1")
            .bind(family)
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(FamilySignIn {
            auth_time: row.try_get("auth_time")?,
            amr: row
                .try_get::<Option<String>, _>("amr")?
                .unwrap_or_else(|| PASSWORD_AMR.to_owned()),
        }))
    }

    /// Forgets the sign-in time of every family none of whose tokens is stored any more (the
    /// purge deleted them) and that is older than [`super::purge::TOKEN_GRACE`]; how many.
    pub async fn purge_oidc_families(&self) -> StoreResult<u64> {
        let _exclusive = self.exclusive().await?;
        let done = sqlx::query(
            "DELETE FROM oidc_families WHERE created_at <= $1
             AND NOT EXISTS (SELECT 1 FROM tokens t WHERE t.family = oidc_families.family)",
        )
        .bind(now() - super::purge::TOKEN_GRACE)
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected())
    }

    /// The user `id` with `email_verified` and `updated_at`.
    pub async fn profile(&self, id: i64) -> StoreResult<Option<Profile>> {
        let Some(user) = self.get_user(id).await? else {
            return Ok(None);
        };
        let row = sqlx::query("SELECT email_verified, updated_at FROM users WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let updated_at: Option<i64> = row.try_get("updated_at")?;
        Ok(Some(Profile {
            email_verified: row.try_get::<i64, _>("email_verified")? != 0,
            updated_at: updated_at.unwrap_or(user.date_joined),
            user,
        }))
    }

    /// Marks the email of user `id` verified or not (an operator's statement: this server sends
    /// no mail); false when there is no such user.
    pub async fn set_email_verified(&self, id: i64, verified: bool) -> StoreResult<bool> {
        let exclusive = self.exclusive().await?;
        let done = sqlx::query(
            "UPDATE users SET email_verified = $1, updated_at = $2 WHERE id = $3 AND email_verified <> $1",
        )
        .bind(i64::from(verified))
        .bind(now())
        .bind(id)
        .execute(&self.writer)
        .await?;
        drop(exclusive);
        if done.rows_affected() == 1 {
            return Ok(true);
        }
        Ok(self.get_user(id).await?.is_some())
    }
}

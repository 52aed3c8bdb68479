//! Access and refresh tokens, stored as SHA-256 digests, grouped in rotation families.

use super::{Store, StoreResult, now};
use crate::secrets;
use sqlx::Row;

/// A stored token joined with what introspection reports about it.
#[derive(Debug, Clone)]
pub struct TokenRecord {
    pub id: i64,
    pub kind: String,
    pub application_id: i64,
    pub client_id: String,
    pub user_id: Option<i64>,
    pub username: Option<String>,
    pub user_active: bool,
    pub scope: String,
    pub family: String,
    pub access_token_id: Option<i64>,
    pub issued_at: i64,
    pub expires_at: i64,
    pub revoked: bool,
}

impl TokenRecord {
    pub const ACCESS: &'static str = "access";
    pub const REFRESH: &'static str = "refresh";

    /// Not revoked, not expired, and its user (if any) still active.
    pub fn is_active(&self) -> bool {
        !self.revoked && self.expires_at > now() && (self.user_id.is_none() || self.user_active)
    }
}

/// What to issue: an access token and, when `refresh_lifetime` is set, a refresh token.
#[derive(Debug, Clone)]
pub struct NewTokens {
    pub application_id: i64,
    pub user_id: Option<i64>,
    pub scope: String,
    pub access_lifetime: i64,
    pub refresh_lifetime: Option<i64>,
    /// The rotation family to continue; a new one when None.
    pub family: Option<String>,
}

/// The plaintext tokens, handed out once and never stored.
#[derive(Debug, Clone)]
pub struct IssuedTokens {
    pub access_token: String,
    pub refresh_token: Option<String>,
    pub expires_in: i64,
    pub scope: String,
}

/// What presenting a refresh token led to.
#[derive(Debug)]
pub enum RefreshOutcome {
    /// The token was valid and is now spent; its access token is revoked.
    Claimed(TokenRecord),
    /// Unknown, expired, or issued to another client.
    Invalid,
    /// Already used: the whole family has been revoked.
    Reused,
}

/// One row of `tokens` about to be written; only the digest of `token` is stored.
#[derive(Clone, Copy)]
struct NewRow<'a> {
    kind: &'static str,
    token: &'a str,
    new: &'a NewTokens,
    family: &'a str,
    access_token_id: Option<i64>,
    issued_at: i64,
    expires_at: i64,
}

impl NewRow<'_> {
    async fn insert<'e>(
        self,
        executor: impl sqlx::Executor<'e, Database = sqlx::Any>,
    ) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(
            "INSERT INTO tokens (kind, digest, application_id, user_id, scope, family, access_token_id, issued_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
        )
        .bind(self.kind)
        .bind(secrets::digest(self.token))
        .bind(self.new.application_id)
        .bind(self.new.user_id)
        .bind(&self.new.scope)
        .bind(self.family)
        .bind(self.access_token_id)
        .bind(self.issued_at)
        .bind(self.expires_at)
        .fetch_one(executor)
        .await?)
    }
}

const SELECT: &str = "SELECT t.id, t.kind, t.application_id, a.client_id, t.user_id, u.username, u.is_active AS user_active,
    t.scope, t.family, t.access_token_id, t.issued_at, t.expires_at, t.revoked
    FROM tokens t JOIN applications a ON a.id = t.application_id LEFT JOIN users u ON u.id = t.user_id";

fn from_row(row: &sqlx::any::AnyRow) -> StoreResult<TokenRecord> {
    Ok(TokenRecord {
        id: row.try_get("id")?,
        kind: row.try_get("kind")?,
        application_id: row.try_get("application_id")?,
        client_id: row.try_get("client_id")?,
        user_id: row.try_get("user_id")?,
        username: row.try_get("username")?,
        user_active: row.try_get::<Option<i64>, _>("user_active")?.unwrap_or(0) != 0,
        scope: row.try_get("scope")?,
        family: row.try_get("family")?,
        access_token_id: row.try_get("access_token_id")?,
        issued_at: row.try_get("issued_at")?,
        expires_at: row.try_get("expires_at")?,
        revoked: row.try_get::<i64, _>("revoked")? != 0,
    })
}

impl Store {
    /// Stores the digests of a new access token and, when asked, its refresh token (one
    /// transaction for the pair; a lone access token is a single statement).
    pub async fn issue_tokens(&self, new: &NewTokens) -> StoreResult<IssuedTokens> {
        let access_token = secrets::random_token();
        let family = new.family.clone().unwrap_or_else(secrets::random_token);
        let issued_at = now();
        let access = NewRow {
            kind: TokenRecord::ACCESS,
            token: &access_token,
            new,
            family: &family,
            access_token_id: None,
            issued_at,
            expires_at: issued_at + new.access_lifetime,
        };
        let refresh_token = match new.refresh_lifetime {
            None => {
                access.insert(&self.writer).await?;
                None
            }
            Some(lifetime) => {
                let refresh = secrets::random_token();
                let mut tx = self.writer.begin().await?;
                let access_id = access.insert(&mut *tx).await?;
                let refresh_row = NewRow {
                    kind: TokenRecord::REFRESH,
                    token: &refresh,
                    access_token_id: Some(access_id),
                    expires_at: issued_at + lifetime,
                    ..access
                };
                refresh_row.insert(&mut *tx).await?;
                tx.commit().await?;
                Some(refresh)
            }
        };
        Ok(IssuedTokens {
            access_token,
            refresh_token,
            expires_in: new.access_lifetime,
            scope: new.scope.clone(),
        })
    }

    /// The token with this plaintext value, of any kind, whatever its state.
    pub async fn find_token(&self, token: &str) -> StoreResult<Option<TokenRecord>> {
        let row = sqlx::query(&format!("{SELECT} WHERE t.digest = $1"))
            .bind(secrets::digest(token))
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(from_row).transpose()
    }

    /// Spends a refresh token presented by `application_id`. A second use of a spent token
    /// revokes its whole family (reuse detection); the claim is a conditional update, so two
    /// replicas racing on one token cannot both win.
    pub async fn claim_refresh_token(
        &self,
        refresh_token: &str,
        application_id: i64,
    ) -> StoreResult<RefreshOutcome> {
        let Some(record) = self.find_token(refresh_token).await? else {
            return Ok(RefreshOutcome::Invalid);
        };
        if record.kind != TokenRecord::REFRESH || record.application_id != application_id {
            return Ok(RefreshOutcome::Invalid);
        }
        if record.revoked {
            self.revoke_family(&record.family).await?;
            return Ok(RefreshOutcome::Reused);
        }
        if !record.is_active() {
            return Ok(RefreshOutcome::Invalid);
        }
        let claimed = sqlx::query("UPDATE tokens SET revoked = 1 WHERE id = $1 AND revoked = 0")
            .bind(record.id)
            .execute(&self.writer)
            .await?;
        if claimed.rows_affected() != 1 {
            self.revoke_family(&record.family).await?;
            return Ok(RefreshOutcome::Reused);
        }
        if let Some(access_id) = record.access_token_id {
            sqlx::query("UPDATE tokens SET revoked = 1 WHERE id = $1")
                .bind(access_id)
                .execute(&self.writer)
                .await?;
        }
        Ok(RefreshOutcome::Claimed(record))
    }

    /// Revokes every access and refresh token of one rotation family.
    pub async fn revoke_family(&self, family: &str) -> StoreResult<()> {
        sqlx::query("UPDATE tokens SET revoked = 1 WHERE family = $1")
            .bind(family)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// RFC 7009: revokes the token and its family if it was issued to `application_id`;
    /// unknown tokens and other clients' tokens are left alone. Returns whether it revoked.
    pub async fn revoke_token(&self, token: &str, application_id: i64) -> StoreResult<bool> {
        match self.find_token(token).await? {
            Some(record) if record.application_id == application_id => {
                self.revoke_family(&record.family).await?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

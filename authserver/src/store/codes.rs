//! Authorization codes (RFC 6749 §4.1), stored only as SHA-256 digests, each bound to its
//! client, user, redirect URI, scope and PKCE challenge, and to the rotation family its tokens
//! go into: a second presentation revokes that family, so every token issued from the code.

use super::timing::{StoreOp, StoreTimer};
use super::{Store, StoreResult, now};
use crate::domain::CodeBinding;
use crate::secrets;
use sqlx::Row;

/// How long a spent or expired code is kept after its expiry, so that a late second use is still
/// recognised as reuse and revokes the tokens issued from it.
pub(super) const KEPT_AFTER_EXPIRY: i64 = 24 * 3600;

/// A code to issue.
#[derive(Debug, Clone)]
pub struct NewCode {
    pub application_id: i64,
    pub user_id: i64,
    pub redirect_uri: String,
    pub scope: String,
    pub code_challenge: Option<String>,
    /// Seconds it may be exchanged.
    pub lifetime: i64,
    /// OpenID Connect: the request's `nonce`, for the ID token.
    pub nonce: Option<String>,
    /// OpenID Connect: when the user signed in (the ID token's `auth_time`).
    pub auth_time: Option<i64>,
    /// How the user signed in (RFC 8176 `amr` values, space-separated).
    pub amr: Option<String>,
    /// The resources the tokens will be for (RFC 8707), space-separated; None: the default
    /// audience.
    pub resource: Option<String>,
    /// The browser session it is issued in ([`super::Session::key`]): signing out of it
    /// revokes the tokens of the code ([`Store::sign_out`]).
    pub session_key: Option<String>,
    /// The thumbprint of the DPoP key the request named (RFC 9449 §10 `dpop_jkt`): the code is
    /// exchanged only with a proof of that key.
    pub dpop_jkt: Option<String>,
}

/// A code as stored, just claimed.
#[derive(Debug, Clone)]
pub struct CodeRecord {
    pub application_id: i64,
    pub user_id: i64,
    pub redirect_uri: String,
    pub scope: String,
    pub code_challenge: Option<String>,
    /// The rotation family of the tokens it is exchanged for.
    pub family: String,
    pub expires_at: i64,
    pub nonce: Option<String>,
    pub auth_time: Option<i64>,
    /// How the user signed in (RFC 8176 `amr` values, space-separated); None for a code
    /// issued before second factors: a password.
    pub amr: Option<String>,
    /// The resources it was granted for; an exchange may only narrow them.
    pub resource: Option<String>,
    /// The DPoP key it is bound to (RFC 9449 §10), if the request named one.
    pub dpop_jkt: Option<String>,
}

impl CodeRecord {
    /// What the protocol checks an exchange against.
    pub fn binding(&self) -> CodeBinding {
        CodeBinding {
            application_id: self.application_id,
            redirect_uri: self.redirect_uri.clone(),
            code_challenge: self.code_challenge.clone(),
            expires_at: self.expires_at,
        }
    }
}

/// What presenting a code led to.
#[derive(Debug)]
pub enum CodeOutcome {
    /// First presentation: the code is spent now (whatever the checks that follow decide).
    Claimed(Box<CodeRecord>),
    /// Never issued (or long forgotten).
    Unknown,
    /// Presented before: the family of the tokens issued from it is revoked.
    Reused,
}

impl Store {
    /// Stores a new code's digest and returns the code, shown once. Codes long expired are
    /// deleted by the purge ([`Store::purge_expired`]).
    pub async fn issue_code(&self, new: &NewCode) -> StoreResult<String> {
        let _timer = StoreTimer::start(StoreOp::IssueCode);
        let code = secrets::random_token();
        let family = secrets::new_family();
        let at = now();
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO authorization_codes (digest, application_id, user_id, redirect_uri, scope, code_challenge, family, created_at, expires_at, nonce, auth_time, resource, amr, dpop_jkt)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        )
        .bind(secrets::digest(&code))
        .bind(new.application_id)
        .bind(new.user_id)
        .bind(&new.redirect_uri)
        .bind(&new.scope)
        .bind(new.code_challenge.as_deref())
        .bind(&family)
        .bind(at)
        .bind(at + new.lifetime)
        .bind(new.nonce.as_deref())
        .bind(new.auth_time)
        .bind(new.resource.as_deref())
        .bind(new.amr.as_deref())
        .bind(new.dpop_jkt.as_deref())
        .execute(&mut *tx)
        .await?;
        if let Some(session_key) = &new.session_key {
            Store::record_session_family(&mut tx, session_key, &family).await?;
        }
        tx.commit().await?;
        Ok(code)
    }

    /// Spends `code` (a conditional update: of two replicas racing on it, one wins). A code
    /// presented before revokes the family of the tokens issued from it.
    pub async fn claim_code(&self, code: &str) -> StoreResult<CodeOutcome> {
        let _timer = StoreTimer::start(StoreOp::ClaimCode);
        let digest = secrets::digest(code);
        let (claimed, family) = {
            let _exclusive = self.exclusive().await?;
            let claimed = sqlx::query(
                "UPDATE authorization_codes SET used = 1 WHERE digest = $1 AND used = 0
                 RETURNING application_id, user_id, redirect_uri, scope, code_challenge, family, expires_at, nonce, auth_time, resource, amr, dpop_jkt",
            )
            .bind(&digest)
            .fetch_optional(&self.writer)
            .await?;
            let family = match claimed {
                Some(_) => None,
                None => {
                    sqlx::query_scalar::<_, String>(
                        "SELECT family FROM authorization_codes WHERE digest = $1",
                    )
                    .bind(&digest)
                    .fetch_optional(&self.writer)
                    .await?
                }
            };
            (claimed, family)
        };
        if let Some(row) = claimed {
            return Ok(CodeOutcome::Claimed(Box::new(CodeRecord {
                application_id: row.try_get("application_id")?,
                user_id: row.try_get("user_id")?,
                redirect_uri: row.try_get("redirect_uri")?,
                scope: row.try_get("scope")?,
                code_challenge: row.try_get("code_challenge")?,
                family: row.try_get("family")?,
                expires_at: row.try_get("expires_at")?,
                nonce: row.try_get("nonce")?,
                auth_time: row.try_get("auth_time")?,
                resource: row.try_get("resource")?,
                amr: row.try_get("amr")?,
                dpop_jkt: row.try_get("dpop_jkt")?,
            })));
        }
        // After the pause of the hot path's writer ends: the revocation goes through it.
        match family {
            Some(family) => {
                self.revoke_family(&family).await?;
                Ok(CodeOutcome::Reused)
            }
            None => Ok(CodeOutcome::Unknown),
        }
    }
}

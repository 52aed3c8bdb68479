//! Access and refresh tokens, stored under their time and SHA-256 digest
//! ([`secrets::token_key`]), grouped in rotation families.
//!
//! A family is revoked by a row in `revoked_families`, never by updating its tokens: every lookup
//! joins that table and every insert into a family checks it, so a token issued concurrently with
//! the revocation (a refresh racing a reuse or an RFC 7009 request) is dead as well.

use super::bus::Change;
use super::hot::{self, Hot, NewRow};
use super::sqlite_local::Undo;
use super::timing::{StoreOp, StoreTimer};
use super::{Revocation, Store, StoreError, StoreResult, now};
use crate::secrets;

/// What a stored token is; stored as its name (`access`, `refresh`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    Access,
    Refresh,
}

impl TokenKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenKind::Access => "access",
            TokenKind::Refresh => "refresh",
        }
    }

    /// The kind of a stored name; None for anything else.
    pub fn parse(name: &str) -> Option<TokenKind> {
        match name {
            "access" => Some(TokenKind::Access),
            "refresh" => Some(TokenKind::Refresh),
            _ => None,
        }
    }
}

/// A stored token joined with what introspection reports about it.
#[derive(Debug, Clone)]
pub struct TokenRecord {
    pub id: i64,
    pub kind: TokenKind,
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
    /// Spent or revoked on its own, or its whole family revoked.
    pub revoked: bool,
    /// The application's allowed scopes now (empty: any declared scope) and its permissions
    /// now: what [`TokenRecord::current_scope`] narrows the token's scope to.
    pub application_scopes: Vec<String>,
    pub application_permissions: crate::domain::Permissions,
    /// The thumbprint of the client certificate the token is bound to (RFC 8705
    /// `cnf.x5t#S256`), if it is.
    pub cnf_x5t_s256: Option<String>,
    /// The thumbprint (RFC 7638) of the DPoP key the token is bound to (RFC 9449 `cnf.jkt`),
    /// if it is.
    pub cnf_jkt: Option<String>,
    /// The resource identifiers it is for (RFC 8707), space-separated; None: the server's
    /// default audience.
    pub audience: Option<String>,
}

impl TokenRecord {
    /// The token's scope less what its application may no longer have (an operator narrowed
    /// the application's scopes, or withdrew a permission, since the token was issued).
    pub fn current_scope(&self) -> String {
        let permits = |scope: &&str| {
            crate::domain::permits(
                &self.application_scopes,
                self.application_permissions,
                scope,
            )
        };
        let kept: Vec<&str> = self.scope.split_whitespace().filter(permits).collect();
        kept.join(" ")
    }

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
    /// Binds the tokens to this client certificate (RFC 8705 `cnf.x5t#S256`).
    pub cnf_x5t_s256: Option<String>,
    /// Binds the tokens to this DPoP key's thumbprint (RFC 9449 `cnf.jkt`).
    pub cnf_jkt: Option<String>,
    /// The resource identifiers the tokens are for, space-separated; None: the default audience.
    pub audience: Option<String>,
}

/// The plaintext tokens, handed out once and never stored.
#[derive(Debug, Clone)]
pub struct IssuedTokens {
    pub access_token: String,
    pub refresh_token: Option<String>,
    pub expires_in: i64,
    pub scope: String,
    /// The rotation family the tokens went into.
    pub family: String,
    /// The resource identifiers they are for, space-separated; None: the default audience.
    pub audience: Option<String>,
}

/// What presenting a refresh token led to.
#[derive(Debug)]
pub enum RefreshOutcome {
    /// The token was valid and is now spent; its access token is revoked.
    Claimed(Box<TokenRecord>),
    /// Unknown, expired, or issued to another client.
    Invalid,
    /// Already used: this presentation revoked the whole family.
    Reused,
    /// Its family had been revoked before (by an earlier reuse or by revocation).
    Revoked,
}

impl Store {
    /// Stores the digests of a new access token and, when asked, its refresh token (one
    /// transaction for the pair; a lone access token is a single statement). Fails with
    /// `FamilyRevoked` when continuing a revoked family, and with `UnknownApplication` or
    /// `UnknownUser` when the application or the user has been deleted meanwhile.
    pub async fn issue_tokens(&self, new: &NewTokens) -> StoreResult<IssuedTokens> {
        let _timer = StoreTimer::start(StoreOp::IssueTokens);
        match self.insert_tokens(new).await {
            Err(StoreError::Database(error)) if is_foreign_key_violation(&error) => Err(self
                .vanished(new)
                .await?
                .unwrap_or(StoreError::Database(error))),
            // On PostgreSQL an application that is gone is no foreign key violation: the
            // statement inserts nothing, as for a revoked family (`hot::postgres::INSERT_ONE`).
            Err(StoreError::FamilyRevoked)
                if self.forget_deleted_application(new.application_id).await? =>
            {
                Err(StoreError::UnknownApplication)
            }
            other => other,
        }
    }

    /// After inserting `new` failed on a foreign key: the error for the row it names that is
    /// gone (deleted, perhaps by another replica, after this one read it), if one is.
    async fn vanished(&self, new: &NewTokens) -> StoreResult<Option<StoreError>> {
        if self.forget_deleted_application(new.application_id).await? {
            return Ok(Some(StoreError::UnknownApplication));
        }
        Ok(match new.user_id {
            Some(id) if self.get_user(id).await?.is_none() => Some(StoreError::UnknownUser),
            _ => None,
        })
    }

    async fn insert_tokens(&self, new: &NewTokens) -> StoreResult<IssuedTokens> {
        let access_token = secrets::new_token();
        let issued_at = now();
        let access = NewRow {
            kind: TokenKind::Access,
            digest: secrets::token_key(&access_token),
            application_id: new.application_id,
            user_id: new.user_id,
            scope: new.scope.clone(),
            family: new.family.clone().unwrap_or_else(secrets::new_family),
            new_family: new.family.is_none(),
            access_token_id: None,
            issued_at,
            expires_at: issued_at + new.access_lifetime,
            cnf_x5t_s256: new.cnf_x5t_s256.clone(),
            cnf_jkt: new.cnf_jkt.clone(),
            audience: new.audience.clone(),
        };
        let mut rows = vec![access];
        let refresh_token = new.refresh_lifetime.map(|lifetime| {
            let refresh = secrets::new_token();
            rows.push(NewRow {
                kind: TokenKind::Refresh,
                digest: secrets::token_key(&refresh),
                expires_at: issued_at + lifetime,
                ..rows[0].clone()
            });
            refresh
        });
        let family = rows[0].family.clone();
        // The pair in one transaction (SQLite: one savepoint; a lone token is one statement;
        // PostgreSQL: one statement), in the writer's next group.
        match &self.hot {
            Hot::Sqlite(local) => {
                let undo = match rows.len() {
                    1 => Undo::Statement,
                    _ => Undo::Savepoint,
                };
                local
                    .write(undo, move |conn| hot::sqlite::insert_tokens(conn, &rows))
                    .await?
            }
            Hot::Postgres(pg) => pg.insert_tokens(rows).await?,
        };
        Ok(IssuedTokens {
            access_token,
            refresh_token,
            expires_in: new.access_lifetime,
            scope: new.scope.clone(),
            family,
            audience: new.audience.clone(),
        })
    }

    /// The token with this plaintext value, of any kind, whatever its state.
    pub async fn find_token(&self, token: &str) -> StoreResult<Option<TokenRecord>> {
        self.find_token_by_key(&secrets::token_key(token)).await
    }

    /// The token kept under `key` ([`secrets::token_key`]).
    pub(super) async fn find_token_by_key(&self, key: &str) -> StoreResult<Option<TokenRecord>> {
        let _timer = StoreTimer::start(StoreOp::FindToken);
        match &self.hot {
            Hot::Sqlite(local) => local.read(|conn| hot::sqlite::find_token(conn, key)),
            Hot::Postgres(pool) => hot::postgres::find_token(pool, key).await,
        }
    }

    /// Spends a refresh token presented by `application_id`. A second use of a spent token
    /// revokes its whole family (reuse detection); the claim is a conditional update, so two
    /// replicas racing on one token cannot both win, and the loser's revocation also covers
    /// the tokens the winner issues afterwards.
    pub async fn claim_refresh_token(
        &self,
        refresh_token: &str,
        application_id: i64,
    ) -> StoreResult<RefreshOutcome> {
        let _timer = StoreTimer::start(StoreOp::ClaimRefreshToken);
        let Some(record) = self.find_token(refresh_token).await? else {
            return Ok(RefreshOutcome::Invalid);
        };
        if record.kind != TokenKind::Refresh || record.application_id != application_id {
            return Ok(RefreshOutcome::Invalid);
        }
        if record.revoked {
            return self.revoke_reused(&record.family).await;
        }
        if !record.is_active() {
            return Ok(RefreshOutcome::Invalid);
        }
        // The claim and its access token's revocation in one transaction.
        let (id, access_id) = (record.id, record.access_token_id);
        let claimed = match &self.hot {
            Hot::Sqlite(local) => {
                // Two statements: the claim and its access token's revocation.
                local
                    .write(Undo::Savepoint, move |conn| {
                        hot::sqlite::claim(conn, id, access_id)
                            .map_err(super::sqlite_error::database)
                    })
                    .await?
            }
            Hot::Postgres(pg) => pg.claim(id).await?,
        };
        if !claimed {
            return self.revoke_reused(&record.family).await;
        }
        // The spent token and its access token are no longer active (on PostgreSQL the claim
        // announced it to the other processes).
        self.changed(&Change::Spent(record.family.clone()));
        Ok(RefreshOutcome::Claimed(Box::new(record)))
    }

    /// A spent token was presented: `Reused` if this revoked its family, `Revoked` if an
    /// earlier call had (so a reuse is reported once, however many racers detect it).
    async fn revoke_reused(&self, family: &str) -> StoreResult<RefreshOutcome> {
        Ok(if self.revoke_family(family).await? {
            RefreshOutcome::Reused
        } else {
            RefreshOutcome::Revoked
        })
    }

    /// Revokes every access and refresh token of one rotation family, including any being
    /// issued into it at this moment. Returns false when the family was revoked already.
    /// The family's event ([`Revocation::Family`]) is appended with the revocation, in its
    /// transaction.
    pub async fn revoke_family(&self, family: &str) -> StoreResult<bool> {
        let _timer = StoreTimer::start(StoreOp::RevokeFamily);
        let at = now();
        let event = Revocation::Family {
            jti: super::family_jti(family),
        };
        // The appended event's id, when this call revoked the family.
        let appended = match &self.hot {
            Hot::Sqlite(local) => {
                let family = family.to_owned();
                let event = event.clone();
                // The family's row and its event: two statements.
                local
                    .write(Undo::Savepoint, move |conn| {
                        let database = super::sqlite_error::database;
                        if !hot::sqlite::revoke_family(conn, &family, at).map_err(database)? {
                            return Ok(None);
                        }
                        super::events::append_sqlite(conn, &event)
                            .map(Some)
                            .map_err(database)
                    })
                    .await
            }
            Hot::Postgres(pool) => hot::postgres::revoke_family(pool, family, at, &event).await,
        }?;
        if let Some(id) = appended {
            self.changed(&Change::Appended { id, event });
        }
        Ok(appended.is_some())
    }

    /// RFC 7009: revokes the token and its family if it was issued to `application_id`;
    /// unknown tokens and other clients' tokens are left alone. Returns whether it revoked.
    pub async fn revoke_token(&self, token: &str, application_id: i64) -> StoreResult<bool> {
        let _timer = StoreTimer::start(StoreOp::RevokeToken);
        match self.find_token(token).await? {
            Some(record) if record.application_id == application_id => {
                self.revoke_family(&record.family).await?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// PostgreSQL SQLSTATE 23503, SQLite's SQLITE_CONSTRAINT_FOREIGNKEY (787).
fn is_foreign_key_violation(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.is_foreign_key_violation())
}

/// Revokes every token family of `user_id` (of one application, or of all), with the families of
/// their authorization codes: every token issued from them, or still to be issued from a code
/// or a refresh token of theirs, is dead.
pub(super) async fn revoke_user_families(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    user_id: i64,
    application_id: Option<i64>,
) -> StoreResult<()> {
    let only_application = match application_id {
        Some(_) => " AND application_id = $3",
        None => "",
    };
    for families in [
        "SELECT DISTINCT family, $2 FROM tokens WHERE user_id = $1",
        "SELECT family, $2 FROM authorization_codes WHERE user_id = $1",
    ] {
        let sql = format!(
            "INSERT INTO revoked_families (family, revoked_at) {families}{only_application}
             ON CONFLICT (family) DO NOTHING"
        );
        let mut query = sqlx::query(&sql).bind(user_id).bind(now());
        if let Some(application_id) = application_id {
            query = query.bind(application_id);
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

//! Registered client applications; their secrets are kept only as SHA-256 digests.

use super::bus::Change;
use super::hot::{self, Hot};
use super::timing::{StoreOp, StoreTimer};
use super::{Store, StoreResult, conflict, now};
use crate::domain::{AccessTokenFormat, TlsClientAuth};
use crate::secrets;
use sqlx::Row;
use std::sync::Arc;

pub use crate::domain::{Application, ClientType, GrantType};

/// The fields an operator sets, for creation and update.
#[derive(Debug, Clone)]
pub struct ApplicationInput {
    pub name: String,
    pub client_type: ClientType,
    pub grant_type: GrantType,
    pub redirect_uris: String,
    pub allowed_scopes: Vec<String>,
    pub may_introspect: bool,
    /// May use the revocation stream (`ssf.read`, `ssf.manage`).
    pub may_use_ssf: bool,
    /// For confidential clients of the authorization code grant: false lets them leave PKCE
    /// out (public clients must always send it).
    pub pkce_required: bool,
    /// None: the server's `access_token_format`, whatever it is when a token is issued.
    pub token_format: Option<AccessTokenFormat>,
}

const COLUMNS: &str = application_columns!();

fn from_row(row: &sqlx::any::AnyRow) -> StoreResult<Application> {
    let parse_err = |e: String| super::StoreError::Other(anyhow::anyhow!(e));
    Ok(Application {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        client_id: row.try_get("client_id")?,
        client_secret_digest: row.try_get("client_secret_digest")?,
        previous_secret: crate::domain::PreviousSecret::from_columns(
            row.try_get("previous_secret_digest")?,
            row.try_get("previous_secret_expires_at")?,
        ),
        client_type: row
            .try_get::<String, _>("client_type")?
            .parse()
            .map_err(parse_err)?,
        grant_type: row
            .try_get::<String, _>("grant_type")?
            .parse()
            .map_err(parse_err)?,
        redirect_uris: row.try_get("redirect_uris")?,
        allowed_scopes: super::split_scopes(row.try_get("allowed_scopes")?),
        may_introspect: row.try_get::<i64, _>("may_introspect")? != 0,
        may_use_ssf: row.try_get::<i64, _>("may_use_ssf")? != 0,
        pkce_required: row.try_get::<i64, _>("pkce_required")? != 0,
        dpop_required: row.try_get::<i64, _>("dpop_required")? != 0,
        token_format: super::parse_token_format(row.try_get("token_format")?)?,
        tls_client_auth: super::parse_tls_client_auth(row.try_get("tls_client_auth")?)?,
        owner_id: row.try_get("owner_id")?,
        created_at: row.try_get("created_at")?,
    })
}

impl Store {
    /// Registers an application alone (no certificate, OpenID Connect defaults, no keys: what
    /// tests and [`Store::register`]'s callers build on). The client id is generated unless
    /// given; the secret is generated unless given, returned once, and stored only as a digest.
    /// Public clients get none.
    pub async fn create_application(
        &self,
        input: &ApplicationInput,
        owner_id: Option<i64>,
        client_id: Option<String>,
        client_secret: Option<String>,
    ) -> StoreResult<(Application, Option<String>)> {
        let secret = match input.client_type {
            ClientType::Confidential => Some(client_secret.unwrap_or_else(secrets::random_token)),
            ClientType::Public => None,
        };
        let new = super::NewRegistration {
            input: input.clone(),
            tls_client_auth: None,
            dpop_required: false,
            oidc: None,
            owner_id,
            client_id,
            secret: secret.clone(),
            keys: Vec::new(),
            dynamic: None,
        };
        Ok((self.register(&new).await?, secret))
    }

    /// Inserts the application row of `new` in `tx`.
    pub(super) async fn insert_application(
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        new: &super::NewRegistration,
    ) -> StoreResult<Application> {
        let input = &new.input;
        let row = sqlx::query(&format!(
            "INSERT INTO applications (name, client_id, client_secret_digest, client_type, grant_type, redirect_uris, allowed_scopes, may_introspect, owner_id, created_at, pkce_required, token_format, may_use_ssf, tls_client_auth, dpop_required)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) RETURNING {COLUMNS}"
        ))
        .bind(&input.name)
        .bind(
            new.client_id
                .clone()
                .unwrap_or_else(secrets::random_client_id),
        )
        .bind(new.secret.as_deref().map(secrets::digest))
        .bind(input.client_type.as_str())
        .bind(input.grant_type.as_str())
        .bind(&input.redirect_uris)
        .bind(input.allowed_scopes.join(" "))
        .bind(i64::from(input.may_introspect))
        .bind(new.owner_id)
        .bind(now())
        .bind(i64::from(input.pkce_required))
        .bind(input.token_format.map(AccessTokenFormat::as_str))
        .bind(i64::from(input.may_use_ssf))
        .bind(new.tls_client_auth.as_ref().map(ToString::to_string))
        .bind(i64::from(new.dpop_required))
        .fetch_one(&mut **tx)
        .await
        .map_err(conflict("an application with that client id"))?;
        from_row(&row)
    }

    pub async fn get_application(&self, id: i64) -> StoreResult<Option<Application>> {
        let _timer = StoreTimer::start(StoreOp::GetApplication);
        let columns = match &self.hot {
            Hot::Sqlite(local) => local.read(|conn| hot::sqlite::application_by_id(conn, id))?,
            Hot::Postgres(pool) => hot::postgres::application_by_id(pool, id).await?,
        };
        columns.map(hot::ApplicationColumns::parse).transpose()
    }

    /// The application with this client id, from the client cache when it is there
    /// ([`super::client_cache`]: a change made anywhere counts at once, or on SQLite by another
    /// process within [`super::FOREIGN_COMMIT_BOUND`]).
    pub async fn find_application_by_client_id(
        &self,
        client_id: &str,
    ) -> StoreResult<Option<Arc<Application>>> {
        let _timer = StoreTimer::start(StoreOp::FindApplication);
        // On SQLite, a commit by a connection other than the writer thread's, of any process
        // (an operator rotating a secret from the command line), empties the cache first.
        let cacheable = self.caches_current();
        if cacheable && let Some(app) = self.clients.get(client_id).await {
            return Ok(Some(app));
        }
        let generation = self.clients.generation();
        let columns = match &self.hot {
            Hot::Sqlite(local) => {
                local.read(|conn| hot::sqlite::application_by_client_id(conn, client_id))?
            }
            Hot::Postgres(pool) => hot::postgres::application_by_client_id(pool, client_id).await?,
        };
        let app = columns
            .map(hot::ApplicationColumns::parse)
            .transpose()?
            .map(Arc::new);
        if cacheable && let Some(app) = &app {
            self.clients.keep(generation, app).await;
        }
        Ok(app)
    }

    /// Whether application lookups may be answered from this store's client cache now: on
    /// PostgreSQL once it listens for other processes' changes, always on SQLite.
    pub fn client_cache_active(&self) -> bool {
        self.clients.active()
    }

    /// After a write naming application `id` failed on a foreign key, or (tokens on PostgreSQL,
    /// which keep none) inserted nothing: whether the application is gone (deleted, perhaps by
    /// another replica). If so, the client cache is emptied.
    pub(super) async fn forget_deleted_application(&self, id: i64) -> StoreResult<bool> {
        if self.get_application(id).await?.is_some() {
            return Ok(false);
        }
        self.clients.forget_all();
        Ok(true)
    }

    /// All applications (`owner_id` None) or those of one owner.
    pub async fn list_applications(&self, owner_id: Option<i64>) -> StoreResult<Vec<Application>> {
        let rows = match owner_id {
            Some(owner) => {
                sqlx::query(&format!(
                    "SELECT {COLUMNS} FROM applications WHERE owner_id = $1 ORDER BY id"
                ))
                .bind(owner)
                .fetch_all(&self.pool)
                .await?
            }
            None => {
                sqlx::query(&format!("SELECT {COLUMNS} FROM applications ORDER BY id"))
                    .fetch_all(&self.pool)
                    .await?
            }
        };
        rows.iter().map(from_row).collect()
    }

    pub async fn update_application(
        &self,
        id: i64,
        input: &ApplicationInput,
    ) -> StoreResult<Option<Application>> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        let (app, narrowed) = self.update_in(&mut tx, id, input).await?;
        self.commit_announcing(tx, &[Change::Application]).await?;
        if let Some(appended) = &narrowed {
            self.changed(appended);
        }
        Ok(app)
    }

    /// Updates application `id` to `input` in `tx`: the application as it is now (None: no such
    /// application), and the event logged when the change took from its tokens what they may
    /// carry (announced: to deliver once committed, [`Store::changed`]).
    pub(super) async fn update_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        id: i64,
        input: &ApplicationInput,
    ) -> StoreResult<(Option<Application>, Option<Change>)> {
        let lock = match self.backend {
            super::Backend::Postgres => " FOR UPDATE",
            super::Backend::Sqlite => "",
        };
        let before = sqlx::query(&format!(
            "SELECT allowed_scopes, may_introspect, client_type, client_id, may_use_ssf FROM applications WHERE id = $1{lock}"
        ))
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?;
        let row = sqlx::query(&format!(
            "UPDATE applications SET name = $1, client_type = $2, grant_type = $3, redirect_uris = $4, allowed_scopes = $5, may_introspect = $6, pkce_required = $7, token_format = $8, may_use_ssf = $9
             WHERE id = $10 RETURNING {COLUMNS}"
        ))
        .bind(&input.name)
        .bind(input.client_type.as_str())
        .bind(input.grant_type.as_str())
        .bind(&input.redirect_uris)
        .bind(input.allowed_scopes.join(" "))
        .bind(i64::from(input.may_introspect))
        .bind(i64::from(input.pkce_required))
        .bind(input.token_format.map(AccessTokenFormat::as_str))
        .bind(i64::from(input.may_use_ssf))
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?;
        let mut narrowed = None;
        if let Some(before) = &before {
            let scopes: String = before.try_get(0)?;
            let confidential = before.try_get::<String, _>(2)? == ClientType::Confidential.as_str();
            let permissions = crate::domain::Permissions {
                introspect: before.try_get::<i64, _>(1)? != 0 && confidential,
                ssf: before.try_get::<i64, _>(4)? != 0 && confidential,
            };
            if narrows(&super::split_scopes(&scopes), permissions, input) {
                let event = super::Revocation::Client {
                    client_id: before.try_get(3)?,
                };
                narrowed = Some(self.append_event(tx, &event).await?);
            }
        }
        Ok((row.as_ref().map(from_row).transpose()?, narrowed))
    }

    /// Sets how the application authenticates with a client certificate (RFC 8705); None: by
    /// its secret again (or, public, by its client id). Whether the application exists.
    pub async fn set_tls_client_auth(
        &self,
        id: i64,
        auth: Option<&TlsClientAuth>,
    ) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        let done = set_tls_client_auth_in(&mut tx, id, auth).await?;
        self.commit_announcing(tx, &[Change::Application]).await?;
        Ok(done)
    }

    /// Replaces the secret with a new random one, returned once; tokens already issued stay valid.
    /// With a `grace` above zero the replaced secret stays accepted that long (replacing any
    /// previous one); with zero it dies at once.
    pub async fn regenerate_secret(
        &self,
        id: i64,
        grace: std::time::Duration,
    ) -> StoreResult<Option<String>> {
        let secret = secrets::random_token();
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        // With a grace period the current secret becomes the previous one (replacing any
        // previous one); without, no previous secret is left.
        let grace = i64::try_from(grace.as_secs()).unwrap_or(i64::MAX);
        let expires_at = (grace > 0).then(|| super::now().saturating_add(grace));
        let done = sqlx::query(
            "UPDATE applications SET
                previous_secret_digest = CASE WHEN $1 IS NULL THEN NULL ELSE client_secret_digest END,
                previous_secret_expires_at = $1,
                client_secret_digest = $2
             WHERE id = $3",
        )
        .bind(expires_at)
        .bind(secrets::digest(&secret))
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        self.commit_announcing(tx, &[Change::Application]).await?;
        Ok(done.then_some(secret))
    }

    /// Clears the previous secrets whose grace period has ended (they are refused already);
    /// how many.
    pub async fn purge_expired_previous_secrets(&self, now: i64) -> StoreResult<u64> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        let done = sqlx::query(
            "UPDATE applications SET previous_secret_digest = NULL, previous_secret_expires_at = NULL
             WHERE previous_secret_expires_at IS NOT NULL AND previous_secret_expires_at <= $1",
        )
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if done == 0 {
            tx.commit().await?;
        } else {
            self.commit_announcing(tx, &[Change::Application]).await?;
        }
        Ok(done)
    }

    /// Whether any application has its own format `format` (JWT keys are made at start when one
    /// issues JWTs).
    pub async fn any_application_with_format(
        &self,
        format: AccessTokenFormat,
    ) -> StoreResult<bool> {
        let found: Option<i64> =
            sqlx::query_scalar("SELECT id FROM applications WHERE token_format = $1 LIMIT 1")
                .bind(format.as_str())
                .fetch_optional(&self.pool)
                .await?;
        Ok(found.is_some())
    }

    /// Deletes the application and every token issued to it.
    pub async fn delete_application(&self, id: i64) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        let client_id: Option<String> =
            sqlx::query_scalar("SELECT client_id FROM applications WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
        let appended = match client_id {
            Some(client_id) => Some(
                self.append_event(&mut tx, &super::Revocation::Client { client_id })
                    .await?,
            ),
            None => None,
        };
        sqlx::query("DELETE FROM tokens WHERE application_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let done = sqlx::query("DELETE FROM applications WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        self.commit_announcing(tx, &[Change::Application]).await?;
        if let Some(appended) = &appended {
            self.changed(appended);
        }
        Ok(done.rows_affected() == 1)
    }
}

/// Sets the certificate registration of application `id` in `tx`; whether it exists.
pub(super) async fn set_tls_client_auth_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    id: i64,
    auth: Option<&TlsClientAuth>,
) -> StoreResult<bool> {
    let done = sqlx::query("UPDATE applications SET tls_client_auth = $1 WHERE id = $2")
        .bind(auth.map(ToString::to_string))
        .bind(id)
        .execute(&mut **tx)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Keeps the digest of `secret` as application `id`'s secret, in `tx`; whether it exists.
pub(super) async fn set_secret_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    id: i64,
    secret: &str,
) -> StoreResult<bool> {
    let done = sqlx::query("UPDATE applications SET client_secret_digest = $1 WHERE id = $2")
        .bind(secrets::digest(secret))
        .bind(id)
        .execute(&mut **tx)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Whether `input` takes from an application something its tokens may carry: a scope it was
/// allowed (`*`: every scope), or the introspection or revocation-stream
/// permission (effective only for a confidential client). Its tokens' events are then logged
/// ([`super::Revocation::Client`]).
fn narrows(
    allowed_before: &[String],
    before: crate::domain::Permissions,
    input: &ApplicationInput,
) -> bool {
    let lost_scope = !crate::domain::every_scope(&input.allowed_scopes)
        && (crate::domain::every_scope(allowed_before)
            || allowed_before
                .iter()
                .any(|scope| !input.allowed_scopes.contains(scope)));
    let confidential = input.client_type == ClientType::Confidential;
    let lost_introspection = before.introspect && !(input.may_introspect && confidential);
    let lost_ssf = before.ssf && !(input.may_use_ssf && confidential);
    lost_scope || lost_introspection || lost_ssf
}

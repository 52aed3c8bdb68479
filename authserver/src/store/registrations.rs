//! An application's whole registration written in one transaction: the application, its
//! certificate and OpenID Connect settings, the signing keys it needs, and for a client that
//! registered itself (RFC 7591) its record; and the initial access tokens of dynamic
//! registration. What decides the values is [`crate::registration`].

use super::applications::{set_secret_in, set_tls_client_auth_in};
use super::bus::Change;
use super::oidc::set_oidc_client_in;
use super::signing_keys::StoredSigningKey;
use super::{Application, ApplicationInput, OidcClient, Store, StoreError, StoreResult, now};
use crate::domain::TlsClientAuth;
use sqlx::Row;

/// A new application as the registration service decided it.
#[derive(Debug, Clone)]
pub struct NewRegistration {
    pub input: ApplicationInput,
    pub tls_client_auth: Option<TlsClientAuth>,
    /// Whether the token endpoint requires a DPoP proof of it (RFC 9449).
    pub dpop_required: bool,
    /// None: no OpenID Connect row (the defaults).
    pub oidc: Option<OidcClient>,
    pub owner_id: Option<i64>,
    /// None: a random one.
    pub client_id: Option<String>,
    /// The secret whose digest is kept (None: public, or authenticating by certificate).
    pub secret: Option<String>,
    /// Signing keys to add with it: the first of a type its tokens need.
    pub keys: Vec<StoredSigningKey>,
    /// A dynamically registered client's record.
    pub dynamic: Option<DynamicRecord>,
}

/// A changed registration.
#[derive(Debug, Clone)]
pub struct RegistrationUpdate {
    pub input: ApplicationInput,
    pub tls_client_auth: Option<TlsClientAuth>,
    pub dpop_required: bool,
    pub oidc: OidcClient,
    pub keys: Vec<StoredSigningKey>,
    /// A first secret to keep (a public client turned confidential).
    pub secret: Option<String>,
    /// A dynamically registered client's metadata as now registered.
    pub metadata: Option<String>,
}

/// What is kept of a client that registered itself (RFC 7591).
#[derive(Debug, Clone)]
pub struct DynamicRecord {
    /// SHA-256 digest of its RFC 7592 registration access token.
    pub access_token_digest: String,
    /// Its client metadata as registered (JSON object).
    pub metadata: String,
    /// The digest of the initial access token it presented, whose use it takes.
    pub initial_token_digest: Option<String>,
}

/// A dynamically registered client as stored.
#[derive(Debug, Clone)]
pub struct DynamicClient {
    pub access_token_digest: String,
    pub metadata: String,
    pub issued_at: i64,
}

/// An initial access token as an operator issued it (never its value).
#[derive(Debug, Clone)]
pub struct InitialAccessToken {
    pub digest: String,
    pub label: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub max_uses: Option<i64>,
    pub uses: i64,
}

impl InitialAccessToken {
    /// Whether it may register a client at `at`.
    pub fn usable(&self, at: i64) -> bool {
        self.expires_at > at && self.max_uses.is_none_or(|max| self.uses < max)
    }
}

impl Store {
    /// Stores `new` in one transaction: nothing of it when any part fails (a client id taken,
    /// an initial access token used up meanwhile, the database).
    pub async fn register(&self, new: &NewRegistration) -> StoreResult<Application> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        if let Some(initial) = new
            .dynamic
            .as_ref()
            .and_then(|d| d.initial_token_digest.as_deref())
        {
            let taken = sqlx::query(
                "UPDATE initial_access_tokens SET uses = uses + 1
                 WHERE digest = $1 AND expires_at > $2 AND (max_uses IS NULL OR uses < max_uses)",
            )
            .bind(initial)
            .bind(now())
            .execute(&mut *tx)
            .await?;
            if taken.rows_affected() != 1 {
                return Err(StoreError::InitialAccessTokenSpent);
            }
        }
        let app = Self::insert_application(&mut tx, new).await?;
        if let Some(oidc) = &new.oidc {
            set_oidc_client_in(&mut tx, app.id, oidc).await?;
        }
        self.insert_keys_in(&mut tx, &new.keys).await?;
        if let Some(dynamic) = &new.dynamic {
            sqlx::query(
                "INSERT INTO dynamic_clients (application_id, access_token_digest, metadata, initial_token_digest, issued_at)
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(app.id)
            .bind(&dynamic.access_token_digest)
            .bind(&dynamic.metadata)
            .bind(&dynamic.initial_token_digest)
            .bind(app.created_at)
            .execute(&mut *tx)
            .await?;
        }
        self.commit_announcing(tx, &[Change::Application]).await?;
        Ok(app)
    }

    /// Stores the changed registration of application `id` in one transaction; None when there
    /// is no such application.
    pub async fn save_registration(
        &self,
        id: i64,
        update: &RegistrationUpdate,
    ) -> StoreResult<Option<Application>> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        let (app, narrowed) = self.update_in(&mut tx, id, &update.input).await?;
        let Some(mut app) = app else {
            return Ok(None);
        };
        if update.tls_client_auth != app.tls_client_auth {
            set_tls_client_auth_in(&mut tx, id, update.tls_client_auth.as_ref()).await?;
            app.tls_client_auth = update.tls_client_auth.clone();
        }
        if update.dpop_required != app.dpop_required {
            sqlx::query("UPDATE applications SET dpop_required = $1 WHERE id = $2")
                .bind(i64::from(update.dpop_required))
                .bind(id)
                .execute(&mut *tx)
                .await?;
            app.dpop_required = update.dpop_required;
        }
        if let Some(secret) = &update.secret {
            set_secret_in(&mut tx, id, secret).await?;
            app.client_secret_digest = Some(crate::secrets::digest(secret));
        }
        set_oidc_client_in(&mut tx, id, &update.oidc).await?;
        self.insert_keys_in(&mut tx, &update.keys).await?;
        if let Some(metadata) = &update.metadata {
            sqlx::query("UPDATE dynamic_clients SET metadata = $1 WHERE application_id = $2")
                .bind(metadata)
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        self.commit_announcing(tx, &[Change::Application]).await?;
        if let Some(appended) = &narrowed {
            self.changed(appended);
        }
        Ok(Some(app))
    }

    /// Adds `keys` in `tx`. A key whose generation another process took meanwhile is left out
    /// when a key of its type is there now; otherwise the transaction fails (and is tried again
    /// by the service with the keys as they are then).
    async fn insert_keys_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        keys: &[StoredSigningKey],
    ) -> StoreResult<()> {
        for key in keys {
            if self.insert_signing_key(tx, key).await? {
                continue;
            }
            let present: Option<i64> =
                sqlx::query_scalar("SELECT 1 FROM signing_keys WHERE algorithm = $1 LIMIT 1")
                    .bind(&key.algorithm)
                    .fetch_optional(&mut **tx)
                    .await?;
            if present.is_none() {
                return Err(StoreError::Conflict("a signing key of that generation"));
            }
        }
        Ok(())
    }

    /// The record of application `id` if it registered itself.
    pub async fn dynamic_client(&self, application_id: i64) -> StoreResult<Option<DynamicClient>> {
        let row = sqlx::query(
            "SELECT access_token_digest, metadata, issued_at FROM dynamic_clients WHERE application_id = $1",
        )
        .bind(application_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            Ok(DynamicClient {
                access_token_digest: row.try_get("access_token_digest")?,
                metadata: row.try_get("metadata")?,
                issued_at: row.try_get("issued_at")?,
            })
        })
        .transpose()
    }

    /// The ids of the applications that registered themselves.
    pub async fn dynamic_client_ids(&self) -> StoreResult<std::collections::HashSet<i64>> {
        let ids: Vec<i64> = sqlx::query_scalar("SELECT application_id FROM dynamic_clients")
            .fetch_all(&self.pool)
            .await?;
        Ok(ids.into_iter().collect())
    }

    /// Keeps a new initial access token (its digest).
    pub async fn add_initial_access_token(&self, token: &InitialAccessToken) -> StoreResult<()> {
        let _exclusive = self.exclusive().await?;
        sqlx::query(
            "INSERT INTO initial_access_tokens (digest, label, created_at, expires_at, max_uses, uses)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&token.digest)
        .bind(&token.label)
        .bind(token.created_at)
        .bind(token.expires_at)
        .bind(token.max_uses)
        .bind(token.uses)
        .execute(&self.writer)
        .await
        .map_err(super::conflict("an initial access token with that digest"))?;
        Ok(())
    }

    /// The initial access token of this digest, if one was issued.
    pub async fn initial_access_token(
        &self,
        digest: &str,
    ) -> StoreResult<Option<InitialAccessToken>> {
        let row = sqlx::query(
            "SELECT digest, label, created_at, expires_at, max_uses, uses FROM initial_access_tokens WHERE digest = $1",
        )
        .bind(digest)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            Ok(InitialAccessToken {
                digest: row.try_get("digest")?,
                label: row.try_get("label")?,
                created_at: row.try_get("created_at")?,
                expires_at: row.try_get("expires_at")?,
                max_uses: row.try_get("max_uses")?,
                uses: row.try_get("uses")?,
            })
        })
        .transpose()
    }
}

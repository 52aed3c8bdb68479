//! The statements of the hot requests (token issue, introspection, client lookup), per backend:
//! SQLite through rusqlite without thread hops, PostgreSQL through sqlx's native driver in one
//! round trip per call, its writes committed in groups ([`postgres_groups`]). Everything else
//! goes through the `AnyPool`.

pub(super) mod group_writer;
pub(super) mod postgres;
pub(super) mod postgres_groups;
pub(super) mod sqlite;

use super::sqlite_local::SqliteLocal;
use super::{Application, StoreError, StoreResult, TokenKind, User};
use std::sync::Arc;

/// Where the hot statements run.
#[derive(Clone)]
pub(super) enum Hot {
    Sqlite(Arc<SqliteLocal>),
    /// The pool, and the writer tasks that commit its writes in groups.
    Postgres(Arc<postgres_groups::PgHot>),
}

/// One row of `tokens` about to be written (owned: it travels to SQLite's writer thread).
#[derive(Debug, Clone)]
pub(super) struct NewRow {
    pub kind: TokenKind,
    /// Where the token is kept ([`crate::secrets::token_key`]: its time, then its SHA-256); the
    /// token itself is never stored.
    pub digest: String,
    pub application_id: i64,
    pub user_id: Option<i64>,
    pub scope: String,
    pub family: String,
    /// Whether `family` was drawn for this issue (random, known to no one before): none can have
    /// revoked it, so its revocation need not be looked up.
    pub new_family: bool,
    /// For a refresh token inserted after its access token: None, filled in with that row's id.
    pub access_token_id: Option<i64>,
    pub issued_at: i64,
    pub expires_at: i64,
    /// The client certificate the tokens are bound to (RFC 8705 `cnf.x5t#S256`).
    pub cnf_x5t_s256: Option<String>,
    /// The key the tokens are bound to (RFC 9449 `cnf.jkt`).
    pub cnf_jkt: Option<String>,
    /// Its resource identifiers, space-separated; None: the server's default audience.
    pub audience: Option<String>,
}

const APPLICATION_BY_CLIENT_ID: &str = concat!(
    "SELECT ",
    application_columns!(),
    " FROM applications WHERE client_id = $1"
);
const APPLICATION_BY_ID: &str = concat!(
    "SELECT ",
    application_columns!(),
    " FROM applications WHERE id = $1"
);

const USER_WITH_PASSWORD: &str = "SELECT id, username, email, first_name, last_name, is_active, is_staff, is_superuser, date_joined, password_hash FROM users WHERE username = $1";

const LOGIN_FAILURES: &str =
    "SELECT COUNT(CASE WHEN bucket = $1 THEN 1 END), COUNT(CASE WHEN bucket = $2 THEN 1 END)
    FROM login_failures WHERE bucket IN ($1, $2) AND failed_at > $3";

/// A `users` row with its password hash, before its flags become booleans.
#[derive(Debug)]
pub(super) struct UserColumns {
    pub id: i64,
    pub username: String,
    pub email: String,
    pub first_name: String,
    pub last_name: String,
    pub is_active: i64,
    pub is_staff: i64,
    pub is_superuser: i64,
    pub date_joined: i64,
    pub password_hash: Option<String>,
}

impl UserColumns {
    /// The user and their password hash, if they have one.
    pub(super) fn split(self) -> (User, Option<String>) {
        let user = User {
            id: self.id,
            username: self.username,
            email: self.email,
            first_name: self.first_name,
            last_name: self.last_name,
            is_active: self.is_active != 0,
            is_staff: self.is_staff != 0,
            is_superuser: self.is_superuser != 0,
            date_joined: self.date_joined,
        };
        (user, self.password_hash)
    }
}

/// An `applications` row as stored, before its names are parsed.
#[derive(Debug)]
pub(super) struct ApplicationColumns {
    pub id: i64,
    pub name: String,
    pub client_id: String,
    pub client_secret_digest: Option<String>,
    pub client_type: String,
    pub grant_type: String,
    pub redirect_uris: String,
    pub allowed_scopes: String,
    pub may_introspect: i64,
    pub owner_id: Option<i64>,
    pub created_at: i64,
    pub pkce_required: i64,
    pub token_format: Option<String>,
    pub tls_client_auth: Option<String>,
    pub may_use_ssf: i64,
    pub previous_secret_digest: Option<String>,
    pub previous_secret_expires_at: Option<i64>,
    pub dpop_required: i64,
}

impl ApplicationColumns {
    pub(super) fn parse(self) -> StoreResult<Application> {
        let parse_err = |e: String| StoreError::Other(anyhow::anyhow!(e));
        Ok(Application {
            id: self.id,
            name: self.name,
            client_id: self.client_id,
            client_secret_digest: self.client_secret_digest,
            previous_secret: crate::domain::PreviousSecret::from_columns(
                self.previous_secret_digest,
                self.previous_secret_expires_at,
            ),
            client_type: self.client_type.parse().map_err(parse_err)?,
            grant_type: self.grant_type.parse().map_err(parse_err)?,
            redirect_uris: self.redirect_uris,
            allowed_scopes: super::split_scopes(&self.allowed_scopes),
            may_introspect: self.may_introspect != 0,
            may_use_ssf: self.may_use_ssf != 0,
            pkce_required: self.pkce_required != 0,
            dpop_required: self.dpop_required != 0,
            token_format: crate::store::parse_token_format(self.token_format)?,
            tls_client_auth: crate::store::parse_tls_client_auth(self.tls_client_auth)?,
            owner_id: self.owner_id,
            created_at: self.created_at,
        })
    }
}

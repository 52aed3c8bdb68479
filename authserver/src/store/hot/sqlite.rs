//! The hot statements on SQLite through rusqlite: prepared once per connection, then reused.

use super::{ApplicationColumns, NewRow, UserColumns};
use crate::store::split_scopes;
use crate::store::{StoreError, StoreResult, TokenKind, TokenRecord};
use rusqlite::{Connection, OptionalExtension, Row, params};

const TOKEN: &str = "SELECT t.id, t.kind, t.application_id, a.client_id, t.user_id, u.username, u.is_active,
    t.scope, t.family, t.access_token_id, t.issued_at, t.expires_at, t.revoked, f.family IS NOT NULL,
    a.allowed_scopes, a.may_introspect, t.cnf_x5t_s256, a.may_use_ssf, t.audience, t.cnf_jkt
    FROM tokens t JOIN applications a ON a.id = t.application_id LEFT JOIN users u ON u.id = t.user_id
    LEFT JOIN revoked_families f ON f.family = t.family WHERE t.digest = ?1";

fn token(row: &Row) -> rusqlite::Result<TokenRecord> {
    Ok(TokenRecord {
        id: row.get(0)?,
        kind: TokenKind::parse(row.get_ref(1)?.as_str()?).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                1,
                rusqlite::types::Type::Text,
                "unknown token kind".into(),
            )
        })?,
        application_id: row.get(2)?,
        client_id: row.get(3)?,
        user_id: row.get(4)?,
        username: row.get(5)?,
        user_active: row.get::<_, Option<i64>>(6)?.unwrap_or(0) != 0,
        scope: row.get(7)?,
        family: row.get(8)?,
        access_token_id: row.get(9)?,
        issued_at: row.get(10)?,
        expires_at: row.get(11)?,
        revoked: row.get::<_, i64>(12)? != 0 || row.get::<_, bool>(13)?,
        application_scopes: split_scopes(row.get_ref(14)?.as_str()?),
        application_permissions: crate::domain::Permissions {
            introspect: row.get::<_, i64>(15)? != 0,
            ssf: row.get::<_, i64>(17)? != 0,
        },
        cnf_x5t_s256: row.get(16)?,
        audience: row.get(18)?,
        cnf_jkt: row.get(19)?,
    })
}

/// The token whose digest is `digest`, joined with what introspection reports.
pub(in crate::store) fn find_token(
    connection: &Connection,
    digest: &str,
) -> rusqlite::Result<Option<TokenRecord>> {
    connection
        .prepare_cached(TOKEN)?
        .query_row([digest], token)
        .optional()
}

/// Inserts the rows of one issue (one family) in order, none if their family is revoked
/// (`FamilyRevoked`; not asked when `new_family`: a family made for these rows, which nobody can
/// have revoked); a row with
/// `access_token_id` None after the first names the first row's id. Returns the first row's id.
/// On the writer's connection, in its transaction: the family cannot be revoked between the
/// check and the inserts. One row is one statement that changes the database
/// ([`Undo::Statement`](crate::store::sqlite_local::Undo)): a single-row `INSERT … VALUES`,
/// which SQLite runs without a statement journal (an `INSERT … SELECT … WHERE NOT EXISTS` would
/// copy each page it changes into one).
pub(in crate::store) fn insert_tokens(
    connection: &Connection,
    rows: &[NewRow],
) -> StoreResult<i64> {
    let database = crate::store::sqlite_error::database;
    // The rows of one issue share their family (and whether it is new): one lookup.
    if let Some(first) = rows.first()
        && !first.new_family
        && connection
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM revoked_families WHERE family = ?1)")
            .map_err(database)?
            .query_row([&first.family], |found| found.get::<_, bool>(0))
            .map_err(database)?
    {
        return Err(StoreError::FamilyRevoked);
    }
    // No `RETURNING`: SQLite would gather the returned rows in a temporary table for each
    // statement; the row's id is the connection's last inserted rowid.
    let mut insert = connection
        .prepare_cached(
            "INSERT INTO tokens (kind, digest, application_id, user_id, scope, family, access_token_id, issued_at, expires_at, cnf_x5t_s256, audience, cnf_jkt)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        )
        .map_err(database)?;
    let mut first = None;
    for row in rows {
        insert
            .execute(params![
                row.kind.as_str(),
                row.digest,
                row.application_id,
                row.user_id,
                row.scope,
                row.family,
                row.access_token_id.or(first),
                row.issued_at,
                row.expires_at,
                row.cnf_x5t_s256,
                row.audience,
                row.cnf_jkt
            ])
            .map_err(database)?;
        first.get_or_insert(connection.last_insert_rowid());
    }
    first.ok_or_else(|| anyhow::anyhow!("no token to insert").into())
}

/// Spends the refresh token `id` unless it is spent or its family revoked, and revokes its
/// access token with it. Whether this call spent it.
pub(in crate::store) fn claim(
    connection: &Connection,
    id: i64,
    access_token_id: Option<i64>,
) -> rusqlite::Result<bool> {
    let claimed = connection
        .prepare_cached(
            "UPDATE tokens SET revoked = 1 WHERE id = ?1 AND revoked = 0
             AND NOT EXISTS (SELECT 1 FROM revoked_families f WHERE f.family = tokens.family)",
        )?
        .execute([id])?;
    if claimed == 1
        && let Some(access) = access_token_id
    {
        connection
            .prepare_cached("UPDATE tokens SET revoked = 1 WHERE id = ?1")?
            .execute([access])?;
    }
    Ok(claimed == 1)
}

/// Records the family as revoked; false when it was already.
pub(in crate::store) fn revoke_family(
    connection: &Connection,
    family: &str,
    at: i64,
) -> rusqlite::Result<bool> {
    let done = connection
        .prepare_cached(
            "INSERT INTO revoked_families (family, revoked_at) VALUES (?1, ?2)
             ON CONFLICT (family) DO NOTHING",
        )?
        .execute(params![family, at])?;
    Ok(done == 1)
}

/// The user with this username, with their password hash.
pub(in crate::store) fn user_with_password(
    connection: &Connection,
    username: &str,
) -> rusqlite::Result<Option<UserColumns>> {
    connection
        .prepare_cached(super::USER_WITH_PASSWORD)?
        .query_row([username], |row| {
            Ok(UserColumns {
                id: row.get(0)?,
                username: row.get(1)?,
                email: row.get(2)?,
                first_name: row.get(3)?,
                last_name: row.get(4)?,
                is_active: row.get(5)?,
                is_staff: row.get(6)?,
                is_superuser: row.get(7)?,
                date_joined: row.get(8)?,
                password_hash: row.get(9)?,
            })
        })
        .optional()
}

/// Failures under each of two buckets since `since`.
pub(in crate::store) fn login_failures(
    connection: &Connection,
    buckets: [&str; 2],
    since: i64,
) -> rusqlite::Result<[i64; 2]> {
    connection
        .prepare_cached(super::LOGIN_FAILURES)?
        .query_row(params![buckets[0], buckets[1], since], |row| {
            Ok([row.get(0)?, row.get(1)?])
        })
}

fn application(row: &Row) -> rusqlite::Result<ApplicationColumns> {
    Ok(ApplicationColumns {
        id: row.get(0)?,
        name: row.get(1)?,
        client_id: row.get(2)?,
        client_secret_digest: row.get(3)?,
        client_type: row.get(4)?,
        grant_type: row.get(5)?,
        redirect_uris: row.get(6)?,
        allowed_scopes: row.get(7)?,
        may_introspect: row.get(8)?,
        owner_id: row.get(9)?,
        created_at: row.get(10)?,
        pkce_required: row.get(11)?,
        token_format: row.get(12)?,
        tls_client_auth: row.get(13)?,
        may_use_ssf: row.get(14)?,
        previous_secret_digest: row.get(15)?,
        previous_secret_expires_at: row.get(16)?,
        dpop_required: row.get(17)?,
    })
}

/// The application with this client id.
pub(in crate::store) fn application_by_client_id(
    connection: &Connection,
    client_id: &str,
) -> rusqlite::Result<Option<ApplicationColumns>> {
    connection
        .prepare_cached(super::APPLICATION_BY_CLIENT_ID)?
        .query_row([client_id], application)
        .optional()
}

/// The application with this id.
pub(in crate::store) fn application_by_id(
    connection: &Connection,
    id: i64,
) -> rusqlite::Result<Option<ApplicationColumns>> {
    connection
        .prepare_cached(super::APPLICATION_BY_ID)?
        .query_row([id], application)
        .optional()
}

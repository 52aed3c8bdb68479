//! The hot statements on PostgreSQL through sqlx's native driver: one round trip each (a pair of
//! tokens is one statement, the claim of a refresh token and its access token's revocation too).
//!
//! New tokens commit without waiting for the WAL flush: [`insert_tokens`] runs on the tokens
//! writer's connection, whose session has `synchronous_commit` off
//! ([`super::postgres_groups`]). A PostgreSQL crash may forget tokens issued in its last
//! fraction of a second, which are then unknown and refused (fail closed). Revocations and
//! refresh-token claims wait for the flush as before, so none is forgotten.

use super::{ApplicationColumns, NewRow, UserColumns};
use crate::store::bus::{Channel, notify_appended, notify_spent};
use crate::store::split_scopes;
use crate::store::{StoreError, StoreResult, TokenKind, TokenRecord};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};

const TOKEN: &str = "SELECT t.id, t.kind, t.application_id, a.client_id, t.user_id, u.username, u.is_active,
    t.scope, t.family, t.access_token_id, t.issued_at, t.expires_at, t.revoked, f.family IS NOT NULL,
    a.allowed_scopes, a.may_introspect, t.cnf_x5t_s256, a.may_use_ssf, t.audience, t.cnf_jkt
    FROM tokens t JOIN applications a ON a.id = t.application_id LEFT JOIN users u ON u.id = t.user_id
    LEFT JOIN revoked_families f ON f.family = t.family WHERE t.digest = $1";

fn token(row: &PgRow) -> sqlx::Result<TokenRecord> {
    Ok(TokenRecord {
        id: row.try_get(0)?,
        kind: TokenKind::parse(row.try_get::<&str, _>(1)?)
            .ok_or_else(|| sqlx::Error::Decode("unknown token kind".into()))?,
        application_id: row.try_get(2)?,
        client_id: row.try_get(3)?,
        user_id: row.try_get(4)?,
        username: row.try_get(5)?,
        user_active: row.try_get::<Option<i64>, _>(6)?.unwrap_or(0) != 0,
        scope: row.try_get(7)?,
        family: row.try_get(8)?,
        access_token_id: row.try_get(9)?,
        issued_at: row.try_get(10)?,
        expires_at: row.try_get(11)?,
        revoked: row.try_get::<i64, _>(12)? != 0 || row.try_get::<bool, _>(13)?,
        application_scopes: split_scopes(row.try_get(14)?),
        application_permissions: crate::domain::Permissions {
            introspect: row.try_get::<i64, _>(15)? != 0,
            ssf: row.try_get::<i64, _>(17)? != 0,
        },
        cnf_x5t_s256: row.try_get(16)?,
        audience: row.try_get(18)?,
        cnf_jkt: row.try_get(19)?,
    })
}

/// The token whose digest is `digest`, joined with what introspection reports.
pub(in crate::store) async fn find_token(
    pool: &PgPool,
    digest: &str,
) -> StoreResult<Option<TokenRecord>> {
    let row = sqlx::query(TOKEN).bind(digest).fetch_optional(pool).await?;
    Ok(row.as_ref().map(token).transpose()?)
}

/// One row, unless its family is revoked or its application gone (`tokens` keeps no foreign
/// key to `applications` on PostgreSQL: migration 16).
const INSERT_ONE: &str = "INSERT INTO tokens (kind, digest, application_id, user_id, scope, family, access_token_id, issued_at, expires_at, cnf_x5t_s256, audience, cnf_jkt)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12
    WHERE NOT EXISTS (SELECT 1 FROM revoked_families WHERE family = $6)
        AND EXISTS (SELECT 1 FROM applications WHERE id = $3) RETURNING id";

/// An access token and the refresh token naming it, in one statement, unless their family is
/// revoked or their application gone. Returns the access token's id.
const INSERT_PAIR: &str = "WITH access AS (
        INSERT INTO tokens (kind, digest, application_id, user_id, scope, family, access_token_id, issued_at, expires_at, cnf_x5t_s256, audience, cnf_jkt)
        SELECT $1, $2, $3, $4, $5, $6, NULL, $7, $8, $12, $13, $14
        WHERE NOT EXISTS (SELECT 1 FROM revoked_families WHERE family = $6)
            AND EXISTS (SELECT 1 FROM applications WHERE id = $3) RETURNING id),
    refresh AS (
        INSERT INTO tokens (kind, digest, application_id, user_id, scope, family, access_token_id, issued_at, expires_at, cnf_x5t_s256, audience, cnf_jkt)
        SELECT $9, $10, $3, $4, $5, $6, access.id, $7, $11, $12, $13, $14 FROM access RETURNING access_token_id)
    SELECT access_token_id FROM refresh";

/// Inserts one row, or an access token and its refresh token, unless the family is revoked or
/// the application gone (`FamilyRevoked`: [`crate::store::Store::issue_tokens`] tells which).
/// Returns the first row's id. On the tokens writer's connection, the commit does not wait for
/// the WAL flush (see above).
pub(in crate::store) async fn insert_tokens(
    conn: &mut sqlx::PgConnection,
    rows: &[NewRow],
) -> StoreResult<i64> {
    let id: Option<i64> = match rows {
        [one] => {
            sqlx::query_scalar(INSERT_ONE)
                .bind(one.kind.as_str())
                .bind(&one.digest)
                .bind(one.application_id)
                .bind(one.user_id)
                .bind(&one.scope)
                .bind(&one.family)
                .bind(one.access_token_id)
                .bind(one.issued_at)
                .bind(one.expires_at)
                .bind(&one.cnf_x5t_s256)
                .bind(&one.audience)
                .bind(&one.cnf_jkt)
                .fetch_optional(conn)
                .await?
        }
        [access, refresh] => {
            sqlx::query_scalar(INSERT_PAIR)
                .bind(access.kind.as_str())
                .bind(&access.digest)
                .bind(access.application_id)
                .bind(access.user_id)
                .bind(&access.scope)
                .bind(&access.family)
                .bind(access.issued_at)
                .bind(access.expires_at)
                .bind(refresh.kind.as_str())
                .bind(&refresh.digest)
                .bind(refresh.expires_at)
                .bind(&access.cnf_x5t_s256)
                .bind(&access.audience)
                .bind(&access.cnf_jkt)
                .fetch_optional(conn)
                .await?
        }
        _ => return Err(anyhow::anyhow!("one token or an access and refresh pair").into()),
    };
    id.ok_or(StoreError::FamilyRevoked)
}

/// Spends the refresh token `id` unless it is spent or its family revoked, and revokes its
/// access token in the same statement, announcing it ([`crate::store::bus::Change::Spent`]).
/// Whether this call spent it.
pub(in crate::store) async fn claim(conn: &mut sqlx::PgConnection, id: i64) -> StoreResult<bool> {
    let claimed: i64 = sqlx::query_scalar(concat!(
        "WITH claimed AS (
            UPDATE tokens SET revoked = 1 WHERE id = $1 AND revoked = 0
            AND NOT EXISTS (SELECT 1 FROM revoked_families f WHERE f.family = tokens.family)
            RETURNING access_token_id, family),
        spent AS (
            UPDATE tokens SET revoked = 1 WHERE id IN (SELECT access_token_id FROM claimed))
        SELECT COUNT(*) + 0 * (SELECT COUNT(",
        notify_spent!("$2", "family"),
        ") FROM claimed)
        FROM claimed",
    ))
    .bind(id)
    .bind(Channel::Tokens.base())
    .fetch_one(conn)
    .await?;
    Ok(claimed == 1)
}

/// Records the family as revoked and appends `event` to the revocation log, announcing it
/// ([`crate::store::bus::Change::Appended`]), in one statement: the event's id; None (and
/// nothing appended) when the family was revoked already.
pub(in crate::store) async fn revoke_family(
    pool: &PgPool,
    family: &str,
    at: i64,
    event: &crate::store::Revocation,
) -> StoreResult<Option<i64>> {
    let (event_type, format, subject) = crate::store::events::columns(event);
    let appended: Option<i64> = sqlx::query_scalar(concat!(
        "WITH revoked AS (
            INSERT INTO revoked_families (family, revoked_at) VALUES ($1, $2)
            ON CONFLICT (family) DO NOTHING RETURNING family),
        logged AS (
            INSERT INTO ssf_events (event_type, subject_format, subject, occurred_at)
            SELECT $3, $4, $5, $2 FROM revoked RETURNING id)
        SELECT (SELECT id FROM logged)
            + 0 * (SELECT COUNT(",
        notify_appended!("$6", "id", "$3", "$4", "$5"),
        ") FROM logged)",
    ))
    .bind(family)
    .bind(at)
    .bind(event_type)
    .bind(format)
    .bind(subject)
    .bind(Channel::Events.base())
    .fetch_one(pool)
    .await?;
    Ok(appended)
}

/// The user with this username, with their password hash.
pub(in crate::store) async fn user_with_password(
    pool: &PgPool,
    username: &str,
) -> StoreResult<Option<UserColumns>> {
    let row = sqlx::query(super::USER_WITH_PASSWORD)
        .bind(username)
        .fetch_optional(pool)
        .await?;
    let user = |row: &PgRow| -> sqlx::Result<UserColumns> {
        Ok(UserColumns {
            id: row.try_get(0)?,
            username: row.try_get(1)?,
            email: row.try_get(2)?,
            first_name: row.try_get(3)?,
            last_name: row.try_get(4)?,
            is_active: row.try_get(5)?,
            is_staff: row.try_get(6)?,
            is_superuser: row.try_get(7)?,
            date_joined: row.try_get(8)?,
            password_hash: row.try_get(9)?,
        })
    };
    Ok(row.as_ref().map(user).transpose()?)
}

/// Failures under each of two buckets since `since`.
pub(in crate::store) async fn login_failures(
    pool: &PgPool,
    buckets: [&str; 2],
    since: i64,
) -> StoreResult<[i64; 2]> {
    let row = sqlx::query(super::LOGIN_FAILURES)
        .bind(buckets[0])
        .bind(buckets[1])
        .bind(since)
        .fetch_one(pool)
        .await?;
    Ok([row.try_get(0)?, row.try_get(1)?])
}

fn application(row: &PgRow) -> sqlx::Result<ApplicationColumns> {
    Ok(ApplicationColumns {
        id: row.try_get(0)?,
        name: row.try_get(1)?,
        client_id: row.try_get(2)?,
        client_secret_digest: row.try_get(3)?,
        client_type: row.try_get(4)?,
        grant_type: row.try_get(5)?,
        redirect_uris: row.try_get(6)?,
        allowed_scopes: row.try_get(7)?,
        may_introspect: row.try_get(8)?,
        owner_id: row.try_get(9)?,
        created_at: row.try_get(10)?,
        pkce_required: row.try_get(11)?,
        token_format: row.try_get(12)?,
        tls_client_auth: row.try_get(13)?,
        may_use_ssf: row.try_get(14)?,
        previous_secret_digest: row.try_get(15)?,
        previous_secret_expires_at: row.try_get(16)?,
        dpop_required: row.try_get(17)?,
    })
}

pub(in crate::store) async fn application_by_client_id(
    pool: &PgPool,
    client_id: &str,
) -> StoreResult<Option<ApplicationColumns>> {
    let row = sqlx::query(super::APPLICATION_BY_CLIENT_ID)
        .bind(client_id)
        .fetch_optional(pool)
        .await?;
    Ok(row.as_ref().map(application).transpose()?)
}

pub(in crate::store) async fn application_by_id(
    pool: &PgPool,
    id: i64,
) -> StoreResult<Option<ApplicationColumns>> {
    let row = sqlx::query(super::APPLICATION_BY_ID)
        .bind(id)
        .fetch_optional(pool)
        .await?;
    Ok(row.as_ref().map(application).transpose()?)
}

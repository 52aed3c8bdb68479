//! The hot writes on PostgreSQL in groups ([`super::group_writer`]): one writer task each for new
//! tokens, refresh-token claims and the password throttle, each group one multi-row statement
//! (one round trip, one commit). Each caller still gets its own result: a token whose family is
//! revoked, or a claim another caller of the group won, fails alone. When a group's statement
//! fails as a whole (a foreign key to a deleted user, a unique violation, a NUL in a value), its
//! writes are retried one by one with the single statements, so only the failing one fails.
//!
//! Durability is what it was one statement at a time: new tokens commit without waiting for the
//! WAL flush (see [`super::postgres`]), on a connection of their own whose session has
//! `synchronous_commit` off from its start (no statement sets it); claims and throttle writes
//! wait for the WAL flush. No caller is answered before its group has committed.
//!
//! A writer commits one group at a time, so one connection serves it, held from one group to the
//! next ([`HeldConnection`]): the same PostgreSQL backend runs every group (its caches stay warm),
//! no group waits for a pool, and none pays the round trip sqlx's pool makes on every connection
//! given back to it (a `Sync` and its `ReadyForQuery`). The tokens writer's connection is its own
//! ([`tokens_connection`]); the claims and throttle writers hold one of the hot pool's each.

use super::group_writer::{GroupWriter, WriterKind};
use super::{NewRow, postgres};
use crate::store::StoreResult;
use crate::store::bus::{Channel, notify_spent};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPoolOptions};
use sqlx::{Connection, PgPool, Postgres, Row};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The PostgreSQL pool of the hot statements, with the writer tasks that group its writes.
pub(in crate::store) struct PgHot {
    pub pool: PgPool,
    tokens: GroupWriter<Vec<NewRow>, i64>,
    claims: GroupWriter<i64, bool>,
    throttle: GroupWriter<ThrottleWrite, ()>,
}

/// Reads go to the pool as before.
impl std::ops::Deref for PgHot {
    type Target = PgPool;

    fn deref(&self) -> &PgPool {
        &self.pool
    }
}

/// A write of the password throttle ([`crate::throttle`]).
#[derive(Debug, Clone)]
pub(in crate::store) enum ThrottleWrite {
    /// One failure under each bucket at `at`; failures at or before `expired` are forgotten.
    Failed {
        buckets: Vec<String>,
        at: i64,
        expired: i64,
    },
    /// The failures of one bucket are forgotten.
    Cleared { bucket: String },
}

impl PgHot {
    /// Starts the writer tasks over `pool`, each holding a connection; the tokens writer's is of
    /// its own, to the same database ([`tokens_connection`]).
    pub(in crate::store) fn new(pool: PgPool) -> PgHot {
        PgHot {
            tokens: HeldConnection::writer(WriterKind::Tokens, tokens_connection(&pool), |c, g| {
                Box::pin(insert_token_group(c, g))
            }),
            claims: HeldConnection::writer(WriterKind::RefreshClaims, pool.clone(), |c, g| {
                Box::pin(claim_group(c, g))
            }),
            throttle: HeldConnection::writer(WriterKind::Throttle, pool.clone(), |c, g| {
                Box::pin(throttle_group(c, g))
            }),
            pool,
        }
    }

    /// [`postgres::insert_tokens`], in the tokens writer's next group.
    pub(in crate::store) async fn insert_tokens(&self, rows: Vec<NewRow>) -> StoreResult<i64> {
        self.tokens.write(rows).await
    }

    /// [`postgres::claim`], in the claims writer's next group.
    pub(in crate::store) async fn claim(&self, id: i64) -> StoreResult<bool> {
        self.claims.write(id).await
    }

    /// A throttle write, in the throttle writer's next group.
    pub(in crate::store) async fn throttle(&self, write: ThrottleWrite) -> StoreResult<()> {
        self.throttle.write(write).await
    }
}

/// The `application_name` of the tokens writer's connection (operators find it in
/// `pg_stat_activity`).
pub const TOKENS_WRITER_NAME: &str = "tokengate-tokens-writer";

/// The tokens writer's connection (a pool of one, opened at its first group, reopened when lost):
/// `pool`'s settings, with `synchronous_commit` off for the session from its start, a startup
/// option (no round trip of its own). Never idle in its pool: [`HeldConnection`] pings it.
fn tokens_connection(pool: &PgPool) -> PgPool {
    let options = (*pool.connect_options())
        .clone()
        .application_name(TOKENS_WRITER_NAME)
        .options([("synchronous_commit", "off")]);
    PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(pool.options().get_acquire_timeout())
        .test_before_acquire(false)
        .connect_lazy_with(options)
}

/// A writer's commit of one group on a connection: one result per job, in order.
type Commit<J, R> = for<'c> fn(
    &'c mut PgConnection,
    Vec<J>,
) -> Pin<Box<dyn Future<Output = Vec<StoreResult<R>>> + Send + 'c>>;

/// A connection taken from a pool once and kept from one group to the next (a writer task
/// commits one group at a time). It goes back to the pool, which closes it when broken, after a
/// group saw it fail; the next group takes another. One idle for [`crate::store::PING_AFTER_IDLE`]
/// is pinged first, as the pools do, and one held for its pool's `max_lifetime` is closed after its
/// group (the pool never sees it age, so it would not).
struct HeldConnection {
    pool: PgPool,
    /// How long a connection is held before it is closed and replaced.
    lifetime: Duration,
    held: tokio::sync::Mutex<Option<Held>>,
}

/// The held connection, with when it was last used and when it was taken.
struct Held {
    conn: PoolConnection<Postgres>,
    last_used: Instant,
    taken: Instant,
}

impl HeldConnection {
    fn new(pool: PgPool, lifetime: Duration) -> HeldConnection {
        HeldConnection {
            pool,
            lifetime,
            held: tokio::sync::Mutex::new(None),
        }
    }

    /// The held connection (pinged first after a long idle spell, within the pools' acquire
    /// timeout), or a new one from the pool.
    async fn take(
        &self,
        held: &mut Option<Held>,
    ) -> sqlx::Result<(PoolConnection<Postgres>, Instant)> {
        if let Some(Held {
            mut conn,
            last_used,
            taken,
        }) = held.take()
        {
            if last_used.elapsed() <= crate::store::PING_AFTER_IDLE
                || tokio::time::timeout(self.pool.options().get_acquire_timeout(), conn.ping())
                    .await
                    .is_ok_and(|pinged| pinged.is_ok())
            {
                return Ok((conn, taken));
            }
            // Gone: closed here, not handed back to a pool that would ping it again.
            drop(conn.detach());
        }
        Ok((self.pool.acquire().await?, Instant::now()))
    }

    /// A writer task committing each group with `commit` on a connection of `pool` it holds.
    fn writer<J: Send + 'static, R: Send + 'static>(
        kind: WriterKind,
        pool: PgPool,
        commit: Commit<J, R>,
    ) -> GroupWriter<J, R> {
        // Held, from when it was taken, as long as its pool lets a connection live: a backend's
        // memory, a failover's new address or a changed setting is picked up as in the pool.
        let lifetime = pool.options().get_max_lifetime().unwrap_or(Duration::MAX);
        let held = Arc::new(HeldConnection::new(pool, lifetime));
        GroupWriter::spawn(kind, move |group| {
            let held = held.clone();
            async move { held.run(group, commit).await }
        })
    }

    /// `commit(connection, jobs)` on the held connection: an error for each job when there is
    /// none to be had.
    async fn run<J, R>(&self, jobs: Vec<J>, commit: Commit<J, R>) -> Vec<StoreResult<R>> {
        let mut held = self.held.lock().await;
        let (mut conn, taken) = match self.take(&mut held).await {
            Ok(taken) => taken,
            Err(error) => return every_job_failed(error, jobs.len()),
        };
        let results = commit(&mut conn, jobs).await;
        if results.iter().any(connection_failed) {
            return results;
        }
        if taken.elapsed() < self.lifetime {
            *held = Some(Held {
                conn,
                last_used: Instant::now(),
                taken,
            });
        } else {
            // In the background: the group's callers are not kept waiting for the goodbye.
            let wait = self.pool.options().get_acquire_timeout();
            tokio::spawn(async move {
                let closing = tokio::time::timeout(wait, conn.close());
                if let Ok(Err(error)) = closing.await {
                    tracing::debug!(%error, "closing a writer's connection at the end of its lifetime");
                }
            });
        }
        results
    }
}

/// Whether the connection failed (not a statement: the database's own refusal).
fn connection_failed<R>(result: &StoreResult<R>) -> bool {
    matches!(result, Err(crate::store::StoreError::Database(error)) if broken(error))
}

/// Whether `error` ended the connection: anything but the database's answer, or its answer of
/// FATAL or PANIC severity (a backend terminated by an administrator, a server shutting down),
/// after which the backend is gone.
fn broken(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(answer) => answer
            .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
            .is_some_and(|answer| {
                matches!(
                    answer.severity(),
                    sqlx::postgres::PgSeverity::Fatal | sqlx::postgres::PgSeverity::Panic
                )
            }),
        _ => true,
    }
}

/// The answers of a group that failed as a whole for want of a connection: `error` for the
/// first job (which tells [`HeldConnection::run`] to let the connection go) and a note of it for
/// the others. No job is retried on a connection that is gone, and a claim that may have
/// committed before the connection broke is never made again (it would read as a reuse).
fn every_job_failed<R>(error: sqlx::Error, jobs: usize) -> Vec<StoreResult<R>> {
    let note = format!("a group writer's connection failed: {error}");
    let mut results = vec![Err(error.into())];
    results.extend((1..jobs).map(|_| Err(anyhow::anyhow!("{note}").into())));
    results
}

/// A group's answers from its one statement (`together`, when `group` says to try it); when that
/// statement fails for what it holds rather than for the connection, each job `alone` (the
/// single statement), so that only the job the database refuses fails. A broken connection, or
/// a group of one, fails every job with the statement's error ([`every_job_failed`]).
async fn together_or_one_by_one<J, R>(
    conn: &mut PgConnection,
    jobs: Vec<J>,
    group: bool,
    what: &str,
    together: impl AsyncFnOnce(&mut PgConnection, &[J]) -> sqlx::Result<Vec<StoreResult<R>>>,
    mut alone: impl AsyncFnMut(&mut PgConnection, J) -> StoreResult<R>,
) -> Vec<StoreResult<R>> {
    if group {
        match together(&mut *conn, &jobs).await {
            Ok(results) => return results,
            Err(error) if broken(&error) || jobs.len() == 1 => {
                return every_job_failed(error, jobs.len());
            }
            Err(error) => {
                tracing::debug!(%error, size = jobs.len(), "a group of {what} failed: one by one");
            }
        }
    }
    let mut results = Vec::with_capacity(jobs.len());
    for job in jobs {
        results.push(alone(&mut *conn, job).await);
    }
    results
}

/// Tokens of many issues in one statement: each issue's first row (an access token, or a lone
/// token), and its second (the refresh token naming the first) when it has one, each issue
/// unless its family is revoked. Returns the first rows' digests and ids.
const INSERT_GROUP: &str = "WITH issue AS (
        SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[], $5::text[], $6::text[],
            $7::int8[], $8::int8[], $9::int8[], $10::text[], $11::text[], $12::text[], $13::text[], $14::int8[],
            $15::text[])
        AS i(kind, digest, application_id, user_id, scope, family, access_token_id, issued_at,
            expires_at, cnf_x5t_s256, audience, second_kind, second_digest, second_expires_at, cnf_jkt)),
    first AS (
        INSERT INTO tokens (kind, digest, application_id, user_id, scope, family, access_token_id, issued_at, expires_at, cnf_x5t_s256, audience, cnf_jkt)
        SELECT kind, digest, application_id, user_id, scope, family, access_token_id, issued_at, expires_at, cnf_x5t_s256, audience, cnf_jkt
        FROM issue WHERE NOT EXISTS (SELECT 1 FROM revoked_families f WHERE f.family = issue.family)
            AND EXISTS (SELECT 1 FROM applications a WHERE a.id = issue.application_id)
        RETURNING id, digest),
    second AS (
        INSERT INTO tokens (kind, digest, application_id, user_id, scope, family, access_token_id, issued_at, expires_at, cnf_x5t_s256, audience, cnf_jkt)
        SELECT i.second_kind, i.second_digest, i.application_id, i.user_id, i.scope, i.family, first.id, i.issued_at, i.second_expires_at, i.cnf_x5t_s256, i.audience, i.cnf_jkt
        FROM issue i JOIN first ON first.digest = i.digest WHERE i.second_digest IS NOT NULL)
    SELECT digest, id FROM first";

/// Lone tokens of new families (client_credentials) in one statement: none can be revoked, so
/// no family is looked up (only the application, which may be gone), and no second rows.
/// Returns their digests and ids.
const INSERT_NEW_FAMILIES: &str = "INSERT INTO tokens (kind, digest, application_id, user_id, scope, family, access_token_id, issued_at, expires_at, cnf_x5t_s256, audience, cnf_jkt)
    SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[], $5::text[], $6::text[],
        $7::int8[], $8::int8[], $9::int8[], $10::text[], $11::text[], $12::text[])
        AS i(kind, digest, application_id, user_id, scope, family, access_token_id, issued_at,
            expires_at, cnf_x5t_s256, audience, cnf_jkt)
    WHERE EXISTS (SELECT 1 FROM applications a WHERE a.id = i.application_id)
    RETURNING digest, id";

/// Inserts each issue's rows (one token, or an access token and its refresh token): the first
/// row's id for each, or its own error (`FamilyRevoked` when its family is revoked).
pub(in crate::store) async fn insert_token_group(
    conn: &mut PgConnection,
    issues: Vec<Vec<NewRow>>,
) -> Vec<StoreResult<i64>> {
    let group = issues.len() > 1 && issues.iter().all(|rows| matches!(rows.len(), 1 | 2));
    together_or_one_by_one(
        conn,
        issues,
        group,
        "tokens",
        async |conn, issues| Ok(answers(issues, &insert_statement(conn, issues).await?)),
        async |conn, rows| postgres::insert_tokens(conn, &rows).await,
    )
    .await
}

/// Each issue's answer from the ids [`INSERT_GROUP`] returned: an issue not inserted was into a
/// revoked family, or for an application since deleted (`FamilyRevoked` either way:
/// [`crate::store::Store::issue_tokens`] tells which).
fn answers(issues: &[Vec<NewRow>], ids: &HashMap<String, i64>) -> Vec<StoreResult<i64>> {
    issues
        .iter()
        .map(|rows| {
            ids.get(&rows[0].digest)
                .copied()
                .ok_or(crate::store::StoreError::FamilyRevoked)
        })
        .collect()
}

/// [`INSERT_NEW_FAMILIES`] when every issue is a lone token of a new family, else
/// [`INSERT_GROUP`].
fn group_statement(issues: &[Vec<NewRow>]) -> &'static str {
    if issues
        .iter()
        .all(|rows| rows.len() == 1 && rows[0].new_family)
    {
        INSERT_NEW_FAMILIES
    } else {
        INSERT_GROUP
    }
}

/// [`group_statement`] for `issues`: the digests of the first rows inserted, with their ids.
async fn insert_statement(
    conn: &mut PgConnection,
    issues: &[Vec<NewRow>],
) -> sqlx::Result<HashMap<String, i64>> {
    // The columns borrow the rows: nothing is copied but into the statement's arguments.
    let column = |f: for<'a> fn(&'a [NewRow]) -> Option<&'a str>| -> Vec<Option<&str>> {
        issues.iter().map(|rows| f(rows)).collect()
    };
    let number = |f: fn(&[NewRow]) -> Option<i64>| -> Vec<Option<i64>> {
        issues.iter().map(|rows| f(rows)).collect()
    };
    let statement = group_statement(issues);
    let mut query = sqlx::query(statement)
        .bind(column(|r| Some(r[0].kind.as_str())))
        .bind(column(|r| Some(&r[0].digest)))
        .bind(number(|r| Some(r[0].application_id)))
        .bind(number(|r| r[0].user_id))
        .bind(column(|r| Some(&r[0].scope)))
        .bind(column(|r| Some(&r[0].family)))
        .bind(number(|r| r[0].access_token_id))
        .bind(number(|r| Some(r[0].issued_at)))
        .bind(number(|r| Some(r[0].expires_at)))
        .bind(column(|r| r[0].cnf_x5t_s256.as_deref()))
        .bind(column(|r| r[0].audience.as_deref()));
    if statement == INSERT_GROUP {
        query = query
            .bind(column(|r| r.get(1).map(|s| s.kind.as_str())))
            .bind(column(|r| r.get(1).map(|s| s.digest.as_str())))
            .bind(number(|r| r.get(1).map(|s| s.expires_at)));
    }
    // The last parameter of either statement.
    query = query.bind(column(|r| r[0].cnf_jkt.as_deref()));
    let inserted = query.fetch_all(conn).await?;
    inserted
        .iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
        .collect()
}

/// Spends the refresh tokens `ids` (as [`postgres::claim`] does each): whether each call spent
/// its token. Of calls in one group naming the same token, only the first spends it. Each spent
/// family is announced to the token caches, as [`postgres::claim`] does.
const CLAIM_GROUP: &str = concat!(
    "WITH claimed AS (
        UPDATE tokens SET revoked = 1 WHERE id = ANY($1) AND revoked = 0
        AND NOT EXISTS (SELECT 1 FROM revoked_families f WHERE f.family = tokens.family)
        RETURNING id, access_token_id, family),
    spent AS (
        UPDATE tokens SET revoked = 1 WHERE id IN (SELECT access_token_id FROM claimed))
    SELECT id FROM claimed,
        (SELECT COUNT(",
    notify_spent!("$2", "family"),
    ") FROM claimed) AS announced"
);

/// Claims each refresh token: whether that call spent it (a token named twice in the group is
/// spent by its first call only, as two calls one after the other would be).
pub(in crate::store) async fn claim_group(
    conn: &mut PgConnection,
    ids: Vec<i64>,
) -> Vec<StoreResult<bool>> {
    let group = ids.len() > 1;
    together_or_one_by_one(
        conn,
        ids,
        group,
        "claims",
        async |conn, ids| {
            let claimed: Vec<i64> = sqlx::query_scalar(CLAIM_GROUP)
                .bind(ids)
                .bind(Channel::Tokens.base())
                .fetch_all(conn)
                .await?;
            let mut unspent: std::collections::HashSet<i64> = claimed.into_iter().collect();
            Ok(ids.iter().map(|id| Ok(unspent.remove(id))).collect())
        },
        async |conn, id| postgres::claim(conn, id).await,
    )
    .await
}

/// The throttle's writes of a group: forgets the failures of the cleared buckets and those
/// expired, then records the new failures.
const THROTTLE_GROUP: &str = "WITH forgotten AS (
        DELETE FROM login_failures WHERE bucket = ANY($1) OR failed_at <= $2)
    INSERT INTO login_failures (bucket, failed_at) SELECT * FROM unnest($3::text[], $4::int8[])";

/// The throttle's writes, in one statement (each alone, as the cold path wrote them, when it
/// fails).
pub(in crate::store) async fn throttle_group(
    conn: &mut PgConnection,
    writes: Vec<ThrottleWrite>,
) -> Vec<StoreResult<()>> {
    together_or_one_by_one(
        conn,
        writes,
        true,
        "throttle writes",
        async |conn, writes| {
            throttle_statement(conn, writes).await?;
            Ok(writes.iter().map(|_| Ok(())).collect())
        },
        async |conn, write| Ok(throttle_statement(conn, &[write]).await?),
    )
    .await
}

/// [`THROTTLE_GROUP`] for `writes`.
async fn throttle_statement(conn: &mut PgConnection, writes: &[ThrottleWrite]) -> sqlx::Result<()> {
    let mut cleared = Vec::new();
    let mut expired = None;
    let (mut buckets, mut failed_at) = (Vec::new(), Vec::new());
    for write in writes {
        match write {
            ThrottleWrite::Failed {
                buckets: failed,
                at,
                expired: before,
            } => {
                expired = expired.max(Some(*before));
                buckets.extend(failed.iter().cloned());
                failed_at.extend(failed.iter().map(|_| *at));
            }
            ThrottleWrite::Cleared { bucket } => cleared.push(bucket.clone()),
        }
    }
    sqlx::query(THROTTLE_GROUP)
        .bind(&cleared)
        .bind(expired)
        .bind(&buckets)
        .bind(&failed_at)
        .execute(conn)
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets;
    use crate::store::{GrantType, Hot, Store, StoreError, TokenKind};

    /// A PostgreSQL store (when `DATABASE_URL` names one), its pool, and an application's id.
    async fn postgres() -> Option<(Store, PgPool, i64)> {
        let store = crate::testing::postgres_store().await?;
        let Hot::Postgres(pg) = &store.hot else {
            panic!("a PostgreSQL store");
        };
        let pool = pg.pool.clone();
        let (client_id, _) =
            crate::testing::application(&store, GrantType::ClientCredentials, false).await;
        let application = store.find_application_by_client_id(&client_id).await;
        let id = application.unwrap().unwrap().id;
        Some((store, pool, id))
    }

    /// A lone access token, or an access token and its refresh token, of `application_id`.
    fn issue(application_id: i64, family: &str, with_refresh: bool) -> Vec<NewRow> {
        let access = NewRow {
            kind: TokenKind::Access,
            digest: secrets::digest(&secrets::random_token()),
            application_id,
            user_id: None,
            scope: "read".into(),
            family: family.into(),
            new_family: false,
            access_token_id: None,
            issued_at: crate::store::now(),
            expires_at: crate::store::now() + 600,
            cnf_x5t_s256: None,
            cnf_jkt: None,
            audience: None,
        };
        let mut rows = vec![access.clone()];
        if with_refresh {
            rows.push(NewRow {
                kind: TokenKind::Refresh,
                digest: secrets::digest(&secrets::random_token()),
                expires_at: access.expires_at + 3600,
                ..access
            });
        }
        rows
    }

    /// The stored row of `digest`: its id, kind, and the access token it names.
    async fn stored(pool: &PgPool, digest: &str) -> Option<(i64, String, Option<i64>)> {
        sqlx::query_as("SELECT id, kind, access_token_id FROM tokens WHERE digest = $1")
            .bind(digest)
            .fetch_optional(pool)
            .await
            .unwrap()
    }

    /// Each issue that succeeded is stored as it should be (a pair naming its access token);
    /// each that failed stored nothing.
    async fn assert_stored_as_answered(
        pool: &PgPool,
        issues: &[Vec<NewRow>],
        results: &[StoreResult<i64>],
    ) {
        assert_eq!(issues.len(), results.len());
        for (rows, result) in issues.iter().zip(results) {
            let first = stored(pool, &rows[0].digest).await;
            let second = match rows.get(1) {
                Some(row) => stored(pool, &row.digest).await,
                None => None,
            };
            match result {
                Ok(id) => {
                    assert_eq!(first.as_ref().map(|r| r.0), Some(*id));
                    assert_eq!(first.unwrap().1, "access");
                    if rows.len() == 2 {
                        let (_, kind, names) = second.expect("the refresh token is stored");
                        assert_eq!((kind.as_str(), names), ("refresh", Some(*id)));
                    }
                }
                Err(_) => assert!(first.is_none() && second.is_none(), "nothing stored"),
            }
        }
    }

    /// A writer's commit that answers each job, a query of one text value, with that value.
    fn ask<'c>(
        conn: &'c mut PgConnection,
        queries: Vec<&'static str>,
    ) -> Pin<Box<dyn Future<Output = Vec<StoreResult<String>>> + Send + 'c>> {
        Box::pin(async move {
            let mut results = Vec::new();
            for query in queries {
                let answer = sqlx::query_scalar(query).fetch_one(&mut *conn).await;
                results.push(answer.map_err(Into::into));
            }
            results
        })
    }

    #[tokio::test]
    async fn only_the_tokens_writer_commits_without_waiting_for_the_wal_flush() {
        let Some((_store, pool, _)) = postgres().await else {
            return;
        };
        let setting = "SHOW synchronous_commit";
        let tokens = HeldConnection::writer(WriterKind::Tokens, tokens_connection(&pool), ask);
        assert_eq!(tokens.write(setting).await.unwrap(), "off");
        let name = tokens
            .write("SELECT current_setting('application_name')")
            .await;
        assert_eq!(name.unwrap(), TOKENS_WRITER_NAME);
        let claims = HeldConnection::writer(WriterKind::RefreshClaims, pool.clone(), ask);
        assert_eq!(claims.write(setting).await.unwrap(), "on");
    }

    #[tokio::test]
    async fn a_writer_whose_backend_is_terminated_fails_one_group_then_takes_a_new_connection() {
        let Some((_store, pool, _)) = postgres().await else {
            return;
        };
        let pid = "SELECT pg_backend_pid()::text";
        let writer = HeldConnection::writer(WriterKind::Tokens, pool.clone(), ask);
        let first = writer.write(pid).await.unwrap();
        assert_eq!(
            writer.write(pid).await.unwrap(),
            first,
            "the connection is held"
        );
        let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1::int)")
            .bind(first.parse::<i32>().unwrap())
            .fetch_one(&pool)
            .await
            .unwrap();
        assert!(terminated);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        // The group that finds the backend gone fails (PostgreSQL's FATAL answer, or the closed
        // socket); the connection is let go, so the next group runs on a new backend.
        assert!(writer.write(pid).await.is_err());
        let next = writer.write(pid).await.expect("a new connection");
        assert_ne!(next, first);
    }

    #[tokio::test]
    async fn a_held_connection_is_closed_at_the_end_of_its_lifetime() {
        let Some((_store, pool, _)) = postgres().await else {
            return;
        };
        let backend_of = async |held: &HeldConnection| {
            let mut answers = held.run(vec!["SELECT pg_backend_pid()::text"], ask).await;
            answers.remove(0).unwrap()
        };
        let lasting = HeldConnection::new(pool.clone(), Duration::from_secs(3600));
        let first = backend_of(&lasting).await;
        assert_eq!(
            backend_of(&lasting).await,
            first,
            "held within its lifetime"
        );
        let brief = HeldConnection::new(pool.clone(), Duration::ZERO);
        let spent = backend_of(&brief).await;
        assert_ne!(
            backend_of(&brief).await,
            spent,
            "replaced after its lifetime"
        );
        // Closed, not handed back to the pool (whose own lifetime would not have run out).
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let alive: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1::int)",
            )
            .bind(&spent)
            .fetch_one(&pool)
            .await
            .unwrap();
            if !alive {
                break;
            }
            assert!(Instant::now() < deadline, "backend {spent} still connected");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn an_issue_into_a_revoked_family_fails_alone_in_its_group() {
        let Some((store, pool, app)) = postgres().await else {
            return;
        };
        assert!(store.revoke_family("revoked-family").await.unwrap());
        let group = || {
            vec![
                issue(app, "family-a", true),
                issue(app, "revoked-family", true),
                issue(app, "family-b", false),
                issue(app, "revoked-family", false),
            ]
        };
        // The group's statement itself (no one-by-one retry), then through the writer's entry.
        let mut conn = pool.acquire().await.unwrap();
        let issues = group();
        let ids = insert_statement(&mut conn, &issues)
            .await
            .expect("one statement");
        let results = answers(&issues, &ids);
        assert_eq!(ids.len(), 2);
        assert_answers(&pool, &issues, &results).await;
        let issues = group();
        let results = insert_token_group(&mut conn, issues.clone()).await;
        assert_answers(&pool, &issues, &results).await;
    }

    /// Issues 0 and 2 are answered with their ids, 1 and 3 refused, as stored.
    async fn assert_answers(pool: &PgPool, issues: &[Vec<NewRow>], results: &[StoreResult<i64>]) {
        assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
        for i in [1, 3] {
            assert!(
                matches!(results[i], Err(StoreError::FamilyRevoked)),
                "{results:?}"
            );
        }
        assert_stored_as_answered(pool, issues, results).await;
    }

    #[tokio::test]
    async fn lone_tokens_of_new_families_are_inserted_without_the_revocation_lookup() {
        let Some((store, pool, app)) = postgres().await else {
            return;
        };
        let new_family = |family: &str| {
            let mut rows = issue(app, family, false);
            rows[0].new_family = true;
            rows
        };
        let mut conn = pool.acquire().await.unwrap();
        // All lone and new: INSERT_NEW_FAMILIES, every one stored.
        let issues = vec![
            new_family("new-a"),
            new_family("new-b"),
            new_family("new-c"),
        ];
        assert_eq!(group_statement(&issues), INSERT_NEW_FAMILIES);
        let ids = insert_statement(&mut conn, &issues)
            .await
            .expect("one statement");
        assert_eq!(ids.len(), 3);
        assert_stored_as_answered(&pool, &issues, &answers(&issues, &ids)).await;
        // With an issue continuing a revoked family, the group takes INSERT_GROUP: that one
        // alone is refused.
        assert!(store.revoke_family("revoked-too").await.unwrap());
        let issues = vec![new_family("new-d"), issue(app, "revoked-too", false)];
        assert_eq!(group_statement(&issues), INSERT_GROUP);
        the_second_alone_is_refused(&mut conn, &pool, issues).await;
        // No lookup at all: a family flagged new is stored even where a revoked one of its name
        // exists (which a family drawn at random never meets).
        assert!(store.revoke_family("new-but-revoked").await.unwrap());
        let issues = vec![new_family("new-e"), new_family("new-but-revoked")];
        assert_eq!(group_statement(&issues), INSERT_NEW_FAMILIES);
        let ids = insert_statement(&mut conn, &issues)
            .await
            .expect("one statement");
        assert_eq!(ids.len(), 2, "no revocation lookup");
        // A deleted application's (no foreign key on PostgreSQL) is inserted by neither
        // statement, and refused alone.
        let mut gone_new = issue(i64::MAX, "new-gone", false);
        gone_new[0].new_family = true;
        let gone = issue(i64::MAX, "gone", true);
        for issues in [
            vec![new_family("new-f"), gone_new],
            vec![issue(app, "group-g", true), gone],
        ] {
            the_second_alone_is_refused(&mut conn, &pool, issues).await;
        }
    }

    /// Writes a group of two issues: the first is stored, the second refused (`FamilyRevoked`)
    /// and stored nowhere.
    async fn the_second_alone_is_refused(
        conn: &mut PgConnection,
        pool: &PgPool,
        issues: Vec<Vec<NewRow>>,
    ) {
        let results = insert_token_group(conn, issues.clone()).await;
        assert!(results[0].is_ok(), "{results:?}");
        assert!(
            matches!(results[1], Err(StoreError::FamilyRevoked)),
            "{results:?}"
        );
        assert_stored_as_answered(pool, &issues, &results).await;
    }

    #[tokio::test]
    async fn a_group_whose_statement_fails_answers_each_issue_its_own() {
        let Some((_store, pool, app)) = postgres().await else {
            return;
        };
        // A NUL in the scope fails the group's statement; the others are then written one by
        // one and succeed, but for that of a deleted application (no foreign key on PostgreSQL:
        // the statement inserts nothing, as for a revoked family).
        let mut nul = issue(app, "family-nul", false);
        nul[0].scope = "read\0".into();
        let issues = vec![
            issue(app, "family-c", true),
            issue(i64::MAX, "family-gone", true),
            issue(app, "family-d", false),
            nul,
            issue(app, "family-e", true),
        ];
        let mut conn = pool.acquire().await.unwrap();
        let results = insert_token_group(&mut conn, issues.clone()).await;
        for i in [0, 2, 4] {
            assert!(results[i].is_ok(), "{i}: {results:?}");
        }
        assert!(
            matches!(results[1], Err(StoreError::FamilyRevoked)),
            "{results:?}"
        );
        assert!(
            matches!(results[3], Err(StoreError::UnstorableText)),
            "{results:?}"
        );
        assert_stored_as_answered(&pool, &issues, &results).await;
    }

    #[tokio::test]
    async fn a_refresh_token_claimed_twice_in_one_group_is_spent_once() {
        let Some((_store, pool, app)) = postgres().await else {
            return;
        };
        let issues = vec![
            issue(app, "family-f", true),
            issue(app, "family-g", true),
            issue(app, "family-h", true),
        ];
        let mut conn = pool.acquire().await.unwrap();
        let results = insert_token_group(&mut conn, issues.clone()).await;
        let mut refresh_ids = Vec::new();
        for rows in &issues {
            refresh_ids.push(stored(&pool, &rows[1].digest).await.unwrap().0);
        }
        let [f, g, h] = refresh_ids[..] else {
            unreachable!()
        };
        // The group's statement itself (no one-by-one retry) spends a token named twice once.
        let spent: Vec<i64> = sqlx::query_scalar(CLAIM_GROUP)
            .bind(vec![h, h])
            .bind(Channel::Tokens.base())
            .fetch_all(&pool)
            .await
            .expect("one statement");
        assert_eq!(spent, [h]);
        let claims = claim_group(&mut conn, vec![f, f, g, f, i64::MAX]).await;
        let claims: Vec<bool> = claims.into_iter().map(Result::unwrap).collect();
        assert_eq!(claims, [true, false, true, false, false]);
        // Their access tokens are revoked with them; a later group spends nothing.
        for id in results.iter().map(|r| *r.as_ref().unwrap()).take(2) {
            let revoked: i64 = sqlx::query_scalar("SELECT revoked FROM tokens WHERE id = $1")
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap();
            assert_eq!(revoked, 1);
        }
        let again = claim_group(&mut conn, vec![g, f]).await;
        assert!(again.iter().all(|c| matches!(c, Ok(false))), "{again:?}");
    }

    #[tokio::test]
    async fn throttle_writes_of_a_group_each_take_effect() {
        let Some((store, pool, _)) = postgres().await else {
            return;
        };
        let at = crate::store::now();
        let failed = |bucket: &str| ThrottleWrite::Failed {
            buckets: vec![bucket.into(), "addr:shared".into()],
            at,
            expired: at - 900,
        };
        let seeded = [failed("login:cleared"), failed("login:seeded")];
        let mut conn = pool.acquire().await.unwrap();
        throttle_statement(&mut conn, &seeded)
            .await
            .expect("the group's statement itself");
        let results = throttle_group(
            &mut conn,
            vec![
                failed("login:a"),
                ThrottleWrite::Cleared {
                    bucket: "login:cleared".into(),
                },
                failed("login:a\0"),
                failed("login:b"),
            ],
        )
        .await;
        assert!(
            matches!(results[2], Err(StoreError::UnstorableText)),
            "{results:?}"
        );
        for i in [0, 1, 3] {
            assert!(results[i].is_ok(), "{i}: {results:?}");
        }
        let count = |buckets: [&'static str; 2]| {
            let store = store.clone();
            async move { store.count_login_failures(buckets, 900).await.unwrap() }
        };
        assert_eq!(count(["login:a", "addr:shared"]).await, [1, 4]);
        assert_eq!(count(["login:seeded", "login:b"]).await, [1, 1]);
        assert_eq!(count(["login:b", "login:cleared"]).await, [1, 0]);
    }
}

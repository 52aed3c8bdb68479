//! The revocation event log (issue 24): every change that ends tokens appends its event here in
//! the transaction of the change itself, and the SSF poll streams read it (`crate::oauth::ssf`).
//!
//! `ssf_events` is ordered by its id. A stream delivers the events after `after_event` (the
//! newest when it was created) that it has not acknowledged (`ssf_acks`): nothing is dropped by
//! a poll that never reached its receiver, and an event that commits after a later-numbered one
//! (two PostgreSQL replicas) is still delivered, since no cursor moves past it.
//!
//! Waiting polls are woken by [`EventBell`]: every appended event is a change of the bus
//! ([`super::bus::Change::Appended`]), delivered in process after its commit and, on PostgreSQL,
//! to every replica's listener. A lost notification delays delivery until the poll's own
//! timeout, when the log is read again.

use super::{Store, StoreResult, now};
use crate::secrets;
use sqlx::Row;
use std::sync::Arc;
use tokio::sync::Notify;

/// What ended, and whose tokens: one logged event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revocation {
    /// One token family (RFC 7009 revocation, refresh-token or authorization-code reuse), by the
    /// `jti` its access tokens and introspection answers carry ([`family_jti`]).
    Family { jti: String },
    /// Every token of a user: deactivated or deleted. `sub` as tokens carry it.
    User { sub: String },
    /// Every token of a user, because their password changed.
    Password { sub: String },
    /// Every token of an application: deleted, or it lost a scope or the introspection
    /// permission.
    Client { client_id: String },
    /// A user's tokens of one application: the user withdrew their consent.
    Consent { sub: String, client_id: String },
    /// A JWT signing key withdrawn: tokens it signed are no longer good.
    SigningKey { kid: String },
    /// Not a revocation: the verification a receiver asked for (SSF 1.0 §8.1.4), delivered on
    /// its stream alone, with the `state` it gave.
    Verification {
        stream_id: String,
        state: Option<String>,
    },
}

impl Revocation {
    /// The stored (event type, subject format, subject).
    fn columns(&self) -> (&'static str, &'static str, String) {
        match self {
            Revocation::Family { jti } => ("session-revoked", "jwt_id", jti.clone()),
            Revocation::User { sub } => ("session-revoked", "iss_sub", sub.clone()),
            Revocation::Password { sub } => ("credential-change", "iss_sub", sub.clone()),
            Revocation::Client { client_id } => ("session-revoked", "opaque", client_id.clone()),
            Revocation::Consent { sub, client_id } => {
                ("session-revoked", "complex", format!("{sub} {client_id}"))
            }
            Revocation::SigningKey { kid } => ("signing-key-withdrawn", "kid", kid.clone()),
            Revocation::Verification { stream_id, state } => (
                "verification",
                "stream",
                match state {
                    Some(state) => format!("{stream_id} {state}"),
                    None => stream_id.clone(),
                },
            ),
        }
    }

    /// The one stream this event is for; None: every stream.
    fn stream(&self) -> Option<&str> {
        match self {
            Revocation::Verification { stream_id, .. } => Some(stream_id),
            _ => None,
        }
    }

    pub(super) fn from_columns(
        event_type: &str,
        format: &str,
        subject: String,
    ) -> Option<Revocation> {
        Some(match (event_type, format) {
            ("session-revoked", "jwt_id") => Revocation::Family { jti: subject },
            ("session-revoked", "iss_sub") => Revocation::User { sub: subject },
            ("credential-change", "iss_sub") => Revocation::Password { sub: subject },
            ("session-revoked", "opaque") => Revocation::Client { client_id: subject },
            ("session-revoked", "complex") => {
                let (sub, client_id) = subject.split_once(' ')?;
                Revocation::Consent {
                    sub: sub.to_owned(),
                    client_id: client_id.to_owned(),
                }
            }
            ("signing-key-withdrawn", "kid") => Revocation::SigningKey { kid: subject },
            ("verification", "stream") => match subject.split_once(' ') {
                Some((stream_id, state)) => Revocation::Verification {
                    stream_id: stream_id.to_owned(),
                    state: Some(state.to_owned()),
                },
                None => Revocation::Verification {
                    stream_id: subject,
                    state: None,
                },
            },
            _ => return None,
        })
    }
}

/// An event as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedEvent {
    pub id: i64,
    pub revocation: Revocation,
    /// When the change was made (seconds).
    pub occurred_at: i64,
}

/// Where a push stream (RFC 8935) delivers.
#[derive(Clone, PartialEq, Eq)]
pub struct PushTarget {
    pub endpoint_url: String,
    /// The `Authorization` header value the receiver asked for (a secret of theirs).
    pub authorization: Option<String>,
}

impl std::fmt::Debug for PushTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushTarget")
            .field("endpoint_url", &self.endpoint_url)
            .field("authorization", &self.authorization.as_ref().map(|_| "***"))
            .finish()
    }
}

/// A stream (SSF 1.0 §8.1) as stored: polled (RFC 8936) unless it has a push target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRecord {
    pub stream_id: String,
    /// The client that created it and alone may read, poll or delete it.
    pub client_id: String,
    /// The event type URIs asked for at creation.
    pub events_requested: Vec<String>,
    /// It delivers the events after this one.
    pub after_event: i64,
    pub created_at: i64,
    /// RFC 8935 push delivery; None for a poll stream.
    pub push: Option<PushTarget>,
    /// SSF 1.0 §8.1.2: whether it delivers, holds or drops its events.
    pub status: StreamStatus,
    /// Why, as the receiver said when it set the status.
    pub status_reason: Option<String>,
}

/// A stream's status (SSF 1.0 §8.1.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamStatus {
    /// Its events are delivered.
    Enabled,
    /// Its events are held, and delivered once it is enabled again.
    Paused,
    /// Its events are dropped: once enabled again, it delivers those logged from then on.
    Disabled,
}

impl StreamStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StreamStatus::Enabled => "enabled",
            StreamStatus::Paused => "paused",
            StreamStatus::Disabled => "disabled",
        }
    }

    pub fn parse(name: &str) -> Option<StreamStatus> {
        [
            StreamStatus::Enabled,
            StreamStatus::Paused,
            StreamStatus::Disabled,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// The public id of a token family: the `jti` of its JWT access tokens, of its introspection
/// answers and of its events. Derived from the stored family, which never leaves the server.
pub fn family_jti(family: &str) -> String {
    secrets::digest(&format!("tokengate-family:{family}"))[..32].to_owned()
}

const INSERT: &str = "INSERT INTO ssf_events (event_type, subject_format, subject, occurred_at, stream_id) VALUES ($1, $2, $3, $4, $5) RETURNING id";

/// The events logged after `position`, in order (PostgreSQL: the token cache catching up);
/// None for an event this version does not know.
pub(super) async fn logged_after(
    pool: &sqlx::PgPool,
    position: i64,
) -> sqlx::Result<Vec<(i64, Option<Revocation>)>> {
    let rows = sqlx::query(
        "SELECT id, event_type, subject_format, subject FROM ssf_events WHERE id > $1 ORDER BY id",
    )
    .bind(position)
    .fetch_all(pool)
    .await?;
    let mut events = Vec::with_capacity(rows.len());
    for row in &rows {
        let (event_type, format): (String, String) = (row.try_get(1)?, row.try_get(2)?);
        let event = Revocation::from_columns(&event_type, &format, row.try_get(3)?);
        events.push((row.try_get(0)?, event));
    }
    Ok(events)
}

/// Appends `event` in the transaction `tx`: its id. Writers append through
/// [`Store::append_event`], which announces it.
pub(super) async fn append(tx: &mut sqlx::AnyConnection, event: &Revocation) -> StoreResult<i64> {
    let (event_type, format, subject) = event.columns();
    Ok(sqlx::query_scalar(INSERT)
        .bind(event_type)
        .bind(format)
        .bind(subject)
        .bind(now())
        .bind(event.stream())
        .fetch_one(&mut *tx)
        .await?)
}

/// [`append`] on the SQLite hot path's writer connection, in the savepoint of the job that
/// revokes (its [`Undo::Savepoint`](super::sqlite_local::Undo)): its id.
pub(super) fn append_sqlite(
    connection: &rusqlite::Connection,
    event: &Revocation,
) -> rusqlite::Result<i64> {
    let (event_type, format, subject) = event.columns();
    connection
        .prepare_cached(
            "INSERT INTO ssf_events (event_type, subject_format, subject, occurred_at) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(rusqlite::params![event_type, format, subject, now()])?;
    Ok(connection.last_insert_rowid())
}

/// The columns of [`append`] for a statement of the PostgreSQL hot path that appends itself.
pub(super) fn columns(event: &Revocation) -> (&'static str, &'static str, String) {
    event.columns()
}

/// How often a SQLite server looks for events another process appended (the command line's
/// `user delete`): they reach the waiting polls, so every sidecar, within this and a poll.
pub const SQLITE_EVENT_WATCH: std::time::Duration = std::time::Duration::from_millis(250);

/// Wakes the polls waiting for events (rung by the bus, [`super::bus`]).
pub(super) struct EventBell {
    pub(super) notify: Arc<Notify>,
    /// Rung when a push stream is created.
    push: Arc<Notify>,
    /// Set when the server stops: waiting polls answer at once.
    closing: std::sync::atomic::AtomicBool,
}

impl EventBell {
    /// A bell; for a SQLite database file, also rung by other processes' events, seen by a
    /// watch of the file ([`watch_sqlite`]).
    pub(super) fn new(sqlite_file: Option<std::path::PathBuf>) -> EventBell {
        let notify = Arc::new(Notify::new());
        if let Some(path) = sqlite_file {
            watch_sqlite(path, Arc::downgrade(&notify));
        }
        EventBell {
            notify,
            push: Arc::new(Notify::new()),
            closing: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

/// On a thread of its own, until the bell is gone: every [`SQLITE_EVENT_WATCH`], when the
/// file's `data_version` says another connection committed, whether the log has a newer event
/// than seen last; if so, wakes every waiting poll. This process's own events ring the bell at
/// once; this is for the others' (the command line on the same file).
fn watch_sqlite(path: std::path::PathBuf, notify: std::sync::Weak<Notify>) {
    let spawned = std::thread::Builder::new()
        .name("tokengate-event-watch".into())
        .spawn(move || {
            let Ok(connection) = rusqlite::Connection::open_with_flags(
                &path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            ) else {
                tracing::warn!("cannot watch the database for other processes' revocation events; waiting polls see them at their timeout");
                return;
            };
            let read = |sql: &str| {
                connection
                    .query_row(sql, [], |row| row.get::<_, Option<i64>>(0))
                    .ok()
                    .flatten()
            };
            let mut version = read("PRAGMA data_version");
            let mut newest = read("SELECT MAX(id) FROM ssf_events");
            loop {
                std::thread::sleep(SQLITE_EVENT_WATCH);
                let Some(notify) = notify.upgrade() else { return };
                let now = read("PRAGMA data_version");
                if now == version {
                    continue;
                }
                version = now;
                let latest = read("SELECT MAX(id) FROM ssf_events");
                if latest > newest {
                    newest = latest;
                    notify.notify_waiters();
                }
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot watch the database for other processes' revocation events");
    }
}

const STREAM_COLUMNS: &str = "stream_id, client_id, events_requested, after_event, created_at, push_url, push_authorization, status, status_reason";

fn stream_from_row(row: &sqlx::any::AnyRow) -> StoreResult<StreamRecord> {
    Ok(StreamRecord {
        stream_id: row.try_get(0)?,
        client_id: row.try_get(1)?,
        events_requested: super::split_scopes(row.try_get(2)?),
        after_event: row.try_get(3)?,
        created_at: row.try_get(4)?,
        push: row
            .try_get::<Option<String>, _>(5)?
            .map(|endpoint_url| -> StoreResult<PushTarget> {
                Ok(PushTarget {
                    endpoint_url,
                    authorization: row.try_get(6)?,
                })
            })
            .transpose()?,
        status: StreamStatus::parse(&row.try_get::<String, _>(7)?)
            .ok_or_else(|| super::StoreError::Other(anyhow::anyhow!("unknown stream status")))?,
        status_reason: row.try_get(8)?,
    })
}

/// The most revocation streams one client may have (one per sidecar that shares its client
/// id; PostgreSQL replicas creating at once may pass it by a few).
pub const MAX_STREAMS_PER_CLIENT: i64 = 1000;
/// A poll stream not polled for this long (seconds: many poll timeouts) is abandoned: deleted
/// when its client, at its limit, creates another.
pub const ABANDONED_AFTER: i64 = 600;

impl Store {
    /// When the stream's latest verification was asked for (seconds), if any is still logged.
    pub async fn last_verification(&self, stream_id: &str) -> StoreResult<Option<i64>> {
        Ok(sqlx::query_scalar(
            "SELECT MAX(occurred_at) FROM ssf_events WHERE stream_id = $1 AND event_type = 'verification'",
        )
        .bind(stream_id)
        .fetch_one(&self.writer)
        .await?)
    }

    /// What waiting polls wait on: create its `notified()` future before reading the log.
    pub fn event_bell(&self) -> Arc<Notify> {
        self.events.notify.clone()
    }

    /// What the pusher waits on besides events: a new push stream.
    pub fn push_bell(&self) -> Arc<Notify> {
        self.events.push.clone()
    }

    /// A push stream was created: the pusher looks at once.
    pub fn ring_push(&self) {
        self.events.push.notify_waiters();
    }

    /// The server is stopping: waiting polls answer now, so that draining does not wait for
    /// their timeout (their receivers poll again, elsewhere).
    pub fn close_polls(&self) {
        use std::sync::atomic::Ordering;
        self.events.closing.store(true, Ordering::Release);
        self.events.notify.notify_waiters();
        self.events.push.notify_waiters();
    }

    /// Whether [`Store::close_polls`] was called.
    pub fn polls_closing(&self) -> bool {
        self.events
            .closing
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Appends `event` on its own (a change with no row of its own to write), and wakes polls.
    pub async fn log_event(&self, event: &Revocation) -> StoreResult<()> {
        let exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        let appended = self.append_event(&mut tx, event).await?;
        tx.commit().await?;
        drop(exclusive);
        self.changed(&appended);
        Ok(())
    }

    /// A new stream of `client_id` (polled, or pushed to `push`), delivering the events
    /// appended from now on; None when the client has [`MAX_STREAMS_PER_CLIENT`] already, once
    /// its poll streams not polled for [`ABANDONED_AFTER`] are deleted (a sidecar restarted
    /// makes a new stream and leaves its old one).
    pub async fn create_stream(
        &self,
        client_id: &str,
        events_requested: &[String],
        push: Option<PushTarget>,
    ) -> StoreResult<Option<StreamRecord>> {
        if let Some(stream) = self
            .insert_stream(client_id, events_requested, push.clone())
            .await?
        {
            return Ok(Some(stream));
        }
        let abandoned = {
            let _exclusive = self.exclusive().await?;
            sqlx::query(
                "DELETE FROM ssf_streams WHERE client_id = $1 AND push_url IS NULL AND polled_at < $2",
            )
            .bind(client_id)
            .bind(now() - ABANDONED_AFTER)
            .execute(&self.writer)
            .await?
            .rows_affected()
        };
        if abandoned > 0 {
            tracing::info!(client_id, abandoned, "abandoned revocation streams deleted");
        }
        self.insert_stream(client_id, events_requested, push).await
    }

    /// The insert of [`Store::create_stream`], unless the client has its most streams.
    async fn insert_stream(
        &self,
        client_id: &str,
        events_requested: &[String],
        push: Option<PushTarget>,
    ) -> StoreResult<Option<StreamRecord>> {
        let stream = StreamRecord {
            stream_id: secrets::random_client_id(),
            client_id: client_id.to_owned(),
            events_requested: events_requested.to_vec(),
            after_event: 0,
            created_at: now(),
            push,
            status: StreamStatus::Enabled,
            status_reason: None,
        };
        let _exclusive = self.exclusive().await?;
        // HAVING: the aggregate's one row only while the client is under its limit.
        let after_event: Option<i64> = sqlx::query_scalar(
            "INSERT INTO ssf_streams (stream_id, client_id, events_requested, after_event, created_at, polled_at, push_url, push_authorization)
             SELECT $1, $2, $3, COALESCE(MAX(id), 0), $4, $4, $5, $6 FROM ssf_events
             HAVING (SELECT COUNT(*) FROM ssf_streams WHERE client_id = $2) < $7
             RETURNING after_event",
        )
        .bind(&stream.stream_id)
        .bind(client_id)
        .bind(events_requested.join(" "))
        .bind(stream.created_at)
        .bind(stream.push.as_ref().map(|p| p.endpoint_url.clone()))
        .bind(stream.push.as_ref().and_then(|p| p.authorization.clone()))
        .bind(MAX_STREAMS_PER_CLIENT)
        .fetch_optional(&self.writer)
        .await?;
        Ok(after_event.map(|after_event| StreamRecord {
            after_event,
            ..stream
        }))
    }

    /// The stream `stream_id` if it belongs to `client_id`.
    pub async fn find_stream(
        &self,
        stream_id: &str,
        client_id: &str,
    ) -> StoreResult<Option<StreamRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {STREAM_COLUMNS} FROM ssf_streams WHERE stream_id = $1 AND client_id = $2"
        ))
        .bind(stream_id)
        .bind(client_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(stream_from_row).transpose()
    }

    /// Every push stream, for the pusher.
    pub async fn push_streams(&self) -> StoreResult<Vec<StreamRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {STREAM_COLUMNS} FROM ssf_streams WHERE push_url IS NOT NULL ORDER BY created_at"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(stream_from_row).collect()
    }

    /// The streams of `client_id`.
    pub async fn streams_of(&self, client_id: &str) -> StoreResult<Vec<StreamRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {STREAM_COLUMNS} FROM ssf_streams WHERE client_id = $1 ORDER BY created_at"
        ))
        .bind(client_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(stream_from_row).collect()
    }

    /// Sets what the stream `stream_id` of `client_id` delivers and how (SSF 1.0 §8.1.1.3-4):
    /// the updated stream, None if there is no such stream of this client. Its position in the
    /// log is kept: nothing pending is lost.
    pub async fn update_stream(
        &self,
        stream_id: &str,
        client_id: &str,
        events_requested: &[String],
        push: Option<PushTarget>,
    ) -> StoreResult<Option<StreamRecord>> {
        {
            let _exclusive = self.exclusive().await?;
            sqlx::query(
                "UPDATE ssf_streams SET events_requested = $1, push_url = $2, push_authorization = $3
                 WHERE stream_id = $4 AND client_id = $5",
            )
            .bind(events_requested.join(" "))
            .bind(push.as_ref().map(|p| p.endpoint_url.clone()))
            .bind(push.as_ref().and_then(|p| p.authorization.clone()))
            .bind(stream_id)
            .bind(client_id)
            .execute(&self.writer)
            .await?;
        }
        self.stream_as_written(stream_id, client_id).await
    }

    /// Sets the status of the stream `stream_id` of `client_id`: the updated stream, None if
    /// there is no such stream of this client. Disabling it, or enabling (or pausing) it once
    /// disabled, moves its place in the log to the newest event: a disabled stream keeps none.
    pub async fn set_stream_status(
        &self,
        stream_id: &str,
        client_id: &str,
        status: StreamStatus,
        reason: Option<&str>,
    ) -> StoreResult<Option<StreamRecord>> {
        {
            let _exclusive = self.exclusive().await?;
            sqlx::query(
                "UPDATE ssf_streams SET
                   after_event = CASE WHEN $1 = 'disabled' OR status = 'disabled'
                     THEN (SELECT COALESCE(MAX(id), 0) FROM ssf_events) ELSE after_event END,
                   status = $1, status_reason = $2
                 WHERE stream_id = $3 AND client_id = $4",
            )
            .bind(status.as_str())
            .bind(reason)
            .bind(stream_id)
            .bind(client_id)
            .execute(&self.writer)
            .await?;
        }
        // Polls waiting on this replica read their stream again (a paused one, enabled, has
        // events to answer); those on another replica at their timeout.
        self.events.notify.notify_waiters();
        self.events.push.notify_waiters();
        self.stream_as_written(stream_id, client_id).await
    }

    /// The stream `stream_id` of `client_id` as the writer sees it, just after changing it.
    async fn stream_as_written(
        &self,
        stream_id: &str,
        client_id: &str,
    ) -> StoreResult<Option<StreamRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {STREAM_COLUMNS} FROM ssf_streams WHERE stream_id = $1 AND client_id = $2"
        ))
        .bind(stream_id)
        .bind(client_id)
        .fetch_optional(&self.writer)
        .await?;
        row.as_ref().map(stream_from_row).transpose()
    }

    /// Records `subject` (its JSON) as added to the stream (SSF 1.0 §8.1.3.2), or removes it
    /// (`verified` None). Every stream delivers every subject: the record is what the receiver
    /// said, kept for the operator.
    pub async fn record_subject(
        &self,
        stream_id: &str,
        subject: &str,
        verified: Option<bool>,
    ) -> StoreResult<()> {
        let _exclusive = self.exclusive().await?;
        match verified {
            Some(verified) => sqlx::query(
                "INSERT INTO ssf_subjects (stream_id, subject, verified, added_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (stream_id, subject) DO UPDATE SET verified = $3",
            )
            .bind(stream_id)
            .bind(subject)
            .bind(i64::from(verified))
            .bind(now()),
            None => sqlx::query("DELETE FROM ssf_subjects WHERE stream_id = $1 AND subject = $2")
                .bind(stream_id)
                .bind(subject),
        }
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// The subjects recorded for a stream, in the order added.
    pub async fn stream_subjects(&self, stream_id: &str) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT subject FROM ssf_subjects WHERE stream_id = $1 ORDER BY added_at, subject",
        )
        .bind(stream_id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Deletes the stream `stream_id` of `client_id` (with its acknowledgements); whether it was.
    pub async fn delete_stream(&self, stream_id: &str, client_id: &str) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let done = sqlx::query("DELETE FROM ssf_streams WHERE stream_id = $1 AND client_id = $2")
            .bind(stream_id)
            .bind(client_id)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Records `event_ids` as acknowledged by the stream (ids of no event are ignored) and the
    /// stream as polled now.
    pub async fn acknowledge(&self, stream_id: &str, event_ids: &[i64]) -> StoreResult<()> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        sqlx::query("UPDATE ssf_streams SET polled_at = $1 WHERE stream_id = $2")
            .bind(now())
            .bind(stream_id)
            .execute(&mut *tx)
            .await?;
        for id in event_ids {
            sqlx::query(
                "INSERT INTO ssf_acks (stream_id, event_id) SELECT $1, id FROM ssf_events WHERE id = $2
                 ON CONFLICT (stream_id, event_id) DO NOTHING",
            )
            .bind(stream_id)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The stream's oldest events not yet acknowledged, at most `limit`.
    pub async fn pending_events(
        &self,
        stream: &StreamRecord,
        limit: i64,
    ) -> StoreResult<Vec<LoggedEvent>> {
        let rows = sqlx::query(
            "SELECT e.id, e.event_type, e.subject_format, e.subject, e.occurred_at FROM ssf_events e
             WHERE e.id > $1 AND (e.stream_id IS NULL OR e.stream_id = $2) AND NOT EXISTS
               (SELECT 1 FROM ssf_acks a WHERE a.stream_id = $2 AND a.event_id = e.id)
             ORDER BY e.id LIMIT $3",
        )
        .bind(stream.after_event)
        .bind(&stream.stream_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let mut events = Vec::with_capacity(rows.len());
        for row in &rows {
            let (event_type, format): (String, String) = (row.try_get(1)?, row.try_get(2)?);
            let Some(revocation) = Revocation::from_columns(&event_type, &format, row.try_get(3)?)
            else {
                return Err(anyhow::anyhow!("unknown logged event {event_type}/{format}").into());
            };
            events.push(LoggedEvent {
                id: row.try_get(0)?,
                revocation,
                occurred_at: row.try_get(4)?,
            });
        }
        Ok(events)
    }

    /// Deletes the events that occurred before `before` (their acknowledgements with them) and
    /// the poll streams not polled since `idle_before` (push streams stay until deleted):
    /// (events, streams) deleted.
    pub async fn purge_events(&self, before: i64, idle_before: i64) -> StoreResult<(u64, u64)> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        let streams =
            sqlx::query("DELETE FROM ssf_streams WHERE polled_at < $1 AND push_url IS NULL")
                .bind(idle_before)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        sqlx::query("DELETE FROM ssf_acks WHERE event_id IN (SELECT id FROM ssf_events WHERE occurred_at < $1)")
            .bind(before)
            .execute(&mut *tx)
            .await?;
        let events = sqlx::query("DELETE FROM ssf_events WHERE occurred_at < $1")
            .bind(before)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok((events, streams))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_survive_their_columns() {
        for event in [
            Revocation::Family { jti: "j".into() },
            Revocation::User { sub: "7".into() },
            Revocation::Password { sub: "7".into() },
            Revocation::Client {
                client_id: "c".into(),
            },
            Revocation::Consent {
                sub: "7".into(),
                client_id: "c".into(),
            },
            Revocation::SigningKey { kid: "k".into() },
            Revocation::Verification {
                stream_id: "s".into(),
                state: Some("a b".into()),
            },
            Revocation::Verification {
                stream_id: "s".into(),
                state: None,
            },
        ] {
            let (t, f, s) = event.columns();
            assert_eq!(Revocation::from_columns(t, f, s), Some(event));
        }
    }

    #[test]
    fn family_jtis_are_stable_and_hide_the_family() {
        let jti = family_jti("family-value");
        assert_eq!(jti, family_jti("family-value"));
        assert_ne!(jti, family_jti("other"));
        assert_eq!(jti.len(), 32);
        assert!(!jti.contains("family"));
    }
}

//! The change bus: every change a cache or a waiting poll must hear is one [`Change`]; a writer
//! announces it in its transaction ([`Store::announce`]) and delivers it in this process after
//! the commit ([`Store::changed`]); one listener per process and database hears the other
//! processes' changes and fans them out to the same places ([`listener`]).
//!
//! On PostgreSQL a change is a NOTIFY sent in the transaction that makes it: PostgreSQL delivers
//! it to every listening connection when that transaction commits, and never if it does not.
//! There are three channels ([`Channel`]), each named after the schema the connection works in
//! ([`channel_of!`]): NOTIFY channels are database-wide, and two deployments in schemas of one
//! database must not wake each other or empty each other's caches (the default schema, `public`,
//! keeps the plain names). Channel names and payloads are those of the versions before the bus,
//! so that old and new replicas hear each other during a rolling upgrade. Statements of the hot
//! path that announce in SQL take the channel and the payload from here ([`notify_spent!`],
//! [`notify_appended!`]).
//!
//! On SQLite (one server process) nothing is sent: the writer's delivery after its commit is the
//! whole of it, and another process's commits (the command line) are seen rather than heard
//! ([`super::sqlite_changes`], and the event watch of [`super::events`]).

mod listener;

pub(super) use listener::{Bus, of_database};
pub use listener::LISTENER_NAME;

use super::token_cache::Eviction;
use super::{Backend, Revocation, Store, StoreResult};

/// One change that caches or waiting polls must hear of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    /// Any change to an application (made, updated, secret rotated, deleted): every process
    /// empties its application caches and its token cache (scopes and permissions are in
    /// introspection answers).
    Application,
    /// A user's row (username, active, …) or group memberships changed: that user's tokens'
    /// introspection answers.
    User(i64),
    /// A group renamed or deleted: every introspection answer (any may name the group).
    EveryToken,
    /// A refresh token spent (its access token revoked with it): the answers of its family, by
    /// its stored family value.
    Spent(String),
    /// An event appended to the revocation log, with its id: waiting polls and pushers wake, the
    /// token caches evict what it names, and the listener takes the id as its position.
    Appended { id: i64, event: Revocation },
    /// A revocation event this version cannot read (a newer replica's): everything it could
    /// have named is evicted, and waiting polls wake.
    UnreadableEvent,
}

/// The three channels changes go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Channel {
    /// Appended revocation events ([`Change::Appended`]).
    Events,
    /// Changes to applications ([`Change::Application`]).
    Applications,
    /// The other changes that alter introspection answers ([`Change::User`],
    /// [`Change::EveryToken`], [`Change::Spent`]).
    Tokens,
}

impl Channel {
    pub(super) const ALL: [Channel; 3] = [Channel::Events, Channel::Applications, Channel::Tokens];

    /// The channel's name in the schema `public`; [`channel_of!`] names it in any schema.
    pub(super) fn base(self) -> &'static str {
        match self {
            Channel::Events => "tokengate_ssf_events",
            Channel::Applications => "tokengate_applications",
            Channel::Tokens => "tokengate_token_cache",
        }
    }
}

impl Change {
    /// The channel it is announced on.
    pub(super) fn channel(&self) -> Channel {
        match self {
            Change::Application => Channel::Applications,
            Change::User(_) | Change::EveryToken | Change::Spent(_) => Channel::Tokens,
            Change::Appended { .. } | Change::UnreadableEvent => Channel::Events,
        }
    }

    /// Its payload on [`Change::channel`]: empty for an application; `user <id>`, `all` or
    /// `family <stored family>` for the token caches; `<id> <type> <format> <subject>` for an
    /// event (the columns it is stored with). [`notify_spent!`] and [`notify_appended!`] write
    /// the same in SQL.
    pub(super) fn payload(&self) -> String {
        match self {
            Change::Application | Change::UnreadableEvent => String::new(),
            Change::User(id) => format!("user {id}"),
            Change::EveryToken => "all".to_owned(),
            Change::Spent(family) => format!("family {family}"),
            Change::Appended { id, event } => {
                let (event_type, format, subject) = super::events::columns(event);
                format!("{id} {event_type} {format} {subject}")
            }
        }
    }

    /// A payload heard on `channel`, read back; what cannot be read is the widest change of its
    /// channel.
    pub(super) fn read(channel: Channel, payload: &str) -> Change {
        match channel {
            Channel::Applications => Change::Application,
            Channel::Tokens => match payload.split_once(' ') {
                Some(("user", id)) => id.parse().map_or(Change::EveryToken, Change::User),
                Some(("family", family)) => Change::Spent(family.to_owned()),
                _ => Change::EveryToken,
            },
            Channel::Events => read_event(payload).unwrap_or(Change::UnreadableEvent),
        }
    }

    /// The token cache's entries it concerns.
    pub(super) fn eviction(&self) -> Eviction {
        match self {
            Change::Application | Change::EveryToken | Change::UnreadableEvent => Eviction::All,
            Change::User(id) => Eviction::User(*id),
            Change::Spent(family) => Eviction::StoredFamily(family.clone()),
            Change::Appended { event, .. } => Eviction::of(event),
        }
    }

    /// Whether it empties the application caches.
    fn empties_application_caches(&self) -> bool {
        *self == Change::Application
    }

    /// Whether it wakes the polls and pushers waiting for revocation events.
    fn wakes_event_waiters(&self) -> bool {
        matches!(self, Change::Appended { .. } | Change::UnreadableEvent)
    }
}

/// An event's payload read back.
fn read_event(payload: &str) -> Option<Change> {
    let mut parts = payload.splitn(4, ' ');
    let id = parts.next()?.parse().ok()?;
    let (event_type, format, subject) = (parts.next()?, parts.next()?, parts.next()?);
    let event = Revocation::from_columns(event_type, format, subject.to_owned())?;
    Some(Change::Appended { id, event })
}

/// SQL naming the channel whose base name ([`Channel::base`]) is the bind parameter `$param` (a
/// string literal such as `"$1"`) for the schema the statement runs in.
macro_rules! channel_of {
    ($param:literal) => {
        concat!(
            "(CASE WHEN current_schema() = 'public' THEN ",
            $param,
            "::text ELSE ",
            $param,
            "::text || '_' || md5(current_schema()) END)"
        )
    };
}

/// SQL announcing [`Change::Spent`] of the family in column `$family`, on the channel bound to
/// `$param` (bind [`Channel::Tokens`]'s base): `pg_notify(…)`, for a statement of the hot path.
macro_rules! notify_spent {
    ($param:literal, $family:literal) => {
        concat!(
            "pg_notify(",
            $crate::store::bus::channel_of!($param),
            ", 'family ' || ",
            $family,
            ")"
        )
    };
}

/// SQL announcing [`Change::Appended`]: the event of id `$id` (a bigint column) and text columns
/// or parameters `$type`, `$format`, `$subject`, on the channel bound to `$param` (bind
/// [`Channel::Events`]'s base): `pg_notify(…)`, for a statement of the hot path.
macro_rules! notify_appended {
    ($param:literal, $id:literal, $type:literal, $format:literal, $subject:literal) => {
        concat!(
            "pg_notify(",
            $crate::store::bus::channel_of!($param),
            ", ",
            $id,
            "::text || ' ' || ",
            $type,
            " || ' ' || ",
            $format,
            " || ' ' || ",
            $subject,
            ")"
        )
    };
}
pub(crate) use {channel_of, notify_appended, notify_spent};

/// `SELECT pg_notify(<channel $1 of this schema>, $2)`.
const NOTIFY: &str = concat!("SELECT pg_notify(", channel_of!("$1"), ", $2)");

impl Store {
    /// Announces `change` in the transaction `tx` that makes it: on PostgreSQL a NOTIFY that
    /// every process's listener hears once the transaction commits (and never if it does not);
    /// nothing on SQLite. The writer calls [`Store::changed`] after the commit.
    pub(super) async fn announce(
        &self,
        tx: &mut sqlx::AnyConnection,
        change: &Change,
    ) -> StoreResult<()> {
        if self.backend == Backend::Postgres {
            sqlx::query(NOTIFY)
                .bind(change.channel().base())
                .bind(change.payload())
                .execute(tx)
                .await?;
        }
        Ok(())
    }

    /// After the commit of `change` (announced by [`Store::announce`], or by a statement of the
    /// hot path): delivers it at once to the caches and waiting polls of every store this
    /// process has open on the database, without waiting for the notification to come back.
    pub(super) fn changed(&self, change: &Change) {
        self.bus.deliver(change);
    }

    /// Announces `changes` in `tx`, commits it, and delivers them ([`Store::changed`]).
    pub(super) async fn commit_announcing(
        &self,
        mut tx: sqlx::Transaction<'_, sqlx::Any>,
        changes: &[Change],
    ) -> StoreResult<()> {
        for change in changes {
            self.announce(&mut tx, change).await?;
        }
        tx.commit().await?;
        for change in changes {
            self.changed(change);
        }
        Ok(())
    }

    /// Appends `event` to the revocation log in `tx` and announces it: the change to deliver
    /// ([`Store::changed`]) once `tx` has committed.
    pub(super) async fn append_event(
        &self,
        tx: &mut sqlx::AnyConnection,
        event: &Revocation,
    ) -> StoreResult<Change> {
        let id = super::events::append(tx, event).await?;
        let change = Change::Appended {
            id,
            event: event.clone(),
        };
        self.announce(tx, &change).await?;
        Ok(change)
    }
}

#[cfg(test)]
mod tests;

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

pub use listener::LISTENER_NAME;
pub(super) use listener::{Bus, of_database};

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
mod tests {
    use super::*;
    use crate::store::token_cache::TokenKey;
    use crate::store::{GrantType, NewTokens, UserUpdate};
    use std::time::{Duration, Instant};

    #[test]
    fn changes_survive_their_channel() {
        for change in [
            Change::Application,
            Change::User(7),
            Change::EveryToken,
            Change::Spent("f x".into()),
            Change::Appended {
                id: 42,
                event: Revocation::Consent {
                    sub: "7".into(),
                    client_id: "c d".into(),
                },
            },
        ] {
            assert_eq!(Change::read(change.channel(), &change.payload()), change);
        }
        assert_eq!(Change::read(Channel::Tokens, "garbage"), Change::EveryToken);
        assert_eq!(Change::read(Channel::Tokens, "user x"), Change::EveryToken);
        assert_eq!(Change::read(Channel::Events, ""), Change::UnreadableEvent);
        assert_eq!(
            Change::read(Channel::Events, "x session-revoked jwt_id j"),
            Change::UnreadableEvent
        );
    }

    /// The payloads the hot path's statements write in SQL ([`notify_spent!`], [`notify_appended!`])
    /// are read back as the changes they announce, on the channels of the statement's schema.
    #[tokio::test]
    async fn the_hot_paths_notifications_are_read_as_their_changes() {
        let Some(url) = crate::testing::postgres_schema_url().await else {
            return;
        };
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let mut listener = sqlx::postgres::PgListener::connect_with(&pool)
            .await
            .unwrap();
        let mut names = Vec::new();
        for channel in Channel::ALL {
            let name: String = sqlx::query_scalar(concat!("SELECT ", channel_of!("$1")))
                .bind(channel.base())
                .fetch_one(&pool)
                .await
                .unwrap();
            assert!(
                name.starts_with(channel.base()) && name != channel.base(),
                "{name}"
            );
            names.push((name, channel));
        }
        listener
            .listen_all(names.iter().map(|(name, _)| name.as_str()))
            .await
            .unwrap();
        sqlx::query(concat!("SELECT ", notify_spent!("$1", "$2")))
            .bind(Channel::Tokens.base())
            .bind("a family")
            .execute(&pool)
            .await
            .unwrap();
        let event = Revocation::Consent {
            sub: "7".into(),
            client_id: "c d".into(),
        };
        let (event_type, format, subject) = crate::store::events::columns(&event);
        sqlx::query(concat!(
            "SELECT ",
            notify_appended!("$1", "$2", "$3", "$4", "$5")
        ))
        .bind(Channel::Events.base())
        .bind(42_i64)
        .bind(event_type)
        .bind(format)
        .bind(subject)
        .execute(&pool)
        .await
        .unwrap();
        for expected in [
            Change::Spent("a family".into()),
            Change::Appended { id: 42, event },
        ] {
            let heard = tokio::time::timeout(Duration::from_secs(5), listener.recv())
                .await
                .expect("a notification")
                .unwrap();
            let channel = names
                .iter()
                .find(|(name, _)| name == heard.channel())
                .map(|(_, channel)| *channel)
                .expect("one of the three channels");
            assert_eq!(channel, expected.channel());
            assert_eq!(Change::read(channel, heard.payload()), expected);
        }
    }

    /// The connections listening on this schema's channels (whatever their name), and those of
    /// them named [`LISTENER_NAME`].
    async fn listening(store: &Store) -> (i64, i64) {
        sqlx::query_as(
            "SELECT COUNT(*), COUNT(*) FILTER (WHERE application_name = $1) FROM pg_stat_activity
             WHERE query LIKE 'LISTEN%' AND query LIKE '%' || md5(current_schema()) || '%'",
        )
        .bind(LISTENER_NAME)
        .fetch_one(store.pool())
        .await
        .unwrap()
    }

    /// Waits until `what` holds, at most `within`.
    async fn until(within: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) {
        let deadline = Instant::now() + within;
        while !check().await {
            assert!(Instant::now() < deadline, "{what}: not within {within:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A store opened on PostgreSQL holds one listening connection, however many stores the process
    /// opens on the database, and through it hears the three kinds of change of another process
    /// (here a store on another URL of the same schema, which gets a bus of its own): an application
    /// changed empties its application cache, a user changed evicts the user's tokens from its token
    /// cache, an appended event wakes its waiting polls. A deployment in another schema of the same
    /// database hears none of them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_listener_per_process_hears_every_kind_of_change_of_its_schema_alone() {
        let Some(url) = crate::testing::postgres_schema_url().await else {
            return;
        };
        let within = Duration::from_secs(5);
        let a = crate::testing::connect(&url).await;
        until(within, "a listens", async || a.client_cache_active()).await;
        assert_eq!(listening(&a).await, (1, 1), "one store, one listener");
        let a_again = crate::testing::connect(&url).await;
        until(within, "the second store listens", async || {
            a_again.client_cache_active()
        })
        .await;
        assert_eq!(listening(&a).await, (1, 1), "two stores, one listener");
        // Another process, as far as the bus can tell.
        let b = crate::testing::connect(&format!("{url}&application_name=tokengate-test-b")).await;
        until(within, "b listens", async || {
            b.client_cache_active() && b.token_cache.usable()
        })
        .await;
        assert_eq!(listening(&a).await, (2, 2), "one listener per bus");
        // A deployment in another schema.
        let other_url = crate::testing::postgres_schema_url().await.unwrap();
        let other = crate::testing::connect(&other_url).await;
        until(within, "the other schema listens", async || {
            other.client_cache_active()
        })
        .await;

        // An application changed: b's cache of it is emptied, the other schema's is not.
        let (client_id, _) =
            crate::testing::application(&a, GrantType::ClientCredentials, true).await;
        let (other_client, _) =
            crate::testing::application(&other, GrantType::ClientCredentials, true).await;
        // Their own notifications heard first (each empties the caches it reaches once more).
        tokio::time::sleep(Duration::from_millis(500)).await;
        let app = b
            .find_application_by_client_id(&client_id)
            .await
            .unwrap()
            .unwrap();
        other
            .find_application_by_client_id(&other_client)
            .await
            .unwrap()
            .unwrap();
        assert!(b.clients.get(&client_id).await.is_some(), "b caches it");
        assert!(other.clients.get(&other_client).await.is_some());
        a.regenerate_secret(app.id, Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        until(within, "b's application cache emptied", async || {
            b.clients.get(&client_id).await.is_none()
        })
        .await;
        // By now the other schema's listener would have heard anything sent on its channels.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            other.clients.get(&other_client).await.is_some(),
            "another schema's application change emptied this one's cache"
        );

        // A user changed: b's cached introspection of their token is evicted.
        let user = crate::testing::user(&a, "bus-user", "a password of some length").await;
        let tokens = a
            .issue_tokens(&NewTokens {
                application_id: app.id,
                user_id: Some(user.id),
                scope: "read".into(),
                access_lifetime: 300,
                refresh_lifetime: None,
                family: None,
                cnf_x5t_s256: None,
                cnf_jkt: None,
                audience: None,
            })
            .await
            .unwrap();
        let key = TokenKey::of(&tokens.access_token);
        b.introspect_token(&tokens.access_token).await.unwrap();
        assert!(
            b.introspect_token(&tokens.access_token).await.unwrap().1,
            "b answers from its cache"
        );
        let update = UserUpdate {
            username: Some("bus-user-renamed".into()),
            ..Default::default()
        };
        a.update_user(user.id, &update).await.unwrap().unwrap();
        until(within, "b's cached introspection evicted", async || {
            b.token_cache.get(&key).await.is_none()
        })
        .await;
        let (answer, hit) = b.introspect_token(&tokens.access_token).await.unwrap();
        assert!(!hit);
        assert_eq!(
            answer.unwrap().record.username.as_deref(),
            Some("bus-user-renamed")
        );

        // An event appended: b's waiting polls wake, the other schema's do not.
        let (b_bell, other_bell) = (b.event_bell(), other.event_bell());
        let b_woken = b_bell.notified();
        let other_woken = other_bell.notified();
        tokio::pin!(b_woken, other_woken);
        b_woken.as_mut().enable();
        other_woken.as_mut().enable();
        a.log_event(&Revocation::Family {
            jti: "bus-test".into(),
        })
        .await
        .unwrap();
        tokio::time::timeout(within, b_woken)
            .await
            .expect("b's waiting polls woken");
        // By now the other schema's listener would have heard anything sent on its channels.
        assert!(
            tokio::time::timeout(Duration::from_millis(300), other_woken)
                .await
                .is_err(),
            "another schema's event woke this one's polls"
        );
        assert_eq!(listening(&a).await, (2, 2), "still one listener per bus");
    }
}

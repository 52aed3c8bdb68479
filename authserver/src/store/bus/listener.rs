//! This process's one [`Bus`] per database: the token cache, the application caches and event
//! bells of the stores open on it, and (PostgreSQL) the one listening connection, named
//! [`LISTENER_NAME`], with its one reconnect loop, that fans every heard change out to them.
//!
//! While the listener does not listen (not yet, or its connection lost) the application caches
//! and the token cache are empty and unused, and waiting polls are woken to read the log again:
//! what was announced meanwhile is not heard. Once it listens again it first reads the
//! revocation events logged after the last one it heard (the token cache's position), then the
//! caches are used again. An entry lives at most its cache's TTL in any case: the bound for a
//! connection that died without either side noticing.

use super::{Change, Channel};
use crate::store::client_cache::ClientCache;
use crate::store::token_cache::{Eviction, TokenCache};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// The `application_name` of the listening connection (operators find it in
/// `pg_stat_activity`: one per server process and database).
pub const LISTENER_NAME: &str = "tokengate-changes";

/// How long the listener waits before listening again after a failure.
const RETRY: Duration = Duration::from_millis(200);

/// The changes of one database, for every store of this process open on it.
pub(in crate::store) struct Bus {
    fanout: Arc<Fanout>,
    /// The task listening for other processes' changes (PostgreSQL).
    listener: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Bus {
    fn drop(&mut self) {
        if let Some(listener) = &self.listener {
            listener.abort();
        }
    }
}

/// Where changes go: shared by the [`Bus`] and its listener task.
struct Fanout {
    token_cache: Arc<TokenCache>,
    stores: Mutex<Stores>,
}

/// The stores open on the database, as their application caches and event bells.
struct Stores {
    /// Whether a listener hears the other processes (PostgreSQL); without one (SQLite) the
    /// application caches are in use from the start and left so.
    heard: bool,
    /// Whether the listener listens now.
    listening: bool,
    subscribed: Vec<(Weak<ClientCache>, Weak<Notify>)>,
}

impl Stores {
    /// The caches and bells of the stores still open.
    fn live(&mut self) -> Vec<(Arc<ClientCache>, Arc<Notify>)> {
        self.subscribed
            .retain(|(clients, bell)| clients.strong_count() > 0 && bell.strong_count() > 0);
        self.subscribed
            .iter()
            .filter_map(|(clients, bell)| Some((clients.upgrade()?, bell.upgrade()?)))
            .collect()
    }
}

/// This process's bus of the database at `url`: the one a store opened on it already uses, else
/// a new one with a token cache of `capacity` entries and, on PostgreSQL (`pool`, the hot path's,
/// for the listener's catch-up reads), its listener.
pub(in crate::store) fn of_database(
    url: &str,
    pool: Option<&sqlx::PgPool>,
    capacity: u64,
) -> Arc<Bus> {
    static BUSES: Mutex<BTreeMap<String, Weak<Bus>>> = Mutex::new(BTreeMap::new());
    let mut buses = BUSES.lock().unwrap_or_else(PoisonError::into_inner);
    buses.retain(|_, bus| bus.strong_count() > 0);
    // A bus whose listener ended (its runtime shut down, as a test's does) is not reused.
    if let Some(bus) = buses.get(url).and_then(Weak::upgrade)
        && !bus.listener.as_ref().is_some_and(|l| l.is_finished())
    {
        return bus;
    }
    let fanout = Arc::new(Fanout {
        token_cache: Arc::new(TokenCache::new(capacity, pool.is_none())),
        stores: Mutex::new(Stores {
            heard: pool.is_some(),
            listening: false,
            subscribed: Vec::new(),
        }),
    });
    let listener = pool.map(|pool| listen(url.to_owned(), pool.clone(), fanout.clone()));
    let bus = Arc::new(Bus { fanout, listener });
    buses.insert(url.to_owned(), Arc::downgrade(&bus));
    bus
}

impl Bus {
    /// The database's token cache in this process.
    pub(in crate::store) fn token_cache(&self) -> Arc<TokenCache> {
        self.fanout.token_cache.clone()
    }

    /// Adds a store's application cache and event bell to what changes reach; the cache is in
    /// use while the listener listens (at once when there is none).
    pub(in crate::store) fn subscribe(&self, clients: &Arc<ClientCache>, bell: &Arc<Notify>) {
        let mut stores = self
            .fanout
            .stores
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if stores.heard {
            clients.set_listening(stores.listening);
        }
        stores.live();
        stores
            .subscribed
            .push((Arc::downgrade(clients), Arc::downgrade(bell)));
    }

    /// Delivers a change committed by this process.
    pub(in crate::store) fn deliver(&self, change: &Change) {
        self.fanout.deliver(change);
    }
}

impl Fanout {
    /// Brings `change` to the token cache, and to the application caches and event bells it
    /// concerns.
    fn deliver(&self, change: &Change) {
        self.token_cache.evict(&change.eviction());
        let (clients, bells) = (
            change.empties_application_caches(),
            change.wakes_event_waiters(),
        );
        if !clients && !bells {
            return;
        }
        let stores = self
            .stores
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .live();
        for (cache, bell) in stores {
            if clients {
                cache.forget_all();
            }
            if bells {
                bell.notify_waiters();
            }
        }
    }

    /// A notification heard on `channel`.
    fn heard(&self, channel: Channel, payload: &str) {
        let change = Change::read(channel, payload);
        if let Change::Appended { id, .. } = &change {
            self.token_cache.heard_event(*id);
        }
        self.deliver(&change);
    }

    /// The listener listens now (`true`: the caches are used again), or stopped listening (they
    /// are emptied and unused). Waiting polls read the log again either way.
    fn set_listening(&self, listening: bool) {
        self.token_cache.set_usable(listening);
        let mut stores = self.stores.lock().unwrap_or_else(PoisonError::into_inner);
        stores.listening = listening;
        for (cache, bell) in stores.live() {
            cache.set_listening(listening);
            bell.notify_waiters();
        }
    }
}

/// Listens on the three channels on a connection of its own and fans out every notification;
/// keeps the caches unused while it is not listening. Ends when the task is aborted.
fn listen(url: String, pool: sqlx::PgPool, fanout: Arc<Fanout>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // However the task ends (its runtime shut down under it included), the caches are off.
        let _off = Off(fanout.clone());
        let mut listener: Option<(sqlx::postgres::PgListener, Names)> = None;
        loop {
            let Some((active, names)) = listener.as_mut() else {
                match connect(&url, &pool, &fanout.token_cache).await {
                    Ok(connected) => {
                        listener = Some(connected);
                        fanout.set_listening(true);
                    }
                    Err(error) => {
                        tracing::warn!(%error, "cannot listen for changes; applications and introspection are read from the database until it can, waiting revocation polls see events at their timeout");
                        tokio::time::sleep(RETRY).await;
                    }
                }
                continue;
            };
            match active.try_recv().await {
                Ok(Some(notification)) => {
                    if let Some(channel) = names.channel(notification.channel()) {
                        fanout.heard(channel, notification.payload());
                    }
                }
                // The connection broke (sqlx would open it again): what was said meanwhile is
                // lost, so listen afresh and catch up.
                Ok(None) => {
                    fanout.set_listening(false);
                    listener = None;
                }
                Err(error) => {
                    fanout.set_listening(false);
                    tracing::warn!(%error, "lost the connection that listens for changes; reading from the database until it listens again");
                    listener = None;
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    })
}

/// Turns the caches off when dropped: nobody listens any more.
struct Off(Arc<Fanout>);

impl Drop for Off {
    fn drop(&mut self) {
        self.0.set_listening(false);
    }
}

/// The channels' names in the listener's schema.
struct Names(Vec<(Channel, String)>);

impl Names {
    fn channel(&self, name: &str) -> Option<Channel> {
        self.0
            .iter()
            .find(|(_, named)| named == name)
            .map(|(channel, _)| *channel)
    }
}

/// Listens on the channels, then reads the events logged after the token cache's position (or,
/// the first time, takes the newest as the position), evicting what they concern.
async fn connect(
    url: &str,
    pool: &sqlx::PgPool,
    token_cache: &TokenCache,
) -> sqlx::Result<(sqlx::postgres::PgListener, Names)> {
    let options: sqlx::postgres::PgConnectOptions = url.parse()?;
    let listening_pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.application_name(LISTENER_NAME))
        .await?;
    let mut listener = sqlx::postgres::PgListener::connect_with(&listening_pool).await?;
    let mut names = Vec::with_capacity(Channel::ALL.len());
    for channel in Channel::ALL {
        let name: String = sqlx::query_scalar(concat!("SELECT ", super::channel_of!("$1")))
            .bind(channel.base())
            .fetch_one(&mut listener)
            .await?;
        names.push((channel, name));
    }
    listener
        .listen_all(names.iter().map(|(_, name)| name.as_str()))
        .await?;
    let position = token_cache.position();
    if position == 0 {
        let newest: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM ssf_events")
            .fetch_one(pool)
            .await?;
        token_cache.heard_event(newest);
    } else {
        for (id, event) in crate::store::events::logged_after(pool, position).await? {
            token_cache.heard_event(id);
            token_cache.evict(&event.as_ref().map_or(Eviction::All, Eviction::of));
        }
    }
    Ok((listener, Names(names)))
}

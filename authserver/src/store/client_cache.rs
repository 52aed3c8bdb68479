//! The short cache of applications by client id, emptied at once by any change to an
//! application wherever it is made.
//!
//! On PostgreSQL: by this process itself, and by every other process when its listener hears the
//! change's notification ([`super::bus::Change::Application`]). The cache is used only while
//! this process is listening; a listening connection that breaks empties it and turns it off
//! until it listens again. What remains is a connection that died without either side noticing:
//! then an entry lives at most [`CLIENT_CACHE_TTL`].
//!
//! On SQLite: a lookup first asks the database whether any connection other than the hot path's
//! writer, of any process, has committed (`PRAGMA data_version`: a read transaction that, when
//! nothing changed, reads only the WAL index in shared memory), unless such a probe started less
//! than [`super::FOREIGN_COMMIT_BOUND`] (1 ms) before it has completed, and empties this cache
//! and the token cache if so ([`super::sqlite_changes`]). A change made by another process (a
//! secret rotated with the command line) counts for every lookup that starts 1 ms after its
//! commit. The writer's own commits (tokens issued, claimed, revoked; it never writes an
//! application) leave the caches as they are once it has vouched for them.

use super::Application;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The longest an entry is reused without reading the database again.
pub const CLIENT_CACHE_TTL: Duration = Duration::from_secs(5);

/// Applications by client id, for this process.
pub(super) struct ClientCache {
    entries: moka::future::Cache<String, Arc<Application>>,
    /// Bumped by every emptying, so a lookup that read the database before a change does not
    /// keep what it read once the change has emptied the cache.
    generation: AtomicU64,
    /// Whether this process hears the changes of the others (the cache is used only then).
    listening: AtomicBool,
}

impl ClientCache {
    /// A cache in use from the start (`listening`: SQLite, which asks before each lookup), or
    /// only once the bus's listener hears the other processes (PostgreSQL).
    pub(super) fn new(listening: bool) -> ClientCache {
        ClientCache {
            entries: moka::future::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(CLIENT_CACHE_TTL)
                .build(),
            generation: AtomicU64::new(0),
            listening: AtomicBool::new(listening),
        }
    }

    /// The cached application, when the cache is in use and holds it.
    pub(super) async fn get(&self, client_id: &str) -> Option<Arc<Application>> {
        if !self.active() {
            return None;
        }
        self.entries.get(client_id).await
    }

    /// Whether lookups may be answered from the cache now.
    pub(super) fn active(&self) -> bool {
        self.listening.load(Ordering::Acquire)
    }

    /// Where the cache stands before a lookup reads the database (for [`Self::keep`]).
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Keeps what a lookup read, unless the cache was emptied since `generation` (the read
    /// may predate the change that emptied it).
    pub(super) async fn keep(&self, generation: u64, app: &Arc<Application>) {
        if !self.active() || self.generation() != generation {
            return;
        }
        self.entries
            .insert(app.client_id.clone(), app.clone())
            .await;
        // An emptying that raced the insert: drop the entry ourselves.
        if self.generation() != generation {
            self.entries.invalidate(&app.client_id).await;
        }
    }

    /// Forgets every entry (an application changed, here or elsewhere).
    pub(super) fn forget_all(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.entries.invalidate_all();
    }

    /// Empties the cache, and uses it from now on when `listening` (the bus's listener hears
    /// the other processes) or not.
    pub(super) fn set_listening(&self, listening: bool) {
        self.forget_all();
        self.listening.store(listening, Ordering::Release);
    }
}

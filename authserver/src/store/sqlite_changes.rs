//! Whether a SQLite connection other than the hot path's writer has committed: what empties the
//! client and token caches on SQLite ([`super::client_cache`], [`super::token_cache`]), without
//! the writer's own commits (a token issued) emptying them too.
//!
//! `PRAGMA data_version` on a connection changes when any *other* connection, of this process or
//! another, has committed since it last asked; when nothing changed, asking reads only the WAL
//! index in shared memory, but still takes and drops a read lock (two `fcntl` calls). Two
//! connections ask it:
//!
//! - the probe, a read-only connection of its own, before a lookup ([`Changes::notice`]): a
//!   version other than the one seen last means some commit, the writer's or another's. A lookup
//!   skips it when a probe that started less than [`FOREIGN_COMMIT_BOUND`] before the lookup
//!   has completed (and emptied the caches if it had to): so a commit by another connection
//!   counts for every lookup that starts [`FOREIGN_COMMIT_BOUND`] after it or later, and the
//!   probes run at most about once per bound instead of once per request;
//! - the writer's connection, on the writer thread after each of its groups
//!   ([`Changes::commit_and_vouch`]): its version moves only with the commits of the others.
//!
//! A lookup never waits for the lock: one that finds it held when its probe is due (the writer
//! committing under it, another lookup probing) reads the database instead of the caches.
//!
//! Both ask under one lock, in this order, so the database states they see are ordered: each
//! probe's state comes after every earlier one's, and the writer's answer in a vouch reflects a
//! state no earlier than the probe's in that vouch. The lock guards `seen` (the probe's version
//! when the cache was last known to hold nothing older than the database) and `mark` (the writer's
//! version at some state X such that no other connection committed between `seen`'s state and X).
//!
//! - A lookup whose probe answers `seen` finds no commit since, and uses the cache. Any other
//!   answer (or a failure) empties the cache and becomes `seen`; `mark` still holds, since its
//!   interval only shrank.
//! - A vouch reads the probe's version `v`, then the writer's `w`. When `w` equals `mark`, no
//!   other connection committed between `mark`'s state and now, hence none since `seen`'s state:
//!   every commit the probe sees at `v` beyond `seen` is the writer's, and `v` becomes `seen`
//!   without emptying anything; that read of the probe is then a probe that found the caches
//!   current, and stands for the lookups of the next bound (under steady writes, lookups then
//!   seldom probe, nor find the lock held by a commit when they would). Otherwise (another
//!   connection committed, or the chain is not started) `seen` is forgotten, and so is the last
//!   probe's time, so the next lookup probes and empties the cache. Either way `w` becomes
//!   `mark`: no lookup's probe falls between the vouch's two reads, so whatever state the next
//!   `seen` is taken at comes after the writer's read.
//!
//! Hence a commit by another connection (the command line rotating a secret or revoking a
//! token), once made, is noticed by the first probe that starts after it, which every lookup
//! starting [`FOREIGN_COMMIT_BOUND`] later waits for or makes: either the probe's version
//! differs from `seen`, or a vouch since has refused to carry `seen` over it. The cost: the
//! writer asks its version and the probe's once per group, and commits the group under the lock
//! ([`Changes::commit_and_vouch`]), so no probe falls between the two; only a job that commits
//! on its own (the group's transaction could not be had) may be seen by a probe before it is
//! vouched for, which empties the caches. Commits by this process's own other connections (the
//! cold path's pool: sessions, authorization codes, the views) count as another's and empty
//! both caches at the next probe; those that change an application or a token's answer also
//! empty them themselves, at once.

use super::StoreResult;
use super::sqlite_error::database;
use rusqlite::Connection;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError, TryLockError};
use std::time::{Duration, Instant};

/// How long after another connection's commit (another process's: the command line) a lookup
/// may still be answered from what the caches held before it. Within a process, a change empties
/// the caches itself, at once.
pub const FOREIGN_COMMIT_BOUND: Duration = Duration::from_millis(1);

/// The probe connection and what the lookups and the writer have learnt through it.
pub(super) struct Changes {
    state: Mutex<State>,
    /// The longest a completed probe stands for the lookups after it ([`FOREIGN_COMMIT_BOUND`]).
    bound: Duration,
    /// The origin of `probed`'s times.
    epoch: Instant,
    /// When the last probe that left the caches current started, in nanoseconds since `epoch`,
    /// plus one (0: none, the next lookup probes). Written under `state`'s lock, after the
    /// caches were emptied if they had to be.
    probed: AtomicU64,
}

struct State {
    /// The probe: a read-only connection of its own.
    probe: Connection,
    /// The probe's version when the cache was last known current (`None`: unknown, the next
    /// lookup empties the cache).
    seen: Option<i64>,
    /// The writer's version at a state up to which, since `seen`'s state, only the writer has
    /// committed (`None`: no such state known).
    mark: Option<i64>,
}

impl Changes {
    /// Changes seen through `probe`, each probe standing for the lookups of the next `bound`.
    pub(super) fn new(probe: Connection, bound: Duration) -> Changes {
        Changes {
            state: Mutex::new(State {
                probe,
                seen: None,
                mark: None,
            }),
            bound,
            epoch: Instant::now(),
            probed: AtomicU64::new(0),
        }
    }

    /// Calls `changed` when a connection other than the writer's may have committed before a
    /// probe that started less than the bound before this call (making that probe when there is
    /// none), before returning `true`: calls are serialised, so a caller that returns after
    /// another caller's `changed` ran sees the effects of that `changed`. Returns `false`, without
    /// waiting, when a probe is due but the lock is held (the writer committing, another lookup
    /// probing): the caller then reads the database instead of the caches. Also calls `changed`,
    /// and fails, when the database cannot be asked (and the next call then probes again).
    pub(super) fn notice(&self, changed: impl FnOnce()) -> StoreResult<bool> {
        let start = self.now();
        if self.covered(start) {
            return Ok(true);
        }
        let mut state = match self.state.try_lock() {
            Ok(state) => state,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(false),
        };
        let probe_start = self.now();
        let version = match data_version(&state.probe) {
            Ok(version) => version,
            Err(error) => {
                state.seen = None;
                self.probed.store(0, Ordering::Release);
                changed();
                return Err(database(error));
            }
        };
        if state.seen != Some(version) {
            changed();
            state.seen = Some(version);
        }
        self.probed.store(probe_start + 1, Ordering::Release);
        Ok(true)
    }

    /// Whether a completed probe started after `start` less the bound.
    fn covered(&self, start: u64) -> bool {
        match self.probed.load(Ordering::Acquire) {
            0 => false,
            probed => start.saturating_sub(probed - 1) < self.bound.as_nanos() as u64,
        }
    }

    /// Nanoseconds since `epoch`.
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// On the writer thread, at the end of its group: runs `commit` (the group's `COMMIT`), then
    /// carries `seen` over the writer's own commits when no other connection has committed since
    /// (see the module's documentation). Both under the lock, so no lookup's probe falls between
    /// the group's commit and its vouch (and empties the caches for the writer's own commit).
    pub(super) fn commit_and_vouch<R>(&self, writer: &Connection, commit: impl FnOnce() -> R) -> R {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let committed = commit();
        self.vouch(&mut state, writer);
        committed
    }

    fn vouch(&self, state: &mut State, writer: &Connection) {
        if !writer.is_autocommit() {
            // A transaction left open (a failed rollback) would answer from its own old state.
            state.seen = None;
            state.mark = None;
            self.probed.store(0, Ordering::Release);
            return;
        }
        let probe_start = self.now();
        let versions =
            data_version(&state.probe).and_then(|probe| Ok((probe, data_version(writer)?)));
        match versions {
            Ok((probe, writer)) => {
                state.seen = match state.seen {
                    Some(_) if state.mark == Some(writer) => Some(probe),
                    _ => None,
                };
                // Carried over, the vouch's read of the probe is a probe that found the caches
                // current: it stands for the lookups of the next bound, which then need not
                // probe while the writer holds the lock for its next commit.
                let probed = if state.seen.is_some() {
                    probe_start + 1
                } else {
                    0
                };
                self.probed.store(probed, Ordering::Release);
                state.mark = Some(writer);
            }
            Err(error) => {
                tracing::warn!(%error, "cannot ask SQLite whether the database changed");
                state.seen = None;
                state.mark = None;
                self.probed.store(0, Ordering::Release);
            }
        }
    }
}

/// The connection's `PRAGMA data_version`.
fn data_version(connection: &Connection) -> rusqlite::Result<i64> {
    connection
        .prepare_cached("PRAGMA data_version")?
        .query_row([], |row| row.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A WAL database in a temporary folder: the writer's connection, another connection that
    /// writes (as the command line would), and the changes seen through a read-only probe.
    struct Database {
        folder: std::path::PathBuf,
        writer: Connection,
        other: Connection,
        changes: Changes,
    }

    impl Database {
        fn new() -> Database {
            let folder = std::env::temp_dir().join(format!(
                "tokengate-changes-{}",
                crate::secrets::random_client_id()
            ));
            std::fs::create_dir_all(&folder).unwrap();
            let path = folder.join("db.sqlite");
            let writer = Connection::open(&path).unwrap();
            writer
                .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (x INTEGER)")
                .unwrap();
            let other = Connection::open(&path).unwrap();
            let probe =
                Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                    .unwrap();
            Database {
                folder,
                writer,
                other,
                changes: Changes::new(probe, Duration::ZERO),
            }
        }

        /// Changes seen through a new probe connection, each probe standing for `bound`.
        fn probe_anew(&mut self, bound: Duration) {
            let probe = Connection::open_with_flags(
                self.folder.join("db.sqlite"),
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .unwrap();
            self.changes = Changes::new(probe, bound);
        }

        /// Whether a lookup now would empty the cache.
        fn lookup_empties(&self) -> bool {
            let mut emptied = false;
            assert!(self.changes.notice(|| emptied = true).unwrap(), "not busy");
            emptied
        }

        /// A group of the writer: a commit, then its vouch.
        fn writer_group(&self) {
            self.changes
                .commit_and_vouch(&self.writer, || commit(&self.writer));
        }

        /// The writer's vouch for what it committed on its own before.
        fn vouch(&self) {
            self.changes.commit_and_vouch(&self.writer, || ());
        }
    }

    impl Drop for Database {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.folder);
        }
    }

    fn commit(connection: &Connection) {
        connection.execute("INSERT INTO t VALUES (1)", []).unwrap();
    }

    /// A database whose writer has vouched for its commits since the last lookup.
    fn vouched() -> Database {
        let database = Database::new();
        assert!(database.lookup_empties(), "the first lookup");
        database.writer_group();
        assert!(database.lookup_empties(), "before any vouch was carried");
        database.writer_group();
        assert!(!database.lookup_empties());
        database
    }

    #[test]
    fn the_writers_own_commits_leave_the_cache_once_vouched_for() {
        let database = vouched();
        for _ in 0..3 {
            database.writer_group();
            database.writer_group();
            assert!(!database.lookup_empties());
        }
        // Nothing committed: nothing to empty.
        database.vouch();
        assert!(!database.lookup_empties());
    }

    #[test]
    fn a_commit_by_another_connection_empties_the_cache_whenever_it_comes() {
        // After the writer's group.
        let database = vouched();
        database.writer_group();
        commit(&database.other);
        assert!(database.lookup_empties());
        // Before the writer's group, which vouches after it.
        commit(&database.other);
        database.writer_group();
        assert!(database.lookup_empties());
        // Between the writer's commit and its vouch.
        let database = vouched();
        commit(&database.writer);
        commit(&database.other);
        database.vouch();
        assert!(database.lookup_empties());
        // Alone, with the writer idle since.
        let database = vouched();
        commit(&database.other);
        assert!(database.lookup_empties());
        // The writer's next group starts the chain again (its version moved), the one after it
        // is vouched for.
        database.writer_group();
        assert!(database.lookup_empties());
        database.writer_group();
        assert!(!database.lookup_empties());
    }

    #[test]
    fn a_probe_stands_for_the_lookups_of_the_next_bound_unless_a_vouch_saw_another_commit() {
        let bound = Duration::from_millis(300);
        let mut database = vouched();
        database.probe_anew(bound);
        let probed = Instant::now();
        assert!(database.lookup_empties(), "the first lookup probes");
        commit(&database.other);
        let within = !database.lookup_empties();
        if probed.elapsed() < bound {
            assert!(
                within,
                "a lookup within the bound of a probe does not probe"
            );
        }
        std::thread::sleep(bound);
        assert!(
            database.lookup_empties(),
            "past the bound the commit counts"
        );
        assert!(!database.lookup_empties());
        // A vouch that finds another connection's commit makes the next lookup probe at once.
        database.writer_group();
        database.writer_group();
        assert!(database.lookup_empties(), "the writer's chain starts again");
        commit(&database.other);
        database.writer_group();
        assert!(
            database.lookup_empties(),
            "within the bound, after the vouch saw it"
        );
    }

    #[test]
    fn a_due_probe_that_finds_the_lock_held_reads_the_database_without_waiting() {
        let database = vouched();
        let hold = Duration::from_millis(500);
        let (asked, answered) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            // Another thread holds the lock (as the writer does while it commits).
            scope.spawn(|| {
                let _held = database.changes.state.lock().unwrap();
                asked.send(()).unwrap();
                std::thread::sleep(hold);
            });
            answered.recv().unwrap();
            let started = Instant::now();
            let mut emptied = false;
            let current = database.changes.notice(|| emptied = true).unwrap();
            assert!(started.elapsed() < hold, "the lookup waited for the lock");
            assert!(!current && !emptied, "not current: the caches are not used");
        });
        assert!(!database.lookup_empties());
    }

    #[test]
    fn a_vouch_carried_over_stands_for_the_lookups_of_the_next_bound() {
        let bound = Duration::from_millis(300);
        let mut database = vouched();
        database.probe_anew(bound);
        assert!(database.lookup_empties(), "the first lookup probes");
        database.writer_group();
        assert!(database.lookup_empties(), "before any vouch was carried");
        // That lookup's probe no longer stands for anything; the next vouch is carried over.
        std::thread::sleep(bound);
        database.writer_group();
        let vouched = Instant::now();
        // While the writer holds the lock (its next commit), a lookup uses the caches instead
        // of reading the database.
        let (asked, answered) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let _held = database.changes.state.lock().unwrap();
                asked.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(100));
            });
            answered.recv().unwrap();
            let mut emptied = false;
            let current = database.changes.notice(|| emptied = true).unwrap();
            if vouched.elapsed() < bound {
                assert!(current, "the vouch stood for the lookup");
            }
            assert!(!emptied);
        });
        // A vouch that sees another connection's commit still makes the next lookup probe.
        commit(&database.other);
        database.writer_group();
        assert!(database.lookup_empties());
    }

    #[test]
    fn a_lookup_between_the_writers_commit_and_its_vouch_empties_the_cache_once() {
        let database = vouched();
        commit(&database.writer);
        assert!(database.lookup_empties(), "not vouched for yet");
        database.vouch();
        assert!(!database.lookup_empties());
        database.writer_group();
        assert!(!database.lookup_empties());
    }
}

//! Whether a SQLite connection other than the hot path's writer has committed: what empties the
//! client cache on SQLite ([`super::client_cache`]), without the writer's own commits (a token
//! issued) emptying it too.
//!
//! `PRAGMA data_version` on a connection changes when any *other* connection, of this process or
//! another, has committed since it last asked; when nothing changed, asking reads only the WAL
//! index in shared memory. Two connections ask it:
//!
//! - the probe, a read-only connection of its own, before every lookup ([`Changes::notice`]): a
//!   version other than the one seen last means some commit, the writer's or another's;
//! - the writer's connection, on the writer thread after each of its groups
//!   ([`Changes::vouch`]): its version moves only with the commits of the others.
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
//!   without emptying anything. Otherwise (another connection committed, or the chain is not
//!   started) `seen` is forgotten, so the next lookup empties the cache. Either way `w` becomes
//!   `mark`: no lookup's probe falls between the vouch's two reads, so whatever state the next
//!   `seen` is taken at comes after the writer's read.
//!
//! Hence a commit by another connection (the command line rotating a secret), once made, is
//! noticed by the first lookup that starts after it: either the probe's version differs from
//! `seen`, or a vouch since has refused to carry `seen` over it. The cost: the writer asks its
//! version and the probe's once per group; a lookup between a group's commit and its vouch sees
//! a new version before it is vouched for and empties the cache, as any commit did before.
//! Commits by this process's own other connections (the cold path's pool) count as another's,
//! and those that change an application empty the cache themselves as well.

use super::StoreResult;
use super::sqlite_local::database;
use rusqlite::Connection;
use std::sync::{Mutex, PoisonError};

/// The probe connection and what the lookups and the writer have learnt through it.
pub(super) struct Changes {
    state: Mutex<State>,
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
    pub(super) fn new(probe: Connection) -> Changes {
        Changes {
            state: Mutex::new(State {
                probe,
                seen: None,
                mark: None,
            }),
        }
    }

    /// Calls `changed` when a connection other than the writer's may have committed since the
    /// last call, before returning: calls are serialised, so a caller that returns after another
    /// caller's `changed` ran sees the effects of that `changed`. Also calls it, and fails, when
    /// the database cannot be asked (and the next call then calls it again).
    pub(super) fn notice(&self, changed: impl FnOnce()) -> StoreResult<()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let version = match data_version(&state.probe) {
            Ok(version) => version,
            Err(error) => {
                state.seen = None;
                changed();
                return Err(database(error));
            }
        };
        if state.seen != Some(version) {
            changed();
            state.seen = Some(version);
        }
        Ok(())
    }

    /// On the writer thread, after its group: carries `seen` over the writer's own commits when
    /// no other connection has committed since (see the module's documentation).
    pub(super) fn vouch(&self, writer: &Connection) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !writer.is_autocommit() {
            // A transaction left open (a failed rollback) would answer from its own old state.
            state.seen = None;
            state.mark = None;
            return;
        }
        let versions =
            data_version(&state.probe).and_then(|probe| Ok((probe, data_version(writer)?)));
        match versions {
            Ok((probe, writer)) => {
                state.seen = match state.seen {
                    Some(_) if state.mark == Some(writer) => Some(probe),
                    _ => None,
                };
                state.mark = Some(writer);
            }
            Err(error) => {
                tracing::warn!(%error, "cannot ask SQLite whether the database changed");
                state.seen = None;
                state.mark = None;
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
                changes: Changes::new(probe),
            }
        }

        /// Whether a lookup now would empty the cache.
        fn lookup_empties(&self) -> bool {
            let mut emptied = false;
            self.changes.notice(|| emptied = true).unwrap();
            emptied
        }

        /// A group of the writer: a commit, then its vouch.
        fn writer_group(&self) {
            commit(&self.writer);
            self.changes.vouch(&self.writer);
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
        database.changes.vouch(&database.writer);
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
        database.changes.vouch(&database.writer);
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
    fn a_lookup_between_the_writers_commit_and_its_vouch_empties_the_cache_once() {
        let database = vouched();
        commit(&database.writer);
        assert!(database.lookup_empties(), "not vouched for yet");
        database.changes.vouch(&database.writer);
        assert!(!database.lookup_empties());
        database.writer_group();
        assert!(!database.lookup_empties());
    }
}

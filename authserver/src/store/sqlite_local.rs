//! SQLite without thread hops: reads run on the caller's thread over a small set of rusqlite
//! connections, writes queue for the one writer thread, which commits what has queued together.
//!
//! A read is one indexed lookup in a WAL database (microseconds), so it runs where the request
//! runs instead of crossing to a connection thread and back. Writes keep the single-writer
//! discipline: one thread owns the only writing connection and takes jobs from a channel; a
//! failing job undoes only itself (a job of one statement because SQLite undoes a failed
//! statement by itself, any other in a savepoint of its own: [`Undo`]), the batch commits once,
//! and only then does each caller get its answer. Should SQLite roll the whole transaction back
//! in the middle of a batch, the jobs that ran in it fail and the rest commit one by one
//! ([`run_writer`]). Cold-path writes through sqlx first pause the writer thread
//! ([`SqliteLocal::exclusive`]), so two connections never write at once.
//!
//! Whether a connection other than the writer's has committed (what empties the client and token
//! caches): [`SqliteLocal::unless_changed`], through `PRAGMA data_version` at most about once per
//! [`FOREIGN_COMMIT_BOUND`] ([`super::sqlite_changes`]).
//!
//! No connection checkpoints the WAL when committing (`wal_autocheckpoint = 0`): a thread of
//! its own does, every [`CHECKPOINT_EVERY`], so the checkpoint's writes and fsyncs never hold up
//! the writer (a passive checkpoint runs beside writers and readers). A passive checkpoint never
//! catches up with a writer that commits all the time, and the WAL starts over from its
//! beginning only once it has been copied back whole: when it holds [`WAL_RESTART_FRAMES`], the
//! checkpoint thread pauses the writer for the rest of the copy and restarts it.

use super::sqlite_changes::{Changes, FOREIGN_COMMIT_BOUND};
use super::sqlite_error::database;
use super::{StoreError, StoreResult};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a connection waits for another connection's (another process's) write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Prepared statements each connection keeps.
const STATEMENT_CACHE: usize = 32;
/// At most this many queued writes share one commit (as in PostgreSQL's groups).
const MAX_BATCH: usize = super::hot::group_writer::MAX_GROUP;
/// Idle read connections kept for reuse; more may be open while more readers run at once.
const MAX_IDLE_READERS: usize = 8;
/// How often the checkpoint thread copies the WAL back into the database file.
pub(super) const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);
/// Pages in the WAL (16 MiB of 4 KiB pages) past which the checkpoint thread restarts it, with
/// the writer paused: without, a steady stream of writes grew it by about 200 MB a second.
const WAL_RESTART_FRAMES: i64 = 4096;
/// How long a restart of the WAL waits for the readers still on its pages (and for another
/// process's writer) before it gives up until the next round: the writer is paused meanwhile.
const RESTART_PATIENCE: Duration = Duration::from_millis(50);

/// What the writer thread hands back once the job's work is committed or undone: `Some` says why
/// the group's transaction the job ran in did not commit.
type Deliver = Box<dyn FnOnce(Option<&str>) + Send>;
/// A job, told whether it runs inside the group's transaction.
type WriteJob = Box<dyn FnOnce(&Connection, bool) -> Deliver + Send>;

enum Message {
    Write(WriteJob),
    /// Stop writing until the receiver's sender is dropped; `paused` says when the writer stopped.
    Pause {
        paused: tokio::sync::oneshot::Sender<()>,
        resume: mpsc::Receiver<()>,
    },
}

impl Message {
    /// A pause, what says when the writer has stopped, and what resumes it when dropped.
    fn pause() -> (
        Message,
        tokio::sync::oneshot::Receiver<()>,
        mpsc::Sender<()>,
    ) {
        let (paused, stopped) = tokio::sync::oneshot::channel();
        let (resume, wait) = mpsc::channel();
        let pause = Message::Pause {
            paused,
            resume: wait,
        };
        (pause, stopped, resume)
    }
}

/// The rusqlite side of a SQLite store: read connections and the writer thread's queue.
pub(super) struct SqliteLocal {
    path: PathBuf,
    readers: Mutex<Vec<Connection>>,
    /// Whether a connection other than the writer's has committed.
    changes: Arc<Changes>,
    writer: mpsc::Sender<Message>,
    /// Dropped with the store, which ends the checkpoint thread.
    _checkpoints: mpsc::Sender<()>,
    /// A folder to delete when the store closes (an in-memory URL is served from a temporary file).
    temporary: Option<PathBuf>,
}

/// While held, the writer thread is paused: the holder may write through sqlx alone.
pub(super) struct Exclusive {
    _resume: mpsc::Sender<()>,
}

impl SqliteLocal {
    /// The database file.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the writer thread's connection on `path` (created by sqlx beforehand).
    pub(super) fn open(path: &Path, temporary: Option<PathBuf>) -> StoreResult<SqliteLocal> {
        let connection = open(path, false).map_err(database)?;
        let changes = Arc::new(Changes::new(
            open(path, true).map_err(database)?,
            FOREIGN_COMMIT_BOUND,
        ));
        let (writer, queue) = mpsc::channel();
        let vouch = changes.clone();
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || run_writer(connection, queue, &vouch))
            .map_err(|error| anyhow::anyhow!("cannot start the SQLite writer thread: {error}"))?;
        let checkpointer = open_checkpointer(path).map_err(database)?;
        let (checkpoints, stop) = mpsc::channel();
        let pause = writer.clone();
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || run_checkpoints(checkpointer, stop, pause))
            .map_err(|error| {
                anyhow::anyhow!("cannot start the SQLite checkpoint thread: {error}")
            })?;
        Ok(SqliteLocal {
            path: path.to_owned(),
            readers: Mutex::new(Vec::new()),
            changes,
            writer,
            _checkpoints: checkpoints,
            temporary,
        })
    }

    /// Runs `read` on a read-only connection of this thread's choosing, here and now.
    pub(super) fn read<T>(
        &self,
        read: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> StoreResult<T> {
        let idle = self.readers.lock().ok().and_then(|mut idle| idle.pop());
        let connection = match idle {
            Some(connection) => connection,
            None => open(&self.path, true).map_err(database)?,
        };
        let result = read(&connection).map_err(database);
        if let Ok(mut idle) = self.readers.lock()
            && idle.len() < MAX_IDLE_READERS
        {
            idle.push(connection);
        }
        result
    }

    /// Calls `changed` when a connection other than the writer thread's (of this process or
    /// another) may have committed more than [`FOREIGN_COMMIT_BOUND`] ago and not been noticed
    /// yet; `false` when that cannot be known without waiting: [`Changes::notice`].
    pub(super) fn unless_changed(&self, changed: impl FnOnce()) -> StoreResult<bool> {
        self.changes.notice(changed)
    }

    /// Runs `write` on the writer thread, in the group's transaction, so that its failure undoes
    /// what it changed and nothing else ([`Undo`]); answers once it is committed.
    pub(super) async fn write<T: Send + 'static>(
        &self,
        undo: Undo,
        write: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: WriteJob = Box::new(move |connection, in_transaction| {
            // Outside the group's transaction, the savepoint is the job's own transaction.
            let result = match undo {
                Undo::Statement if in_transaction => alone(connection, write),
                _ => in_savepoint(connection, write),
            };
            Box::new(move |group_failed| {
                let result = match group_failed {
                    Some(failure) => Err(anyhow::Error::msg(failure.to_owned()).into()),
                    None => result,
                };
                let _ = answer.send(result);
            })
        });
        self.writer
            .send(Message::Write(job))
            .map_err(|_| writer_gone())?;
        answered.await.map_err(|_| writer_gone())?
    }

    /// Pauses the writer thread (after it commits what it holds) until the guard is dropped.
    pub(super) async fn exclusive(&self) -> StoreResult<Exclusive> {
        let (pause, paused, resume) = Message::pause();
        self.writer.send(pause).map_err(|_| writer_gone())?;
        paused.await.map_err(|_| writer_gone())?;
        Ok(Exclusive { _resume: resume })
    }
}

impl Drop for SqliteLocal {
    fn drop(&mut self) {
        if let Some(folder) = &self.temporary {
            let _ = std::fs::remove_dir_all(folder);
        }
    }
}

fn open(path: &Path, read_only: bool) -> rusqlite::Result<Connection> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE
    } | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let connection = Connection::open_with_flags(path, flags)?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // Pages read through a memory map (no read call per page), and a larger page cache than
    // the default 2 MB: some token indexes are keyed by random digests.
    connection.execute_batch(
        "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0;
         PRAGMA mmap_size = 268435456; PRAGMA cache_size = -16384;",
    )?;
    Ok(connection)
}

/// The checkpoint thread's connection: it waits [`RESTART_PATIENCE`] at most for a lock.
fn open_checkpointer(path: &Path) -> rusqlite::Result<Connection> {
    let connection = open(path, false)?;
    connection.busy_timeout(RESTART_PATIENCE)?;
    Ok(connection)
}

/// The checkpoint thread: a passive checkpoint every `CHECKPOINT_EVERY` until the store closes,
/// and a restart of the WAL, with the writer paused, once it holds [`WAL_RESTART_FRAMES`].
fn run_checkpoints(
    connection: Connection,
    stop: mpsc::Receiver<()>,
    writer: mpsc::Sender<Message>,
) {
    let mut restart_at = WAL_RESTART_FRAMES;
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(CHECKPOINT_EVERY) {
        let checkpointed = checkpoint(&connection, PASSIVE).and_then(|passive| {
            let restart = (passive.frames >= restart_at)
                .then(|| restart_wal(&connection, &writer))
                .transpose()?;
            Ok((passive, restart))
        });
        match checkpointed {
            Ok((passive, restart)) => {
                if let Some(Checkpoint { busy: true, frames }) = restart {
                    tracing::info!(
                        frames,
                        "SQLite WAL restart put off: a reader is still on it"
                    );
                }
                restart_at = next_restart_at(restart_at, passive, restart);
            }
            Err(error) => tracing::warn!(%error, "SQLite checkpoint failed"),
        }
    }
}

/// The WAL size at which the next restart is tried: [`WAL_RESTART_FRAMES`] once the WAL has
/// started over (restarted, or small again by itself), twice its size after a restart a reader
/// put off (a long reader, a backup: the writer is not paused every round meanwhile), else as
/// it was.
fn next_restart_at(restart_at: i64, passive: Checkpoint, restart: Option<Checkpoint>) -> i64 {
    match restart {
        Some(Checkpoint { busy: true, frames }) => frames.saturating_mul(2),
        Some(_) => WAL_RESTART_FRAMES,
        None if passive.frames < WAL_RESTART_FRAMES => WAL_RESTART_FRAMES,
        None => restart_at,
    }
}

/// Copies the rest of the WAL back and starts it over, the writer paused meanwhile (after it
/// commits the group it holds; its queue waits) for as long as `connection` waits for a lock
/// at most (the checkpoint thread's: [`RESTART_PATIENCE`]) and the copy takes. A second
/// passive checkpoint first copies what came during the first beside the writer: the pause
/// then lasts about 3-4 ms at 50 000 tokens a second, where it lasted 6-10 ms without.
fn restart_wal(connection: &Connection, writer: &mpsc::Sender<Message>) -> StoreResult<Checkpoint> {
    checkpoint(connection, PASSIVE)?;
    let (pause, paused, _resume) = Message::pause();
    writer.send(pause).map_err(|_| writer_gone())?;
    paused.blocking_recv().map_err(|_| writer_gone())?;
    checkpoint(connection, RESTART)
}

/// What `PRAGMA wal_checkpoint` answers.
#[derive(Debug, Clone, Copy)]
struct Checkpoint {
    /// It could not do all it was asked (a lock was not to be had).
    busy: bool,
    /// The pages the WAL holds.
    frames: i64,
}

/// A checkpoint beside the writer and the readers: what it can copy now.
const PASSIVE: &str = "PRAGMA wal_checkpoint(PASSIVE)";
/// A checkpoint that copies everything, waits for the readers, and starts the WAL over.
const RESTART: &str = "PRAGMA wal_checkpoint(RESTART)";

/// One of the checkpoint pragmas ([`PASSIVE`], [`RESTART`]), prepared once.
fn checkpoint(connection: &Connection, pragma: &str) -> StoreResult<Checkpoint> {
    connection
        .prepare_cached(pragma)
        .and_then(|mut statement| {
            statement.query_row([], |row| {
                Ok(Checkpoint {
                    busy: row.get::<_, i64>(0)? != 0,
                    frames: row.get(1)?,
                })
            })
        })
        .map_err(database)
}

/// How a write job's failure is undone without undoing the other jobs of its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Undo {
    /// The job changes the database in one statement at most, and fails only when that statement
    /// does (or before it runs): SQLite undoes a failed statement by itself, so the job needs no
    /// savepoint, whose page copies into the sub-journal are most of a small write's cost.
    Statement,
    /// The job may change the database in several statements: it runs in a savepoint of its own,
    /// rolled back when it fails.
    Savepoint,
}

/// `write` as it is (an [`Undo::Statement`] job): a panic is its failure.
fn alone<T>(
    connection: &Connection,
    write: impl FnOnce(&Connection) -> StoreResult<T>,
) -> StoreResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write(connection)))
        .unwrap_or_else(|_| Err(anyhow::anyhow!("a SQLite write panicked").into()))
}

/// `write` between `SAVEPOINT` and `RELEASE`, or rolled back to the savepoint when it fails.
fn in_savepoint<T>(
    connection: &Connection,
    write: impl FnOnce(&Connection) -> StoreResult<T>,
) -> StoreResult<T> {
    run(connection, "SAVEPOINT job").map_err(database)?;
    let result = alone(connection, write);
    if result.is_err() {
        let _ = run(connection, "ROLLBACK TO job");
    }
    // Outside a batch's transaction this is the commit, so its failure is the job's.
    let released = run(connection, "RELEASE job");
    match (result, released) {
        (Ok(value), Ok(())) => Ok(value),
        (Err(error), _) => Err(error),
        (Ok(_), Err(error)) => Err(database(error)),
    }
}

/// The writer thread: takes what has queued (up to `MAX_BATCH`), runs it in one transaction,
/// commits, then answers. Ends when the store is dropped.
///
/// SQLite may roll the whole transaction back when a statement fails (a full disk, an I/O error:
/// "Response To Errors Within A Transaction" in its documentation), leaving the connection in
/// autocommit mode. Hence a job counts as run in the group's transaction only if the transaction
/// is still open after it: once it is not, the jobs that ran in it are failed (their work is
/// undone) and the rest run as when the transaction could not be begun, each in a savepoint that
/// is a transaction of its own, answered its own result.
fn run_writer(connection: Connection, queue: mpsc::Receiver<Message>, changes: &Changes) {
    let mut next = queue.recv().ok();
    while let Some(message) = next.take() {
        let mut batch = match message {
            Message::Pause { paused, resume } => {
                if paused.send(()).is_ok() {
                    // Returns when the guard is dropped.
                    let _ = resume.recv();
                }
                next = queue.recv().ok();
                continue;
            }
            Message::Write(job) => vec![job],
        };
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(Message::Write(job)) => batch.push(job),
                Ok(pause) => {
                    next = Some(pause);
                    break;
                }
                Err(_) => break,
            }
        }
        super::hot::group_writer::count_group(
            super::hot::group_writer::WriterKind::Sqlite,
            batch.len(),
        );
        // Without the transaction (the write lock was not to be had), each job runs in a
        // savepoint that is a transaction of its own.
        end_unfinished_transaction(&connection);
        let mut in_group = run(&connection, "BEGIN IMMEDIATE").is_ok();
        let mut group_failed = None;
        // Each job's answer, and whether it ran in the group's transaction.
        let mut deliveries: Vec<(Deliver, bool)> = Vec::with_capacity(batch.len());
        for job in batch {
            if !in_group {
                end_unfinished_transaction(&connection);
            }
            deliveries.push((job(&connection, in_group), in_group));
            if in_group && connection.is_autocommit() {
                in_group = false;
                group_failed = Some("SQLite rolled back the transaction of the group".to_owned());
            }
        }
        // Before the answers: a lookup after a write's answer finds the write vouched for.
        changes.commit_and_vouch(&connection, || {
            if in_group && let Err(error) = run(&connection, "COMMIT") {
                group_failed = Some(format!("SQLite commit failed: {error}"));
                let _ = run(&connection, "ROLLBACK");
            }
            // Not left open while the writer waits for the next group or is paused.
            end_unfinished_transaction(&connection);
        });
        for (deliver, in_group) in deliveries {
            deliver(if in_group {
                group_failed.as_deref()
            } else {
                None
            });
        }
        if next.is_none() {
            next = queue.recv().ok();
        }
    }
}

/// Rolls back a transaction left open where none should be: a job that ran as a transaction of
/// its own and whose commit failed (it was answered so), or a group whose `ROLLBACK` failed.
/// Otherwise the next jobs' savepoints would nest in it and be answered before any commit.
fn end_unfinished_transaction(connection: &Connection) {
    if !connection.is_autocommit() {
        let _ = run(connection, "ROLLBACK");
    }
}

/// One statement without parameters or rows, prepared once.
fn run(connection: &Connection, sql: &str) -> rusqlite::Result<()> {
    connection.prepare_cached(sql)?.execute([]).map(drop)
}

fn writer_gone() -> StoreError {
    anyhow::anyhow!("the SQLite writer thread has stopped").into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets;
    use crate::store::hot::{self, Hot, NewRow};
    use crate::store::{GrantType, TokenKind};
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    /// A lone access token of `application_id` in a family of its own.
    fn lone(application_id: i64) -> NewRow {
        NewRow {
            kind: TokenKind::Access,
            digest: secrets::digest(&secrets::random_token()),
            application_id,
            user_id: None,
            scope: "read".into(),
            family: secrets::random_token(),
            // Looked up like a family given by a refresh: the revoked one below must be found.
            new_family: false,
            access_token_id: None,
            issued_at: crate::store::now(),
            expires_at: crate::store::now() + 600,
            cnf_x5t_s256: None,
            cnf_jkt: None,
            audience: None,
        }
    }

    /// `access` and a refresh token naming it, whose digest is `refresh_digest`.
    fn pair(access: NewRow, refresh_digest: String) -> Vec<NewRow> {
        let refresh = NewRow {
            kind: TokenKind::Refresh,
            digest: refresh_digest,
            ..access.clone()
        };
        vec![access, refresh]
    }

    /// Whether a row with this digest is stored.
    fn stored(local: &SqliteLocal, digest: &str) -> bool {
        local
            .read(|connection| {
                connection.query_row(
                    "SELECT COUNT(*) FROM tokens WHERE digest = ?1",
                    [digest],
                    |row| row.get::<_, i64>(0),
                )
            })
            .unwrap()
            == 1
    }

    /// A SQLite store and the id of an application of it.
    async fn store_with_application() -> (crate::store::Store, i64) {
        let store = crate::testing::sqlite_store().await;
        let (client_id, _) =
            crate::testing::application(&store, GrantType::ClientCredentials, false).await;
        let application = store.find_application_by_client_id(&client_id).await;
        let application = application.unwrap().unwrap().id;
        (store, application)
    }

    /// Stores a lone token of `application` through the writer.
    async fn insert_lone(local: &SqliteLocal, application: i64) {
        let rows = vec![lone(application)];
        local
            .write(Undo::Statement, move |c| {
                hot::sqlite::insert_tokens(c, &rows)
            })
            .await
            .unwrap();
    }

    /// A read transaction on the `tokens` rows stored now (another process's, say), held until
    /// it is committed.
    fn reader_holding(local: &SqliteLocal, tokens: i64) -> Connection {
        let reader = open(&local.path, true).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        let count = "SELECT COUNT(*) FROM tokens";
        let counted: i64 = reader.query_row(count, [], |row| row.get(0)).unwrap();
        assert_eq!(counted, tokens);
        reader
    }

    /// [`restart_wal`] of `local`'s writer, off the runtime: whether it was put off, and how
    /// long it took.
    async fn restart(
        local: &SqliteLocal,
        checkpointer: Connection,
    ) -> (Connection, bool, Duration) {
        let writer = local.writer.clone();
        let started = std::time::Instant::now();
        let (checkpointer, restarted) = tokio::task::spawn_blocking(move || {
            let restarted = restart_wal(&checkpointer, &writer).unwrap();
            (checkpointer, restarted)
        })
        .await
        .unwrap();
        (checkpointer, restarted.busy, started.elapsed())
    }

    /// The restart the checkpoint thread makes of a large WAL: it waits for the readers still
    /// on the WAL's pages, so the write after it starts the WAL over. (A passive checkpoint
    /// leaves those pages there: the next write, a reader still on them, adds to the WAL.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_restarted_wal_starts_over_at_the_next_write() {
        let (store, application) = store_with_application().await;
        let Hot::Sqlite(local) = &store.hot else {
            panic!("a SQLite store");
        };
        for _ in 0..50 {
            insert_lone(local, application).await;
        }
        let reader = reader_holding(local, 50);
        let checkpointer = open(&local.path, false).unwrap();
        let frames = checkpoint(&checkpointer, PASSIVE).unwrap().frames;
        assert!(frames >= 100, "{frames} pages in the WAL");

        let reading = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            reader.execute_batch("COMMIT").unwrap();
        });
        let (checkpointer, put_off, _) = restart(local, checkpointer).await;
        assert!(!put_off);
        insert_lone(local, application).await;
        reading.join().unwrap();
        let after = checkpoint(&checkpointer, PASSIVE).unwrap().frames;
        assert!(
            after < frames / 10,
            "{after} pages in the WAL after one write"
        );
    }

    /// A reader that stays on the WAL's pages (another process's long read) keeps the WAL
    /// from starting over, but pauses the writer for [`RESTART_PATIENCE`] at most per round.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_restart_gives_up_on_a_long_reader_and_the_writer_goes_on() {
        let (store, application) = store_with_application().await;
        let Hot::Sqlite(local) = &store.hot else {
            panic!("a SQLite store");
        };
        insert_lone(local, application).await;
        let reader = reader_holding(local, 1);
        let checkpointer = open_checkpointer(&local.path).unwrap();
        let (_, put_off, paused) = restart(local, checkpointer).await;
        assert!(put_off, "the reader is still on the WAL");
        assert!(paused < Duration::from_secs(1), "restart took {paused:?}");
        insert_lone(local, application).await;
        reader.execute_batch("COMMIT").unwrap();
    }

    /// When the checkpoint thread tries its next restart: at once after the WAL started over,
    /// only at twice the size after a reader put one off, and not sooner for a smaller WAL.
    #[test]
    fn a_put_off_restart_is_tried_again_once_the_wal_has_doubled() {
        let wal = |frames| Checkpoint {
            busy: false,
            frames,
        };
        let put_off = |frames| Checkpoint { busy: true, frames };
        let first = WAL_RESTART_FRAMES;
        assert_eq!(next_restart_at(first, wal(100), None), first);
        assert_eq!(
            next_restart_at(first, wal(5000), Some(put_off(5000))),
            10_000
        );
        assert_eq!(next_restart_at(10_000, wal(8000), None), 10_000);
        assert_eq!(
            next_restart_at(10_000, wal(12_000), Some(wal(12_000))),
            first
        );
        assert_eq!(
            next_restart_at(10_000, wal(3), None),
            first,
            "started over by itself"
        );
    }

    /// Token inserts of one group, with and without savepoints, some failing: each failure
    /// undoes its own job only (a pair whose second row fails keeps neither row), and every
    /// other job of the group is committed.
    #[tokio::test]
    async fn a_failing_write_undoes_only_itself_in_its_group() {
        let (store, application) = store_with_application().await;
        let Hot::Sqlite(local) = &store.hot else {
            panic!("a SQLite store");
        };
        let taken = lone(application);
        let rows = vec![taken.clone()];
        local
            .write(Undo::Statement, move |c| {
                hot::sqlite::insert_tokens(c, &rows)
            })
            .await
            .unwrap();
        let revoked = lone(application);
        let family = revoked.family.clone();
        local
            .write(Undo::Savepoint, move |c| {
                hot::sqlite::revoke_family(c, &family, 0).map_err(database)
            })
            .await
            .unwrap();

        let unknown_application = NewRow {
            application_id: application + 1000,
            ..lone(application)
        };
        let jobs = [
            (Undo::Statement, vec![lone(application)], true),
            (Undo::Statement, vec![taken.clone()], false),
            (Undo::Statement, vec![unknown_application], false),
            (Undo::Statement, vec![revoked], false),
            (
                Undo::Savepoint,
                pair(lone(application), taken.digest.clone()),
                false,
            ),
            (
                Undo::Savepoint,
                pair(lone(application), secrets::digest(&secrets::random_token())),
                true,
            ),
            (Undo::Statement, vec![lone(application)], true),
        ];
        // Queued while the writer is paused: taken together, as one group.
        let paused = local.exclusive().await.unwrap();
        let mut writes: Vec<_> = jobs
            .iter()
            .map(|(undo, rows, _)| {
                let rows = rows.clone();
                Box::pin(local.write(*undo, move |c| hot::sqlite::insert_tokens(c, &rows)))
            })
            .collect();
        let mut context = Context::from_waker(Waker::noop());
        for write in &mut writes {
            assert!(matches!(write.as_mut().poll(&mut context), Poll::Pending));
        }
        drop(paused);
        for (write, (undo, rows, succeeds)) in writes.into_iter().zip(&jobs) {
            let result = write.await;
            assert_eq!(result.is_ok(), *succeeds, "{undo:?} {rows:?}: {result:?}");
            for row in rows.iter().filter(|row| row.digest != taken.digest) {
                assert_eq!(stored(local, &row.digest), *succeeds, "{undo:?} {rows:?}");
            }
        }
        assert!(stored(local, &taken.digest));
    }

    /// SQLite rolls the whole transaction back in the middle of a group (here a job's own
    /// `ROLLBACK`, which the writer cannot tell from SQLite's on a full disk or an I/O error):
    /// the jobs that ran in it are answered their failure, the jobs after it commit on their own
    /// and are answered so, and the writer's next group commits as usual.
    #[tokio::test]
    async fn a_group_whose_transaction_sqlite_rolled_back_answers_each_job_what_it_became() {
        let (store, application) = store_with_application().await;
        let Hot::Sqlite(local) = &store.hot else {
            panic!("a SQLite store");
        };
        let another_pair = || pair(lone(application), secrets::digest(&secrets::random_token()));
        // (how the job is undone, its rows, what it runs after them, committed): `ROLLBACK` ends
        // whatever transaction it runs in; `ROLLBACK; BEGIN` leaves one open where its own
        // transaction's commit would come (as a failed commit may), for the next job to find.
        let jobs = [
            (Undo::Statement, vec![lone(application)], "", false),
            (Undo::Savepoint, another_pair(), "", false),
            (Undo::Statement, vec![lone(application)], "ROLLBACK", false),
            (Undo::Statement, vec![lone(application)], "", true),
            (Undo::Savepoint, another_pair(), "", true),
            (Undo::Savepoint, another_pair(), "ROLLBACK", false),
            (Undo::Statement, vec![lone(application)], "", true),
            (Undo::Savepoint, another_pair(), "ROLLBACK; BEGIN", false),
            (Undo::Statement, vec![lone(application)], "", true),
        ];
        // Queued while the writer is paused: taken together, as one group.
        let paused = local.exclusive().await.unwrap();
        let mut writes: Vec<_> = jobs
            .iter()
            .map(|(undo, rows, then, _)| {
                let (rows, then) = (rows.clone(), *then);
                Box::pin(local.write(*undo, move |c| {
                    let id = hot::sqlite::insert_tokens(c, &rows)?;
                    c.execute_batch(then).map_err(database)?;
                    Ok(id)
                }))
            })
            .collect();
        let mut context = Context::from_waker(Waker::noop());
        for write in &mut writes {
            assert!(matches!(write.as_mut().poll(&mut context), Poll::Pending));
        }
        drop(paused);
        for (write, (undo, rows, _, committed)) in writes.into_iter().zip(&jobs) {
            let result = write.await;
            assert_eq!(result.is_ok(), *committed, "{undo:?} {rows:?}: {result:?}");
            for row in rows {
                assert_eq!(stored(local, &row.digest), *committed, "{undo:?} {rows:?}");
            }
        }
        let after = vec![lone(application)];
        let digest = after[0].digest.clone();
        local
            .write(Undo::Statement, move |c| {
                hot::sqlite::insert_tokens(c, &after)
            })
            .await
            .unwrap();
        assert!(stored(local, &digest));
    }
}

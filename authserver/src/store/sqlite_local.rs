//! SQLite without thread hops: reads run on the caller's thread over a small set of rusqlite
//! connections, writes queue for the one writer thread, which commits what has queued together.
//!
//! A read is one indexed lookup in a WAL database (microseconds), so it runs where the request
//! runs instead of crossing to a connection thread and back. Writes keep the single-writer
//! discipline: one thread owns the only writing connection and takes jobs from a channel; each
//! job runs in a savepoint of its own (a failing job undoes only itself), the batch commits once,
//! and only then does each caller get its answer. Cold-path writes through sqlx first pause the
//! writer thread ([`SqliteLocal::exclusive`]), so two connections never write at once.
//!
//! Whether anything changed: a read-only connection of its own asks `PRAGMA data_version`, which
//! changes with every commit of any other connection, in this process or another (the operator
//! command line); when nothing changed, asking reads only the WAL index in shared memory
//! ([`SqliteLocal::unless_changed`]).
//!
//! No connection checkpoints the WAL when committing (`wal_autocheckpoint = 0`): a thread of
//! its own does, every [`CHECKPOINT_EVERY`], so the checkpoint's writes and fsyncs never hold up
//! the writer (a passive checkpoint runs beside writers and readers).

use super::{StoreError, StoreResult};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Mutex, PoisonError};
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

/// What the writer thread hands back after the batch's commit (`Some` when it failed).
type Deliver = Box<dyn FnOnce(Option<&rusqlite::Error>) + Send>;
type WriteJob = Box<dyn FnOnce(&Connection) -> Deliver + Send>;

enum Message {
    Write(WriteJob),
    /// Stop writing until the receiver's sender is dropped; `paused` says when the writer stopped.
    Pause {
        paused: tokio::sync::oneshot::Sender<()>,
        resume: mpsc::Receiver<()>,
    },
}

/// The rusqlite side of a SQLite store: read connections and the writer thread's queue.
pub(super) struct SqliteLocal {
    path: PathBuf,
    readers: Mutex<Vec<Connection>>,
    /// The connection that asks whether the database changed, and the version it saw last.
    probe: Mutex<Probe>,
    writer: mpsc::Sender<Message>,
    /// Dropped with the store, which ends the checkpoint thread.
    _checkpoints: mpsc::Sender<()>,
    /// A folder to delete when the store closes (an in-memory URL is served from a temporary file).
    temporary: Option<PathBuf>,
}

/// A read-only connection asking `PRAGMA data_version`, and its last answer (`None` before the
/// first and after a failure).
struct Probe {
    connection: Connection,
    seen: Option<i64>,
}

/// While held, the writer thread is paused: the holder may write through sqlx alone.
pub(super) struct Exclusive {
    _resume: mpsc::Sender<()>,
}

impl SqliteLocal {
    /// Opens the writer thread's connection on `path` (created by sqlx beforehand).
    pub(super) fn open(path: &Path, temporary: Option<PathBuf>) -> StoreResult<SqliteLocal> {
        let connection = open(path, false).map_err(database)?;
        let (writer, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || run_writer(connection, queue))
            .map_err(|error| anyhow::anyhow!("cannot start the SQLite writer thread: {error}"))?;
        let checkpointer = open(path, false).map_err(database)?;
        let (checkpoints, stop) = mpsc::channel();
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || run_checkpoints(checkpointer, stop))
            .map_err(|error| {
                anyhow::anyhow!("cannot start the SQLite checkpoint thread: {error}")
            })?;
        let probe = Probe {
            connection: open(path, true).map_err(database)?,
            seen: None,
        };
        Ok(SqliteLocal {
            path: path.to_owned(),
            readers: Mutex::new(Vec::new()),
            probe: Mutex::new(probe),
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

    /// Calls `changed` when any connection (of this process or another) has committed since the
    /// last call, before returning: calls are serialised, so a caller that returns after another
    /// caller's `changed` ran sees the effects of that `changed`. Also calls it, and fails, when
    /// the database cannot be asked (and the next call then calls it again).
    pub(super) fn unless_changed(&self, changed: impl FnOnce()) -> StoreResult<()> {
        let mut probe = self.probe.lock().unwrap_or_else(PoisonError::into_inner);
        let version = probe
            .connection
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut statement| statement.query_row([], |row| row.get::<_, i64>(0)));
        let version = match version {
            Ok(version) => version,
            Err(error) => {
                probe.seen = None;
                changed();
                return Err(database(error));
            }
        };
        if probe.seen != Some(version) {
            changed();
            probe.seen = Some(version);
        }
        Ok(())
    }

    /// Runs `write` on the writer thread in a savepoint of its own; answers once it is committed.
    pub(super) async fn write<T: Send + 'static>(
        &self,
        write: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: WriteJob = Box::new(move |connection| {
            let result = in_savepoint(connection, write);
            Box::new(move |commit_failed| {
                let result = match commit_failed {
                    Some(error) => Err(anyhow::anyhow!("SQLite commit failed: {error}").into()),
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
        let (paused, stopped) = tokio::sync::oneshot::channel();
        let (resume, wait) = mpsc::channel();
        self.writer
            .send(Message::Pause {
                paused,
                resume: wait,
            })
            .map_err(|_| writer_gone())?;
        stopped.await.map_err(|_| writer_gone())?;
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
    // the default 2 MB: the token indexes are keyed by random digests.
    connection.execute_batch(
        "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0;
         PRAGMA mmap_size = 268435456; PRAGMA cache_size = -16384;",
    )?;
    Ok(connection)
}

/// The checkpoint thread: a passive checkpoint every `CHECKPOINT_EVERY` until the store closes.
fn run_checkpoints(connection: Connection, stop: mpsc::Receiver<()>) {
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(CHECKPOINT_EVERY) {
        if let Err(error) = connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(%error, "SQLite checkpoint failed");
        }
    }
}

/// `write` between `SAVEPOINT` and `RELEASE`, or rolled back to the savepoint when it fails.
fn in_savepoint<T>(
    connection: &Connection,
    write: impl FnOnce(&Connection) -> StoreResult<T>,
) -> StoreResult<T> {
    run(connection, "SAVEPOINT job").map_err(database)?;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write(connection)))
        .unwrap_or_else(|_| Err(anyhow::anyhow!("a SQLite write panicked").into()));
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
fn run_writer(connection: Connection, queue: mpsc::Receiver<Message>) {
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
        // Without the transaction (the write lock was not to be had), each job's savepoint is a
        // transaction of its own.
        let batched = run(&connection, "BEGIN IMMEDIATE").is_ok();
        let deliveries: Vec<Deliver> = batch.into_iter().map(|job| job(&connection)).collect();
        let commit = if batched {
            run(&connection, "COMMIT").err()
        } else {
            None
        };
        if commit.is_some() {
            let _ = run(&connection, "ROLLBACK");
        }
        for deliver in deliveries {
            deliver(commit.as_ref());
        }
        if next.is_none() {
            next = queue.recv().ok();
        }
    }
}

/// One statement without parameters or rows, prepared once.
fn run(connection: &Connection, sql: &str) -> rusqlite::Result<()> {
    connection.prepare_cached(sql)?.execute([]).map(drop)
}

fn writer_gone() -> StoreError {
    anyhow::anyhow!("the SQLite writer thread has stopped").into()
}

/// A rusqlite error as the storage layer reports it: SQLite's own failures as
/// `StoreError::Database`, so constraint violations are recognised as they are from sqlx.
pub(super) fn database(error: rusqlite::Error) -> StoreError {
    match error {
        rusqlite::Error::SqliteFailure(failure, message) => {
            StoreError::Database(sqlx::Error::Database(Box::new(SqliteFailure {
                message: message.unwrap_or_else(|| failure.to_string()),
                extended_code: failure.extended_code,
            })))
        }
        other => StoreError::Other(other.into()),
    }
}

/// A failure reported by SQLite through rusqlite, in sqlx's terms.
#[derive(Debug)]
struct SqliteFailure {
    message: String,
    extended_code: i32,
}

impl std::fmt::Display for SqliteFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (code {})", self.message, self.extended_code)
    }
}

impl std::error::Error for SqliteFailure {}

impl sqlx::error::DatabaseError for SqliteFailure {
    fn message(&self) -> &str {
        &self.message
    }

    fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
        Some(self.extended_code.to_string().into())
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> sqlx::error::ErrorKind {
        use rusqlite::ffi;
        match self.extended_code {
            ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
                sqlx::error::ErrorKind::UniqueViolation
            }
            ffi::SQLITE_CONSTRAINT_FOREIGNKEY => sqlx::error::ErrorKind::ForeignKeyViolation,
            ffi::SQLITE_CONSTRAINT_NOTNULL => sqlx::error::ErrorKind::NotNullViolation,
            ffi::SQLITE_CONSTRAINT_CHECK => sqlx::error::ErrorKind::CheckViolation,
            _ => sqlx::error::ErrorKind::Other,
        }
    }
}

//! Writes committed in groups: a writer task takes what has queued while its previous group was
//! in flight (up to [`MAX_GROUP`]), commits it in one round trip, then answers each caller with
//! its own result. Nothing waits for a timer: a lone write goes at once, and a group gathers
//! only while the database is busy with the one before, so the wait is bounded by one group's
//! round trip. The sizes of the groups are counted per writer ([`write_group_sizes`]).

use super::super::{StoreError, StoreResult};
use prometheus_client::metrics::histogram::Histogram;
use resource_server::metrics::HistogramFamily;
use std::future::Future;
use std::sync::LazyLock;
use tokio::sync::{mpsc, oneshot};

/// At most this many writes share one group (SQLite's writer thread has the same bound).
pub(in crate::store) const MAX_GROUP: usize = 64;

/// A writer that commits in groups, by what it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterKind {
    /// SQLite's writer thread: every hot write, one transaction per group.
    Sqlite,
    /// PostgreSQL: new access and refresh tokens, one statement per group.
    Tokens,
    /// PostgreSQL: refresh-token claims, one statement per group.
    RefreshClaims,
    /// PostgreSQL: the password throttle's failures and clears, one statement per group.
    Throttle,
}

impl WriterKind {
    pub const ALL: [WriterKind; 4] = [
        WriterKind::Sqlite,
        WriterKind::Tokens,
        WriterKind::RefreshClaims,
        WriterKind::Throttle,
    ];

    /// The name the metrics give it.
    pub fn as_str(self) -> &'static str {
        match self {
            WriterKind::Sqlite => "sqlite",
            WriterKind::Tokens => "tokens",
            WriterKind::RefreshClaims => "refresh_claims",
            WriterKind::Throttle => "throttle",
        }
    }
}

/// The upper bounds of the group-size histogram's buckets (then `+Inf`).
const GROUP_SIZE_BOUNDS: [f64; 7] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];

/// The group sizes: the family to register, a series per [`WriterKind::ALL`] position.
struct GroupSizes {
    family: HistogramFamily,
    by_writer: [Histogram; WriterKind::ALL.len()],
}

/// This process's group sizes.
static GROUP_SIZES: LazyLock<GroupSizes> = LazyLock::new(|| {
    let (family, by_writer) = resource_server::metrics::histograms(
        || Histogram::new(GROUP_SIZE_BOUNDS),
        "writer",
        WriterKind::ALL.map(WriterKind::as_str),
    );
    GroupSizes { family, by_writer }
});

/// Counts one group of `size` writes committed by `writer`.
pub(in crate::store) fn count_group(writer: WriterKind, size: usize) {
    GROUP_SIZES.by_writer[writer as usize].observe(size as f64);
}

/// The histogram family of the sizes of the groups every writer of this process committed, by
/// `writer` (registered by `crate::metrics`).
pub fn write_group_sizes() -> &'static HistogramFamily {
    &GROUP_SIZES.family
}

type Queued<J, R> = (J, oneshot::Sender<StoreResult<R>>);

/// The queue of one writer task; the task ends when the last clone of this is dropped.
pub(in crate::store) struct GroupWriter<J, R> {
    queue: mpsc::UnboundedSender<Queued<J, R>>,
}

impl<J: Send + 'static, R: Send + 'static> GroupWriter<J, R> {
    /// Starts the writer task. `commit` writes a group and gives one result per job, in order.
    pub(in crate::store) fn spawn<F, C>(writer: WriterKind, commit: C) -> GroupWriter<J, R>
    where
        C: Fn(Vec<J>) -> F + Send + 'static,
        F: Future<Output = Vec<StoreResult<R>>> + Send,
    {
        let (queue, mut queued) = mpsc::unbounded_channel::<Queued<J, R>>();
        tokio::spawn(async move {
            let mut group = Vec::with_capacity(MAX_GROUP);
            while queued.recv_many(&mut group, MAX_GROUP).await > 0 {
                count_group(writer, group.len());
                let (jobs, answers): (Vec<J>, Vec<_>) = group.drain(..).unzip();
                let mut results = commit(jobs).await.into_iter();
                for answer in answers {
                    let result = results.next().unwrap_or_else(|| {
                        Err(anyhow::anyhow!("a group write gave no result for a job").into())
                    });
                    // The caller may be gone (its client hung up): the write stands all the same.
                    let _ = answer.send(result);
                }
            }
        });
        GroupWriter { queue }
    }

    /// Queues `job` and waits until its group is committed: its own result.
    pub(in crate::store) async fn write(&self, job: J) -> StoreResult<R> {
        let (answer, answered) = oneshot::channel();
        self.queue.send((job, answer)).map_err(|_| writer_gone())?;
        answered.await.map_err(|_| writer_gone())?
    }
}

fn writer_gone() -> StoreError {
    anyhow::anyhow!("a group writer task has stopped").into()
}

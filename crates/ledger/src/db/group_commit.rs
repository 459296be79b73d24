//! SQLite's writer thread: queued writes, taken in batches, each batch one commit.

use std::sync::Mutex;

use prometheus_client::metrics::histogram::Histogram;
use rusqlite::Connection;

use super::budget::{Budget, disarm};
use super::sqlite::LiteWriter;
use super::{Writer, lock, run_caught};
use crate::errors::ApiError;
use crate::sql::Sql;

/// Writes that may wait for the writer at once; past this a request waits for room (within its
/// budget), which bounds the memory a flood of writes can take.
pub(super) const QUEUED_WRITES: usize = 4096;
/// The most writes one commit holds: enough to amortise the sync over any realistic burst,
/// few enough that the first of them is not kept waiting long for the last.
const MAX_BATCH: usize = 512;

/// One queued write, its answer kept until the commit that holds it is on disk.
pub(super) trait Job: Send {
    fn budget(&self) -> Budget;
    /// Runs the work, keeping its answer; `true` when it succeeded.
    fn run(&mut self, w: &mut Writer<'_>) -> bool;
    /// Answers the request: the work's answer, or `failed` when its commit failed.
    fn answer(self: Box<Self>, failed: Option<ApiError>);
}

pub(super) struct Queued<T, F> {
    pub(super) budget: Budget,
    pub(super) work: F,
    pub(super) out: Option<Result<T, ApiError>>,
    pub(super) tx: tokio::sync::oneshot::Sender<Result<T, ApiError>>,
}

impl<T, F> Job for Queued<T, F>
where
    T: Send,
    F: FnMut(&mut Writer<'_>) -> Result<T, ApiError> + Send,
{
    fn budget(&self) -> Budget {
        self.budget
    }

    fn run(&mut self, w: &mut Writer<'_>) -> bool {
        let out = self.budget.settle(run_caught(&mut self.work, w));
        let ok = out.is_ok();
        self.out = Some(out);
        ok
    }

    fn answer(self: Box<Self>, failed: Option<ApiError>) {
        let out = match (failed, self.out) {
            (_, Some(Err(e))) | (Some(e), _) => Err(e),
            (None, Some(ok)) => ok,
            (None, None) => Err(ApiError::Internal("the write was never run".into())),
        };
        // The caller may have gone away; the work stands either way.
        let _ = self.tx.send(out);
    }
}

pub(super) fn writer_stopped() -> ApiError {
    ApiError::Internal("the ledger writer has stopped; the server's log has the cause".into())
}

/// The writer thread: takes every write queued at the moment, runs each in its own savepoint
/// inside one transaction, commits once and only then answers them, so one sync to disk
/// carries the whole batch (anchor: group-commit). Runs until every `Db` handle is gone.
pub(super) fn group_commit(
    writer: &Mutex<LiteWriter>,
    mut jobs: tokio::sync::mpsc::Receiver<Box<dyn Job>>,
    batches: &Histogram,
) {
    while let Some(first) = jobs.blocking_recv() {
        let mut w = lock(writer);
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if let Some(committed) = commit_batch(&mut w, batch) {
            batches.observe(committed as f64);
        }
    }
}

/// One savepoint statement, prepared once per connection: every write runs three.
fn savepoint(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// Runs and commits one batch; the number of writes the commit held, when it committed any.
fn commit_batch(lw: &mut LiteWriter, batch: Vec<Box<dyn Job>>) -> Option<usize> {
    let mut waiting: std::collections::VecDeque<Box<dyn Job>> = batch.into();
    // A panic in an earlier batch may have left its transaction open; it was never answered.
    if !lw.conn.is_autocommit() {
        let _ = lw.conn.execute_batch("ROLLBACK");
    }
    if let Err(e) = lw.conn.execute_batch("BEGIN IMMEDIATE") {
        tracing::error!("the ledger could not begin a write: {e}");
        for job in waiting {
            job.answer(Some(write_failure(&e)));
        }
        return None;
    }
    let mut done: Vec<Box<dyn Job>> = Vec::with_capacity(waiting.len());
    while let Some(mut job) = waiting.pop_front() {
        let budget = job.budget();
        if budget.passed() {
            job.answer(Some(budget.exceeded()));
            continue;
        }
        if let Err(e) = savepoint(&lw.conn, "SAVEPOINT job") {
            tracing::error!("the ledger could not open a savepoint: {e}");
            job.answer(Some(ApiError::Database));
            continue;
        }
        budget.arm(&lw.conn);
        let ok = job.run(&mut Writer {
            sql: Sql::Lite(&lw.conn),
            last_ms: &mut lw.last_ms,
            clock: None,
        });
        disarm(&lw.conn);
        if lw.conn.is_autocommit() {
            // The failure undid the whole transaction (an interrupt does), the work of the
            // writes before it included: run those again in a fresh one.
            job.answer(None);
            if lw.conn.execute_batch("BEGIN IMMEDIATE").is_err() {
                for job in done.into_iter().chain(waiting) {
                    job.answer(Some(ApiError::Database));
                }
                return None;
            }
            for earlier in done.drain(..).rev() {
                waiting.push_front(earlier);
            }
            continue;
        }
        let undo = if ok {
            savepoint(&lw.conn, "RELEASE job")
        } else {
            savepoint(&lw.conn, "ROLLBACK TO job").and_then(|()| savepoint(&lw.conn, "RELEASE job"))
        };
        if let Err(e) = undo {
            tracing::error!("the ledger could not close a savepoint: {e}");
        }
        if ok {
            done.push(job);
        } else {
            job.answer(None);
        }
    }
    let commit = super::schema::fts_catch_up(&lw.conn, super::schema::FTS_LAG_ROWS)
        .and_then(|()| lw.conn.execute_batch("COMMIT"));
    let failed = match commit {
        Ok(()) => None,
        Err(e) => {
            tracing::error!("the ledger could not commit {} writes: {e}", done.len());
            let _ = lw.conn.execute_batch("ROLLBACK");
            Some(e)
        }
    };
    let committed = (failed.is_none() && !done.is_empty()).then_some(done.len());
    for job in done {
        job.answer(failed.as_ref().map(write_failure));
    }
    committed
}

/// What a write's caller hears when the transaction around it failed: a full disk by name
/// (cells wait it out), anything else as the database's failure.
fn write_failure(e: &rusqlite::Error) -> ApiError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DiskFull) => ApiError::StoreFull,
        _ => ApiError::Database,
    }
}

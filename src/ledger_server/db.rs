//! The ledger's SQLite file: schema, connection settings, the server clock, the one writer and
//! the pool of readers, and the bridge that keeps blocking SQLite work off the async runtime
//! under each request's time budget.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::errors::{ApiError, LedgerError};
use crate::util::now_ms;

/// The file inside `--data`.
pub const DB_FILE: &str = "ledger.db";

/// Bumped with every schema change; `migrate` brings older files forward.
pub const SCHEMA_VERSION: i64 = 3;

// anchor: schema
const SCHEMA_V1: &str = r#"
CREATE TABLE orgs (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL
);
CREATE TABLE api_keys (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    key_hash    TEXT NOT NULL UNIQUE,
    scopes      TEXT NOT NULL,
    label       TEXT,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);
-- AUTOINCREMENT: seq is never reused, so it orders claims across restarts.
CREATE TABLE concepts (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    org_id          TEXT NOT NULL REFERENCES orgs(id),
    shape           TEXT NOT NULL,
    source_type     TEXT NOT NULL,
    summary         TEXT NOT NULL,
    content         TEXT NOT NULL,
    pointer         TEXT NOT NULL,
    budget          INTEGER,
    priority        REAL NOT NULL,
    times_loaded    INTEGER NOT NULL DEFAULT 0,
    times_succeeded INTEGER NOT NULL DEFAULT 0,
    times_failed    INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    client_claim    TEXT
);
CREATE INDEX concepts_by_org ON concepts(org_id, seq);
CREATE VIRTUAL TABLE concepts_fts USING fts5(
    summary, content, shape, content='concepts', content_rowid='seq'
);
CREATE TRIGGER concepts_fts_ins AFTER INSERT ON concepts BEGIN
    INSERT INTO concepts_fts(rowid, summary, content, shape)
    VALUES (new.seq, new.summary, new.content, new.shape);
END;
CREATE TRIGGER concepts_fts_del AFTER DELETE ON concepts BEGIN
    INSERT INTO concepts_fts(concepts_fts, rowid, summary, content, shape)
    VALUES ('delete', old.seq, old.summary, old.content, old.shape);
END;
CREATE TABLE edges (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    org_id          TEXT NOT NULL REFERENCES orgs(id),
    from_id         TEXT NOT NULL REFERENCES concepts(id),
    to_id           TEXT NOT NULL REFERENCES concepts(id),
    edge_type       TEXT NOT NULL,
    weight          REAL NOT NULL,
    traversal_count INTEGER NOT NULL,
    description     TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    client_claim    TEXT,
    UNIQUE (org_id, from_id, to_id, edge_type)
);
CREATE INDEX edges_from ON edges(org_id, from_id);
CREATE INDEX edges_to ON edges(org_id, to_id);
CREATE TABLE usage (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL UNIQUE,
    org_id       TEXT NOT NULL REFERENCES orgs(id),
    concept_id   TEXT NOT NULL REFERENCES concepts(id),
    outcome      TEXT NOT NULL,
    trace_id     TEXT NOT NULL,
    activity_id  TEXT,
    task_id      TEXT,
    created_at   INTEGER NOT NULL,
    client_claim TEXT
);
CREATE INDEX usage_by_concept ON usage(org_id, concept_id, seq);
"#;

/// Opens (creating when missing) `<data>/ledger.db` with the settings every connection needs.
// anchor: open-connection
pub fn open_connection(data: &Path) -> Result<Connection, LedgerError> {
    std::fs::create_dir_all(data).map_err(|source| LedgerError::Io {
        path: data.to_path_buf(),
        source,
    })?;
    let path = data.join(DB_FILE);
    let wrap = |source| LedgerError::Db {
        path: path.clone(),
        source,
    };
    let conn = Connection::open(&path).map_err(wrap)?;
    // Another process (`ledger key …` beside a running server) may hold the write lock briefly.
    conn.busy_timeout(Duration::from_secs(10)).map_err(wrap)?;
    // WAL lets readers and the key commands work beside the server's writer; FULL makes every
    // acknowledged commit durable through kill -9 and power loss, not just process exit.
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(wrap)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(wrap)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(wrap)?;
    migrate(&conn).map_err(wrap)?;
    Ok(conn)
}

/// Opens one read-only connection for the pool. The file exists and is in WAL mode (the writer
/// opened it first), so a reader sees the last commit and never takes the write lock.
// anchor: open-reader
fn open_reader(path: &Path) -> Result<Connection, LedgerError> {
    let wrap = |source| LedgerError::Db {
        path: path.to_path_buf(),
        source,
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags).map_err(wrap)?;
    conn.busy_timeout(Duration::from_secs(10)).map_err(wrap)?;
    Ok(conn)
}

fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version >= SCHEMA_VERSION {
        return Ok(());
    }
    // Two processes may open a fresh file at once; the immediate transaction makes one create
    // the schema and the other see it done.
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| {
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version < 1 {
            conn.execute_batch(SCHEMA_V1)?;
        }
        // Version 2: the goal board's tables.
        if version < 2 {
            conn.execute_batch(super::goals::SCHEMA)?;
        }
        // Version 3: the open-task index, built from the rows already there.
        if version < 3 {
            conn.execute_batch(super::open_tasks::SCHEMA)?;
            super::open_tasks::backfill(conn).map_err(|e| {
                rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
                    Some(format!("building the open-task index: {e}")),
                )
            })?;
        }
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT"),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// The one writer: its connection and the server clock, behind one lock so that the order of
/// timestamps is the order of commits.
pub struct Writer {
    pub conn: Connection,
    last_ms: i64,
}

impl Writer {
    /// The next creation time: wall-clock milliseconds, but always after the last one issued, so
    /// no two rows share a time and a clock stepping back never reorders claims.
    // anchor: server-clock
    pub fn tick(&mut self) -> i64 {
        self.last_ms = now_ms().max(self.last_ms + 1);
        self.last_ms
    }
}

fn latest_stored_ms(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row(
        "SELECT max(coalesce((SELECT max(max(created_at, updated_at)) FROM concepts), 0),
                    coalesce((SELECT max(max(created_at, updated_at)) FROM edges), 0),
                    coalesce((SELECT max(created_at) FROM usage), 0))",
        [],
        |r| r.get(0),
    )
}

/// How many SQLite virtual-machine steps run between two looks at the request's deadline: a
/// look is one clock read, and a thousand steps take microseconds, so work stops promptly once
/// the budget is spent and costs nothing measurable before.
const PROGRESS_STEPS: i32 = 1000;

/// One request's time budget for its database work: the deadline, and the budget it came from
/// (which the 503 names).
// anchor: Budget
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    deadline: Instant,
    ms: u64,
}

impl Budget {
    /// A budget of `ms` milliseconds from now.
    pub fn start(ms: u64) -> Budget {
        let now = Instant::now();
        Budget {
            deadline: now.checked_add(Duration::from_millis(ms)).unwrap_or(now),
            ms,
        }
    }

    fn passed(&self) -> bool {
        Instant::now() >= self.deadline
    }

    pub fn exceeded(&self) -> ApiError {
        ApiError::BudgetExceeded { budget_ms: self.ms }
    }

    /// Stops `conn`'s statements once the deadline passes: SQLite asks the handler every few
    /// steps, and a `true` makes the running statement (and any started after) fail as
    /// interrupted, which rolls back an open transaction.
    fn arm(&self, conn: &Connection) {
        let deadline = self.deadline;
        conn.progress_handler(PROGRESS_STEPS, Some(move || Instant::now() >= deadline));
    }

    /// The answer of work run under this budget: an interrupt is this budget running out.
    fn settle<T>(&self, out: Result<T, ApiError>) -> Result<T, ApiError> {
        match out {
            Err(ApiError::Interrupted) => Err(self.exceeded()),
            other => other,
        }
    }
}

fn disarm(conn: &Connection) {
    conn.progress_handler(0, None::<fn() -> bool>);
}

/// The read-only connections, and one permit per connection: a request holds a permit for as
/// long as it holds a connection, so waiting for a reader is waiting on the permits, which can
/// be given up when the budget runs out.
struct Readers {
    idle: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
    size: usize,
    /// The most readers one org's reads may hold at once: all but one (when there are two or
    /// more), so however many connections one org opens, a reader is left for every other org.
    share: usize,
    /// Each org's share, created at its first read; one small entry per org that has read.
    shares: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Readers {
    fn share_of(&self, org: &str) -> Arc<Semaphore> {
        lock(&self.shares)
            .entry(org.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.share)))
            .clone()
    }
}

struct Inner {
    path: PathBuf,
    /// The writer, used by the group-commit thread and, before requests are taken, by startup.
    writer: Arc<Mutex<Writer>>,
    /// Writes waiting for the group-commit thread; closed when the last `Db` is dropped.
    queue: tokio::sync::mpsc::Sender<Box<dyn Job>>,
    readers: Readers,
}

/// Writes that may wait for the writer at once; past this a request waits for room (within its
/// budget), which bounds the memory a flood of writes can take.
const QUEUED_WRITES: usize = 4096;
/// The most writes one commit holds: enough to amortise the sync over any realistic burst,
/// few enough that the first of them is not kept waiting long for the last.
const MAX_BATCH: usize = 512;

/// One queued write, its answer kept until the commit that holds it is on disk.
trait Job: Send {
    fn budget(&self) -> Budget;
    /// Runs the work, keeping its answer; `true` when it succeeded.
    fn run(&mut self, w: &mut Writer) -> bool;
    /// Answers the request: the work's answer, or `failed` when its commit failed.
    fn answer(self: Box<Self>, failed: Option<ApiError>);
}

struct Queued<T, F> {
    budget: Budget,
    work: F,
    out: Option<Result<T, ApiError>>,
    tx: tokio::sync::oneshot::Sender<Result<T, ApiError>>,
}

impl<T, F> Job for Queued<T, F>
where
    T: Send,
    F: FnMut(&mut Writer) -> Result<T, ApiError> + Send,
{
    fn budget(&self) -> Budget {
        self.budget
    }

    fn run(&mut self, w: &mut Writer) -> bool {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.work)(w)))
            .unwrap_or_else(|_| {
                tracing::error!("a ledger write panicked; it was undone");
                Err(ApiError::Internal(
                    "the write did not finish; the server's log has the cause".into(),
                ))
            });
        let out = self.budget.settle(out);
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

fn writer_stopped() -> ApiError {
    ApiError::Internal("the ledger writer has stopped; the server's log has the cause".into())
}

/// The writer thread: takes every write queued at the moment, runs each in its own savepoint
/// inside one transaction, commits once and only then answers them, so one sync to disk
/// carries the whole batch (anchor: group-commit). Runs until every `Db` handle is gone.
fn group_commit(writer: &Mutex<Writer>, mut jobs: tokio::sync::mpsc::Receiver<Box<dyn Job>>) {
    while let Some(first) = jobs.blocking_recv() {
        let mut w = lock(writer);
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        commit_batch(&mut w, batch);
    }
}

/// One savepoint statement, prepared once per connection: every write runs three.
fn savepoint(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

fn commit_batch(w: &mut Writer, batch: Vec<Box<dyn Job>>) {
    let mut waiting: std::collections::VecDeque<Box<dyn Job>> = batch.into();
    // A panic in an earlier batch may have left its transaction open; it was never answered.
    if !w.conn.is_autocommit() {
        let _ = w.conn.execute_batch("ROLLBACK");
    }
    if let Err(e) = w.conn.execute_batch("BEGIN IMMEDIATE") {
        tracing::error!("the ledger could not begin a write: {e}");
        for job in waiting {
            job.answer(Some(ApiError::Database));
        }
        return;
    }
    let mut done: Vec<Box<dyn Job>> = Vec::with_capacity(waiting.len());
    while let Some(mut job) = waiting.pop_front() {
        let budget = job.budget();
        if budget.passed() {
            job.answer(Some(budget.exceeded()));
            continue;
        }
        if let Err(e) = savepoint(&w.conn, "SAVEPOINT job") {
            tracing::error!("the ledger could not open a savepoint: {e}");
            job.answer(Some(ApiError::Database));
            continue;
        }
        budget.arm(&w.conn);
        let ok = job.run(w);
        disarm(&w.conn);
        if w.conn.is_autocommit() {
            // The failure undid the whole transaction (an interrupt does), the work of the
            // writes before it included: run those again in a fresh one.
            job.answer(None);
            if w.conn.execute_batch("BEGIN IMMEDIATE").is_err() {
                for job in done.into_iter().chain(waiting) {
                    job.answer(Some(ApiError::Database));
                }
                return;
            }
            for earlier in done.drain(..).rev() {
                waiting.push_front(earlier);
            }
            continue;
        }
        let undo = if ok {
            savepoint(&w.conn, "RELEASE job")
        } else {
            savepoint(&w.conn, "ROLLBACK TO job").and_then(|()| savepoint(&w.conn, "RELEASE job"))
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
    let failed = match w.conn.execute_batch("COMMIT") {
        Ok(()) => false,
        Err(e) => {
            tracing::error!("the ledger could not commit {} writes: {e}", done.len());
            let _ = w.conn.execute_batch("ROLLBACK");
            true
        }
    };
    for job in done {
        job.answer(failed.then_some(ApiError::Database));
    }
}

/// A reader lent to one request; back in the pool (its deadline removed) when dropped, even if
/// the work panicked, and only then are its permits released. The lease lives on the blocking
/// thread, so a request whose caller went away still counts against the pool and its org's
/// share until its work has stopped.
struct Lease {
    conn: Option<Connection>,
    inner: Arc<Inner>,
    _permit: OwnedSemaphorePermit,
    _share: Option<OwnedSemaphorePermit>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            disarm(&conn);
            lock(&self.inner.readers.idle).push(conn);
        }
    }
}

/// Shared handle to the ledger file for the server: one writer, and a pool of read-only
/// connections so that a slow read holds up no other, with each org held to a share of it so
/// that no org's reads hold up every other org's (WAL lets every reader see the last commit
/// without waiting for the writer).
// anchor: Db
#[derive(Clone)]
pub struct Db(Arc<Inner>);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The list of idle readers (a push or pop cannot be left half done) and the writer (whose
    // open transaction the next batch rolls back) sit behind these locks, so a panic while one
    // was held leaves nothing to repair here.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Db {
    /// Opens the writer and `readers` read-only connections (at least one).
    pub fn open(data: &Path, readers: usize) -> Result<Db, LedgerError> {
        let writer = open_connection(data)?;
        let path = data.join(DB_FILE);
        let size = readers.max(1);
        let share = if size > 1 { size - 1 } else { 1 };
        let idle = (0..size)
            .map(|_| open_reader(&path))
            .collect::<Result<Vec<_>, _>>()?;
        let last_ms = latest_stored_ms(&writer).map_err(|source| LedgerError::Db {
            path: path.clone(),
            source,
        })?;
        let writer = Arc::new(Mutex::new(Writer {
            conn: writer,
            last_ms,
        }));
        let (queue, jobs) = tokio::sync::mpsc::channel(QUEUED_WRITES);
        let committer = writer.clone();
        std::thread::Builder::new()
            .name("ledger-writer".into())
            .spawn(move || group_commit(&committer, jobs))
            .map_err(|source| LedgerError::Io {
                path: path.clone(),
                source,
            })?;
        Ok(Db(Arc::new(Inner {
            path,
            writer,
            queue,
            readers: Readers {
                idle: Mutex::new(idle),
                permits: Arc::new(Semaphore::new(size)),
                size,
                share,
                shares: Mutex::default(),
            },
        })))
    }

    pub fn path(&self) -> &Path {
        &self.0.path
    }

    /// The pool's size and how many of its readers are lent out right now.
    pub fn readers(&self) -> (usize, usize) {
        let r = &self.0.readers;
        (r.size, r.size.saturating_sub(r.permits.available_permits()))
    }

    /// Runs `f` with the writer within `budget`, in the next group commit (anchor: db-write):
    /// the answer comes once the commit that holds the work is on disk. Waiting in the queue
    /// past the deadline answers `request_budget_exceeded` with nothing done, and work still
    /// running at the deadline is interrupted and undone. An `Err` from `f` undoes whatever `f`
    /// wrote and nothing else. `f` may run more than once (a batch-mate's interrupt undoes the
    /// whole open transaction, and the work before it is run again), so it must be a pure
    /// function of its input and the database; only the answer of the run that was committed
    /// is given.
    // anchor: db-write
    pub async fn write<T, F>(&self, budget: Budget, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnMut(&mut Writer) -> Result<T, ApiError> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job = Box::new(Queued {
            budget,
            work: f,
            out: None,
            tx,
        });
        // A full queue pushes back on the request until there is room, but never past its
        // budget.
        match tokio::time::timeout_at(budget.deadline.into(), self.0.queue.send(job)).await {
            Err(_) => return Err(budget.exceeded()),
            Ok(Err(_)) => return Err(writer_stopped()),
            Ok(Ok(())) => {}
        }
        rx.await.map_err(|_| writer_stopped())?
    }

    /// Runs `f` for `org` with a reader from the pool, on the blocking pool, within `budget`:
    /// waiting past the deadline for the org's share of the readers or for a free one, or work
    /// still running at it, answers `request_budget_exceeded`.
    // anchor: db-read
    pub async fn read<T, F>(&self, org: &str, budget: Budget, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, ApiError> + Send + 'static,
    {
        let share = self.0.readers.share_of(org);
        let share = tokio::time::timeout_at(budget.deadline.into(), share.acquire_owned())
            .await
            .map_err(|_| budget.exceeded())?
            .map_err(|_| ApiError::Internal("the reader pool is closed".into()))?;
        self.read_with(Some(share), budget, f).await
    }

    /// [`Db::read`] before an org is known: the key check, one indexed row.
    pub async fn read_unscoped<T, F>(&self, budget: Budget, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, ApiError> + Send + 'static,
    {
        self.read_with(None, budget, f).await
    }

    async fn read_with<T, F>(
        &self,
        share: Option<OwnedSemaphorePermit>,
        budget: Budget,
        f: F,
    ) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, ApiError> + Send + 'static,
    {
        let permits = self.0.readers.permits.clone();
        let permit = tokio::time::timeout_at(budget.deadline.into(), permits.acquire_owned())
            .await
            .map_err(|_| budget.exceeded())?
            .map_err(|_| ApiError::Internal("the reader pool is closed".into()))?;
        let inner = self.0.clone();
        tokio::task::spawn_blocking(move || {
            let lease = Lease {
                conn: Some(take_reader(&inner)?),
                inner,
                _permit: permit,
                _share: share,
            };
            let conn = lease
                .conn
                .as_ref()
                .expect("a lease holds its connection until it is dropped");
            budget.arm(conn);
            budget.settle(f(conn))
        })
        .await
        .map_err(|e| task_failed("read", e))?
    }

    /// Synchronous writer access, for startup work before the server takes requests. Not for
    /// async code: it blocks the thread until the writer is free.
    pub fn with_writer<T>(&self, f: impl FnOnce(&mut Writer) -> T) -> T {
        f(&mut lock(&self.0.writer))
    }
}

/// A blocking task that did not return (it panicked, a bug): the cause is logged, and the caller
/// hears only that the work did not finish, since a panic message may quote anything.
fn task_failed(what: &str, e: tokio::task::JoinError) -> ApiError {
    tracing::error!("ledger {what} task failed: {e}");
    ApiError::Internal(format!(
        "the {what} did not finish; the server's log has the cause"
    ))
}

/// An idle reader; a fresh one if a lease was ever lost, so the pool keeps its size.
fn take_reader(inner: &Inner) -> Result<Connection, ApiError> {
    if let Some(conn) = lock(&inner.readers.idle).pop() {
        return Ok(conn);
    }
    open_reader(&inner.path).map_err(|e| {
        tracing::error!("{e}");
        ApiError::Database
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts to a billion: seconds of SQLite work, far past any budget these tests set.
    const ENDLESS: &str =
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000000)";

    fn count_orgs(conn: &Connection) -> Result<i64, ApiError> {
        Ok(conn.query_row("SELECT count(*) FROM orgs", [], |r| r.get(0))?)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_budget_stops_a_read_and_rolls_back_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), 1).unwrap();
        let endless_read = format!("{ENDLESS} SELECT count(*) FROM n");
        let read = db
            .read("org_a", Budget::start(50), move |c| {
                Ok(c.query_row(&endless_read, [], |r| r.get::<_, i64>(0))?)
            })
            .await;
        assert!(
            matches!(read, Err(ApiError::BudgetExceeded { budget_ms: 50 })),
            "{read:?}"
        );
        // The one reader went back to the pool without its deadline and serves the next read.
        let orgs = db.read("org_a", Budget::start(60_000), count_orgs).await;
        assert_eq!(orgs.unwrap(), 0);

        let endless_write = format!(
            "INSERT INTO orgs (id, name, created_at) {ENDLESS} SELECT 'o' || i, 'n' || i, 0 FROM n"
        );
        let write = db
            .write(Budget::start(50), move |w| {
                w.conn.execute(&endless_write, [])?;
                Ok(())
            })
            .await;
        assert!(
            matches!(write, Err(ApiError::BudgetExceeded { budget_ms: 50 })),
            "{write:?}"
        );
        let orgs = db.read_unscoped(Budget::start(60_000), count_orgs).await;
        assert_eq!(orgs.unwrap(), 0, "a stopped write leaves nothing behind");
        let write = db
            .write(Budget::start(60_000), |w| {
                Ok(w.conn.execute(
                    "INSERT INTO orgs (id, name, created_at) VALUES ('org_x', 'x', 0)",
                    [],
                )?)
            })
            .await;
        assert_eq!(write.unwrap(), 1, "the writer works after an interrupt");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_org_cannot_hold_every_reader() {
        let dir = tempfile::tempdir().unwrap();
        // Two readers: each org may hold one.
        let db = Db::open(dir.path(), 2).unwrap();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let holder = tokio::spawn({
            let db = db.clone();
            async move {
                db.read("org_a", Budget::start(60_000), move |_| {
                    let _ = started_tx.send(());
                    let _ = release_rx.recv();
                    Ok(())
                })
                .await
            }
        });
        started_rx.await.unwrap();
        assert_eq!(db.readers(), (2, 1));

        // org_a's second read waits for its share, here until its budget runs out...
        let second = db.read("org_a", Budget::start(100), |_| Ok(())).await;
        assert!(
            matches!(second, Err(ApiError::BudgetExceeded { budget_ms: 100 })),
            "{second:?}"
        );
        // ...while another org, and the key check, find the reader left for them.
        db.read("org_b", Budget::start(60_000), count_orgs)
            .await
            .unwrap();
        db.read_unscoped(Budget::start(60_000), count_orgs)
            .await
            .unwrap();

        release_tx.send(()).unwrap();
        holder.await.unwrap().unwrap();
        db.read("org_a", Budget::start(60_000), count_orgs)
            .await
            .unwrap();
        assert_eq!(db.readers(), (2, 0));
    }

    fn insert_org(id: &'static str) -> impl FnMut(&mut Writer) -> Result<usize, ApiError> {
        move |w| {
            Ok(w.conn.execute(
                "INSERT INTO orgs (id, name, created_at) VALUES (?1, ?1, 0)",
                [id],
            )?)
        }
    }

    /// Queues one write behind the held writer and waits until it sits in the queue, so the
    /// batch's order is the order of these calls.
    async fn queue_write<T: Send + 'static>(
        db: &Db,
        budget_ms: u64,
        work: impl FnMut(&mut Writer) -> Result<T, ApiError> + Send + 'static,
    ) -> tokio::task::JoinHandle<Result<T, ApiError>> {
        let queued = QUEUED_WRITES - db.0.queue.capacity();
        let handle = tokio::spawn({
            let db = db.clone();
            async move { db.write(Budget::start(budget_ms), work).await }
        });
        while QUEUED_WRITES - db.0.queue.capacity() == queued {
            tokio::task::yield_now().await;
        }
        handle
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_commit_holds_a_batch_and_an_interrupted_write_undoes_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), 1).unwrap();
        // Hold the writer so that the next writes queue up and are committed as one batch.
        let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn({
            let db = db.clone();
            move || {
                db.with_writer(|_| {
                    held_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                })
            }
        });
        held_rx.recv().unwrap();
        // The writer thread takes the first write off the queue and then waits for the lock.
        let first = tokio::spawn({
            let db = db.clone();
            async move { db.write(Budget::start(60_000), insert_org("org_a")).await }
        });
        while db.0.queue.capacity() != QUEUED_WRITES {
            tokio::task::yield_now().await;
        }
        let endless = format!(
            "INSERT INTO orgs (id, name, created_at) {ENDLESS} SELECT 'o' || i, 'n' || i, 0 FROM n"
        );
        let stopped = queue_write(&db, 1_000, move |w| Ok(w.conn.execute(&endless, [])?)).await;
        let last = queue_write(&db, 60_000, insert_org("org_c")).await;
        // A write that fails on its own (a duplicate key) is undone alone, without a restart.
        let duplicate = queue_write(&db, 60_000, insert_org("org_c")).await;
        release_tx.send(()).unwrap();
        holder.join().unwrap();

        assert_eq!(first.await.unwrap().unwrap(), 1);
        let stopped = stopped.await.unwrap();
        assert!(
            matches!(stopped, Err(ApiError::BudgetExceeded { budget_ms: 1_000 })),
            "{stopped:?}"
        );
        assert_eq!(last.await.unwrap().unwrap(), 1);
        assert!(duplicate.await.unwrap().is_err());
        let names: Vec<String> = db
            .read_unscoped(Budget::start(60_000), |c| {
                let mut stmt = c.prepare("SELECT id FROM orgs ORDER BY id")?;
                let ids = stmt
                    .query_map([], |r| r.get(0))?
                    .collect::<Result<_, _>>()?;
                Ok(ids)
            })
            .await
            .unwrap();
        // The interrupt undid the open transaction; the write before it was run again.
        assert_eq!(names, ["org_a", "org_c"]);
    }
}

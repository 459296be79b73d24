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
use super::sql::{Dialect, PgConn, Sql, args, pg_ddl};
use metabob_wire::guard::redact_url_credentials;
use metabob_wire::util::now_ms;

/// The file inside `--data`.
pub const DB_FILE: &str = "ledger.db";

/// Bumped with every schema change; `migrate` brings older files forward.
pub const SCHEMA_VERSION: i64 = 4;

// anchor: schema
/// The first version's tables, in SQLite's words; PostgreSQL's are derived from them
/// (`sql::pg_ddl`), so the columns have one owner.
const TABLES_V1: &str = r#"
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

/// SQLite's full-text index over a concept's summary, content and shape, kept in step by triggers.
const FTS_V1: &str = r#"
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
"#;

/// PostgreSQL's full-text search over the same three columns: a generated `tsvector` with the
/// `simple` configuration (no stemming, no stop words), so a word matches as it does in FTS5.
// anchor: pg-schema
const PG_FTS_V1: &str = r#"
ALTER TABLE concepts ADD COLUMN fts tsvector GENERATED ALWAYS AS (
    to_tsvector('simple', summary || ' ' || content || ' ' || shape)
) STORED;
CREATE INDEX concepts_fts ON concepts USING GIN (fts);
"#;

/// Where the ledger keeps its rows: the SQLite file in a data directory (the default), or a
/// PostgreSQL database shared by any number of `ledger serve` replicas.
// anchor: Location
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Location {
    /// `--store URL` when given (a `postgres://` or `postgresql://` URL), else `--data DIR`.
    pub fn parse_store(url: &str) -> Result<Location, LedgerError> {
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("postgres" | "postgresql") => {
                url.parse::<postgres::Config>()
                    .map_err(|e| LedgerError::Store {
                        at: redact_url_credentials(url),
                        detail: format!("not a PostgreSQL connection URL ({e}); write postgres://USER@HOST:PORT/DATABASE"),
                    })?;
                Ok(Location::Postgres(url.to_string()))
            }
            _ => Err(LedgerError::Usage(format!(
                "--store {}: only postgres:// URLs are stores; for SQLite pass --data DIR",
                redact_url_credentials(url)
            ))),
        }
    }

    /// The location as logs and errors show it: a password never appears.
    pub fn shown(&self) -> String {
        match self {
            Location::Sqlite(data) => data.join(DB_FILE).display().to_string(),
            Location::Postgres(url) => redact_url_credentials(url),
        }
    }
}

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
    migrate(&conn).map_err(|e| LedgerError::Store {
        at: path.display().to_string(),
        detail: format!("bringing the schema up to date: {e}"),
    })?;
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

/// How long opening a PostgreSQL connection may take before the ledger says it cannot.
const PG_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens one connection to the PostgreSQL store.
fn open_pg(url: &str) -> Result<PgConn, LedgerError> {
    let fail = |what: &str, e: postgres::Error| LedgerError::Store {
        at: redact_url_credentials(url),
        detail: format!("{what}: {e}; is PostgreSQL running there and the database created?"),
    };
    let mut config: postgres::Config = url.parse().map_err(|e| fail("bad URL", e))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(PG_CONNECT_TIMEOUT);
    }
    config.application_name("metabob-ledger");
    let client = config
        .connect(postgres::NoTls)
        .map_err(|e| fail("cannot connect", e))?;
    Ok(PgConn::new(client))
}

/// The schema steps, one per version; each runs once, in order, inside the migration's
/// transaction.
fn schema_steps(dialect: Dialect) -> [String; 4] {
    let tables = [TABLES_V1, super::goals::SCHEMA, super::open_tasks::SCHEMA];
    let rank = super::concepts::rank_index_ddl();
    match dialect {
        Dialect::Sqlite => [
            format!("{TABLES_V1}{FTS_V1}"),
            tables[1].into(),
            tables[2].into(),
            rank,
        ],
        Dialect::Postgres => [
            format!("{}{PG_FTS_V1}", pg_ddl(TABLES_V1)),
            pg_ddl(tables[1]),
            pg_ddl(tables[2]),
            rank,
        ],
    }
}

/// Brings the schema to [`SCHEMA_VERSION`] (anchor: migrate). Two processes may start on a
/// fresh store at once: SQLite's immediate transaction, and on PostgreSQL an advisory lock held
/// for the migration's transaction, make one create the schema and the other see it done.
fn migrate_sql(sql: Sql<'_>) -> Result<(), ApiError> {
    if stored_version(sql)? >= SCHEMA_VERSION {
        return Ok(());
    }
    sql.transaction(|sql| {
        if sql.dialect() == Dialect::Postgres {
            sql.query_opt(
                "SELECT pg_advisory_xact_lock(?1)",
                args![MIGRATION_LOCK],
                |_| Ok(()),
            )?;
            sql.execute(
                "CREATE TABLE IF NOT EXISTS ledger_meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL)",
                &[],
            )?;
        }
        let version = stored_version(sql)?;
        for (i, step) in schema_steps(sql.dialect()).iter().enumerate() {
            let step_version = i as i64 + 1;
            if version < step_version {
                sql.execute_batch(step)?;
            }
            // Version 3 indexes the rows already there.
            if version < 3 && step_version == 3 {
                super::open_tasks::backfill(sql)?;
            }
        }
        match sql.dialect() {
            Dialect::Sqlite => sql.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}")),
            Dialect::Postgres => sql
                .execute(
                    "INSERT INTO ledger_meta (key, value) VALUES ('schema_version', ?1)
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    args![SCHEMA_VERSION],
                )
                .map(drop),
        }
    })
}

/// The advisory lock key of the PostgreSQL migration (and first start): any constant no holder
/// lock can equal in practice.
const MIGRATION_LOCK: i64 = 0x6d62_6c65_6467_6572;

fn stored_version(sql: Sql<'_>) -> Result<i64, ApiError> {
    match sql {
        Sql::Lite(c) => Ok(c.pragma_query_value(None, "user_version", |r| r.get(0))?),
        Sql::Pg(_) => {
            let exists: Option<String> =
                sql.value("SELECT to_regclass('ledger_meta')::text", &[])?;
            if exists.is_none() {
                return Ok(0);
            }
            Ok(sql
                .query_opt(
                    "SELECT value FROM ledger_meta WHERE key = 'schema_version'",
                    &[],
                    |r| r.get::<i64>(0),
                )?
                .unwrap_or(0))
        }
    }
}

fn migrate(conn: &Connection) -> Result<(), ApiError> {
    migrate_sql(Sql::Lite(conn))
}

/// The one writer's connection on SQLite and the server clock, behind one lock so that the
/// order of timestamps is the order of commits.
struct LiteWriter {
    conn: Connection,
    last_ms: i64,
}

/// What a write runs with: a connection inside the write's transaction, and the clock.
pub struct Writer<'c> {
    sql: Sql<'c>,
    last_ms: &'c mut i64,
}

impl<'c> Writer<'c> {
    pub fn sql(&self) -> Sql<'c> {
        self.sql
    }

    /// The next creation time (anchor: server-clock): wall-clock milliseconds, but always after
    /// the last one this writer issued, so a clock stepping back never reorders claims. SQLite's
    /// one writer reads the host's clock; on PostgreSQL every replica reads the database's, so
    /// replicas on hosts whose clocks disagree still stamp rows from one clock.
    pub fn tick(&mut self) -> Result<i64, ApiError> {
        self.tick_holding("", &[])
    }

    /// [`Writer::tick`] once this write holds the holder locks of `ids` in `org`, taken in the
    /// same round trip as the clock is read ([`Sql::lock_holders_then_clock`]).
    pub fn tick_holding(&mut self, org: &str, ids: &[String]) -> Result<i64, ApiError> {
        let now = self
            .sql
            .lock_holders_then_clock(org, ids)?
            .unwrap_or_else(now_ms);
        *self.last_ms = now.max(*self.last_ms + 1);
        Ok(*self.last_ms)
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

    /// Whole milliseconds left before the deadline (0 once it has passed).
    fn left_ms(&self) -> u64 {
        let left = self.deadline.saturating_duration_since(Instant::now());
        u64::try_from(left.as_millis()).unwrap_or(u64::MAX)
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

/// A connection a pool lends out.
enum Handle {
    Lite(Connection),
    Pg(PgConn),
}

impl Handle {
    fn sql(&self) -> Sql<'_> {
        match self {
            Handle::Lite(c) => Sql::Lite(c),
            Handle::Pg(c) => Sql::Pg(c),
        }
    }
}

/// Connections and one permit per connection: a request holds a permit for as long as it holds
/// a connection, so waiting for one is waiting on the permits, which can be given up when the
/// budget runs out.
struct Pool {
    idle: Mutex<Vec<Handle>>,
    permits: Arc<Semaphore>,
    size: usize,
    /// The most connections one org's reads may hold at once: all but one (when there are two
    /// or more), so however many one org opens, one is left for every other org.
    share: usize,
    /// Each org's share, created at its first read; one small entry per org that has read.
    shares: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Pool {
    fn new(idle: Vec<Handle>) -> Pool {
        let size = idle.len().max(1);
        Pool {
            idle: Mutex::new(idle),
            permits: Arc::new(Semaphore::new(size)),
            size,
            share: if size > 1 { size - 1 } else { 1 },
            shares: Mutex::default(),
        }
    }

    fn share_of(&self, org: &str) -> Arc<Semaphore> {
        lock(&self.shares)
            .entry(org.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.share)))
            .clone()
    }
}

/// What stands behind the pools: SQLite's one writer with its group-commit queue, or a
/// PostgreSQL database with a pool of writing connections.
enum Backend {
    Lite {
        path: PathBuf,
        /// The writer, used by the group-commit thread and, before requests are taken, by
        /// startup.
        writer: Arc<Mutex<LiteWriter>>,
        /// Writes waiting for the group-commit thread; closed when the last `Db` is dropped.
        queue: tokio::sync::mpsc::Sender<Box<dyn Job>>,
    },
    Pg {
        url: String,
        writers: Pool,
    },
}

struct Inner {
    at: Location,
    backend: Backend,
    readers: Pool,
}

/// Writes that may wait for the writer at once; past this a request waits for room (within its
/// budget), which bounds the memory a flood of writes can take.
const QUEUED_WRITES: usize = 4096;
/// The most writes one commit holds: enough to amortise the sync over any realistic burst,
/// few enough that the first of them is not kept waiting long for the last.
const MAX_BATCH: usize = 512;
/// Connections a replica writes through on PostgreSQL. Each write is its own transaction, and
/// PostgreSQL flushes the commits that arrive together with one sync, so these many writes in
/// flight share a flush as SQLite's batch does.
const PG_WRITERS: usize = 16;
/// How often a write PostgreSQL refused for a deadlock or serialization conflict is run again.
const PG_WRITE_ATTEMPTS: usize = 3;

/// One queued write, its answer kept until the commit that holds it is on disk.
trait Job: Send {
    fn budget(&self) -> Budget;
    /// Runs the work, keeping its answer; `true` when it succeeded.
    fn run(&mut self, w: &mut Writer<'_>) -> bool;
    /// Answers the request: the work's answer, or `failed` when its commit failed.
    fn answer(self: Box<Self>, failed: Option<ApiError>);
}

struct Queued<T, F> {
    budget: Budget,
    work: F,
    out: Option<Result<T, ApiError>>,
    tx: tokio::sync::oneshot::Sender<Result<T, ApiError>>,
}

/// Runs one write's work, a panic in it answered as a failure (the transaction undoes it).
fn run_caught<T>(
    work: &mut impl FnMut(&mut Writer<'_>) -> Result<T, ApiError>,
    w: &mut Writer<'_>,
) -> Result<T, ApiError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(w))).unwrap_or_else(|_| {
        tracing::error!("a ledger write panicked; it was undone");
        Err(ApiError::Internal(
            "the write did not finish; the server's log has the cause".into(),
        ))
    })
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

fn writer_stopped() -> ApiError {
    ApiError::Internal("the ledger writer has stopped; the server's log has the cause".into())
}

/// The writer thread: takes every write queued at the moment, runs each in its own savepoint
/// inside one transaction, commits once and only then answers them, so one sync to disk
/// carries the whole batch (anchor: group-commit). Runs until every `Db` handle is gone.
fn group_commit(writer: &Mutex<LiteWriter>, mut jobs: tokio::sync::mpsc::Receiver<Box<dyn Job>>) {
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

fn commit_batch(lw: &mut LiteWriter, batch: Vec<Box<dyn Job>>) {
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
        return;
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
                return;
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
    let failed = match lw.conn.execute_batch("COMMIT") {
        Ok(()) => None,
        Err(e) => {
            tracing::error!("the ledger could not commit {} writes: {e}", done.len());
            let _ = lw.conn.execute_batch("ROLLBACK");
            Some(e)
        }
    };
    for job in done {
        job.answer(failed.as_ref().map(write_failure));
    }
}

/// What a write's caller hears when the transaction around it failed: a full disk by name
/// (cells wait it out), anything else as the database's failure.
fn write_failure(e: &rusqlite::Error) -> ApiError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DiskFull) => ApiError::StoreFull,
        _ => ApiError::Database,
    }
}

/// Which pool a lease goes back to.
#[derive(Clone, Copy)]
enum Kind {
    Reader,
    Writer,
}

/// A connection lent to one request; back in its pool (its deadline removed) when dropped, even
/// if the work panicked, and only then are its permits released. The lease lives on the
/// blocking thread, so a request whose caller went away still counts against the pool and its
/// org's share until its work has stopped. A PostgreSQL connection whose work did not finish
/// cleanly is closed instead of kept, since its session may be left inside a transaction.
struct Lease {
    conn: Option<Handle>,
    kind: Kind,
    clean: bool,
    inner: Arc<Inner>,
    _permit: OwnedSemaphorePermit,
    _share: Option<OwnedSemaphorePermit>,
}

impl Lease {
    fn sql(&self) -> Sql<'_> {
        self.conn
            .as_ref()
            .expect("a lease holds its connection until it is dropped")
            .sql()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        match &conn {
            Handle::Lite(c) => disarm(c),
            Handle::Pg(c) if !self.clean || c.is_closed() => return,
            Handle::Pg(_) => {}
        }
        if let Some(pool) = self.inner.pool(self.kind) {
            lock(&pool.idle).push(conn);
        }
    }
}

/// Shared handle to the ledger's store for the server: writes go through one writer (SQLite,
/// group-committed) or a pool of writing connections (PostgreSQL), and reads through a pool of
/// connections so that a slow read holds up no other, with each org held to a share of it so
/// that no org's reads hold up every other org's.
// anchor: Db
#[derive(Clone)]
pub struct Db(Arc<Inner>);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The list of idle connections (a push or pop cannot be left half done) and the writer
    // (whose open transaction the next batch rolls back) sit behind these locks, so a panic
    // while one was held leaves nothing to repair here.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Inner {
    fn pool(&self, kind: Kind) -> Option<&Pool> {
        match (kind, &self.backend) {
            (Kind::Reader, _) => Some(&self.readers),
            (Kind::Writer, Backend::Pg { writers, .. }) => Some(writers),
            (Kind::Writer, Backend::Lite { .. }) => None,
        }
    }

    /// An idle connection of the pool; a fresh one if a lease was ever lost or closed, so the
    /// pool keeps its size.
    fn take(&self, kind: Kind) -> Result<Handle, ApiError> {
        if let Some(conn) = self.pool(kind).and_then(|p| lock(&p.idle).pop()) {
            return Ok(conn);
        }
        let fresh = match &self.backend {
            Backend::Lite { path, .. } => open_reader(path).map(Handle::Lite),
            Backend::Pg { url, .. } => open_pg(url).map(Handle::Pg),
        };
        fresh.map_err(|e| {
            tracing::error!("{e}");
            ApiError::Database
        })
    }
}

impl Db {
    /// Opens the store at `at` with `readers` reading connections (at least one), bringing its
    /// schema up to date.
    pub fn open(at: &Location, readers: usize) -> Result<Db, LedgerError> {
        let size = readers.max(1);
        let (backend, idle) = match at {
            Location::Sqlite(data) => {
                let writer = open_connection(data)?;
                let path = data.join(DB_FILE);
                let idle = (0..size)
                    .map(|_| open_reader(&path).map(Handle::Lite))
                    .collect::<Result<Vec<_>, _>>()?;
                let last_ms = latest_stored_ms(&writer).map_err(|source| LedgerError::Db {
                    path: path.clone(),
                    source,
                })?;
                let writer = Arc::new(Mutex::new(LiteWriter {
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
                (
                    Backend::Lite {
                        path,
                        writer,
                        queue,
                    },
                    idle,
                )
            }
            Location::Postgres(url) => {
                let first = open_pg_migrated(url)?;
                let mut writers = vec![Handle::Pg(first)];
                for _ in 1..PG_WRITERS {
                    writers.push(Handle::Pg(open_pg(url)?));
                }
                let idle = (0..size)
                    .map(|_| open_pg(url).map(Handle::Pg))
                    .collect::<Result<Vec<_>, _>>()?;
                (
                    Backend::Pg {
                        url: url.clone(),
                        writers: Pool::new(writers),
                    },
                    idle,
                )
            }
        };
        Ok(Db(Arc::new(Inner {
            at: at.clone(),
            backend,
            readers: Pool::new(idle),
        })))
    }

    /// Closes every idle connection (anchor: db-close); called off the async runtime once the
    /// server has stopped, since dropping a synchronous PostgreSQL client starts a runtime of
    /// its own. A connection lent out now closes when its lease ends.
    pub fn close(&self) {
        let mut closing = std::mem::take(&mut *lock(&self.0.readers.idle));
        if let Backend::Pg { writers, .. } = &self.0.backend {
            closing.append(&mut lock(&writers.idle));
        }
        drop(closing);
    }

    /// Where the store is, as logs show it.
    pub fn shown(&self) -> String {
        self.0.at.shown()
    }

    /// The read pool's size and how many of its connections are lent out right now.
    pub fn readers(&self) -> (usize, usize) {
        let r = &self.0.readers;
        (r.size, r.size.saturating_sub(r.permits.available_permits()))
    }

    /// Runs `f` with the writer within `budget` (anchor: db-write): the answer comes once the
    /// commit that holds the work is on disk. On SQLite the work joins the next group commit;
    /// on PostgreSQL it is its own transaction on one of the replica's writing connections.
    /// Waiting past the deadline answers `request_budget_exceeded` with nothing done, and work
    /// still running at it is stopped and undone. An `Err` from `f` undoes whatever `f` wrote
    /// and nothing else. `f` may run more than once (on SQLite a batch-mate's interrupt undoes
    /// the whole open transaction and the work before it is run again; on PostgreSQL a
    /// deadlock with another replica's write is run again), so it must be a pure function of
    /// its input and the database; only the answer of the run that was committed is given.
    // anchor: db-write
    pub async fn write<T, F>(&self, budget: Budget, mut f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnMut(&mut Writer<'_>) -> Result<T, ApiError> + Send + 'static,
    {
        let queue = match &self.0.backend {
            Backend::Lite { queue, .. } => queue,
            Backend::Pg { writers, .. } => {
                let permit = acquire(&writers.permits, budget).await?;
                return self
                    .on_pool(Kind::Writer, permit, None, move |lease| {
                        pg_write(lease, budget, &mut f)
                    })
                    .await;
            }
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job = Box::new(Queued {
            budget,
            work: f,
            out: None,
            tx,
        });
        // A full queue pushes back on the request until there is room, but never past its
        // budget.
        match tokio::time::timeout_at(budget.deadline.into(), queue.send(job)).await {
            Err(_) => return Err(budget.exceeded()),
            Ok(Err(_)) => return Err(writer_stopped()),
            Ok(Ok(())) => {}
        }
        rx.await.map_err(|_| writer_stopped())?
    }

    /// Runs `f` for `org` with a reading connection from the pool, on the blocking pool, within
    /// `budget`: waiting past the deadline for the org's share of the pool or for a free
    /// connection, or work still running at it, answers `request_budget_exceeded`.
    // anchor: db-read
    pub async fn read<T, F>(&self, org: &str, budget: Budget, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(Sql<'_>) -> Result<T, ApiError> + Send + 'static,
    {
        let share = self.0.readers.share_of(org);
        let share = acquire(&share, budget).await?;
        self.read_with(Some(share), budget, f).await
    }

    /// [`Db::read`] before an org is known: the key check, one indexed row.
    pub async fn read_unscoped<T, F>(&self, budget: Budget, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(Sql<'_>) -> Result<T, ApiError> + Send + 'static,
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
        F: FnOnce(Sql<'_>) -> Result<T, ApiError> + Send + 'static,
    {
        let permit = acquire(&self.0.readers.permits, budget).await?;
        self.on_pool(Kind::Reader, permit, share, move |lease| {
            let out = match lease.sql() {
                Sql::Lite(c) => {
                    budget.arm(c);
                    f(Sql::Lite(c))
                }
                pg @ Sql::Pg(_) => pg_bounded(pg, budget, "BEGIN READ ONLY", f),
            };
            lease.clean = true;
            budget.settle(out)
        })
        .await
    }

    /// Runs `work` on the blocking pool with a connection leased from `kind`'s pool.
    async fn on_pool<T, W>(
        &self,
        kind: Kind,
        permit: OwnedSemaphorePermit,
        share: Option<OwnedSemaphorePermit>,
        work: W,
    ) -> Result<T, ApiError>
    where
        T: Send + 'static,
        W: FnOnce(&mut Lease) -> Result<T, ApiError> + Send + 'static,
    {
        let inner = self.0.clone();
        tokio::task::spawn_blocking(move || {
            let mut lease = Lease {
                conn: Some(inner.take(kind)?),
                kind,
                clean: false,
                inner,
                _permit: permit,
                _share: share,
            };
            work(&mut lease)
        })
        .await
        .map_err(|e| task_failed("database work", e))?
    }

    /// Synchronous writer access in one transaction, for startup and the key commands' kind of
    /// work before the server takes requests; on PostgreSQL it holds the migration lock, so two
    /// replicas starting at once do their first start one after the other. Not for async code:
    /// it blocks the thread until the writer is free.
    pub fn with_writer<T>(
        &self,
        f: impl FnOnce(&mut Writer<'_>) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        match &self.0.backend {
            Backend::Lite { writer, .. } => {
                let lw = &mut *lock(writer);
                let last_ms = &mut lw.last_ms;
                Sql::Lite(&lw.conn).transaction(|sql| f(&mut Writer { sql, last_ms }))
            }
            Backend::Pg { .. } => {
                let conn = self.0.take(Kind::Writer)?;
                let sql = conn.sql();
                let out = sql.transaction(|sql| {
                    sql.query_opt(
                        "SELECT pg_advisory_xact_lock(?1)",
                        args![MIGRATION_LOCK],
                        |_| Ok(()),
                    )?;
                    f(&mut Writer {
                        sql,
                        last_ms: &mut 0,
                    })
                });
                if let (Some(pool), Handle::Pg(c)) = (self.0.pool(Kind::Writer), &conn)
                    && !c.is_closed()
                {
                    lock(&pool.idle).push(conn);
                }
                out
            }
        }
    }
}

/// A permit of `permits`, waited for no longer than `budget` allows.
async fn acquire(
    permits: &Arc<Semaphore>,
    budget: Budget,
) -> Result<OwnedSemaphorePermit, ApiError> {
    tokio::time::timeout_at(budget.deadline.into(), permits.clone().acquire_owned())
        .await
        .map_err(|_| budget.exceeded())?
        .map_err(|_| ApiError::Internal("the connection pool is closed".into()))
}

/// Runs `f` on a PostgreSQL connection inside one transaction opened by `begin`, with the
/// budget's remaining time as the statement timeout: PostgreSQL cancels a statement still
/// running at the deadline, which the budget answers as exceeded. Committed on `Ok`.
fn pg_bounded<'c, T>(
    sql: Sql<'c>,
    budget: Budget,
    begin: &str,
    f: impl FnOnce(Sql<'c>) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let Sql::Pg(c) = sql else {
        return f(sql);
    };
    let left = budget.left_ms();
    if left == 0 {
        return Err(budget.exceeded());
    }
    c.batch(&format!("{begin}; SET LOCAL statement_timeout = {left}"))?;
    match f(sql) {
        Ok(v) => {
            c.batch("COMMIT")?;
            Ok(v)
        }
        Err(e) => {
            c.batch("ROLLBACK")?;
            Err(e)
        }
    }
}

/// One write on PostgreSQL: its own transaction, run again when PostgreSQL refused it for a
/// conflict with a concurrent write (a deadlock between two replicas' holder locks, say).
fn pg_write<T>(
    lease: &mut Lease,
    budget: Budget,
    f: &mut impl FnMut(&mut Writer<'_>) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let sql = lease.sql();
    let mut attempt = 1;
    let out = loop {
        let mut last_ms = 0;
        let out = pg_bounded(sql, budget, "BEGIN", |sql| {
            run_caught(
                f,
                &mut Writer {
                    sql,
                    last_ms: &mut last_ms,
                },
            )
        });
        match out {
            Err(ApiError::Contended) if attempt < PG_WRITE_ATTEMPTS => attempt += 1,
            other => break other,
        }
    };
    lease.clean = true;
    budget.settle(out)
}

/// One connection to the PostgreSQL store, its schema brought up to date.
fn open_pg_migrated(url: &str) -> Result<PgConn, LedgerError> {
    let conn = open_pg(url)?;
    migrate_sql(Sql::Pg(&conn)).map_err(|e| LedgerError::Store {
        at: redact_url_credentials(url),
        detail: format!("bringing the schema up to date: {e}; the server's log has the cause"),
    })?;
    Ok(conn)
}

/// Runs `f` in one transaction on one fresh connection to the store at `at`: the key commands,
/// which work with or without a running server. Blocking; not for async code.
pub fn with_store<T>(
    at: &Location,
    f: impl FnOnce(Sql<'_>) -> Result<T, ApiError>,
) -> Result<T, LedgerError> {
    match at {
        Location::Sqlite(data) => {
            let conn = open_connection(data)?;
            Ok(Sql::Lite(&conn).transaction(f)?)
        }
        Location::Postgres(url) => {
            let conn = open_pg_migrated(url)?;
            Ok(Sql::Pg(&conn).transaction(f)?)
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts to a billion: seconds of SQLite work, far past any budget these tests set.
    const ENDLESS: &str =
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000000)";

    fn count_orgs(conn: Sql<'_>) -> Result<i64, ApiError> {
        conn.value("SELECT count(*) FROM orgs", &[])
    }

    fn sqlite(dir: &tempfile::TempDir) -> Location {
        Location::Sqlite(dir.path().to_path_buf())
    }

    #[test]
    fn a_version_3_file_gains_the_rank_index_and_search_reads_pages_off_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DB_FILE);
        {
            let conn = Connection::open(&path).unwrap();
            for step in &schema_steps(Dialect::Sqlite)[..3] {
                conn.execute_batch(step).unwrap();
            }
            conn.execute_batch("PRAGMA user_version = 3").unwrap();
        }
        let conn = open_connection(dir.path()).unwrap();
        assert_eq!(stored_version(Sql::Lite(&conn)).unwrap(), SCHEMA_VERSION);
        let plan: Vec<String> = Sql::Lite(&conn)
            .query(
                &format!(
                    "EXPLAIN QUERY PLAN SELECT c.seq, c.content FROM concepts c
                     WHERE c.org_id = ?1 AND c.shape = ?2
                     ORDER BY {} DESC, c.seq DESC LIMIT 300 OFFSET 900",
                    super::super::concepts::RELEVANCE_SQL
                ),
                args!["org", "verdict"],
                |r| r.get::<String>(3),
            )
            .unwrap();
        assert_eq!(
            plan,
            ["SEARCH c USING INDEX concepts_by_rank (org_id=? AND shape=?)"]
        );
    }

    fn queued(db: &Db) -> usize {
        match &db.0.backend {
            Backend::Lite { queue, .. } => QUEUED_WRITES - queue.capacity(),
            Backend::Pg { .. } => 0,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_budget_stops_a_read_and_rolls_back_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&sqlite(&dir), 1).unwrap();
        let endless_read = format!("{ENDLESS} SELECT count(*) FROM n");
        let read = db
            .read("org_a", Budget::start(50), move |c| {
                c.value::<i64>(&endless_read, &[])
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
                w.sql().execute(&endless_write, &[])?;
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
                w.sql().execute(
                    "INSERT INTO orgs (id, name, created_at) VALUES ('org_x', 'x', 0)",
                    &[],
                )
            })
            .await;
        assert_eq!(write.unwrap(), 1, "the writer works after an interrupt");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_org_cannot_hold_every_reader() {
        let dir = tempfile::tempdir().unwrap();
        // Two readers: each org may hold one.
        let db = Db::open(&sqlite(&dir), 2).unwrap();
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

    fn insert_org(id: &'static str) -> impl FnMut(&mut Writer<'_>) -> Result<usize, ApiError> {
        move |w| {
            w.sql().execute(
                "INSERT INTO orgs (id, name, created_at) VALUES (?1, ?1, 0)",
                args![id],
            )
        }
    }

    /// Queues one write behind the held writer and waits until it sits in the queue, so the
    /// batch's order is the order of these calls. Only sound while the writer thread is held
    /// inside a batch: then nothing takes from the queue, and its length only grows.
    async fn queue_write<T: Send + 'static>(
        db: &Db,
        budget_ms: u64,
        work: impl FnMut(&mut Writer<'_>) -> Result<T, ApiError> + Send + 'static,
    ) -> tokio::task::JoinHandle<Result<T, ApiError>> {
        let before = queued(db);
        let handle = tokio::spawn({
            let db = db.clone();
            async move { db.write(Budget::start(budget_ms), work).await }
        });
        while queued(db) == before {
            tokio::task::yield_now().await;
        }
        handle
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_commit_holds_a_batch_and_an_interrupted_write_undoes_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&sqlite(&dir), 1).unwrap();
        // A write that waits inside its own batch holds the writer thread there, so the next
        // writes queue up behind it and are taken as one batch once it is let go. Waiting for
        // the queue to empty instead would race the thread's taking of it.
        let (held_tx, held_rx) = tokio::sync::oneshot::channel::<()>();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let mut held_tx = Some(held_tx);
        let holder = tokio::spawn({
            let db = db.clone();
            async move {
                db.write(Budget::start(60_000), move |_| {
                    if let Some(tx) = held_tx.take() {
                        let _ = tx.send(());
                    }
                    let _ = release_rx.recv();
                    Ok(())
                })
                .await
            }
        });
        held_rx.await.unwrap();
        let first = queue_write(&db, 60_000, insert_org("org_a")).await;
        let endless = format!(
            "INSERT INTO orgs (id, name, created_at) {ENDLESS} SELECT 'o' || i, 'n' || i, 0 FROM n"
        );
        let stopped = queue_write(&db, 1_000, move |w| w.sql().execute(&endless, &[])).await;
        let last = queue_write(&db, 60_000, insert_org("org_c")).await;
        // A write that fails on its own (a duplicate key) is undone alone, without a restart.
        let duplicate = queue_write(&db, 60_000, insert_org("org_c")).await;
        release_tx.send(()).unwrap();
        holder.await.unwrap().unwrap();

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
                c.query("SELECT id FROM orgs ORDER BY id", &[], |r| {
                    r.get::<String>(0)
                })
            })
            .await
            .unwrap();
        // The interrupt undid the open transaction; the write before it was run again.
        assert_eq!(names, ["org_a", "org_c"]);
    }
}

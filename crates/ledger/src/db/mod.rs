//! The ledger's store, SQLite file or PostgreSQL database (SPEC.md §The embedded ledger): where
//! it is ([`Location`]), the server's shared handle ([`Db`]) with its writes and pooled reads
//! under each request's time budget ([`Budget`]), and the key commands' one-off transaction
//! ([`with_store`]). The jobs behind them live in the submodules: the schema and its
//! migrations, each store's connections, the reader and writer pools, the budget, and SQLite's
//! group commit.

mod backup;
mod budget;
mod group_commit;
mod pg;
mod pool;
mod restore;
mod schema;
mod sqlite;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use tokio::sync::OwnedSemaphorePermit;

use super::errors::{ApiError, LedgerError, StoreError};
use super::sql::{Sql, args};
use group_commit::{Job, QUEUED_WRITES, Queued, group_commit, writer_stopped};
use metabob_process::clock::now_ms;
use metabob_process::guard::redact_url_credentials;
use pg::{PG_WRITERS, open_pg, open_pg_migrated, pg_bounded, pg_write};
use pool::{Handle, Kind, Lease, Pool, acquire};
use schema::MIGRATION_LOCK;
use sqlite::{LiteWriter, checkpoint_on_close, latest_stored_ms, open_reader};

pub use backup::{BackupReport, backup};
pub use budget::Budget;
pub use restore::{RestoreReport, restore};
pub use schema::SCHEMA_VERSION;
pub use sqlite::{DB_FILE, open_connection};

/// Where the ledger keeps its rows: the SQLite file in a data directory (the default), or a
/// PostgreSQL database shared by any number of `ledger serve` replicas.
// anchor: Location
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    Sqlite(PathBuf),
    /// The connection URL as given (its password too): data, shown only through `shown`.
    Postgres(String),
}

impl Location {
    /// `--store URL` when given (a `postgres://` or `postgresql://` URL), else `--data DIR`.
    pub fn parse_store(url: &str) -> Result<Location, LedgerError> {
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("postgres" | "postgresql") => {
                url.parse::<tokio_postgres::Config>()
                    .map_err(|e| LedgerError::Store {
                        at: redact_url_credentials(url),
                        source: StoreError::PgUrl(e),
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

/// What a write runs with: a connection inside the write's transaction, and the clock.
pub struct Writer<'c> {
    sql: Sql<'c>,
    last_ms: &'c mut i64,
    /// The database's clock as this write last read it, and when: a tick that takes no holder
    /// lock counts on from it instead of asking again (PostgreSQL's writes).
    clock: Option<(i64, std::time::Instant)>,
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

    /// [`Writer::tick`] by this process's clock alone, for a row whose time orders no claim.
    pub fn tick_local(&mut self) -> i64 {
        *self.last_ms = now_ms().max(*self.last_ms + 1);
        *self.last_ms
    }

    /// [`Writer::tick`] once this write holds the holder locks of `ids` in `org`, taken in the
    /// same round trip as the clock is read ([`Sql::lock_holders_then_clock`]).
    pub fn tick_holding(&mut self, org: &str, ids: &[String]) -> Result<i64, ApiError> {
        let now = match self.clock {
            // No lock to wait for, so no write can commit between the clock read earlier in
            // this transaction and now that this tick's time must follow.
            Some((ms, at)) if ids.is_empty() => {
                ms.saturating_add(i64::try_from(at.elapsed().as_millis()).unwrap_or(i64::MAX))
            }
            _ => match self.sql.lock_holders_then_clock(org, ids)? {
                Some(ms) => {
                    self.clock = Some((ms, std::time::Instant::now()));
                    ms
                }
                None => now_ms(),
            },
        };
        *self.last_ms = now.max(*self.last_ms + 1);
        Ok(*self.last_ms)
    }
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
    stats: DbStats,
}

/// What the store counts as it writes, for `/metrics`: shared handles, cloned into each scrape.
#[derive(Clone)]
pub struct DbStats {
    /// Writes committed (answered `Ok`).
    pub writes: Counter,
    /// Writes in each SQLite group commit; empty on PostgreSQL, where each write commits alone.
    pub batches: Histogram,
}

impl Default for DbStats {
    fn default() -> Self {
        DbStats {
            writes: Counter::default(),
            // 1 to 512, the most one commit holds.
            batches: Histogram::new(exponential_buckets(1.0, 2.0, 10)),
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

impl Db {
    /// Opens the store at `at` with `readers` reading connections (at least one), bringing its
    /// schema up to date.
    pub fn open(at: &Location, readers: usize) -> Result<Db, LedgerError> {
        let size = readers.max(1);
        let stats = DbStats::default();
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
                let batches = stats.batches.clone();
                std::thread::Builder::new()
                    .name("ledger-writer".into())
                    .spawn(move || group_commit(&committer, jobs, &batches))
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
            stats,
        })))
    }

    /// Closes every idle connection (anchor: db-close); called off the async runtime once the
    /// server has stopped, since dropping a synchronous PostgreSQL client starts a runtime of
    /// its own. A connection lent out now closes when its lease ends. On SQLite it then waits
    /// for the writer to finish the batch it is on and checkpoints the WAL into `ledger.db`
    /// ([`sqlite::checkpoint_on_close`]), so a stopped ledger is one self-contained file.
    pub fn close(&self) {
        let mut closing = std::mem::take(&mut *lock(&self.0.readers.idle));
        if let Backend::Pg { writers, .. } = &self.0.backend {
            closing.append(&mut lock(&writers.idle));
        }
        drop(closing);
        if let Backend::Lite { path, writer, .. } = &self.0.backend {
            checkpoint_on_close(&lock(writer).conn, path);
        }
    }

    /// Where the store is, as logs show it.
    pub fn shown(&self) -> String {
        self.0.at.shown()
    }

    pub fn stats(&self) -> &DbStats {
        &self.0.stats
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
    pub async fn write<T, F>(&self, budget: Budget, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnMut(&mut Writer<'_>) -> Result<T, ApiError> + Send + 'static,
    {
        let out = self.write_uncounted(budget, f).await;
        if out.is_ok() {
            self.0.stats.writes.inc();
        }
        out
    }

    async fn write_uncounted<T, F>(&self, budget: Budget, mut f: F) -> Result<T, ApiError>
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

    /// Brings SQLite's full-text index up to every committed concept, through the writer, so a
    /// text search run after it misses no concept written before it (anchor: index-text):
    /// group commits leave up to [`schema::FTS_LAG_ROWS`] of the newest out. PostgreSQL's
    /// `tsvector` is written with its row: nothing to do.
    pub async fn index_text(&self, budget: Budget) -> Result<(), ApiError> {
        if let Backend::Pg { .. } = self.0.backend {
            return Ok(());
        }
        self.write_uncounted(budget, |w| {
            if let Sql::Lite(conn) = w.sql() {
                schema::fts_catch_up(conn, 1)?;
            }
            Ok(())
        })
        .await
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
                let conn = &lw.conn;
                Sql::Lite(conn).transaction(|sql| {
                    let out = f(&mut Writer {
                        sql,
                        last_ms,
                        clock: None,
                    })?;
                    schema::fts_catch_up(conn, 1)?;
                    Ok(out)
                })
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
                        clock: None,
                    })
                });
                if let (Some(pool), Handle::Pg(c)) = (self.0.pool(Kind::Writer), &conn)
                    && c.reusable()
                {
                    lock(&pool.idle).push(conn);
                }
                out
            }
        }
    }
}

/// Refuses a SQLite data directory that holds no `ledger.db` (anchor: needs-a-ledger), in one
/// line naming the directory, `--data` and where `ledger serve` keeps its data by default, then
/// `or` (another way out, such as `--init`, or nothing). The admin commands take it so that a
/// mistyped or forgotten `--data` never makes a new, empty ledger that no server reads. A
/// PostgreSQL URL names its database outright, and one that does not exist cannot be connected
/// to, so it passes.
pub fn require_ledger(at: &Location, or: &str) -> Result<(), LedgerError> {
    match at {
        Location::Sqlite(data) if !data.join(DB_FILE).is_file() => {
            Err(LedgerError::Usage(format!(
                "no ledger at {} (no {DB_FILE} there): pass --data with the directory `ledger \
                 serve` keeps its data in (by default ~/.substrate/ledger){or}",
                data.display()
            )))
        }
        _ => Ok(()),
    }
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
fn task_failed(what: &'static str, source: tokio::task::JoinError) -> ApiError {
    tracing::error!("ledger {what} task failed: {source}");
    ApiError::TaskFailed { what, source }
}

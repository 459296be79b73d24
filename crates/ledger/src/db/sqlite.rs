//! The SQLite file (SPEC.md §Storage): its connection settings, the pool's read-only
//! connections, and the one writer with the server clock.

use std::path::Path;
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use super::schema::migrate;
use crate::errors::{LedgerError, StoreError};

/// The file inside `--data`.
pub const DB_FILE: &str = "ledger.db";

/// SQLite's files beside `ledger.db` while it is open in WAL mode.
pub(super) const SIDE_FILES: [&str; 2] = ["-wal", "-shm"];

/// WAL pages after which a commit copies the WAL back into `ledger.db`: about 40 MB of WAL at
/// SQLite's 4 KiB pages, ten times SQLite's default. A checkpoint copies each page once however
/// often it was written since the last, and nearly every commit rewrites the same hot pages (each
/// table's and index's last leaf, the full-text segments), so they are copied a tenth as often
/// (anchor: WAL_CHECKPOINT_PAGES).
pub const WAL_CHECKPOINT_PAGES: i64 = 10_000;

/// Opens (creating when missing) `<data>/ledger.db` with the settings every connection needs.
/// The directory and the files are this user's alone (SPEC.md §Storage): see [`make_private`].
// anchor: open-connection
pub fn open_connection(data: &Path) -> Result<Connection, LedgerError> {
    make_private(data)?;
    let path = data.join(DB_FILE);
    let wrap = |source| LedgerError::Db {
        path: path.clone(),
        source,
    };
    let conn = Connection::open(&path).map_err(wrap)?;
    // Another process (`ledger key …` beside a running server) may hold the write lock briefly.
    conn.busy_timeout(Duration::from_secs(10)).map_err(wrap)?;
    plan_once(&conn).map_err(wrap)?;
    // WAL lets readers and the key commands work beside the server's writer; FULL makes every
    // acknowledged commit durable through kill -9 and power loss, not just process exit.
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(wrap)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(wrap)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(wrap)?;
    conn.pragma_update(None, "wal_autocheckpoint", WAL_CHECKPOINT_PAGES)
        .map_err(wrap)?;
    migrate(&conn).map_err(|e| LedgerError::Store {
        at: path.display().to_string(),
        source: StoreError::Schema(e),
    })?;
    Ok(conn)
}

/// Makes the data directory 0700 and `ledger.db` 0600 (created empty when missing, which SQLite
/// opens as a new database), and tightens a `-wal` or `-shm` left with a wider mode: SQLite gives
/// the ones it creates the mode of `ledger.db`, so once that is private they all are
/// (anchor: make-private).
fn make_private(data: &Path) -> Result<(), LedgerError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LedgerError::Io { path, source }
    };
    metabob_process::files::private_dir(data).map_err(io(data))?;
    let db = data.join(DB_FILE);
    metabob_process::files::private_file(&db).map_err(io(&db))?;
    for side in SIDE_FILES {
        let path = data.join(format!("{DB_FILE}{side}"));
        metabob_process::files::tighten_if_present(&path).map_err(io(&path))?;
    }
    Ok(())
}

/// Opens one read-only connection for the pool. The file exists and is in WAL mode (the writer
/// opened it first), so a reader sees the last commit and never takes the write lock.
// anchor: open-reader
pub(super) fn open_reader(path: &Path) -> Result<Connection, LedgerError> {
    let wrap = |source| LedgerError::Db {
        path: path.to_path_buf(),
        source,
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags).map_err(wrap)?;
    conn.busy_timeout(Duration::from_secs(10)).map_err(wrap)?;
    plan_once(&conn).map_err(wrap)?;
    Ok(conn)
}

/// Plans each cached statement once, whatever is bound to it. Otherwise SQLite plans with the
/// value bound to a `LIMIT ?` and marks the statement to be planned again at its next binding,
/// so every run of the take's page and a task's rows paid for a fresh parse and plan (about 14%
/// of the writer's time at 1,000 cells). The ledger has no statistics whose use of bound
/// values this gives up; the plans it relies on are pinned by tests.
fn plan_once(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map(drop)
}

/// The one writer's connection on SQLite and the server clock, behind one lock so that the
/// order of timestamps is the order of commits.
pub(super) struct LiteWriter {
    pub(super) conn: Connection,
    pub(super) last_ms: i64,
}

/// How long the checkpoint on a clean stop waits for a reader or another process (a `ledger key`
/// command, a backup) to let go of the file before it gives up.
const CHECKPOINT_WAIT: Duration = Duration::from_secs(5);

/// Folds the WAL back into `ledger.db` and empties it (anchor: checkpoint-on-close), run on the
/// writer once a clean stop has drained: afterwards `ledger.db` alone holds every committed row
/// and `ledger.db-wal` is 0 bytes. A checkpoint that cannot finish (a reader still in a read
/// transaction, another process holding the file) is logged and loses nothing: the rows stay
/// in the WAL, which the next open reads as always.
pub(super) fn checkpoint_on_close(conn: &Connection, path: &Path) {
    let _ = conn.busy_timeout(CHECKPOINT_WAIT);
    if !conn.is_autocommit() {
        // A write that panicked left its transaction open; it was never answered.
        let _ = conn.execute_batch("ROLLBACK");
    }
    // A stopped ledger's file is whole: its full-text index lags by nothing.
    if let Err(e) = super::schema::fts_catch_up(conn, 1) {
        tracing::warn!(db = %path.display(), "the full-text index could not be brought up to date on stop ({e}); the next text search does it");
    }
    let done = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
        ))
    });
    match done {
        Ok((0, _, pages)) => tracing::info!(
            db = %path.display(),
            pages,
            "checkpointed the WAL into the database on stop"
        ),
        Ok((_, log, pages)) => tracing::warn!(
            db = %path.display(),
            log,
            pages,
            "the WAL could not be checkpointed on stop (still in use); nothing is lost, the \
             next start reads it"
        ),
        Err(e) => tracing::warn!(
            db = %path.display(),
            "the WAL could not be checkpointed on stop ({e}); nothing is lost, the next start \
             reads it"
        ),
    }
}

pub(super) fn latest_stored_ms(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row(
        "SELECT max(coalesce((SELECT max(max(created_at, updated_at)) FROM concepts), 0),
                    coalesce((SELECT max(max(created_at, updated_at)) FROM edges), 0),
                    coalesce((SELECT max(created_at) FROM usage), 0))",
        [],
        |r| r.get(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_with_a_bound_limit_is_planned_once_on_either_connection() {
        let dir = tempfile::tempdir().unwrap();
        let writer = open_connection(dir.path()).unwrap();
        let reader = open_reader(&dir.path().join(DB_FILE)).unwrap();
        for conn in [&writer, &reader] {
            for limit in [1_i64, 2, 3] {
                let mut st = conn
                    .prepare_cached("SELECT id FROM orgs ORDER BY name LIMIT ?1")
                    .unwrap();
                st.query_map([limit], |r| r.get::<_, String>(0))
                    .unwrap()
                    .for_each(drop);
                assert_eq!(st.get_status(rusqlite::StatementStatus::RePrepare), 0);
            }
        }
    }
}

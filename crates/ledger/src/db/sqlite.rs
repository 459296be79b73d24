//! The SQLite file (SPEC.md §Storage): its connection settings, the pool's read-only
//! connections, and the one writer with the server clock.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::schema::migrate;
use crate::errors::LedgerError;

/// The file inside `--data`.
pub const DB_FILE: &str = "ledger.db";

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
    Ok(conn)
}

/// The one writer's connection on SQLite and the server clock, behind one lock so that the
/// order of timestamps is the order of commits.
pub(super) struct LiteWriter {
    pub(super) conn: Connection,
    pub(super) last_ms: i64,
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

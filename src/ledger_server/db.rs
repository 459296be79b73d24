//! The ledger's SQLite file: schema, connection settings, the server clock, and the bridge that
//! keeps blocking SQLite work off the async runtime.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::Connection;

use super::errors::{ApiError, LedgerError};
use crate::util::now_ms;

/// The file inside `--data`.
pub const DB_FILE: &str = "ledger.db";

/// Bumped with every schema change; `migrate` brings older files forward.
pub const SCHEMA_VERSION: i64 = 1;

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

struct Inner {
    path: PathBuf,
    writer: Mutex<Writer>,
    reader: Mutex<Connection>,
}

/// Shared handle to the ledger file for the server: one writer, one reader (WAL lets the reader
/// see the last commit without waiting for the writer).
#[derive(Clone)]
pub struct Db(Arc<Inner>);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic mid-closure drops its transaction (rolled back), so the connection is still sound.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Db {
    pub fn open(data: &Path) -> Result<Db, LedgerError> {
        let writer = open_connection(data)?;
        let reader = open_connection(data)?;
        let path = data.join(DB_FILE);
        let last_ms = latest_stored_ms(&writer).map_err(|source| LedgerError::Db {
            path: path.clone(),
            source,
        })?;
        Ok(Db(Arc::new(Inner {
            path,
            writer: Mutex::new(Writer {
                conn: writer,
                last_ms,
            }),
            reader: Mutex::new(reader),
        })))
    }

    pub fn path(&self) -> &Path {
        &self.0.path
    }

    /// Runs `f` with the writer on the blocking pool.
    pub async fn write<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Writer) -> Result<T, ApiError> + Send + 'static,
    {
        let inner = self.0.clone();
        tokio::task::spawn_blocking(move || f(&mut lock(&inner.writer)))
            .await
            .map_err(|e| ApiError::Internal(format!("write task failed: {e}")))?
    }

    /// Runs `f` with the reader on the blocking pool.
    pub async fn read<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, ApiError> + Send + 'static,
    {
        let inner = self.0.clone();
        tokio::task::spawn_blocking(move || f(&lock(&inner.reader)))
            .await
            .map_err(|e| ApiError::Internal(format!("read task failed: {e}")))?
    }

    /// Synchronous writer access, for startup work before the server takes requests.
    pub fn with_writer<T>(&self, f: impl FnOnce(&mut Writer) -> T) -> T {
        f(&mut lock(&self.0.writer))
    }
}

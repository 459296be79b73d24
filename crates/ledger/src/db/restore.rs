//! `ledger restore`: puts a backup in place as a stopped SQLite ledger's `ledger.db` (SPEC.md
//! §Backups).
//!
//! A serving ledger is told apart by SQLite's own lock: every connection to a database in WAL
//! mode holds a shared lock on `ledger.db` for as long as it is open, idle or not, so an
//! exclusive lock taken with `locking_mode=EXCLUSIVE` fails while any process (a `ledger
//! serve`, a `ledger key` command, a backup) has the file open, and succeeds once they are all
//! gone. The kernel drops the lock of a process that dies, so a ledger killed with -9 does not
//! keep a restore out, and no cooperation from the server (of any version) is needed.
//!
//! The backup is copied to a private temporary file in the data directory, checked there (the
//! copy, not the source, is what goes in place), synced, and renamed over `ledger.db` once the
//! stale `-wal` and `-shm` are gone; the directory is synced last, so `ledger.db` is either the
//! old file or the whole checked backup.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags};
use serde::Serialize;

use super::Location;
use super::schema::SCHEMA_VERSION;
use super::sqlite::{DB_FILE, SIDE_FILES};
use crate::errors::LedgerError;

/// The tables every ledger has, whatever its schema version.
const LEDGER_TABLES: [&str; 5] = ["orgs", "api_keys", "concepts", "edges", "usage"];

/// How long the check for a serving ledger waits for the file's lock: a `ledger key` command
/// holds it for a moment, a server for as long as it runs.
const IN_USE_WAIT: Duration = Duration::from_millis(500);

/// What a finished restore put in place.
#[derive(Clone, Debug, Serialize)]
pub struct RestoreReport {
    pub from: PathBuf,
    pub to: PathBuf,
    pub bytes: u64,
    pub schema_version: i64,
}

/// Puts the backup `from` in place as the SQLite ledger at `at`, which must not be serving; a
/// PostgreSQL store is refused with what to use instead.
pub fn restore(at: &Location, from: &Path) -> Result<RestoreReport, LedgerError> {
    let data = match at {
        Location::Sqlite(dir) => dir,
        Location::Postgres(_) => {
            return Err(LedgerError::Usage(
                "ledger restore puts a SQLite backup in place; restore a PostgreSQL store with \
                 pg_restore (README: Backups)"
                    .into(),
            ));
        }
    };
    let meta = std::fs::metadata(from).map_err(|source| LedgerError::BackupUnreadable {
        path: from.to_path_buf(),
        source,
    })?;
    if !meta.is_file() {
        return Err(LedgerError::Usage(format!(
            "--from {}: not a file; name a file `ledger backup` wrote",
            from.display()
        )));
    }
    let side = side_file(from, "-wal");
    if std::fs::metadata(&side).is_ok_and(|m| m.len() > 0) {
        return Err(LedgerError::Usage(format!(
            "{} has rows of {} that are not in it yet: restore from a file `ledger backup` \
             wrote, or stop what has it open so SQLite folds them in",
            side.display(),
            from.display()
        )));
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LedgerError::Io { path, source }
    };
    metabob_process::files::private_dir(data).map_err(io(data))?;
    let to = data.join(DB_FILE);
    if let (Ok(a), Ok(b)) = (from.canonicalize(), to.canonicalize())
        && a == b
    {
        return Err(LedgerError::Usage(format!(
            "--from {} is the ledger itself; name a backup file",
            from.display()
        )));
    }
    refuse_if_in_use(data, &to)?;

    let partial = data.join(format!(".{DB_FILE}.restore-{}", std::process::id()));
    let out = copy_checked(from, &partial).and_then(|(bytes, schema_version)| {
        // Checked again just before the swap: the copy and its check may have taken a while.
        refuse_if_in_use(data, &to)?;
        for side in SIDE_FILES {
            let path = side_file(&to, side);
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&path)(e)),
                _ => {}
            }
        }
        std::fs::rename(&partial, &to).map_err(io(&to))?;
        // The rename is durable once the directory is.
        std::fs::File::open(data)
            .and_then(|d| d.sync_all())
            .map_err(io(data))?;
        Ok((bytes, schema_version))
    });
    match out {
        Ok((bytes, schema_version)) => Ok(RestoreReport {
            from: from.to_path_buf(),
            to,
            bytes,
            schema_version,
        }),
        Err(e) => {
            remove_with_sides(&partial);
            Err(e)
        }
    }
}

/// `path` with `suffix` after its file name (`ledger.db` → `ledger.db-wal`).
fn side_file(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn remove_with_sides(path: &Path) {
    let _ = std::fs::remove_file(path);
    for side in SIDE_FILES {
        let _ = std::fs::remove_file(side_file(path, side));
    }
}

/// Refuses while any process has the ledger at `db` open, as a serving ledger always does (see
/// the module's note); a missing `ledger.db`, or one that is no database at all, has no server.
fn refuse_if_in_use(data: &Path, db: &Path) -> Result<(), LedgerError> {
    if !db.exists() {
        return Ok(());
    }
    let in_use = || {
        LedgerError::Usage(format!(
            "a ledger is serving on {} (another process has {DB_FILE} open): stop `ledger \
             serve` (docker compose stop ledger) and run ledger restore again",
            data.display()
        ))
    };
    let wrap = |source| LedgerError::Db {
        path: db.to_path_buf(),
        source,
    };
    let conn = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(wrap)?;
    conn.busy_timeout(IN_USE_WAIT).map_err(wrap)?;
    let locked = conn
        .pragma_update(None, "locking_mode", "EXCLUSIVE")
        .and_then(|()| conn.execute_batch("BEGIN EXCLUSIVE; ROLLBACK;"));
    match locked {
        Ok(()) => {
            // Closing with the lock held folds a WAL left by a killed server into the old file,
            // which the swap then replaces; no other process can have it open meanwhile.
            conn.close().map_err(|(_, e)| wrap(e))?;
            Ok(())
        }
        Err(e) => match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Err(in_use()),
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => Ok(()),
            _ => Err(wrap(e)),
        },
    }
}

/// Copies `from` into the new private file `partial`, synced, and checks the copy: SQLite's
/// integrity check passes and it is a ledger this binary can serve. Its size and schema version.
fn copy_checked(from: &Path, partial: &Path) -> Result<(u64, i64), LedgerError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LedgerError::Io { path, source }
    };
    remove_with_sides(partial);
    // Private from its first byte, as the ledger is.
    metabob_process::files::private_file(partial).map_err(io(partial))?;
    let mut src = std::fs::File::open(from).map_err(io(from))?;
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(partial)
        .map_err(io(partial))?;
    let bytes = std::io::copy(&mut src, &mut dst).map_err(io(partial))?;
    dst.flush().map_err(io(partial))?;
    dst.sync_all().map_err(io(partial))?;
    drop(dst);

    let refused = |why: String| {
        LedgerError::Usage(format!(
            "{} is not a ledger backup ({why}); nothing was changed: name a file `ledger backup` \
             wrote",
            from.display()
        ))
    };
    let schema_version = {
        let conn = Connection::open_with_flags(
            partial,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| refused(e.to_string()))?;
        let check: Vec<String> = conn
            .prepare("PRAGMA integrity_check")
            .and_then(|mut s| {
                s.query_map([], |r| r.get::<_, String>(0))?
                    .collect::<Result<_, _>>()
            })
            .map_err(|e| refused(e.to_string()))?;
        if check != ["ok"] {
            let first = check.first().cloned().unwrap_or_default();
            return Err(refused(format!("integrity check failed: {first}")));
        }
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| refused(e.to_string()))?;
        let missing: Vec<&str> = LEDGER_TABLES
            .iter()
            .copied()
            .filter(|t| {
                conn.query_row(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                    [t],
                    |_| Ok(()),
                )
                .is_err()
            })
            .collect();
        if version < 1 || !missing.is_empty() {
            let tables = if missing.is_empty() {
                String::new()
            } else {
                format!(", no {} table", missing.join(", "))
            };
            return Err(refused(format!(
                "a SQLite database but not a ledger: schema version {version}{tables}"
            )));
        }
        if version > SCHEMA_VERSION {
            return Err(LedgerError::Usage(format!(
                "{} has schema version {version}, newer than this metabob-mcp's \
                 {SCHEMA_VERSION}; nothing was changed: restore it with the metabob-mcp that \
                 wrote it",
                from.display()
            )));
        }
        conn.close().map_err(|(_, e)| refused(e.to_string()))?;
        version
    };
    Ok((bytes, schema_version))
}

//! `ledger backup`: a consistent copy of a SQLite ledger while it serves (SPEC.md §Backups).
//!
//! The copy is SQLite's online backup of the whole file in one step: that step reads inside one
//! read transaction, which in WAL mode never blocks the server's writer, so the copy is the
//! ledger as of one commit and writes go on meanwhile. It is written beside the target under a
//! temporary name, checked, made durable and only then renamed into place, so a `--to` file is
//! either a whole checked copy or absent.

use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};
use serde::Serialize;

use super::Location;
use super::sqlite::DB_FILE;
use crate::errors::{LedgerError, StoreError};

/// How long the copy may wait for the file while another connection holds it exclusively
/// (a checkpoint or a migration); past it the backup gives up and says to try again.
const LOCKED_FOR: Duration = Duration::from_secs(10);

/// What a finished backup wrote.
#[derive(Clone, Debug, Serialize)]
pub struct BackupReport {
    pub from: PathBuf,
    pub to: PathBuf,
    pub bytes: u64,
    pub pages: u64,
}

/// Copies the SQLite ledger at `at` to the new file `to`; a PostgreSQL store is refused with
/// what to use instead.
pub fn backup(at: &Location, to: &Path) -> Result<BackupReport, LedgerError> {
    let data = match at {
        Location::Sqlite(dir) => dir,
        Location::Postgres(_) => {
            return Err(LedgerError::Usage(
                "ledger backup copies a SQLite ledger; back up a PostgreSQL store with pg_dump \
                 (README: Backups)"
                    .into(),
            ));
        }
    };
    super::require_ledger(at, "")?;
    let from = data.join(DB_FILE);
    if to.exists() {
        return Err(LedgerError::Usage(format!(
            "{} exists; a backup never overwrites: name a new file or remove that one",
            to.display()
        )));
    }
    let name = to
        .file_name()
        .ok_or_else(|| LedgerError::Usage(format!("--to {}: not a file name", to.display())))?;
    let dir = match to.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let partial = dir.join(format!(
        ".{}.partial-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    // Private from its first byte, as the ledger is: the copy holds every row. (A new empty
    // file is 0600 already, so a failure here leaves nothing behind.)
    metabob_process::files::private_file(&partial).map_err(|source| LedgerError::Io {
        path: partial.clone(),
        source,
    })?;
    let out = copy_checked(&from, &partial).and_then(|pages| {
        let io = |source| LedgerError::Io {
            path: partial.clone(),
            source,
        };
        let file = std::fs::File::open(&partial).map_err(io)?;
        file.sync_all().map_err(io)?;
        let bytes = file.metadata().map_err(io)?.len();
        std::fs::rename(&partial, to).map_err(|source| LedgerError::Io {
            path: to.to_path_buf(),
            source,
        })?;
        // The rename is durable once the directory is.
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok((pages, bytes))
    });
    match out {
        Ok((pages, bytes)) => Ok(BackupReport {
            from,
            to: to.to_path_buf(),
            bytes,
            pages,
        }),
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        }
    }
}

/// The online backup of `from` into the new file `partial`, left as one self-contained file
/// (rollback journal, no WAL beside it) that passes `PRAGMA integrity_check`; its page count.
fn copy_checked(from: &Path, partial: &Path) -> Result<u64, LedgerError> {
    let db = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LedgerError::Db {
            path: path.clone(),
            source,
        }
    };
    let src = Connection::open_with_flags(
        from,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(db(from))?;
    src.busy_timeout(LOCKED_FOR).map_err(db(from))?;
    let mut dst = Connection::open(partial).map_err(db(partial))?;
    {
        let copy = Backup::new(&src, &mut dst).map_err(db(partial))?;
        let began = Instant::now();
        // -1: every page in one step, so the copy is one read transaction's view.
        loop {
            match copy.step(-1).map_err(db(from))? {
                StepResult::Done => break,
                StepResult::More => {}
                StepResult::Busy | StepResult::Locked if began.elapsed() < LOCKED_FOR => {
                    sleep(Duration::from_millis(50));
                }
                _ => {
                    return Err(LedgerError::Store {
                        at: from.display().to_string(),
                        source: StoreError::Locked {
                            secs: LOCKED_FOR.as_secs(),
                        },
                    });
                }
            }
        }
    }
    let mode: String = dst
        .query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))
        .map_err(db(partial))?;
    let check: String = dst
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .map_err(db(partial))?;
    if check != "ok" || !mode.eq_ignore_ascii_case("delete") {
        return Err(LedgerError::Store {
            at: partial.display().to_string(),
            source: StoreError::CheckFailed { check, mode },
        });
    }
    let pages: i64 = dst
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .map_err(db(partial))?;
    dst.close().map_err(|(_, e)| db(partial)(e))?;
    Ok(u64::try_from(pages).unwrap_or(0))
}

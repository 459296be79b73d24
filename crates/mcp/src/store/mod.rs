//! The local store (SPEC.md §Local store): this machine's seeds of the findings its sessions
//! recorded, one row per file, in SQLite. The ledger is the shared truth; the store is what a
//! session sees at once, before and without a recall.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use metabob_process::clock::now_ms;
use metabob_process::env::Env;
use metabob_wire::finding::{FindingStatus, Severity};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the local store at {path} could not be opened: {source}")]
    Open {
        path: String,
        #[source]
        source: OpenError,
    },
    #[error("the local store failed: {0}")]
    Sql(#[from] rusqlite::Error),
}

/// No advice: the line names the file and what the system said of it.
impl metabob_wire::report::Hint for StoreError {}

/// Why one of this server's SQLite files (the local store, the agent queue) did not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Its directory could not be made.
    #[error("{source}")]
    Dir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file, or a side file SQLite keeps beside it, could not be made this user's alone.
    #[error("{}: {source}", path.display())]
    Private {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Sql(#[source] rusqlite::Error),
}

/// One file's seed of a finding.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Seed {
    pub id: String,
    pub workspace: String,
    pub file: String,
    pub summary: String,
    pub details: String,
    pub severity: Severity,
    pub category: String,
    pub line_start: Option<u32>,
    pub line_end: Option<u32>,
    /// `open`, or `stale` once resolved.
    pub status: FindingStatus,
    /// The seeds of one finding share a group; the ledger concept once it is minted.
    pub group_id: String,
    pub concept_ref: Option<String>,
    pub created_ms: i64,
}

impl Seed {
    pub fn is_open(&self) -> bool {
        self.status.is_open()
    }
}

/// A finding to store: one seed per file.
#[derive(Clone, Debug)]
pub struct NewSeeds<'a> {
    pub workspace: &'a str,
    pub ids: &'a [String],
    pub files: &'a [String],
    pub summary: &'a str,
    pub details: &'a str,
    pub severity: Severity,
    pub category: &'a str,
    pub lines: (Option<u32>, Option<u32>),
    /// Stored open, else already resolved (`stale`).
    pub open: bool,
}

/// What retiring a finding does to its seeds: a fix leaves them stale, a retraction deletes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retire {
    Stale,
    Delete,
}

pub struct Store {
    conn: Mutex<Connection>,
    path: PathBuf,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS seeds (
    id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    file TEXT NOT NULL,
    summary TEXT NOT NULL,
    details TEXT NOT NULL,
    severity TEXT NOT NULL,
    category TEXT NOT NULL,
    line_start INTEGER,
    line_end INTEGER,
    status TEXT NOT NULL,
    group_id TEXT NOT NULL,
    concept_ref TEXT,
    confidence REAL NOT NULL DEFAULT 1,
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS seeds_workspace ON seeds(workspace, status);
CREATE INDEX IF NOT EXISTS seeds_group ON seeds(group_id);
CREATE INDEX IF NOT EXISTS seeds_concept ON seeds(concept_ref);
";

const COLUMNS: &str = "id, workspace, file, summary, details, severity, category, line_start, \
                       line_end, status, group_id, concept_ref, created_ms";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Seed> {
    let severity: String = r.get(5)?;
    Ok(Seed {
        id: r.get(0)?,
        workspace: r.get(1)?,
        file: r.get(2)?,
        summary: r.get(3)?,
        details: r.get(4)?,
        severity: severity.parse().unwrap_or(Severity::Info),
        category: r.get(6)?,
        line_start: r.get(7)?,
        line_end: r.get(8)?,
        status: FindingStatus::parse(&r.get::<_, String>(9)?),
        group_id: r.get(10)?,
        concept_ref: r.get(11)?,
        created_ms: r.get(12)?,
    })
}

/// `METABOB_STORE`, else `~/.metabob/store.sqlite` (anchor: store_path).
pub fn store_path(env: &Env) -> Option<PathBuf> {
    if let Some(p) = env.get("METABOB_STORE") {
        return Some(PathBuf::from(p));
    }
    env.home().map(|h| h.join(".metabob").join("store.sqlite"))
}

/// A local SQLite file in WAL mode with `schema` applied, its directory made; the cause as text
/// for the caller's typed error. Shared by the findings store and the agent-resolver queue. The
/// file is this user's alone (0600, an existing wider one tightened, as its `-wal` and `-shm`
/// left by an earlier process), and SQLite gives the `-wal` and `-shm` it makes the file's mode.
pub(crate) fn open_sqlite(path: &Path, schema: &str) -> Result<Connection, OpenError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| OpenError::Dir {
            dir: dir.to_path_buf(),
            source,
        })?;
    }
    // The side files are named by the database's path: the line names the file SQLite is asked for.
    let private = |source| OpenError::Private {
        path: path.to_path_buf(),
        source,
    };
    metabob_process::files::private_file(path).map_err(private)?;
    for side in ["-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(side);
        metabob_process::files::tighten_if_present(Path::new(&p)).map_err(private)?;
    }
    let conn = Connection::open(path).map_err(OpenError::Sql)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .and_then(|_| conn.pragma_update(None, "journal_mode", "WAL"))
        .and_then(|_| conn.execute_batch(schema))
        .map_err(OpenError::Sql)?;
    Ok(conn)
}

impl Store {
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = open_sqlite(path, SCHEMA).map_err(|source| StoreError::Open {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Store {
            conn: Mutex::new(conn),
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn with<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T, StoreError> {
        let conn = self
            .conn
            .lock()
            .expect("no store call panics while holding the connection");
        Ok(f(&conn)?)
    }

    /// Stores one seed per file, all in one group.
    pub fn insert(&self, new: &NewSeeds<'_>) -> Result<Vec<Seed>, StoreError> {
        let group = new.ids[0].clone();
        let now = now_ms();
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            for (i, (id, file)) in new.ids.iter().zip(new.files).enumerate() {
                // Only the first file carries the line range.
                let (a, b) = if i == 0 { new.lines } else { (None, None) };
                tx.execute(
                    "INSERT INTO seeds (id, workspace, file, summary, details, severity, category, \
                     line_start, line_end, status, group_id, created_ms) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                    params![
                        id,
                        new.workspace,
                        file,
                        new.summary,
                        new.details,
                        new.severity.as_str(),
                        new.category,
                        a,
                        b,
                        if new.open { "open" } else { "stale" },
                        group,
                        now
                    ],
                )?;
            }
            tx.commit()
        })?;
        self.group(&group)
    }

    /// Links a group's seeds to the concept minted for them.
    pub fn set_concept(&self, group_id: &str, concept: &str) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                "UPDATE seeds SET concept_ref = ?1 WHERE group_id = ?2",
                params![concept, group_id],
            )
        })?;
        Ok(())
    }

    pub fn get(&self, id: &str) -> Result<Option<Seed>, StoreError> {
        self.with(|c| {
            c.query_row(
                &format!("SELECT {COLUMNS} FROM seeds WHERE id = ?1"),
                [id],
                row,
            )
            .optional()
        })
    }

    fn query(&self, sql: &str, args: impl rusqlite::Params) -> Result<Vec<Seed>, StoreError> {
        self.with(|c| {
            c.prepare(&format!("SELECT {COLUMNS} FROM seeds {sql}"))?
                .query_map(args, row)?
                .collect()
        })
    }

    /// A finding's seeds: its group.
    pub fn group(&self, group_id: &str) -> Result<Vec<Seed>, StoreError> {
        self.query("WHERE group_id = ?1 ORDER BY id", [group_id])
    }

    /// The seeds of every finding linked to `concept` (anchor: seeds_by_concept).
    pub fn by_concept(&self, concept: &str) -> Result<Vec<Seed>, StoreError> {
        self.query("WHERE concept_ref = ?1 ORDER BY id", [concept])
    }

    /// Every seed of `workspace`, open ones only unless `all`; most severe, then newest first.
    pub fn seeds(&self, workspace: &str, all: bool) -> Result<Vec<Seed>, StoreError> {
        let mut v = self.query(
            "WHERE workspace = ?1 AND (?2 OR status = 'open') ORDER BY created_ms DESC, id",
            params![workspace, all],
        )?;
        // Severity orders most severe first; the stable sort keeps newest first within each.
        v.sort_by_key(|s| s.severity);
        Ok(v)
    }

    /// Retires every seed in the groups of `seeds` (a multi-file finding is one finding).
    /// Returns how many seeds it changed.
    pub fn retire(&self, seeds: &[Seed], how: Retire) -> Result<usize, StoreError> {
        let mut groups: Vec<&str> = seeds.iter().map(|s| s.group_id.as_str()).collect();
        groups.sort_unstable();
        groups.dedup();
        self.with(|c| {
            let mut n = 0;
            for g in groups {
                n += match how {
                    Retire::Stale => c.execute(
                        "UPDATE seeds SET status = 'stale' WHERE group_id = ?1 AND status = 'open'",
                        [g],
                    )?,
                    Retire::Delete => c.execute("DELETE FROM seeds WHERE group_id = ?1", [g])?,
                };
            }
            Ok(n)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Store::open(&dir.path().join("s.sqlite")).expect("open");
        (dir, s)
    }

    fn record(s: &Store, ws: &str, files: &[&str], sev: Severity) -> Vec<Seed> {
        let files: Vec<String> = files.iter().map(|f| f.to_string()).collect();
        let ids: Vec<String> = files
            .iter()
            .map(|_| metabob_process::random::new_finding_id())
            .collect();
        s.insert(&NewSeeds {
            workspace: ws,
            ids: &ids,
            files: &files,
            summary: "sum",
            details: "",
            severity: sev,
            category: "bug",
            lines: (Some(3), Some(4)),
            open: true,
        })
        .expect("insert")
    }

    #[test]
    fn a_multi_file_finding_is_one_group_and_retires_as_one() {
        let (_d, s) = store();
        let seeds = record(&s, "/w", &["a.py", "b.py"], Severity::High);
        assert_eq!(seeds.len(), 2);
        assert_eq!(seeds.iter().filter(|x| x.line_start.is_some()).count(), 1);
        s.set_concept(&seeds[0].group_id, "c1").expect("link");
        assert_eq!(s.by_concept("c1").expect("read").len(), 2);
        assert_eq!(s.retire(&seeds[1..], Retire::Stale).expect("retire"), 2);
        assert!(s.seeds("/w", false).expect("read").is_empty());
        assert_eq!(s.seeds("/w", true).expect("read").len(), 2);
        assert_eq!(s.retire(&seeds, Retire::Delete).expect("delete"), 2);
        assert!(s.get(&seeds[0].id).expect("read").is_none());
    }

    #[test]
    fn seeds_are_scoped_to_their_workspace_and_ranked_by_severity() {
        let (_d, s) = store();
        record(&s, "/w", &["a.py"], Severity::Low);
        record(&s, "/w", &["b.py"], Severity::Critical);
        record(&s, "/other", &["c.py"], Severity::High);
        let v = s.seeds("/w", false).expect("read");
        assert_eq!(
            v.iter().map(|x| x.file.as_str()).collect::<Vec<_>>(),
            ["b.py", "a.py"]
        );
    }
}

//! Backups end to end on SQLite: a clean stop folds the WAL into `ledger.db`, so the file alone
//! is the ledger; `ledger restore` puts a backup in place, and refuses, in one line each, a
//! serving ledger, a file that is no ledger, and a PostgreSQL store.
//!
//! SQLite only: each test runs its ledgers with `ledger_in`, which is SQLite whatever store the
//! run puts the other ledgers on, so the PostgreSQL run checks the same thing again.

use std::path::Path;

use serde_json::json;

use super::{create, id, ids, resolve};
use crate::support::{Ledger, Output, TestEnv};

/// The ids of every concept of `shape` the ledger serves, sorted.
fn shape_ids(l: &Ledger, k: &str, shape: &str) -> Vec<String> {
    let (status, v) = resolve(
        l,
        k,
        json!({"type": "conceptSearch", "shape": shape, "limit": 1000}),
    );
    assert_eq!(status, 200, "{v}");
    let mut got = ids(&v["concepts"]);
    got.sort();
    got
}

fn write_many(l: &Ledger, k: &str, shape: &str, n: usize) -> Vec<String> {
    let mut made: Vec<String> = (0..n)
        .map(|i| {
            id(&create(
                l,
                k,
                &format!("{shape} row {i} {}", "w".repeat(512)),
                shape,
            ))
        })
        .collect();
    made.sort();
    made
}

fn one_line_refusal(out: &Output, says: &str) {
    assert_eq!(out.code, 1, "{says}: {out:?}");
    assert_eq!(out.stderr.trim().lines().count(), 1, "{says}: {out:?}");
    assert!(out.stderr.contains(says), "{says}: {out:?}");
}

fn restore(env: &TestEnv, data: &Path, from: &Path) -> Output {
    env.run(&[
        "ledger",
        "restore",
        "--data",
        &data.display().to_string(),
        "--from",
        &from.display().to_string(),
    ])
}

/// After writes and a SIGTERM the WAL is empty (or gone), and `ledger.db` copied alone to a new
/// directory holds every acknowledged row: read with SQLite directly and served by a fresh
/// ledger. Before the checkpoint on stop, the copy held a 4 KB file with no tables.
#[test]
fn a_sigterm_folds_the_wal_into_ledger_db_which_alone_holds_every_acknowledged_write() {
    let env = TestEnv::new();
    let data = env.path("served");
    let mut l = env.ledger_in(data.clone(), &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");
    let acked = write_many(&l, &k, "durable", 120);
    assert_eq!(l.terminate(), Some(0), "a SIGTERM exits 0");

    let wal = data.join("ledger.db-wal");
    let wal_len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert_eq!(
        wal_len, 0,
        "the WAL is folded into ledger.db on a clean stop"
    );

    let alone = env.path("alone");
    std::fs::create_dir_all(&alone).unwrap();
    std::fs::copy(data.join("ledger.db"), alone.join("ledger.db")).unwrap();
    {
        let conn = rusqlite::Connection::open(alone.join("ledger.db")).unwrap();
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        let rows: i64 = conn
            .query_row(
                "SELECT count(*) FROM concepts WHERE shape = 'durable'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            rows as usize,
            acked.len(),
            "every acknowledged row is in the file"
        );
    }
    let r = env.ledger_in(alone, &[]);
    assert_eq!(shape_ids(&r, &k, "durable"), acked);
}

/// backup → more writes → stop → restore → serve: the ledger serves the backup's rows, and not
/// the ones written after it; no stale WAL or temporary file is left beside it.
#[test]
fn a_restored_backup_is_what_the_ledger_serves_after_a_restart() {
    let env = TestEnv::new();
    let data = env.path("served");
    let mut l = env.ledger_in(data.clone(), &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");
    let before = write_many(&l, &k, "kept", 30);
    let backup = env.path("backup.db");
    let out = super::backup_to(&env, &data, &backup);
    assert_eq!(out.code, 0, "{out:?}");
    let after = write_many(&l, &k, "later", 20);
    assert_eq!(shape_ids(&l, &k, "later"), after);
    assert_eq!(l.terminate(), Some(0));

    let out = restore(&env, &data, &backup);
    assert_eq!(out.code, 0, "{out:?}");
    let bytes = std::fs::metadata(&backup).unwrap().len();
    assert!(
        out.stdout.contains(&format!(
            "restored {} to {}: {bytes} bytes",
            backup.display(),
            data.join("ledger.db").display()
        )),
        "{out:?}"
    );
    let mut left: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["ledger.db"], "no stale WAL, shm or temporary file");
    assert_eq!(
        std::fs::metadata(data.join("ledger.db")).unwrap().len(),
        bytes
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(data.join("ledger.db"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    l.restart();
    assert_eq!(shape_ids(&l, &k, "kept"), before);
    assert_eq!(shape_ids(&l, &k, "later"), Vec::<String>::new());

    // A data directory that does not exist yet is made, private.
    let fresh = env.path("fresh/ledger");
    let out = restore(&env, &fresh, &backup);
    assert_eq!(out.code, 0, "{out:?}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
    let r = env.ledger_in(fresh, &[]);
    assert_eq!(shape_ids(&r, &k, "kept"), before);
}

/// Refused, in one line each and exit 1, with the ledger left as it was: a PostgreSQL store, a
/// ledger serving on the directory, a file that is no SQLite database, and a SQLite database
/// that is no ledger.
#[test]
fn restore_refuses_a_serving_ledger_a_corrupt_or_foreign_file_and_a_store() {
    let env = TestEnv::new();
    let out = env.run(&[
        "ledger",
        "restore",
        "--store",
        "postgres://u:hunter2pass@127.0.0.1:1/ledger",
        "--from",
        "x.db",
    ]);
    one_line_refusal(&out, "restore a PostgreSQL store with pg_restore");
    assert!(!out.stderr.contains("hunter2pass"), "{out:?}");
    let data = env.path("served");
    let mut l = env.ledger_in(data.clone(), &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");
    let rows = write_many(&l, &k, "mine", 10);
    let backup = env.path("backup.db");
    let out = super::backup_to(&env, &data, &backup);
    assert_eq!(out.code, 0, "{out:?}");

    // While it serves, even idle: refused, and it serves on untouched.
    one_line_refusal(&restore(&env, &data, &backup), "a ledger is serving on");
    assert_eq!(shape_ids(&l, &k, "mine"), rows);
    assert_eq!(l.terminate(), Some(0));
    let served = std::fs::read(data.join("ledger.db")).unwrap();

    let corrupt = env.path("corrupt.db");
    let mut bytes = std::fs::read(&backup).unwrap();
    for b in bytes.iter_mut().take(100) {
        *b = 0x5a;
    }
    std::fs::write(&corrupt, &bytes).unwrap();
    let foreign = env.path("foreign.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('hi');")
        .unwrap();
    let torn = env.path("torn.db");
    // A page gone from the middle: SQLite's integrity check names it.
    let page = 4096;
    let whole = std::fs::read(&backup).unwrap();
    assert!(whole.len() > 8 * page, "the backup has pages to lose");
    let mut cut = whole[..page * 2].to_vec();
    cut.extend(std::iter::repeat_n(0u8, page));
    cut.extend_from_slice(&whole[page * 3..]);
    std::fs::write(&torn, &cut).unwrap();
    for (from, says) in [
        (&corrupt, "is not a ledger backup (file is not a database)"),
        (
            &foreign,
            "is not a ledger backup (a SQLite database but not a ledger",
        ),
        (&torn, "is not a ledger backup"),
        (&env.path("missing.db"), "--from"),
    ] {
        let out = restore(&env, &data, from);
        one_line_refusal(&out, says);
        assert!(
            out.stderr.contains("name a file `ledger backup` wrote"),
            "{out:?}"
        );
        assert_eq!(
            std::fs::read(data.join("ledger.db")).unwrap(),
            served,
            "{} left the ledger as it was",
            from.display()
        );
    }
    let left: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "no temporary file left: {left:?}");
    l.restart();
    assert_eq!(shape_ids(&l, &k, "mine"), rows);
}

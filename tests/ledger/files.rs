//! The ledger's files are its user's alone: the data directory 0700, `ledger.db` with its
//! `-wal` and `-shm`, and the backups it writes 0600; a wider layout left from before is
//! tightened at start and said once.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::support::{Reaped, TestEnv};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// The data directory and the three files SQLite keeps in it while a connection is open.
fn layout(data: &Path) -> [PathBuf; 4] {
    [
        data.to_path_buf(),
        data.join("ledger.db"),
        data.join("ledger.db-wal"),
        data.join("ledger.db-shm"),
    ]
}

/// `ledger serve` on SQLite in `data` with its stderr in `log`, once it has printed its
/// address; killed (kill -9, so the `-wal` and `-shm` stay) when dropped.
fn serve(env: &TestEnv, data: &Path, log: &Path) -> Reaped {
    let mut child = env
        .cmd(&[
            "ledger",
            "serve",
            "--data",
            &data.display().to_string(),
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).expect("the log file"))
        .spawn()
        .expect("start the ledger");
    let line = crate::support::first_line(&mut child);
    assert!(line.contains("listening on"), "{line}");
    Reaped(child)
}

/// A ledger started where nothing was makes its directory 0700 and its file, write-ahead log
/// and shared memory 0600, whatever the umask lets SQLite do; a backup it writes is 0600 too.
#[test]
fn a_new_ledger_keeps_its_directory_files_and_backups_to_its_user() {
    let env = TestEnv::new();
    let data = env.path("private-ledger");
    let log = env.path("serve.log");
    let _l = serve(&env, &data, &log);
    let [dir, db, wal, shm] = layout(&data);
    assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    for file in [&db, &wal, &shm] {
        assert_eq!(mode(file), 0o600, "{}", file.display());
    }
    let to = env.path("backup.db");
    let out = super::backup_to(&env, &data, &to);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(mode(&to), 0o600, "the backup");
    let said = std::fs::read_to_string(&log).expect("the log");
    assert!(!said.contains("readable beyond its owner"), "{said}");
}

/// A layout left readable by everyone (a directory 0755, files 0644, as a umask of 022 makes
/// them) is tightened when the ledger starts on it, each path named with its old mode in one
/// warning; the next start finds nothing to say.
#[test]
fn a_wider_layout_is_tightened_at_start_and_said_once() {
    let env = TestEnv::new();
    let data = env.path("wide-ledger");
    let files = layout(&data);
    {
        let _first = serve(&env, &data, &env.path("first.log"));
        // Killed with its -wal and -shm in place, as a crash or kill -9 leaves them.
    }
    for (i, path) in files.iter().enumerate() {
        set_mode(path, if i == 0 { 0o755 } else { 0o644 });
    }
    let log = env.path("second.log");
    {
        let _second = serve(&env, &data, &log);
        let [dir, db, wal, shm] = &files;
        assert_eq!(mode(dir), 0o700, "{}", dir.display());
        for file in [db, wal, shm] {
            assert_eq!(mode(file), 0o600, "{}", file.display());
        }
    }
    let said = std::fs::read_to_string(&log).expect("the log");
    for (i, path) in files.iter().enumerate() {
        let (old, new) = if i == 0 {
            ("0755", "0700")
        } else {
            ("0644", "0600")
        };
        let line = format!(
            "{} was readable beyond its owner (mode {old}); made it {new}",
            path.display()
        );
        assert_eq!(said.matches(&line).count(), 1, "{line}: {said}");
        assert!(
            said.lines()
                .any(|l| l.contains(&line) && l.contains("WARN")),
            "a warning: {said}"
        );
    }
    let log = env.path("third.log");
    drop(serve(&env, &data, &log));
    let said = std::fs::read_to_string(&log).expect("the log");
    assert!(!said.contains("readable beyond its owner"), "{said}");
}

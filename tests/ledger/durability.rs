//! Durability: no write a 201 acknowledged is lost to kill -9, SIGTERM, a killed replica or a
//! full disk; replicas starting together on one database.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::{apikey, create, id, ids, resolve, try_http};
use crate::support::{Ledger, TestEnv, wait_until};

/// Writers that create concepts without pause through `urls` (writer `t` through
/// `urls[t % len]`) until stopped, keeping the id of every write a 201 acknowledged.
struct WriteLoad {
    acked: Arc<Mutex<Vec<String>>>,
    count: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    writers: Vec<std::thread::JoinHandle<()>>,
}

impl WriteLoad {
    fn start(urls: &[String], k: &str, writers: usize) -> WriteLoad {
        let acked: Arc<Mutex<Vec<String>>> = Arc::default();
        let count = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let writers = (0..writers)
            .map(|t| {
                let url = urls[t % urls.len()].clone();
                let (k, acked, count, stop) = (k.to_string(), acked.clone(), count.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = 0;
                    while !stop.load(Ordering::SeqCst) {
                        i += 1;
                        let pointer = json!({"type": "concept_create_write",
                            "conceptData": {"content": format!("writer {t} item {i}"), "shape": "load", "source_type": "memo"}});
                        // A request cut by the kill is not acknowledged, and that is allowed to be lost.
                        let body = json!({ "pointer": pointer }).to_string();
                        match try_http(&url, "POST", "/resolve", Some(&apikey(&k)), Some(&body)) {
                            Ok((201, v)) => {
                                acked.lock().unwrap().push(id(&v["concept"]));
                                count.fetch_add(1, Ordering::SeqCst);
                            }
                            _ => std::thread::sleep(Duration::from_millis(20)),
                        }
                    }
                })
            })
            .collect();
        WriteLoad {
            acked,
            count,
            stop,
            writers,
        }
    }

    /// Waits until `n` more writes than now are acknowledged.
    fn wait_for(&self, n: usize) {
        let from = self.count.load(Ordering::SeqCst);
        assert!(
            wait_until(Duration::from_secs(20), || self
                .count
                .load(Ordering::SeqCst)
                >= from + n),
            "{n} more writes were acknowledged"
        );
    }

    /// Stops the writers; the ids of every acknowledged write.
    fn stop(self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        for w in self.writers {
            w.join().expect("writer thread");
        }
        self.acked.lock().unwrap().clone()
    }
}

/// Every acknowledged concept reads back through `l`.
fn all_readable(l: &Ledger, k: &str, acked: &[String]) {
    for cid in acked {
        let (status, g) = resolve(
            l,
            k,
            json!({"type": "conceptGraph", "concept_id": cid, "limit": 1}),
        );
        assert_eq!(status, 200, "acknowledged {cid} lost: {g}");
    }
}

#[test]
fn killing_one_postgres_replica_under_load_loses_no_acknowledged_write() {
    let env = TestEnv::new();
    let mut a = env.ledger_on("kill9-a", &crate::support::pg::fresh_database(), &[]);
    let b = a.replica(&env);
    let (_, k) = a.create_key(&env, "default", "read,write");
    let load = WriteLoad::start(&[a.url.clone(), b.url.clone()], &k, 16);
    load.wait_for(40);
    a.kill_and_restart();
    // The restarted replica serves at once: its first request is answered.
    let (status, v) = resolve(&a, &k, json!({"type": "conceptSearch", "limit": 1}));
    assert_eq!(status, 200, "{v}");
    load.wait_for(8);
    let acked = load.stop();
    all_readable(&b, &k, &acked);
}

#[test]
fn sigterm_under_a_write_load_drains_exits_0_and_loses_no_acknowledged_write() {
    let env = TestEnv::new();
    let mut l = env.ledger("term", &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");
    let load = WriteLoad::start(std::slice::from_ref(&l.url), &k, 16);
    load.wait_for(40);
    // Both stores: the PostgreSQL one used to abort (134) closing its client inside the runtime.
    assert_eq!(
        l.terminate(),
        Some(0),
        "a ledger stopped by SIGTERM exits 0"
    );
    let acked = load.stop();
    l.restart();
    all_readable(&l, &k, &acked);
}

/// A tmpfs of its own, unmounted when dropped (after whatever used it).
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(at: std::path::PathBuf, size: &str) -> SmallDisk {
        std::fs::create_dir_all(&at).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a tmpfs for the full-disk test needs root (CI runs as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallDisk(at)
    }

    /// Fills the disk with one file, then gives `keep` bytes of it back: the file.
    fn fill_leaving(&self, keep: u64) -> std::path::PathBuf {
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        let len = f.metadata().unwrap().len();
        f.set_len(len.saturating_sub(keep)).unwrap();
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_full_disk_is_named_store_full_reads_go_on_and_writes_resume_once_space_returns() {
    let env = TestEnv::new();
    let disk = SmallDisk::mount(env.path("small-disk"), "16m");
    let l = env.ledger_in(disk.0.join("ledger"), &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");
    let filler = disk.fill_leaving(1024 * 1024);

    let write = |i: usize| {
        let pointer = json!({"type": "concept_create_write", "conceptData": {
            "content": format!("item {i} {}", "z".repeat(16 * 1024)), "shape": "load", "source_type": "memo"}});
        resolve(&l, &k, pointer)
    };
    let mut acked = Vec::new();
    let full = (0..2000).find_map(|i| {
        let (status, v) = write(i);
        match status {
            201 => {
                acked.push(id(&v["concept"]));
                None
            }
            other => Some((other, v)),
        }
    });
    let (status, v) = full.expect("the disk filled within 2,000 writes");
    assert_eq!(status, 507, "{v}");
    assert_eq!(v["error"], "store_full", "{v}");
    assert!(
        v["detail"].as_str().unwrap().contains("free disk space"),
        "{v}"
    );
    let (status, v) = resolve(
        &l,
        &k,
        json!({"type": "conceptSearch", "shape": "load", "limit": 1}),
    );
    assert_eq!(status, 200, "reads go on while the disk is full: {v}");
    // A cell's command hears it as an outage (exit 2), which the entrypoint waits out.
    let (_, origin) = env.origin("app", &[("a.py", "x = 1\n")]);
    let out = env.run(&[
        "finding",
        "record",
        "--origin",
        &origin,
        "--file",
        "a.py",
        "--summary",
        "while full",
        "--severity",
        "LOW",
        "--category",
        "task",
    ]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("the ledger is unavailable for now") && out.stderr.contains("store"),
        "{out:?}"
    );

    std::fs::remove_file(filler).unwrap();
    let (status, v) = write(9999);
    assert_eq!(status, 201, "writes resume once space returns: {v}");
    acked.push(id(&v["concept"]));
    all_readable(&l, &k, &acked);
    let conn = rusqlite::Connection::open(disk.0.join("ledger/ledger.db")).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(conn);
    drop(l);
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let env = TestEnv::new();
    let mut l = env.ledger("kill9", &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");
    // Enough concurrent writers that commits carry batches (group commit), not single writes.
    let load = WriteLoad::start(std::slice::from_ref(&l.url), &k, 16);
    load.wait_for(40);
    l.kill_and_restart();
    load.wait_for(8);
    let acked = load.stop();
    all_readable(&l, &k, &acked);
    let (_, all) = resolve(
        &l,
        &k,
        json!({"type": "conceptSearch", "shape": "load", "limit": 1000}),
    );
    let mut rows: Vec<(i64, String)> = all["concepts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["seq"].as_i64().unwrap(),
                c["created_at"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(rows.len() >= acked.len());
    rows.sort();
    // One writer numbers and stamps every row in commit order. On PostgreSQL replicas' writes
    // commit side by side, and the order is kept per finding instead (SPEC.md §Claim order on
    // each store; the replica race tests it).
    if !crate::support::on_postgres() {
        for pair in rows.windows(2) {
            assert!(
                pair[1].0 > pair[0].0 && pair[1].1 > pair[0].1,
                "seq and created_at rise together: {pair:?}"
            );
        }
    }
}

/// Two replicas started at once on an empty PostgreSQL database: both serve, the schema is made
/// once, and one of them (only) mints the first-start admin key.
#[test]
fn two_replicas_starting_together_on_an_empty_postgres_database_make_one_schema_and_one_admin_key()
{
    let env = TestEnv::new();
    let store = crate::support::pg::fresh_database();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| env.ledger_on("first", &store, &[]));
        let b = s.spawn(|| env.ledger_on("second", &store, &[]));
        (a.join().unwrap(), b.join().unwrap())
    });
    let listed = a.key(&env, &["list", "--json"]);
    assert_eq!(listed.code, 0, "{listed:?}");
    let keys: Vec<Value> = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(keys.len(), 1, "one admin key: {keys:?}");
    assert_eq!(keys[0]["scopes"], json!(["read", "write", "admin"]));
    // Written through one replica, read through the other.
    let (_, k) = a.create_key(&env, "default", "read,write");
    let made = id(&create(&a, &k, "written through the first", "memo"));
    let (status, v) = resolve(&b, &k, json!({"type": "conceptSearch", "query": "first"}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(ids(&v["concepts"]), vec![made]);
}

/// `ledger backup` while 8 writers keep writing: the copy passes SQLite's integrity check, a
/// ledger started on it alone serves every write acknowledged before the backup began, and the
/// writes go on through it. What it refuses is one line.
#[test]
fn a_backup_under_a_write_load_is_whole_and_serves_every_write_acknowledged_before_it() {
    let env = TestEnv::new();
    let data = env.path("served");
    let l = env.ledger_in(data.clone(), &[]);
    let (_, k) = l.create_key(&env, "default", "read,write");
    let load = WriteLoad::start(std::slice::from_ref(&l.url), &k, 8);
    load.wait_for(40);
    let before = load.acked.lock().unwrap().clone();
    std::fs::create_dir_all(env.path("backups")).unwrap();
    let to = env.path("backups/ledger.db").display().to_string();
    let data_arg = data.display().to_string();
    let backup = |data: &str, to: &str| env.run(&["ledger", "backup", "--data", data, "--to", to]);
    let out = env.run(&[
        "ledger", "backup", "--data", &data_arg, "--to", &to, "--json",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(report["bytes"].as_u64().unwrap() > 0, "{report}");
    load.wait_for(20);
    let all = load.stop();
    assert!(all.len() >= before.len() + 20);

    let copy = rusqlite::Connection::open(&to).unwrap();
    let check: String = copy
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(copy);
    let restored = env.path("restored");
    std::fs::create_dir_all(&restored).unwrap();
    std::fs::copy(&to, restored.join("ledger.db")).unwrap();
    let r = env.ledger_in(restored, &[]);
    all_readable(&r, &k, &before);

    // Refused, each in one line: an existing target (left as it was), a directory with no
    // ledger, and a PostgreSQL store (named without its password).
    let empty = env.path("empty").display().to_string();
    let pg = "postgres://u:hunter2pass@127.0.0.1:1/ledger";
    for (out, says) in [
        (backup(&data_arg, &to), "exists; a backup never overwrites"),
        (
            backup(&empty, &env.path("new.db").display().to_string()),
            "no ledger at",
        ),
        (
            env.run(&["ledger", "backup", "--store", pg, "--to", "x.db"]),
            "back up a PostgreSQL store with pg_dump",
        ),
    ] {
        assert_eq!(out.code, 1, "{out:?}");
        assert_eq!(out.stderr.trim().lines().count(), 1, "{out:?}");
        assert!(out.stderr.contains(says), "{says}: {out:?}");
        assert!(!out.stderr.contains("hunter2pass"), "{out:?}");
    }
    assert_eq!(
        std::fs::metadata(&to).unwrap().len(),
        report["bytes"].as_u64().unwrap()
    );
}

//! One real PostgreSQL cluster, owned by this file for the tests (one per test process, a fresh
//! database per ledger: [`fresh_database`]) and for the fleet bench (benches/fleet.rs includes
//! it). initdb in a temp dir, started on a free loopback port with the durability a production
//! ledger has (fsync and synchronous_commit on). A dropped [`Cluster`] stops and is removed; a
//! small shell watchdog does the same once the process is gone however it ended (the tests'
//! cluster is a static, never dropped; kill -9 and a second Ctrl-C skip every `Drop`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The tests' cluster, or why it could not start: kept, so every later test fails fast with the
/// same line instead of each trying its own initdb.
static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();

fn cluster() -> &'static Cluster {
    match CLUSTER.get_or_init(|| Cluster::start(&std::env::temp_dir())) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

/// A new, empty database on the tests' cluster; its URL,
/// `postgres://postgres@127.0.0.1:PORT/NAME`.
pub fn fresh_database() -> String {
    cluster().fresh_database().unwrap_or_else(|e| panic!("{e}"))
}

/// `psql -Atc statement` against a database of the tests' cluster (its name) or a full
/// `postgres://` URL: the trimmed output. Panics with psql's stderr when it fails.
pub fn sql(url_or_db: &str, statement: &str) -> String {
    cluster()
        .psql(url_or_db, statement)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Debian's layout: /usr/lib/postgresql/<major>/bin.
const PG_LIB: &str = "/usr/lib/postgresql";
/// A cold start on a loaded 2-core machine; past it the bench gives up.
const START_LIMIT: Duration = Duration::from_secs(60);
/// A replica holds 20 connections (16 writing, 4 reading): room for the tests' ledgers and the
/// bench's replicas, and for connections a killed ledger left for the server to notice.
const MAX_CONNECTIONS: usize = 300;

pub struct Cluster {
    bin: PathBuf,
    /// PostgreSQL refuses to run as root, so as root its commands run as `postgres`.
    as_postgres: bool,
    data: PathBuf,
    pub port: u16,
    databases: AtomicUsize,
    /// Removed after the server has stopped (fields drop after `Drop::drop`).
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// initdb and start a cluster in a new temp dir under `parent`.
    pub fn start(parent: &Path) -> Result<Cluster, String> {
        let bin = find_bin()?;
        let as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("mb-pg-")
            .tempdir_in(parent)
            .map_err(|e| format!("PostgreSQL: temp dir in {}: {e}", parent.display()))?;
        let data = dir.path().join("data");
        let sock = dir.path().join("sock");
        std::fs::create_dir(&sock).map_err(|e| format!("PostgreSQL: {}: {e}", sock.display()))?;
        if as_postgres {
            run(
                Command::new("chown")
                    .args(["-R", "postgres:postgres"])
                    .arg(dir.path()),
                &format!("PostgreSQL: chown postgres {}", dir.path().display()),
            )?;
        }
        run(
            owner_cmd(as_postgres, &bin.join("initdb"))
                .arg("-D")
                .arg(&data)
                // --no-sync covers initdb's own writes only; the server runs with fsync on.
                .args(["-U", "postgres", "-A", "trust", "--locale=C", "-E", "UTF8"])
                .arg("--no-sync"),
            "PostgreSQL: initdb",
        )?;
        // The defaults, spelled out: what is measured is a durable commit, as SQLite's
        // synchronous=FULL is on the other side.
        let conf = format!(
            "\n# fleet bench\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             fsync = on\nsynchronous_commit = on\nmax_connections = {MAX_CONNECTIONS}\n",
            sock.display()
        );
        append(&data.join("postgresql.conf"), &conf)?;
        let mut cluster = Cluster {
            bin,
            as_postgres,
            data,
            port: 0,
            databases: AtomicUsize::new(0),
            _dir: dir,
        };
        cluster.watchdog()?;
        // From here a failure drops `cluster`, which stops whatever did start.
        let log = cluster._dir.path().join("postgres.log");
        let mut last = String::new();
        // A free port can be taken between choosing and binding it: a bind failure tries another.
        for _ in 0..3 {
            cluster.port = free_port()?;
            match cluster.start_on(&log) {
                Ok(()) => return Ok(cluster),
                Err(e) => {
                    let tail = log_tail(&log);
                    last = format!("{e}; {}:\n{tail}", log.display());
                    if !tail.contains("could not bind") && !tail.contains("already in use") {
                        break;
                    }
                }
            }
        }
        Err(format!("PostgreSQL did not start: {last}"))
    }

    fn start_on(&self, log: &Path) -> Result<(), String> {
        // pg_ctl's output goes to a file, so the server it leaves running holds no pipe of ours.
        let said = self._dir.path().join("pg_ctl.out");
        let out = std::fs::File::create(&said).map_err(|e| format!("{}: {e}", said.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("{}: {e}", said.display()))?;
        let status = owner_cmd(self.as_postgres, &self.bin.join("pg_ctl"))
            .arg("start")
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(log)
            .args(["-o", &format!("-p {}", self.port)])
            .args(["-w", "-t", &START_LIMIT.as_secs().to_string()])
            .stdout(out)
            .stderr(err)
            .status()
            .map_err(|e| format!("pg_ctl start: {e}"))?;
        if !status.success() {
            let text = std::fs::read_to_string(&said).unwrap_or_default();
            return Err(format!(
                "pg_ctl start: {}",
                text.split_whitespace().collect::<Vec<_>>().join(" ")
            ));
        }
        // pg_ctl -w watched the pid file; a query over TCP proves what the ledgers will use.
        let until = Instant::now() + START_LIMIT;
        loop {
            match self.psql("postgres", "SELECT 1") {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > until => {
                    return Err(format!("no answer on 127.0.0.1:{}: {e}", self.port));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// The URL of database `name` on this cluster.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// A new, empty database; its URL.
    pub fn fresh_database(&self) -> Result<String, String> {
        let name = format!("mb_{}", self.databases.fetch_add(1, Ordering::Relaxed));
        self.psql("postgres", &format!("CREATE DATABASE {name}"))?;
        Ok(self.url(&name))
    }

    /// `psql -c statement` on database `db` of this cluster, or on a full `postgres://` URL;
    /// its trimmed output.
    pub fn psql(&self, db: &str, statement: &str) -> Result<String, String> {
        let target = if db.starts_with("postgres://") || db.starts_with("postgresql://") {
            db.to_string()
        } else {
            self.url(db)
        };
        // -X: no ~/.psqlrc; a cleared environment: no PG* variable of the caller's redirects it.
        run(
            Command::new(self.bin.join("psql"))
                .env_clear()
                .env("PATH", std::env::var("PATH").unwrap_or_default())
                .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d"])
                .arg(&target)
                .args(["-c", statement])
                .stdin(Stdio::null()),
            &format!("psql {statement:?}"),
        )
    }

    /// The server's processes: the postmaster and every process it forked (a backend per
    /// connection, the WAL writer, the checkpointer), whose CPU is the store's share of a run.
    #[allow(
        dead_code,
        reason = "the fleet bench weighs the server's CPU; the tests do not"
    )]
    pub fn server_pids(&self) -> Vec<String> {
        let pid_file = self.data.join("postmaster.pid");
        let Some(master) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.lines().next().map(|l| l.trim().to_string()))
        else {
            return Vec::new();
        };
        let mut pids = vec![master.clone()];
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return pids;
        };
        for e in entries.flatten() {
            let pid = e.file_name().to_string_lossy().into_owned();
            if !pid.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            // The parent's pid is the second field after the parenthesised command name.
            let parent = std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .and_then(|(_, r)| r.split_whitespace().nth(1).map(str::to_string))
                });
            if parent.as_deref() == Some(master.as_str()) {
                pids.push(pid);
            }
        }
        pids
    }

    /// Stops the server and removes the cluster's dir once this process is gone, however it
    /// ends: a `Drop` does not run on kill -9 or a second Ctrl-C.
    fn watchdog(&self) -> Result<(), String> {
        let script = r#"
trap '' INT HUP TERM QUIT
while kill -0 "$1" 2>/dev/null; do sleep 1; done
if [ "$4" = root ]; then
  runuser -u postgres -- "$2/pg_ctl" stop -D "$3/data" -m immediate -w -t 30
else
  "$2/pg_ctl" stop -D "$3/data" -m immediate -w -t 30
fi
rm -rf "$3"
"#;
        Command::new("sh")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .args(["-c", script, "mb-pg-watchdog"])
            .arg(std::process::id().to_string())
            .arg(&self.bin)
            .arg(self._dir.path())
            .arg(if self.as_postgres { "root" } else { "user" })
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(drop)
            .map_err(|e| format!("PostgreSQL: the watchdog (sh) did not start: {e}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Fast: connections are cut and the server stops cleanly; the data is thrown away next.
        let out = owner_cmd(self.as_postgres, &self.bin.join("pg_ctl"))
            .arg("stop")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "fast", "-w", "-t", "60"])
            .output();
        if let Ok(out) = out
            && !out.status.success()
            && self.port != 0
        {
            eprintln!(
                "PostgreSQL: pg_ctl stop: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
}

/// The newest installed major's bin dir.
fn find_bin() -> Result<PathBuf, String> {
    let entries = std::fs::read_dir(PG_LIB).map_err(|e| {
        format!("PostgreSQL: no {PG_LIB} ({e}); install Debian's postgresql (scripts/test.sh does)")
    })?;
    let mut found: Vec<(Vec<u32>, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let bin = e.path().join("bin");
            let version = e.file_name().to_string_lossy().into_owned();
            // Numeric order, so 9.6 < 10 < 15.
            let key: Option<Vec<u32>> = version.split('.').map(|p| p.parse().ok()).collect();
            Some((key?, bin)).filter(|(_, b)| b.join("initdb").is_file())
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| format!("PostgreSQL: no {PG_LIB}/*/bin/initdb"))
}

/// Runs `cmd` to its end: its output, trimmed, or one line naming `what` and what it said.
fn run(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

fn owner_cmd(as_postgres: bool, program: &Path) -> Command {
    let mut c = if as_postgres {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    c
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("PostgreSQL: no free port: {e}"))
}

fn append(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

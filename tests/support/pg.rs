//! One real PostgreSQL cluster per test process, for the ledger's tests on its PostgreSQL store
//! (`METABOB_TEST_STORE=postgres`). Each test takes its own database with [`fresh_database`].
//!
//! The cluster lives in a temp dir and is started on first use. A static is never dropped, so a
//! small shell watchdog, started before the cluster, stops it and removes the dir once this
//! process is gone, however it ends (pass, panic, Ctrl-C, kill -9).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The Debian layout: /usr/lib/postgresql/<major>/bin.
const PG_LIB: &str = "/usr/lib/postgresql";
/// How long a cold start may take on a loaded 2-core machine before the tests give up.
const START_TIMEOUT: Duration = Duration::from_secs(60);

struct Cluster {
    bin: PathBuf,
    port: u16,
}

/// The cluster, or why it could not start: kept, so every later test fails fast with the same
/// line instead of each trying its own initdb.
static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
static NEXT_DB: AtomicUsize = AtomicUsize::new(0);

fn cluster() -> &'static Cluster {
    match CLUSTER.get_or_init(start) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

/// A new, empty database on the cluster; its URL,
/// `postgres://postgres@127.0.0.1:PORT/NAME`.
pub fn fresh_database() -> String {
    let c = cluster();
    let name = format!(
        "mb_{}_{}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::Relaxed)
    );
    sql("postgres", &format!("CREATE DATABASE {name}"));
    format!("postgres://postgres@127.0.0.1:{}/{name}", c.port)
}

/// `psql -Atc statement` against a database of the cluster (its name) or a full
/// `postgres://` URL: the trimmed output. Panics with psql's stderr when it fails.
pub fn sql(url_or_db: &str, statement: &str) -> String {
    let c = cluster();
    let target = if url_or_db.starts_with("postgres://") || url_or_db.starts_with("postgresql://") {
        url_or_db.to_string()
    } else {
        format!("postgres://postgres@127.0.0.1:{}/{url_or_db}", c.port)
    };
    let out = psql(&c.bin, &target, statement);
    assert!(
        out.status.success(),
        "psql {target} -c {statement:?}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn psql(bin: &Path, target: &str, statement: &str) -> std::process::Output {
    // -X: no ~/.psqlrc; a cleared environment: no PG* variable of the caller's redirects it.
    Command::new(bin.join("psql"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            target,
        ])
        .args(["-c", statement])
        .stdin(Stdio::null())
        .output()
        .expect("psql runs")
}

/// The newest installed major's bin dir.
fn find_bin() -> Result<PathBuf, String> {
    let entries = std::fs::read_dir(PG_LIB).map_err(|e| {
        format!("PostgreSQL tests: no {PG_LIB} ({e}); install Debian's postgresql (scripts/test.sh does)")
    })?;
    let mut found: Vec<(Vec<u32>, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let bin = e.path().join("bin");
            let version = e.file_name().to_string_lossy().into_owned();
            // A numeric order: 9.6 < 10 < 15.
            let key: Option<Vec<u32>> = version.split('.').map(|p| p.parse().ok()).collect();
            Some((key?, bin)).filter(|(_, b)| b.join("initdb").is_file())
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).ok_or_else(|| {
        format!("PostgreSQL tests: no {PG_LIB}/*/bin/initdb; install Debian's postgresql")
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// `program` as the cluster's owner: PostgreSQL refuses to run as root, so as root it is the
/// `postgres` user.
fn as_owner(root: bool, program: &Path) -> Command {
    let mut c = if root {
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

fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

fn start() -> Result<Cluster, String> {
    let bin = find_bin()?;
    let root = is_root();
    let dir = tempfile::Builder::new()
        .prefix("metabob-pg-")
        .tempdir()
        .map_err(|e| format!("PostgreSQL tests: temp dir: {e}"))?
        // The watchdog removes it, after the server has stopped.
        .keep();
    let data = dir.join("data");
    let sock = dir.join("sock");
    let log = dir.join("postgres.log");
    std::fs::create_dir(&sock).map_err(|e| format!("PostgreSQL tests: {}: {e}", sock.display()))?;
    if root {
        let out = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .output()
            .map_err(|e| format!("PostgreSQL tests: chown: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "PostgreSQL tests: chown postgres {}: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    watchdog(&bin, root, &dir, &data)?;

    let out = as_owner(root, &bin.join("initdb"))
        .arg("-D")
        .arg(&data)
        // --no-sync is initdb's own writes only; the server below runs with fsync on.
        .args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "--locale=C",
            "-E",
            "UTF8",
            "--no-sync",
        ])
        .output()
        .map_err(|e| format!("PostgreSQL tests: initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "PostgreSQL tests: initdb failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    // The tests kill ledgers mid-write and read back what they acknowledged, so the server keeps
    // fsync on; the rest is small, since many tests each hold a pool of connections.
    let conf = format!(
        "\n# metabob tests\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
         fsync = on\nmax_connections = 300\nshared_buffers = 32MB\n",
        sock.display()
    );
    append(&data.join("postgresql.conf"), &conf)?;

    // A free port can be taken between picking it and binding it: a bind failure tries another.
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port()?;
        match start_on(&bin, root, &data, &log, port) {
            Ok(()) => return Ok(Cluster { bin, port }),
            Err(e) => {
                let tail = log_tail(&log);
                last = format!("{e}; log {}:\n{tail}", log.display());
                if !tail.contains("could not bind") && !tail.contains("already in use") {
                    break;
                }
            }
        }
    }
    Err(format!(
        "PostgreSQL tests: the cluster did not start: {last}"
    ))
}

fn start_on(bin: &Path, root: bool, data: &Path, log: &Path, port: u16) -> Result<(), String> {
    // pg_ctl's own output goes to a file: the server it starts holds no pipe of ours open.
    let ctl_out = data
        .parent()
        .map_or_else(|| PathBuf::from("pg_ctl.out"), |d| d.join("pg_ctl.out"));
    let out_file = std::fs::File::create(&ctl_out).map_err(|e| format!("pg_ctl.out: {e}"))?;
    let err_file = out_file
        .try_clone()
        .map_err(|e| format!("pg_ctl.out: {e}"))?;
    let status = as_owner(root, &bin.join("pg_ctl"))
        .arg("start")
        .arg("-D")
        .arg(data)
        .arg("-l")
        .arg(log)
        .args(["-o", &format!("-p {port}")])
        .args(["-w", "-t", &START_TIMEOUT.as_secs().to_string()])
        .stdout(out_file)
        .stderr(err_file)
        .status()
        .map_err(|e| format!("pg_ctl: {e}"))?;
    if !status.success() {
        let said = std::fs::read_to_string(&ctl_out).unwrap_or_default();
        let said: Vec<&str> = said
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        return Err(format!("pg_ctl start: {}", said.join(" ")));
    }
    // pg_ctl -w watched postmaster.pid; a query over TCP proves what the ledger will use.
    let target = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let out = psql(bin, &target, "SELECT 1");
        if out.status.success() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no answer on 127.0.0.1:{port} within {}s: {}",
                START_TIMEOUT.as_secs(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Stops the cluster (immediate: its data is thrown away) and removes `dir` once this process
/// has exited. It ignores the terminal's signals, so a Ctrl-C that ends the tests does not end it.
fn watchdog(bin: &Path, root: bool, dir: &Path, data: &Path) -> Result<(), String> {
    let script = r#"
trap '' INT HUP TERM QUIT
while kill -0 "$1" 2>/dev/null; do sleep 1; done
if [ "$5" = root ]; then
  runuser -u postgres -- "$2/pg_ctl" stop -D "$4" -m immediate -w -t 30
else
  "$2/pg_ctl" stop -D "$4" -m immediate -w -t 30
fi
rm -rf "$3"
"#;
    Command::new("sh")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .args(["-c", script, "metabob-pg-watchdog"])
        .arg(std::process::id().to_string())
        .arg(bin)
        .arg(dir)
        .arg(data)
        .arg(if root { "root" } else { "user" })
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|e| format!("PostgreSQL tests: the watchdog (sh) did not start: {e}"))
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("PostgreSQL tests: no free port: {e}"))
}

fn append(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("PostgreSQL tests: {}: {e}", path.display()))
}

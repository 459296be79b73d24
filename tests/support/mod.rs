//! The hermetic test environment: its own HOME, TMPDIR and git config, no inherited
//! substrate or proxy variables, and helpers to run the real binary and a real ledger.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

mod git;
mod ledger;
pub mod mcp;
mod normalize;
pub mod pg;
mod servers;
pub mod soak;
mod tls;
pub use git::{git_daemon, git_daemon_on};
pub use ledger::{Ledger, first_line};
pub use normalize::{layout, normalize, seen, snapshot, verbatim};
pub use servers::{Producer, git_http_host, static_http_server, tinyproxy};
pub use tls::{CA_CN, Pki, Relay, TlsConn, s_server, tls_proxy};

/// The binary under test, as assert_cmd's `cargo_bin` finds it: the one way these tests name
/// it. Runs to completion go through [`TestEnv::run`] and long-running processes through
/// [`TestEnv::cmd`], both on this path; assert_cmd's own `Command` does not fit them, since its
/// `output` and `assert` always give the child a stdin pipe, where TestEnv's is null.
pub fn bin() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| assert_cmd::cargo::cargo_bin("metabob-mcp"))
}

/// The binary with exactly `vars`, run in `cwd`, stdin null: TestEnv's hermetic environment.
fn hermetic(vars: &[(String, String)], cwd: &Path) -> Command {
    hermetic_program(bin().as_os_str(), vars, cwd)
}

fn hermetic_program(program: &std::ffi::OsStr, vars: &[(String, String)], cwd: &Path) -> Command {
    let mut c = Command::new(program);
    c.env_clear()
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(Stdio::null());
    c
}

pub struct TestEnv {
    pub root: tempfile::TempDir,
    pub vars: Vec<(String, String)>,
    /// The ids snapshots of this test have named so far (see `normalize`).
    ids: Mutex<normalize::Ids>,
    /// Each ledger name's database, on PostgreSQL: a ledger started again under the same name
    /// finds its rows, as it finds its data directory on SQLite.
    databases: Mutex<std::collections::HashMap<String, String>>,
}

impl TestEnv {
    pub fn new() -> Self {
        let root = tempfile::Builder::new()
            .prefix("mbtest-")
            .tempdir()
            .expect("temp dir");
        let home = root.path().join("home");
        let tmp = root.path().join("tmp");
        let cwd = root.path().join("cwd");
        for d in [&home, &tmp, &cwd] {
            std::fs::create_dir_all(d).expect("create test dirs");
        }
        let gitconfig = home.join(".gitconfig");
        std::fs::write(
            &gitconfig,
            "[user]\n\tname = Test\n\temail = test@example.invalid\n[init]\n\tdefaultBranch = main\n",
        )
        .expect("write gitconfig");
        let path = std::env::var("PATH").unwrap_or_default();
        let vars = vec![
            ("PATH".into(), path),
            ("HOME".into(), home.display().to_string()),
            ("TMPDIR".into(), tmp.display().to_string()),
            ("GIT_CONFIG_GLOBAL".into(), gitconfig.display().to_string()),
            ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
            ("RUST_LOG".into(), "warn".into()),
            // The OS store is not under test, and reading it costs time on every process.
            ("METABOB_NO_SYSTEM_CA".into(), "1".into()),
        ];
        TestEnv {
            root,
            vars,
            ids: Mutex::default(),
            databases: Mutex::default(),
        }
    }

    /// The test root as printed: as created, and with symlinks resolved.
    pub fn roots(&self) -> Vec<String> {
        let mut roots = vec![self.root.path().display().to_string()];
        if let Ok(real) = std::fs::canonicalize(self.root.path()) {
            roots.push(real.display().to_string());
        }
        roots.sort_by_key(|r| std::cmp::Reverse(r.len()));
        roots.dedup();
        roots
    }

    pub fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    /// The admin key a first `ledger serve` wrote into this HOME's config.
    pub fn admin_key(&self) -> String {
        let config = std::fs::read_to_string(self.home().join(".substrate/config.json"))
            .expect("a ledger started in this env wrote its config");
        let config: serde_json::Value = serde_json::from_str(&config).expect("config is JSON");
        config["metabob"]["apiKey"]
            .as_str()
            .expect("the config holds the admin key")
            .to_string()
    }

    pub fn cwd(&self) -> PathBuf {
        self.root.path().join("cwd")
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    pub fn set(&mut self, k: &str, v: impl Into<String>) -> &mut Self {
        self.vars.retain(|(n, _)| n != k);
        self.vars.push((k.into(), v.into()));
        self
    }

    pub fn unset(&mut self, k: &str) -> &mut Self {
        self.vars.retain(|(n, _)| n != k);
        self
    }

    /// The binary with exactly this environment, run in the test's cwd.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = hermetic(&self.vars, &self.cwd());
        c.args(args);
        c
    }

    /// Another program (a shell, a script) with exactly this environment, run in the test's cwd.
    pub fn program(&self, program: &str) -> Command {
        hermetic_program(program.as_ref(), &self.vars, &self.cwd())
    }

    /// Runs `cmd` in a process group of its own for at most `bound`, its output in the files
    /// `name.out` and `name.err` (files, not pipes: a background child holding a pipe open would
    /// keep a reader waiting). Then the whole group gets TERM, and KILL 5 s later, whatever the
    /// outcome, so nothing it started in the background outlives it. Returns the output, how long
    /// it ran, and whether it ended within `bound`.
    pub fn run_in_own_group(
        &self,
        mut cmd: Command,
        name: &str,
        bound: Duration,
    ) -> (Output, Duration, bool) {
        use std::os::unix::process::CommandExt;
        let (out, err) = (
            self.path(&format!("{name}.out")),
            self.path(&format!("{name}.err")),
        );
        let start = Instant::now();
        let mut child = cmd
            .stdout(std::fs::File::create(&out).expect("create the stdout file"))
            .stderr(std::fs::File::create(&err).expect("create the stderr file"))
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{name} starts: {e}"));
        let mut status = None;
        let ended = wait_until(bound, || {
            status = child.try_wait().expect("poll the child");
            status.is_some()
        });
        let took = start.elapsed();
        let group = format!("-{}", child.id());
        let signal = |sig: &str| {
            Command::new("kill")
                .args([sig, "--", &group])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        // TERM first: a ledger drains and exits 0 on it, as a newcomer's Ctrl-C would end it.
        signal("-TERM");
        if !wait_until(Duration::from_secs(5), || !signal("-0")) {
            signal("-KILL");
        }
        let _ = child.wait();
        let read = |p| std::fs::read_to_string(p).unwrap_or_default();
        let output = Output {
            code: status.and_then(|s| s.code()).unwrap_or(-1),
            stdout: read(&out),
            stderr: read(&err),
        };
        (output, took, ended)
    }

    pub fn run(&self, args: &[&str]) -> Output {
        Output::from(self.cmd(args).output().expect("run metabob-mcp"))
    }

    /// `finding record --json` of a task on `a.py` for `origin`: what it answered.
    pub fn record_task(&self, origin: &str, summary: &str, severity: &str) -> serde_json::Value {
        self.record_task_with(origin, "a.py", summary, severity, "")
    }

    /// [`TestEnv::record_task`] on `file`, with `details` (a `ref:` line, a policy line; none
    /// when empty).
    pub fn record_task_with(
        &self,
        origin: &str,
        file: &str,
        summary: &str,
        severity: &str,
        details: &str,
    ) -> serde_json::Value {
        self.record_finding(origin, file, summary, severity, "task", details)
    }

    /// `finding record --json` of a finding of `category` on `file` for `origin`, with
    /// `details` (none when empty): what it answered.
    pub fn record_finding(
        &self,
        origin: &str,
        file: &str,
        summary: &str,
        severity: &str,
        category: &str,
        details: &str,
    ) -> serde_json::Value {
        let mut args = vec![
            "finding",
            "record",
            "--origin",
            origin,
            "--file",
            file,
            "--summary",
            summary,
            "--severity",
            severity,
            "--category",
            category,
            "--json",
        ];
        if !details.is_empty() {
            args.extend(["--details", details]);
        }
        let out = self.run(&args);
        assert_eq!(out.code, 0, "{out:?}");
        serde_json::from_str(&out.stdout).expect("finding record --json")
    }

    /// `task pull` of `origin` into `<cell>/task` and `<cell>/work` under the test root.
    /// The board's entries in `group` (`open`, `closed`, `parked`, …) over every repository.
    pub fn board_group(&self, group: &str) -> Vec<serde_json::Value> {
        let out = self.run(&["task", "list", "--json"]);
        assert_eq!(out.code, 0, "{out:?}");
        let board: serde_json::Value =
            serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
        board["repositories"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r[group].as_array().cloned().unwrap_or_default())
            .collect()
    }

    pub fn task_pull(&self, origin: &str, cell: &str, extra: &[&str]) -> Output {
        let t = self.path(&format!("{cell}/task")).display().to_string();
        let w = self.path(&format!("{cell}/work")).display().to_string();
        let mut args = vec![
            "task",
            "pull",
            "--origin",
            origin,
            "--task-dir",
            &t,
            "--work-dir",
            &w,
        ];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    /// A cell's end of the task `task_pull` took into `cell`: changes `a.py` in the clone,
    /// commits with the task's `Fixes-Finding:` trailer, pushes to main and runs `finding close
    /// --json`, which must close it.
    pub fn fix_push_close(&self, cell: &str) -> Output {
        let task_dir = self.path(&format!("{cell}/task"));
        let work = self.path(&format!("{cell}/work"));
        let task: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(task_dir.join("task.json")).unwrap())
                .unwrap();
        let id = task["task_id"].as_str().expect("task.json names the task");
        std::fs::write(work.join("a.py"), "def a():\n    return 2\n").unwrap();
        let message = format!("a returns 2\n\nFixes-Finding: {id}");
        self.git(&work, &["commit", "-q", "-am", &message]);
        let commits = task_dir.join("commits");
        std::fs::write(
            &commits,
            self.git(&work, &["rev-list", "origin/main..HEAD"]),
        )
        .unwrap();
        self.git(&work, &["push", "-q", "origin", "HEAD:main"]);
        let shown = |p: &Path| p.display().to_string();
        let out = self.run(&[
            "finding",
            "close",
            "--commits-from",
            &shown(&commits),
            "--task",
            &shown(&task_dir.join("task.json")),
            "--work-dir",
            &shown(&work),
            "--json",
        ]);
        assert_eq!(out.code, 0, "{}", layout(&out));
        assert!(out.stdout.contains("\"closed\""), "{}", layout(&out));
        out
    }

    /// Starts `ledger serve` on an ephemeral loopback port: with its data under the test root,
    /// or, under `METABOB_TEST_STORE=postgres`, on a database of the test cluster (a new one for
    /// each name).
    pub fn ledger(&self, name: &str, extra: &[&str]) -> Ledger {
        if on_postgres() {
            let url = self
                .databases
                .lock()
                .unwrap()
                .entry(name.to_string())
                .or_insert_with(pg::fresh_database)
                .clone();
            return self.ledger_on(name, &url, extra);
        }
        let data = self.root.path().join(format!("ledger-{name}"));
        Ledger::start(self, data, None, extra)
    }

    /// Starts `ledger serve` as `ledger` does, run under `wrap` (a program and its arguments
    /// ending in `exec "$@"`, given the binary and its arguments).
    pub fn ledger_wrapped(&self, name: &str, wrap: &[&str], extra: &[&str]) -> Ledger {
        let data = self.root.path().join(format!("ledger-{name}"));
        let store = on_postgres().then(|| {
            self.databases
                .lock()
                .unwrap()
                .entry(name.to_string())
                .or_insert_with(pg::fresh_database)
                .clone()
        });
        Ledger::start_wrapped(self, data, store, wrap, extra)
    }

    /// Starts `ledger serve` on SQLite in `data`, wherever that is (a small disk, say), whatever
    /// store the run puts the other ledgers on.
    pub fn ledger_in(&self, data: PathBuf, extra: &[&str]) -> Ledger {
        Ledger::start(self, data, None, extra)
    }

    /// Starts `ledger serve` on the store at `store_url` (`postgres://...`), e.g. a second
    /// process over one database. `data` names a dir that stays empty.
    pub fn ledger_on(&self, name: &str, store_url: &str, extra: &[&str]) -> Ledger {
        let data = self.root.path().join(format!("ledger-{name}"));
        Ledger::start(self, data, Some(store_url.to_string()), extra)
    }
}

/// Whether this test run puts the ledger on PostgreSQL (`METABOB_TEST_STORE=postgres`) instead
/// of SQLite.
pub fn on_postgres() -> bool {
    match std::env::var("METABOB_TEST_STORE").as_deref() {
        Ok("postgres") => true,
        Ok("" | "sqlite") | Err(_) => false,
        Ok(other) => panic!("METABOB_TEST_STORE={other}: expected postgres or sqlite"),
    }
}

pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<std::process::Output> for Output {
    fn from(o: std::process::Output) -> Self {
        Output {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&layout(self))
    }
}

/// A loopback port nothing listens on (bound, then released).
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// How many processes on the machine have exactly `line` as their command line.
pub fn running(line: &str) -> usize {
    let out = Command::new("ps")
        .args(["-eo", "args="])
        .output()
        .expect("ps lists processes");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim() == line)
        .count()
}

pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A child process killed and reaped when the test ends, pass or fail.
pub struct Reaped(pub Child);

impl Reaped {
    /// Spawns a stand-in server whose first line on stdout is `listening on PORT` (the helpers
    /// under tests/support/ print it once they accept): the port, and the child reaped at the
    /// end. `what` names it in a failure.
    pub fn listening(mut cmd: Command, what: &str) -> (u16, Reaped) {
        use std::io::{BufRead, BufReader};
        let mut child = cmd
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what} does not start: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let reaped = Reaped(child);
        let mut first = String::new();
        BufReader::new(stdout)
            .read_line(&mut first)
            .unwrap_or_else(|e| panic!("{what}'s first line: {e}"));
        let port = first
            .trim()
            .strip_prefix("listening on ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{what} did not start: {first:?}"));
        (port, reaped)
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

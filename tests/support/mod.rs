//! The hermetic test environment: its own HOME, TMPDIR and git config, no inherited
//! substrate or proxy variables, and helpers to run the real binary and a real ledger.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub mod mcp;
mod normalize;
pub mod pg;
pub mod soak;
pub use normalize::{layout, normalize, seen, snapshot, verbatim};

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
    let mut c = Command::new(bin());
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
            "task",
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

/// A running `ledger serve` process; killed on drop.
pub struct Ledger {
    pub child: Child,
    pub url: String,
    /// The SQLite data dir; on PostgreSQL a dir nothing writes (see `store`).
    pub data: PathBuf,
    /// The PostgreSQL URL the ledger runs on; `None` on SQLite in `data`.
    pub store: Option<String>,
    args: Vec<String>,
    vars: Vec<(String, String)>,
    cwd: PathBuf,
}

impl Ledger {
    fn start(env: &TestEnv, data: PathBuf, store: Option<String>, extra: &[&str]) -> Ledger {
        let args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let flags = store_args(&data, store.as_deref());
        let (child, url) = spawn_ledger(&env.vars, &env.cwd(), &flags, "127.0.0.1:0", &args);
        Ledger {
            child,
            url,
            data,
            store,
            args,
            vars: env.vars.clone(),
            cwd: env.cwd(),
        }
    }

    /// The flag naming this ledger's store for `ledger serve` and `ledger key`: `--store URL`
    /// on PostgreSQL, `--data DIR` on SQLite.
    pub fn store_args(&self) -> [String; 2] {
        store_args(&self.data, self.store.as_deref())
    }

    /// `ledger key <args> <store_args>` on this ledger's store: the offline admin command.
    pub fn key(&self, env: &TestEnv, args: &[&str]) -> Output {
        let store = self.store_args();
        let mut all = vec!["ledger", "key"];
        all.extend_from_slice(args);
        all.extend(store.iter().map(String::as_str));
        env.run(&all)
    }

    /// Another `ledger serve` process on this ledger's database, on a new port, with the same
    /// arguments: a stateless replica. PostgreSQL only.
    pub fn replica(&self, env: &TestEnv) -> Ledger {
        let Some(store) = &self.store else {
            panic!("Ledger::replica needs a PostgreSQL store (METABOB_TEST_STORE=postgres)");
        };
        let extra: Vec<&str> = self.args.iter().map(String::as_str).collect();
        Ledger::start(env, self.data.clone(), Some(store.clone()), &extra)
    }

    pub fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("ledger url has a port")
    }

    /// `kill -9`, then a fresh process on the same store and port.
    pub fn kill_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.restart();
    }

    /// SIGTERM, as `docker stop` sends: the exit code once the process ends (bounded; past
    /// the bound it is killed and the test fails).
    pub fn terminate(&mut self) -> Option<i32> {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid}");
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Some(status) = self.child.try_wait().expect("wait for the ledger") {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!("the ledger did not stop within 30 s of SIGTERM");
    }

    /// A fresh process on the same store and port, once the last one has ended.
    pub fn restart(&mut self) {
        let listen = format!("127.0.0.1:{}", self.port());
        let flags = self.store_args();
        let (child, url) = spawn_ledger(&self.vars, &self.cwd, &flags, &listen, &self.args);
        self.child = child;
        self.url = url;
    }

    /// One `POST /resolve` of `pointer` with `key`: the status and the JSON body (`Null` when
    /// the body is not JSON).
    pub fn resolve(&self, key: &str, pointer: serde_json::Value) -> (u16, serde_json::Value) {
        let body = serde_json::json!({ "pointer": pointer }).to_string();
        let (status, body) = self.http("POST", "/resolve", Some(key), &body);
        (status, serde_json::from_str(&body).unwrap_or_default())
    }

    /// One request with `Connection: close`, so reading to the end reads the whole answer: the
    /// status and the body.
    pub fn http(&self, method: &str, path: &str, key: Option<&str>, body: &str) -> (u16, String) {
        let (status, _, body) = self.http_with_headers(method, path, key, body);
        (status, body)
    }

    /// As [`Ledger::http`], with the answer's headers too (names lower-cased).
    pub fn http_with_headers(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: &str,
    ) -> (u16, Vec<(String, String)>, String) {
        use std::io::{Read, Write};
        let host = self.url.trim_start_matches("http://");
        let auth = key.map_or(String::new(), |k| format!("Authorization: ApiKey {k}\r\n"));
        let mut s = std::net::TcpStream::connect(host).expect("connect to the ledger");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
             Content-Type: application/json\r\n{auth}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).expect("the ledger answers");
        let (head, body) = raw.split_once("\r\n\r\n").expect("a head and a body");
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok());
        let headers = head
            .lines()
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        (status.expect("a status line"), headers, body.to_string())
    }

    /// Creates a key with the offline admin command; returns (key_id, key).
    pub fn create_key(&self, env: &TestEnv, org: &str, scopes: &str) -> (String, String) {
        let out = self.key(env, &["create", "--org", org, "--scopes", scopes, "--json"]);
        assert_eq!(out.code, 0, "{out:?}");
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("key create --json");
        (
            v["key_id"].as_str().unwrap().to_string(),
            v["key"].as_str().unwrap().to_string(),
        )
    }
}

fn store_args(data: &Path, store: Option<&str>) -> [String; 2] {
    match store {
        Some(url) => ["--store".into(), url.to_string()],
        None => ["--data".into(), data.display().to_string()],
    }
}

fn spawn_ledger(
    vars: &[(String, String)],
    cwd: &Path,
    store: &[String],
    listen: &str,
    extra: &[String],
) -> (Child, String) {
    let mut child = hermetic(vars, cwd)
        .args(["ledger", "serve"])
        .args(store)
        .args(["--listen", listen])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn ledger");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = tx.send(line);
        }
        // Keep draining so the ledger never blocks on a full pipe.
        for _ in lines {}
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("ledger printed its address");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in ledger's first line: {line}"))
        .to_string();
    (child, url)
}

impl Drop for Ledger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on (bound, then released).
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
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

/// A one-shot HTTP server on loopback answering every request with `status`, `content_type`
/// and `body` (a portal, a block page, a wrong service). Returns its URL.
pub fn static_http_server(status: u16, content_type: &'static str, body: &'static str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 8192];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

/// A child process killed and reaped when the test ends, pass or fail.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The fixture producer (tests/support/producer.py): the stand-in for the substrate's external
/// producers, answering each shape from the JSON file at `fixtures`, which a test may rewrite
/// while it runs. Returns its URL once it accepts.
pub struct Producer {
    pub url: String,
    _child: Reaped,
}

impl Producer {
    pub fn start(fixtures: &Path) -> Producer {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/producer.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(fixtures)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs the fixture producer");
        let stdout = child.stdout.take().expect("piped stdout");
        let child = Reaped(child);
        let mut first = String::new();
        BufReader::new(stdout)
            .read_line(&mut first)
            .expect("the producer prints its port");
        let port = first
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("producer said {first:?}"));
        Producer {
            url: format!("http://127.0.0.1:{port}"),
            _child: child,
        }
    }

    /// How many pointers of each shape it received.
    pub fn counts(&self) -> serde_json::Value {
        self.get("/count")
    }

    /// The last pointer it received.
    pub fn last(&self) -> serde_json::Value {
        self.get("/last")["pointer"].clone()
    }

    fn get(&self, path: &str) -> serde_json::Value {
        use std::io::{Read, Write};
        let addr = self.url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).expect("connect to the producer");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).expect("the producer answers");
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        serde_json::from_str(body).expect("the producer answers JSON")
    }
}

/// The real tinyproxy (installed by .ci/run) on a loopback port, demanding Basic credentials
/// `user:pass`; returns once it accepts connections.
pub fn tinyproxy(dir: &Path) -> (u16, Reaped) {
    let port = closed_port();
    let mut conf = format!(
        "Port {port}\nListen 127.0.0.1\nTimeout 10\nMaxClients 4\nLogLevel Error\nBasicAuth user pass\n"
    );
    // tinyproxy refuses to keep root privileges.
    if Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
    {
        conf.push_str("User nobody\nGroup nogroup\n");
    }
    let conf_path = dir.join("tinyproxy.conf");
    std::fs::write(&conf_path, conf).expect("write tinyproxy.conf");
    let child = Command::new("tinyproxy")
        .arg("-d")
        .arg("-c")
        .arg(&conf_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tinyproxy is installed (.ci/run installs it)");
    let guard = Reaped(child);
    let up = wait_until(Duration::from_secs(5), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up, "tinyproxy did not start listening");
    (port, guard)
}

impl TestEnv {
    /// The git CLI in this environment (hermetic HOME and config); panics with git's stderr on
    /// failure, returns trimmed stdout.
    pub fn git(&self, dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .env_clear()
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .current_dir(dir)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("the git CLI is installed");
        assert!(
            out.status.success(),
            "git {args:?} in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A bare repository `<name>.git` whose `main` holds `files` (path, content), committed by
    /// the CLI; returns (bare path, file:// URL).
    pub fn origin(&self, name: &str, files: &[(&str, &str)]) -> (PathBuf, String) {
        let seed = self.path(&format!("seed-{name}"));
        std::fs::create_dir_all(&seed).expect("seed dir");
        self.git(&seed, &["init", "-q", "-b", "main"]);
        for (p, c) in files {
            let f = seed.join(p);
            std::fs::create_dir_all(f.parent().expect("a file has a parent")).expect("dirs");
            std::fs::write(f, c).expect("write seed file");
        }
        self.git(&seed, &["add", "-A"]);
        self.git(&seed, &["commit", "-q", "-m", "initial"]);
        let bare = self.path(&format!("origins/{name}.git"));
        std::fs::create_dir_all(bare.parent().expect("parent")).expect("origins dir");
        self.git(
            self.root.path(),
            &[
                "clone",
                "-q",
                "--bare",
                &seed.display().to_string(),
                &bare.display().to_string(),
            ],
        );
        let url = format!("file://{}", bare.display());
        (bare, url)
    }
}

/// `git daemon` serving every repository under `base` on a loopback port; the URL prefix is
/// `git://127.0.0.1:<port>/`.
pub fn git_daemon(env: &TestEnv, base: &Path) -> (String, Reaped) {
    let port = closed_port();
    (
        format!("git://127.0.0.1:{port}/"),
        git_daemon_on(env, base, port),
    )
}

/// `git daemon` on `port`: a test that stops one brings it back at the same URL.
pub fn git_daemon_on(env: &TestEnv, base: &Path, port: u16) -> Reaped {
    // `git daemon` runs `git-daemon` as a child of its own, which a kill of `git` would leave
    // serving: run the daemon itself, so that stopping it stops the server.
    let exec_path = Command::new("git")
        .arg("--exec-path")
        .output()
        .expect("git --exec-path");
    let daemon = Path::new(String::from_utf8_lossy(&exec_path.stdout).trim()).join("git-daemon");
    let child = Command::new(daemon)
        .env_clear()
        .envs(env.vars.iter().map(|(k, v)| (k, v)))
        .args([
            "--reuseaddr",
            "--export-all",
            "--enable=receive-pack",
            "--listen=127.0.0.1",
            &format!("--port={port}"),
            &format!("--base-path={}", base.display()),
            &base.display().to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("git daemon");
    let guard = Reaped(child);
    assert!(
        wait_until(Duration::from_secs(10), || std::net::TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_ok()),
        "git daemon did not start"
    );
    guard
}

// ---- TLS fixtures: a CA the client does not know, and leaves it signed ----

pub const CA_CN: &str = "Metabob Test Inspection CA";

pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().expect("temp dir");
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut args = vec!["req", "-x509"];
        args.extend(ec);
        let subj = format!("/O=Metabob Tests/CN={CA_CN}");
        args.extend([
            "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", &subj,
        ]);
        openssl(dir.path(), &args);
        let pki = Pki { dir };
        pki.leaf("good", "DNS:ledger.example,IP:127.0.0.1");
        pki.leaf("other", "DNS:other.example");
        pki
    }

    pub fn leaf(&self, name: &str, san: &str) {
        let d = self.dir.path();
        let ext = format!(
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName={san}\n"
        );
        std::fs::write(d.join(format!("{name}.ext")), ext).expect("write extensions");
        let (key, csr, pem, extf) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        let subj = format!("/CN={name}");
        openssl(
            d,
            &[
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &subj,
            ],
        );
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                &extf,
            ],
        );
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    pub fn ca(&self) -> String {
        self.path("ca.pem").display().to_string()
    }
}

/// `openssl s_server -www` on a loopback port with the named leaf; returns once it accepts.
pub fn s_server(pki: &Pki, leaf: &str) -> (u16, Reaped) {
    let port = closed_port();
    let accept = format!("127.0.0.1:{port}");
    let cert = pki.path(&format!("{leaf}.pem"));
    let key = pki.path(&format!("{leaf}.key"));
    let mut child = Command::new("openssl")
        .args(["s_server", "-accept", &accept, "-www", "-cert"])
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_server starts");
    let stdout = child.stdout.take().expect("stdout is piped");
    let guard = Reaped(child);
    let mut lines = BufReader::new(stdout).lines();
    let ready = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("ACCEPT"));
    assert!(ready, "s_server never reported ACCEPT");
    // Keep draining so s_server never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (port, guard)
}

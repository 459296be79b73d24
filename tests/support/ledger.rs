//! A real `ledger serve` under a test: started on SQLite or PostgreSQL, restarted, stopped, its
//! offline key commands, and one HTTP request at a time.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Output, TestEnv, hermetic};

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
    /// A program and arguments the binary runs under (`sh -c 'ulimit …; exec "$@"'`).
    wrap: Vec<String>,
}

impl Ledger {
    pub(super) fn start(
        env: &TestEnv,
        data: PathBuf,
        store: Option<String>,
        extra: &[&str],
    ) -> Ledger {
        Ledger::start_wrapped(env, data, store, &[], extra)
    }

    /// As `start`, the binary run by `wrap` (a program and its arguments, which `exec "$@"`).
    pub(super) fn start_wrapped(
        env: &TestEnv,
        data: PathBuf,
        store: Option<String>,
        wrap: &[&str],
        extra: &[&str],
    ) -> Ledger {
        let args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let wrap: Vec<String> = wrap.iter().map(|s| s.to_string()).collect();
        let flags = store_args(&data, store.as_deref());
        let (child, url) = spawn_ledger(&env.vars, &env.cwd(), &wrap, &flags, "127.0.0.1:0", &args);
        Ledger {
            child,
            url,
            data,
            store,
            args,
            vars: env.vars.clone(),
            cwd: env.cwd(),
            wrap,
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
        self.restart_on(&format!("127.0.0.1:{}", self.port()));
    }

    /// A fresh process on the same store listening on `listen`, once the last one has ended;
    /// `url` is then the address it printed.
    pub fn restart_on(&mut self, listen: &str) {
        let flags = self.store_args();
        let (child, url) = spawn_ledger(
            &self.vars, &self.cwd, &self.wrap, &flags, listen, &self.args,
        );
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
    wrap: &[String],
    store: &[String],
    listen: &str,
    extra: &[String],
) -> (Child, String) {
    let mut command = match wrap.split_first() {
        Some((program, args)) => {
            let mut c = super::hermetic_program(program.as_ref(), vars, cwd);
            c.args(args).arg(super::bin());
            c
        }
        None => hermetic(vars, cwd),
    };
    let mut child = command
        .args(["ledger", "serve"])
        .args(store)
        .args(["--listen", listen])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn ledger");
    let line = first_line(&mut child);
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://") || w.starts_with("https://"))
        .unwrap_or_else(|| panic!("no URL in ledger's first line: {line}"))
        .to_string();
    (child, url)
}

/// The first line a `ledger serve` started with piped stdout prints (its address), within 30 s;
/// the rest of its stdout is drained so it never blocks on a full pipe.
pub fn first_line(child: &mut Child) -> String {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = tx.send(line);
        }
        for _ in lines {}
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the ledger printed its address")
}

impl Drop for Ledger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

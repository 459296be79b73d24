//! Clone and fetch over https with the process's trust and proxies: `task pull` and
//! `finding close` against the real `git http-backend` behind a TLS server whose leaf a
//! private CA signed (tests/support/git_https.py), with the git CLI as the oracle.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::support::{CA_CN, Output, Pki, Reaped, TestEnv, git_http_host, snapshot};

/// One cell's world: a ledger, the bare `app.git` served over https, the task recorded.
struct World {
    env: TestEnv,
    _ledger: crate::support::Ledger,
    bare: PathBuf,
    pki: Pki,
}

fn world(env: TestEnv) -> World {
    let ledger = env.ledger("main", &[]);
    let (bare, _) = env.origin(
        "app",
        &[
            ("a.py", "def a():\n    return 1\n"),
            ("b.py", "def b():\n    return 2\n"),
        ],
    );
    World {
        env,
        _ledger: ledger,
        bare,
        pki: Pki::new(),
    }
}

impl World {
    fn serve(&self, leaf: &str, login: Option<&str>) -> (u16, Reaped) {
        let tls = (
            self.pki.path(&format!("{leaf}.pem")),
            self.pki.path(&format!("{leaf}.key")),
        );
        git_http_host(self.bare.parent().unwrap(), Some(tls), login, "127.0.0.1")
    }

    fn record_task(&self, origin: &str) -> String {
        let v = self.env.record_task(origin, "make a() return 2", "HIGH");
        v["finding_ids"][0].as_str().unwrap().to_string()
    }

    fn dirs(&self, cell: &str) -> (PathBuf, PathBuf) {
        (
            self.env.path(&format!("{cell}/task")),
            self.env.path(&format!("{cell}/work")),
        )
    }

    fn pull(&self, cell: &str, origin: &str) -> Output {
        self.env.task_pull(origin, cell, &["--json"])
    }

    /// The pull succeeded and checked out what the bare repository's `main` holds.
    fn assert_pulled(&self, cell: &str, out: &Output) -> Value {
        assert_eq!(out.code, 0, "{out:?}");
        let report: Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(report["status"], "pulled", "{report}");
        let (task_dir, work) = self.dirs(cell);
        let oracle = self.env.git(&self.bare, &["rev-parse", "main"]);
        let task: Value =
            serde_json::from_str(&std::fs::read_to_string(task_dir.join("task.json")).unwrap())
                .unwrap();
        assert_eq!(task["base"], oracle.as_str());
        assert_eq!(self.env.git(&work, &["rev-parse", "HEAD"]), oracle);
        assert_eq!(self.env.git(&work, &["status", "--porcelain"]), "");
        assert_eq!(
            self.env.git(&work, &["rev-parse", "origin/HEAD"]),
            oracle,
            "origin/HEAD is written as git clone writes it"
        );
        assert!(task_dir.join("context.md").is_file());
        task
    }
}

fn is_empty_or_missing(dir: &Path) -> bool {
    std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_none())
}

#[test]
fn task_pull_clones_over_https_with_the_private_ca_and_finding_close_fetches() {
    let mut w = world(TestEnv::new());
    let ca = w.pki.ca();
    w.env
        .set("NODE_EXTRA_CA_CERTS", ca)
        .set("METABOB_NO_SYSTEM_CA", "1");
    let (port, _server) = w.serve("good", None);
    let origin = format!("https://127.0.0.1:{port}/app.git");
    let id = w.record_task(&origin);

    let out = w.pull("c1", &origin);
    let task = w.assert_pulled("c1", &out);
    assert_eq!(task["origin"], origin.as_str());

    // The fix lands on the origin's main by another way; `finding close` must fetch it over
    // https (from inside its async runtime) to see it merged.
    let (task_dir, work) = w.dirs("c1");
    std::fs::write(work.join("a.py"), "def a():\n    return 2\n").unwrap();
    w.env.git(
        &work,
        &[
            "commit",
            "-q",
            "-am",
            &format!("a returns 2\n\nFixes-Finding: {id}"),
        ],
    );
    let bare = w.bare.display().to_string();
    w.env.git(&work, &["push", "-q", &bare, "HEAD:main"]);
    let w_s = work.display().to_string();
    let t = task_dir.join("task.json").display().to_string();
    let out = w.env.run(&[
        "finding",
        "close",
        "--work-dir",
        &w_s,
        "--commits",
        "HEAD~1..HEAD",
        "--task",
        &t,
        "--json",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["findings"][0]["outcome"], "closed", "{report}");
    assert_eq!(
        w.env.git(&work, &["rev-parse", "origin/main"]),
        w.env.git(&w.bare, &["rev-parse", "main"]),
        "the fetch brought origin/main up to the remote's main"
    );
}

#[test]
fn without_the_ca_the_clone_is_refused_by_name_and_writes_nothing() {
    let mut w = world(TestEnv::new());
    let (port, _server) = w.serve("good", None);
    let origin = format!("https://127.0.0.1:{port}/app.git");
    w.record_task(&origin);

    // METABOB_NO_SYSTEM_CA=1 and no NODE_EXTRA_CA_CERTS: only the bundled public roots.
    let out = w.pull("c1", &origin);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains(&format!("tls_intercepted({CA_CN})")),
        "{out:?}"
    );
    insta::assert_snapshot!("task_pull_https_untrusted", snapshot(&out, &w.env));
    let (task_dir, work) = w.dirs("c1");
    assert!(is_empty_or_missing(&task_dir), "task dir written");
    assert!(is_empty_or_missing(&work), "work dir written");

    // The claim was withdrawn: with the CA named, the next pull takes the same task.
    let ca = w.pki.ca();
    w.env.set("NODE_EXTRA_CA_CERTS", ca);
    let out = w.pull("c2", &origin);
    w.assert_pulled("c2", &out);
}

#[test]
fn credentials_in_the_url_reach_the_server_and_are_shown_nowhere() {
    const PASSWORD: &str = "s3cret-Pw9";
    let mut env = TestEnv::new();
    // gix asks credential helpers after a 401; never a terminal here.
    env.set("GIT_TERMINAL_PROMPT", "0");
    let mut w = world(env);
    let ca = w.pki.ca();
    w.env.set("NODE_EXTRA_CA_CERTS", ca);
    let (port, _server) = w.serve("good", Some(&format!("cell:{PASSWORD}")));
    let plain = format!("https://127.0.0.1:{port}/app.git");
    let origin = format!("https://cell:{PASSWORD}@127.0.0.1:{port}/app.git");
    w.record_task(&plain);

    // Without them the server's 401 ends the clone, and the task stays free.
    let out = w.pull("c0", &plain);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("the server wants a login (HTTP 401)"),
        "{out:?}"
    );

    // A wrong password is refused by name, and shown nowhere either.
    let wrong = format!("https://cell:Wr0ng-pw7@127.0.0.1:{port}/app.git");
    let out = w.pull("c0", &wrong);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr
            .contains("the server refused the login in the URL (HTTP 401)"),
        "{out:?}"
    );
    assert!(!out.stderr.contains("Wr0ng-pw7"), "{out:?}");

    let out = w.pull("c1", &origin);
    let task = w.assert_pulled("c1", &out);
    assert_eq!(
        task["origin"],
        format!("https://cell:***@127.0.0.1:{port}/app.git")
    );
    let (task_dir, _) = w.dirs("c1");
    for (what, text) in [
        ("stdout", out.stdout.clone()),
        ("stderr", out.stderr.clone()),
        (
            "task.json",
            std::fs::read_to_string(task_dir.join("task.json")).unwrap(),
        ),
        (
            "context.md",
            std::fs::read_to_string(task_dir.join("context.md")).unwrap(),
        ),
    ] {
        assert!(
            !text.contains(PASSWORD),
            "the password is in {what}: {text}"
        );
    }
}

/// The credential helper the cell image installs (images/cell/Dockerfile), reading `file`
/// instead of the mounted secret: taken from the Dockerfile, so this test runs what ships.
fn cell_image_credential_helper(file: &Path) -> String {
    let dockerfile = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/images/cell/Dockerfile"
    ))
    .unwrap();
    let after = dockerfile
        .split_once("credential.helper")
        .expect("the Dockerfile configures a credential helper")
        .1;
    let helper = after
        .split('\'')
        .nth(1)
        .expect("the helper is single-quoted");
    assert!(helper.contains("/run/secrets/git-credentials"), "{helper}");
    helper.replace("/run/secrets/git-credentials", &file.display().to_string())
}

#[test]
fn the_cell_images_credential_helper_logs_the_clone_and_the_push_in_and_stores_nothing() {
    const PASSWORD: &str = "h3lper-Pw5";
    let mut env = TestEnv::new();
    env.set("GIT_TERMINAL_PROMPT", "0");
    let mut w = world(env);
    let ca = w.pki.ca();
    // gix sends no login over plain http, so the origin is https; the push trusts the CA too.
    w.env
        .set("NODE_EXTRA_CA_CERTS", ca.clone())
        .set("GIT_SSL_CAINFO", ca);
    let store = w.env.path("git-credentials");
    let (port, _server) = w.serve("good", Some(&format!("cell:{PASSWORD}")));
    std::fs::write(
        &store,
        format!("https://cell:{PASSWORD}@127.0.0.1:{port}\n"),
    )
    .unwrap();
    let before = std::fs::read_to_string(&store).unwrap();
    // As the image's system config names it: here through git's environment, which both gix
    // and the git CLI read.
    w.env
        .set("GIT_CONFIG_COUNT", "1")
        .set("GIT_CONFIG_KEY_0", "credential.helper")
        .set("GIT_CONFIG_VALUE_0", cell_image_credential_helper(&store));
    let origin = format!("https://127.0.0.1:{port}/app.git");
    w.record_task(&origin);

    let out = w.pull("c1", &origin);
    w.assert_pulled("c1", &out);
    assert!(!out.stderr.contains(PASSWORD), "{out:?}");
    let (_, work) = w.dirs("c1");
    std::fs::write(work.join("a.py"), "def a():\n    return 2\n").unwrap();
    w.env.git(&work, &["commit", "-qam", "fix a"]);
    w.env.git(&work, &["push", "-q", "origin", "HEAD:main"]);
    assert_eq!(
        w.env.git(&w.bare, &["rev-parse", "main"]),
        w.env.git(&work, &["rev-parse", "HEAD"])
    );
    assert_eq!(
        std::fs::read_to_string(&store).unwrap(),
        before,
        "nothing stored back"
    );

    // With no file there, the helper answers nothing and the server's 401 is named.
    std::fs::remove_file(&store).unwrap();
    w.env.record_task(&origin, "make b() return 3", "HIGH");
    let out = w.pull("c2", &origin);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("the server wants a login (HTTP 401)"),
        "{out:?}"
    );
}

#[test]
fn a_moved_repository_is_followed_on_the_first_request_as_git_does() {
    let mut w = world(TestEnv::new());
    let ca = w.pki.ca();
    w.env.set("NODE_EXTRA_CA_CERTS", ca);
    let (port, _server) = w.serve("good", None);
    let origin = format!("https://127.0.0.1:{port}/moved/app.git");
    w.record_task(&origin);
    let out = w.pull("c1", &origin);
    w.assert_pulled("c1", &out);
    let log = std::fs::read_to_string(w.bare.parent().unwrap().with_extension("log")).unwrap();
    // Only the first request met the redirect; the rest went to where it led.
    assert_eq!(log.matches("/moved/").count(), 1, "{log}");
    assert!(log.contains("POST /app.git/git-upload-pack"), "{log}");
}

/// A proxy that tunnels every CONNECT to `target` on loopback and records the request lines.
fn tunnel_proxy(target: u16) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { continue };
            let log = log.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if client.read(&mut byte).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string();
                log.lock().unwrap().push(line);
                let Ok(upstream) = TcpStream::connect(("127.0.0.1", target)) else {
                    return;
                };
                let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
                let (mut up_reader, mut client_reader) =
                    (upstream.try_clone().unwrap(), client.try_clone().unwrap());
                let mut up_writer = upstream;
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut client_reader, &mut up_writer);
                    let _ = up_writer.shutdown(std::net::Shutdown::Write);
                });
                let _ = std::io::copy(&mut up_reader, &mut client);
                let _ = client.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    (port, seen)
}

#[test]
fn the_clone_takes_the_proxy_every_request_takes() {
    let mut w = world(TestEnv::new());
    w.pki.leaf("git", "DNS:git.example");
    let (port, _server) = w.serve("git", None);
    let (proxy, seen) = tunnel_proxy(port);
    let ca = w.pki.ca();
    w.env
        .set("NODE_EXTRA_CA_CERTS", ca)
        .set("HTTPS_PROXY", format!("http://127.0.0.1:{proxy}"));
    // The name resolves nowhere: only the proxy, asked by name, can reach it.
    let origin = format!("https://git.example:{port}/app.git");
    w.record_task(&origin);
    let out = w.pull("c1", &origin);
    w.assert_pulled("c1", &out);
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    for line in seen {
        assert_eq!(line, format!("CONNECT git.example:{port} HTTP/1.1"));
    }
}

//! What the binary prints, whatever produced it: no credential from any configured URL or store
//! reaches stdout, stderr or a tool's answer (SPEC.md §Output), and a reader that leaves early
//! ends the output quietly.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{Output, TestEnv, closed_port};

/// Every password below contains this, so one search finds any of them in any output.
const SECRET: &str = "Pw9secret";

/// The environment with a password in every URL a command reads from the environment: the
/// anchor (discovery), identity, the substrate endpoint and both proxies.
fn secret_env() -> TestEnv {
    let mut env = TestEnv::new();
    let port = closed_port();
    for (var, name) in [
        ("DISCOVERY_ENDPOINT", "discovery"),
        ("IDENTITY_ENDPOINT", "identity"),
        ("METABOB_ENDPOINT", "endpoint"),
        ("HTTPS_PROXY", "httpsproxy"),
        ("HTTP_PROXY", "httpproxy"),
    ] {
        env.set(var, format!("http://u:{SECRET}{name}@127.0.0.1:{port}"));
    }
    env.set(
        "METABOB_API_KEY",
        "mb_live_00000000000000000000000000000000",
    );
    env
}

fn assert_hidden(what: &str, out: &Output) {
    assert!(
        !out.stdout.contains(SECRET) && !out.stderr.contains(SECRET),
        "{what} printed a password: {out:?}"
    );
}

#[test]
fn no_password_in_any_configured_url_reaches_any_output() {
    let env = secret_env();
    for args in [
        &["doctor"][..],
        &["attach", "--check"],
        &["attach", "--check", "--json"],
        &["tool", "call", "record_finding", "--args", "{}"],
        &["tool", "call", "get_problems"],
        &["tool", "call", "get_analysis_context"],
        &["task", "list"],
        &[
            "task",
            "pull",
            "--origin",
            "http://u:Pw9secretorigin@127.0.0.1:9/app.git",
        ],
    ] {
        let out = env.run(args);
        assert_hidden(&args.join(" "), &out);
        // The URLs were shown, masked: the test would pass vacuously if nothing printed them.
        if args[0] == "doctor" || args[0] == "attach" {
            assert!(out.stdout.contains("u:***@127.0.0.1"), "{out:?}");
        }
    }

    // The same anchor from the config file, as `doctor` reports it.
    let mut file_env = TestEnv::new();
    let dir = file_env.home().join(".substrate");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        format!(
            r#"{{"metabob": {{"apiKey": "mb_live_00000000000000000000000000000000",
                "discoveryEndpoint": "http://u:{SECRET}file@127.0.0.1:{}"}}}}"#,
            closed_port()
        ),
    )
    .unwrap();
    file_env.unset("METABOB_API_KEY");
    let out = file_env.run(&["doctor"]);
    assert_hidden("doctor with the config file", &out);
    assert!(out.stdout.contains("u:***@127.0.0.1"), "{out:?}");
}

/// `serve`'s log line about the attachment, as a long-running server writes it on stderr.
#[test]
fn serve_logs_the_attachment_without_its_password() {
    let env = secret_env();
    let mut child = env
        .cmd(&["serve", "--no-resolver"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env("RUST_LOG", "info")
        .spawn()
        .expect("start serve");
    // The attachment starts with the first tool call.
    let mut stdin = child.stdin.take().expect("stdin");
    for line in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_problems","arguments":{}}}"#,
    ] {
        writeln!(stdin, "{line}").expect("write to serve");
    }
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                let done = line.contains("not attached");
                seen.push(line);
                if done {
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    let log = seen.join("\n");
    assert!(log.contains("not attached"), "no WARN line came: {log}");
    assert!(!log.contains(SECRET), "serve logged a password: {log}");
    assert!(log.contains("u:***@127.0.0.1"), "{log}");
}

/// A PostgreSQL store's password in each of its three forms never reaches the error line.
#[test]
fn no_store_password_reaches_the_error_line_in_any_dsn_form() {
    let env = TestEnv::new();
    let port = closed_port();
    for store in [
        format!("postgres://u:{SECRET}@127.0.0.1:{port}/db"),
        format!("postgres://u@127.0.0.1:{port}/db?password={SECRET}&connect_timeout=2"),
        format!("host=127.0.0.1 port={port} user=u password={SECRET} dbname=db"),
        format!("host=127.0.0.1 password='{SECRET} two' dbname=db"),
    ] {
        for args in [
            &["ledger", "key", "list", "--store", &store][..],
            &[
                "ledger",
                "serve",
                "--store",
                &store,
                "--listen",
                "127.0.0.1:0",
            ],
        ] {
            let out = env.run(args);
            assert_ne!(out.code, 0, "{out:?}");
            assert_hidden(&args.join(" "), &out);
            assert!(out.stderr.contains("error:"), "{out:?}");
        }
    }
}

/// The write end of a real pipe whose reader has already exited, as `| head -1` leaves it.
fn pipe_with_its_reader_gone() -> Stdio {
    let mut reader = std::process::Command::new("true")
        .stdin(Stdio::piped())
        .spawn()
        .expect("run true");
    let writer = reader.stdin.take().expect("the pipe's write end");
    reader.wait().expect("the reader exits");
    Stdio::from(writer)
}

/// Runs `args` with a stdout whose reader has already left: its exit code and stderr.
fn on_a_closed_pipe(env: &TestEnv, args: &[&str]) -> (Option<i32>, String) {
    let out = env
        .cmd(args)
        .stdout(pipe_with_its_reader_gone())
        .stderr(Stdio::piped())
        .output()
        .expect("run metabob-mcp");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `args` twice: once read to its end, once with a stdout whose reader has already left.
/// The second must end as the first did, with no panic and no internal error.
fn quiet_on_a_closed_pipe(env: &TestEnv, args: &[&str]) {
    let read = env.run(args);
    let (code, stderr) = on_a_closed_pipe(env, args);
    let what = args.join(" ");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("internal error"),
        "{what} with its reader gone: {stderr}"
    );
    assert_eq!(
        code,
        Some(read.code),
        "{what}: the exit code changed with its reader gone: {stderr}"
    );
    assert!(!read.stdout.is_empty(), "{what} printed nothing: {read:?}");
}

#[test]
fn every_command_that_prints_ends_quietly_when_its_reader_leaves() {
    let env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let (_, origin) = env.origin("app", &[("a.py", "def a():\n    return 1\n")]);
    env.record_task(&origin, "make a() return 2", "HIGH");
    let store = env.path("ledger-main").display().to_string();
    for args in [
        &["tool", "list"][..],
        &["tool", "call", "get_metrics"],
        &["doctor"],
        &["attach", "--check"],
        &["attach", "--check", "--json"],
        &["task", "list"],
        &["task", "list", "--json"],
        &["ledger", "key", "list", "--data", &store],
        &["--help"],
    ] {
        quiet_on_a_closed_pipe(&env, args);
    }
    // These change the ledger, so each runs once, on a closed pipe: each must still do its work
    // and end as it would have.
    let t = env.path("c1/task").display().to_string();
    let w = env.path("c1/work").display().to_string();
    for (args, code) in [
        (
            &[
                "finding",
                "record",
                "--origin",
                &origin,
                "--file",
                "a.py",
                "--summary",
                "b() is unused",
                "--severity",
                "LOW",
                "--category",
                "smell",
            ][..],
            0,
        ),
        (
            &[
                "task",
                "pull",
                "--origin",
                &origin,
                "--task-dir",
                &t,
                "--work-dir",
                &w,
            ],
            0,
        ),
        (&["task", "renew", "--task-dir", &t], 0),
        (&["task", "release", "--task-dir", &t], 0),
    ] {
        let (got, stderr) = on_a_closed_pipe(&env, args);
        assert_eq!(got, Some(code), "{}: {stderr}", args.join(" "));
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    assert!(
        env.path("c1/task/task.json").is_file(),
        "the pull did its work"
    );
    let board: serde_json::Value =
        serde_json::from_str(&env.run(&["task", "list", "--json"]).stdout).expect("task list");
    let open = board["repositories"][0]["open"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(open, 1, "the release did its work: {board}");

    // A ledger whose stdout is gone (its address line has no reader) still serves.
    let port = closed_port();
    let mut ledger = env
        .cmd(&[
            "ledger",
            "serve",
            "--data",
            &env.path("ledger-quiet").display().to_string(),
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(pipe_with_its_reader_gone())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ledger serve");
    let healthy = crate::support::wait_until(Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok_and(|mut c| {
            let _ = c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut answer = String::new();
            let _ = std::io::Read::read_to_string(&mut c, &mut answer);
            answer.starts_with("HTTP/1.1 200")
        })
    });
    let _ = ledger.kill();
    let _ = ledger.wait();
    assert!(healthy, "ledger serve with its stdout closed did not serve");
}

/// A full disk behind a redirect is not a reader that left: the command says its output is
/// incomplete and fails.
#[test]
fn a_stdout_that_cannot_be_written_is_a_failure_named_on_stderr() {
    let env = TestEnv::new();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let out = env
        .cmd(&["tool", "list"])
        .stdout(full)
        .stderr(Stdio::piped())
        .output()
        .expect("run tool list");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot write to stdout"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

//! The real binary on stdio: `tool` from a shell, JSON-RPC only on stdout, cancellation, a closed
//! stdout, and malformed input answered as JSON-RPC says.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

use metabob_mcp_server::Ctx;
use metabob_process::env::Env;
use serde_json::{Value, json};

use super::project;
use crate::support::{TestEnv, normalize, snapshot, wait_until};

#[test]
fn tool_call_from_a_shell_gives_the_mcp_answer() {
    let env = TestEnv::new();
    project(&env, &env.cwd());
    let out = env.run(&["tool", "list"]);
    assert_eq!(
        out.stdout.lines().count(),
        metabob_mcp_server::tools::TOOLS.len()
    );
    insta::assert_snapshot!("tool_list", snapshot(&out, &env));
    let out = env.run(&[
        "tool",
        "call",
        "predict_cochanges",
        "--args",
        r#"{"changed_files":["a.py"]}"#,
        "--json",
    ]);
    insta::assert_snapshot!("tool_call_json", snapshot(&out, &env));
    let out = env.run(&[
        "tool",
        "call",
        "predict_cochanges",
        "--args",
        r#"{"changed_files":["a.py"]}"#,
    ]);
    insta::assert_snapshot!("tool_call", snapshot(&out, &env));
    let out = env.run(&[
        "tool",
        "call",
        "annotate_component",
        "--args",
        r#"{"problem_id":"agf_nope"}"#,
    ]);
    insta::assert_snapshot!("tool_call_tool_error", snapshot(&out, &env));
    let out = env.run(&["tool", "call", "get_problems", "--args", "[1]"]);
    insta::assert_snapshot!("tool_call_args_not_an_object", snapshot(&out, &env));
    let out = env.run(&["tool", "call", "nope"]);
    insta::assert_snapshot!("tool_call_unknown_tool", snapshot(&out, &env));
}

/// Reads one JSON-RPC line from the server's stdout.
fn read_line(r: &mut impl BufRead) -> Value {
    let mut line = String::new();
    r.read_line(&mut line).expect("read stdout");
    serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("stdout carried non-JSON ({e}): {line:?}"))
}

/// The real binary on stdio, spoken to line by line, initialized.
struct Raw {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Raw {
    fn start(env: &TestEnv, args: &[&str]) -> (Raw, Value) {
        let mut child = env
            .cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut raw = Raw {
            child,
            stdin,
            stdout,
        };
        raw.send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        );
        let init = read_line(&mut raw.stdout);
        raw.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        (raw, init)
    }

    fn send(&mut self, v: Value) {
        writeln!(self.stdin.as_mut().expect("stdin open"), "{v}").expect("write");
    }

    fn call(&mut self, id: u64, tool: &str) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": {}}}));
    }

    /// Closes stdin and returns the rest of stdout and all of stderr once the server ends.
    fn finish(mut self) -> (String, String) {
        drop(self.stdin.take());
        assert!(
            wait_until(Duration::from_secs(30), || matches!(
                self.child.try_wait(),
                Ok(Some(_))
            )),
            "the server did not end when stdin closed"
        );
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.stdout, &mut rest).expect("rest of stdout");
        let mut err = String::new();
        std::io::Read::read_to_string(&mut self.child.stderr.take().expect("stderr"), &mut err)
            .expect("stderr");
        (rest, err)
    }
}

#[test]
fn the_binary_speaks_only_json_rpc_on_stdout_and_ends_with_stdin() {
    let mut env = TestEnv::new();
    env.set("RUST_LOG", "debug");
    let (mut raw, init) = Raw::start(&env, &[]);
    assert_eq!(init["id"], 1);
    assert!(init["result"]["instructions"].as_str().is_some(), "{init}");
    raw.call(2, "get_metrics");
    let call = read_line(&mut raw.stdout);
    assert_eq!(call["id"], 2);
    assert_eq!(call["result"]["isError"], false, "{call}");
    let (rest, err) = raw.finish();
    for line in rest.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).expect("only JSON-RPC on stdout");
        assert_eq!(v["jsonrpc"], "2.0");
    }
    assert!(
        err.contains("tool call get_metrics"),
        "logs go to stderr: {err}"
    );
}

#[test]
fn a_cancelled_call_gets_no_answer_and_the_server_goes_on() {
    let mut env = TestEnv::new();
    let log = env.path("calls.jsonl");
    env.set("METABOB_CALL_LOG", log.display().to_string());
    let cache = env.path("cache");
    env.set("METABOB_CACHE_DIR", cache.display().to_string());
    project(&env, &env.cwd());
    // init_workspace reads the persisted index first. Here it is a FIFO: the read blocks until
    // the test writes, so the call is provably still running when its cancellation arrives.
    let real = std::fs::canonicalize(env.cwd()).expect("real path");
    let fifo = Ctx::new(Env::new(env.vars.clone(), env.cwd()), false)
        .index_cache_path(&real)
        .expect("a cache path under METABOB_CACHE_DIR");
    std::fs::create_dir_all(fifo.parent().expect("parent")).expect("cache dir");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", fifo.display());
    // Opening a FIFO to write returns once a reader has it open: the call is then blocked.
    let (opened, reading) = std::sync::mpsc::channel();
    let writer_path = fifo.clone();
    std::thread::spawn(move || {
        let w = std::fs::OpenOptions::new().write(true).open(&writer_path);
        let _ = opened.send(w);
    });

    let (mut raw, _) = Raw::start(&env, &["serve"]);
    raw.call(2, "init_workspace");
    let mut writer = reading
        .recv_timeout(Duration::from_secs(30))
        .expect("init_workspace opened the persisted index")
        .expect("open the FIFO to write");
    raw.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 2, "reason": "test"}}),
    );
    let logged = |tool: &str| -> Option<Value> {
        std::fs::read_to_string(&log)
            .ok()?
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["tool"] == tool)
    };
    assert!(
        wait_until(Duration::from_secs(30), || logged("init_workspace")
            .is_some()),
        "the cancelled call was never logged"
    );
    assert_eq!(
        logged("init_workspace").expect("logged")["outcome"],
        "cancelled"
    );
    // Only now may the read finish: what it reads is no index, so the parse starts, and stops
    // after its first file because the call was cancelled.
    writer.write_all(b"not an index").expect("write the FIFO");
    drop(writer);
    raw.call(3, "get_metrics");
    let next = read_line(&mut raw.stdout);
    assert_eq!(next["id"], 3, "{next}");
    let text = next["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    insta::assert_snapshot!(
        "cancelled_init_workspace_then_get_metrics",
        normalize(text, &env)
    );
    let (rest, _) = raw.finish();
    assert!(
        !rest.contains("\"id\":2"),
        "the cancelled call was answered: {rest}"
    );
}

#[test]
fn a_closed_stdout_ends_the_server() {
    let env = TestEnv::new();
    let (raw, init) = Raw::start(&env, &["serve"]);
    assert_eq!(init["id"], 1);
    let Raw {
        mut child,
        stdin,
        stdout,
    } = raw;
    // The client stops reading: the next answer's write fails and the server ends.
    drop(stdout);
    let mut stdin = stdin.expect("stdin open");
    let _ = writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    );
    let _ = stdin.flush();
    assert!(
        wait_until(Duration::from_secs(10), || matches!(
            child.try_wait(),
            Ok(Some(_))
        )),
        "the server did not end when its stdout closed"
    );
}

impl Raw {
    /// Writes one raw line, whatever it holds.
    fn send_raw(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line).expect("write");
        stdin.write_all(b"\n").expect("write");
        stdin.flush().expect("flush");
    }
}

/// Malformed lines, each with the code and id JSON-RPC answers it with, on every surface (stdio
/// here, `serve --http` in `tests/loopback.rs`): not JSON has no id to read; an id that is no id
/// is not read either.
pub fn malformed_lines() -> Vec<(&'static str, i64, Value)> {
    vec![
        ("not json", -32700, Value::Null),
        (r#"{"jsonrpc":"2.0","id":7}"#, -32600, json!(7)),
        ("[1,2]", -32600, Value::Null),
        (
            r#"{"jsonrpc":"2.0","id":{},"method":"tools/list"}"#,
            -32600,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"1.0","id":"seven","method":"tools/list"}"#,
            -32600,
            json!("seven"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":"x"}"#,
            -32602,
            json!(8),
        ),
        (
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"get_metrics","arguments":5}}"#,
            -32602,
            json!(9),
        ),
        (
            r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"arguments":{}}}"#,
            -32602,
            json!(10),
        ),
    ]
}

/// A request one byte over the most the server reads as one message.
pub fn too_long_line() -> Vec<u8> {
    let limit = metabob_mcp_server::framing::MAX_LINE_BYTES;
    let mut long = br#"{"jsonrpc":"2.0","id":11,"method":"tools/list","params":{"pad":""#.to_vec();
    long.resize(limit + 1, b'x');
    long.extend_from_slice(br#""}}"#);
    long
}

/// What the real binary on stdio answers to each of `lines`, one answer a line.
pub fn stdio_answers(env: &TestEnv, lines: &[&[u8]]) -> Vec<Value> {
    let (mut raw, _) = Raw::start(env, &["serve", "--no-resolver"]);
    let answers = lines
        .iter()
        .map(|line| {
            raw.send_raw(line);
            read_line(&mut raw.stdout)
        })
        .collect();
    let (rest, _) = raw.finish();
    assert_eq!(rest.trim(), "", "one answer a line");
    answers
}

#[test]
fn malformed_input_is_answered_as_json_rpc_says_and_the_server_goes_on() {
    let env = TestEnv::new();
    let (mut raw, _) = Raw::start(&env, &["serve"]);
    let mut answers = String::new();
    for (line, code, id) in malformed_lines() {
        raw.send_raw(line.as_bytes());
        let answer = read_line(&mut raw.stdout);
        assert_eq!(answer["error"]["code"], code, "{line} -> {answer}");
        assert_eq!(answer.get("id"), Some(&id), "{line} -> {answer}");
        answers.push_str(&format!("{line}\n{answer}\n\n"));
    }

    // A line over the limit is read to its end, answered, and the next line is read as usual.
    let long = too_long_line();
    raw.send_raw(&long);
    let answer = read_line(&mut raw.stdout);
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(answer.get("id"), Some(&Value::Null), "{answer}");
    answers.push_str(&format!("<a line of {} bytes>\n{answer}\n\n", long.len()));

    // JSON-RPC answers no notification, even a malformed one, and a blank line is no message: the
    // next line out answers the next request.
    raw.send_raw(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}"#);
    raw.send_raw(b"");
    raw.send(json!({"jsonrpc": "2.0", "id": 12, "method": "ping"}));
    let pong = read_line(&mut raw.stdout);
    assert_eq!(pong, json!({"jsonrpc": "2.0", "id": 12, "result": {}}));

    // After all of that, the session serves as before.
    raw.send(json!({"jsonrpc": "2.0", "id": 13, "method": "tools/list"}));
    let list = read_line(&mut raw.stdout);
    assert_eq!(list["id"], 13, "{list}");
    let listed = list["result"]["tools"].as_array().map_or(0, Vec::len);
    assert_eq!(listed, metabob_mcp_server::tools::TOOLS.len(), "{list}");
    raw.call(14, "get_metrics");
    let call = read_line(&mut raw.stdout);
    assert_eq!(call["id"], 14, "{call}");
    assert_eq!(call["result"]["isError"], false, "{call}");

    let (rest, _) = raw.finish();
    assert_eq!(rest.trim(), "", "nothing more on stdout");
    insta::assert_snapshot!("malformed_input_answers", answers);
}

#[test]
fn a_message_before_initialize_that_is_not_json_is_answered_and_initialize_still_works() {
    let env = TestEnv::new();
    let mut child = env
        .cmd(&["serve"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the server");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    writeln!(stdin, "\u{feff}{{oops").expect("write");
    let answer = read_line(&mut stdout);
    assert_eq!(answer["error"]["code"], -32700, "{answer}");
    assert_eq!(answer.get("id"), Some(&Value::Null), "{answer}");
    writeln!(
        stdin,
        "{}\r",
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}})
    )
    .expect("write");
    let init = read_line(&mut stdout);
    assert_eq!(init["id"], 1, "{init}");
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    drop(stdin);
    assert!(
        wait_until(Duration::from_secs(30), || matches!(
            child.try_wait(),
            Ok(Some(_))
        )),
        "the server did not end when stdin closed"
    );
}

/// The local store holds this machine's findings: `serve` makes it, with its `-wal` and
/// `-shm`, readable by this user alone, and tightens a store left wider, saying so once per
/// file.
#[test]
fn the_local_store_is_its_users_alone_and_a_wider_one_is_tightened() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    project(&env, &env.cwd());
    let store = env.home().join(".metabob/store.sqlite");
    let files = ["", "-wal", "-shm"].map(|side| {
        let mut p = store.clone().into_os_string();
        p.push(side);
        std::path::PathBuf::from(p)
    });
    let mode = |p: &std::path::Path| {
        std::fs::metadata(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .permissions()
            .mode()
            & 0o777
    };
    let record = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "record_finding", "arguments": {"files": ["a.py"], "summary": "a is private",
        "severity": "LOW", "category": "correctness"}}});
    let (mut raw, _) = Raw::start(&env, &["serve"]);
    raw.send(record);
    let answer = read_line(&mut raw.stdout);
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    for f in &files {
        assert_eq!(
            mode(f),
            0o600,
            "{} while the server has it open",
            f.display()
        );
    }
    // Killed, so the -wal and -shm stay, then opened up as a umask of 022 would have made them.
    let _ = raw.child.kill();
    let _ = raw.child.wait();
    for f in &files {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let (mut raw, _) = Raw::start(&env, &["serve"]);
    raw.call(2, "get_problems");
    let answer = read_line(&mut raw.stdout);
    assert!(
        answer["result"]["content"]
            .to_string()
            .contains("a is private"),
        "the store was read: {answer}"
    );
    for f in &files {
        assert_eq!(mode(f), 0o600, "{} tightened", f.display());
    }
    let (_, err) = raw.finish();
    for f in &files {
        let line = format!(
            "{} was readable beyond its owner (mode 0644); made it 0600",
            f.display()
        );
        assert_eq!(err.matches(&line).count(), 1, "{line}: {err}");
    }
}

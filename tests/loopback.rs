//! The real `serve` binary's HTTP surfaces, driven by a plain HTTP/1.1 client over a TcpStream:
//! the loopback resolver (`POST /v2/impulses/resolve`, `GET /health`) beside stdio, against a
//! real `ledger serve` and detached, and MCP over HTTP (`serve --http`).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::mcp::{malformed_lines, project, stdio_answers, too_long_line};
use crate::support::{TestEnv, normalize, wait_until};

/// One answer: status, headers (lower-cased names) and the body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request on its own connection; the answer read to the connection's close.
fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    http_declaring(port, method, path, headers, body, body.len())
}

/// As [`http`], with `Content-Length: declared` whatever the body sent: a head that announces
/// more than is sent tests a bound without sending all of it.
fn http_declaring(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    declared: usize,
) -> Answer {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Content-Length: {declared}\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    Answer {
        status,
        headers,
        body,
    }
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

/// The real `serve`, its stdin held open so stdio keeps it running, its stderr collected.
struct Serve {
    child: Child,
    stderr: Arc<Mutex<String>>,
    /// The port announced on stderr by the line starting with `announce`.
    port: u16,
}

impl Serve {
    fn start(env: &TestEnv, args: &[&str], announce: &str) -> Serve {
        let mut child = env
            .cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let (lines, collected, prefix) = (
            BufReader::new(child.stderr.take().unwrap()).lines(),
            stderr.clone(),
            format!("metabob-mcp: {announce} on http://"),
        );
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                // `…on http://HOST:PORT[/path]`: the port is what follows the authority's last colon.
                if let Some(rest) = line.strip_prefix(&prefix) {
                    let authority = rest.split('/').next().unwrap_or_default();
                    let port = authority.rsplit(':').next().unwrap_or_default();
                    let _ = tx.send(port.parse::<u16>().unwrap());
                }
                let mut all = collected.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        });
        let port = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                panic!("serve announced no {announce}: {}", stderr.lock().unwrap())
            });
        Serve {
            child,
            stderr,
            port,
        }
    }

    fn resolver(env: &TestEnv) -> Serve {
        Serve::start(env, &["serve"], "loopback resolver")
    }

    fn post(&self, auth: Option<&str>, body: &Value) -> Answer {
        let mut headers = vec![("Content-Type", "application/json")];
        if let Some(a) = auth {
            headers.push(("Authorization", a));
        }
        http(
            self.port,
            "POST",
            "/v2/impulses/resolve",
            &headers,
            &body.to_string(),
        )
    }

    /// The results of an authorized POST, which must be a 200.
    fn results(&self, key: &str, body: &Value) -> Vec<Value> {
        let a = self.post(Some(&format!("ApiKey {key}")), body);
        assert_eq!(a.status, 200, "{}", a.body);
        a.json()["results"].as_array().unwrap().clone()
    }

    fn health(&self) -> Value {
        let a = http(self.port, "GET", "/health", &[], "");
        assert_eq!(a.status, 200, "{}", a.body);
        a.json()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config_key(env: &TestEnv) -> String {
    let config = std::fs::read_to_string(env.home().join(".substrate/config.json")).unwrap();
    serde_json::from_str::<Value>(&config).unwrap()["metabob"]["apiKey"]
        .as_str()
        .unwrap()
        .to_string()
}

fn tool_call(tool: &str, input: Value) -> Value {
    json!({"type": "mcp:tool_call", "tool": tool, "input": input})
}

/// How many `POST /resolve` the ledger has served, from its public `/health`.
fn ledger_resolves(ledger_url: &str) -> u64 {
    let port: u16 = ledger_url.rsplit(':').next().unwrap().parse().unwrap();
    http(port, "GET", "/health", &[], "").json()["resolves"]
        .as_u64()
        .unwrap()
}

fn logged_via(log: &std::path::Path) -> Vec<(String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| {
            (
                v["tool"].as_str().unwrap_or_default().to_string(),
                v["via"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Each result as a snapshot shows it: id, loaded, and the content's first lines.
fn shown_results(results: &[Value], env: &TestEnv) -> String {
    let mut out = String::new();
    for r in results {
        let content = r["content"].as_str().unwrap_or_default();
        let head: Vec<&str> = content.lines().take(6).collect();
        out.push_str(&format!(
            "## {} loaded={} is_error={}\n{}\n",
            r["id"],
            r["loaded"],
            r["is_error"],
            head.join("\n")
        ));
        if let Some(e) = r.get("error") {
            out.push_str(&format!("error: {}\n", e.as_str().unwrap_or_default()));
        }
    }
    normalize(&out, env)
}

#[test]
fn the_resolver_runs_each_shape_through_the_one_call_path() {
    let mut env = TestEnv::new();
    let log = env.path("calls.jsonl");
    let cache = env.path("cache");
    env.set("METABOB_CALL_LOG", log.display().to_string())
        .set("METABOB_CACHE_DIR", cache.display().to_string())
        .set(
            "METABOB_TOOLS",
            "init_workspace, get_metrics,predict_cochanges,analyze_impact,assign_git_changes,\
             get_analysis_context,record_finding",
        );
    project(&env, &env.cwd());
    let ledger = env.ledger("main", &[]);
    let key = config_key(&env);
    let serve = Serve::resolver(&env);

    // The single-pointer form answers a list of one.
    let one = serve.results(
        &key,
        &json!({"id": "m", "pointer": tool_call("get_metrics", json!({}))}),
    );
    assert_eq!(one.len(), 1);
    assert_eq!(one[0]["id"], "m");
    assert_eq!(one[0]["loaded"], true, "{}", one[0]);

    let results = serve.results(
        &key,
        &json!({"impulses": [
            {"id": "init", "pointer": tool_call("init_workspace", json!({}))},
            {"id": "cochange", "pointer": {"type": "code:cochange_prediction",
                "changed_files": ["a.py"], "confidence_threshold": 0.1}},
            {"id": "impact", "pointer": {"type": "code:impact_analysis",
                "changed_files": ["b.py"], "direction": "backward"}},
            {"id": "assign", "pointer": {"type": "code:git_change_assignment",
                "changed_files": ["a.py"]}},
            {"id": "context", "pointer": {"type": "code:analysis_context",
                "recently_changed_files": ["a.py"], "problem_limit": 5}},
            {"id": "alias", "pointer": {"type": "mcp:tool_call", "tool": "get_metrics",
                "arguments": {}}},
            {"id": "not-allowed", "pointer": tool_call("search_codebase", json!({"query": "run"}))},
            {"id": "both", "pointer": {"type": "mcp:tool_call", "tool": "get_metrics",
                "input": {}, "arguments": {}}},
            {"id": "unknown", "pointer": {"type": "code:nothing"}},
            {"id": "bad-args", "pointer": {"type": "code:cochange_prediction", "limit": 3}},
        ]}),
    );
    let loaded: Vec<(String, bool)> = results
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_string(),
                r["loaded"].as_bool().unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, bool)> = [
        ("init", true),
        ("cochange", true),
        ("impact", true),
        ("assign", true),
        ("context", true),
        ("alias", true),
        ("not-allowed", false),
        ("both", false),
        ("unknown", false),
        ("bad-args", false),
    ]
    .iter()
    .map(|(i, l)| (i.to_string(), *l))
    .collect();
    assert_eq!(loaded, want, "{results:#?}");
    insta::assert_snapshot!("resolver_shapes", shown_results(&results[1..], &env));

    // A secret in a write's input is refused by the guard: nothing reaches the ledger.
    let before = ledger_resolves(&ledger.url);
    let secret = format!(
        "ghp_{}",
        "a1B2c3D4e5F6g7H8i9J0".repeat(2).get(..36).unwrap()
    );
    let refused = serve.results(
        &key,
        &json!({"pointer": tool_call("record_finding", json!({
            "files": ["a.py"], "summary": format!("token {secret} leaked"), "severity": "LOW",
            "category": "security"}))}),
    );
    assert_eq!(refused[0]["loaded"], false, "{}", refused[0]);
    let error = refused[0]["error"].as_str().unwrap();
    assert!(error.contains("outgoing_secret"), "{error}");
    assert!(!refused[0].to_string().contains(&secret));
    assert_eq!(
        ledger_resolves(&ledger.url),
        before,
        "the ledger was sent something"
    );

    // /health: attached once the background attachment settles, and never the key.
    assert!(
        wait_until(Duration::from_secs(60), || serve.health()["attached"]
            == true),
        "never attached: {}",
        serve.health()
    );
    let health = http(serve.port, "GET", "/health", &[], "");
    assert!(!health.body.contains(&key), "{}", health.body);
    let h = health.json();
    assert_eq!(h["ok"], true);
    assert_eq!(h["attachment"]["auth"]["status"], "authenticated", "{h}");
    assert!(h.get("reason").is_none(), "{h}");

    let via = logged_via(&log);
    assert!(via.len() >= 8, "{via:?}");
    assert!(via.iter().all(|(_, v)| v == "loopback"), "{via:?}");
    assert!(via.contains(&("predict_cochanges".into(), "loopback".into())));
    // Refused before any tool ran: neither the allowlist's refusal nor the unknown shape is a call.
    assert!(!via.iter().any(|(t, _)| t == "search_codebase"), "{via:?}");
}

#[test]
fn a_missing_or_wrong_key_is_refused_and_the_body_is_bounded() {
    let env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let key = config_key(&env);
    let serve = Serve::resolver(&env);
    let body = json!({"pointer": tool_call("get_metrics", json!({}))});
    let missing = serve.post(None, &body);
    assert_eq!(missing.status, 401, "{}", missing.body);
    assert_eq!(missing.header("www-authenticate"), Some("ApiKey"));
    let wrong = serve.post(Some("ApiKey mb_live_not_the_configured_key"), &body);
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    for form in [format!("Bearer {key}"), key.clone()] {
        let ok = serve.post(Some(&form), &body);
        assert_eq!(ok.status, 200, "{form}: {}", ok.body);
    }
    let auth = format!("ApiKey {key}");
    // A declared length past the bound is refused before the body is read.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", serve.port)).unwrap();
    write!(
        s,
        "POST /v2/impulses/resolve HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {auth}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        4 * 1024 * 1024 + 1
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let many = json!({"impulses": vec![json!({"pointer": {"type": "x"}}); 33]});
    let a = serve.post(Some(&auth), &many);
    assert_eq!(a.status, 400, "{}", a.body);
    let not_json = serve.post(Some(&auth), &json!("x"));
    assert_eq!(not_json.status, 400, "{}", not_json.body);
    // A page that rebinds its own name to 127.0.0.1 sends its own Host: refused.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", serve.port)).unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: rebound.example\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
}

#[test]
fn with_no_key_configured_every_request_is_refused() {
    let env = TestEnv::new();
    let serve = Serve::resolver(&env);
    let body = json!({"pointer": tool_call("get_metrics", json!({}))});
    for auth in [None, Some("ApiKey anything-at-all"), Some("")] {
        let a = serve.post(auth, &body);
        assert_eq!(a.status, 401, "{auth:?}: {}", a.body);
    }
    // No call has started the attachment: /health says so, with the proxies in force.
    let h = serve.health();
    assert_eq!(h["attached"], false, "{h}");
    assert!(
        h["reason"].as_str().unwrap().starts_with("attaching"),
        "{h}"
    );
    assert!(h["attachment"].is_null(), "{h}");
    assert!(h["network"]["proxy"].is_object(), "{h}");
    insta::assert_snapshot!(normalize(&serve.post(Some("ApiKey x"), &body).body, &env), @r#"{"error":"unauthorized: no API key is configured, so the resolver refuses every request; configure one (METABOB_API_KEY or ~/.substrate/config.json) and restart serve"}"#);
}

#[test]
fn a_human_input_is_acked_and_queued_for_pull_assigned_work() {
    let mut env = TestEnv::new();
    env.set(
        "METABOB_SIDECAR",
        env.path("sidecar.db").display().to_string(),
    );
    let _ledger = env.ledger("main", &[]);
    let key = config_key(&env);
    let serve = Serve::resolver(&env);
    let acks = serve.results(
        &key,
        &json!({"impulses": [
            {"id": "ask", "pointer": {"type": "human_input", "solicitation_id": "sol-1",
                "question_markdown": "Ship the **release** today?", "timeout_ms": 600000}},
            {"id": "blank", "pointer": {"type": "human_input", "question_markdown": "  "}},
        ]}),
    );
    assert_eq!(acks[0]["accepted"], true, "{}", acks[0]);
    assert_eq!(acks[0]["loaded"], true);
    assert_eq!(acks[0]["solicitation_id"], "sol-1");
    assert_eq!(acks[0]["will_respond_via"], "pull_assigned_work");
    assert_eq!(acks[1]["accepted"], false, "{}", acks[1]);
    assert_eq!(acks[1]["loaded"], false);
    let pulled = serve.results(
        &key,
        &json!({"pointer": tool_call("pull_assigned_work", json!({}))}),
    );
    assert_eq!(pulled[0]["loaded"], true, "{}", pulled[0]);
    let text = pulled[0]["content"].as_str().unwrap();
    assert!(text.contains("task_id: sol-1"), "{text}");
    assert!(text.contains("Ship the **release** today?"), "{text}");
}

#[test]
fn no_resolver_starts_none_and_an_unusable_port_is_said_in_one_line() {
    let mut env = TestEnv::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    env.set("METABOB_RESOLVER_PORT", &port);
    // stdio still serves: the resolver's failure is one stderr line.
    let mut child = env
        .cmd(&["serve"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}})
    )
    .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&line).unwrap()["id"],
        1,
        "{line}"
    );
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "metabob-mcp: loopback resolver not started: cannot listen on 127.0.0.1:{port}"
        )),
        "{stderr}"
    );
    let out = env
        .cmd(&["serve", "--no-resolver"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("loopback resolver"),
        "{out:?}"
    );
}

/// One JSON-RPC request to `/mcp`, as a plain client sends it: JSON only, no session header.
fn mcp(port: u16, auth: Option<&str>, body: Value) -> Answer {
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json"),
    ];
    if let Some(a) = auth {
        headers.push(("Authorization", a));
    }
    http(port, "POST", "/mcp", &headers, &body.to_string())
}

#[test]
fn serve_http_answers_initialize_list_and_call_with_one_json_body_each() {
    let mut env = TestEnv::new();
    let log = env.path("calls.jsonl");
    env.set("METABOB_CALL_LOG", log.display().to_string());
    let mut serve = Serve::start(
        &env,
        &["serve", "--http", "127.0.0.1:0", "--no-resolver"],
        "MCP over HTTP",
    );
    let init = mcp(
        serve.port,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "plain-http", "version": "0"}}}),
    );
    assert_eq!(init.status, 200, "{}", init.body);
    assert!(
        init.header("content-type")
            .is_some_and(|c| c.starts_with("application/json")),
        "{:?}",
        init.headers
    );
    assert_eq!(init.header("mcp-session-id"), None, "stateless: no session");
    let v = init.json();
    assert_eq!(v["result"]["serverInfo"]["name"], "metabob-mcp", "{v}");
    assert!(v["result"]["instructions"].as_str().is_some(), "{v}");

    let note = mcp(
        serve.port,
        None,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(note.status, 202, "{}", note.body);

    let list = mcp(
        serve.port,
        None,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .json();
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let registered: Vec<&str> = metabob_mcp_server::tools::TOOLS
        .iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, registered);

    let call = mcp(
        serve.port,
        None,
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "get_metrics", "arguments": {}}}),
    )
    .json();
    assert_eq!(call["id"], 3);
    assert_eq!(call["result"]["isError"], false, "{call}");
    assert_eq!(
        logged_via(&log),
        vec![("get_metrics".to_string(), "http".to_string())]
    );

    let get = http(
        serve.port,
        "GET",
        "/mcp",
        &[("Accept", "text/event-stream")],
        "",
    );
    assert_eq!(get.status, 405, "no event stream: {}", get.body);

    // SIGTERM ends it, with exit 0.
    let pid = serve.child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(
        wait_until(Duration::from_secs(30), || matches!(
            serve.child.try_wait(),
            Ok(Some(_))
        )),
        "serve --http did not end on SIGTERM"
    );
    assert_eq!(serve.child.wait().unwrap().code(), Some(0));
    assert!(serve.stderr.lock().unwrap().contains("MCP over HTTP on"));
}

#[test]
fn a_non_loopback_http_address_needs_a_key_and_then_every_request_carries_it() {
    let env = TestEnv::new();
    let out = env.run(&["serve", "--http", "0.0.0.0:0", "--no-resolver"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    insta::assert_snapshot!(normalize(&out.stderr, &env), @r"error: serve --http 0.0.0.0:0: 0.0.0.0:0 is not a loopback address, so requests need a key: pass --http-key KEY (or set METABOB_HTTP_KEY), or serve on 127.0.0.1");

    let key = "http-key-for-the-test-0123456789";
    let serve = Serve::start(
        &env,
        &[
            "serve",
            "--http",
            "0.0.0.0:0",
            "--http-key",
            key,
            "--no-resolver",
        ],
        "MCP over HTTP",
    );
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    assert_eq!(mcp(serve.port, None, list.clone()).status, 401);
    assert_eq!(
        mcp(serve.port, Some("Bearer not-the-key"), list.clone()).status,
        401
    );
    let ok = mcp(serve.port, Some(&format!("Bearer {key}")), list);
    assert_eq!(ok.status, 200, "{}", ok.body);
}

/// The headers `mcp` sends, for a body `mcp` cannot carry (not JSON, or no body at all).
const MCP_HEADERS: [(&str, &str); 2] = [
    ("Content-Type", "application/json"),
    ("Accept", "application/json"),
];

#[test]
fn serve_http_answers_a_malformed_body_as_stdio_answers_the_line_and_goes_on() {
    let env = TestEnv::new();
    let cases = malformed_lines();
    let long = too_long_line();
    let mut lines: Vec<&[u8]> = cases.iter().map(|(l, _, _)| l.as_bytes()).collect();
    lines.push(&long);
    let stdio = stdio_answers(&env, &lines);
    let serve = Serve::start(
        &env,
        &["serve", "--http", "127.0.0.1:0", "--no-resolver"],
        "MCP over HTTP",
    );
    let is_json = |a: &Answer| {
        a.header("content-type")
            .is_some_and(|c| c.starts_with("application/json"))
    };

    // The same answer on both surfaces, from the one classifier: 400 when there is no id to
    // answer, else a JSON-RPC error response like any other.
    for ((line, code, id), want) in cases.iter().zip(&stdio) {
        let a = http(serve.port, "POST", "/mcp", &MCP_HEADERS, line);
        let status = if id.is_null() { 400 } else { 200 };
        assert_eq!(a.status, status, "{line}: {}", a.body);
        assert!(is_json(&a), "{line}: {:?}", a.headers);
        assert_eq!(&a.json(), want, "{line}: HTTP and stdio differ");
        assert_eq!(a.json()["error"]["code"], *code, "{line}");
    }

    // A body over the bound: refused from its declared length, unread, with stdio's answer.
    let a = http_declaring(serve.port, "POST", "/mcp", &MCP_HEADERS, "", long.len());
    assert_eq!(a.status, 413, "{}", a.body);
    assert!(is_json(&a), "{:?}", a.headers);
    assert_eq!(&a.json(), stdio.last().unwrap(), "HTTP and stdio differ");

    // Not JSON is not JSON whatever it is labelled; an empty body is no message either.
    let text = http(
        serve.port,
        "POST",
        "/mcp",
        &[
            ("Content-Type", "text/plain"),
            ("Accept", "application/json"),
        ],
        "not json",
    );
    assert_eq!((text.status, text.json()), (400, stdio[0].clone()));
    let empty = http(serve.port, "POST", "/mcp", &MCP_HEADERS, "");
    assert_eq!(empty.status, 400, "{}", empty.body);
    assert_eq!(empty.json()["error"]["code"], -32700, "{}", empty.body);
    assert_eq!(empty.json()["id"], Value::Null, "{}", empty.body);

    // A malformed notification is not answered, as on stdio: accepted with no body.
    let note = http(
        serve.port,
        "POST",
        "/mcp",
        &MCP_HEADERS,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}"#,
    );
    assert_eq!((note.status, note.body.as_str()), (202, ""));

    // A message reaches rmcp: with a byte order mark and CR LF, as stdio accepts it.
    let bom = http(
        serve.port,
        "POST",
        "/mcp",
        &MCP_HEADERS,
        "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"ping\"}\r\n",
    );
    assert_eq!(bom.status, 200, "{}", bom.body);
    assert_eq!(
        bom.json(),
        json!({"jsonrpc": "2.0", "id": 12, "result": {}})
    );

    // After all of that, the server serves as before.
    let init = mcp(
        serve.port,
        None,
        json!({"jsonrpc": "2.0", "id": 13, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "plain-http", "version": "0"}}}),
    );
    assert_eq!(init.status, 200, "{}", init.body);
    assert_eq!(init.json()["result"]["serverInfo"]["name"], "metabob-mcp");
    let list = mcp(
        serve.port,
        None,
        json!({"jsonrpc": "2.0", "id": 14, "method": "tools/list"}),
    );
    assert_eq!(list.status, 200, "{}", list.body);
    assert_eq!(
        list.json()["result"]["tools"]
            .as_array()
            .map_or(0, Vec::len),
        metabob_mcp_server::tools::TOOLS.len(),
        "{}",
        list.body
    );
    // The ignored notification is logged as on stdio (answers are logged at info, not shown).
    assert!(
        wait_until(Duration::from_secs(10), || serve
            .stderr
            .lock()
            .unwrap()
            .contains(
                "ignored a message: notification notifications/cancelled"
            )),
        "{}",
        serve.stderr.lock().unwrap()
    );
}

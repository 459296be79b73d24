//! Hostile input through the real binary: rows any write key can put on the ledger, and files
//! a careless caller hands a command. None of it may crash, stall or stop a reader.

use serde_json::{Value, json};

use crate::support::{TestEnv, snapshot};

/// One `/resolve` with the key the ledger's first start configured, as any holder of a key of
/// the org could send it.
fn resolve(env: &TestEnv, ledger: &str, pointer: Value) -> Value {
    let config = std::fs::read_to_string(env.home().join(".substrate/config.json")).unwrap();
    let key = serde_json::from_str::<Value>(&config).unwrap()["metabob"]["apiKey"]
        .as_str()
        .unwrap()
        .to_string();
    let url = ledger.to_string();
    let body = json!({ "pointer": pointer });
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async move {
            use metabob_net::{NetClient, Request, Url};
            let net = NetClient::from_env(&metabob_process::env::Env::new(Vec::new(), "/"));
            let req = Request::post_json(Url::parse(&url).unwrap().join("/resolve"), &body)
                .header("authorization", format!("ApiKey {key}"));
            net.send(req).await.unwrap().json().unwrap()
        })
}

/// Writes one raw concept, as any holder of a write key could.
fn write_row(env: &TestEnv, ledger: &str, shape: &str, summary: &str, content: &str) -> String {
    let pointer = json!({"type": "concept_create_write", "conceptData": {
        "shape": shape, "source_type": "metabob_annotation", "summary": summary, "content": content,
    }});
    resolve(env, ledger, pointer)["concept"]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_claim_row_past_year_9999_is_skipped_by_every_reader() {
    let env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    let (_, origin) = env.origin("app", &[("a.py", "x = 1\n")]);
    let recorded = env.record_task(&origin, "make x two", "HIGH");
    let task = recorded["finding_ids"][0].as_str().unwrap().to_string();
    // A claim that would last 9,500 years: formatting its end once panicked every reader.
    let evil = format!(
        "reviewed_by: evil\nsession: s\nverdict: claimed\nfinding_ids: {task}\nclaim_minutes: 5000000000\n"
    );
    write_row(
        &env,
        &ledger.url,
        "finding_verdict",
        "[verdict:claimed] x",
        &evil,
    );
    crate::support::seen(&env, &[&task]);

    let out = env.task_pull(&origin, "cell", &[]);
    let w = env.path("cell/work").display().to_string();
    insta::assert_snapshot!("hostile_claim_row_task_pull", snapshot(&out, &env));

    // The MCP tools that read claims answer too, from the clone the pull made.
    let mut env = env;
    env.set("WORKSPACE_PATH", w.clone());
    let out = env.run(&["tool", "call", "get_problems", "--args", "{}"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains(&task), "{out:?}");
    assert!(
        out.stderr
            .contains("skipped 1 verdict row(s) that fail validation"),
        "{out:?}"
    );
    let args = json!({"problem_id": task, "action": "renew"}).to_string();
    let out = env.run(&["tool", "call", "claim_finding", "--args", &args]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("Renewed"), "{out:?}");
}

#[test]
fn oversized_and_malformed_rows_are_named_once_and_the_rest_is_read() {
    let env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    let (_, origin) = env.origin("app", &[("a.py", "x = 1\n")]);
    // A task recorded honestly names the repository identity the bad rows copy.
    let recorded = env.record_task(&origin, "the good one", "LOW");
    let good = recorded["finding_ids"][0].as_str().unwrap().to_string();
    let identity = recorded["repository"].as_str().unwrap().to_string();
    let row = |ids: &str, extra: &str| {
        format!(
            "repo: {identity}\nfiles: a.py\nseverity: CRITICAL\ncategory: task\nstatus: open\nfinding_ids: {ids}\n{extra}"
        )
    };
    let summary = "[CRITICAL][task] app: hostile";
    let many: Vec<String> = (0..250).map(|i| format!("a{i}")).collect();
    let files = format!("files: {}\n", vec!["f"; 300].join(", "));
    for content in [
        row(&many.join(", "), ""),
        row("agf_ 1", ""),
        row(
            "agf_00000000000000a2",
            &format!("session: {}\n", "x".repeat(5000)),
        ),
        row("agf_00000000000000a3", "").replace("files: a.py\n", &files),
    ] {
        write_row(&env, &ledger.url, "code_finding", summary, &content);
    }
    crate::support::seen(&env, &[&good]);
    let out = env.task_pull(&origin, "c", &[]);
    // The critical rows would have come first; the take never hands them out (the ledger's
    // index holds no row that does not read), and the good task is pulled.
    insta::assert_snapshot!("hostile_finding_rows_task_pull", snapshot(&out, &env));
    // A reader of the window, in the clone the pull made, names each bad row once.
    let mut env = env;
    env.set("WORKSPACE_PATH", env.path("c/work").display().to_string());
    let out = env.run(&["tool", "call", "get_problems", "--args", "{}"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains(&good), "{out:?}");
    assert!(
        out.stderr
            .contains("skipped 4 finding row(s) that fail validation"),
        "{out:?}"
    );
}

#[test]
fn endless_files_are_refused_at_their_bound() {
    let mut env = TestEnv::new();
    let (_, origin) = env.origin("app", &[("a.py", "x = 1\n")]);
    let work = env.path("work");
    env.git(
        &env.cwd(),
        &["clone", "-q", &origin, &work.display().to_string()],
    );
    let w = work.display().to_string();
    let out = env.run(&[
        "finding",
        "close",
        "--commits-from",
        "/dev/zero",
        "--work-dir",
        &w,
    ]);
    insta::assert_snapshot!("endless_commits_file", snapshot(&out, &env));
    // A config path that never ends is skipped with its cause, not read into memory.
    env.set("SUBSTRATE_CONFIG_PATH", "/dev/zero");
    let out = env.run(&["attach", "--check"]);
    insta::assert_snapshot!("endless_config_file", snapshot(&out, &env));
}

#[test]
fn a_password_in_the_origin_is_never_printed_written_or_sent() {
    let env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    // A clone that fails: its error quotes the URL, and the withdrawal records the error.
    // (The git daemon refuses userinfo in a git:// URL, so a successful clone with credentials
    // waits for an https origin in the tests.)
    let port = crate::support::closed_port();
    let origin = format!("http://cell:hunter2secret@127.0.0.1:{port}/app.git");
    let out = env.run(&[
        "finding",
        "record",
        "--origin",
        &origin,
        "--file",
        "a.py",
        "--summary",
        "a task",
        "--severity",
        "HIGH",
        "--category",
        "task",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let failed = env.task_pull(&origin, "c1", &[]);
    // Nothing answers at the origin: the fleet's outage, try later.
    assert_eq!(failed.code, 4, "{failed:?}");
    assert!(failed.stderr.contains("cell:***@127.0.0.1"), "{failed:?}");
    assert!(failed.stdout.contains("cell:***@127.0.0.1"), "{failed:?}");
    // Everything the ledger holds, as any key of the org reads it.
    let pointer = json!({"type": "conceptSearch", "shape": "finding_verdict", "limit": 100});
    let rows = resolve(&env, &ledger.url, pointer)["concepts"].to_string();
    assert!(
        rows.contains("reason: cloning"),
        "the withdrawal says why: {rows}"
    );
    for (what, text) in [
        ("the record", out.stdout.as_str()),
        ("stderr", &failed.stderr),
        ("stdout", &failed.stdout),
        ("the ledger", &rows),
    ] {
        assert!(
            !text.contains("hunter2"),
            "{what} holds the password: {text}"
        );
    }
}

/// A shim in front of the ledger that forwards every request as it is, except that once
/// `reject` is seen in a request body it answers 401 `key_rejected`: a key revoked partway.
fn revoking_shim(ledger: &str, reject: &'static str) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let upstream = ledger.trim_start_matches("http://").to_string();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let upstream = upstream.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut conn = conn;
                loop {
                    let mut head = String::new();
                    let mut line = String::new();
                    let mut length = 0usize;
                    while reader.read_line(&mut line).unwrap_or(0) > 0 {
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        let end = line == "\r\n";
                        head.push_str(&line);
                        line.clear();
                        if end {
                            break;
                        }
                    }
                    if head.is_empty() {
                        return;
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let answer = if String::from_utf8_lossy(&body).contains(reject) {
                        let b = br#"{"error":"key_rejected"}"#;
                        let mut a = format!("HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", b.len()).into_bytes();
                        a.extend_from_slice(b);
                        a
                    } else {
                        let mut up = std::net::TcpStream::connect(&upstream).unwrap();
                        let head = head.replacen("\r\n\r\n", "\r\nconnection: close\r\n\r\n", 1);
                        up.write_all(head.as_bytes()).unwrap();
                        up.write_all(&body).unwrap();
                        let mut a = Vec::new();
                        up.read_to_end(&mut a).unwrap();
                        a
                    };
                    if conn.write_all(&answer).is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

#[test]
fn a_key_rejected_partway_is_not_attached_like_at_the_start() {
    let mut env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    let (_, origin) = env.origin("app", &[("a.py", "x = 1\n")]);
    let config = std::fs::read_to_string(env.home().join(".substrate/config.json")).unwrap();
    let key = serde_json::from_str::<Value>(&config).unwrap()["metabob"]["apiKey"]
        .as_str()
        .unwrap()
        .to_string();
    // Attaching passes through; the first read of the task board is refused.
    let shim = revoking_shim(&ledger.url, "conceptSearch");
    env.set("METABOB_API_KEY", key);
    env.set("DISCOVERY_ENDPOINT", shim);
    let out = env.task_pull(&origin, "c", &[]);
    insta::assert_snapshot!("key_rejected_partway", snapshot(&out, &env));
}

#[test]
fn an_answer_too_large_to_read_is_named_as_such() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0; 4096];
            let _ = conn.read(&mut buf);
            // It declares 100 MiB and sends only a start: the client must not wait for the rest.
            let _ = conn.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 104857600\r\n\r\n{\"a\":",
            );
        }
    });
    let mut env = TestEnv::new();
    env.set(
        "METABOB_API_KEY",
        "mb_live_0123456789abcdef0123456789abcdef",
    );
    env.set("DISCOVERY_ENDPOINT", url);
    let out = env.run(&["attach", "--check"]);
    insta::assert_snapshot!("answer_too_large", snapshot(&out, &env));
}

/// A finding row of `identity` as large as every reader accepts, and as large again once JSON
/// escapes it: its body is control characters, six bytes each on the wire.
fn largest_finding(identity: &str, i: usize) -> (String, String) {
    use metabob_wire::row::{content_cap, summary_cap};
    let head = format!(
        "repo: {identity}\nfiles: a.py\nseverity: LOW\ncategory: style\nstatus: open\nfinding_ids: agf_{i:016x}\n\n"
    );
    let content = format!("{head}{}", "\u{1}".repeat(content_cap() - head.len()));
    let prefix = "[LOW][style] app: ";
    let summary = format!("{prefix}{}", "\u{1}".repeat(summary_cap() - prefix.len()));
    (summary, content)
}

#[test]
fn rows_at_the_bound_blind_no_reader_and_one_byte_more_is_refused_naming_the_field() {
    let env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    let (_, key) = ledger.create_key(&env, "default", "read,write");
    let (_, origin) = env.origin("app", &[("a.py", "x = 1\n")]);
    let identity = env.record_task(&origin, "an older task", "LOW")["repository"]
        .as_str()
        .unwrap()
        .to_string();
    let write = |summary: &str, content: &str| {
        ledger.resolve(
            &key,
            json!({"type": "concept_create_write", "conceptData": {"shape": "code_finding",
                "source_type": "metabob_annotation", "summary": summary, "content": content}}),
        )
    };

    // One byte past a field's cap: 413, naming the field and the cap, and nothing is stored.
    let (summary, content) = largest_finding(&identity, 0);
    let (status, v) = write(&summary, &format!("{content}x"));
    assert_eq!(status, 413, "{v}");
    assert_eq!(v["error"], "row_too_large", "{v}");
    assert_eq!(v["field"], "content", "{v}");
    let cap = metabob_wire::row::content_cap();
    assert_eq!(v["max_bytes"], cap, "{v}");
    let (status, v) = write(&format!("{summary}x"), &content);
    assert_eq!((status, v["field"].as_str()), (413, Some("summary")), "{v}");

    // Rows at the bound: their answer as one page of 300 would be past the 64 MiB a client
    // reads; the ledger cuts its pages by bytes instead.
    for i in 1..=48 {
        let (summary, content) = largest_finding(&identity, i);
        let (status, v) = write(&summary, &content);
        assert_eq!(status, 201, "row {i}: {v}");
    }
    let task = env.record_task(&origin, "after the flood", "HIGH");
    let task = task["finding_ids"][0].as_str().unwrap().to_string();

    let out = env.task_pull(&origin, "c", &["--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["task"]["task_id"], task.as_str(), "{report}");

    let mut env = env;
    env.set("WORKSPACE_PATH", env.path("c/work").display().to_string());
    let out = env.run(&["tool", "call", "get_problems", "--args", "{}"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains(&task),
        "get_problems recalls the task: {out:?}"
    );

    // A row past the bound written before it existed is left out of the page by name; the
    // rest of the page is read. (On SQLite, whose file the test can reach.)
    if ledger.store.is_none() {
        let conn = rusqlite::Connection::open(ledger.data.join("ledger.db")).unwrap();
        let n = conn
            .execute(
                "UPDATE concepts SET content = content || ?1 WHERE id = (SELECT id FROM concepts
                   WHERE shape = 'code_finding' AND content LIKE '%agf_0000000000000001%')",
                [("y".repeat(2 * 1024 * 1024))],
            )
            .unwrap();
        assert_eq!(n, 1);
        let out = env.run(&["tool", "call", "get_problems", "--args", "{}"]);
        assert_eq!(out.code, 0, "{out:?}");
        assert!(out.stdout.contains(&task), "{out:?}");
        assert!(
            out.stderr.contains("left out by the ledger: row_too_large"),
            "{out:?}"
        );
    }
}

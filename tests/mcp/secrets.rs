//! What the server never keeps: a secret the guard refuses, and argument values in the call log.

use serde_json::{Value, json};

use super::project;
use crate::support::TestEnv;
use crate::support::mcp::{Client, Session, shown};

#[tokio::test]
async fn the_guard_refuses_a_secret_before_anything_is_stored() {
    let env = TestEnv::new();
    let ws = env.path("proj");
    project(&env, &ws);
    let s = Session::start(&env, &ws, Client::default()).await;
    let token = format!("ghp_{}", "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8");
    let (text, err) = s
        .call(
            "record_finding",
            json!({"files": ["a.py"], "summary": format!("token {token} leaks"), "severity": "LOW", "category": "security"}),
        )
        .await;
    assert!(!text.contains(&token));
    insta::assert_snapshot!("guard_refused_record_finding", shown(&text, err, &env));
    let problems = s.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("guard_get_problems_after_refusal", problems);
}

#[tokio::test]
async fn the_call_log_records_names_and_sizes_never_values() {
    let mut env = TestEnv::new();
    let log = env.path("calls.jsonl");
    env.set("METABOB_CALL_LOG", log.display().to_string());
    let ws = env.path("proj");
    project(&env, &ws);
    let s = Session::start(&env, &ws, Client::default()).await;
    s.ok("search_codebase", json!({"query": "secret-looking-query"}))
        .await;
    let _ = s.call("get_problems", json!({"limit": 500})).await;
    let text = std::fs::read_to_string(&log).expect("call log");
    assert!(!text.contains("secret-looking-query"), "{text}");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0]["tool"], "search_codebase");
    assert_eq!(lines[0]["via"], "stdio");
    assert_eq!(lines[0]["args"], "query=string(20)");
    assert_eq!(lines[0]["outcome"], "ok");
    assert_eq!(lines[1]["outcome"], "error");
    assert!(lines[0]["ms"].is_u64() && lines[0]["session"].is_string());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&log).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // A log that cannot be written never fails the call.
    let mut env = env;
    env.set("METABOB_CALL_LOG", "/proc/no/such/dir/log");
    let s = Session::start(&env, &ws, Client::default()).await;
    s.ok("get_metrics", json!({})).await;
}

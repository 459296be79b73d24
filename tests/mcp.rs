//! The MCP server: an in-process rmcp client over a duplex pipe for every tool, against the
//! embedded ledger and detached; and the real binary on stdio.

// Roots are deprecated by SEP-2577, and still what MCP clients send.
#![allow(deprecated)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use metabob_mcp_server::Ctx;
use metabob_wire::env::Env;
use serde_json::{Value, json};

use crate::support::mcp::{Client, Session, shown};
use crate::support::{TestEnv, normalize, snapshot, wait_until};

/// A checkout with history: `a.py` and `b.py` change together, `c.py` alone.
pub fn project(env: &TestEnv, dir: &Path) {
    std::fs::create_dir_all(dir).expect("project dir");
    env.git(dir, &["init", "-q", "-b", "main"]);
    let write = |p: &str, s: &str| std::fs::write(dir.join(p), s).expect("write");
    write(
        "a.py",
        "from b import helper\n\ndef run():\n    return helper()\n",
    );
    write("b.py", "def helper():\n    return 1\n");
    write("c.py", "def other():\n    return 3\n");
    write(
        "test_a.py",
        "from a import run\n\ndef test_run():\n    assert run() == 1\n",
    );
    env.git(dir, &["add", "-A"]);
    env.git(dir, &["commit", "-q", "-m", "start"]);
    for i in 0..3 {
        write(
            "a.py",
            &format!("from b import helper\n\ndef run():\n    return helper() + {i}\n"),
        );
        write("b.py", &format!("def helper():\n    return {i}\n"));
        env.git(dir, &["commit", "-qam", &format!("a and b {i}")]);
    }
    write("c.py", "def other():\n    return 4\n");
    env.git(dir, &["commit", "-qam", "c alone"]);
}

#[tokio::test]
async fn initialize_carries_instructions_and_lists_every_tool() {
    let env = TestEnv::new();
    let s = Session::start(&env, &env.cwd(), Client::default()).await;
    let info = s.client.peer_info().expect("server info");
    let instructions = info.instructions.clone().unwrap_or_default();
    assert!(instructions.contains("attach --check"), "{instructions}");
    let tools = s.client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    let served: Vec<&str> = metabob_mcp_server::tools::TOOLS
        .iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, served);
    for named in metabob_mcp_server::instructions::named_tools() {
        assert!(names.contains(&named), "instructions name {named}");
    }
    for t in &tools {
        assert_eq!(
            t.input_schema.get("type"),
            Some(&json!("object")),
            "{}",
            t.name
        );
        assert!(
            !Value::Object((*t.input_schema).clone())
                .to_string()
                .contains("$ref")
        );
    }
}

#[tokio::test]
async fn detached_local_tools_work_and_substrate_halves_name_the_cause() {
    let env = TestEnv::new();
    let ws = env.path("proj");
    project(&env, &ws);
    let s = Session::start(&env, &ws, Client::default()).await;

    let init = s
        .shown(
            &env,
            "init_workspace",
            json!({"recently_changed_files": ["a.py"]}),
        )
        .await;
    insta::assert_snapshot!("detached_init_workspace", init);
    let found = s
        .shown(&env, "search_codebase", json!({"query": "helper"}))
        .await;
    insta::assert_snapshot!("detached_search_codebase", found);
    let co = s
        .shown(
            &env,
            "predict_cochanges",
            json!({"changed_files": ["a.py"]}),
        )
        .await;
    insta::assert_snapshot!("detached_predict_cochanges", co);
    let impact = s
        .shown(&env, "analyze_impact", json!({"changed_files": ["b.py"]}))
        .await;
    insta::assert_snapshot!("detached_analyze_impact", impact);
    let no_tests = s
        .shown(
            &env,
            "analyze_impact",
            json!({"changed_files": ["b.py"], "include_tests": false}),
        )
        .await;
    insta::assert_snapshot!("detached_analyze_impact_without_tests", no_tests);
    let assign = s
        .shown(
            &env,
            "assign_git_changes",
            json!({"changed_files": ["a.py"]}),
        )
        .await;
    insta::assert_snapshot!("detached_assign_git_changes", assign);

    let rec = s
        .ok(
            "record_finding",
            json!({"files": ["b.py"], "summary": "helper returns a constant", "severity": "HIGH",
                   "category": "correctness", "line_start": 1, "line_end": 2}),
        )
        .await;
    insta::assert_snapshot!("detached_record_finding", normalize(&rec, &env));
    let id = rec
        .split_whitespace()
        .nth(1)
        .expect("Recorded <id>")
        .trim_end_matches(',')
        .to_string();
    assert!(id.starts_with("agf_"), "{rec}");

    let problems = s.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("detached_get_problems", problems);
    let dup = s
        .shown(
            &env,
            "record_finding",
            json!({"files": ["b.py"], "summary": "Helper returns a constant!", "severity": "LOW", "category": "x"}),
        )
        .await;
    insta::assert_snapshot!("detached_record_finding_duplicate", dup);
    let notes = s
        .shown(
            &env,
            "annotate_component",
            json!({"problem_id": id, "mode": "recommend"}),
        )
        .await;
    insta::assert_snapshot!("detached_annotate_component", notes);
    let missing = s
        .shown(
            &env,
            "annotate_component",
            json!({"problem_id": "agf_nope"}),
        )
        .await;
    insta::assert_snapshot!("detached_annotate_component_unknown_id", missing);
    let metrics = s.shown(&env, "get_metrics", json!({})).await;
    insta::assert_snapshot!("detached_get_metrics", metrics);
    let ctx = s
        .shown(
            &env,
            "get_analysis_context",
            json!({"recently_changed_files": ["a.py"]}),
        )
        .await;
    insta::assert_snapshot!("detached_get_analysis_context", ctx);
    let claim = s
        .shown(&env, "claim_finding", json!({"problem_id": id}))
        .await;
    insta::assert_snapshot!("detached_claim_finding", claim);

    // An uncommitted change in the finding's file: pending, nothing retired.
    std::fs::write(ws.join("b.py"), "def helper():\n    return compute()\n").expect("edit");
    let pending = s
        .shown(&env, "mark_complete", json!({"problem_id": id}))
        .await;
    insta::assert_snapshot!("detached_mark_complete_uncommitted", pending);
    assert!(s.ok("get_problems", json!({})).await.contains(&id));
    // Committed (no origin remote: nothing to push to): fixed, and retired locally.
    env.git(&ws, &["commit", "-qam", "fix helper"]);
    let done = s
        .shown(&env, "mark_complete", json!({"problem_id": id}))
        .await;
    insta::assert_snapshot!("detached_mark_complete_fixed", done);
    assert!(!s.ok("get_problems", json!({})).await.contains(&id));
}

/// Detached, every substrate-only tool answers the attachment's cause in one line and sends
/// nothing, while the local tools keep working.
#[tokio::test]
async fn detached_substrate_tools_answer_the_cause_in_one_line() {
    let env = TestEnv::new();
    let ws = env.path("proj");
    project(&env, &ws);
    let s = Session::start(&env, &ws, Client::default()).await;
    let calls = [
        ("path_activity", json!({"paths": ["a.py"]})),
        ("concept_search", json!({"query": "parser"})),
        ("concept_neighbors", json!({"concept_id": "concept_1"})),
        ("concept_usage_stats", json!({"concept_id": "concept_1"})),
        ("concept_sequence", json!({"concept_id": "concept_1"})),
        (
            "concept_link",
            json!({"from_concept_id": "concept_1", "to_concept_id": "concept_2", "edge_type": "related_to"}),
        ),
        (
            "concept_create",
            json!({"content": "a note", "shape": "memo", "source_type": "memo"}),
        ),
        (
            "concept_record_usage",
            json!({"concept_id": "concept_1", "outcome": "success"}),
        ),
        ("registry_query", json!({"mode": "shapes"})),
        ("execution_trace", json!({})),
        ("resolve_impulse", json!({"shape": "memoryNote"})),
        (
            "run_goal_async",
            json!({"goal": "fix it", "variables": {"repo": "https://git.example/app.git"}}),
        ),
        ("run_goal", json!({"goal": "fix it"})),
        ("goal_status", json!({"dispatch_id": "dispatch_1"})),
        ("goal_reasoning", json!({"dispatch_id": "dispatch_1"})),
        (
            "provide_feedback",
            json!({"dispatch_id": "dispatch_1", "verdict": "reached", "rationale": "the test passes"}),
        ),
    ];
    let mut shown = Vec::new();
    for (tool, args) in calls {
        let (text, err) = s.call(tool, args).await;
        assert!(err, "{tool}: {text}");
        assert_eq!(text.lines().count(), 1, "{tool}: {text}");
        assert!(
            text.starts_with(&format!("{tool}: not attached: ")),
            "{text}"
        );
        shown.push(normalize(&text, &env));
    }
    insta::assert_snapshot!("detached_substrate_tools", shown.join("\n"));
    let metrics = s.ok("get_metrics", json!({})).await;
    assert!(metrics.contains("Code graph"), "{metrics}");
}

#[tokio::test]
async fn invalid_input_is_a_tool_error_not_a_crash() {
    let env = TestEnv::new();
    let s = Session::start(&env, &env.cwd(), Client::default()).await;
    let cases = [
        ("predict_cochanges", json!({})),
        ("predict_cochanges", json!({"changed_files": "a.py"})),
        ("get_problems", json!({"limit": 101})),
        (
            "record_finding",
            json!({"files": ["a"], "summary": "s", "category": "c", "severity": "URGENT"}),
        ),
        ("mark_complete", json!({"problem_id": "BUG-1"})),
        (
            "mark_complete",
            json!({"problem_id": "agf_1", "fix_commit": "xyz"}),
        ),
        ("init_workspace", json!({"workspace_path": "/no/such/dir"})),
        ("no_such_tool", json!({})),
    ];
    let mut replies = String::new();
    for (tool, args) in cases {
        let (text, err) = s.call(tool, args.clone()).await;
        assert!(err, "{tool} {args}: {text}");
        replies.push_str(&format!("{tool} {args}\n{}\n\n", normalize(&text, &env)));
    }
    insta::assert_snapshot!("invalid_input_replies", replies);
    // The server is still there.
    assert!(!s.call("get_metrics", json!({})).await.1);
}

#[tokio::test]
async fn arguments_outside_the_schema_are_refused_naming_the_field() {
    let env = TestEnv::new();
    let s = Session::start(&env, &env.cwd(), Client::default()).await;
    let tools = s.client.list_all_tools().await.expect("tools/list");
    for t in &tools {
        assert_eq!(
            t.input_schema.get("additionalProperties"),
            Some(&json!(false)),
            "{} takes arguments it does not name",
            t.name
        );
    }
    let context = tools
        .iter()
        .find(|t| t.name == "get_analysis_context")
        .expect("get_analysis_context is listed");
    let scope = &Value::Object((*context.input_schema).clone())["properties"]["scope"];
    // null is what an omitted optional argument is.
    assert_eq!(
        scope["enum"],
        json!(["session", "project", "org", null]),
        "{scope}"
    );

    let cases = [
        ("get_analysis_context", json!({"scope": "galaxy"})),
        ("get_analysis_context", json!({"scope": 3})),
        ("get_problems", json!({"limit": 5, "foo": 1})),
        ("get_problems", json!({"lmit": 5, "sevrity": ["HIGH"]})),
        ("get_metrics", json!({"verbose": true})),
        ("predict_cochanges", json!({"changed_file": ["a.py"]})),
        (
            "claim_finding",
            json!({"problem_id": "agf_1", "action": "steal"}),
        ),
        (
            "concept_link",
            json!({"from_concept_id": "a", "to_concept_id": "b", "edge_type": "likes"}),
        ),
        ("get_problems", json!({"severity": ["HIGH", "teach"]})),
        (
            "record_finding",
            json!({"files": ["a"], "summary": "s", "category": "c", "severity": "LOW",
                "line_start": 5_000_000_000u64}),
        ),
    ];
    let mut replies = String::new();
    for (tool, args) in cases {
        let (text, err) = s.call(tool, args.clone()).await;
        assert!(err, "{tool} {args}: {text}");
        assert!(
            text.starts_with(&format!("{tool}: invalid arguments: ")),
            "{tool} {args}: {text}"
        );
        replies.push_str(&format!("{tool} {args}\n{}\n\n", normalize(&text, &env)));
    }
    insta::assert_snapshot!("strict_input_replies", replies);
    // A value the seed names is taken, and the default still is.
    for scope in ["session", "project", "org"] {
        s.ok("get_analysis_context", json!({"scope": scope})).await;
    }
    s.ok("get_analysis_context", json!({})).await;
}

#[tokio::test]
async fn the_workspace_comes_from_roots_and_the_plugin_folder_is_none() {
    let mut env = TestEnv::new();
    let plugin = env.path("plugin");
    let ws = env.path("proj");
    project(&env, &ws);
    std::fs::create_dir_all(&plugin).expect("plugin dir");
    env.set("PLUGIN_ROOT", plugin.display().to_string());

    let s = Session::start(&env, &plugin, Client::default()).await;
    let text = s.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("roots_plugin_folder_get_problems", text);
    let text = s
        .shown(&env, "init_workspace", json!({"workspace_path": "."}))
        .await;
    insta::assert_snapshot!("roots_plugin_folder_init_workspace", text);
    s.ok(
        "init_workspace",
        json!({"workspace_path": ws.display().to_string()}),
    )
    .await;
    let ctx = s.shown(&env, "get_analysis_context", json!({})).await;
    insta::assert_snapshot!("roots_context_from_init_workspace", ctx);

    // A client that declares roots: its first file: root is the workspace, by real path.
    let link = env.path("link");
    std::os::unix::fs::symlink(&ws, &link).expect("symlink");
    let client = Client::with_roots(vec![
        "https://example.com/not-a-workspace".into(),
        format!("file://{}", link.display()),
    ]);
    let roots = client.roots.clone().expect("declared");
    let s = Session::start(&env, &plugin, client).await;
    let ctx = s.shown(&env, "get_analysis_context", json!({})).await;
    insta::assert_snapshot!("roots_context_from_first_root", ctx);

    // roots/list_changed moves the workspace, never the identity.
    let other = env.path("other");
    project(&env, &other);
    *roots.lock().expect("roots lock") = vec![format!("file://{}", other.display())];
    s.client
        .notify_roots_list_changed()
        .await
        .expect("notify roots changed");
    let real_other = std::fs::canonicalize(&other).expect("real path");
    let moved = format!(
        "Workspace: {} (from the client's first root)",
        real_other.display()
    );
    let mut ctx = String::new();
    for _ in 0..50 {
        ctx = s.ok("get_analysis_context", json!({})).await;
        if ctx.contains(&moved) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ctx.contains(&moved), "{ctx}");
    insta::assert_snapshot!("roots_context_after_roots_changed", normalize(&ctx, &env));
}

#[tokio::test]
async fn findings_tools_share_through_the_ledger() {
    let mut env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let (_bare, url) = env.origin(
        "app",
        &[("a.py", "def a():\n    return 1\n"), ("b.py", "x = 1\n")],
    );
    let one = env.path("one");
    let two = env.path("two");
    for d in [&one, &two] {
        env.git(
            env.root.path(),
            &["clone", "-q", &url, &d.display().to_string()],
        );
    }
    env.set("VESSEL_ID", "vessel-one");
    let a = Session::start(&env, &one, Client::default()).await;
    env.set("VESSEL_ID", "vessel-two");
    env.set(
        "METABOB_STORE",
        env.path("store-two.sqlite").display().to_string(),
    );
    let b = Session::start(&env, &two, Client::default()).await;

    let rec = a
        .ok(
            "record_finding",
            json!({"files": ["a.py"], "summary": "a returns a constant", "severity": "MEDIUM", "category": "correctness"}),
        )
        .await;
    insta::assert_snapshot!("shared_record_finding", normalize(&rec, &env));
    let id = rec.split_whitespace().nth(1).expect("id").to_string();

    // The other checkout sees it, and its duplicate check finds it.
    let seen = b.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("shared_get_problems_from_the_other_checkout", seen);
    let dup = b
        .shown(
            &env,
            "record_finding",
            json!({"files": ["a.py"], "summary": "A returns a constant.", "severity": "LOW", "category": "c"}),
        )
        .await;
    insta::assert_snapshot!("shared_record_finding_duplicate", dup);
    let mine = a.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("shared_get_problems_local_and_shared", mine);

    // Claims: one holder; the other is told who.
    let claimed = b
        .shown(
            &env,
            "claim_finding",
            json!({"problem_id": id, "minutes": 30}),
        )
        .await;
    insta::assert_snapshot!("shared_claim_finding", claimed);
    let held = a
        .shown(&env, "claim_finding", json!({"problem_id": id}))
        .await;
    insta::assert_snapshot!("shared_claim_finding_held_by_another", held);
    let renew = a
        .shown(
            &env,
            "claim_finding",
            json!({"problem_id": id, "action": "renew"}),
        )
        .await;
    insta::assert_snapshot!("shared_claim_finding_renew_refused", renew);
    let board = a.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("shared_get_problems_claimed_by_another", board);

    // The fix: committed but unpushed is pending; pushed, it closes, seeds retire, recall shows it.
    std::fs::write(one.join("a.py"), "def a():\n    return compute()\n").expect("edit");
    env.git(&one, &["commit", "-qam", "fix a"]);
    let pending = a
        .shown(&env, "mark_complete", json!({"problem_id": id}))
        .await;
    insta::assert_snapshot!("shared_mark_complete_unpushed", pending);
    env.git(&one, &["push", "-q", "origin", "main"]);
    let sha = env.git(&one, &["rev-parse", "HEAD"]);
    let done = a.ok("mark_complete", json!({"problem_id": id})).await;
    assert!(done.contains(&format!("fix: commit {sha}")), "{done}");
    insta::assert_snapshot!("shared_mark_complete_fixed", normalize(&done, &env));
    let after = b.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("shared_get_problems_fixed_elsewhere", after);
    env.git(&two, &["pull", "-q"]);
    let after = b.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("shared_get_problems_fixed_here", after);
    let closed = b
        .shown(&env, "claim_finding", json!({"problem_id": id}))
        .await;
    insta::assert_snapshot!("shared_claim_finding_closed", closed);

    // The fleet case: b records, a discards it by the concept id recall shows; b's next recall
    // retires b's own seed.
    let rec = b
        .ok(
            "record_finding",
            json!({"files": ["b.py"], "summary": "x is never read", "severity": "LOW", "category": "style"}),
        )
        .await;
    insta::assert_snapshot!(
        "shared_record_finding_other_checkout",
        normalize(&rec, &env)
    );
    let concept = rec
        .split_whitespace()
        .find(|w| w.starts_with("concept_"))
        .expect("concept id")
        .trim_end_matches(',')
        .to_string();
    let discarded = a
        .shown(
            &env,
            "mark_complete",
            json!({"problem_id": concept, "action": "discard"}),
        )
        .await;
    insta::assert_snapshot!("shared_mark_complete_discard", discarded);
    let after = b.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("shared_get_problems_retracted", after);
    let metrics = b.shown(&env, "get_metrics", json!({})).await;
    insta::assert_snapshot!("shared_get_metrics", metrics);

    // Tasks are listed apart, the next move first.
    let task = a
        .ok(
            "record_finding",
            json!({"files": ["b.py"], "summary": "rename x", "severity": "MEDIUM", "category": "task"}),
        )
        .await;
    insta::assert_snapshot!("shared_record_task", normalize(&task, &env));
    let task_id = task.split_whitespace().nth(1).expect("id").to_string();
    let board = b.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("shared_get_problems_with_a_task", board);
    let claimed = b
        .shown(&env, "claim_finding", json!({"problem_id": task_id}))
        .await;
    insta::assert_snapshot!("shared_claim_task", claimed);
    let board = b.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("shared_get_problems_with_a_claimed_task", board);
    let board = a
        .shown(&env, "get_problems", json!({"category": ["task"]}))
        .await;
    insta::assert_snapshot!("shared_get_problems_tasks_only", board);
}

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

#[tokio::test]
async fn a_restarted_server_answers_from_the_persisted_index_until_a_file_changes() {
    let env = TestEnv::new();
    let ws = env.path("proj");
    project(&env, &ws);
    let s = Session::start(&env, &ws, Client::default()).await;
    s.ok("init_workspace", json!({})).await;
    drop(s);
    let s = Session::start(&env, &ws, Client::default()).await;
    let impact = s
        .ok("analyze_impact", json!({"changed_files": ["b.py"]}))
        .await;
    assert!(impact.contains("function run"), "{impact}");
    let again = s.shown(&env, "init_workspace", json!({})).await;
    insta::assert_snapshot!("persisted_index_reused", again);
    drop(s);
    std::fs::write(ws.join("c.py"), "def other():\n    return 5  # grown\n").expect("edit");
    let s = Session::start(&env, &ws, Client::default()).await;
    let text = s
        .shown(&env, "analyze_impact", json!({"changed_files": ["b.py"]}))
        .await;
    insta::assert_snapshot!("persisted_index_stale", text);
}

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

/// A ledger outage under a running server: the tools answer its cause while it lasts, and the
/// first call after the ledger is back works, with no restart of `serve`.
#[tokio::test(flavor = "multi_thread")]
async fn a_ledger_outage_is_named_by_the_tools_and_the_next_call_after_it_works() {
    let env = TestEnv::new();
    let mut ledger = env.ledger("main", &[]);
    let (_bare, url) = env.origin("app", &[("a.py", "def a():\n    return 1\n")]);
    let one = env.path("one");
    env.git(
        env.root.path(),
        &["clone", "-q", &url, &one.display().to_string()],
    );
    let task = env.record_task(&url, "make a() return 2", "HIGH")["finding_ids"][0]
        .as_str()
        .unwrap()
        .to_string();
    let s = Session::start(&env, &one, Client::default()).await;
    let before = s.ok("get_problems", json!({})).await;
    assert!(before.contains(&task), "{before}");

    let _ = ledger.child.kill();
    let _ = ledger.child.wait();
    let (during, _) = s.call("get_problems", json!({})).await;
    assert!(
        during.contains("recall did not run: anchor_unreachable")
            && during.contains("connect_refused"),
        "the outage is named, not reported as no findings: {during}"
    );

    ledger.restart();
    let mut after = String::new();
    // The attachment retries a transient cause on its own schedule; a call soon after the
    // ledger is back finds it.
    for _ in 0..40 {
        after = s.call("get_problems", json!({})).await.0;
        if after.contains(&task) && !after.contains("recall did not run") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(after.contains(&task), "{after}");
    assert!(!after.contains("recall did not run"), "{after}");
}

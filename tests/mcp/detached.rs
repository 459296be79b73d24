//! Every tool over an in-process client, detached: the local tools work, the substrate ones name
//! the cause, and input outside the schema is a tool error naming the field.

use serde_json::{Value, json};

use super::project;
use crate::support::mcp::{Client, Session};
use crate::support::{TestEnv, normalize};

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

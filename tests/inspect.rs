//! The inspection tools against a real `ledger serve`, with the fixture producer standing in for
//! activity-api and the memory store: what each tool sends (and, for a refusal, that it sends
//! nothing at all), and what it prints.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::mcp::{Client, Session};
use crate::support::{Producer, TestEnv, normalize};

/// Writes the fixture producer's answers: shape → {status, body, delay_ms, echo}.
fn fixtures(path: &Path, answers: &Value) {
    std::fs::write(path, answers.to_string()).unwrap();
}

/// How many `POST /resolve` the ledger has served, from its public `/health`.
fn resolves(ledger_url: &str) -> u64 {
    let addr = ledger_url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let health: Value = serde_json::from_str(body).unwrap();
    health["resolves"].as_u64().unwrap()
}

fn count(p: &Producer, shape: &str) -> u64 {
    p.counts()[shape].as_u64().unwrap_or(0)
}

fn producer_arg(shape: &str, p: &Producer) -> String {
    format!("{shape}={}", p.url)
}

#[tokio::test]
async fn resolve_impulse_refuses_before_sending_and_passes_allowed_shapes() {
    let env = TestEnv::new();
    let fx = env.path("fixtures.json");
    let long: Vec<Value> = (0..200)
        .map(|i| json!({"key": format!("status-{i}"), "value": i}))
        .collect();
    fixtures(
        &fx,
        &json!({
            "memoryNote": {"body": {"notes": [{"id": "note_1", "text": "ledger restarts lose nothing"}]}},
            "memoryNote_write": {"status": 201, "echo": true},
            "traceAggregateReport": {"body": {"rows": long}},
            "llmSpendSummary": {"status": 503, "body": {"error": "spend store warming up"}},
            "bash": {"body": {"ran": true}},
            "concept_write": {"body": {"written": true}},
        }),
    );
    let p = Producer::start(&fx);
    let mut args = Vec::new();
    for shape in [
        "memoryNote",
        "memoryNote_write",
        "traceAggregateReport",
        "llmSpendSummary",
        "bash",
        "concept_write",
    ] {
        args.push("--producer".to_string());
        args.push(producer_arg(shape, &p));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ledger = env.ledger("main", &args);
    let s = Session::start(&env, &env.cwd(), Client::default()).await;
    let before = resolves(&ledger.url);

    let bash = s
        .shown(&env, "resolve_impulse", json!({"shape": "bash"}))
        .await;
    assert!(bash.contains("refused: bash"), "{bash}");
    assert!(bash.contains("dispatch the work as a goal"), "{bash}");
    insta::assert_snapshot!("resolve_impulse_refuses_bash", bash);
    let concept = s
        .shown(
            &env,
            "resolve_impulse",
            json!({"shape": "concept_write", "pointer": {"id": "concept_x", "content": "y"}}),
        )
        .await;
    assert!(concept.contains("concept_create"), "{concept}");
    insta::assert_snapshot!("resolve_impulse_refuses_concept_write", concept);
    // pointer.type overrides shape, and is what the allowlist decides on.
    let overridden = s
        .shown(
            &env,
            "resolve_impulse",
            json!({"shape": "memoryNote", "pointer": {"type": "bash", "command": "ls"}}),
        )
        .await;
    assert!(overridden.contains("refused: bash"), "{overridden}");
    let unlisted = s
        .shown(&env, "resolve_impulse", json!({"shape": "executionTraces"}))
        .await;
    assert!(unlisted.contains("refused: executionTraces"), "{unlisted}");
    assert_eq!(count(&p, "bash"), 0);
    assert_eq!(count(&p, "concept_write"), 0);
    assert_eq!(
        resolves(&ledger.url),
        before,
        "a refusal reached the ledger"
    );

    let note = s
        .shown(
            &env,
            "resolve_impulse",
            json!({"shape": "memoryNote", "pointer": {"query": "restarts"}}),
        )
        .await;
    insta::assert_snapshot!("resolve_impulse_memory_note", note);
    assert_eq!(p.last(), json!({"type": "memoryNote", "query": "restarts"}));
    assert_eq!(count(&p, "memoryNote"), 1);

    let long = s
        .shown(
            &env,
            "resolve_impulse",
            json!({"shape": "traceAggregateReport", "pointer": {"group_by": "status"}}),
        )
        .await;
    let body = long.split_once('\n').unwrap().1;
    let (kept, said) = body.rsplit_once('\n').unwrap();
    assert_eq!(kept.chars().count(), 2048, "{long}");
    assert!(said.starts_with("… cut at 2048 of "), "{said}");
    insta::assert_snapshot!("resolve_impulse_long_body_cut", long);

    let failing = s
        .shown(&env, "resolve_impulse", json!({"shape": "llmSpendSummary"}))
        .await;
    insta::assert_snapshot!("resolve_impulse_any_status", failing);

    // The memory write goes once, with the attachment's client claim and no operator field.
    let wrote = s
        .shown(
            &env,
            "resolve_impulse",
            json!({"shape": "memoryNote_write", "pointer": {"text": "a note"}}),
        )
        .await;
    insta::assert_snapshot!("resolve_impulse_memory_write", wrote);
    assert_eq!(count(&p, "memoryNote_write"), 1);
    let sent = p.last();
    assert!(sent.get("operator").is_none(), "{sent}");
    assert!(sent.get("client_claim").is_some(), "{sent}");
}

#[tokio::test]
async fn resolve_impulse_names_a_shape_nobody_produces() {
    let env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let s = Session::start(&env, &env.cwd(), Client::default()).await;
    let text = s
        .shown(&env, "resolve_impulse", json!({"shape": "memoryNote"}))
        .await;
    insta::assert_snapshot!("resolve_impulse_no_producer", text);
}

#[tokio::test]
async fn registry_query_lists_the_vocabulary_and_who_serves_a_shape() {
    let env = TestEnv::new();
    let fx = env.path("fixtures.json");
    fixtures(&fx, &json!({}));
    let p = Producer::start(&fx);
    let (a, b) = (
        producer_arg("memoryNote", &p),
        producer_arg("executionTraceList", &p),
    );
    let _ledger = env.ledger("main", &["--producer", &a, "--producer", &b]);
    let s = Session::start(&env, &env.cwd(), Client::default()).await;

    let all = s
        .shown(&env, "registry_query", json!({"mode": "shapes"}))
        .await;
    for shape in metabob_wire::shapes::LEDGER_SHAPES {
        assert!(all.contains(&format!("  {shape}\n")), "{shape}: {all}");
    }
    assert!(all.contains("  memoryNote\n"), "{all}");
    insta::assert_snapshot!("registry_query_shapes", all);
    let some = s
        .shown(
            &env,
            "registry_query",
            json!({"mode": "shapes", "shape": "CONCEPT"}),
        )
        .await;
    insta::assert_snapshot!("registry_query_shapes_filtered", some);
    let none = s
        .shown(
            &env,
            "registry_query",
            json!({"mode": "shapes", "shape": "nothing-like-it"}),
        )
        .await;
    insta::assert_snapshot!("registry_query_shapes_no_match", none);

    let ledger_shape = s
        .shown(
            &env,
            "registry_query",
            json!({"mode": "vessels", "shape": "conceptSearch"}),
        )
        .await;
    assert!(ledger_shape.contains("metabob-ledger"), "{ledger_shape}");
    insta::assert_snapshot!("registry_query_vessels_ledger_shape", ledger_shape);
    let producer_shape = s
        .shown(
            &env,
            "registry_query",
            json!({"mode": "vessels", "shape": "memoryNote"}),
        )
        .await;
    assert!(producer_shape.contains("producer-1"), "{producer_shape}");
    insta::assert_snapshot!("registry_query_vessels_producer_shape", producer_shape);
    let nobody = s
        .shown(
            &env,
            "registry_query",
            json!({"mode": "vessels", "shape": "llmSpendSummary"}),
        )
        .await;
    insta::assert_snapshot!("registry_query_vessels_nobody", nobody);
    let no_shape = s
        .shown(&env, "registry_query", json!({"mode": "vessels"}))
        .await;
    insta::assert_snapshot!("registry_query_vessels_needs_a_shape", no_shape);
}

#[tokio::test]
async fn execution_trace_on_the_embedded_ledger_alone_reads_its_goal_board() {
    // The ledger answers the trace shapes itself (SPEC.md §Goal board): with nothing
    // dispatched, the listing is empty and an id names no execution.
    let env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let s = Session::start(&env, &env.cwd(), Client::default()).await;
    let listing = s.shown(&env, "execution_trace", json!({})).await;
    assert_eq!(listing, "No execution trace is recorded for this org.");
    let one = s
        .shown(
            &env,
            "execution_trace",
            json!({"execution_id": "exec_k3j4"}),
        )
        .await;
    assert!(one.contains("(HTTP 404)"), "{one}");
    insta::assert_snapshot!("execution_trace_read_not_on_the_board", one);
}

fn trace_fixtures() -> Value {
    json!({
        "executionTraceList": {"body": {"total": 412, "limit": 10, "offset": 0, "executions": [
            {"id": "v_paradigm_execution_traces:⟨exec_old1⟩", "activity_id": "tmpl_summarize",
             "success": false, "status": "failed", "duration_ms": 850,
             "executed_at": "2026-03-01T10:00:00.000Z"},
            {"execution_id": "exec_new2", "activity_id": "tmpl_fix_tests", "success": true,
             "status": "success", "duration_ms": 12400, "executed_at": "2026-03-01T12:00:00.000Z"},
            {"execution_id": "walk-satisfier-1-1786760268981",
             "activity_id": "satisfier:webSearchResult", "success": true, "status": "success",
             "duration_ms": 310, "executed_at": "2026-03-01T11:00:00.000Z"},
            {"status": "success"}
        ]}},
        "activityExecutionTrace": {"body": {
            "execution_id": "exec_new2", "status": "failed", "success": false,
            "activity_template_id": "tmpl_fix_tests", "vessel_id": "development-vessel",
            "composition_chain": ["exec_root0", "exec_new2"],
            "tags": ["session:abc", "state_signature:tests-red", "reached:no",
                     "completion_shapes:test_report", "operator:ops-1", "reached:yes"],
            "failure_mode": {"type": "verification_failed", "message": "2 tests still fail"},
            "execution_trace": {"tasks": [
                {"resolver_id": "code_read_lines", "tier": 1, "success": true,
                 "input_shapes": ["goal"], "output_shapes": ["source_code"]},
                {"resolver_id": "bounded_shell", "tier": 2, "success": false,
                 "input_shapes": ["source_code"], "output_shapes": ["test_report"],
                 "failure_mode": "exit status 1"}
            ]}
        }}
    })
}

#[tokio::test]
async fn execution_trace_lists_and_reads_through_the_producer() {
    let env = TestEnv::new();
    let fx = env.path("fixtures.json");
    fixtures(&fx, &trace_fixtures());
    let p = Producer::start(&fx);
    let (a, b) = (
        producer_arg("executionTraceList", &p),
        producer_arg("activityExecutionTrace", &p),
    );
    let _ledger = env.ledger(
        "main",
        &[
            "--producer",
            &a,
            "--producer",
            &b,
            "--forward-timeout-ms",
            "1000",
        ],
    );
    let s = Session::start(&env, &env.cwd(), Client::default()).await;

    // A duration of a second or more reads in seconds; snapshots hold every duration as [N] ms.
    let (raw, _) = s.call("execution_trace", json!({"limit": 10})).await;
    assert!(raw.contains("exec_new2  success  12.4 s"), "{raw}");
    let listing = s.shown(&env, "execution_trace", json!({"limit": 10})).await;
    assert!(listing.contains("exec_old1"), "{listing}");
    assert!(!listing.contains("v_paradigm"), "{listing}");
    insta::assert_snapshot!("execution_trace_list", listing);
    assert_eq!(p.last(), json!({"type": "executionTraceList", "limit": 10}));

    let one = s
        .shown(
            &env,
            "execution_trace",
            json!({"execution_id": "exec_new2"}),
        )
        .await;
    insta::assert_snapshot!("execution_trace_read", one);
    assert_eq!(
        p.last(),
        json!({"type": "activityExecutionTrace", "executionId": "exec_new2", "format": "json"})
    );
    let _ = s
        .call(
            "execution_trace",
            json!({"execution_id": "v_paradigm_execution_traces:⟨exec_old1⟩"}),
        )
        .await;
    assert_eq!(p.last()["executionId"], "exec_old1");
    assert_eq!(count(&p, "activityExecutionTrace"), 2);

    let satisfier = s
        .shown(
            &env,
            "execution_trace",
            json!({"execution_id": "walk-satisfier-1-1786760268981"}),
        )
        .await;
    assert!(
        satisfier.contains("activity-api was not asked"),
        "{satisfier}"
    );
    insta::assert_snapshot!(satisfier, @r"walk-satisfier-1-1786760268981 is a satisfier reach: it persists no task trace (activity-api answers 404 for one, a successful one included), so activity-api was not asked. Its walk is in the dispatch record: read it with goal_reasoning.");
    assert_eq!(
        count(&p, "activityExecutionTrace"),
        2,
        "a satisfier was asked for"
    );

    // activity-api's own 404 for an id, and an empty listing.
    fixtures(
        &fx,
        &json!({
            "activityExecutionTrace": {"status": 404, "body": {"error": "Execution trace not found"}},
            "executionTraceList": {"body": {"executions": [], "total": 0}},
        }),
    );
    let missing = s
        .shown(
            &env,
            "execution_trace",
            json!({"execution_id": "exec_gone"}),
        )
        .await;
    insta::assert_snapshot!("execution_trace_read_404", missing);
    let empty = s.shown(&env, "execution_trace", json!({})).await;
    assert_eq!(empty, "No execution trace is recorded for this org.");
}

#[tokio::test]
async fn execution_trace_answers_a_timeout_once() {
    let env = TestEnv::new();
    let fx = env.path("fixtures.json");
    let mut answers = trace_fixtures();
    answers["activityExecutionTrace"]["delay_ms"] = json!(3000);
    fixtures(&fx, &answers);
    let p = Producer::start(&fx);
    let a = producer_arg("activityExecutionTrace", &p);
    let _ledger = env.ledger("main", &["--producer", &a, "--forward-timeout-ms", "1000"]);
    let s = Session::start(&env, &env.cwd(), Client::default()).await;
    let (text, err) = s
        .call("execution_trace", json!({"execution_id": "exec_new2"}))
        .await;
    assert!(err);
    assert!(
        text.starts_with("execution_trace: producer_timeout(activityExecutionTrace, 1000)"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");
    insta::assert_snapshot!(normalize(&text, &env), @r"execution_trace: producer_timeout(activityExecutionTrace, 1000): the producer did not answer within [N] ms; not retried, since the producer keeps running the query it was cut on");
    assert_eq!(
        count(&p, "activityExecutionTrace"),
        1,
        "a trace read was retried"
    );
}

#[tokio::test]
async fn detached_the_refusal_still_answers_and_the_reads_name_the_cause() {
    let env = TestEnv::new();
    let s = Session::start(&env, &env.cwd(), Client::default()).await;
    let refused = s
        .shown(&env, "resolve_impulse", json!({"shape": "fs_write"}))
        .await;
    insta::assert_snapshot!("detached_resolve_impulse_refused", refused);
    for (tool, args) in [
        ("resolve_impulse", json!({"shape": "memoryNote"})),
        ("registry_query", json!({"mode": "shapes"})),
        ("execution_trace", json!({})),
    ] {
        let (text, err) = s.call(tool, args).await;
        assert!(err, "{text}");
        assert!(
            text.starts_with(&format!("{tool}: not attached: ")),
            "{text}"
        );
    }
}

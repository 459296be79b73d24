//! The agent-resolver queue (SPEC.md §Agent-resolver queue): solicitations queued through the
//! sidecar's public API, drained and answered over a real MCP session, and answers delivered
//! through a real `ledger serve` to the fixture producer standing in for goal-host.

use std::path::{Path, PathBuf};
use std::time::Duration;

use metabob_mcp_server::agent_queue::{Delivery, Sidecar, Solicitation, TaskState};
use serde_json::{Value, json};

use crate::support::mcp::{Client, Session};
use crate::support::{Producer, TestEnv, normalize};

const SHAPE: &str = "solicitationResponse_write";
const VESSEL: &str = "metabob-mcp-agentq";

/// An environment with a fixed identity and session id; the queue at its default place.
fn agent_env(session: &str) -> TestEnv {
    let mut env = TestEnv::new();
    env.set("VESSEL_ID", VESSEL).set("SESSION_ID", session);
    env
}

fn queue_path(env: &TestEnv) -> PathBuf {
    env.home().join(".metabob").join("sidecar.db")
}

fn queue(env: &TestEnv) -> Sidecar {
    Sidecar::open(&queue_path(env)).unwrap()
}

fn ask(id: &str, question: &str) -> Solicitation {
    Solicitation {
        id: Some(id.into()),
        question_markdown: question.into(),
        timeout_ms: None,
        dispatch_id: Some("dispatch-9".into()),
    }
}

fn fixtures(path: &Path, answers: &Value) {
    std::fs::write(path, answers.to_string()).unwrap();
}

/// A producer answering the response shape with `answer`, and a ledger forwarding it there.
fn goal_host(env: &TestEnv, name: &str, answer: Value) -> (Producer, crate::support::Ledger) {
    let fx = env.path(&format!("fixtures-{name}.json"));
    fixtures(&fx, &json!({ SHAPE: answer }));
    let p = Producer::start(&fx);
    let ledger = env.ledger(name, &["--producer", &format!("{SHAPE}={}", p.url)]);
    (p, ledger)
}

fn count(p: &Producer) -> u64 {
    p.counts()[SHAPE].as_u64().unwrap_or(0)
}

/// A reply with the time left named, since it depends on when the pull ran.
fn shown(text: &str, is_error: bool, env: &TestEnv) -> String {
    let text: Vec<String> = text
        .lines()
        .map(|l| match l.strip_prefix("time left: ") {
            Some(_) => "time left: [TIME_LEFT]".to_string(),
            None => l.to_string(),
        })
        .collect();
    crate::support::mcp::shown(&text.join("\n"), is_error, env)
}

/// Waits for `f` while the session's background work runs on this test's runtime (a blocking
/// wait would starve it).
async fn settles(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..600 {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

async fn call(s: &Session, env: &TestEnv, tool: &str, args: Value) -> String {
    let (text, err) = s.call(tool, args).await;
    shown(&text, err, env)
}

#[tokio::test]
async fn a_pulled_task_is_claimed_and_its_answer_reaches_goal_host_once() {
    let env = agent_env("session-one");
    let (p, _ledger) = goal_host(&env, "main", json!({"status": 200, "echo": true}));
    let ack = queue(&env)
        .enqueue(
            VESSEL,
            ask("sol-1", "Ship the **migration** now?\n\n- yes\n- no"),
        )
        .unwrap();
    assert_eq!(ack.solicitation_id, "sol-1");
    let s = Session::start(&env, &env.cwd(), Client::default()).await;

    let pulled = call(&s, &env, "pull_assigned_work", json!({})).await;
    assert!(pulled.contains("task_id: sol-1"), "{pulled}");
    insta::assert_snapshot!("agent_pull_lists_a_task", pulled);
    let task = queue(&env).task(VESSEL, "sol-1").unwrap().unwrap();
    assert_eq!(task.state, TaskState::Claimed);
    assert_eq!(task.claimed_by.as_deref(), Some("session-one"));

    let args =
        json!({"task_id": "sol-1", "outcome": "answered", "answer": "Yes, after the backup."});
    let submitted = call(&s, &env, "submit_resolution", args.clone()).await;
    insta::assert_snapshot!(submitted, @r"task sol-1 resolved (answered) and its answer recorded; delivered to goal-host (solicitationResponse_write).");
    assert_eq!(count(&p), 1);
    let sent = p.last();
    assert_eq!(sent["solicitationId"], "sol-1");
    assert_eq!(sent["outcome"], "answered");
    assert_eq!(sent["answer"], "Yes, after the backup.");
    assert!(
        sent["client_claim"].is_object(),
        "a write carries the claim: {sent}"
    );
    let answer = queue(&env).answer(VESSEL, "sol-1").unwrap().unwrap();
    assert_eq!(answer.delivery, Delivery::Delivered);
    assert_eq!(
        queue(&env).task(VESSEL, "sol-1").unwrap().unwrap().state,
        TaskState::Resolved
    );

    // Answered once: a second submit records and sends nothing.
    let again = call(&s, &env, "submit_resolution", args).await;
    assert!(again.contains("already resolved"), "{again}");
    assert_eq!(count(&p), 1);

    let empty = call(&s, &env, "pull_assigned_work", json!({"limit": 5})).await;
    assert!(empty.contains("advertises no"), "{empty}");
    insta::assert_snapshot!(empty, @r"No task is queued for this session's vessel (metabob-mcp-agentq). None can arrive from the substrate: this session advertises no shape, so the substrate has no inbound offer to dispatch a task to. Only a local caller of the loopback resolver (a human_input impulse) fills this queue; polling again changes nothing until one does.");
}

#[tokio::test]
async fn without_a_producer_the_answer_stays_queued_until_a_later_session_sends_it() {
    let env = agent_env("session-one");
    let first = env.ledger("first", &[]);
    queue(&env)
        .enqueue(VESSEL, ask("sol-2", "Which region?"))
        .unwrap();
    {
        let s = Session::start(&env, &env.cwd(), Client::default()).await;
        s.ok("pull_assigned_work", json!({})).await;
        let args = json!({"task_id": "sol-2", "outcome": "answered", "answer": "eu-west"});
        let submitted = call(&s, &env, "submit_resolution", args).await;
        assert!(submitted.contains("no_producer"), "{submitted}");
        insta::assert_snapshot!(submitted, @r"task sol-2 resolved (answered) and its answer recorded; not delivered: no_producer(solicitationResponse_write): discovery found no producer for this shape, or a producer behind a peer refused the request or lacks the item (a peer forward does not say which). It stays queued and is sent again when the next session with this identity starts; nothing retries before then.");
    }
    let kept = queue(&env).answer(VESSEL, "sol-2").unwrap().unwrap();
    assert_eq!(kept.delivery, Delivery::Undelivered);
    assert!(
        kept.last_error
            .as_deref()
            .unwrap_or("")
            .contains("no_producer"),
        "{kept:?}"
    );
    drop(first);

    // goal-host appears: a second ledger, whose configuration the next session reads.
    std::fs::remove_file(env.home().join(".substrate").join("config.json")).unwrap();
    let (p, _second) = goal_host(&env, "second", json!({"status": 200, "echo": true}));
    let mut env2 = env;
    env2.set("SESSION_ID", "session-two");
    let s = Session::start(&env2, &env2.cwd(), Client::default()).await;
    // The identity is derived by the first call; the re-delivery starts then, in the background.
    let empty = s.ok("pull_assigned_work", json!({})).await;
    assert!(empty.contains("No task is queued"), "{empty}");
    assert!(
        settles(|| count(&p) == 1).await,
        "the prior session's answer was not re-sent: {:?}",
        queue(&env2).answer(VESSEL, "sol-2").unwrap()
    );
    let delivered = || {
        let a = queue(&env2).answer(VESSEL, "sol-2").unwrap().unwrap();
        a.delivery == Delivery::Delivered
    };
    assert!(settles(delivered).await);
    assert_eq!(p.last()["answer"], "eu-west");
    assert_eq!(count(&p), 1);
}

#[tokio::test]
async fn goal_hosts_own_404_counts_as_delivered() {
    let env = agent_env("session-one");
    let gone = json!({"status": 404, "body": {"error": "solicitation sol-3 not pending"}});
    let (p, _ledger) = goal_host(&env, "main", gone);
    queue(&env).enqueue(VESSEL, ask("sol-3", "Retry?")).unwrap();
    let s = Session::start(&env, &env.cwd(), Client::default()).await;
    let args = json!({"task_id": "sol-3", "outcome": "declined"});
    let submitted = call(&s, &env, "submit_resolution", args).await;
    insta::assert_snapshot!(submitted, @r"task sol-3 resolved (declined) and its answer recorded; goal-host answered 404: the solicitation had already timed out, so the answer counts as delivered and is not sent again.");
    assert_eq!(count(&p), 1);
    assert_eq!(p.last()["outcome"], "declined");
    let answer = queue(&env).answer(VESSEL, "sol-3").unwrap().unwrap();
    assert_eq!(answer.delivery, Delivery::Delivered);
    assert!(
        queue(&env)
            .undelivered(VESSEL, i64::MAX, 10)
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn expired_unknown_and_unanswered_resolutions_are_refused() {
    let env = agent_env("session-one");
    let q = queue(&env);
    // Queued ten minutes ago with a one-second deadline.
    let long_ago = metabob_process::clock::now_ms() - 600_000;
    let mut late = ask("sol-late", "Too late?");
    late.timeout_ms = Some(1000);
    q.enqueue_at(VESSEL, late, long_ago).unwrap();
    q.enqueue(VESSEL, ask("sol-4", "Proceed?")).unwrap();
    let s = Session::start(&env, &env.cwd(), Client::default()).await;

    let pulled = call(&s, &env, "pull_assigned_work", json!({})).await;
    assert!(
        pulled.contains("sol-4") && !pulled.contains("task_id: sol-late"),
        "{pulled}"
    );
    assert!(pulled.contains("1 task passed its deadline"), "{pulled}");
    let expired = call(
        &s,
        &env,
        "submit_resolution",
        json!({"task_id": "sol-late", "outcome": "answered", "answer": "x"}),
    )
    .await;
    assert!(expired.contains("expired"), "{expired}");

    let unknown = call(
        &s,
        &env,
        "submit_resolution",
        json!({"task_id": "sol-nope", "outcome": "declined"}),
    )
    .await;
    insta::assert_snapshot!("agent_submit_unknown_task", unknown);
    let blank = call(
        &s,
        &env,
        "submit_resolution",
        json!({"task_id": "sol-4", "outcome": "answered", "answer": "  "}),
    )
    .await;
    insta::assert_snapshot!("agent_submit_answered_without_answer", blank);
    let bad = call(
        &s,
        &env,
        "submit_resolution",
        json!({"task_id": "sol-4", "outcome": "maybe"}),
    )
    .await;
    assert!(bad.starts_with("[tool error]"), "{bad}");
    // Nothing of that resolved the task.
    assert_eq!(
        q.task(VESSEL, "sol-4").unwrap().unwrap().state,
        TaskState::Claimed
    );
}

#[tokio::test]
async fn detached_the_answer_is_stored_and_the_reply_names_the_cause() {
    let env = agent_env("session-one");
    queue(&env).enqueue(VESSEL, ask("sol-5", "Merge?")).unwrap();
    let s = Session::start(&env, &env.cwd(), Client::default()).await;
    let args = json!({"task_id": "sol-5", "outcome": "answered", "answer": "yes"});
    let submitted = call(&s, &env, "submit_resolution", args).await;
    assert!(!submitted.starts_with("[tool error]"), "{submitted}");
    assert!(submitted.contains("not attached"), "{submitted}");
    insta::assert_snapshot!(submitted, @r"task sol-5 resolved (answered) and its answer recorded; not delivered: not attached: not_configured: no API key (METABOB_API_KEY, SUBSTRATE_API_KEY or metabob.apiKey); set it in the environment or in a config file, looked up in order: $SUBSTRATE_CONFIG_PATH, $METABOB_CONFIG_PATH, ./.substrate/config.json, ./.metabob/config.json, ~/.substrate/config.json, ~/.metabob/config.json (create [ROOT]/home/.substrate/config.json, or run `metabob-mcp ledger serve` to start a local ledger that writes it). It stays queued and is sent again when the next session with this identity starts; nothing retries before then.");
    let kept = queue(&env).undelivered(VESSEL, i64::MAX, 10).unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].answer, "yes");
}

#[tokio::test]
async fn the_queue_survives_a_process_restart() {
    let env = agent_env("session-one");
    queue(&env)
        .enqueue(VESSEL, ask("sol-6", "Keep going?"))
        .unwrap();
    {
        let s = Session::start(&env, &env.cwd(), Client::default()).await;
        let pulled = s.ok("pull_assigned_work", json!({})).await;
        assert!(pulled.contains("task_id: sol-6"), "{pulled}");
    }
    // Another process, the same identity and queue file: the claimed task lists again.
    let out = env.run(&["tool", "call", "pull_assigned_work"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("task_id: sol-6"), "{out:?}");
    // A different identity sees none of it.
    let mut other = TestEnv::new();
    other.set("VESSEL_ID", "metabob-mcp-other");
    other.set("METABOB_SIDECAR", queue_path(&env).display().to_string());
    let out = other.run(&["tool", "call", "pull_assigned_work"]);
    assert!(out.stdout.contains("No task is queued"), "{out:?}");
    insta::assert_snapshot!(normalize(&out.stdout, &other), @r"No task is queued for this session's vessel (metabob-mcp-other). None can arrive from the substrate: this session advertises no shape, so the substrate has no inbound offer to dispatch a task to. Only a local caller of the loopback resolver (a human_input impulse) fills this queue; polling again changes nothing until one does.");
}

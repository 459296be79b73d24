//! The goal tools: first against the fixture producer standing in for goal-host and
//! activity-api (what each tool sends, how often, and what it prints for running, finished,
//! refused and unknown dispatches), then end to end against the embedded ledger's goal board
//! with real git and a real cell.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::mcp::{Client, Session};
use crate::support::{Ledger, Producer, TestEnv, normalize, verbatim, wait_until};

const DISPATCH: &str = "dispatch_0123456789abcdef01234567";
const SHAPES: [&str; 5] = [
    "goalDispatchAsync",
    "goalWalkState",
    "executionTraceList",
    "activityExecutionTrace",
    "goal_verification_label_write",
];

/// A ledger forwarding the goal shapes to the fixture producer, and a client session on it.
struct Fixture {
    env: TestEnv,
    fx: PathBuf,
    p: Producer,
    _ledger: Ledger,
}

impl Fixture {
    fn start(vars: &[(&str, &str)], answers: &Value) -> Fixture {
        let mut env = TestEnv::new();
        verbatim(&env, &[DISPATCH, "key:1a2b3c4d", "key:9f8e7d6c"]);
        for (k, v) in vars {
            env.set(k, *v);
        }
        let fx = env.path("fixtures.json");
        write_fixtures(&fx, answers);
        let p = Producer::start(&fx);
        let mut args = Vec::new();
        for shape in SHAPES {
            args.push("--producer".to_string());
            args.push(format!("{shape}={}", p.url));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let ledger = env.ledger("main", &args);
        Fixture {
            env,
            fx,
            p,
            _ledger: ledger,
        }
    }

    async fn session(&self) -> Session {
        Session::start(&self.env, &self.env.cwd(), Client::default()).await
    }

    fn answer(&self, answers: &Value) {
        write_fixtures(&self.fx, answers);
    }

    fn count(&self, shape: &str) -> u64 {
        self.p.counts()[shape].as_u64().unwrap_or(0)
    }
}

fn write_fixtures(path: &Path, answers: &Value) {
    std::fs::write(path, answers.to_string()).unwrap();
}

/// What the producer at `url` counted for `shape`, read from another thread than the test's.
fn producer_count(url: &str, shape: &str) -> u64 {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /count HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str::<Value>(body).unwrap()[shape]
        .as_u64()
        .unwrap_or(0)
}

fn walk_log(n: usize) -> Vec<String> {
    (1..=n)
        .map(|i| format!("2026-03-01T10:00:{i:02}.000Z step {i}: expand frontier"))
        .collect()
}

fn running() -> Value {
    json!({
        "dispatchId": DISPATCH, "status": "running", "reached": null, "executionId": null,
        "operator": "ops-alice", "selectedTemplateId": null, "error": null,
        "goal": "Make a() return 2", "learningMode": "observe", "tags": ["session:s"],
        "taskId": "agf_00112233aabbccdd", "walkLog": walk_log(8),
        "principal": {"kind": "key", "operator": false, "tag": "key:1a2b3c4d"},
        "learning": null
    })
}

fn completed() -> Value {
    let mut r = running();
    r["status"] = json!("completed");
    r["reached"] = json!(true);
    r["executionId"] = json!("exec_00aa11bb22cc");
    r["selectedTemplateId"] = json!("tmpl_fix_tests");
    r["principal"] = json!({"kind": "key", "operator": true, "tag": "key:9f8e7d6c"});
    r["learning"] = json!({"goalPathRecorded": true,
        "posteriorChanges": [{"templateId": "tmpl_fix_tests", "deltaAlpha": 1, "deltaBeta": 0},
                             {"templateId": "tmpl_other", "deltaAlpha": 0, "deltaBeta": 0}]});
    r
}

fn failed() -> Value {
    let mut r = running();
    r["status"] = json!("failed");
    r["reached"] = json!(false);
    r["executionId"] = json!("exec_33dd44ee55ff");
    r["error"] = json!("claim withdrawn: the task's ref was refused");
    r.as_object_mut().unwrap().remove("principal");
    r.as_object_mut().unwrap().remove("learning");
    r
}

fn trace() -> Value {
    json!({
        "execution_id": "exec_00aa11bb22cc", "status": "completed", "activity_template_id": null,
        "vessel_id": "cell-1", "dispatch_id": DISPATCH, "composition_chain": [],
        "tags": ["operator:ops-alice", "reached:true", "state_signature:tests-green"],
        "failure_mode": null, "created_at": "2026-03-01T10:00:00.000Z",
        "ended_at": "2026-03-01T10:05:00.000Z",
        "execution_trace": {"tasks": [
            {"seq": 1, "event": "claimed", "holder": "cell-1", "at": "2026-03-01T10:00:00.000Z",
             "detail": "for 60 min", "name": "claimed by cell-1"},
            {"seq": 2, "event": "fixed", "holder": "cell-1", "at": "2026-03-01T10:05:00.000Z",
             "detail": "commit 0f0f0f0", "name": "fixed by cell-1", "success": true}
        ]}
    })
}

/// The trace of a task withdrawn because its ref was refused.
fn withdrawn_trace() -> Value {
    let reason = "ref \"-x\" refused: the name starts with '-'";
    let mut t = trace();
    t["execution_id"] = json!("exec_33dd44ee55ff");
    t["status"] = json!("failed");
    t["tags"] = json!(["operator:ops-alice", "reached:false"]);
    t["failure_mode"] = json!(reason);
    t["execution_trace"]["tasks"][1] = json!({"seq": 2, "event": "withdrawn", "holder": "cell-1",
        "at": "2026-03-01T10:01:00.000Z", "detail": reason, "name": "withdrawn by cell-1",
        "success": false, "failure_mode": reason});
    t
}

/// Every shape answered: the dispatch accepted, the record as `record`.
fn answers(record: Value) -> Value {
    json!({
        "goalDispatchAsync": {"status": 202, "body": {"dispatchId": DISPATCH, "status": "running",
            "taskId": "agf_00112233aabbccdd", "conceptId": "concept_0123456789abcdef01234567"}},
        "goalWalkState": {"body": record},
        "activityExecutionTrace": {"body": trace()},
        "executionTraceList": {"body": {"executions": [
            {"execution_id": "exec_33dd44ee55ff", "status": "failed",
             "activity_template_id": "satisfier:goal-host-walk-failed", "dispatch_id": DISPATCH,
             "created_at": "2026-03-01T10:00:00.000Z"}
        ], "total": 1}},
        "goal_verification_label_write": {"status": 201, "body": {"label": {
            "id": "label_0a1b2c3d", "created_at": "2026-03-01T10:06:00.000Z"}}},
    })
}

#[tokio::test]
async fn run_goal_async_sends_one_dispatch_and_names_what_to_call_next() {
    let f = Fixture::start(&[("MB_OPERATOR_ID", "ops-alice")], &answers(running()));
    let s = f.session().await;
    let goal = "  Make a() return 2.\n\nKeep the change small.  ";
    let text = s
        .shown(
            &f.env,
            "run_goal_async",
            json!({"goal": goal, "variables": {"repo": "file:///srv/app.git", "files": ["a.py"]},
                   "learning_mode": "observe", "tags": ["team:core"],
                   "composition_chain": ["exec_root"]}),
        )
        .await;
    insta::assert_snapshot!("run_goal_async_dispatched", text);
    assert_eq!(f.count("goalDispatchAsync"), 1);
    let sent = f.p.last();
    assert_eq!(sent["goal"], goal, "the goal text is forwarded unchanged");
    assert_eq!(sent["operator"], "ops-alice");
    assert_eq!(sent["learning_mode"], "observe");
    assert_eq!(sent["variables"]["repo"], "file:///srv/app.git");
    assert_eq!(sent["composition_chain"], json!(["exec_root"]));
    let tags: Vec<&str> = sent["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tags[0], "team:core");
    assert!(tags[1].starts_with("session:"), "{tags:?}");
    assert!(sent.get("client_claim").is_some(), "{sent}");

    // Neither a goal nor a template: refused before anything is sent.
    let none = s
        .shown(&f.env, "run_goal_async", json!({"goal": "   "}))
        .await;
    insta::assert_snapshot!("run_goal_async_needs_a_goal", none);
    assert_eq!(f.count("goalDispatchAsync"), 1);

    // goal-host's breaker and the ledger's 400: one line with the status, sent once each.
    let mut a = answers(running());
    a["goalDispatchAsync"] = json!({"status": 429, "body": {"error": "rate_limited",
        "detail": "spend-rate breaker open; retry after 60 s"}});
    f.answer(&a);
    let (text, err) = s.call("run_goal_async", json!({"goal": "anything"})).await;
    assert!(err);
    assert_eq!(text.lines().count(), 1, "{text}");
    insta::assert_snapshot!(normalize(&text, &f.env), @r"run_goal_async: goalDispatchAsync refused with HTTP 429 rate_limited: spend-rate breaker open; retry after 60 s; nothing was dispatched, and a dispatch is never retried");
    assert_eq!(
        f.count("goalDispatchAsync"),
        2,
        "a refused dispatch was retried"
    );
    a["goalDispatchAsync"] = json!({"status": 400, "body": {"error": "bad_request",
        "detail": "the embedded ledger selects no templates: targetTemplateId is not supported"}});
    f.answer(&a);
    let bad = s
        .shown(
            &f.env,
            "run_goal_async",
            json!({"target_template_id": "tmpl_fix_tests"}),
        )
        .await;
    insta::assert_snapshot!("run_goal_async_400", bad);
    assert_eq!(f.count("goalDispatchAsync"), 3);
    assert_eq!(f.p.last()["targetTemplateId"], "tmpl_fix_tests");
    assert_eq!(f.count("goalWalkState"), 0);
}

#[tokio::test]
async fn goal_status_puts_reached_first_for_every_state() {
    let f = Fixture::start(&[], &answers(running()));
    let s = f.session().await;
    let args = json!({"dispatch_id": DISPATCH});

    let live = s.shown(&f.env, "goal_status", args.clone()).await;
    assert!(live.starts_with("reached: (running)\n"), "{live}");
    assert!(
        live.contains("step 8") && !live.contains("step 2:"),
        "{live}"
    );
    insta::assert_snapshot!("goal_status_running", live);
    assert_eq!(f.count("activityExecutionTrace"), 0);

    f.answer(&answers(completed()));
    let done = s.shown(&f.env, "goal_status", args.clone()).await;
    assert!(done.starts_with("reached: yes\n"), "{done}");
    insta::assert_snapshot!("goal_status_completed", done);
    assert_eq!(f.count("activityExecutionTrace"), 1);
    assert_eq!(f.p.last()["executionId"], "exec_00aa11bb22cc");

    let mut a = answers(failed());
    a["activityExecutionTrace"]["body"] = withdrawn_trace();
    f.answer(&a);
    let no = s.shown(&f.env, "goal_status", args.clone()).await;
    assert!(no.starts_with("reached: no\n"), "{no}");
    assert!(no.contains("principal: not reported"), "{no}");
    assert!(no.contains("learning: not reported by goal-host"), "{no}");
    insta::assert_snapshot!("goal_status_failed", no);

    // A hollow completion, a node self-call, a raw key id, and a satisfier reach.
    let mut hollow = completed();
    hollow["reached"] = json!(false);
    hollow["principal"] = json!({"kind": "node_self", "operator": false, "tag": "node-self"});
    hollow["executionId"] = json!("walk-satisfier-1-1786760268981");
    f.answer(&answers(hollow));
    let text = s.shown(&f.env, "goal_status", args.clone()).await;
    insta::assert_snapshot!("goal_status_hollow_satisfier", text);
    assert_eq!(
        f.count("activityExecutionTrace"),
        2,
        "a satisfier's trace was read"
    );
    let mut raw = completed();
    raw["principal"] = json!({"kind": "key", "operator": false, "label": "key:key_0123456789ab"});
    f.answer(&answers(raw));
    let text = s.shown(&f.env, "goal_status", args.clone()).await;
    assert!(text.contains("principal: key (key id withheld)"), "{text}");
    assert!(!text.contains("key_0123456789ab"), "{text}");

    let mut gone = answers(running());
    gone["goalWalkState"] = json!({"status": 404,
        "body": {"error": "dispatch_not_found", "dispatchId": DISPATCH}});
    f.answer(&gone);
    let unknown = s.shown(&f.env, "goal_status", args.clone()).await;
    insta::assert_snapshot!("goal_status_not_found", unknown);
}

#[tokio::test]
async fn goal_reasoning_shows_the_walk_of_a_finished_dispatch_only() {
    let f = Fixture::start(&[], &answers(running()));
    let s = f.session().await;
    let args = json!({"dispatch_id": DISPATCH});
    let (text, err) = s.call("goal_reasoning", args.clone()).await;
    assert!(!err);
    assert_eq!(text, "still running");

    f.answer(&answers(completed()));
    let walk = s.shown(&f.env, "goal_reasoning", args.clone()).await;
    assert!(walk.starts_with("reached: yes\n"), "{walk}");
    assert!(walk.contains("  1. ") && walk.contains("  8. "), "{walk}");
    insta::assert_snapshot!("goal_reasoning_completed", walk);

    let mut bare = completed();
    bare["walkLog"] = json!([]);
    bare["executionId"] = Value::Null;
    f.answer(&answers(bare));
    let none = s.shown(&f.env, "goal_reasoning", args.clone()).await;
    assert!(none.contains("decision-log unavailable"), "{none}");
    insta::assert_snapshot!("goal_reasoning_unavailable", none);
}

#[tokio::test]
async fn run_goal_polls_until_the_dispatch_leaves_running_or_the_deadline() {
    let vars = [
        ("RUN_GOAL_POLL_MS", "5"),
        ("RUN_GOAL_POLL_MAX_MS", "20"),
        ("RUN_GOAL_TIMEOUT_MS", "120000"),
    ];
    let f = Fixture::start(&vars, &answers(running()));
    let s = f.session().await;
    // The dispatch completes once it has been polled a few times.
    let (fx, url) = (f.fx.clone(), f.p.url.clone());
    let flip = std::thread::spawn(move || {
        let polls = || producer_count(&url, "goalWalkState");
        assert!(wait_until(Duration::from_secs(60), || polls() >= 4));
        write_fixtures(&fx, &answers(completed()));
    });
    let text = s
        .shown(
            &f.env,
            "run_goal",
            json!({"goal": "Make a() return 2", "learning_mode": "observe"}),
        )
        .await;
    flip.join().unwrap();
    assert!(text.starts_with("reached: yes\n"), "{text}");
    insta::assert_snapshot!("run_goal_completed", text);
    assert_eq!(f.count("goalDispatchAsync"), 1);
    assert!(f.count("goalWalkState") >= 5);

    // Past the deadline: the dispatch id and the hint, not an error.
    let g = Fixture::start(
        &[
            ("RUN_GOAL_POLL_MS", "5"),
            ("RUN_GOAL_POLL_MAX_MS", "20"),
            ("RUN_GOAL_TIMEOUT_MS", "100"),
        ],
        &answers(running()),
    );
    let s = g.session().await;
    let (text, err) = s
        .call("run_goal", json!({"goal": "Make a() return 2"}))
        .await;
    assert!(!err, "{text}");
    assert!(
        text.contains(DISPATCH) && text.contains("goal_status"),
        "{text}"
    );
    insta::assert_snapshot!("run_goal_past_the_deadline", normalize(&text, &g.env));
    assert_eq!(g.count("goalDispatchAsync"), 1);
}

#[tokio::test]
async fn provide_feedback_refuses_unfinished_dispatches_and_writes_one_label() {
    let f = Fixture::start(&[("MB_OPERATOR_ID", "ops-alice")], &answers(running()));
    let s = f.session().await;
    let args = json!({"dispatch_id": DISPATCH, "verdict": "reached",
        "rationale": "a() returns 2 and its test passes"});

    let text = s.shown(&f.env, "provide_feedback", args.clone()).await;
    insta::assert_snapshot!("provide_feedback_running", text);
    let mut gone = answers(running());
    gone["goalWalkState"] = json!({"status": 404,
        "body": {"error": "dispatch_not_found", "dispatchId": DISPATCH}});
    f.answer(&gone);
    let text = s.shown(&f.env, "provide_feedback", args.clone()).await;
    insta::assert_snapshot!("provide_feedback_not_found", text);
    assert_eq!(f.count("goal_verification_label_write"), 0);

    f.answer(&answers(completed()));
    let text = s.shown(&f.env, "provide_feedback", args.clone()).await;
    insta::assert_snapshot!("provide_feedback_written", text);
    assert_eq!(f.count("goal_verification_label_write"), 1);
    let sent = f.p.last();
    let data = &sent["labelData"];
    assert_eq!(data["dispatch_id"], DISPATCH);
    assert_eq!(data["execution_id"], "exec_00aa11bb22cc");
    assert_eq!(data["activity_id"], "tmpl_fix_tests");
    assert_eq!(data["goal"], "Make a() return 2");
    assert_eq!(data["verdict"], "achieved");
    assert_eq!(data["confidence"], 0.9);
    assert_eq!(data["labeler"], "automated");
    let notes = data["notes"].as_str().unwrap();
    assert!(
        notes.starts_with("a() returns 2 and its test passes [operator: ops-alice] [session: "),
        "{notes}"
    );
    assert_eq!(f.count("executionTraceList"), 0);

    // No template: the activity on the execution's trace row, and the reply says so.
    let mut a = answers(failed());
    a["goalWalkState"]["body"]["selectedTemplateId"] = Value::Null;
    f.answer(&a);
    let partial = json!({"dispatch_id": DISPATCH, "verdict": "partial", "confidence": 0.5,
        "rationale": "the ref was refused before any change"});
    let text = s.shown(&f.env, "provide_feedback", partial.clone()).await;
    insta::assert_snapshot!("provide_feedback_activity_from_the_listing", text);
    assert_eq!(f.count("executionTraceList"), 1);
    assert_eq!(
        f.p.last()["labelData"]["activity_id"],
        "satisfier:goal-host-walk-failed"
    );

    // Neither names one (the embedded ledger): the task board, said in the reply.
    a["executionTraceList"]["body"]["executions"][0]["activity_template_id"] = Value::Null;
    f.answer(&a);
    let text = s.shown(&f.env, "provide_feedback", partial.clone()).await;
    insta::assert_snapshot!("provide_feedback_task_board", text);
    assert_eq!(f.p.last()["labelData"]["activity_id"], "task-board");
    assert_eq!(f.count("goal_verification_label_write"), 3);

    // No task and no activity, or no execution: nothing written, record_finding instead.
    a["goalWalkState"]["body"]
        .as_object_mut()
        .unwrap()
        .remove("taskId");
    f.answer(&a);
    let text = s.shown(&f.env, "provide_feedback", partial.clone()).await;
    insta::assert_snapshot!("provide_feedback_no_activity", text);
    a["goalWalkState"]["body"]["executionId"] = Value::Null;
    f.answer(&a);
    let text = s.shown(&f.env, "provide_feedback", partial).await;
    assert!(
        text.contains("record_finding, category goal-routing"),
        "{text}"
    );
    assert_eq!(f.count("goal_verification_label_write"), 3);

    // The producer's refusal of the label: one line, no label.
    let mut refused = answers(completed());
    refused["goal_verification_label_write"] = json!({"status": 400,
        "body": {"error": "bad_request", "detail": "labelData.goal: required"}});
    f.answer(&refused);
    let text = s.shown(&f.env, "provide_feedback", args).await;
    insta::assert_snapshot!("provide_feedback_refused", text);
    assert_eq!(f.count("goal_verification_label_write"), 4);
}

/// Through a spoke, a producer's refusal or a missing dispatch arrives in discovery's own
/// not-found form: each tool says both readings.
#[tokio::test]
async fn a_no_producer_answer_is_named_with_both_readings() {
    let mut nobody = json!({});
    for shape in SHAPES {
        nobody[shape] = json!({"status": 404, "body": {"error": "Not found", "shape": shape}});
    }
    let f = Fixture::start(&[], &nobody);
    let s = f.session().await;
    let mut shown = Vec::new();
    for (tool, args) in [
        (
            "run_goal_async",
            json!({"goal": "x", "variables": {"repo": "file:///x.git"}}),
        ),
        ("goal_status", json!({"dispatch_id": DISPATCH})),
        ("goal_reasoning", json!({"dispatch_id": DISPATCH})),
        (
            "provide_feedback",
            json!({"dispatch_id": DISPATCH, "verdict": "reached", "rationale": "r"}),
        ),
    ] {
        shown.push(s.shown(&f.env, tool, args).await);
    }
    // The label write's refusal, once the record reads.
    let mut a = nobody.clone();
    a["goalWalkState"] = answers(completed())["goalWalkState"].clone();
    f.answer(&a);
    shown.push(
        s.shown(
            &f.env,
            "provide_feedback",
            json!({"dispatch_id": DISPATCH, "verdict": "reached", "rationale": "r"}),
        )
        .await,
    );
    insta::assert_snapshot!("goal_tools_no_producer", shown.join("\n"));
    assert_eq!(f.count("goal_verification_label_write"), 1);
}

#[tokio::test]
async fn detached_every_goal_tool_answers_the_cause_and_sends_nothing() {
    let env = TestEnv::new();
    let s = Session::start(&env, &env.cwd(), Client::default()).await;
    for (tool, args) in [
        ("run_goal_async", json!({"goal": "x"})),
        ("run_goal", json!({"goal": "x"})),
        ("goal_status", json!({"dispatch_id": DISPATCH})),
        ("goal_reasoning", json!({"dispatch_id": DISPATCH})),
        (
            "provide_feedback",
            json!({"dispatch_id": DISPATCH, "verdict": "partial", "rationale": "r"}),
        ),
    ] {
        let (text, err) = s.call(tool, args).await;
        assert!(err, "{text}");
        assert!(
            text.starts_with(&format!("{tool}: not attached: ")),
            "{text}"
        );
    }
}

// ---- End to end: the embedded ledger's goal board, real git, a real cell. ----

/// The dispatch id in run_goal_async's reply.
fn dispatch_id(reply: &str) -> String {
    let at = reply.find("dispatch_").expect("a dispatch id");
    reply[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

fn origin(env: &TestEnv) -> String {
    env.origin(
        "app",
        &[
            ("a.py", "def a():\n    return 1\n"),
            ("b.py", "def b():\n    return 2\n"),
        ],
    )
    .1
}

#[tokio::test]
async fn a_goal_dispatched_over_mcp_is_pulled_fixed_and_reads_reached() {
    let env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let url = origin(&env);
    let s = Session::start(&env, &env.cwd(), Client::default()).await;

    let goal = json!({"goal": "Make a() return 2.\n\nThe caller expects 2.",
        "variables": {"repo": url, "files": ["a.py"]}, "learning_mode": "observe"});
    let (reply, err) = s.call("run_goal_async", goal).await;
    assert!(!err, "{reply}");
    let id = dispatch_id(&reply);
    let task_id = reply
        .lines()
        .find_map(|l| l.strip_prefix("taskId: "))
        .unwrap()
        .to_string();
    insta::assert_snapshot!(
        "e2e_dispatched",
        crate::support::mcp::shown(&reply, false, &env)
    );
    let args = json!({"dispatch_id": id});
    let queued = s.shown(&env, "goal_status", args.clone()).await;
    assert!(queued.starts_with("reached: (running)\n"), "{queued}");
    insta::assert_snapshot!("e2e_status_queued", queued);

    // A separate cell process takes the task the goal became.
    let out = env.task_pull(&url, "c1", &[]);
    assert_eq!(out.code, 0, "{}", crate::support::layout(&out));
    let task: Value =
        serde_json::from_str(&std::fs::read_to_string(env.path("c1/task/task.json")).unwrap())
            .unwrap();
    assert_eq!(task["task_id"], task_id.as_str());
    let claimed = s.shown(&env, "goal_status", args.clone()).await;
    assert!(claimed.contains("executionId: [EXEC_1]"), "{claimed}");
    insta::assert_snapshot!("e2e_status_claimed", claimed);
    assert_eq!(
        s.call("goal_reasoning", args.clone()).await.0,
        "still running"
    );

    env.fix_push_close("c1");
    let done = s.shown(&env, "goal_status", args.clone()).await;
    assert!(
        done.starts_with("reached: yes\nstatus: completed\n"),
        "{done}"
    );
    insta::assert_snapshot!("e2e_status_reached", done);
    let walk = s.shown(&env, "goal_reasoning", args.clone()).await;
    assert!(walk.contains("walk log ("), "{walk}");
    assert!(walk.contains("reach verdict:"), "{walk}");
    insta::assert_snapshot!("e2e_reasoning", walk);
    let listed = s.shown(&env, "execution_trace", json!({})).await;
    assert!(listed.contains("[EXEC_1]  completed"), "{listed}");
    insta::assert_snapshot!("e2e_execution_trace", listed);

    let label = s
        .shown(
            &env,
            "provide_feedback",
            json!({"dispatch_id": id, "verdict": "reached",
                   "rationale": "a() returns 2 on main", "confidence": 0.8}),
        )
        .await;
    assert!(label.starts_with("Label [LABEL_1] stored"), "{label}");
    assert!(label.contains("activity: task-board"), "{label}");
    insta::assert_snapshot!("e2e_feedback", label);
}

#[tokio::test]
async fn run_goal_returns_once_the_cell_completes_the_goal() {
    let mut env = TestEnv::new();
    env.set("RUN_GOAL_POLL_MS", "50")
        .set("RUN_GOAL_POLL_MAX_MS", "200")
        .set("RUN_GOAL_TIMEOUT_MS", "120000");
    let env = std::sync::Arc::new(env);
    let _ledger = env.ledger("main", &[]);
    let url = origin(&env);
    let s = Session::start(&env, &env.cwd(), Client::default()).await;
    // The cell, in its own thread: it pulls once the dispatch has made the task.
    let cell = {
        let (env, url) = (env.clone(), url.clone());
        std::thread::spawn(move || {
            let mut tries = 0;
            let pulled = wait_until(Duration::from_secs(60), || {
                tries += 1;
                env.task_pull(&url, &format!("try{tries}"), &[]).code == 0
            });
            assert!(pulled, "no task to pull");
            env.fix_push_close(&format!("try{tries}"));
        })
    };
    let (text, err) = s
        .call(
            "run_goal",
            json!({"goal": "Make a() return 2", "variables": {"repo": url, "files": "a.py"}}),
        )
        .await;
    cell.join().unwrap();
    assert!(!err, "{text}");
    assert!(
        text.starts_with("reached: yes\nstatus: completed\n"),
        "{text}"
    );
    insta::assert_snapshot!("e2e_run_goal", normalize(&text, &env));
}

#[tokio::test]
async fn a_task_parked_for_a_refused_ref_reads_not_reached_with_the_reason() {
    let env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let url = origin(&env);
    let s = Session::start(&env, &env.cwd(), Client::default()).await;
    let (reply, err) = s
        .call(
            "run_goal_async",
            json!({"goal": "Make a() return 2",
                   "variables": {"repo": url, "files": ["a.py"], "ref": "-x;rm -rf"}}),
        )
        .await;
    assert!(!err, "{reply}");
    let id = dispatch_id(&reply);
    let out = env.task_pull(&url, "c1", &[]);
    assert!(
        out.stdout.contains("parked"),
        "{}",
        crate::support::layout(&out)
    );
    let text = s
        .shown(&env, "goal_status", json!({"dispatch_id": id}))
        .await;
    assert!(text.starts_with("reached: no\nstatus: failed\n"), "{text}");
    assert!(text.contains("refused"), "{text}");
    insta::assert_snapshot!("e2e_status_refused_ref", text);
    let label = s
        .shown(
            &env,
            "provide_feedback",
            json!({"dispatch_id": id, "verdict": "not_reached",
                   "rationale": "the ref was refused before any change"}),
        )
        .await;
    insta::assert_snapshot!("e2e_feedback_refused_ref", label);
}

//! The goal board of a real `ledger serve`: a goal dispatched through `POST /resolve` becomes a
//! task that a real `task pull` takes, a real commit, push and `finding close` complete it,
//! and the walk state, executions and traces say so; a refused ref fails it with the pull's
//! reason; refusals name why; no org reads another's dispatch.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::support::{Ledger, TestEnv, normalize};

struct Board {
    env: TestEnv,
    ledger: Ledger,
    url: String,
    admin: String,
}

fn board() -> Board {
    let env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    let (_, url) = env.origin(
        "app",
        &[("a.py", "def a():\n    return 1\n"), ("b.py", "x = 2\n")],
    );
    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(env.home().join(".substrate/config.json")).unwrap(),
    )
    .unwrap();
    let admin = config["metabob"]["apiKey"].as_str().unwrap().to_string();
    Board {
        env,
        ledger,
        url,
        admin,
    }
}

impl Board {
    /// An answer as snapshots show it.
    fn snap(&self, status: u16, v: &Value) -> String {
        let text = serde_json::to_string_pretty(v).unwrap();
        format!("status {status}\n{}", normalize(&text, &self.env))
    }

    fn dispatch(&self, goal: &str, variables: Value) -> (u16, Value) {
        self.ledger.resolve(
            &self.admin,
            json!({"type": "goalDispatchAsync", "operator": "ops-1", "goal": goal,
                   "variables": variables, "tags": ["team:core"], "learning_mode": "observe",
                   "client_claim": {"operator": "ops-1", "session": "sess-1", "client": "test"}}),
        )
    }

    fn walk(&self, key: &str, id: &str) -> (u16, Value) {
        self.ledger
            .resolve(key, json!({"type": "goalWalkState", "dispatchId": id}))
    }

    fn cell(&self, cell: &str) -> (PathBuf, PathBuf) {
        (
            self.env.path(&format!("{cell}/task")),
            self.env.path(&format!("{cell}/work")),
        )
    }

    fn labels(&self) -> Vec<(String, String, f64)> {
        let conn = rusqlite::Connection::open(self.ledger.data.join("ledger.db")).unwrap();
        let mut stmt = conn
            .prepare("SELECT dispatch_id, verdict, confidence FROM goal_labels ORDER BY seq")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }
}

fn log_has(walk: &Value, needle: &str) -> bool {
    walk["walkLog"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l.as_str().unwrap().contains(needle))
}

#[test]
fn a_dispatched_goal_is_pulled_fixed_and_closed_as_a_task() {
    let b = board();
    let (status, d) = b.dispatch(
        "make a() return 2\nThe caller expects 2.",
        json!({"repo": b.url, "files": ["a.py"], "ref": "main"}),
    );
    assert_eq!(status, 202, "{d}");
    insta::assert_snapshot!("goal_dispatched", b.snap(status, &d));
    let id = d["dispatchId"].as_str().unwrap().to_string();
    let task_id = d["taskId"].as_str().unwrap().to_string();

    let (status, w) = b.walk(&b.admin, &id);
    assert_eq!(
        (status, w["status"].as_str()),
        (200, Some("running")),
        "{w}"
    );
    assert!(w["executionId"].is_null(), "{w}");
    insta::assert_snapshot!("goal_walk_dispatched", b.snap(status, &w));

    // Any cell takes it as it takes any task.
    let out = b.env.task_pull(&b.url, "c1", &["--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let (task_dir, _) = b.cell("c1");
    let task: Value =
        serde_json::from_str(&std::fs::read_to_string(task_dir.join("task.json")).unwrap())
            .unwrap();
    assert_eq!(task["task_id"], task_id.as_str());
    assert_eq!(task["ref"], "main");
    assert_eq!(task["recorder"], "ops-1");
    assert!(
        task["details"]
            .as_str()
            .unwrap()
            .contains("The caller expects 2.")
    );
    let (status, w) = b.walk(&b.admin, &id);
    assert_eq!(w["status"], "running", "{w}");
    assert!(log_has(&w, "claimed by"), "{w}");
    assert!(w["executionId"].as_str().unwrap().starts_with("exec_"));
    insta::assert_snapshot!("goal_walk_claimed", b.snap(status, &w));

    b.env.fix_push_close("c1");
    let (status, w) = b.walk(&b.admin, &id);
    assert_eq!(
        (w["status"].as_str(), &w["reached"]),
        (Some("completed"), &json!(true)),
        "{w}"
    );
    insta::assert_snapshot!("goal_walk_completed", b.snap(status, &w));

    let (status, list) = b
        .ledger
        .resolve(&b.admin, json!({"type": "executionTraceList", "limit": 5}));
    assert_eq!(list["total"], 1, "{list}");
    let row = &list["executions"][0];
    assert_eq!(row["execution_id"], w["executionId"]);
    assert_eq!(row["vessel_id"], task["vessel_id"]);
    assert_eq!(row["status"], "completed");
    insta::assert_snapshot!("goal_execution_list", b.snap(status, &list));
    let (status, trace) = b.ledger.resolve(
        &b.admin,
        json!({"type": "activityExecutionTrace", "executionId": w["executionId"], "format": "json"}),
    );
    assert_eq!(status, 200, "{trace}");
    insta::assert_snapshot!("goal_execution_trace", b.snap(status, &trace));

    let (status, label) = b.ledger.resolve(
        &b.admin,
        json!({"type": "goal_verification_label_write", "labelData": {
            "dispatch_id": id, "execution_id": w["executionId"], "activity_id": null,
            "goal": "make a() return 2", "verdict": "achieved", "confidence": 0.9,
            "labeler": "automated", "notes": "a() returns 2 on main [operator: ops-1]"}}),
    );
    assert_eq!(status, 201, "{label}");
    insta::assert_snapshot!("goal_label_written", b.snap(status, &label));
    assert_eq!(b.labels(), vec![(id.clone(), "achieved".to_string(), 0.9)]);
}

#[test]
fn a_refused_ref_fails_the_goal_with_the_pulls_reason() {
    let b = board();
    let (status, d) = b.dispatch(
        "work on a weird branch",
        json!({"repo": b.url, "files": "a.py, b.py", "ref": "-x;rm -rf", "severity": "low"}),
    );
    assert_eq!(status, 202, "{d}");
    let id = d["dispatchId"].as_str().unwrap();
    // The pull claims it, refuses the ref and parks it (exit 5).
    let out = b.env.task_pull(&b.url, "c1", &[]);
    assert_eq!(out.code, 5, "{out:?}");
    assert!(out.stdout.contains("parked"), "{out:?}");
    let (status, w) = b.walk(&b.admin, id);
    assert_eq!(
        (w["status"].as_str(), &w["reached"]),
        (Some("failed"), &json!(false)),
        "{w}"
    );
    assert!(w["error"].as_str().unwrap().contains("refused"), "{w}");
    insta::assert_snapshot!("goal_walk_failed_refused_ref", b.snap(status, &w));
    let (status, list) = b
        .ledger
        .resolve(&b.admin, json!({"type": "executionTraceList"}));
    assert_eq!(list["executions"][0]["status"], "failed", "{list}");
    // The execution ended with the withdrawal's reason; the task is parked for it.
    let mode = list["executions"][0]["failure_mode"].as_str().unwrap();
    assert!(
        w["error"]
            .as_str()
            .unwrap()
            .starts_with(&format!("parked: {mode}")),
        "{list}"
    );
    insta::assert_snapshot!("goal_execution_list_withdrawn", b.snap(status, &list));
}

#[test]
fn refusals_name_why_and_no_org_reads_another_orgs_dispatch() {
    let b = board();
    let mut shown = String::new();
    let mut show = |what: &str, (status, v): (u16, Value)| {
        shown.push_str(&format!("## {what}\n{}\n", b.snap(status, &v)));
        status
    };
    let base = json!({"repo": b.url, "files": ["a.py"]});
    assert_eq!(
        show("no repo", b.dispatch("fix it", json!({"files": ["a.py"]}))),
        400
    );
    assert_eq!(
        show("no files", b.dispatch("fix it", json!({"repo": b.url}))),
        400
    );
    assert_eq!(show("no goal", b.dispatch("  ", base.clone())), 400);
    let template = b.ledger.resolve(
        &b.admin,
        json!({"type": "goalDispatchAsync", "operator": "ops-1", "goal": "fix it",
               "targetTemplateId": "tmpl_fix_tests", "variables": base}),
    );
    assert_eq!(show("a template", template), 400);
    let (_, read_only) = b.ledger.create_key(&b.env, "default", "read");
    let forbidden = b.ledger.resolve(
        &read_only,
        json!({"type": "goalDispatchAsync", "operator": "ops-1", "goal": "fix it", "variables": base}),
    );
    assert_eq!(show("a read-only key", forbidden), 403);

    // A dispatch whose origin carries credentials: the task files under the identity, and the
    // stored variables keep no password.
    let secret_origin = "https://user:hunter2@example.invalid/org/app.git";
    let (status, d) = b.dispatch("fix it", json!({"repo": secret_origin, "files": ["a.py"]}));
    assert_eq!(status, 202, "{d}");
    let id = d["dispatchId"].as_str().unwrap().to_string();
    let conn = rusqlite::Connection::open(b.ledger.data.join("ledger.db")).unwrap();
    let stored: String = conn
        .query_row(
            "SELECT variables FROM goal_dispatches WHERE id = ?1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!stored.contains("hunter2"), "{stored}");
    let content: String = conn
        .query_row(
            "SELECT content FROM concepts WHERE id = ?1",
            [d["conceptId"].as_str().unwrap()],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        content.contains("repo: example.invalid/org/app\n"),
        "{content}"
    );
    assert!(!content.contains("hunter2"), "{content}");

    assert_eq!(
        show(
            "an unknown dispatch",
            b.walk(&b.admin, "dispatch_000000000000000000000000")
        ),
        404
    );
    let (_, other) = b.ledger.create_key(&b.env, "other", "read,write");
    let (status, theirs) = b.walk(&other, &id);
    assert_eq!(status, 404, "{theirs}");
    assert_eq!(theirs["error"], "dispatch_not_found", "{theirs}");
    assert_eq!(theirs["dispatchId"], id.as_str(), "{theirs}");
    // A row any write key could write: a claim on the task with a length no claim may ask
    // for. Readers skip it; the walk state still answers, with no execution.
    let hostile = format!(
        "reviewed_by: intruder\nverdict: claimed\nfinding_ids: {}\nclaim_minutes: 100000\n",
        d["taskId"].as_str().unwrap()
    );
    let (status, _) = b.ledger.resolve(
        &other,
        json!({"type": "concept_create_write", "conceptData": {"content": hostile,
               "shape": "finding_verdict", "source_type": "metabob_annotation"}}),
    );
    assert_eq!(status, 201);
    let (status, _) = b.ledger.resolve(
        &b.admin,
        json!({"type": "concept_create_write", "conceptData": {"content": hostile,
               "shape": "finding_verdict", "source_type": "metabob_annotation"}}),
    );
    assert_eq!(status, 201);
    let (status, w) = b.walk(&b.admin, &id);
    assert_eq!(
        (status, w["status"].as_str()),
        (200, Some("running")),
        "{w}"
    );
    assert!(w["executionId"].is_null(), "{w}");
    let (_, listing) = b
        .ledger
        .resolve(&other, json!({"type": "executionTraceList"}));
    assert_eq!(listing, json!({"executions": [], "total": 0}));
    let unknown = b.ledger.resolve(
        &b.admin,
        json!({"type": "activityExecutionTrace", "executionId": "exec_k3j4"}),
    );
    assert_eq!(show("an unknown execution", unknown), 404);
    let label = b.ledger.resolve(
        &b.admin,
        json!({"type": "goal_verification_label_write", "labelData": {
            "dispatch_id": id, "goal": "fix it", "verdict": "achieved", "labeler": "automated",
            "notes": "looks right"}}),
    );
    assert_eq!(show("a label without confidence", label), 400);
    let label = b.ledger.resolve(
        &other,
        json!({"type": "goal_verification_label_write", "labelData": {
            "dispatch_id": id, "goal": "fix it", "verdict": "achieved", "confidence": 1,
            "labeler": "automated", "notes": "not my org's"}}),
    );
    assert_eq!(show("a label for another org's dispatch", label), 404);
    assert!(b.labels().is_empty());
    insta::assert_snapshot!("goal_refusals", shown);
}

/// Goals dispatched in order, each task waiting for the one before (`variables.blocked_by`):
/// the board shows each goal's chain, and cells are offered only the first.
#[test]
fn goals_whose_tasks_wait_for_each_other_show_the_chain() {
    let b = board();
    let mut tasks: Vec<String> = Vec::new();
    for step in ["add the API", "use the API", "document the API"] {
        let mut vars = json!({"repo": b.url, "files": ["a.py"], "ref": "main"});
        if let Some(last) = tasks.last() {
            vars["blocked_by"] = json!([last]);
        }
        let (status, d) = b.dispatch(step, vars);
        assert_eq!(status, 202, "{d}");
        tasks.push(d["taskId"].as_str().unwrap().to_string());
    }
    let out = b.env.run(&["task", "list", "--json"]);
    let board: Value = serde_json::from_str(&out.stdout).unwrap();
    let chain = |task: &str| -> Vec<String> {
        let goal = board["goals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["task_id"] == task)
            .unwrap_or_else(|| panic!("a goal of {task}: {board}"));
        serde_json::from_value(goal["waits_for"].clone()).unwrap()
    };
    assert_eq!(chain(&tasks[0]), Vec::<String>::new());
    assert_eq!(chain(&tasks[1]), [tasks[0].as_str()]);
    assert_eq!(chain(&tasks[2]), [tasks[1].as_str(), tasks[0].as_str()]);
    let text = b.env.run(&["task", "list"]).stdout;
    let line = format!("document the API (waits for {}, {})", tasks[1], tasks[0]);
    assert!(text.contains(&line), "{text}");

    let out = b.env.task_pull(&b.url, "c1", &["--json"]);
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["task"]["task_id"], tasks[0].as_str(), "{report}");

    // A goal may wait only for a task there is.
    let (status, d) = b.dispatch(
        "wait for nothing",
        json!({"repo": b.url, "files": ["a.py"], "blocked_by": ["agf_00000000deadbeef"]}),
    );
    assert_eq!(status, 400, "{d}");
    assert!(
        d.to_string().contains("no task of this org has that id"),
        "{d}"
    );
}

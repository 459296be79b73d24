//! Task dependencies (SPEC.md §Dependencies) on a real `ledger serve`, through the CLI: the take
//! and the read-back path hand out only ready tasks, the board and `task list --ready` say what
//! waits on what, and every edge the ledger must refuse is refused in one line.

use serde_json::Value;

use crate::support::{Ledger, Output, TestEnv};

struct World {
    env: TestEnv,
    _ledger: Ledger,
    url: String,
}

fn world(ledger_args: &[&str]) -> World {
    let env = TestEnv::new();
    let ledger = env.ledger("deps", ledger_args);
    let (_, url) = env.origin("app", &[("a.py", "def a():\n    return 1\n")]);
    World {
        env,
        _ledger: ledger,
        url,
    }
}

fn json(out: &Output) -> Value {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

impl World {
    /// Records a task of `severity`, waiting for `blockers`: its id.
    fn task(&self, summary: &str, severity: &str, blockers: &[&str]) -> String {
        let out = self.record(summary, severity, blockers);
        assert_eq!(out.code, 0, "{out:?}");
        json(&out)["finding_ids"][0].as_str().unwrap().to_string()
    }

    fn record(&self, summary: &str, severity: &str, blockers: &[&str]) -> Output {
        let mut args = vec![
            "finding",
            "record",
            "--origin",
            &self.url,
            "--file",
            "a.py",
            "--summary",
            summary,
            "--severity",
            severity,
            "--category",
            "task",
            "--json",
        ];
        for b in blockers {
            args.extend(["--blocked-by", b]);
        }
        self.env.run(&args)
    }

    /// `task list --ready --json`: the ids a cell would be offered now, in order.
    fn ready(&self) -> Vec<String> {
        let out = self.env.run(&["task", "list", "--ready", "--json"]);
        assert_eq!(out.code, 0, "{out:?}");
        json(&out)["ready"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["task_id"].as_str().unwrap().to_string())
            .collect()
    }

    /// The board's `blocked` entry of `id`, as "state id" per open blocker.
    fn blocked_by(&self, id: &str) -> Option<Vec<String>> {
        let t = self
            .env
            .board_group("blocked")
            .into_iter()
            .find(|t| t["task_id"] == id)?;
        Some(
            t["blocked_by"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| {
                    format!(
                        "{} {}",
                        b["state"].as_str().unwrap(),
                        b["task_id"].as_str().unwrap()
                    )
                })
                .collect(),
        )
    }

    /// `task pull --json` into `cell`'s own directories: the exit code and the task's id.
    fn pull(&self, cell: &str) -> (i32, Option<String>) {
        for d in ["task", "work"] {
            let _ = std::fs::remove_dir_all(self.env.path(&format!("{cell}/{d}")));
        }
        let out = self.env.task_pull(&self.url, cell, &["--json"]);
        let v: Value = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
        (out.code, v["task"]["task_id"].as_str().map(str::to_owned))
    }

    fn run(&self, args: &[&str]) -> Output {
        Output::from(self.env.cmd(args).env("VESSEL_ID", "ops").output().unwrap())
    }

    fn task_dir(&self, cell: &str) -> String {
        self.env.path(&format!("{cell}/task")).display().to_string()
    }
}

/// The one line a refused command prints, which must name `says`.
fn refused(out: &Output, says: &str) {
    assert_eq!(out.code, 1, "{out:?}");
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(
        lines.first().is_some_and(|l| l.contains(says)),
        "want one line naming {says:?}: {out:?}"
    );
}

fn a_task_waits_for_its_blockers_on_each_claim_path(ledger_args: &[&str]) {
    let w = world(ledger_args);
    let api = w.task("add the API", "HIGH", &[]);
    // More severe than its blocker, so without the edge every cell would start it first.
    let user = w.task("use the API", "CRITICAL", &[&api]);
    assert_eq!(w.ready(), [api.as_str()]);
    assert_eq!(w.blocked_by(&user), Some(vec![format!("open {api}")]));
    let text = w.env.run(&["task", "list"]);
    assert!(
        text.stdout.contains(&format!("blocked   {user}"))
            && text.stdout.contains(&format!("blocked by open {api}")),
        "{text:?}"
    );

    let (code, got) = w.pull("c1");
    assert_eq!((code, got.as_deref()), (0, Some(api.as_str())));
    // The dependent is not offered while its blocker is worked on, nor waited for.
    let (code, got) = w.pull("c2");
    assert_eq!(
        (code, got),
        (4, None),
        "c1 holds the blocker; the dependent is not offered"
    );
    assert_eq!(w.ready(), Vec::<String>::new());

    // The blocker's fix lands: the dependent is ready, and taken.
    w.env.fix_push_close("c1");
    assert_eq!(w.ready(), [user.as_str()]);
    assert_eq!(w.blocked_by(&user), None);
    let (code, got) = w.pull("c2");
    assert_eq!((code, got.as_deref()), (0, Some(user.as_str())));
}

#[test]
fn a_task_waits_for_its_blockers_with_the_take() {
    a_task_waits_for_its_blockers_on_each_claim_path(&[]);
}

#[test]
fn a_task_waits_for_its_blockers_by_read_back() {
    a_task_waits_for_its_blockers_on_each_claim_path(&["--no-take"]);
}

#[test]
fn every_edge_the_ledger_must_refuse_is_refused_in_one_line_and_nothing_is_written() {
    let w = world(&[]);
    let a = w.task("a", "HIGH", &[]);
    let b = w.task("b", "HIGH", &[&a]);
    let c = w.task("c", "HIGH", &[&b]);

    // A cycle, named by its path; the task itself; a task no one recorded; a word that is no id.
    let out = w.run(&["task", "block", &a, "--by", &c]);
    refused(&out, &format!("cycle {a} → {c} → {b} → {a}"));
    refused(
        &w.run(&["task", "block", &a, "--by", &a]),
        "cannot wait for itself",
    );
    refused(
        &w.record("d", "HIGH", &["agf_00000000deadbeef"]),
        "no task of this org has that id",
    );
    refused(&w.record("d", "HIGH", &["not-an-id"]), "not a task id");
    refused(
        &w.run(&["task", "unblock", &a, "--from", &c]),
        &format!("{a} does not wait for {c}"),
    );
    // Nothing of the refused writes stands: no task d, and a still waits for nothing.
    let board = json(&w.env.run(&["task", "list", "--json"]));
    assert_eq!(board["tasks"], 3, "{board}");
    assert_eq!(w.ready(), [a.as_str()]);
    let (h, _) = history(&w, &a);
    assert!(
        h["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["kind"] != "blocked"),
        "{h}"
    );

    // Unblocked, b is ready beside a; blocked again by a task with no path back, it waits.
    assert_eq!(w.run(&["task", "unblock", &b, "--from", &a]).code, 0);
    let mut ready = w.ready();
    ready.sort();
    let mut want = vec![a.clone(), b.clone()];
    want.sort();
    assert_eq!(ready, want);
    let out = w.run(&["task", "block", &b, "--by", &a]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.trim(), format!("{b} waits for {a}"));
    assert_eq!(w.ready(), [a.as_str()]);
}

fn history(w: &World, id: &str) -> (Value, Vec<String>) {
    let h = json(&w.env.run(&["task", "show", id, "--json"]));
    let events = h["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect();
    (h, events)
}

#[test]
fn parked_and_cancelled_blockers_hold_back_a_reopened_one_blocks_again_and_a_claim_is_kept() {
    let w = world(&[]);
    let d = w.task("d", "HIGH", &[]);
    let e = w.task("e", "HIGH", &[&d]);

    // d fails in a cell and is parked: e still waits, and the board says for what.
    let (code, got) = w.pull("c1");
    assert_eq!((code, got.as_deref()), (0, Some(d.as_str())));
    let t = w.task_dir("c1");
    let out = w.env.run(&[
        "task",
        "release",
        "--task-dir",
        &t,
        "--failed",
        "--reason",
        "stuck",
        "--park-after",
        "1",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(w.blocked_by(&e), Some(vec![format!("parked {d}")]));
    assert_eq!(w.ready(), Vec::<String>::new());
    assert_eq!(w.pull("c2"), (3, None));

    // Reopened, d is open again and still holds e back.
    assert_eq!(w.run(&["task", "reopen", &d]).code, 0);
    assert_eq!(w.blocked_by(&e), Some(vec![format!("open {d}")]));
    assert_eq!(w.ready(), [d.as_str()]);

    // Cancelled, d's work was never done: e waits for an operator.
    let out = w.run(&["task", "cancel", &d, "--reason", "superseded"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(w.blocked_by(&e), Some(vec![format!("cancelled {d}")]));
    assert_eq!(w.pull("c2"), (3, None));
    let out = w.run(&["task", "unblock", &e, "--from", &d]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(w.ready(), [e.as_str()]);

    // A claimed task keeps its claim when it gains a blocker: its holder renews it, and once
    // it is given back no cell takes it until the blocker is done.
    let (code, got) = w.pull("c3");
    assert_eq!((code, got.as_deref()), (0, Some(e.as_str())));
    let f = w.task("f", "LOW", &[]);
    let out = w.run(&["task", "block", &e, "--by", &f]);
    assert_eq!(out.code, 0, "{out:?}");
    let t = w.task_dir("c3");
    let out = w.env.run(&["task", "renew", "--task-dir", &t]);
    assert_eq!((out.code, out.stdout.trim()), (0, "renewed"), "{out:?}");
    assert!(
        w.env
            .board_group("claimed")
            .iter()
            .any(|c| c["task_id"] == e.as_str())
    );
    let out = w.env.run(&["task", "release", "--task-dir", &t]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(w.blocked_by(&e), Some(vec![format!("open {f}")]));
    assert_eq!(w.ready(), [f.as_str()]);
    let (h, events) = history(&w, &e);
    let edges: Vec<&String> = events.iter().filter(|k| k.ends_with("blocked")).collect();
    assert_eq!(edges, ["unblocked", "blocked"], "{h}");
}

#[test]
fn a_blocker_already_closed_is_allowed_and_said_and_the_metrics_count_blocked_tasks() {
    let w = world(&[]);
    let a = w.task("a", "HIGH", &[]);
    w.task("b", "HIGH", &[&a]);
    let (status, text) = w._ledger.http("GET", "/metrics", None, "");
    assert_eq!(status, 200, "{text}");
    let blocked = text
        .lines()
        .find(|l| l.starts_with("metabob_tasks{") && l.contains("state=\"blocked\""))
        .unwrap_or_else(|| panic!("no blocked series: {text}"));
    assert!(blocked.ends_with(" 1"), "{blocked}");

    let (code, _) = w.pull("c1");
    assert_eq!(code, 0);
    w.env.fix_push_close("c1");
    let out = w.record("c", "HIGH", &[&a]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains(&format!("{a} is already closed")),
        "the note is said: {out:?}"
    );
    let c = json(&out)["finding_ids"][0].as_str().unwrap().to_string();
    assert!(w.ready().contains(&c));
}

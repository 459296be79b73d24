//! Parked tasks (SPEC.md §Parked tasks): a task that fails for a cause of its own is parked and
//! never ends a cell; an origin that is away parks nothing.

use serde_json::Value;

use crate::support::{Output, TestEnv, closed_port, git_daemon_on};

/// A ledger (with `ledger_args`) and an origin served by `git daemon` on a port of its own.
struct World {
    env: TestEnv,
    _ledger: crate::support::Ledger,
    origins: std::path::PathBuf,
    port: u16,
    daemon: Option<crate::support::Reaped>,
    url: String,
}

fn world(ledger_args: &[&str]) -> World {
    let env = TestEnv::new();
    let ledger = env.ledger("main", ledger_args);
    let (bare, _) = env.origin("app", &[("a.py", "x = 1\n"), ("b.py", "y = 2\n")]);
    let origins = bare.parent().unwrap().to_path_buf();
    let port = closed_port();
    let daemon = git_daemon_on(&env, &origins, port);
    World {
        url: format!("git://127.0.0.1:{port}/app.git"),
        env,
        _ledger: ledger,
        origins,
        port,
        daemon: Some(daemon),
    }
}

fn json(out: &Output) -> Value {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

impl World {
    fn record(&self, severity: &str, file: &str, details: &str) -> String {
        let summary = format!("fix {file}");
        let v = self
            .env
            .record_task_with(&self.url, file, &summary, severity, details);
        v["finding_ids"][0].as_str().unwrap().to_string()
    }

    /// `task pull --json` into `cell`'s own directories (emptied first, as the entrypoint does).
    fn pull(&self, cell: &str) -> (i32, Value) {
        for d in ["task", "work"] {
            let _ = std::fs::remove_dir_all(self.env.path(&format!("{cell}/{d}")));
        }
        let out = self.env.task_pull(&self.url, cell, &["--json"]);
        let v = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
        (out.code, v)
    }

    fn task_dir(&self, cell: &str) -> String {
        self.env.path(&format!("{cell}/task")).display().to_string()
    }

    /// The repository's board entries in `group`, by task id.
    fn board(&self, group: &str) -> Vec<Value> {
        self.env.board_group(group)
    }

    /// Pulls into `cell` and gives the task back as failed there: `task release --failed`.
    fn fail(&self, cell: &str, extra: &[&str]) -> Output {
        let (code, v) = self.pull(cell);
        assert_eq!(code, 0, "{v}");
        let t = self.task_dir(cell);
        let reason = "the harness failed";
        let mut args = vec![
            "task",
            "release",
            "--task-dir",
            &t,
            "--failed",
            "--reason",
            reason,
        ];
        args.extend_from_slice(extra);
        self.env.run(&args)
    }

    fn in_group(&self, group: &str, id: &str) -> Option<Value> {
        self.board(group).into_iter().find(|t| t["task_id"] == id)
    }
}

fn a_missing_ref_parks_its_task_at_once(ledger_args: &[&str]) {
    let w = world(ledger_args);
    // The most severe, so every cell tries it first.
    let poison = w.record("CRITICAL", "a.py", "ref: no-such-branch");
    let good = w.record("HIGH", "b.py", "");

    let (code, v) = w.pull("c1");
    assert_eq!(code, 5, "a task whose ref the origin lacks exits 5: {v}");
    assert_eq!(v["status"], "task_failed", "{v}");
    assert_eq!(v["failed"]["task_id"], poison.as_str(), "{v}");
    assert_eq!(v["failed"]["parked"], true, "{v}");
    let reason = v["failed"]["reason"].as_str().unwrap();
    assert!(reason.contains("no-such-branch"), "{reason}");
    assert!(
        std::fs::read_dir(w.env.path("c1/work"))
            .map(|mut d| d.next().is_none())
            .unwrap_or(true),
        "nothing is left in the work directory"
    );

    // Never offered again: the next cells take the good task, then find nothing open.
    let (code, v) = w.pull("c2");
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["task"]["task_id"], good.as_str());
    let (code, v) = w.pull("c3");
    assert_eq!(code, 4, "only the good task is open, and c2 holds it: {v}");
    assert!(
        v["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["task_id"] != poison.as_str()),
        "{v}"
    );

    let parked = w
        .in_group("parked", &poison)
        .expect("the board shows it parked");
    let shown = parked["reason"].as_str().unwrap();
    assert!(shown.contains("no-such-branch"), "{parked}");
    assert!(w.in_group("open", &poison).is_none());
}

#[test]
fn a_missing_ref_parks_its_task_at_once_with_the_take() {
    a_missing_ref_parks_its_task_at_once(&[]);
}

#[test]
fn a_missing_ref_parks_its_task_at_once_by_read_back() {
    a_missing_ref_parks_its_task_at_once(&["--no-take"]);
}

#[test]
fn reopen_puts_a_parked_task_back_and_refuses_one_that_is_not_parked() {
    let w = world(&[]);
    let poison = w.record("HIGH", "a.py", "ref: gone");
    assert_eq!(w.pull("c1").0, 5);
    assert!(w.in_group("parked", &poison).is_some());

    let out = w.env.run(&["task", "reopen", &poison]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.trim(), format!("reopened {poison}"));
    assert!(
        w.in_group("open", &poison).is_some(),
        "{:?}",
        w.board("open")
    );
    // Offered again, and parked again, since its ref is still missing.
    let (code, v) = w.pull("c2");
    assert_eq!(
        (code, v["failed"]["task_id"].as_str()),
        (5, Some(poison.as_str()))
    );

    let good = w.record("LOW", "b.py", "");
    let out = w.env.run(&["task", "reopen", &good]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains(&format!(
            "{good} is not parked; only a parked task can be reopened"
        )),
        "{out:?}"
    );
    let out = w.env.run(&["task", "reopen", "agf_nosuchtask"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("no task agf_nosuchtask"), "{out:?}");
}

#[test]
fn failures_in_two_cells_park_a_task_and_a_cell_is_not_offered_a_task_it_failed() {
    let w = world(&[]);
    let id = w.record("HIGH", "a.py", "");
    let fail = |cell: &str| -> Value {
        let out = w.fail(cell, &["--json"]);
        assert_eq!(out.code, 0, "{out:?}");
        json(&out)
    };
    let first = fail("c1");
    assert_eq!(first["outcome"], "released", "{first}");
    assert!(
        first.get("parked").is_none(),
        "one cell's failure parks nothing: {first}"
    );
    // The same cell is not offered it again, nor can it renew it; another cell is.
    let (code, v) = w.pull("c1");
    assert_eq!(code, 3, "{v}");
    assert!(w.in_group("open", &id).is_some());
    let renew = w
        .env
        .run(&["task", "renew", "--task-dir", &w.task_dir("c1")]);
    assert_eq!(renew.code, 1, "{renew:?}");

    let second = fail("c2");
    let parked = &second["parked"];
    assert!(
        parked["reason"]
            .as_str()
            .unwrap()
            .contains("2 cells failed it"),
        "{second}"
    );
    assert_eq!(parked["tried_by"].as_array().unwrap().len(), 2, "{second}");
    assert!(w.in_group("parked", &id).is_some());
    assert_eq!(w.pull("c3").0, 3, "a parked task is not offered");

    // Reopened, the failures before it no longer count: a cell that failed it is offered it
    // again, and one more failure parks nothing.
    assert_eq!(w.env.run(&["task", "reopen", &id]).code, 0);
    let after = fail("c1");
    assert!(after.get("parked").is_none(), "{after}");
}

#[test]
fn park_after_is_the_fleets_setting() {
    let mut w = world(&[]);
    w.env.set("METABOB_PARK_AFTER", "1");
    let id = w.record("HIGH", "a.py", "");
    let out = w.fail("c1", &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("parked: one cell failed it"), "{out:?}");
    assert!(w.in_group("parked", &id).is_some());
    let t = w.task_dir("c1");
    w.env.set("METABOB_PARK_AFTER", "0");
    let out = w
        .env
        .run(&["task", "release", "--task-dir", &t, "--failed"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("METABOB_PARK_AFTER") || out.stderr.contains("park-after"),
        "{out:?}"
    );
}

#[test]
fn an_origin_that_is_down_parks_nothing_and_its_tasks_are_pulled_once_it_is_back() {
    let mut w = world(&[]);
    let a = w.record("HIGH", "a.py", "ref: main");
    let b = w.record("HIGH", "b.py", "");
    drop(w.daemon.take());

    // Refused connections are the fleet's outage: try later, nothing parked, nothing held.
    for cell in ["c1", "c2"] {
        let (code, v) = w.pull(cell);
        assert_eq!(code, 4, "{v}");
        assert!(v.get("failed").is_none(), "{v}");
        assert!(v["retry_after_seconds"].as_i64().unwrap() <= 16, "{v}");
        let c = &v["candidates"].as_array().unwrap()[0];
        assert_eq!(c["outcome"], "withdrawn", "{v}");
    }
    assert!(w.board("parked").is_empty(), "{:?}", w.board("parked"));

    w.daemon = Some(git_daemon_on(&w.env, &w.origins, w.port));
    let mut pulled = Vec::new();
    for cell in ["c3", "c4"] {
        let (code, v) = w.pull(cell);
        assert_eq!(code, 0, "{v}");
        pulled.push(v["task"]["task_id"].as_str().unwrap().to_string());
    }
    pulled.sort();
    let mut want = vec![a, b];
    want.sort();
    assert_eq!(pulled, want);
}

/// The events of `task show --json`, as `kind by` words in order.
/// The vessel id `task pull` gave `cell`, as its task.json recorded it.
fn vessel(w: &World, cell: &str) -> String {
    let task = std::fs::read_to_string(w.env.path(&format!("{cell}/task/task.json"))).unwrap();
    serde_json::from_str::<Value>(&task).unwrap()["vessel_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// An operator's command, as vessel `ops`.
fn ops(w: &World, args: &[&str]) -> Output {
    Output::from(w.env.cmd(args).env("VESSEL_ID", "ops").output().unwrap())
}

fn shown_events(w: &World, id: &str) -> (Value, Vec<String>) {
    let out = w.env.run(&["task", "show", id, "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let h = json(&out);
    let events = h["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} by {}",
                e["kind"].as_str().unwrap(),
                e["by"].as_str().unwrap_or("-")
            )
        })
        .collect();
    (h, events)
}

#[test]
fn task_show_gives_every_attempt_in_order_and_cancel_withdraws_a_task_for_good() {
    let w = world(&[]);
    let id = w.record("HIGH", "a.py", "");
    assert_eq!(w.fail("c1", &[]).code, 0);
    assert_eq!(w.fail("c2", &[]).code, 0);
    assert!(w.in_group("parked", &id).is_some());
    assert_eq!(ops(&w, &["task", "reopen", &id]).code, 0);
    let (c1, c2) = (vessel(&w, "c1"), vessel(&w, "c2"));

    let (h, events) = shown_events(&w, &id);
    assert_eq!(h["task"]["task_id"], id.as_str(), "{h}");
    assert_eq!(h["task"]["group"], "open", "{h}");
    assert_eq!(
        events,
        [
            format!("claimed by {c1}"),
            format!("task failed by {c1}"),
            format!("claimed by {c2}"),
            format!("task failed by {c2}"),
            format!("parked by {c2}"),
            "reopened by ops".to_string(),
        ],
        "{h}"
    );
    let attempts = h["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{h}");
    for (a, cell) in attempts.iter().zip([&c1, &c2]) {
        assert_eq!(a["vessel_id"], cell.as_str(), "{h}");
        assert_eq!(a["ending"], "released", "{h}");
        assert!(a["duration_ms"].as_i64().unwrap() >= 0, "{h}");
        assert_eq!(a["reason"], "task failed: the harness failed", "{h}");
    }
    let text = w.env.run(&["task", "show", &id]);
    assert_eq!(text.code, 0, "{text:?}");
    assert!(
        text.stdout
            .starts_with(&format!("{id} fix a.py (HIGH, open)\n")),
        "{text:?}"
    );
    assert!(
        text.stdout.contains(&format!("attempts (2)\n  {c1} ")),
        "{text:?}"
    );
    assert!(
        text.stdout
            .contains(", released: task failed: the harness failed\n"),
        "{text:?}"
    );
    assert!(
        text.stdout
            .contains(&format!(" parked by {c2}: 2 cells failed it")),
        "{text:?}"
    );

    // Cancelled: closed on the board with its reason, offered to no cell, never reopened.
    let out = ops(
        &w,
        &[
            "task",
            "cancel",
            &id,
            "--reason",
            "superseded by the rewrite",
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.stdout.trim(),
        format!("cancel {id}: cancelled by ops: no cell is offered it again")
    );
    let closed = w.in_group("closed", &id).expect("closed on the board");
    assert_eq!(
        closed["verdict"], "cancelled: superseded by the rewrite",
        "{closed}"
    );
    assert_eq!(w.pull("c3").0, 3, "a cancelled task is offered to no cell");
    let out = w.env.run(&["task", "reopen", &id]);
    assert_eq!(out.code, 1, "{out:?}");
    let out = w.env.run(&["task", "cancel", &id, "--reason", "again"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr.lines().next().unwrap_or_default(),
        format!("error: task cancel: {id}: the task is already closed (cancelled): nothing to do"),
        "{out:?}"
    );
    let (h, events) = shown_events(&w, &id);
    assert_eq!(h["task"]["group"], "closed", "{h}");
    assert_eq!(events.last().unwrap(), "cancelled by ops", "{h}");

    // Nothing of the kind: one line each.
    let out = w.env.run(&["task", "show", "agf_nosuchtask"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .contains("task show: no task agf_nosuchtask in this key's org"),
        "{out:?}"
    );
    let out = w
        .env
        .run(&["task", "cancel", "agf_nosuchtask", "--reason", "x"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .contains("no task agf_nosuchtask in this key's org"),
        "{out:?}"
    );
}

#[test]
fn release_force_frees_a_dead_cells_claim_and_the_old_holder_cannot_renew_it() {
    let mut w = world(&[]);
    let id = w.record("HIGH", "a.py", "");
    assert_eq!(w.pull("c1").0, 0);
    assert_eq!(w.pull("c2").0, 4, "c1 holds it");

    let c1 = vessel(&w, "c1");
    let out = ops(
        &w,
        &[
            "task",
            "release",
            &id,
            "--force",
            "--reason",
            "c1's host died",
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.stdout.trim(),
        format!("release {id}: freed the claim {c1} held")
    );
    assert!(w.in_group("open", &id).is_some(), "{:?}", w.board("open"));
    let (code, v) = w.pull("c2");
    assert_eq!(
        (code, v["task"]["task_id"].as_str()),
        (0, Some(id.as_str())),
        "{v}"
    );
    // c1 was not dead after all: its claim is gone, and c2's stands.
    let renew = w
        .env
        .run(&["task", "renew", "--task-dir", &w.task_dir("c1")]);
    assert_eq!(renew.code, 1, "{renew:?}");
    let c2 = vessel(&w, "c2");
    assert!(
        renew
            .stderr
            .contains(&format!("{c2} holds this claim, not {c1}")),
        "{renew:?}"
    );
    let (h, events) = shown_events(&w, &id);
    assert_eq!(
        events,
        [
            format!("claimed by {c1}"),
            format!("claim withdrawn by {c1}"),
            format!("claimed by {c2}")
        ],
        "{h}"
    );
    assert_eq!(
        h["attempts"][0]["reason"], "released by ops (forced): c1's host died",
        "{h}"
    );

    // Nobody holds a task once it is released; a plain release names no task.
    let out = w.env.run(&["task", "release", &id, "--force"]);
    assert_eq!(out.code, 0, "c2 held it: {out:?}");
    let out = w.env.run(&["task", "release", &id, "--force"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .contains("nobody holds the task's claim: there is nothing to release"),
        "{out:?}"
    );
    let out = w.env.run(&["task", "release", &id]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("required arguments were not provided")
            && out.stderr.contains("--force"),
        "a task id without --force is refused by name: {out:?}"
    );

    // A read-only key writes nothing.
    let (_, read) = w._ledger.create_key(&w.env, "default", "read");
    w.env.set("METABOB_API_KEY", read);
    let out = w.env.run(&["task", "cancel", &id, "--reason", "no"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(w.in_group("open", &id).is_some());
}

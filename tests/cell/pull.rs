//! `task pull`'s refusals and its resumption after a restart, and a claim's heartbeat
//! (`task renew`) and hand-back (`task release`).

use serde_json::Value;

use crate::support::{TestEnv, snapshot};

use super::world;

#[test]
fn a_refused_ref_parks_its_task_and_the_next_pull_takes_another() {
    let w = world();
    // The bad one is more severe, so it is tried first whatever this cell's own order is.
    let bad = w.record_task_at("CRITICAL", "a.py", "bad ref", "ref: -x;rm -rf");
    let good = w.record_task("b.py", "good task", "");
    let out = w.pull_text("c1");
    // The ids as recorded, so the snapshot names them in that order.
    crate::support::seen(&w.env, &[&bad, &good]);
    insta::assert_snapshot!("task_pull_bad_ref_parked", w.snap(&out));
    assert!(w.verdict_kinds().contains(&"parked".to_string()));
    let (out, v) = w.pull("c2", &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(v["task"]["task_id"], good.as_str());
}

#[test]
fn a_pull_into_a_used_directory_fails_before_anything_is_claimed() {
    let w = world();
    w.record_task("a.py", "stays open", "");
    let (task, _) = w.dirs("c1");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(task.join("leftover"), "from the last task").unwrap();
    insta::assert_snapshot!("task_pull_used_directory", w.snap(&w.pull_text("c1")));
    assert!(w.verdict_kinds().is_empty(), "nothing was claimed");
    assert_eq!(w.pull("c2", &[]).0.code, 0, "the task is still open");
}

#[test]
fn a_cell_without_a_ledger_is_told_it_is_not_attached() {
    let env = TestEnv::new();
    let (_, url) = env.origin("app", &[("a.py", "x = 1\n")]);
    let (task, work) = (env.path("c1/task"), env.path("c1/work"));
    let (t, w) = (task.display().to_string(), work.display().to_string());
    let out = env.run(&[
        "task",
        "pull",
        "--origin",
        &url,
        "--task-dir",
        &t,
        "--work-dir",
        &w,
    ]);
    insta::assert_snapshot!("task_pull_not_attached", snapshot(&out, &env));
    assert!(!work.join("a.py").exists(), "nothing was cloned");
    let out = env.run(&[
        "finding",
        "record",
        "--origin",
        &url,
        "--file",
        "a.py",
        "--summary",
        "nowhere to go",
        "--severity",
        "LOW",
        "--category",
        "task",
    ]);
    insta::assert_snapshot!("finding_record_not_attached", snapshot(&out, &env));
}

#[test]
fn a_restarted_cell_resumes_the_task_it_holds() {
    let w = world();
    let _first = w.record_task("a.py", "first", "");
    let _second = w.record_task("b.py", "second", "");
    let (out, v) = w.pull("c1", &[]);
    assert_eq!(out.code, 0, "{out:?}");
    let held = v["task"]["task_id"].as_str().unwrap().to_string();
    // The container restarts with fresh directories at the same paths: the vessel identity is
    // derived from the key and the work directory, so it is the same claimer.
    let (task, work) = w.dirs("c1");
    std::fs::remove_dir_all(&task).unwrap();
    std::fs::remove_dir_all(&work).unwrap();
    let (out, v) = w.pull("c1", &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(v["task"]["task_id"], held.as_str());
    assert_eq!(v["candidates"][0]["outcome"], "renewed", "{v}");
}

#[test]
fn renew_keeps_the_claim_and_release_hands_the_task_to_the_next_cell() {
    let w = world();
    let id = w.record_task("a.py", "heartbeat me", "");
    assert_eq!(w.pull("c1", &["--minutes", "5"]).0.code, 0);
    let (task_dir, _) = w.dirs("c1");
    let t = task_dir.display().to_string();
    let out = w.env.run(&[
        "task",
        "renew",
        "--task-dir",
        &t,
        "--minutes",
        "30",
        "--json",
    ]);
    insta::assert_snapshot!("task_renew_json", w.snap(&out));
    let out = w
        .env
        .run(&["task", "renew", "--task-dir", &t, "--minutes", "30"]);
    insta::assert_snapshot!("task_renew", w.snap(&out));
    // Held by c1: another cell must wait.
    let (out, v) = w.pull("c2", &[]);
    assert!(v["retry_after_seconds"].as_i64().unwrap() > 25 * 60, "{v}");
    insta::assert_snapshot!("task_pull_try_later_json", w.snap(&out));
    insta::assert_snapshot!("task_pull_try_later", w.snap(&w.pull_text("c2")));
    let out = w.env.run(&[
        "task",
        "release",
        "--task-dir",
        &t,
        "--reason",
        "the harness gave up",
    ]);
    insta::assert_snapshot!("task_release", w.snap(&out));
    let withdrawal = w.verdicts().into_iter().find(|c| {
        c["content"]
            .as_str()
            .unwrap()
            .contains("verdict: claim withdrawn")
    });
    assert!(
        withdrawal.unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("reason: the harness gave up")
    );
    // Released: the next cell takes it at once, and c1 can no longer renew it.
    let out = w.pull_text("c3");
    insta::assert_snapshot!("task_pull_pulled", w.snap(&out));
    let (task_dir, _) = w.dirs("c3");
    let task: Value =
        serde_json::from_str(&std::fs::read_to_string(task_dir.join("task.json")).unwrap())
            .unwrap();
    assert_eq!(task["task_id"], id.as_str());
    let out = w.env.run(&["task", "renew", "--task-dir", &t]);
    insta::assert_snapshot!("task_renew_not_held", w.snap(&out));
}

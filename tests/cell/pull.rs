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

/// task.json and context.md carry the task's details, origin and claim: `task pull` writes them
/// readable by this user alone, whatever the umask.
#[test]
fn a_pulled_tasks_files_are_its_users_alone() {
    use std::os::unix::fs::PermissionsExt;
    let w = world();
    w.record_task("a.py", "kept private", "");
    let (out, _) = w.pull("c1", &[]);
    assert_eq!(out.code, 0, "{out:?}");
    let (task, _) = w.dirs("c1");
    for name in ["task.json", "context.md"] {
        let path = task.join(name);
        let mode = std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{name}");
    }
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

/// A world whose origin is a bare repository created by the git CLI with `master` as its
/// default branch (its HEAD), as older and many hosted repositories are: no `main` anywhere.
fn master_world() -> super::World {
    let env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    let bare = env.path("origins/app.git");
    std::fs::create_dir_all(&bare).unwrap();
    env.git(&bare, &["init", "-q", "--bare"]);
    env.git(&bare, &["symbolic-ref", "HEAD", "refs/heads/master"]);
    let seed = env.path("seed-master");
    std::fs::create_dir_all(&seed).unwrap();
    env.git(&seed, &["init", "-q", "-b", "master"]);
    std::fs::write(seed.join("a.py"), "def a():\n    return 1\n").unwrap();
    std::fs::write(seed.join("b.py"), "def b():\n    return 2\n").unwrap();
    env.git(&seed, &["add", "-A"]);
    env.git(&seed, &["commit", "-q", "-m", "initial"]);
    let url = format!("file://{}", bare.display());
    env.git(&seed, &["push", "-q", &url, "master"]);
    assert_eq!(
        env.git(&bare, &["for-each-ref", "--format=%(refname)"]),
        "refs/heads/master"
    );
    super::World {
        env,
        ledger,
        bare,
        url,
    }
}

fn task_json(w: &super::World, cell: &str) -> Value {
    let (task_dir, _) = w.dirs(cell);
    serde_json::from_str(&std::fs::read_to_string(task_dir.join("task.json")).unwrap()).unwrap()
}

/// The branches the origin has, as the git CLI lists them.
fn origin_branches(w: &super::World) -> Vec<String> {
    w.env
        .git(
            &w.bare,
            &["for-each-ref", "--format=%(refname:short)", "refs/heads/"],
        )
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn on_an_origin_whose_default_branch_is_master_the_fix_targets_master() {
    let w = master_world();
    let id = w.record_task("a.py", "make a() return 2", "The caller expects 2.");
    let (out, _) = w.pull("c1", &[]);
    assert_eq!(out.code, 0, "{out:?}");
    let task = task_json(&w, "c1");
    assert_eq!(task["policy"]["target"], "master", "{task}");
    assert_eq!(task["policy"]["push_branch"], "master", "{task}");
    assert_eq!(task["policy"]["target_source"]["from"], "origin_head");
    assert_eq!(
        task["policy"]["push_why"],
        "push_to: main (default) pushes the fix straight to the target, master"
    );
    // What the clone recorded, read by the CLI: the target is the branch origin/HEAD names.
    let (task_dir, work) = w.dirs("c1");
    assert_eq!(
        w.env
            .git(&work, &["symbolic-ref", "refs/remotes/origin/HEAD"]),
        "refs/remotes/origin/master"
    );
    let context = std::fs::read_to_string(task_dir.join("context.md")).unwrap();
    assert!(
        context.contains(&format!(
            "- the fix closes once merged into `master` (the origin's default branch); commit \
             it with a `Fixes-Finding: {id}` trailer"
        )),
        "{context}"
    );
    assert!(!context.contains("`main`"), "{context}");
    assert_eq!(
        origin_branches(&w),
        vec!["master"],
        "a pull creates no branch"
    );
}

#[test]
fn integrate_review_alone_sends_the_fix_to_its_task_branch_whatever_push_to_says() {
    let w = master_world();
    let id = w.record_task("a.py", "review me", "integrate: review");
    let (out, _) = w.pull("c1", &[]);
    assert_eq!(out.code, 0, "{out:?}");
    let task = task_json(&w, "c1");
    let p = &task["policy"];
    assert_eq!(p["push_branch"], format!("task/{id}").as_str(), "{task}");
    assert_eq!(p["target"], "master", "{task}");
    assert_eq!(
        p["push_to"]["value"], "main",
        "push_to keeps its default: {task}"
    );
    assert_eq!(p["integrate"]["source"]["from"], "details");
    assert_eq!(
        p["push_why"],
        format!(
            "integrate: review (from the task's details) sends the fix to task/{id} for \
             review, whatever push_to says; it reaches master only through a merge"
        )
        .as_str()
    );
    let (task_dir, _) = w.dirs("c1");
    let context = std::fs::read_to_string(task_dir.join("context.md")).unwrap();
    assert!(
        context.contains(&format!("- push to `task/{id}` — integrate: review")),
        "{context}"
    );
}

#[test]
fn a_target_the_origin_lacks_parks_the_task_and_one_it_has_is_pulled() {
    let w = master_world();
    let missing = w.record_task_at("CRITICAL", "a.py", "for release", "target: release");
    let (out, v) = w.pull("c1", &[]);
    assert_eq!(out.code, 5, "{out:?}");
    assert_eq!(v["failed"]["task_id"], missing.as_str(), "{v}");
    assert_eq!(v["failed"]["parked"], true, "{v}");
    let reason = v["failed"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("\"release\"") && reason.contains("never creates it"),
        "{reason}"
    );
    let (task_dir, work) = w.dirs("c1");
    for dir in [&task_dir, &work] {
        assert!(
            std::fs::read_dir(dir)
                .map(|mut d| d.next().is_none())
                .unwrap_or(true),
            "{} is left empty",
            dir.display()
        );
    }
    // The board (task list --json) shows it parked with the reason naming the branch.
    let board = w.env.run(&["task", "list", "--json"]);
    assert_eq!(board.code, 0, "{board:?}");
    let board: Value = serde_json::from_str(&board.stdout).unwrap();
    let parked: Vec<&Value> = board["repositories"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["parked"].as_array().into_iter().flatten())
        .filter(|t| t["task_id"] == missing.as_str())
        .collect();
    assert_eq!(parked.len(), 1, "{board}");
    assert!(
        parked[0]["reason"]
            .as_str()
            .unwrap()
            .contains("\"release\""),
        "{board}"
    );
    assert_eq!(origin_branches(&w), vec!["master"], "nothing was pushed");

    // Once the origin has the branch, a task naming it is pulled with that target.
    let seed = w.env.path("seed-master");
    w.env.git(&seed, &["push", "-q", &w.url, "master:release"]);
    let named = w.record_task("b.py", "for release, now there", "target: release");
    let (out, v) = w.pull("c2", &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(v["task"]["task_id"], named.as_str(), "{v}");
    let task = task_json(&w, "c2");
    assert_eq!(task["policy"]["target"], "release", "{task}");
    assert_eq!(task["policy"]["push_branch"], "release", "{task}");
    assert_eq!(task["policy"]["target_source"]["from"], "details");
}

#[test]
fn a_target_that_is_no_branch_name_is_refused_and_listed_and_the_default_branch_stands() {
    let w = master_world();
    w.record_task("a.py", "escape", "target: ../x");
    let (out, _) = w.pull("c1", &[]);
    assert_eq!(out.code, 0, "{out:?}");
    let task = task_json(&w, "c1");
    let refused = task["policy"]["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{task}");
    let shown = refused[0].as_str().unwrap();
    assert!(
        shown.starts_with("target: \"../x\" in the task's details: ref refused"),
        "{shown}"
    );
    assert_eq!(task["policy"]["target"], "master", "{task}");
    assert_eq!(task["policy"]["target_source"]["from"], "origin_head");
    assert!(
        out.stderr.contains("../x"),
        "the refusal is logged: {out:?}"
    );
}

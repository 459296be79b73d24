//! `finding close` on each way a fix reaches the target (a squash, a revert and its revert, a
//! cherry-pick without the trailer, a review branch, a fix older than its finding), and what it
//! reports or refuses without writing anything.

use serde_json::Value;

use super::{World, json_out, world, world_with};

impl World {
    /// Verdicts about fixes, leaving out the claim rows `task pull` writes.
    fn fix_verdicts(&self) -> Vec<String> {
        self.verdict_kinds()
            .into_iter()
            .filter(|k| k != "claimed" && k != "claim withdrawn")
            .collect()
    }
}

fn outcome_of(report: &Value, id: &str) -> Value {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["finding_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} not in {report}"))
}

#[test]
fn a_squash_merge_closes_through_the_trailer_line_in_its_body() {
    let w = world();
    let id = w.record_task("b.py", "b returns 3", "");
    let (out, _) = w.pull("c1", &[]);
    assert_eq!(out.code, 0, "{out:?}");
    let (_, work) = w.dirs("c1");
    w.env.git(&work, &["checkout", "-q", "-b", "feature"]);
    let fix = w.fix(&work, "b.py", &id, "b returns 3");
    w.env.git(&work, &["push", "-q", "origin", "feature"]);
    // The squash: one new commit on main whose body concatenates the source messages.
    w.env.git(&work, &["checkout", "-q", "main"]);
    w.env.git(&work, &["merge", "-q", "--squash", "feature"]);
    w.env.git(&work, &["commit", "-q", "-m", &format!("Squashed feature (#7)\n\n* b returns 3\n\nFixes-Finding: {id}\n\nReviewed-by: someone")]);
    w.env.git(&work, &["push", "-q", "origin", "main"]);
    let (out, report) = w.close(&work, &["--commits", &format!("{fix}~1..{fix}")]);
    insta::assert_snapshot!("finding_close_closed_via_trailer_json", w.snap(&out));
    let o = outcome_of(&report, &id);
    assert_ne!(
        o["commit"],
        fix.as_str(),
        "the verdict names the target's commit"
    );
}

#[test]
fn a_trailer_above_a_dashed_line_is_no_trailer_to_git_and_closes_nothing() {
    let w = world();
    let id = w.record_task("a.py", "a returns 6", "");
    assert_eq!(w.pull("c1", &[]).0.code, 0);
    let (_, work) = w.dirs("c1");
    std::fs::write(work.join("a.py"), "def a():\n    return 6\n").unwrap();
    // `git log --format=%(trailers)` reads this message as having no trailer block at all.
    let message = format!("a returns 6\n\nFixes-Finding: {id}\n---\nnotes after a divider");
    w.env.git(&work, &["commit", "-q", "-am", &message]);
    let oracle = w.env.git(
        &work,
        &[
            "log",
            "-1",
            "--format=%(trailers:key=Fixes-Finding,valueonly)",
        ],
    );
    assert_eq!(oracle.trim(), "", "git sees no trailer");
    w.env.git(&work, &["push", "-q", "origin", "HEAD:main"]);
    let out = w.close_text(&work, &["--commits", "HEAD~1..HEAD"]);
    insta::assert_snapshot!("finding_close_dashed_line_is_no_trailer", w.snap(&out));
    assert!(w.fix_verdicts().is_empty(), "nothing was closed");
}

#[test]
fn a_revert_is_reported_and_a_reapplied_fix_closes() {
    let w = world();
    let id = w.record_task("a.py", "a returns 5", "");
    assert_eq!(w.pull("c1", &[]).0.code, 0);
    let (_, work) = w.dirs("c1");
    let fix = w.fix(&work, "a.py", &id, "a returns 5");
    w.env.git(&work, &["revert", "--no-edit", "HEAD"]);
    w.env.git(&work, &["push", "-q", "origin", "HEAD:main"]);
    let range = format!("{fix}~1..{fix}");
    let out = w.close_text(&work, &["--commits", &range]);
    insta::assert_snapshot!("finding_close_reverted", w.snap(&out));
    assert!(w.fix_verdicts().is_empty(), "a reverted fix writes nothing");
    // Revert the revert: the fix is back, so it closes.
    w.env.git(&work, &["revert", "--no-edit", "HEAD"]);
    w.env.git(&work, &["push", "-q", "origin", "HEAD:main"]);
    let out = w.close_text(&work, &["--commits", &range]);
    insta::assert_snapshot!("finding_close_closed_via_reapplied", w.snap(&out));
    assert_eq!(w.fix_verdicts(), vec!["fixed"]);
}

#[test]
fn a_cherry_pick_that_dropped_the_trailer_closes_by_patch_id() {
    let w = world();
    let id = w.record_task("c.py", "x should be 4", "");
    assert_eq!(w.pull("c1", &[]).0.code, 0);
    let (_, work) = w.dirs("c1");
    w.env.git(&work, &["checkout", "-q", "-b", "topic"]);
    let fix = w.fix(&work, "c.py", &id, "x is 4");
    w.env.git(&work, &["push", "-q", "origin", "topic"]);
    // main moves on, then takes the change without its message.
    w.env.git(&work, &["checkout", "-q", "main"]);
    std::fs::write(work.join("b.py"), "def b():\n    return 22\n").unwrap();
    w.env.git(&work, &["commit", "-q", "-am", "unrelated"]);
    w.env.git(&work, &["cherry-pick", "--no-commit", &fix]);
    w.env.git(&work, &["commit", "-q", "-m", "port x"]);
    w.env.git(&work, &["push", "-q", "origin", "main"]);
    let out = w.close_text(&work, &["--commits", &format!("{fix}~1..{fix}")]);
    insta::assert_snapshot!("finding_close_closed_via_patch_id", w.snap(&out));
    assert_eq!(w.fix_verdicts(), vec!["fixed"]);
}

#[test]
fn under_review_a_task_branch_fix_is_pending_until_merged() {
    let w = world();
    let id = w.record_task("a.py", "review me", "push_to: task\nintegrate: review");
    assert_eq!(w.pull("c1", &[]).0.code, 0);
    let (task_dir, work) = w.dirs("c1");
    let task: Value =
        serde_json::from_str(&std::fs::read_to_string(task_dir.join("task.json")).unwrap())
            .unwrap();
    let branch = format!("task/{id}");
    assert_eq!(task["policy"]["push_branch"], branch.as_str());
    assert_eq!(task["policy"]["target"], "main");
    let fix = w.fix(&work, "a.py", &id, "reviewed fix");
    w.env
        .git(&work, &["push", "-q", "origin", &format!("HEAD:{branch}")]);
    let t = task_dir.join("task.json").display().to_string();
    let range = format!("{fix}~1..{fix}");
    let out = w.close_text(&work, &["--commits", &range, "--task", &t]);
    insta::assert_snapshot!("finding_close_pending", w.snap(&out));
    assert_eq!(w.fix_verdicts(), vec!["fix pending (awaiting merge)"]);
    // A pending fix is no open work for another cell.
    assert_eq!(w.pull("c2", &[]).0.code, 3);
    // The reviewer merges; the next close closes it.
    let reviewer = w.env.path("reviewer");
    w.env.git(
        w.env.root.path(),
        &["clone", "-q", &w.url, &reviewer.display().to_string()],
    );
    w.env.git(
        &reviewer,
        &[
            "merge",
            "-q",
            "--no-ff",
            "-m",
            "merge review",
            &format!("origin/{branch}"),
        ],
    );
    w.env.git(&reviewer, &["push", "-q", "origin", "main"]);
    let (_, report) = w.close(&work, &["--commits", &range, "--task", &t]);
    assert_eq!(outcome_of(&report, &id)["outcome"], "closed", "{report}");
}

#[test]
fn unpushed_fixes_and_foreign_ids_are_reported_and_nothing_is_written() {
    let w = world();
    let id = w.record_task("a.py", "local only", "");
    let (_, other_url) = w.env.origin("other", &[("z.py", "z = 1\n")]);
    let out = w.env.run(&[
        "finding",
        "record",
        "--origin",
        &other_url,
        "--file",
        "z.py",
        "--summary",
        "elsewhere",
        "--severity",
        "LOW",
        "--category",
        "task",
        "--json",
    ]);
    let foreign = json_out(&out)["finding_ids"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(w.pull("c1", &[]).0.code, 0);
    let (_, work) = w.dirs("c1");
    let a = w.fix(&work, "a.py", &id, "not pushed");
    let b = w.fix(
        &work,
        "b.py",
        &foreign,
        "names another repository's finding",
    );
    let (out, report) = w.close(&work, &["--commits", &format!("{a}~1..{b}")]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(outcome_of(&report, &id)["outcome"], "unpushed", "{report}");
    assert_eq!(
        outcome_of(&report, &foreign)["outcome"],
        "not_open",
        "{report}"
    );
    // One finding a report, so the snapshots do not depend on the order of random ids.
    let out = w.close_text(&work, &["--commits", &format!("{a}~1..{a}")]);
    insta::assert_snapshot!("finding_close_unpushed", w.snap(&out));
    let out = w.close_text(&work, &["--commits", &format!("{b}~1..{b}")]);
    insta::assert_snapshot!("finding_close_not_open", w.snap(&out));
    assert!(w.fix_verdicts().is_empty());
}

#[test]
fn a_failed_fetch_writes_nothing() {
    let w = world();
    let id = w.record_task("a.py", "fetch fails", "");
    assert_eq!(w.pull("c1", &[]).0.code, 0);
    let (_, work) = w.dirs("c1");
    let fix = w.fix(&work, "a.py", &id, "fix");
    w.env.git(&work, &["push", "-q", "origin", "HEAD:main"]);
    std::fs::rename(&w.bare, w.env.path("moved.git")).unwrap();
    let out = w.close_text(&work, &["--commits", &format!("{fix}~1..{fix}")]);
    insta::assert_snapshot!("finding_close_fetch_failed", w.snap(&out));
    assert!(w.fix_verdicts().is_empty());
}

#[test]
fn ambiguous_commits_and_a_foreign_task_file_are_refused_before_anything_is_sent() {
    let w = world();
    let id = w.record_task("a.py", "stays open", "");
    assert_eq!(w.pull("c1", &[]).0.code, 0);
    let (task, work) = w.dirs("c1");
    let fix = w.fix(&work, "a.py", &id, "fix");
    w.env.git(&work, &["push", "-q", "origin", "HEAD:main"]);
    let range = format!("{fix}~1..{fix}");
    // Two sources of commits: neither is picked silently.
    let both = w.close_text(&work, &["--commits-from", "/dev/null", "--commits", &range]);
    insta::assert_snapshot!("finding_close_both_commit_sources", w.snap(&both));
    // A task file that task pull did not write says so, instead of closing as someone else.
    let foreign = task.join("task.json");
    std::fs::write(&foreign, r#"{"task_id": "agf_x", "policy": {}}"#).unwrap();
    let t = foreign.display().to_string();
    let out = w.close_text(&work, &["--commits", &range, "--task", &t]);
    insta::assert_snapshot!("finding_close_foreign_task_file", w.snap(&out));
    assert!(w.fix_verdicts().is_empty(), "nothing was written");
    // The same file breaks the heartbeat the same way.
    let dir = task.display().to_string();
    let out = w.env.run(&["task", "renew", "--task-dir", &dir]);
    insta::assert_snapshot!("task_renew_foreign_task_file", w.snap(&out));
}

#[test]
fn a_fix_committed_days_before_the_finding_closes_when_it_touches_its_files() {
    let w = world();
    let id = w.record_task("a.py", "already fixed upstream", "");
    assert_eq!(w.pull("c1", &[]).0.code, 0);
    let (_, work) = w.dirs("c1");
    std::fs::write(work.join("a.py"), "def a():\n    return 3\n").unwrap();
    w.env.git(&work, &["add", "a.py"]);
    let old = "2020-01-01T00:00:00Z";
    let out = std::process::Command::new("git")
        .env_clear()
        .envs(w.env.vars.iter().map(|(k, v)| (k, v)))
        .env("GIT_COMMITTER_DATE", old)
        .env("GIT_AUTHOR_DATE", old)
        .current_dir(&work)
        .args([
            "commit",
            "-q",
            "-m",
            &format!("old fix\n\nFixes-Finding: {id}"),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let fix = w.env.git(&work, &["rev-parse", "HEAD"]);
    // Newer work on top, so the old fix lies past what the finding's date alone would read.
    w.env
        .git(&work, &["commit", "-q", "--allow-empty", "-m", "later"]);
    w.env.git(&work, &["push", "-q", "origin", "HEAD:main"]);
    let (out, report) = w.close(&work, &["--commits", &format!("{fix}~1..{fix}")]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(outcome_of(&report, &id)["outcome"], "closed", "{report}");
    let fixed = w
        .verdicts()
        .into_iter()
        .find(|c| c["content"].as_str().unwrap().contains("verdict: fixed"))
        .unwrap();
    assert!(
        fixed["content"]
            .as_str()
            .unwrap()
            .contains("fix_predates_finding: yes"),
        "{fixed}"
    );
}

#[test]
fn a_closing_verdict_is_linked_to_its_finding_and_credits_it_on_either_ledger() {
    // The ledger as shipped writes the three in one write; one without it (`--no-take`) is
    // written them as three requests. The rows must be the same.
    for extra in [&[][..], &["--no-take"][..]] {
        let w = world_with(extra);
        let id = w.record_task("a.py", "a returns 4", "");
        assert_eq!(w.pull("c1", &[]).0.code, 0);
        let (_, work) = w.dirs("c1");
        let fix = w.fix(&work, "a.py", &id, "a returns 4");
        w.env.git(&work, &["push", "-q", "origin", "HEAD:main"]);
        let (out, report) = w.close(&work, &["--commits", &format!("{fix}~1..{fix}")]);
        assert_eq!(out.code, 0, "{extra:?}: {out:?}");
        assert_eq!(outcome_of(&report, &id)["outcome"], "closed", "{report}");
        let fixed: Vec<Value> = w
            .verdicts()
            .into_iter()
            .filter(|c| c["content"].as_str().unwrap().contains("verdict: fixed"))
            .collect();
        assert_eq!(fixed.len(), 1, "{extra:?}: one verdict");
        let content = fixed[0]["content"].as_str().unwrap();
        let finding = content
            .lines()
            .find_map(|l| l.strip_prefix("finding_concept: "))
            .unwrap();
        let key = w.key();
        let (status, graph) = w.ledger.resolve(
            &key,
            serde_json::json!({"type": "conceptGraph", "concept_id": fixed[0]["id"],
                "direction": "outgoing"}),
        );
        assert_eq!(status, 200, "{graph}");
        let edges: Vec<(&str, &str)> = graph["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["edge"]["edge_type"].as_str().unwrap(),
                    e["neighbor"]["id"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(edges, [("derived_from", finding)], "{extra:?}");
        let (_, stats) = w.ledger.resolve(
            &key,
            serde_json::json!({"type": "conceptUsageStats", "concept_id": finding}),
        );
        assert_eq!(
            (&stats["total_uses"], &stats["successes"]),
            (&serde_json::json!(1), &serde_json::json!(1)),
            "{extra:?}: {stats}"
        );
    }
}

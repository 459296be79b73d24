//! `finding close --pending --origin URL`: the sweep that closes a review once a reviewer merged
//! its task branch, from a clone of the origin alone; what it reports for a review still waiting
//! or one whose branch is gone; a target defaulting to the origin's default branch; and the
//! failures that write nothing. The git CLI does every reviewer's step, as the oracle.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::{World, json_out, world};
use crate::support::Output;

impl World {
    /// `finding close --pending --origin <url>` with `extra` flags.
    fn sweep(&self, url: &str, extra: &[&str]) -> Output {
        let mut args = vec!["finding", "close", "--pending", "--origin", url];
        args.extend_from_slice(extra);
        self.env.run(&args)
    }

    /// The sweep's JSON report; it must have run.
    fn sweep_json(&self) -> Value {
        let out = self.sweep(&self.url, &["--json"]);
        assert_eq!(out.code, 0, "{out:?}");
        json_out(&out)
    }

    /// A task recorded for review and taken by `cell`, fixed in its clone and pushed to
    /// `task/<id>` by git itself, then reported pending by `finding close`. Returns the task id,
    /// the fix and the cell's clone.
    fn pending_review(&self, cell: &str, file: &str, summary: &str) -> (String, String, PathBuf) {
        let id = self.record_task(file, summary, "ref: main\nintegrate: review");
        let (out, pulled) = self.pull(cell, &[]);
        assert_eq!(out.code, 0, "{out:?}");
        assert_eq!(pulled["task"]["task_id"], id.as_str(), "{pulled}");
        let (task_dir, work) = self.dirs(cell);
        let fix = self.fix(&work, file, &id, summary);
        self.env
            .git(&work, &["push", "-q", "origin", &format!("HEAD:task/{id}")]);
        let t = task_dir.join("task.json").display().to_string();
        let range = format!("{fix}~1..{fix}");
        let (out, report) = self.close(
            &work,
            &["--commits", &range, "--task", &t, "--target", "main"],
        );
        assert_eq!(out.code, 0, "{out:?}");
        assert_eq!(report["findings"][0]["outcome"], "pending", "{report}");
        (id, fix, work)
    }

    /// A reviewer's merge of `task/<id>` into main, from a clone of their own.
    fn merge_review(&self, id: &str) {
        let reviewer = self.env.path(&format!("reviewer-{id}"));
        self.env.git(
            self.env.root.path(),
            &["clone", "-q", &self.url, &reviewer.display().to_string()],
        );
        self.env.git(
            &reviewer,
            &[
                "merge",
                "-q",
                "--no-ff",
                "-m",
                "merge the review",
                &format!("origin/task/{id}"),
            ],
        );
        self.env.git(&reviewer, &["push", "-q", "origin", "main"]);
    }

    fn count(&self, kind: &str) -> usize {
        self.verdict_kinds().iter().filter(|k| *k == kind).count()
    }

    /// Which group of the board (`task list --json`) holds `id`.
    fn board_group(&self, id: &str) -> String {
        let out = self.env.run(&["task", "list", "--json"]);
        assert_eq!(out.code, 0, "{out:?}");
        let board = json_out(&out);
        for repo in board["repositories"].as_array().into_iter().flatten() {
            for (group, tasks) in repo.as_object().into_iter().flatten() {
                if tasks
                    .as_array()
                    .is_some_and(|ts| ts.iter().any(|t| t["task_id"] == id))
                {
                    return group.clone();
                }
            }
        }
        panic!("{id} is on no board group: {board}")
    }

    /// Writes a pending verdict for `id` straight to the ledger, as any writer could: the
    /// sweep reads it as a row it does not trust.
    fn write_pending_row(&self, id: &str, finding_concept: &str, lines: &[(&str, &str)]) {
        let mut content = format!(
            "session: s\nverdict: fix pending (awaiting merge)\nfinding_ids: {id}\n\
             finding_concept: {finding_concept}\norigin: remote\n"
        );
        for (k, v) in lines {
            content.push_str(&format!("{k}: {v}\n"));
        }
        content.push('\n');
        let (status, body) = self.ledger.resolve(
            &self.env.admin_key(),
            json!({"type": "concept_create_write", "conceptData": {
                "shape": "finding_verdict", "source_type": "metabob_annotation",
                "summary": "[verdict:pending] written by hand", "content": content}}),
        );
        assert!((200..300).contains(&status), "{status} {body}");
    }
}

fn entry<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["tasks"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["task_id"] == id))
        .unwrap_or_else(|| panic!("{id} not in {report}"))
}

#[test]
fn a_merged_review_closes_by_the_sweep_and_a_second_sweep_writes_nothing() {
    let w = world();
    let (merged, fix, _) = w.pending_review("c1", "a.py", "a returns 2");
    let (waiting, waiting_fix, _) = w.pending_review("c2", "b.py", "b returns 3");
    assert_eq!(w.count("fix pending (awaiting merge)"), 2);
    assert_eq!(w.board_group(&merged), "pending");

    // Before any merge: both wait on their branches, and nothing is written.
    let report = w.sweep_json();
    assert!(
        report["repository"]
            .as_str()
            .is_some_and(|r| r.ends_with("origins/app")),
        "{report}"
    );
    assert_eq!(report["default_branch"], "main", "{report}");
    for (id, fix) in [(&merged, &fix), (&waiting, &waiting_fix)] {
        let e = entry(&report, id);
        assert_eq!(e["outcome"], "pending", "{report}");
        assert_eq!(e["target"], "main", "{report}");
        assert_eq!(e["fix_commit"], fix.as_str(), "{report}");
        assert_eq!(e["branches"], json!([format!("task/{id}")]), "{report}");
        assert_eq!(e["verdict"], Value::Null, "nothing was written: {report}");
    }
    assert_eq!(w.count("fix pending (awaiting merge)"), 2);

    // The reviewer merges one review; the sweep closes it, and only it.
    w.merge_review(&merged);
    let report = w.sweep_json();
    let e = entry(&report, &merged);
    assert_eq!(e["outcome"], "closed", "{report}");
    assert_eq!(e["via"], "commit", "{report}");
    assert_eq!(e["commit"], fix.as_str(), "{report}");
    assert!(
        e["verdict"].as_str().is_some_and(|v| !v.is_empty()),
        "{report}"
    );
    assert_eq!(entry(&report, &waiting)["outcome"], "pending", "{report}");
    assert_eq!(w.count("fixed"), 1);
    assert_eq!(w.count("fix pending (awaiting merge)"), 2);
    assert_eq!(w.board_group(&merged), "closed");
    assert_eq!(w.board_group(&waiting), "pending");
    // The verdict says where the fix landed, as `finding close` writes it.
    let fixed = w
        .verdicts()
        .into_iter()
        .filter_map(|c| c["content"].as_str().map(str::to_owned))
        .find(|c| c.contains("verdict: fixed"))
        .unwrap();
    assert!(fixed.contains("fix_target: main"), "{fixed}");
    assert!(fixed.contains("fix_via: commit"), "{fixed}");
    // The git CLI agrees the fix is in main's history.
    let bare = w.bare.display().to_string();
    w.env.git(
        w.env.root.path(),
        &[
            "--git-dir",
            &bare,
            "merge-base",
            "--is-ancestor",
            &fix,
            "main",
        ],
    );

    // Again: the closed one is no longer pending, the other still waits; nothing new is written.
    let rows = w.verdicts().len();
    let out = w.sweep(&w.url, &[]);
    insta::assert_snapshot!("finding_close_sweep_still_pending", w.snap(&out));
    let report = w.sweep_json();
    assert_eq!(report["tasks"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(w.verdicts().len(), rows, "a second sweep writes nothing");
    assert_eq!(w.count("fixed"), 1);
    assert_eq!(scratch_left(&w), Vec::<String>::new());
}

/// The sweep's scratch clones still under the test's TMPDIR.
fn scratch_left(w: &World) -> Vec<String> {
    std::fs::read_dir(w.env.path("tmp"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("metabob-sweep-"))
        .collect()
}

#[test]
fn the_text_report_says_how_a_merged_review_landed() {
    let w = world();
    let (id, _, _) = w.pending_review("c1", "a.py", "a returns 2");
    w.merge_review(&id);
    let out = w.sweep(&w.url, &[]);
    insta::assert_snapshot!("finding_close_sweep_closed", w.snap(&out));
    assert_eq!(w.count("fixed"), 1);
    assert_eq!(w.board_group(&id), "closed");
}

#[test]
fn a_review_branch_deleted_unmerged_is_reported_and_stays_pending() {
    let w = world();
    let (id, fix, work) = w.pending_review("c1", "a.py", "abandoned");
    w.env.git(
        &work,
        &["push", "-q", "origin", "--delete", &format!("task/{id}")],
    );
    // Nothing on the origin holds the fix any more (the git CLI as oracle).
    let bare = w.bare.display().to_string();
    let holders = w.env.git(
        w.env.root.path(),
        &["--git-dir", &bare, "branch", "--contains", &fix],
    );
    assert_eq!(holders, "", "no branch holds the fix");
    let before = w.verdict_kinds().len();
    let report = w.sweep_json();
    let e = entry(&report, &id);
    assert_eq!(e["outcome"], "missing", "{report}");
    assert_eq!(e["fix_commit"], fix.as_str(), "{report}");
    let out = w.sweep(&w.url, &[]);
    insta::assert_snapshot!("finding_close_sweep_missing", w.snap(&out));
    assert_eq!(w.verdict_kinds().len(), before, "nothing was written");
    assert_eq!(w.board_group(&id), "pending");
}

/// A bare origin whose `main` was renamed `master`, so its HEAD names master.
fn master_origin(w: &World, name: &str) -> (PathBuf, String) {
    let (bare, url) = w.env.origin(name, &[("a.py", "def a():\n    return 1\n")]);
    w.env.git(&bare, &["branch", "-m", "main", "master"]);
    assert_eq!(
        w.env.git(&bare, &["symbolic-ref", "HEAD"]),
        "refs/heads/master"
    );
    (bare, url)
}

fn clone_of(w: &World, url: &str, dir: &str) -> PathBuf {
    let work = w.env.path(dir);
    w.env.git(
        w.env.root.path(),
        &["clone", "-q", url, &work.display().to_string()],
    );
    work
}

#[test]
fn without_a_target_finding_close_judges_against_the_origins_default_branch() {
    let w = world();
    let (_, url) = master_origin(&w, "legacy");
    let recorded = w
        .env
        .record_task_with(&url, "a.py", "a returns 4", "HIGH", "");
    let id = recorded["finding_ids"][0].as_str().unwrap().to_string();
    let work = clone_of(&w, &url, "legacy-work");
    let fix = w.fix(&work, "a.py", &id, "a returns 4");
    w.env.git(&work, &["push", "-q", "origin", "HEAD:master"]);
    let (out, report) = w.close(&work, &["--commits", &format!("{fix}~1..{fix}")]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(report["target"], "master", "{report}");
    assert_eq!(report["findings"][0]["outcome"], "closed", "{report}");
    let fixed = w
        .verdicts()
        .into_iter()
        .filter_map(|c| c["content"].as_str().map(str::to_owned))
        .find(|c| c.contains("verdict: fixed"))
        .unwrap();
    assert!(fixed.contains("fix_target: master"), "{fixed}");
}

/// Pending rows the sweep did not write: one with no target (judged against the origin's
/// default branch, master), one naming a target that is no branch name, one naming a commit
/// the origin never had. Each is judged or reported on its own; none stops the sweep.
#[test]
fn the_sweep_reads_each_pending_row_as_untrusted_and_defaults_to_the_origins_head() {
    let mut w = world();
    let (_, url) = master_origin(&w, "legacy");
    w.url = url.clone();
    let record = |summary: &str| {
        let v = w.env.record_task_with(&url, "a.py", summary, "HIGH", "");
        (
            v["finding_ids"][0].as_str().unwrap().to_string(),
            v["concept_id"].as_str().unwrap().to_string(),
        )
    };
    let (merged, merged_concept) = record("merged into master");
    let (odd, odd_concept) = record("odd target");
    let (ghost, ghost_concept) = record("fix never pushed");
    let work = clone_of(&w, &url, "legacy-work");
    let fix = w.fix(&work, "a.py", &merged, "merged into master");
    w.env.git(&work, &["push", "-q", "origin", "HEAD:master"]);
    w.write_pending_row(
        &merged,
        &merged_concept,
        &[("fix", &format!("commit {fix}"))],
    );
    w.write_pending_row(
        &odd,
        &odd_concept,
        &[
            ("fix", &format!("commit {fix}")),
            ("fix_target", "master~1"),
        ],
    );
    let nowhere = "0123456789abcdef0123456789abcdef01234567";
    w.write_pending_row(
        &ghost,
        &ghost_concept,
        &[
            ("fix", &format!("commit {nowhere}")),
            ("fix_target", "master"),
        ],
    );

    let report = w.sweep_json();
    assert_eq!(report["default_branch"], "master", "{report}");
    let e = entry(&report, &merged);
    assert_eq!(e["target"], "master", "{report}");
    assert_eq!(e["outcome"], "closed", "{report}");
    let e = entry(&report, &odd);
    assert_eq!(e["outcome"], "refused", "{report}");
    assert!(
        e["why"].as_str().unwrap().contains("no branch name"),
        "{report}"
    );
    assert_eq!(entry(&report, &ghost)["outcome"], "missing", "{report}");
    assert_eq!(w.count("fixed"), 1);
}

#[test]
fn a_sweep_without_an_origin_or_with_one_that_cannot_be_cloned_writes_nothing() {
    let w = world();
    let out = w.env.run(&["finding", "close", "--pending"]);
    insta::assert_snapshot!("finding_close_sweep_no_origin", w.snap(&out));
    let out = w.env.run(&[
        "finding",
        "close",
        "--pending",
        "--origin",
        &w.url,
        "--task",
        "t.json",
    ]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .contains("'--pending' cannot be used with '--task <TASK_JSON>'"),
        "{out:?}"
    );
    let out = w.env.run(&[
        "finding",
        "close",
        "--pending",
        "--commits",
        "HEAD",
        "--origin",
        &w.url,
    ]);
    assert_eq!(out.code, 1, "{out:?}");

    // A pending review, then its origin goes away: the sweep names it and writes nothing.
    w.pending_review("c1", "a.py", "origin moves");
    let before = w.verdict_kinds().len();
    std::fs::rename(&w.bare, w.env.path("moved.git")).unwrap();
    let out = w.sweep(&w.url, &[]);
    insta::assert_snapshot!("finding_close_sweep_clone_failed", w.snap(&out));
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.contains(&w.url), "{out:?}");
    assert_eq!(w.verdict_kinds().len(), before, "nothing was written");
    assert_eq!(scratch_left(&w), Vec::<String>::new());
}

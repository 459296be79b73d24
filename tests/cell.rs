//! The cell lifecycle end to end: `finding record` → `task pull` → fix, commit, push →
//! `finding close`, on real bare repositories over real transports, against a real ledger.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::{Ledger, Output, TestEnv, git_daemon, snapshot};

struct World {
    env: TestEnv,
    ledger: Ledger,
    bare: PathBuf,
    url: String,
}

fn world() -> World {
    let env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    let (bare, url) = env.origin(
        "app",
        &[
            ("a.py", "def a():\n    return 1\n"),
            ("b.py", "def b():\n    return 2\n"),
            ("c.py", "x = 3\n"),
        ],
    );
    World {
        env,
        ledger,
        bare,
        url,
    }
}

fn json_out(out: &Output) -> Value {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

impl World {
    fn record_task(&self, file: &str, summary: &str, details: &str) -> String {
        self.record_task_at("HIGH", file, summary, details)
    }

    fn record_task_at(&self, severity: &str, file: &str, summary: &str, details: &str) -> String {
        let v = self
            .env
            .record_task_with(&self.url, file, summary, severity, details);
        assert_eq!(v["outcome"], "recorded", "{v}");
        v["finding_ids"][0].as_str().unwrap().to_string()
    }

    fn dirs(&self, cell: &str) -> (PathBuf, PathBuf) {
        (
            self.env.path(&format!("{cell}/task")),
            self.env.path(&format!("{cell}/work")),
        )
    }

    fn pull(&self, cell: &str, extra: &[&str]) -> (Output, Value) {
        let mut args = vec!["--json"];
        args.extend_from_slice(extra);
        let out = self.env.task_pull(&self.url, cell, &args);
        let v = if out.stdout.trim().is_empty() {
            Value::Null
        } else {
            json_out(&out)
        };
        (out, v)
    }

    /// Edits `file` in the cell's clone and commits with the trailer; returns the sha.
    fn fix(&self, work: &Path, file: &str, id: &str, subject: &str) -> String {
        let p = work.join(file);
        let mut text = std::fs::read_to_string(&p).unwrap();
        text.push_str(&format!("# fixed: {subject}\n"));
        std::fs::write(&p, text).unwrap();
        self.env.git(
            work,
            &[
                "commit",
                "-q",
                "-am",
                &format!("{subject}\n\nFixes-Finding: {id}"),
            ],
        );
        self.env.git(work, &["rev-parse", "HEAD"])
    }

    fn close(&self, work: &Path, extra: &[&str]) -> (Output, Value) {
        let w = work.display().to_string();
        let mut args = vec!["finding", "close", "--work-dir", &w, "--json"];
        args.extend_from_slice(extra);
        let out = self.env.run(&args);
        let v = if out.code == 0 {
            json_out(&out)
        } else {
            Value::Null
        };
        (out, v)
    }

    /// `finding close` with its text report.
    fn close_text(&self, work: &Path, extra: &[&str]) -> Output {
        let w = work.display().to_string();
        let mut args = vec!["finding", "close", "--work-dir", &w];
        args.extend_from_slice(extra);
        self.env.run(&args)
    }

    /// `task pull` with its text report.
    fn pull_text(&self, cell: &str) -> Output {
        self.env.task_pull(&self.url, cell, &[])
    }

    fn snap(&self, out: &Output) -> String {
        snapshot(out, &self.env)
    }

    fn verdicts(&self) -> Vec<Value> {
        let key = serde_json::from_str::<Value>(
            &std::fs::read_to_string(self.env.home().join(".substrate/config.json")).unwrap(),
        )
        .unwrap()["metabob"]["apiKey"]
            .as_str()
            .unwrap()
            .to_string();
        let url = self.ledger.url.clone();
        tokio::runtime::Runtime::new().unwrap().block_on(async move {
            use metabob_net::{NetClient, Request, Url};
            let net = NetClient::from_env(&metabob_wire::env::Env::new(Vec::new(), "/"));
            let body = json!({"pointer": {"type": "conceptSearch", "shape": "finding_verdict", "limit": 1000}});
            let r = net
                .send(Request::post_json(Url::parse(&url).unwrap().join("/resolve"), &body).header("authorization", format!("ApiKey {key}")))
                .await
                .unwrap();
            r.json().unwrap()["concepts"].as_array().unwrap().clone()
        })
    }

    fn verdict_kinds(&self) -> Vec<String> {
        self.verdicts()
            .iter()
            .filter_map(|c| c["content"].as_str())
            .filter_map(|c| {
                c.lines()
                    .find_map(|l| l.strip_prefix("verdict: "))
                    .map(str::to_owned)
            })
            .collect()
    }
}

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
fn a_cell_pulls_fixes_pushes_and_closes_over_git_daemon() {
    let mut w = world();
    let (prefix, _daemon) = git_daemon(&w.env, w.bare.parent().unwrap());
    w.url = format!("{prefix}app.git");
    let id = w.record_task(
        "a.py",
        "make a() return 2",
        "ref: main\nThe caller expects 2.",
    );
    let (out, _) = w.pull("c1", &[]);
    insta::assert_snapshot!("task_pull_pulled_json", w.snap(&out));
    let (task_dir, work) = w.dirs("c1");
    let task: Value =
        serde_json::from_str(&std::fs::read_to_string(task_dir.join("task.json")).unwrap())
            .unwrap();
    assert_eq!(task["task_id"], id.as_str());
    assert_eq!(task["ref"], "main");
    assert_eq!(task["files"], json!(["a.py"]));
    assert_eq!(task["policy"]["push_branch"], "main");
    assert_eq!(task["policy"]["push_to"]["source"]["from"], "default");
    assert_eq!(task["trust"]["defaulted"], true);
    assert_eq!(
        task["base"],
        w.env.git(&work, &["rev-parse", "HEAD"]).as_str()
    );
    let context = std::fs::read_to_string(task_dir.join("context.md")).unwrap();
    assert!(context.contains("The caller expects 2."), "{context}");
    // The policy in the policy file's own words, never a Rust type's name.
    let policy = context
        .split("## Integration policy")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("context.md has its policy section");
    insta::assert_snapshot!(
        "task_pull_context_policy",
        crate::support::normalize(policy, &w.env)
    );

    w.fix(&work, "a.py", &id, "a returns 2");
    let commits = task_dir.join("commits");
    std::fs::write(
        &commits,
        w.env.git(&work, &["rev-list", "origin/main..HEAD"]),
    )
    .unwrap();
    w.env.git(&work, &["push", "-q", "origin", "HEAD:main"]);
    let c = commits.display().to_string();
    let t = task_dir.join("task.json").display().to_string();
    let out = w.close_text(&work, &["--commits-from", &c, "--task", &t]);
    insta::assert_snapshot!("finding_close_closed", w.snap(&out));
    assert_eq!(
        w.verdict_kinds().iter().filter(|k| *k == "fixed").count(),
        1
    );
    // Closing again writes nothing more; the next cell finds nothing open.
    let (out, _) = w.close(&work, &["--commits-from", &c]);
    insta::assert_snapshot!("finding_close_not_open_json", w.snap(&out));
    assert_eq!(
        w.verdict_kinds().iter().filter(|k| *k == "fixed").count(),
        1
    );
    let (out, _) = w.pull("c2", &[]);
    insta::assert_snapshot!("task_pull_nothing_open_json", w.snap(&out));
    insta::assert_snapshot!("task_pull_nothing_open", w.snap(&w.pull_text("c3")));
}

/// A fresh CI runner or container has no `user.name`: `finding close` fetches there as
/// `git fetch` does, writing its reflog entries with git's fallback identity.
#[test]
fn finding_close_fetches_on_a_machine_with_no_git_identity() {
    let w = world();
    let id = w.record_task("a.py", "make a() return 2", "ref: main");
    assert_eq!(w.pull("c1", &[]).0.code, 0);
    let (_, work) = w.dirs("c1");
    w.fix(&work, "a.py", &id, "a returns 2");
    // Pushed by URL, so the clone's origin/main stays behind and the fetch has a ref to update
    // and log.
    w.env.git(&work, &["push", "-q", &w.url, "HEAD:main"]);
    let gitconfig = w.env.home().join(".gitconfig");
    std::fs::write(&gitconfig, "[init]\n\tdefaultBranch = main\n").unwrap();
    let rev = w.env.git(&work, &["rev-parse", "HEAD"]);
    let (out, v) = w.close(&work, &["--commits", &rev]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(!out.stderr.contains("committer"), "{out:?}");
    assert_eq!(v["findings"][0]["outcome"], "closed", "{v}");
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

/// A race on one claim path: `pullers` cells start together over `tasks` open tasks, and each
/// pulls again into fresh directories (a new cell identity) until nothing is free for it. Every
/// task must be pulled exactly once, whoever loses a race; returns the claims lost on the way.
/// `take: false` runs the ledger as a substrate without the atomic take (`--no-take`), so the
/// pulls claim by read-back. With more than one replica the ledger is that many `ledger serve`
/// processes over one PostgreSQL database, and the pullers take turns between them.
fn race(take: bool, pullers: usize, tasks: usize, round: usize, replicas: usize) -> usize {
    let env = TestEnv::new();
    let args: &[&str] = if take { &[] } else { &["--no-take"] };
    let _ledger = if replicas > 1 {
        env.ledger_on("main", &crate::support::pg::fresh_database(), args)
    } else {
        env.ledger("main", args)
    };
    let others: Vec<_> = (1..replicas).map(|_| _ledger.replica(&env)).collect();
    let endpoints: Vec<String> = std::iter::once(_ledger.url.clone())
        .chain(others.iter().map(|l| l.url.clone()))
        .collect();
    let (_, url) = env.origin("app", &[("a.py", "def a():\n    return 1\n")]);
    let w = World {
        env,
        ledger: _ledger,
        bare: PathBuf::new(),
        url,
    };
    let mut ids: Vec<String> = (0..tasks)
        .map(|i| w.record_task("a.py", &format!("repair stage {i}"), ""))
        .collect();
    let path = if take { "take" } else { "read_back" };
    let outcomes: Vec<(Vec<String>, usize)> = std::thread::scope(|scope| {
        let cells: Vec<_> = (0..pullers)
            .map(|i| {
                let w = &w;
                let endpoint = &endpoints[i % endpoints.len()];
                scope.spawn(move || {
                    let (mut pulled, mut lost) = (Vec::new(), 0);
                    for k in 0.. {
                        let (task, work) = w.dirs(&format!("cell{i}-{k}"));
                        let out = Output::from(
                            w.env
                                .cmd(&[
                                    "task",
                                    "pull",
                                    "--origin",
                                    &w.url,
                                    "--task-dir",
                                    &task.display().to_string(),
                                    "--work-dir",
                                    &work.display().to_string(),
                                    "--json",
                                ])
                                .env("DISCOVERY_ENDPOINT", endpoint)
                                .output()
                                .unwrap(),
                        );
                        let report = match out.code {
                            0 | 3 | 4 => json_out(&out),
                            _ => panic!("{path} round {round}: unexpected exit {out:?}"),
                        };
                        assert_eq!(report["claim_path"], path, "{report}");
                        lost += report["candidates"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .filter(|c| c["outcome"] == "lost")
                            .count();
                        if out.code != 0 {
                            break;
                        }
                        pulled.push(report["task"]["task_id"].as_str().unwrap().to_string());
                    }
                    (pulled, lost)
                })
            })
            .collect();
        cells.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let mut pulled: Vec<String> = outcomes.iter().flat_map(|(p, _)| p.clone()).collect();
    pulled.sort();
    ids.sort();
    assert_eq!(
        pulled, ids,
        "{path} round {round}: each task pulled exactly once"
    );
    outcomes.iter().map(|(_, lost)| lost).sum()
}

#[test]
fn sixteen_pulls_over_five_tasks_take_each_exactly_once_on_both_claim_paths() {
    for round in 0..20 {
        assert_eq!(race(true, 16, 5, round, 1), 0, "a take never loses a claim");
        race(false, 16, 5, round, 1);
    }
}

/// Two `ledger serve` replicas over one PostgreSQL: the cells alternate between them, and still
/// no task is held by two (SPEC.md §Claim order on each store).
#[test]
fn sixteen_pulls_on_two_postgres_replicas_take_each_task_exactly_once_on_both_claim_paths() {
    for round in 0..20 {
        assert_eq!(race(true, 16, 5, round, 2), 0, "a take never loses a claim");
        race(false, 16, 5, round, 2);
    }
}

#[test]
fn thirty_two_cells_over_fifty_tasks_take_each_exactly_once_on_both_claim_paths() {
    assert_eq!(race(true, 32, 50, 0, 1), 0, "a take never loses a claim");
    race(false, 32, 50, 0, 1);
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

#[test]
fn recording_the_same_open_finding_twice_writes_once_unless_forced() {
    let w = world();
    let first = w.record_task("a.py", "Null check missing in a()", "");
    let args = [
        "finding",
        "record",
        "--origin",
        &w.url,
        "--file",
        "a.py",
        "--summary",
        "null check missing in a",
        "--severity",
        "LOW",
        "--category",
        "task",
    ];
    // The first id as recorded, so the snapshots name it first.
    crate::support::seen(&w.env, &[&first]);
    let out = w.env.run(&args);
    insta::assert_snapshot!("finding_record_already_recorded", w.snap(&out));
    let mut forced = args.to_vec();
    forced.push("--force");
    let out = w.env.run(&forced);
    insta::assert_snapshot!("finding_record_recorded", w.snap(&out));
    let mut json = forced.clone();
    json.push("--json");
    let out = w.env.run(&json);
    insta::assert_snapshot!("finding_record_recorded_json", w.snap(&out));
    // Every argument the finding needs is required.
    let out = w.env.run(&[
        "finding",
        "record",
        "--origin",
        &w.url,
        "--summary",
        "no file",
        "--severity",
        "LOW",
        "--category",
        "task",
    ]);
    insta::assert_snapshot!("finding_record_missing_file", w.snap(&out));
    // A secret in the details is refused before anything is sent.
    let out = w.env.run(&[
        "finding",
        "record",
        "--origin",
        &w.url,
        "--file",
        "b.py",
        "--summary",
        "leaky",
        "--severity",
        "LOW",
        "--category",
        "task",
        "--details",
        "use DB_PASSWORD=hunter2 to log in",
    ]);
    insta::assert_snapshot!("finding_record_refused_secret", w.snap(&out));
    assert!(!out.stderr.contains("hunter2"), "{out:?}");
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

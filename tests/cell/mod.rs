//! The cell lifecycle end to end: `finding record` → `task pull` → fix, commit, push →
//! `finding close`, on real bare repositories over real transports, against a real ledger.

mod close;
mod pull;
mod race;
mod run;
mod sweep;

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
    world_with(&[])
}

/// [`world`] with a ledger started with `extra` arguments.
fn world_with(extra: &[&str]) -> World {
    let env = TestEnv::new();
    let ledger = env.ledger("main", extra);
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

    /// The key the cells use, from the config file the world wrote.
    fn key(&self) -> String {
        serde_json::from_str::<Value>(
            &std::fs::read_to_string(self.env.home().join(".substrate/config.json")).unwrap(),
        )
        .unwrap()["metabob"]["apiKey"]
            .as_str()
            .unwrap()
            .to_string()
    }

    fn verdicts(&self) -> Vec<Value> {
        let key = self.key();
        let url = self.ledger.url.clone();
        tokio::runtime::Runtime::new().unwrap().block_on(async move {
            use metabob_net::{NetClient, Request, Url};
            let net = NetClient::from_env(&metabob_process::env::Env::new(Vec::new(), "/"));
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

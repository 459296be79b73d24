//! gix's clone and fetch against the git CLI's, over file:// and a real `git daemon`.

use std::path::Path;

use metabob_git::{GitError, Repo, clone_at};

use crate::support::{TestEnv, closed_port, git_daemon};

use super::{git, history, net};

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
        matches!(missing, Err(GitError::RefNotFound { ref name }) if name.contains("no-such-branch")),
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
        matches!(&refused, Err(GitError::Clone { source, .. }) if source.to_string().contains("not empty")),
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

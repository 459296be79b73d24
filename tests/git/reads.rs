//! A repository's reads (ranges, history, commits, refs, ancestry, changed files, discovery,
//! workspace paths) against what the git CLI reads from the same repository.

use metabob_git::{GitError, Repo, clone_at};

use crate::support::TestEnv;

use super::{git, git_raw, history, net};

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
            matches!(repo.rev_list(bad), Err(GitError::BadRange { .. })),
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
    assert!(matches!(
        repo.commit("nope"),
        Err(GitError::RefNotFound { .. })
    ));

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
    // has_remote_branch vs show-ref --verify: the exact ref or nothing.
    for (branch, want) in [
        ("main", true),
        ("task/t1", true),
        ("t1", false),
        ("nope", false),
    ] {
        let full = format!("refs/remotes/origin/{branch}");
        let shown = git_raw(env, &dest, &["show-ref", "--verify", "-q", &full], &[])
            .status
            .success();
        assert_eq!(shown, want, "{branch}");
        assert_eq!(repo.has_remote_branch("origin", branch), want, "{branch}");
    }
    assert!(!repo.has_remote_branch("nope", "main"));

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

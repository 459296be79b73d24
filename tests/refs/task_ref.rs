//! A task's ref, cloned through the binary as `git clone --branch` finds it.

use metabob_wire::refname::validate_ref;

use crate::support::TestEnv;

/// `finding record` of a task on `a.py` whose details name `ref: <name>`.
fn record_task_with_ref(env: &TestEnv, url: &str, name: &str) {
    let v = env.record_task_with(
        url,
        "a.py",
        &format!("work on {name}"),
        "HIGH",
        &format!("ref: {name}"),
    );
    assert_eq!(v["outcome"], "recorded", "{v}");
}

/// What a checkout is, as the git CLI reads it: HEAD's commit, what HEAD names (`HEAD` when
/// detached), and each local branch with its commit and upstream.
fn checkout_state(env: &TestEnv, dir: &std::path::Path) -> Vec<String> {
    vec![
        env.git(dir, &["rev-parse", "HEAD"]),
        env.git(dir, &["rev-parse", "--symbolic-full-name", "HEAD"]),
        env.git(
            dir,
            &[
                "for-each-ref",
                "--format=%(refname) %(objectname) %(upstream)",
                "refs/heads/",
            ],
        ),
    ]
}

/// A task's ref is found as `git clone --branch` finds it, through the real binary: the
/// origin's branch of that name, else its tag, never a revision. Each name here means
/// something else to `git rev-parse` or to a partial-name lookup, and each ref points at a
/// commit of its own, so checking out the wrong one shows.
#[test]
fn task_pull_clones_a_ref_as_git_clone_branch_finds_it() {
    let env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let (bare, url) = env.origin("app", &[("a.py", "x = 1\n")]);
    let main = env.git(&bare, &["rev-parse", "refs/heads/main"]);
    let tree = format!("{main}^{{tree}}");
    let commit = |what: &str| env.git(&bare, &["commit-tree", &tree, "-p", &main, "-m", what]);
    // `@` alone is HEAD (main) to rev-parse.
    env.git(&bare, &["update-ref", "refs/heads/@", &commit("branch @")]);
    // git clone reads this name under refs/heads/; a full-name lookup would take the decoy.
    let nested = commit("branch refs/heads/side");
    env.git(
        &bare,
        &["update-ref", "refs/heads/refs/heads/side", &nested],
    );
    env.git(
        &bare,
        &["update-ref", "refs/heads/side", &commit("decoy side")],
    );
    // An annotated tag: checked out detached, at the commit it tags.
    env.git(&bare, &["tag", "-a", "-m", "v1", "v1", &commit("tag v1")]);
    // A branch and a tag of one name: the branch wins.
    env.git(
        &bare,
        &[
            "update-ref",
            "refs/heads/release",
            &commit("branch release"),
        ],
    );
    env.git(&bare, &["tag", "release", &commit("tag release")]);
    // Each name and the exact ref in the origin that it must check out.
    let cases = [
        ("@", "refs/heads/@"),
        ("refs/heads/side", "refs/heads/refs/heads/side"),
        ("v1", "refs/tags/v1^{commit}"),
        ("release", "refs/heads/release"),
    ];
    for (name, _) in cases {
        assert!(validate_ref(name).is_ok(), "{name:?} passes validation");
        record_task_with_ref(&env, &url, name);
    }

    let mut pulled = Vec::new();
    for cell in 0..cases.len() {
        let task = env.path(&format!("c{cell}/task")).display().to_string();
        let work = env.path(&format!("c{cell}/work"));
        let w = work.display().to_string();
        let out = env.run(&[
            "task",
            "pull",
            "--origin",
            &url,
            "--task-dir",
            &task,
            "--work-dir",
            &w,
            "--json",
        ]);
        assert_eq!(out.code, 0, "{out:?}");
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("pull --json");
        assert_eq!(v["status"], "pulled", "{v}");
        let name = v["task"]["ref"]
            .as_str()
            .expect("the task has a ref")
            .to_string();
        let (_, exact) = cases
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("pulled an unknown ref {name:?}"));
        let want = env.git(&bare, &["rev-parse", "--verify", exact]);
        assert_eq!(v["task"]["base"], want.as_str(), "base of ref {name:?}");
        assert_eq!(
            env.git(&work, &["rev-parse", "HEAD"]),
            want,
            "HEAD for ref {name:?}"
        );
        assert_eq!(
            env.git(&work, &["status", "--porcelain"]),
            "",
            "clean work tree"
        );

        let oracle = env.path(&format!("oracle-{cell}"));
        let o = oracle.display().to_string();
        env.git(
            env.root.path(),
            &["clone", "-q", "--branch", &name, &url, &o],
        );
        assert_eq!(
            checkout_state(&env, &work),
            checkout_state(&env, &oracle),
            "task pull and git clone --branch {name:?} differ"
        );
        pulled.push(name);
    }
    pulled.sort();
    let mut all: Vec<String> = cases.iter().map(|(n, _)| n.to_string()).collect();
    all.sort();
    assert_eq!(pulled, all, "every task was pulled once");
}

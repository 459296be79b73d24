//! Patch ids, grouped as `git patch-id --stable` groups the same commits.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use metabob_git::Repo;

use super::{git, history};

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

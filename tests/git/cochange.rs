//! Co-change mining (`metabob_git::cochange`) against what `git log --name-only` counts.

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

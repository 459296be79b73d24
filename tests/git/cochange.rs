//! Co-change mining (`metabob_git::cochange`) against what `git log --name-only` counts, and
//! the persisted index: extended or rebuilt, it equals the window mined whole.

use std::collections::HashMap;
use std::path::Path;

use metabob_git::Repo;
use metabob_git::cochange::{
    CochangeIndex, CochangeReport, Discarded, MAX_FILES_PER_COMMIT, Refresh, mine_cochanges,
};

use crate::support::TestEnv;

/// Mined with no stored index.
fn mine(repo: &Repo, changed: &[String], limit: usize, threshold: f64) -> CochangeReport {
    let (report, unsaved) = mine_cochanges(repo, None, changed, limit, threshold).unwrap();
    assert!(unsaved.is_none());
    report
}

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
            // Long enough that a pack stores versions as deltas of each other.
            std::fs::write(p, format!("{}{round}\n", "filler line\n".repeat(100))).unwrap();
        }
        env.git(&dir, &["add", "-A"]);
        env.git(&dir, &["commit", "-q", "-m", &format!("round {round}")]);
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    // Enough rounds that the window is diffed on more than one thread.
    for round in 0..130 {
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
    // Plain rounds last, so the pack's delta direction reads clearly at the window's head.
    for round in 104..112 {
        touch(&s(&["a.py", "b.py"]), round);
    }

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
    let cache = env.path("co.bin");
    for target in ["pkg/sub/x.py", "a.py"] {
        let ours = mine(&repo, &s(&[target]), 50, 0.0);
        // The same answer read back from the stored index (written by the first target's call).
        let (stored, unsaved) =
            mine_cochanges(&repo, Some(&cache), &s(&[target]), 50, 0.0).unwrap();
        assert!(unsaved.is_none(), "{unsaved:?}");
        assert_eq!(stored, ours, "{target}");
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
    // Packed, the window is read in the direction the pack's deltas run: the answers stay the
    // same with the newest objects whole (`git repack -f`, as `git gc` computes deltas) and with
    // each version a delta on the one before (fast-import's deltas, kept by `git repack`).
    let loose: Vec<CochangeReport> = (["pkg/sub/x.py", "a.py"].iter())
        .map(|t| mine(&repo, &s(&[t]), 50, 0.0))
        .collect();
    let newest_whole = env.path("co-newest-whole.git");
    env.git(
        &dir,
        &[
            "clone",
            "-q",
            "--bare",
            "--no-local",
            ".",
            newest_whole.to_str().unwrap(),
        ],
    );
    env.git(&newest_whole, &["repack", "-adfq"]);
    let oldest_whole = env.path("co-oldest-whole.git");
    env.git(
        &dir,
        &["init", "-q", "--bare", oldest_whole.to_str().unwrap()],
    );
    let stream = env.git(&dir, &["fast-export", "--all"]) + "\n";
    env.git_fed(
        &oldest_whole,
        &["fast-import", "--quiet"],
        stream.as_bytes(),
    );
    env.git(&oldest_whole, &["repack", "-adq"]);
    for packed in [newest_whole, oldest_whole] {
        let repo = Repo::open(&packed).unwrap();
        for (t, want) in ["pkg/sub/x.py", "a.py"].iter().zip(&loose) {
            assert_eq!(&mine(&repo, &s(&[t]), 50, 0.0), want, "{t} in {packed:?}");
        }
    }

    let changed = s(&["a.py"]);
    let ours = mine(&repo, &changed, 50, 0.0);
    assert_eq!(ours.skipped_sweeps, 1);
    assert_eq!(ours.predictions[0].file, "b.py", "{:?}", ours.predictions);
    // The threshold and the limit cut the list.
    let cut = mine(&repo, &changed, 1, 0.5);
    assert_eq!(cut.predictions.len(), 1);
    assert!(cut.predictions[0].confidence >= 0.5);
}

/// Commits that each touch a few of 12 files, made with the git CLI.
fn commit_rounds(env: &TestEnv, dir: &Path, rounds: std::ops::Range<usize>, tag: &str) {
    for round in rounds {
        for k in 0..(2 + round % 3) {
            let f = dir.join(format!(
                "m{}/f{}.py",
                (round + k) % 3,
                (round * 7 + k * 5) % 12
            ));
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, format!("{tag} {round} {k}\n")).unwrap();
        }
        env.git(dir, &["add", "-A"]);
        env.git(dir, &["commit", "-q", "-m", &format!("{tag} {round}")]);
    }
}

/// Brings `stored` up to HEAD and checks it against the window mined whole.
fn refreshed_equals_rebuild(repo: &Repo, stored: CochangeIndex) -> (CochangeIndex, Refresh) {
    let (refreshed, how) = CochangeIndex::refresh(repo, Some(stored)).unwrap();
    let (whole, whole_how) = CochangeIndex::refresh(repo, None).unwrap();
    assert!(
        matches!(whole_how, Refresh::Rebuilt { .. }),
        "{whole_how:?}"
    );
    assert_eq!(refreshed.head(), repo.head().unwrap().unwrap());
    let files: Vec<String> = (0..36)
        .map(|i| format!("m{}/f{}.py", i % 3, i / 3))
        .collect();
    for f in files
        .iter()
        .map(std::slice::from_ref)
        .chain([&files[..], &["m1".to_string()][..]])
    {
        assert_eq!(
            refreshed.query(f, 100, 0.0),
            whole.query(f, 100, 0.0),
            "{f:?}"
        );
    }
    (refreshed, how)
}

#[test]
fn the_stored_cochange_index_extends_with_new_commits_and_is_rebuilt_after_a_rewrite() {
    let env = TestEnv::new();
    let dir = env.path("inc");
    std::fs::create_dir_all(&dir).unwrap();
    env.git(&dir, &["init", "-q", "-b", "main"]);
    commit_rounds(&env, &dir, 0..40, "base");
    let repo = Repo::open(&dir).unwrap();
    let cache = env.path("cache/inc.bin");

    // Mined whole, stored, and read back unchanged while HEAD stays.
    let (first, how) = CochangeIndex::refresh(&repo, None).unwrap();
    assert_eq!(how, Refresh::Rebuilt { diffed: 40 });
    first.save(&cache).unwrap();
    let loaded = CochangeIndex::load(&cache).unwrap();
    assert_eq!(loaded, first);
    let (same, how) = CochangeIndex::refresh(&repo, Some(loaded)).unwrap();
    assert_eq!((same, how), (first.clone(), Refresh::Current));

    // New commits on top: only they are diffed, and the result is the whole window's.
    commit_rounds(&env, &dir, 40..47, "more");
    let repo = Repo::open(&dir).unwrap();
    let (extended, how) = refreshed_equals_rebuild(&repo, first);
    assert_eq!(how, Refresh::Extended { diffed: 7 });

    // A rewrite: the stored HEAD is no longer an ancestor, so the window is mined again.
    env.git(&dir, &["reset", "-q", "--hard", "HEAD~4"]);
    commit_rounds(&env, &dir, 100..103, "rewritten");
    let repo = Repo::open(&dir).unwrap();
    let (_, how) = refreshed_equals_rebuild(&repo, extended.clone());
    assert_eq!(how, Refresh::Rebuilt { diffed: 46 });

    // Through the cache file, as the MCP tools use it: the rewrite is noticed there too.
    extended.save(&cache).unwrap();
    let changed = ["m0/f0.py".to_string()];
    let (answer, unsaved) = mine_cochanges(&repo, Some(&cache), &changed, 50, 0.0).unwrap();
    assert!(unsaved.is_none());
    assert_eq!(answer, mine(&repo, &changed, 50, 0.0));
    assert_eq!(
        CochangeIndex::load(&cache).unwrap().head(),
        repo.head().unwrap().unwrap()
    );
}

#[test]
fn a_stored_cochange_index_that_is_not_ours_is_discarded_with_its_reason() {
    let env = TestEnv::new();
    let cache = env.path("bad.bin");
    assert_eq!(CochangeIndex::load(&cache), Err(Discarded::Missing));
    // Another version leads the file: named as such, not as corruption.
    std::fs::write(&cache, [99u8, 1, 2, 3]).unwrap();
    assert_eq!(
        CochangeIndex::load(&cache),
        Err(Discarded::Version {
            found: 99,
            expected: 1
        })
    );
    std::fs::write(&cache, [1u8, 200, 200, 200]).unwrap();
    assert!(matches!(
        CochangeIndex::load(&cache),
        Err(Discarded::Corrupt(_))
    ));
    // A poisoned file falls back to mining, and is replaced by a good one.
    let dir = env.path("repo");
    std::fs::create_dir_all(&dir).unwrap();
    env.git(&dir, &["init", "-q", "-b", "main"]);
    commit_rounds(&env, &dir, 0..5, "r");
    let repo = Repo::open(&dir).unwrap();
    let changed = ["m0/f0.py".to_string()];
    let (answer, _) = mine_cochanges(&repo, Some(&cache), &changed, 50, 0.0).unwrap();
    assert_eq!(answer, mine(&repo, &changed, 50, 0.0));
    assert!(CochangeIndex::load(&cache).is_ok());
}

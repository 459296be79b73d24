//! The sample harness (`examples/fleet/harness.sh`) writes only inside the clone: a task's
//! files come from the ledger and the clone's content from the origin, and either may point a
//! write elsewhere through a symlink (docs/harness.md, "Write only inside the clone").

use std::path::Path;

use crate::support::{Output, TestEnv};

const HARNESS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/fleet/harness.sh");

/// Every file under `dir` with its bytes, sorted: what "unchanged" is compared by.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let bytes = if p.is_dir() {
            Vec::new()
        } else {
            std::fs::read(&p).unwrap()
        };
        out.push((p.display().to_string(), bytes));
    }
    out.sort();
    out
}

#[test]
fn the_sample_harness_skips_every_path_whose_real_path_leaves_the_clone() {
    let env = TestEnv::new();
    let outside = env.path("outside");
    std::fs::create_dir_all(outside.join("dir")).unwrap();
    std::fs::write(outside.join("victim.txt"), "the cell user's file\n").unwrap();
    std::fs::write(outside.join("dir/kept.py"), "kept = 1\n").unwrap();
    let before = (contents(&outside), contents(&outside.join("dir")));

    // A real work tree whose committed content holds the links, as an origin's clone would.
    let work = env.path("work");
    std::fs::create_dir_all(&work).unwrap();
    env.git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("ok.py"), "ok = 1\n").unwrap();
    let link = |target: &Path, name: &str| std::os::unix::fs::symlink(target, work.join(name));
    link(&outside.join("victim.txt"), "victim.py").unwrap();
    link(&outside.join("dir"), "sub").unwrap();
    link(&outside.join("missing.py"), "gone.py").unwrap();
    env.git(&work, &["add", "-A"]);
    env.git(&work, &["commit", "-q", "-m", "the origin's content"]);
    let base = env.git(&work, &["rev-parse", "HEAD"]);

    let task_dir = env.path("task");
    std::fs::create_dir_all(&task_dir).unwrap();
    let task = serde_json::json!({
        "task_id": "agf_0000000000000001",
        "files": ["victim.py", "sub/x.py", "gone.py", "ok.py", "new/deep.py"],
    });
    std::fs::write(task_dir.join("task.json"), task.to_string()).unwrap();

    let out = Output::from(
        env.program("sh")
            .arg(HARNESS)
            .env("TASK_DIR", &task_dir)
            .env("WORK_DIR", &work)
            .output()
            .expect("sh runs the harness"),
    );
    assert_eq!(out.code, 0, "{out:?}");

    assert_eq!(
        (contents(&outside), contents(&outside.join("dir"))),
        before,
        "nothing outside the clone was written"
    );
    for skipped in ["victim.py", "sub/x.py", "gone.py"] {
        let lines: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.starts_with(&format!("harness: skipping '{skipped}': ")))
            .collect();
        assert_eq!(
            lines.len(),
            1,
            "one line says why {skipped} was skipped: {out:?}"
        );
        assert!(lines[0].contains("outside the clone"), "{}", lines[0]);
    }
    assert_eq!(out.stderr.lines().count(), 3, "{out:?}");

    // The git CLI as the oracle: one commit on the base, holding exactly the files inside.
    assert_eq!(env.git(&work, &["rev-parse", "HEAD~1"]), base);
    assert_eq!(
        env.git(&work, &["show", "--name-only", "--format=", "HEAD"]),
        "new/deep.py\nok.py"
    );
    assert!(
        env.git(&work, &["log", "-1", "--format=%B"])
            .ends_with("Fixes-Finding: agf_0000000000000001"),
        "the commit carries the trailer"
    );
    assert_eq!(env.git(&work, &["status", "--porcelain"]), "");
    assert_eq!(
        std::fs::read_link(work.join("victim.py")).unwrap(),
        outside.join("victim.txt"),
        "the links themselves are left as they were"
    );
}

//! The scan and the index across runs: what is listed, zero-budget runs resuming, and when
//! a saved cache still holds.

use std::path::Path;
use std::time::{Duration, SystemTime};

use super::*;

#[test]
fn scan_limits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    for rel in [
        "node_modules/x.py",
        ".hidden/y.py",
        "skipme/z.py",
        "src/ok.py",
        "src/ok.rs",
    ] {
        write(root, rel, b"x = 1\n");
    }
    write(root, "src/big.py", &vec![b'#'; 201 * 1024]);
    write(root, "src/bad.py", &[0xff, 0xfe, 0x00]);
    let exclude = vec!["skipme".into(), "node_modules".into()];
    let opts = IndexOptions {
        include: vec![".py".into()],
        exclude,
    };
    let listing = scan(root, &opts).expect("scan");
    let paths: Vec<&str> = listing.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        (paths, listing.too_large, listing.cap_hit),
        (
            vec!["src/bad.py", "src/ok.py"],
            vec!["src/big.py".to_string()],
            false
        )
    );

    let mut index = Index::new(root);
    index.run(&opts, Duration::from_secs(60)).expect("run");
    let s = index.stats();
    assert_eq!(
        (s.files_indexed, s.skipped_too_large, s.skipped_unreadable),
        (1, 1, 1)
    );
    assert_eq!(s.unreadable[0].reason, "invalid utf-8");

    for i in 0..MAX_FILES + 5 {
        write(root, &format!("many/f{i:04}.py"), b"");
    }
    let listing = scan(root, &opts).expect("scan");
    assert!(listing.cap_hit && listing.files.len() == MAX_FILES);
    assert_eq!(
        listing.files.last().map(|f| f.path.as_str()),
        Some("many/f1999.py")
    );
}

/// Everything queries see, less the timing.
fn comparable(index: &Index) -> String {
    let mut s = index.stats();
    s.elapsed_ms = 0;
    let edges = [EdgeKind::Calls, EdgeKind::Imports, EdgeKind::Contains].map(|k| edges(index, k));
    serde_json::to_string(&(s, &index.components, edges)).expect("serializable")
}

#[test]
fn zero_budget_runs_resume_to_the_same_index() {
    let ws = workspace();
    let opts = IndexOptions::default();
    let mut index = Index::new(ws.path());
    for runs in 1..=FILE_COUNT {
        let report = index.run(&opts, Duration::ZERO).expect("run");
        assert_eq!((report.parsed_this_run, report.files_parsed), (1, runs));
        assert_eq!(
            (report.complete, report.note.is_some()),
            (runs == FILE_COUNT, runs < FILE_COUNT)
        );
        if runs == 3 {
            // Partial (the two Go files and one JS file), yet what is parsed answers queries.
            assert!(!index.stats().complete);
            assert!(index.search("helper", 5, &[]).len() == 1);
            let util = ["go/pkg/util/util.go".to_string()];
            let callers = index.impact(&util, Direction::Backward, 5, true);
            assert_eq!(affected(&callers)[1], "go/cmd/main.go::Server.Start@10 1");
            assert!(index.save(&ws.path().join("partial.json")).is_err());
        }
    }
    assert_eq!(comparable(&index), comparable(&indexed(ws.path())));
    assert_eq!(
        index
            .run(&opts, Duration::ZERO)
            .expect("run")
            .parsed_this_run,
        0
    );

    // Other options start over; so does a reset.
    let py = IndexOptions {
        include: vec!["py".into()],
        ..opts
    };
    assert_eq!(index.run(&py, Duration::ZERO).expect("run").files_parsed, 1);
    index.reset();
    assert_eq!(
        index
            .run(&py, Duration::from_secs(60))
            .expect("run")
            .files_parsed,
        5
    );
}

#[test]
fn cache_round_trip() {
    let ws = workspace();
    let index = indexed(ws.path());
    let (cache, opts) = (ws.path().join(".cache/index.json"), IndexOptions::default());
    index.save(&cache).expect("save");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&cache)
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let mut loaded = Index::load(&cache, ws.path(), &opts).expect("load");
    assert_eq!(comparable(&loaded), comparable(&index));
    let changed = [
        "py/pkg/util.py".to_string(),
        "go/pkg/util/util.go".to_string(),
    ];
    for dir in [Direction::Forward, Direction::Backward, Direction::Both] {
        assert_eq!(
            loaded.impact(&changed, dir, 10, true),
            index.impact(&changed, dir, 10, true)
        );
    }
    assert_eq!(
        loaded.search("user", 9, &[]).len(),
        index.search("user", 9, &[]).len()
    );
    let report = loaded.run(&opts, Duration::ZERO).expect("run");
    assert!(report.complete && report.parsed_this_run == 0);
    assert_eq!(comparable(&loaded), comparable(&index));

    let load = |root: &Path, opts: &IndexOptions| Index::load(&cache, root, opts).err();
    let py = IndexOptions {
        include: vec!["py".into()],
        ..IndexOptions::default()
    };
    assert_eq!(load(ws.path(), &py), Some(Discarded::OptionsChanged));
    let elsewhere = tempfile::tempdir().expect("tempdir");
    assert_eq!(
        load(elsewhere.path(), &opts)
            .map(|e| e.to_string())
            .as_deref(),
        Some("root_changed")
    );
    let missing = Index::load(&ws.path().join("none.json"), ws.path(), &opts);
    assert_eq!(missing.err(), Some(Discarded::Missing));
}

#[test]
fn one_changed_or_new_file_discards_the_cache() {
    let ws = workspace();
    let (cache, opts) = (ws.path().join(".cache/index.json"), IndexOptions::default());
    let load = || {
        Index::load(&cache, ws.path(), &opts)
            .err()
            .map(|e| e.to_string())
    };
    indexed(ws.path()).save(&cache).expect("save");
    assert_eq!(load(), None);

    let file = std::fs::File::options()
        .write(true)
        .open(ws.path().join("ts/b.ts"));
    let later = SystemTime::now() + Duration::from_secs(5);
    file.expect("open").set_modified(later).expect("set mtime");
    assert_eq!(load().as_deref(), Some("file_changed(ts/b.ts)"));

    indexed(ws.path()).save(&cache).expect("save");
    write(
        ws.path(),
        "py/pkg/models.py",
        b"class User:\n    name = 1\n",
    );
    assert_eq!(load().as_deref(), Some("file_changed(py/pkg/models.py)"));

    indexed(ws.path()).save(&cache).expect("save");
    write(ws.path(), "py/extra.py", b"");
    assert_eq!(load().as_deref(), Some("new_file(py/extra.py)"));

    indexed(ws.path()).save(&cache).expect("save");
    std::fs::remove_file(ws.path().join("js/main.js")).expect("rm");
    assert_eq!(load().as_deref(), Some("file_changed(js/main.js)"));
}

#[test]
fn version_mismatch_discards() {
    let ws = workspace();
    let cache = ws.path().join("index.json");
    let load = || Index::load(&cache, ws.path(), &IndexOptions::default()).err();
    indexed(ws.path()).save(&cache).expect("save");
    let text = std::fs::read_to_string(&cache).expect("read");
    let current = format!("{{\"version\":{CACHE_VERSION},");
    assert!(text.starts_with(&current));
    std::fs::write(&cache, text.replacen(&current, "{\"version\":999,", 1)).expect("write");
    let expected = CACHE_VERSION;
    assert_eq!(
        load(),
        Some(Discarded::Version {
            found: 999,
            expected
        })
    );
    assert_eq!(
        load().map(|e| e.to_string()),
        Some(format!("version(999, {expected})"))
    );
    // An older shape that no longer parses is still named by its version.
    std::fs::write(&cache, b"{\"version\":0,\"stuff\":[]}").expect("write");
    assert_eq!(load(), Some(Discarded::Version { found: 0, expected }));
}

#[test]
fn corrupt_cache_discards_without_panicking() {
    let ws = workspace();
    let cache = ws.path().join("index.json");
    indexed(ws.path()).save(&cache).expect("save");
    let good = std::fs::read(&cache).expect("read");
    let value: serde_json::Value = serde_json::from_slice(&good).expect("json");
    let edited = |path: &[&str], to: serde_json::Value| {
        let mut v = value.clone();
        let mut at = &mut v;
        for p in path {
            at = match p.parse::<usize>() {
                Ok(i) => &mut at[i],
                Err(_) => &mut at[*p],
            };
        }
        *at = to;
        serde_json::to_vec(&v).expect("json")
    };
    let cases: Vec<Vec<u8>> = vec![
        good[..good.len() / 2].to_vec(),
        b"".to_vec(),
        b"\x00\xff garbage".to_vec(),
        b"[1,2,3]".to_vec(),
        edited(&["edges", "0", "1"], 1_000_000.into()),
        edited(&["files", "0", "count"], 0.into()),
        edited(&["files", "3", "first"], u32::MAX.into()),
        edited(&["components"], "nope".into()),
        edited(&["scan", "files", "0", "size"], (-1).into()),
    ];
    for (i, bytes) in cases.iter().enumerate() {
        std::fs::write(&cache, bytes).expect("write");
        let err = Index::load(&cache, ws.path(), &IndexOptions::default()).err();
        let text = err.as_ref().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            matches!(err, Some(Discarded::Corrupt(_))) && text.starts_with("corrupt("),
            "{i}: {err:?}"
        );
    }
}

fn listed(root: &Path) -> Vec<String> {
    let listing = scan(root, &IndexOptions::default()).expect("scan");
    listing.files.into_iter().map(|f| f.path).collect()
}

#[test]
fn scan_follows_the_workspace_ignore_rules() {
    let outer = tempfile::tempdir().expect("tempdir");
    let root = &outer.path().join("ws");
    // Above the workspace, and no checkout: a stray rule here must not empty the index.
    write(outer.path(), ".gitignore", b"*.py\n");
    write(root, ".gitignore", b"generated/\n*.gen.py\n");
    write(root, ".ignore", b"scratch/\n");
    write(root, "lib/.gitignore", b"!keep.gen.py\n");
    for rel in [
        "src/a.py",
        "src/b.gen.py",
        "generated/g.py",
        "scratch/s.py",
        "lib/keep.gen.py",
        ".hidden.py",
        ".tools/t.py",
        "node_modules/m.js",
    ] {
        write(root, rel, b"x = 1\n");
    }
    // Outside a checkout the workspace's own .gitignore files still count.
    assert_eq!(listed(root), ["lib/keep.gen.py", "src/a.py"]);

    // Inside one, git's rules: the checkout's excludes too, still nothing from above it.
    write(root, ".git/info/exclude", b"lib/\n");
    assert_eq!(listed(root), ["src/a.py"]);

    // A package inside a checkout takes the rules of the checkout's root.
    let pkg = &root.join("pkg");
    write(root, ".gitignore", b"out/\n");
    write(pkg, "out/bundle.js", b"x\n");
    write(pkg, "index.js", b"x\n");
    assert_eq!(listed(pkg), ["index.js"]);
}

#[test]
fn the_cache_holds_through_ignored_edits_and_not_through_rule_edits() {
    let ws = workspace();
    let (cache, opts) = (ws.path().join(".cache/index.json"), IndexOptions::default());
    let load = || {
        Index::load(&cache, ws.path(), &opts)
            .err()
            .map(|e| e.to_string())
    };
    write(ws.path(), ".gitignore", b"gen/\n");
    write(ws.path(), "gen/out.py", b"x = 1\n");
    let index = indexed(ws.path());
    assert!(!index.by_path.contains_key("gen/out.py"));
    index.save(&cache).expect("save");
    assert_eq!(load(), None);

    // What the rules hide can change freely, and so can the rules, as long as the listing holds.
    write(ws.path(), "gen/out.py", b"x = 2\ny = 3\n");
    write(ws.path(), "gen/more.py", b"");
    write(ws.path(), ".gitignore", b"# build output\ngen/\n");
    assert_eq!(load(), None);

    write(
        ws.path(),
        "py/pkg/models.py",
        b"class User:\n    name = 1\n",
    );
    assert_eq!(load().as_deref(), Some("file_changed(py/pkg/models.py)"));

    // Un-ignoring a directory lists its files: the stored listing no longer matches.
    indexed(ws.path()).save(&cache).expect("save");
    write(ws.path(), ".gitignore", b"");
    assert_eq!(load().as_deref(), Some("new_file(gen/more.py)"));

    // Ignoring an indexed directory takes its files away: as good as deleted.
    indexed(ws.path()).save(&cache).expect("save");
    write(ws.path(), ".gitignore", b"js/\n");
    assert_eq!(load().as_deref(), Some("file_changed(js/lib/greet.js)"));
}

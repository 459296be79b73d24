//! The scan and the index across runs: what is listed, zero-budget runs resuming, and when
//! a saved cache still holds.

use std::path::Path;
use std::time::{Duration, SystemTime};

use super::*;
use metabob_process::stored::Unusable;

/// The cache's two readers, during the migration from JSON: every cache test runs on both.
#[derive(Clone, Copy, Debug)]
enum Format {
    Binary,
    LegacyJson,
}

const FORMATS: [Format; 2] = [Format::Binary, Format::LegacyJson];

impl Format {
    fn save(self, index: &Index, path: &Path) {
        match self {
            Format::Binary => index.save(path),
            Format::LegacyJson => index.save_legacy_json(path),
        }
        .expect("save");
    }

    fn load(self, path: &Path, root: &Path, opts: &IndexOptions) -> Result<Index, Discarded> {
        match self {
            Format::Binary => Index::load(path, root, opts),
            Format::LegacyJson => Index::load_legacy_json(path, root, opts),
        }
    }
}

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
    for format in FORMATS {
        cache_round_trip_in(format);
    }
}

fn cache_round_trip_in(format: Format) {
    let ws = workspace();
    let index = indexed(ws.path());
    let (cache, opts) = (ws.path().join(".cache/index"), IndexOptions::default());
    format.save(&index, &cache);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&cache)
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let mut loaded = format.load(&cache, ws.path(), &opts).expect("load");
    assert_eq!(comparable(&loaded), comparable(&index), "{format:?}");
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

    let load = |root: &Path, opts: &IndexOptions| format.load(&cache, root, opts).err();
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
    let missing = format.load(&ws.path().join("none"), ws.path(), &opts);
    assert_eq!(missing.err(), Some(Discarded::Stored(Unusable::Missing)));
}

#[test]
fn one_changed_or_new_file_discards_the_cache() {
    for format in FORMATS {
        one_changed_or_new_file_discards_the_cache_in(format);
    }
}

fn one_changed_or_new_file_discards_the_cache_in(format: Format) {
    let ws = workspace();
    let (cache, opts) = (ws.path().join(".cache/index"), IndexOptions::default());
    let load = || {
        format
            .load(&cache, ws.path(), &opts)
            .err()
            .map(|e| e.to_string())
    };
    let save = || format.save(&indexed(ws.path()), &cache);
    save();
    assert_eq!(load(), None);

    let file = std::fs::File::options()
        .write(true)
        .open(ws.path().join("ts/b.ts"));
    let later = SystemTime::now() + Duration::from_secs(5);
    file.expect("open").set_modified(later).expect("set mtime");
    assert_eq!(load().as_deref(), Some("file_changed(ts/b.ts)"));

    save();
    write(
        ws.path(),
        "py/pkg/models.py",
        b"class User:\n    name = 1\n",
    );
    assert_eq!(load().as_deref(), Some("file_changed(py/pkg/models.py)"));

    save();
    write(ws.path(), "py/extra.py", b"");
    assert_eq!(load().as_deref(), Some("new_file(py/extra.py)"));

    save();
    std::fs::remove_file(ws.path().join("js/main.js")).expect("rm");
    assert_eq!(load().as_deref(), Some("file_changed(js/main.js)"));
}

#[test]
fn version_mismatch_discards() {
    let ws = workspace();
    let opts = IndexOptions::default();
    // The binary document leads with its version.
    let bin = ws.path().join("index.bin");
    indexed(ws.path()).save(&bin).expect("save");
    let mut bytes = std::fs::read(&bin).expect("read");
    assert_eq!(bytes[0] as u32, CACHE_VERSION);
    bytes[0] = 99;
    std::fs::write(&bin, &bytes).expect("write");
    let err = Index::load(&bin, ws.path(), &opts).err();
    let want = Discarded::Stored(Unusable::Version {
        found: 99,
        expected: CACHE_VERSION,
    });
    assert_eq!(err, Some(want));
    // A JSON cache where the binary one is looked for is another version, not corruption.
    let cache = ws.path().join("index.json");
    indexed(ws.path()).save_legacy_json(&cache).expect("save");
    assert!(matches!(
        Index::load(&cache, ws.path(), &opts),
        Err(Discarded::Stored(Unusable::Version { .. }))
    ));

    let load = || Index::load_legacy_json(&cache, ws.path(), &IndexOptions::default()).err();
    let text = std::fs::read_to_string(&cache).expect("read");
    let current = format!("{{\"version\":{LEGACY_JSON_VERSION},");
    assert!(text.starts_with(&current));
    std::fs::write(&cache, text.replacen(&current, "{\"version\":999,", 1)).expect("write");
    let expected = LEGACY_JSON_VERSION;
    assert_eq!(
        load(),
        Some(Discarded::Stored(Unusable::Version {
            found: 999,
            expected
        }))
    );
    assert_eq!(
        load().map(|e| e.to_string()),
        Some(format!("version(999, {expected})"))
    );
    // An older shape that no longer parses is still named by its version.
    std::fs::write(&cache, b"{\"version\":0,\"stuff\":[]}").expect("write");
    assert_eq!(
        load(),
        Some(Discarded::Stored(Unusable::Version { found: 0, expected }))
    );
}

/// Every truncation and every single-byte change of a binary cache is discarded or loads;
/// none panics, and a truncated one never loads.
#[test]
fn a_damaged_binary_cache_is_discarded_without_panicking() {
    let ws = workspace();
    let cache = ws.path().join("index.bin");
    indexed(ws.path()).save(&cache).expect("save");
    let good = std::fs::read(&cache).expect("read");
    let opts = IndexOptions::default();
    for cut in (0..good.len()).step_by(7) {
        std::fs::write(&cache, &good[..cut]).expect("write");
        let err = Index::load(&cache, ws.path(), &opts).err();
        assert!(
            matches!(
                err,
                Some(Discarded::Stored(
                    Unusable::Corrupt(_) | Unusable::Version { .. }
                ))
            ),
            "cut at {cut}: {err:?}"
        );
    }
    for at in (1..good.len()).step_by(5) {
        let mut bad = good.clone();
        bad[at] ^= 0x5a;
        std::fs::write(&cache, &bad).expect("write");
        let _ = Index::load(&cache, ws.path(), &opts);
    }
}

/// A version-2 JSON cache is read once, rewritten in the binary form and removed.
#[test]
fn a_json_cache_migrates_to_the_binary_form_once() {
    let ws = workspace();
    let opts = IndexOptions::default();
    let index = indexed(ws.path());
    let (bin, json) = (
        ws.path().join("c/index.bin"),
        ws.path().join("c/index.json"),
    );
    index.save_legacy_json(&json).expect("save");
    let migrated = Index::migrate(&bin, &json, ws.path(), &opts).expect("migrated");
    assert_eq!(comparable(&migrated), comparable(&index));
    assert!(!json.exists(), "the JSON cache is removed once rewritten");
    let again = Index::load(&bin, ws.path(), &opts).expect("the binary cache");
    assert_eq!(comparable(&again), comparable(&index));
    // With both gone, the answer is "missing", as for any first start.
    std::fs::remove_file(&bin).expect("rm");
    assert_eq!(
        Index::migrate(&bin, &json, ws.path(), &opts).err(),
        Some(Discarded::Stored(Unusable::Missing))
    );
    // A JSON cache that no longer holds is dropped, not kept to be read again.
    index.save_legacy_json(&json).expect("save");
    write(ws.path(), "py/extra.py", b"");
    assert_eq!(
        Index::migrate(&bin, &json, ws.path(), &opts)
            .err()
            .map(|e| e.to_string()),
        Some("new_file(py/extra.py)".into())
    );
    assert!(!json.exists() && !bin.exists());
}

#[test]
fn corrupt_cache_discards_without_panicking() {
    let ws = workspace();
    let cache = ws.path().join("index.json");
    indexed(ws.path()).save_legacy_json(&cache).expect("save");
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
        let err = Index::load_legacy_json(&cache, ws.path(), &IndexOptions::default()).err();
        let text = err.as_ref().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            matches!(err, Some(Discarded::Stored(Unusable::Corrupt(_))))
                && text.starts_with("corrupt("),
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
    for format in FORMATS {
        the_cache_holds_through_ignored_edits_and_not_through_rule_edits_in(format);
    }
}

fn the_cache_holds_through_ignored_edits_and_not_through_rule_edits_in(format: Format) {
    let ws = workspace();
    let (cache, opts) = (ws.path().join(".cache/index"), IndexOptions::default());
    let load = || {
        format
            .load(&cache, ws.path(), &opts)
            .err()
            .map(|e| e.to_string())
    };
    let save = || format.save(&indexed(ws.path()), &cache);
    write(ws.path(), ".gitignore", b"gen/\n");
    write(ws.path(), "gen/out.py", b"x = 1\n");
    let index = indexed(ws.path());
    assert!(!index.by_path.contains_key("gen/out.py"));
    format.save(&index, &cache);
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
    save();
    write(ws.path(), ".gitignore", b"");
    assert_eq!(load().as_deref(), Some("new_file(gen/more.py)"));

    // Ignoring an indexed directory takes its files away: as good as deleted.
    save();
    write(ws.path(), ".gitignore", b"js/\n");
    assert_eq!(load().as_deref(), Some("file_changed(js/lib/greet.js)"));
}

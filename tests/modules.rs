//! The runner guard: `autotests = false` makes `tests/runner.rs` the one test binary, so a test
//! file no module declares would never be compiled, and its tests would pass by not running.
//! Every `.rs` file under `tests/` must be a module of the runner.

use std::path::{Path, PathBuf};

/// Whether `parent`'s source declares the module `name` (`mod name;`, public or not).
fn declares(parent: &str, name: &str) -> bool {
    parent.lines().map(str::trim).any(|l| {
        let l = l
            .strip_prefix("pub(crate) ")
            .or_else(|| l.strip_prefix("pub "))
            .unwrap_or(l);
        l == format!("mod {name};")
    })
}

/// Each `.rs` file below `dir` with the file that must declare it and the module's name.
fn files(dir: &Path, parent: &Path, out: &mut Vec<(PathBuf, PathBuf, String)>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            let module = path.join("mod.rs");
            if module.exists() {
                out.push((module.clone(), parent.to_path_buf(), name));
                files(&path, &module, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") && name != "mod" {
            out.push((path.clone(), parent.to_path_buf(), name));
        }
    }
}

#[test]
fn every_test_file_is_a_module_of_the_runner() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let runner = root.join("runner.rs");
    let mut all = Vec::new();
    files(&root, &runner, &mut all);
    all.retain(|(file, _, _)| *file != runner);
    assert!(all.len() > 40, "the walk found the test files: {all:?}");
    let stray: Vec<String> = all
        .iter()
        .filter(|(_, parent, name)| !declares(&std::fs::read_to_string(parent).unwrap(), name))
        .map(|(file, parent, name)| {
            let shown = |p: &Path| p.strip_prefix(&root).unwrap().display().to_string();
            format!(
                "tests/{} is compiled by no one: declare `mod {name};` in tests/{}",
                shown(file),
                shown(parent)
            )
        })
        .collect();
    assert!(stray.is_empty(), "{}", stray.join("\n"));
}

#[test]
fn the_guard_tells_a_declared_module_from_a_mention() {
    assert!(declares("mod a;\npub mod b;\npub(crate) mod c;\n", "b"));
    assert!(declares("  mod a;\n", "a"));
    assert!(!declares("// mod a; was removed\nmod ab;\nuse a;\n", "a"));
}

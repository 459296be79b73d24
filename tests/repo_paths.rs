//! A finding's files are repository paths (SPEC.md §Recording, §Hostile rows, §task pull):
//! refused by every writer and by the ledger, and skipped by `task pull` when an older or
//! hostile row holds one, so `../../etc/passwd` never lands in task.json.

use serde_json::{Value, json};

use crate::support::{Ledger, TestEnv};

/// The line every refusal ends with.
const WHAT_TO_DO: &str = "give the path relative to the repository root";

fn record(env: &TestEnv, origin: &str, file: &str, summary: &str) -> crate::support::Output {
    env.run(&[
        "finding",
        "record",
        "--origin",
        origin,
        "--file",
        "a.py",
        "--file",
        file,
        "--summary",
        summary,
        "--severity",
        "HIGH",
        "--category",
        "task",
        "--json",
    ])
}

#[test]
fn finding_record_refuses_a_file_that_is_no_repository_path_before_the_ledger_is_asked() {
    let env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let (_, origin) = env.origin("app", &[("a.py", "x = 1\n")]);
    for (file, rule) in [
        ("/etc/passwd", "it is absolute"),
        ("../../etc/passwd", "it has a `..` segment"),
        ("a//b", "it has an empty segment"),
        ("./a.py", "it has a `.` segment"),
        ("C:\\Windows\\win.ini", "it starts with a drive letter"),
    ] {
        let out = record(&env, &origin, file, &format!("summary for {file}"));
        assert_eq!(out.code, 1, "{file}: {out:?}");
        let line = format!("file {file:?} is not a repository path: {rule}");
        assert!(out.stderr.contains(&line), "{file}: {out:?}");
        assert!(out.stderr.contains(WHAT_TO_DO), "{file}: {out:?}");
        assert_eq!(
            out.stderr.lines().filter(|l| !l.trim().is_empty()).count(),
            1,
            "one line: {out:?}"
        );
        assert!(out.stdout.is_empty(), "{file}: {out:?}");
    }
    assert!(
        env.board_group("open").is_empty(),
        "nothing was recorded: {:?}",
        env.board_group("open")
    );
    // The same command with a repository path records.
    let out = record(&env, &origin, "src/b.py", "a good one");
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn record_finding_refuses_a_file_that_is_no_repository_path_and_keeps_nothing() {
    let mut env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let (_, origin) = env.origin("app", &[("a.py", "x = 1\n")]);
    let ws = env.path("ws");
    env.git(
        &env.cwd(),
        &["clone", "-q", &origin, &ws.display().to_string()],
    );
    env.set("WORKSPACE_PATH", ws.display().to_string());
    let call = |files: Value, summary: &str| {
        let args = json!({"files": files, "summary": summary, "severity": "HIGH",
                          "category": "correctness"});
        env.run(&[
            "tool",
            "call",
            "record_finding",
            "--args",
            &args.to_string(),
        ])
    };
    // A NUL cannot be passed in argv; through the tool's JSON arguments it can.
    for (file, shown, rule) in [
        ("a\u{0}b.py", "\"a\\0b.py\"", "it holds a NUL byte"),
        ("/etc/passwd", "\"/etc/passwd\"", "it is absolute"),
        (
            "../../etc/passwd",
            "\"../../etc/passwd\"",
            "it has a `..` segment",
        ),
        ("a//b", "\"a//b\"", "it has an empty segment"),
    ] {
        let out = call(json!(["a.py", file]), &format!("bad file {shown}"));
        let text = format!("{}{}", out.stdout, out.stderr);
        assert_eq!(out.code, 1, "{file:?}: {out:?}");
        let line = format!("record_finding: file {shown} is not a repository path: {rule}");
        assert!(text.contains(&line), "{file:?}: {out:?}");
        assert!(text.contains(WHAT_TO_DO), "{file:?}: {out:?}");
        assert!(text.contains("nothing was recorded"), "{file:?}: {out:?}");
    }
    // Neither the local store nor the ledger holds any of them.
    let out = env.run(&["tool", "call", "get_problems", "--args", "{}"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(!out.stdout.contains("bad file"), "{out:?}");
    assert!(
        env.board_group("open").is_empty(),
        "{:?}",
        env.board_group("open")
    );
}

/// A write key of the default org.
fn writer(env: &TestEnv, ledger: &Ledger) -> String {
    ledger.create_key(env, "default", "read,write").1
}

fn finding_pointer(files: &str) -> Value {
    let content = format!(
        "repo: git/app\nfiles: {files}\nseverity: HIGH\ncategory: task\nstatus: open\n\
         finding_ids: agf_00000000000000f1\n\nraw write"
    );
    json!({"type": "concept_create_write", "conceptData": {"shape": "code_finding",
        "source_type": "metabob_annotation", "summary": "[HIGH][task] app: raw", "content": content}})
}

#[test]
fn the_ledger_refuses_a_raw_finding_write_naming_a_file_that_is_no_repository_path() {
    let env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    let key = writer(&env, &ledger);
    for (files, shown, rule) in [
        (
            "a.py, ../../etc/passwd",
            "\"../../etc/passwd\"",
            "it has a `..` segment",
        ),
        ("/etc/passwd", "\"/etc/passwd\"", "it is absolute"),
        (
            "a.py, src//b.py",
            "\"src//b.py\"",
            "it has an empty segment (`//`, or a `/` at its end)",
        ),
        (
            "\\\\host\\share",
            "\"\\\\\\\\host\\\\share\"",
            "it is absolute",
        ),
    ] {
        let (status, v) = ledger.resolve(&key, finding_pointer(files));
        assert_eq!(status, 400, "{files}: {v}");
        assert_eq!(v["error"], "bad_request", "{files}: {v}");
        let detail = v["detail"].as_str().unwrap_or_default();
        let want = format!(
            "conceptData.content: files: file {shown} is not a repository path: {rule}; {WHAT_TO_DO}"
        );
        assert_eq!(detail, want, "{files}: {v}");
    }
    // Nothing was stored; repository paths are written as before, and a row of another shape
    // is no finding's.
    assert!(
        env.board_group("open").is_empty(),
        "{:?}",
        env.board_group("open")
    );
    let (status, v) = ledger.resolve(&key, finding_pointer("a.py, src/b.py"));
    assert_eq!(status, 201, "{v}");
    assert_eq!(env.board_group("open").len(), 1);
    let memo = json!({"type": "concept_create_write", "conceptData": {"shape": "memo",
        "source_type": "note", "content": "files: /etc/passwd\n\nnot a finding"}});
    let (status, v) = ledger.resolve(&key, memo);
    assert_eq!(status, 201, "{v}");
}

/// Rewrites the `files: a.py` line of the stored finding that names `task_id` to name `files`,
/// straight in the ledger's store: a row written before the rule existed, or by a hostile
/// writer past the ledger.
fn plant_files(ledger: &Ledger, task_id: &str, files: &str) {
    let (old, new) = ("\nfiles: a.py\n", format!("\nfiles: {files}\n"));
    let pattern = format!("%{task_id}%");
    match &ledger.store {
        Some(url) => {
            let statement = format!(
                "UPDATE concepts SET content = replace(content, $q${old}$q$, $q${new}$q$) \
                 WHERE shape = 'code_finding' AND content LIKE '{pattern}' RETURNING id"
            );
            let out = crate::support::pg::sql(url, &statement);
            assert_eq!(out.matches("concept_").count(), 1, "{out}");
        }
        None => {
            let conn = rusqlite::Connection::open(ledger.data.join("ledger.db")).unwrap();
            let n = conn
                .execute(
                    "UPDATE concepts SET content = replace(content, ?1, ?2)
                     WHERE shape = 'code_finding' AND content LIKE ?3",
                    [old, &new, &pattern],
                )
                .unwrap();
            assert_eq!(n, 1);
        }
    }
}

#[test]
fn task_pull_skips_a_planted_path_that_is_no_repository_path_and_keeps_the_good_one() {
    let env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    let (_, origin) = env.origin("app", &[("a.py", "x = 1\n")]);
    let recorded = env.record_task(&origin, "make x two", "HIGH");
    let task = recorded["finding_ids"][0].as_str().unwrap().to_string();
    plant_files(&ledger, &task, "../../etc/passwd, a.py, /etc/passwd");

    let out = env.task_pull(&origin, "c", &["--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["task"]["task_id"], task.as_str(), "{report}");
    assert_eq!(report["task"]["files"], json!(["a.py"]), "{report}");
    let on_disk = std::fs::read_to_string(env.path("c/task/task.json")).unwrap();
    let on_disk: Value = serde_json::from_str(&on_disk).unwrap();
    assert_eq!(on_disk["files"], json!(["a.py"]), "{on_disk}");
    let context = std::fs::read_to_string(env.path("c/task/context.md")).unwrap();
    assert!(!context.contains("etc/passwd"), "{context}");
    // One warning names each skipped path and its rule; the pull goes on.
    let warning = out
        .stderr
        .lines()
        .find(|l| l.contains("not repository paths"))
        .unwrap_or_else(|| panic!("a warning: {out:?}"));
    for named in [
        format!("task {task}: skipped 2 file(s)"),
        "\"../../etc/passwd\" (it has a `..` segment)".to_string(),
        "\"/etc/passwd\" (it is absolute)".to_string(),
        "kept a.py".to_string(),
    ] {
        assert!(warning.contains(&named), "{named}: {warning}");
    }
}

#[test]
fn task_pull_parks_a_planted_task_none_of_whose_files_is_a_repository_path() {
    let env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    let (_, origin) = env.origin("app", &[("a.py", "x = 1\n")]);
    let recorded = env.record_task(&origin, "nothing to touch", "HIGH");
    let task = recorded["finding_ids"][0].as_str().unwrap().to_string();
    plant_files(&ledger, &task, "/etc/passwd, ../x");

    let out = env.task_pull(&origin, "c", &["--json"]);
    assert_eq!(out.code, 5, "{out:?}");
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["status"], "task_failed", "{report}");
    assert_eq!(report["failed"]["task_id"], task.as_str(), "{report}");
    assert_eq!(report["failed"]["parked"], true, "{report}");
    let reason = report["failed"]["reason"].as_str().unwrap_or_default();
    assert_eq!(
        reason,
        "no file of the task is a repository path: \"/etc/passwd\" (it is absolute), \"../x\" \
         (it has a `..` segment)",
        "{report}"
    );
    assert!(
        !env.path("c/task/task.json").exists(),
        "no task.json is written"
    );
    let parked = env.board_group("parked");
    assert_eq!(parked.len(), 1, "{parked:?}");
}

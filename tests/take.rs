//! The atomic take (`taskTake_write`) on a real `ledger serve`: what it claims and passes over,
//! that its rows are the ones every reader weighs, what it refuses, and the ledger that does not
//! offer it. The races on both claim paths are in `cell.rs`.

use serde_json::{Value, json};

use crate::support::{Ledger, TestEnv};

struct World {
    env: TestEnv,
    ledger: Ledger,
    key: String,
    url: String,
}

fn world(extra: &[&str]) -> World {
    let env = TestEnv::new();
    let ledger = env.ledger("take", extra);
    let (_, key) = ledger.create_key(&env, "default", "read,write");
    let (_, url) = env.origin("app", &[("a.py", "def a():\n    return 1\n")]);
    World {
        env,
        ledger,
        key,
        url,
    }
}

impl World {
    /// Records `n` tasks; their concept ids, oldest first.
    fn tasks(&self, n: usize) -> Vec<String> {
        (0..n)
            .map(|i| {
                let v = self
                    .env
                    .record_task(&self.url, &format!("step {i}"), "HIGH");
                v["concept_id"].as_str().unwrap().to_string()
            })
            .collect()
    }

    fn take(&self, candidates: &[&str], vessel: &str) -> (u16, Value) {
        self.ledger.resolve(
            &self.key,
            json!({"type": "taskTake_write", "take": {
                "candidates": candidates, "vessel_id": vessel, "session": "s1", "claim_minutes": 30}}),
        )
    }
}

fn passed(v: &Value) -> Vec<(String, String)> {
    v["passed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let by = p["held"]["holder"].as_str().unwrap_or("-");
            (p["outcome"].as_str().unwrap().to_string(), by.to_string())
        })
        .collect()
}

#[test]
fn a_take_claims_the_first_free_candidate_and_names_those_it_passed() {
    let w = world(&[]);
    let t = w.tasks(3);
    let (status, v) = w.take(&[&t[0], &t[1], &t[2]], "cell-a");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["taken"]["concept_id"], t[0].as_str());
    assert_eq!(v["taken"]["outcome"], "claimed");
    assert_eq!(v["taken"]["held"]["holder"], "cell-a");
    let held = &v["taken"]["held"];
    assert_eq!(
        held["until_ms"].as_i64().unwrap() - held["began_ms"].as_i64().unwrap(),
        30 * 60_000
    );
    assert_eq!(passed(&v), []);

    // Another cell is passed over cell-a's task and takes the next one.
    let (_, v) = w.take(&[&t[0], &t[1]], "cell-b");
    assert_eq!(passed(&v), [("held".to_string(), "cell-a".to_string())]);
    assert_eq!(v["taken"]["concept_id"], t[1].as_str());

    // The holder asking again renews its own claim; nobody else gets it.
    let (_, v) = w.take(&[&t[0]], "cell-a");
    assert_eq!(v["taken"]["outcome"], "renewed");
    let (_, v) = w.take(&[&t[0], &t[1]], "cell-c");
    assert_eq!(v["taken"], Value::Null);
    assert_eq!(passed(&v).len(), 2);

    // What is not an open task of this org is passed as closed: an unknown id, a non-task.
    let (_, note) = w.ledger.resolve(
        &w.key,
        json!({"type": "concept_create_write", "conceptData": {
            "content": "just a note", "shape": "memo", "source_type": "memo"}}),
    );
    let note = note["concept"]["id"].as_str().unwrap().to_string();
    let (_, v) = w.take(
        &["concept_000000000000000000000000", &note, &t[2]],
        "cell-c",
    );
    assert_eq!(
        passed(&v),
        [
            ("closed".to_string(), "-".to_string()),
            ("closed".to_string(), "-".to_string())
        ]
    );
    assert_eq!(v["taken"]["concept_id"], t[2].as_str());
}

#[test]
fn a_taken_task_is_held_for_every_reader_and_its_holder_can_renew_and_release_it() {
    let w = world(&[]);
    let t = w.tasks(1);
    // `task pull` takes it through the take (the ledger advertises it)...
    let out = w.env.task_pull(&w.url, "c1", &["--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["claim_path"], "take");
    let me = report["task"]["vessel_id"].as_str().unwrap().to_string();
    // ...and its rows are the claim rows any reader weighs: a second cell sees it held, the
    // ledger's own take passes over it, and the holder's heartbeat renews it.
    let out = w.env.task_pull(&w.url, "c2", &["--json"]);
    assert_eq!(out.code, 4, "{out:?}");
    let (_, v) = w.take(&[&t[0]], "someone-else");
    assert_eq!(passed(&v), [("held".to_string(), me)]);
    let task_dir = w.env.path("c1/task").display().to_string();
    let renew = w.env.run(&["task", "renew", "--task-dir", &task_dir]);
    assert_eq!(renew.code, 0, "{renew:?}");
    let release = w.env.run(&["task", "release", "--task-dir", &task_dir]);
    assert_eq!(release.code, 0, "{release:?}");
    let (_, v) = w.take(&[&t[0]], "someone-else");
    assert_eq!(v["taken"]["concept_id"], t[0].as_str(), "{v}");
}

/// The claim's link is the take's last statement, one PostgreSQL sends only with the `COMMIT`
/// (SPEC.md §PostgreSQL store, round trips). When the store refuses it, the whole take is undone
/// and answered as the store's failure, without the store's words: no claim row is left to hold
/// the task, so the next take claims it, and it holds one claim row.
#[test]
fn a_take_whose_last_statement_the_store_refuses_is_undone_whole() {
    let w = world(&[]);
    let t = w.tasks(1);
    let store = |statement: &str| match &w.ledger.store {
        Some(url) => {
            crate::support::pg::sql(url, statement);
        }
        None => rusqlite::Connection::open(w.ledger.data.join("ledger.db"))
            .and_then(|db| db.execute_batch(statement))
            .unwrap(),
    };
    let count = |sql: &str| -> i64 {
        match &w.ledger.store {
            Some(url) => crate::support::pg::sql(url, sql).parse().unwrap(),
            None => rusqlite::Connection::open(w.ledger.data.join("ledger.db"))
                .and_then(|db| db.query_row(sql, [], |r| r.get(0)))
                .unwrap(),
        }
    };
    let claims = "SELECT count(*) FROM concepts WHERE shape = 'finding_verdict'";
    store(match &w.ledger.store {
        Some(_) => {
            "CREATE FUNCTION refuse_edges() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$;
             CREATE TRIGGER refuse_edges BEFORE INSERT ON edges
               FOR EACH ROW EXECUTE FUNCTION refuse_edges();"
        }
        None => {
            "CREATE TRIGGER refuse_edges BEFORE INSERT ON edges
               BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;"
        }
    });
    let (status, v) = w.take(&[&t[0]], "cell-a");
    assert_eq!(status, 500, "{v}");
    assert_eq!(v["error"], "internal", "{v}");
    assert!(!v.to_string().contains("refused"), "no store text: {v}");
    assert_eq!(count(claims), 0, "nothing of the refused take was kept");
    store(match &w.ledger.store {
        Some(_) => "DROP TRIGGER refuse_edges ON edges",
        None => "DROP TRIGGER refuse_edges",
    });
    let (status, v) = w.take(&[&t[0]], "cell-b");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["taken"]["outcome"], "claimed", "{v}");
    assert_eq!(v["taken"]["held"]["holder"], "cell-b", "{v}");
    assert_eq!(count(claims), 1);
    assert_eq!(
        count("SELECT count(*) FROM edges"),
        1,
        "the claim's link, once"
    );
}

/// A failure passes the task over for the cell that failed it (`failed_here`) and no other; a
/// park passes it over for everyone, as closed, until it is reopened.
#[test]
fn a_take_passes_a_task_over_for_the_cell_that_failed_it_and_for_all_once_parked() {
    let w = world(&[]);
    let t = w.tasks(1);
    let out = w.env.task_pull(&w.url, "c1", &["--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    let me = report["task"]["vessel_id"].as_str().unwrap().to_string();
    let id = report["task"]["task_id"].as_str().unwrap().to_string();
    let task_dir = w.env.path("c1/task").display().to_string();
    let failed = w
        .env
        .run(&["task", "release", "--task-dir", &task_dir, "--failed"]);
    assert_eq!(failed.code, 0, "{failed:?}");

    let (_, v) = w.take(&[&t[0]], &me);
    assert_eq!(v["taken"], Value::Null, "{v}");
    assert_eq!(passed(&v), [("failed_here".to_string(), "-".to_string())]);
    let (_, v) = w.take(&[&t[0]], "cell-b");
    assert_eq!(
        v["taken"]["concept_id"],
        t[0].as_str(),
        "another cell takes it: {v}"
    );

    // cell-b fails it too (a second cell): parked, passed over as closed for everyone.
    let row = |verdict: &str, by: &str| {
        json!({"type": "concept_create_write", "conceptData": {
            "shape": "finding_verdict", "source_type": "metabob_annotation",
            "summary": format!("[verdict:{verdict}] step 0"),
            "content": format!("reviewed_by: {by}\nsession: s1\nverdict: {verdict}\n\
                                finding_ids: {id}\nfinding_concept: {}\n", t[0])}})
    };
    for (verdict, by) in [("task failed", "cell-b"), ("parked", "cell-b")] {
        let (status, v) = w.ledger.resolve(&w.key, row(verdict, by));
        assert_eq!(status, 201, "{v}");
    }
    for vessel in [me.as_str(), "cell-c"] {
        let (_, v) = w.take(&[&t[0]], vessel);
        assert_eq!(passed(&v), [("closed".to_string(), "-".to_string())], "{v}");
    }
    let (status, v) = w.ledger.resolve(&w.key, row("reopened", "operator"));
    assert_eq!(status, 201, "{v}");
    let (_, v) = w.take(&[&t[0]], &me);
    assert_eq!(
        v["taken"]["concept_id"],
        t[0].as_str(),
        "reopened, it is offered again: {v}"
    );
}

/// `task renew` on a ledger with the take renews through it: a task nobody else holds stays the
/// renewer's, even once its claim ended (here by its own release). By read-back, a claim the
/// cell no longer holds cannot be renewed. (Held by another, neither path renews: `cell.rs`.)
#[test]
fn renewing_through_the_take_keeps_a_task_nobody_else_holds_and_read_back_refuses_it() {
    for (extra, path, after_release) in [(&[][..], "take", 0), (&["--no-take"][..], "read_back", 1)]
    {
        let w = world(extra);
        let t = w.tasks(1);
        let out = w.env.task_pull(&w.url, "c1", &["--json"]);
        assert_eq!(out.code, 0, "{out:?}");
        let report: Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(report["claim_path"], path);
        let me = report["task"]["vessel_id"].as_str().unwrap().to_string();
        let task_dir = w.env.path("c1/task").display().to_string();
        let renew = || w.env.run(&["task", "renew", "--task-dir", &task_dir]);
        assert_eq!(renew().code, 0, "{path}");
        let release = w.env.run(&["task", "release", "--task-dir", &task_dir]);
        assert_eq!(release.code, 0, "{release:?}");
        let out = renew();
        assert_eq!(out.code, after_release, "{path}: {out:?}");
        if path == "take" {
            assert_eq!(out.stdout.trim(), "renewed");
            let (_, v) = w.take(&[&t[0]], "someone-else");
            assert_eq!(passed(&v), [("held".to_string(), me.clone())], "{v}");
        } else {
            assert!(out.stderr.contains("holds no live claim"), "{out:?}");
        }
    }
}

#[test]
fn a_take_refuses_bad_input_and_other_orgs_tasks_and_read_only_keys() {
    let w = world(&[]);
    let t = w.tasks(1);
    let bad = |take: Value| {
        let (status, v) = w
            .ledger
            .resolve(&w.key, json!({"type": "taskTake_write", "take": take}));
        assert_eq!(status, 400, "{v}");
        v["detail"].as_str().unwrap().to_string()
    };
    let many: Vec<String> = (0..1201).map(|i| format!("concept_{i:024x}")).collect();
    for (take, says) in [
        (
            json!({"vessel_id": "a", "session": "s"}),
            "name candidates, a repository, or both",
        ),
        (
            json!({"candidates": [], "vessel_id": "a", "session": "s"}),
            "name candidates, a repository, or both",
        ),
        (
            json!({"candidates": many, "vessel_id": "a", "session": "s"}),
            "take.candidates: at most 1200",
        ),
        (
            json!({"repository": "x".repeat(2049), "vessel_id": "a", "session": "s"}),
            "take.repository: longer than 2048",
        ),
        (
            json!({"candidates": [t[0]], "vessel_id": "a\nreviewed_by: b", "session": "s"}),
            "take.vessel_id: one line",
        ),
        (
            json!({"candidates": [t[0]], "vessel_id": "a", "session": "s", "claim_minutes": 241}),
            "take.claim_minutes",
        ),
        (
            json!({"candidates": [t[0]], "session": "s"}),
            "take.vessel_id",
        ),
    ] {
        let detail = bad(take);
        assert!(detail.contains(says), "{detail}");
    }

    // Another org's key sees no task of this org, named or by repository: passed as closed,
    // nothing claimed.
    let (_, other) = w.ledger.create_key(&w.env, "other", "read,write");
    let repository = metabob_wire::repo_identity::identity_of_origin(&w.url);
    let (status, v) = w.ledger.resolve(
        &other,
        json!({"type": "taskTake_write", "take": {
            "candidates": [t[0]], "repository": repository, "vessel_id": "thief", "session": "s"}}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["taken"], Value::Null);
    assert_eq!(passed(&v), [("closed".to_string(), "-".to_string())]);

    // A read-only key is refused before anything is looked at.
    let (_, ro) = w.ledger.create_key(&w.env, "default", "read");
    let (status, v) = w.ledger.resolve(
        &ro,
        json!({"type": "taskTake_write", "take": {
            "candidates": [t[0]], "vessel_id": "a", "session": "s"}}),
    );
    assert_eq!(status, 403, "{v}");
    // So the task is still free for a cell.
    let (_, v) = w.take(&[&t[0]], "cell-a");
    assert_eq!(v["taken"]["outcome"], "claimed");
}

#[test]
fn a_ledger_without_the_take_neither_advertises_nor_serves_it() {
    let w = world(&["--no-take"]);
    let t = w.tasks(1);
    // Nor the verdict write, the other shape a substrate without the ledger's own writes lacks.
    for shape in ["taskTake_write", "verdict_write"] {
        let (_, cap) = w
            .ledger
            .resolve(&w.key, json!({"type": "vesselCapability", "shape": shape}));
        assert_eq!(cap["vessels"], json!([]), "{shape}");
    }
    let (status, v) = w.take(&[&t[0]], "cell-a");
    assert_eq!(status, 404, "{v}");
    assert_eq!(v["shape"], "taskTake_write");
    let (status, v) = w.ledger.resolve(
        &w.key,
        json!({"type": "verdict_write", "trace": "t", "conceptData": {}}),
    );
    assert_eq!(status, 404, "{v}");
    let out = w.env.task_pull(&w.url, "c1", &["--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["claim_path"], "read_back");
}

/// `n` findings of another repository, newer than anything recorded before, written
/// concurrently: enough of them push older tasks out of a cell's recall window.
fn fill_window(w: &World, n: usize) {
    std::thread::scope(|scope| {
        for t in 0..8 {
            scope.spawn(move || {
                for i in (t..n).step_by(8) {
                    let filler = Raw {
                        repo: "example.test/other/filler",
                        file: &format!("f{i}.py"),
                        severity: "LOW",
                        category: "style",
                    };
                    record_raw(w, &filler, i);
                }
            });
        }
    });
}

#[test]
fn a_task_past_the_cells_recall_window_is_still_taken_and_a_parked_one_only_once() {
    let w = world(&[]);
    w.env
        .record_task_with(&w.url, "a.py", "bad ref", "CRITICAL", "ref: -x");
    let good = w.tasks(1);
    // The recall reads 4 pages of 300; 1,200 newer findings leave both tasks outside it.
    fill_window(&w, 1200);

    let outcomes = |report: &Value| -> Vec<(String, String)> {
        report["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let s = |k: &str| c[k].as_str().unwrap().to_string();
                (s("summary"), s("outcome"))
            })
            .collect()
    };
    // The more severe task came first and was parked for its ref (exit 5).
    let out = w.env.task_pull(&w.url, "c1", &["--json"]);
    assert_eq!(out.code, 5, "{out:?}");
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    // The take path reads no window: the ledger chose from its open-task index.
    assert_eq!(report["recall_truncated"], false);
    assert_eq!(report["claim_path"], "take");
    let parked = [("bad ref".to_string(), "parked".to_string())];
    assert_eq!(outcomes(&report), parked, "{report}");
    // The next pull is not handed the parked one again.
    let out = w.env.task_pull(&w.url, "c2", &["--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    let claimed = [("step 0".to_string(), "claimed".to_string())];
    assert_eq!(outcomes(&report), claimed, "{report}");
    assert_eq!(report["task"]["concept_id"], good[0].as_str());

    // On a ledger without the take the same cell sees no open task: the window's limit,
    // which is why the take looks past it.
    let w = world(&["--no-take"]);
    w.tasks(1);
    fill_window(&w, 1200);
    let out = w.env.task_pull(&w.url, "c1", &["--json"]);
    assert_eq!(out.code, 3, "{out:?}");
}

/// Records a finding that is no task on `file` of the world's repository; its finding id.
fn record_finding(w: &World, file: &str, summary: &str) -> String {
    let v = w
        .env
        .record_finding(&w.url, file, summary, "LOW", "style", "");
    v["finding_ids"][0].as_str().unwrap().to_string()
}

#[test]
fn a_pull_on_the_take_path_lists_the_open_findings_on_its_files_from_past_the_window() {
    let w = world(&[]);
    record_finding(&w, "a.py", "still open on a");
    let discarded = record_finding(&w, "a.py", "discarded on a");
    record_finding(&w, "b.py", "open on another file");
    let verdict = format!(
        "reviewed_by: t\nsession: s\nverdict: discarded\nfinding_ids: {discarded}\nreason: noise\n"
    );
    let (status, v) = w.ledger.resolve(
        &w.key,
        json!({"type": "concept_create_write", "conceptData": {
            "shape": "finding_verdict", "source_type": "metabob_annotation",
            "summary": "[verdict:discarded] noise", "content": verdict}}),
    );
    assert_eq!(status, 201, "{v}");
    w.tasks(1);
    // Everything above is now past the recall window: a pull that filtered the window would
    // list nothing.
    fill_window(&w, 1200);

    let out = w.env.task_pull(&w.url, "c1", &["--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let context = std::fs::read_to_string(w.env.path("c1/task/context.md")).unwrap();
    assert!(
        context.contains("## Open findings on these files (1)\n"),
        "{context}"
    );
    assert!(context.contains("still open on a"), "{context}");
    assert!(!context.contains("discarded on a"), "{context}");
    assert!(!context.contains("open on another file"), "{context}");
    assert!(!context.contains("filler"), "{context}");
}

#[test]
fn findings_on_files_is_bounded_and_answers_only_the_keys_org() {
    let w = world(&[]);
    record_finding(&w, "a.py", "ours on a");
    let identity = w.env.record_task(&w.url, "the task", "HIGH")["repository"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, other) = w.ledger.create_key(&w.env, "other-org", "read,write");
    let ask = |key: &str, files: Value| {
        w.ledger.resolve(
            key,
            json!({"type": "findingsOnFiles", "repository": identity, "files": files}),
        )
    };
    let (status, v) = ask(&w.key, json!(["a.py"]));
    assert_eq!(status, 200, "{v}");
    let summaries: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["summary"].as_str().unwrap())
        .collect();
    // The task itself is no related finding.
    assert_eq!(summaries, ["[LOW][style] app: ours on a"], "{v}");
    let (status, v) = ask(&other, json!(["a.py"]));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["findings"], json!([]), "another org sees none of it: {v}");
    for (files, says) in [
        (json!([]), "files: required, 1 to 64 file names"),
        (
            json!((0..65).map(|i| format!("f{i}")).collect::<Vec<_>>()),
            "files: required, 1 to 64 file names",
        ),
        (json!(["x".repeat(3000)]), "each at most 2048 bytes"),
        (json!("a.py"), "files: must be an array of strings"),
    ] {
        let (status, v) = ask(&w.key, files);
        assert_eq!(status, 400, "{v}");
        assert!(v.to_string().contains(says), "{v}");
    }
}

/// Records a task of `repo` on `file` straight through the substrate; its concept id.
/// A finding written straight to the ledger, as any client could: no cell command involved.
struct Raw<'a> {
    repo: &'a str,
    file: &'a str,
    severity: &'a str,
    category: &'a str,
}

/// Records `raw` with id number `n`; answers its concept id.
fn record_raw(w: &World, raw: &Raw<'_>, n: usize) -> String {
    let Raw {
        repo,
        file,
        severity,
        category,
    } = raw;
    let content = format!(
        "repo: {repo}\nfiles: {file}\nseverity: {severity}\ncategory: {category}\nstatus: open\nfinding_ids: agf_{n:016x}\n\nstep {n}"
    );
    let (status, v) = w.ledger.resolve(
        &w.key,
        json!({"type": "concept_create_write", "conceptData": {
            "content": content, "summary": format!("[{severity}][{category}] {file}: step {n}"),
            "shape": "code_finding", "source_type": "metabob_annotation"}}),
    );
    assert_eq!(status, 201, "{v}");
    v["concept"]["id"].as_str().unwrap().to_string()
}

fn record_raw_task(w: &World, repo: &str, file: &str, severity: &str, n: usize) -> String {
    let task = Raw {
        repo,
        file,
        severity,
        category: "task",
    };
    record_raw(w, &task, n)
}

#[test]
fn a_repository_take_pages_past_held_tasks_hands_each_out_once_and_most_severe_first() {
    let w = world(&[]);
    let app = "example.test/o/app";
    // Three pages of the repository's tasks and one more, a super-repo's task on the app's
    // vessel directory (an alias), and another repository's, which no take of the app hands out.
    let mut mine: Vec<String> = (0..200)
        .map(|n| record_raw_task(&w, app, &format!("m{n}.py"), "HIGH", n))
        .collect();
    mine.push(record_raw_task(
        &w,
        "example.test/o/super",
        "repos/App/v.py",
        "HIGH",
        900,
    ));
    let other = record_raw_task(&w, "example.test/o/other", "o.py", "CRITICAL", 901);
    let urgent = record_raw_task(&w, app, "u.py", "CRITICAL", 902);
    mine.push(urgent.clone());

    let take = |vessel: &str| {
        let (status, v) = w.ledger.resolve(
            &w.key,
            json!({"type": "taskTake_write", "take": {
                "repository": app, "vessel_id": vessel, "session": "s", "claim_minutes": 30}}),
        );
        assert_eq!(status, 200, "{v}");
        v
    };
    let mut taken: Vec<String> = Vec::new();
    for i in 0.. {
        let v = take(&format!("cell-{i}"));
        let Some(id) = v["taken"]["concept_id"].as_str() else {
            // Nothing left: every task is held, and those whose claims end first are named.
            let waiting = v["waiting"].as_array().unwrap();
            assert_eq!(waiting.len(), 50, "{v}");
            let lapses: Vec<i64> = waiting
                .iter()
                .map(|t| t["held"]["until_ms"].as_i64().unwrap())
                .collect();
            assert!(lapses.is_sorted(), "{lapses:?}");
            break;
        };
        assert_eq!(v["taken"]["outcome"], "claimed", "{v}");
        taken.push(id.to_string());
    }
    // The critical task first, whatever its age; each task once; the other repository's never.
    assert_eq!(taken[0], urgent);
    let mut sorted = taken.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), taken.len(), "a task was handed out twice");
    mine.sort();
    assert_eq!(sorted, mine);
    assert!(!taken.contains(&other));

    // A cell that holds one resumes it first: its own task, renewed, not a new one.
    let v = take("cell-120");
    assert_eq!(v["taken"]["concept_id"], taken[120].as_str(), "{v}");
    assert_eq!(v["taken"]["outcome"], "renewed", "{v}");
}

/// PostgreSQL's planner does not take `lapses IS NULL` for a constant, so the free range of a
/// take's page must be ordered by `lapses` too to be read off the index in its order: ordered by
/// rank and age alone, every free task of the key was read, joined and sorted for each page. The
/// one sort left in a page's plan is the lapsed range's. Runs on the test cluster whatever store
/// the other tests use.
#[test]
fn a_take_page_reads_the_free_range_in_the_index_order_on_postgresql() {
    let env = TestEnv::new();
    let store = crate::support::pg::fresh_database();
    // The ledger's own start creates the schema.
    let _ledger = env.ledger_on("take-plan", &store, &[]);
    let mut page = metabob_ledger::open_tasks::free_page_sql(1);
    for n in (1..=6).rev() {
        page = page.replace(&format!("?{n}"), &format!("${n}"));
    }
    let plan = crate::support::pg::sql(
        &store,
        &format!(
            "PREPARE page(text, bigint, bigint, bigint, bigint, text) AS {page};
             EXPLAIN EXECUTE page('org_a', -1, -1, 0, 64, 'r:example.test/o/app');"
        ),
    );
    let sorts = plan.lines().filter(|l| l.contains("Sort  (")).count();
    assert_eq!(sorts, 1, "{plan}");
    assert!(plan.contains("open_task_keys_by_state"), "{plan}");
}

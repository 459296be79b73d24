//! The findings tools shared through the embedded ledger, and a ledger outage under a running
//! server.

use std::time::Duration;

use serde_json::json;

use crate::support::mcp::{Client, Session};
use crate::support::{TestEnv, normalize};

#[tokio::test]
async fn findings_tools_share_through_the_ledger() {
    let mut env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let (_bare, url) = env.origin(
        "app",
        &[("a.py", "def a():\n    return 1\n"), ("b.py", "x = 1\n")],
    );
    let one = env.path("one");
    let two = env.path("two");
    for d in [&one, &two] {
        env.git(
            env.root.path(),
            &["clone", "-q", &url, &d.display().to_string()],
        );
    }
    env.set("VESSEL_ID", "vessel-one");
    let a = Session::start(&env, &one, Client::default()).await;
    env.set("VESSEL_ID", "vessel-two");
    env.set(
        "METABOB_STORE",
        env.path("store-two.sqlite").display().to_string(),
    );
    let b = Session::start(&env, &two, Client::default()).await;

    let rec = a
        .ok(
            "record_finding",
            json!({"files": ["a.py"], "summary": "a returns a constant", "severity": "MEDIUM", "category": "correctness"}),
        )
        .await;
    insta::assert_snapshot!("shared_record_finding", normalize(&rec, &env));
    let id = rec.split_whitespace().nth(1).expect("id").to_string();

    assert!(
        env.path("home/.metabob/store.sqlite").exists(),
        "a write makes the store"
    );

    // The other checkout sees it, and its duplicate check finds it.
    let seen = b.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("shared_get_problems_from_the_other_checkout", seen);
    assert!(
        !env.path("store-two.sqlite").exists(),
        "a read before any write creates no store"
    );
    let dup = b
        .shown(
            &env,
            "record_finding",
            json!({"files": ["a.py"], "summary": "A returns a constant.", "severity": "LOW", "category": "c"}),
        )
        .await;
    insta::assert_snapshot!("shared_record_finding_duplicate", dup);
    let mine = a.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("shared_get_problems_local_and_shared", mine);

    // Claims: one holder; the other is told who.
    let claimed = b
        .shown(
            &env,
            "claim_finding",
            json!({"problem_id": id, "minutes": 30}),
        )
        .await;
    insta::assert_snapshot!("shared_claim_finding", claimed);
    let held = a
        .shown(&env, "claim_finding", json!({"problem_id": id}))
        .await;
    insta::assert_snapshot!("shared_claim_finding_held_by_another", held);
    let renew = a
        .shown(
            &env,
            "claim_finding",
            json!({"problem_id": id, "action": "renew"}),
        )
        .await;
    insta::assert_snapshot!("shared_claim_finding_renew_refused", renew);
    let board = a.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("shared_get_problems_claimed_by_another", board);

    // The fix: committed but unpushed is pending; pushed, it closes, seeds retire, recall shows it.
    std::fs::write(one.join("a.py"), "def a():\n    return compute()\n").expect("edit");
    env.git(&one, &["commit", "-qam", "fix a"]);
    let pending = a
        .shown(&env, "mark_complete", json!({"problem_id": id}))
        .await;
    insta::assert_snapshot!("shared_mark_complete_unpushed", pending);
    env.git(&one, &["push", "-q", "origin", "main"]);
    let sha = env.git(&one, &["rev-parse", "HEAD"]);
    let done = a.ok("mark_complete", json!({"problem_id": id})).await;
    assert!(done.contains(&format!("fix: commit {sha}")), "{done}");
    insta::assert_snapshot!("shared_mark_complete_fixed", normalize(&done, &env));
    let after = b.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("shared_get_problems_fixed_elsewhere", after);
    env.git(&two, &["pull", "-q"]);
    let after = b.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("shared_get_problems_fixed_here", after);
    let closed = b
        .shown(&env, "claim_finding", json!({"problem_id": id}))
        .await;
    insta::assert_snapshot!("shared_claim_finding_closed", closed);

    // The fleet case: b records, a discards it by the concept id recall shows; b's next recall
    // retires b's own seed.
    let rec = b
        .ok(
            "record_finding",
            json!({"files": ["b.py"], "summary": "x is never read", "severity": "LOW", "category": "style"}),
        )
        .await;
    insta::assert_snapshot!(
        "shared_record_finding_other_checkout",
        normalize(&rec, &env)
    );
    let concept = rec
        .split_whitespace()
        .find(|w| w.starts_with("concept_"))
        .expect("concept id")
        .trim_end_matches(',')
        .to_string();
    let discarded = a
        .shown(
            &env,
            "mark_complete",
            json!({"problem_id": concept, "action": "discard"}),
        )
        .await;
    insta::assert_snapshot!("shared_mark_complete_discard", discarded);
    let after = b.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("shared_get_problems_retracted", after);
    let metrics = b.shown(&env, "get_metrics", json!({})).await;
    insta::assert_snapshot!("shared_get_metrics", metrics);

    // Tasks are listed apart, the next move first.
    let task = a
        .ok(
            "record_finding",
            json!({"files": ["b.py"], "summary": "rename x", "severity": "MEDIUM", "category": "task"}),
        )
        .await;
    insta::assert_snapshot!("shared_record_task", normalize(&task, &env));
    let task_id = task.split_whitespace().nth(1).expect("id").to_string();
    let board = b.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("shared_get_problems_with_a_task", board);
    let claimed = b
        .shown(&env, "claim_finding", json!({"problem_id": task_id}))
        .await;
    insta::assert_snapshot!("shared_claim_task", claimed);
    let board = b.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("shared_get_problems_with_a_claimed_task", board);
    let board = a
        .shown(&env, "get_problems", json!({"category": ["task"]}))
        .await;
    insta::assert_snapshot!("shared_get_problems_tasks_only", board);
}

/// A ledger outage under a running server: the tools answer its cause while it lasts, and the
/// first call after the ledger is back works, with no restart of `serve`.
#[tokio::test(flavor = "multi_thread")]
async fn a_ledger_outage_is_named_by_the_tools_and_the_next_call_after_it_works() {
    let env = TestEnv::new();
    let mut ledger = env.ledger("main", &[]);
    let (_bare, url) = env.origin("app", &[("a.py", "def a():\n    return 1\n")]);
    let one = env.path("one");
    env.git(
        env.root.path(),
        &["clone", "-q", &url, &one.display().to_string()],
    );
    let task = env.record_task(&url, "make a() return 2", "HIGH")["finding_ids"][0]
        .as_str()
        .unwrap()
        .to_string();
    let s = Session::start(&env, &one, Client::default()).await;
    let before = s.ok("get_problems", json!({})).await;
    assert!(before.contains(&task), "{before}");

    let _ = ledger.child.kill();
    let _ = ledger.child.wait();
    let (during, _) = s.call("get_problems", json!({})).await;
    assert!(
        during.contains("recall did not run: anchor_unreachable")
            && during.contains("connect_refused"),
        "the outage is named, not reported as no findings: {during}"
    );

    ledger.restart();
    let mut after = String::new();
    // The attachment retries a transient cause on its own schedule; a call soon after the
    // ledger is back finds it.
    for _ in 0..40 {
        after = s.call("get_problems", json!({})).await.0;
        if after.contains(&task) && !after.contains("recall did not run") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(after.contains(&task), "{after}");
    assert!(!after.contains("recall did not run"), "{after}");
}

/// An agent records a task that waits for another through `record_finding`'s details, as it
/// gives a `ref:` there; `get_problems` marks it blocked and names what it waits for, so the
/// agent does not start on it (SPEC.md §Dependencies).
#[tokio::test(flavor = "multi_thread")]
async fn get_problems_marks_a_blocked_task_and_names_its_blockers() {
    let env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let (_bare, url) = env.origin("app", &[("a.py", "def a():\n    return 1\n")]);
    let one = env.path("one");
    env.git(
        env.root.path(),
        &["clone", "-q", &url, &one.display().to_string()],
    );
    let first = env.record_task(&url, "add the API", "HIGH")["finding_ids"][0]
        .as_str()
        .unwrap()
        .to_string();
    let s = Session::start(&env, &one, Client::default()).await;
    let recorded = s
        .ok(
            "record_finding",
            json!({"files": ["a.py"], "summary": "use the API", "severity": "CRITICAL",
                   "category": "task", "details": format!("blocked-by: {first}")}),
        )
        .await;
    let second = recorded
        .split_whitespace()
        .find(|w| w.starts_with("agf_") && !w.contains(&first))
        .unwrap_or_else(|| panic!("an id in {recorded}"))
        .trim_end_matches([',', '.', ')'])
        .to_string();
    let shown = s.ok("get_problems", json!({})).await;
    assert!(
        shown.contains("(2 open: 0 yours, 1 unclaimed, 1 blocked, 0 claimed by others"),
        "{shown}"
    );
    let line = shown
        .lines()
        .find(|l| l.contains(&second))
        .unwrap_or_else(|| panic!("{second} listed: {shown}"));
    assert!(
        line.contains(&format!(
            "[blocked by open {first}: do not start on it until each is fixed]"
        )),
        "{line}"
    );
    // Nor does claim_finding hand it out.
    let (said, _) = s.call("claim_finding", json!({"problem_id": second})).await;
    assert!(
        said.contains(&format!("Refused: {second} is blocked by open {first}")),
        "{said}"
    );
    // The ledger's own answer agrees: only the blocker is ready.
    let out = env.run(&["task", "list", "--ready", "--json"]);
    let ready: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(ready["ready"][0]["task_id"], first.as_str(), "{ready}");
    assert_eq!(ready["ready"].as_array().unwrap().len(), 1, "{ready}");
}

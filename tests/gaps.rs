//! path_activity against a real `ledger serve` that forwards `substrateGap` to the fixture
//! producer (the gap store's stand-in): held gaps, landings, lapsed leases, the cache, and the
//! lines other tools add from it.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::mcp::{Client, Session};
use crate::support::{Producer, TestEnv, normalize, wait_until};

const MIN: i64 = 60_000;

fn at(offset_ms: i64) -> String {
    let ms = metabob_process::clock::now_ms() + offset_ms;
    metabob_wire::text::rfc3339_ms(ms)
}

/// The gaps the store holds for the vessel `app`: each state the tool tells apart.
fn store() -> Value {
    json!([
        {"id": "gap_landing", "category": "bug", "route": "auto", "updated_at": at(-5 * MIN),
         "goal": "fix the parser", "classification_metadata": {"edit_site": "repos/app/a.py"},
         "landing": {"lease": {"holder": "cell-7", "attempt": 2, "until": at(30 * MIN + 30_000)}}},
        {"id": "gap_lapsed", "category": "bug", "route": "auto", "updated_at": at(-4 * MIN),
         "classification_metadata": {"edit_site": "repos/app/a.py"},
         "landing": {"lease": {"holder": "cell-3", "attempt": 1, "until": at(-210 * MIN)}}},
        {"id": "gap_held", "category": "design", "route": "goal", "updated_at": at(-3 * MIN),
         "classification_metadata": {"edit_site": "repos/app/a.py",
           "operator_hold": {"reason": "waiting on the API freeze", "review_by": "2027-01-15", "lift": "the freeze ends"}}},
        {"id": "gap_parked", "category": "docs", "route": "goal", "updated_at": at(-2 * MIN),
         "classification_metadata": {"edit_site": "repos/app/a.py", "disposition": "needs_information"}},
        {"id": "gap_queued", "category": "perf", "route": "goal", "updated_at": at(-MIN),
         "classification_metadata": {"edit_site": "repos/app/a.py"}},
        {"id": "gap_no_end", "category": "perf", "route": "auto", "updated_at": at(-6 * MIN),
         "classification_metadata": {"edit_site": "repos/app/a.py"},
         "landing": {"lease": {"holder": "cell-9"}}},
        {"id": "gap_in_dir", "category": "bug", "route": "auto", "updated_at": at(-MIN),
         "classification_metadata": {"edit_site": "repos/app/src/deep.py"}},
        {"id": "gap_mention", "category": "bug", "route": "auto", "updated_at": at(-MIN),
         "summary": "repos/app/b.py swallows errors"},
        {"id": "gap_unplaced", "category": "security", "route": "auto", "updated_at": at(-MIN),
         "goal": "rotate the tokens", "classification_metadata": {"remedy_vessel": "app"}},
        {"id": "gap_elsewhere", "category": "bug", "route": "auto", "updated_at": at(-MIN),
         "classification_metadata": {"edit_site": "repos/other/a.py", "remedy_vessel": "other"}},
        {"category": "no id: skipped"}
    ])
}

fn write_fixtures(path: &Path, gaps: Value, delay_ms: u64) {
    let fixtures = json!({
        "substrateGap": {"status": 200, "body": {"gaps": gaps}, "delay_ms": delay_ms},
    });
    std::fs::write(path, fixtures.to_string()).unwrap();
}

/// A checkout of `app` (a vessel: it has an origin), a fixture producer for the gap store, and a
/// ledger forwarding `substrateGap` to it.
struct World {
    env: TestEnv,
    checkout: std::path::PathBuf,
    fixtures: std::path::PathBuf,
    producer: Producer,
    _ledger: crate::support::Ledger,
}

fn world(extra_env: &[(&str, &str)]) -> World {
    let mut env = TestEnv::new();
    let fixtures = env.path("gaps.json");
    write_fixtures(&fixtures, store(), 0);
    let producer = Producer::start(&fixtures);
    let ledger = env.ledger(
        "main",
        &["--producer", &format!("substrateGap={}", producer.url)],
    );
    let (_bare, url) = env.origin(
        "app",
        &[
            ("a.py", "def a():\n    return 1\n"),
            ("b.py", "x = 1\n"),
            ("src/deep.py", "y = 2\n"),
        ],
    );
    let checkout = env.path("app");
    env.git(
        env.root.path(),
        &["clone", "-q", &url, &checkout.display().to_string()],
    );
    env.set("VESSEL_ID", "vessel-one");
    for (k, v) in extra_env {
        env.set(k, *v);
    }
    World {
        env,
        checkout,
        fixtures,
        producer,
        _ledger: ledger,
    }
}

fn gap_reads(p: &Producer) -> u64 {
    p.counts()["substrateGap"].as_u64().unwrap_or(0)
}

#[tokio::test]
async fn with_no_gap_producer_path_activity_says_go_ahead() {
    let env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let (_bare, url) = env.origin("app", &[("a.py", "x = 1\n")]);
    let checkout = env.path("app");
    env.git(
        env.root.path(),
        &["clone", "-q", &url, &checkout.display().to_string()],
    );
    let s = Session::start(&env, &checkout, Client::default()).await;
    let text = s.ok("path_activity", json!({"paths": ["a.py"]})).await;
    insta::assert_snapshot!(normalize(&text, &env), @r"path_activity: this substrate serves no gap store (no_producer(substrateGap)), so nothing is in flight to check: go ahead with the change, and record what you change (record_finding for what you leave, mark_complete for what you fix).");
}

#[tokio::test]
async fn path_activity_shows_landings_holds_lapses_and_the_queue_from_one_cached_read() {
    let w = world(&[]);
    let s = Session::start(&w.env, &w.checkout, Client::default()).await;
    s.ok("init_workspace", json!({})).await;
    // Before any read, the other tools say the gaps are not loaded, and read nothing. They
    // never wait for the session's attachment, which settles in the background: until it has,
    // they add no gap line at all, so ask again (for at most 10 s) until one is there.
    let mut impact = String::new();
    for _ in 0..100 {
        impact = s
            .ok("assign_git_changes", json!({"changed_files": ["a.py"]}))
            .await;
        if impact.contains("Open gaps on these files") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        impact.contains("Open gaps on these files: not loaded"),
        "{impact}"
    );
    assert_eq!(gap_reads(&w.producer), 0);

    let args = json!({"paths": ["a.py", "src", "b.py", "c.py", "repos/other/a.py", "/nowhere/x.py"], "limit": 5});
    let text = s.ok("path_activity", args.clone()).await;
    insta::assert_snapshot!("path_activity_listing", normalize(&text, &w.env));
    // The paths were matched here: the store was asked for everything, never for a path.
    let asked = w.producer.last();
    assert_eq!(asked["status"], "open");
    assert!(!asked.to_string().contains("a.py"), "{asked}");
    s.ok("path_activity", args).await;
    assert_eq!(
        gap_reads(&w.producer),
        1,
        "the second call is served from the cache"
    );

    let closed = s
        .ok(
            "path_activity",
            json!({"paths": ["a.py"], "include_closed": true}),
        )
        .await;
    assert!(closed.contains("gap_landing"), "{closed}");
    assert_eq!(w.producer.last()["status"], "closed");

    // The warm cache gives the other tools their lines.
    let impact = s
        .ok("analyze_impact", json!({"changed_files": ["a.py", "b.py"]}))
        .await;
    let lines: Vec<&str> = impact
        .lines()
        .filter(|l| l.starts_with("Gaps on"))
        .collect();
    insta::assert_snapshot!("gap_summary_lines", lines.join("\n"));
    s.ok(
        "record_finding",
        json!({"files": ["a.py"], "summary": "the parser drops input", "severity": "HIGH", "category": "correctness"}),
    )
    .await;
    let problems = s.ok("get_problems", json!({})).await;
    let from = problems
        .find("The system's own open gaps")
        .expect(&problems);
    insta::assert_snapshot!(
        "get_problems_gap_lines",
        normalize(&problems[from..], &w.env)
    );
    assert_eq!(
        gap_reads(&w.producer),
        2,
        "only path_activity reads the store"
    );
}

// Multi-threaded: the refresh runs on the runtime while the test waits on its thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_read_is_served_while_one_background_read_refreshes_it() {
    let w = world(&[("METABOB_GAP_FRESH_MS", "0")]);
    let s = Session::start(&w.env, &w.checkout, Client::default()).await;
    let first = s.ok("path_activity", json!({"paths": ["a.py"]})).await;
    assert!(first.contains("gap_queued"), "{first}");
    write_fixtures(
        &w.fixtures,
        json!([{"id": "gap_new", "category": "bug", "route": "auto",
        "classification_metadata": {"edit_site": "repos/app/a.py"}}]),
        0,
    );
    // Stale: the old read answers at once, and one refresh starts behind it.
    let second = s.ok("path_activity", json!({"paths": ["a.py"]})).await;
    assert!(
        second.contains("gap_queued") && !second.contains("gap_new"),
        "{second}"
    );
    assert!(wait_until(Duration::from_secs(10), || gap_reads(
        &w.producer
    ) >= 2));
    // Once the refresh has landed, the next call serves the new store (and starts another
    // refresh, as every read is stale at once here).
    let mut later = String::new();
    for _ in 0..100 {
        later = s.ok("path_activity", json!({"paths": ["a.py"]})).await;
        if later.contains("gap_new") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        later.contains("gap_new") && !later.contains("gap_queued"),
        "{later}"
    );
}

#[tokio::test]
async fn callers_that_arrive_during_a_read_share_it() {
    let w = world(&[]);
    write_fixtures(&w.fixtures, store(), 700);
    let s = Session::start(&w.env, &w.checkout, Client::default()).await;
    let args = json!({"paths": ["a.py"]});
    let (a, b) = tokio::join!(
        s.call("path_activity", args.clone()),
        s.call("path_activity", args)
    );
    assert!(!a.1 && !b.1, "{a:?} {b:?}");
    assert_eq!(a.0, b.0);
    assert_eq!(gap_reads(&w.producer), 1);
}

#[tokio::test]
async fn a_checkout_that_does_not_map_checks_only_store_paths_and_an_unmounted_vessel_is_named() {
    let w = world(&[]);
    // No origin: only repos/… paths are checked.
    let plain = w.env.path("plain");
    std::fs::create_dir_all(&plain).unwrap();
    w.env.git(&plain, &["init", "-q", "-b", "main"]);
    let s = Session::start(&w.env, &plain, Client::default()).await;
    let text = s
        .ok(
            "path_activity",
            json!({"paths": ["a.py", "repos/app/b.py"]}),
        )
        .await;
    insta::assert_snapshot!("path_activity_unmapped", normalize(&text, &w.env));
    // A vessel that no gap names is not called free.
    let (_bare, url) = w.env.origin("zzz", &[("a.py", "x = 1\n")]);
    let zzz = w.env.path("zzz");
    w.env.git(
        w.env.root.path(),
        &["clone", "-q", &url, &zzz.display().to_string()],
    );
    let s = Session::start(&w.env, &zzz, Client::default()).await;
    let text = s.ok("path_activity", json!({"paths": ["a.py"]})).await;
    assert!(text.contains("no open gap names repos/zzz/"), "{text}");
}

#[tokio::test]
async fn a_failed_gap_read_is_one_named_line() {
    let w = world(&[]);
    std::fs::write(
        &w.fixtures,
        json!({"substrateGap": {"status": 500, "body": {"error": "store down"}}}).to_string(),
    )
    .unwrap();
    let s = Session::start(&w.env, &w.checkout, Client::default()).await;
    let (text, err) = s.call("path_activity", json!({"paths": ["a.py"]})).await;
    assert!(err, "{text}");
    assert_eq!(
        text,
        "path_activity: substrateGap answered HTTP 500: store down"
    );
}

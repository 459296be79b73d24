//! `GET /metrics`: the families a scrape shows, task gauges equal to `task list`, no org's
//! repository names shown to another org's key, and no keyless scrape off loopback. A real
//! Prometheus scraping it is in `prometheus.rs`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::http;
use super::prometheus::get;
use crate::support::TestEnv;

/// `name{labels} value` lines of one family, as (labels, value).
fn samples(text: &str, name: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|l| l.strip_prefix(name))
        .filter_map(|rest| {
            let (labels, value) = rest.rsplit_once(' ')?;
            Some((labels.to_string(), value.parse().ok()?))
        })
        .collect()
}

#[test]
fn metrics_show_the_boards_tasks_per_state_and_hide_other_orgs_repositories() {
    let env = TestEnv::new();
    let l = env.ledger("metrics", &[]);
    let origin = "https://example.invalid/acme/app.git";
    for summary in ["first", "second"] {
        env.record_task(origin, summary, "HIGH");
    }

    // Keyless on a loopback listener: every org's gauges, in the OpenMetrics text format.
    let (status, headers, text) = l.http_with_headers("GET", "/metrics", None, "");
    assert_eq!(status, 200, "{text}");
    assert!(
        headers
            .iter()
            .any(|(k, v)| k == "content-type" && v.starts_with("application/openmetrics-text")),
        "{headers:?}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    for family in [
        "metabob_writes_total",
        "metabob_group_commit_batch_size_bucket",
        "metabob_readers_busy",
        "metabob_cells{",
        "metabob_tasks{",
        "metabob_http_requests_total{",
        "metabob_http_request_duration_seconds_bucket{",
    ] {
        assert!(text.contains(family), "{family} missing:\n{text}");
    }

    // The task gauges are the board's counts, as `task list --json` gives them.
    let out = env.run(&["task", "list", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let board: Value = serde_json::from_str(&out.stdout).expect("task list --json");
    let tasks = samples(&text, "metabob_tasks");
    let mut compared = 0;
    for repo in board["repositories"].as_array().expect("repositories") {
        let name = repo["repository"].as_str().expect("a name");
        for state in [
            "open",
            "claimed",
            "pending",
            "closed",
            "parked",
            "withdrawn",
        ] {
            let want = repo[state].as_array().map_or(0, Vec::len) as f64;
            let key = format!("{{org=\"default\",repo=\"{name}\",state=\"{state}\"}}");
            assert_eq!(tasks.get(&key), Some(&want), "{key} in:\n{text}");
            compared += 1;
        }
    }
    assert_eq!(compared, 6, "one repository on the board: {board}");
    assert!(tasks.values().any(|n| *n == 2.0), "{text}");

    // Another org's key sees its own (empty) org, none of default's repositories.
    let (_, other) = l.create_key(&env, "other", "read");
    let (status, text) = l.http("GET", "/metrics", Some(&other), "");
    assert_eq!(status, 200, "{text}");
    assert!(
        !text.contains("acme"),
        "another org's repository shown:\n{text}"
    );
    assert!(text.contains("metabob_cells{org=\"other\""), "{text}");

    // A key that is not one is refused in one line, and the secret is not echoed.
    let (status, text) = l.http("GET", "/metrics", Some("mb_live_0000"), "");
    assert_eq!(status, 401, "{text}");
    assert!(!text.contains("mb_live_0000"), "{text}");
}

/// Keyless scraping is allowed by the address the ledger listens on, not by where a request
/// comes from: a ledger on every interface can be reached from other hosts, so even a request
/// over its loopback interface must bring a key.
#[test]
fn keyless_metrics_are_refused_on_a_listener_that_is_not_loopback() {
    let env = TestEnv::new();
    // The TestEnv's ledgers listen on loopback; this one makes the store and its key, then
    // starts again on the same store listening on 0.0.0.0.
    let mut ledger = env.ledger("wildcard", &[]);
    let (_, key) = ledger.create_key(&env, "default", "read");
    ledger.terminate();
    ledger.restart_on("0.0.0.0:0");
    let port = ledger
        .url
        .strip_prefix("http://0.0.0.0:")
        .unwrap_or_else(|| panic!("not listening on 0.0.0.0: {}", ledger.url))
        .to_string();
    let url = format!("http://127.0.0.1:{port}");

    let (status, body) = http(&url, "GET", "/metrics", None, None);
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"], "key_rejected", "{body}");
    // The refusal is /metrics' own: the same listener answers what needs no key.
    let (status, body) = http(&url, "GET", "/health", None, None);
    assert_eq!(status, 200, "{body}");
    // With a key, as Prometheus sends one (`authorization: credentials`), it is served.
    let bearer = format!("Bearer {key}");
    let (status, text) =
        get(&format!("127.0.0.1:{port}"), "/metrics", Some(&bearer)).expect("GET /metrics");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("metabob_cells{org=\"default\""), "{text}");
}

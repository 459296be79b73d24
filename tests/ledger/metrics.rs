//! `GET /metrics`: the families a scrape shows, task gauges equal to `task list`, and no org's
//! repository names shown to another org's key.

use std::collections::BTreeMap;

use serde_json::Value;

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

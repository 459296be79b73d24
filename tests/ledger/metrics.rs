//! `GET /metrics`: the families a scrape shows, task gauges equal to `task list`, no org's
//! repository names shown to another org's key, no keyless scrape off loopback, and label
//! values escaped so that an org's name or a repository's path can neither break the exposition
//! nor forge a series. A real Prometheus scraping it is in `prometheus.rs`.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::http;
use super::prometheus::get;
use crate::support::{Ledger, TestEnv};

/// An org's name holding what would end its label value and its line in a sample, then a whole
/// forged series (and an `# EOF`) after it. `ledger key create --org` only trims a name and
/// refuses an empty one (crates/ledger/src/keys.rs), so every character can be in one, newlines
/// and quotes included.
pub(super) const HOSTILE_ORG: &str =
    "acme\"} 1\nmetabob_tasks{org=\"x\",repo=\"forged\",state=\"open\"} 999\n# EOF\nq\\\"z\\";
/// [`HOSTILE_ORG`] as the text format writes it inside a label value's quotes.
const HOSTILE_ORG_ESCAPED: &str =
    r#"acme\"} 1\nmetabob_tasks{org=\"x\",repo=\"forged\",state=\"open\"} 999\n# EOF\nq\\\"z\\"#;
/// An origin whose repository path holds a quote, a brace, a backslash and a forged sample
/// after a newline: what any write key can record a finding under.
const HOSTILE_ORIGIN: &str =
    "https://example.invalid/acme/we\"ird}\\app\nmetabob_tasks{org=\"x\"} 999";
/// The repository [`HOSTILE_ORIGIN`] is filed under, as `task list` names it: the identity is
/// the URL without its scheme, and the board shows a name on one line, a newline as a space.
/// So a repository label never holds a newline, but holds the rest.
pub(super) const HOSTILE_REPO: &str =
    "example.invalid/acme/we\"ird}\\app metabob_tasks{org=\"x\"} 999";
/// [`HOSTILE_REPO`] as the text format writes it inside a label value's quotes.
const HOSTILE_REPO_ESCAPED: &str =
    r#"example.invalid/acme/we\"ird}\\app metabob_tasks{org=\"x\"} 999"#;

/// A board with one task on [`HOSTILE_ORIGIN`] in org `default` and one in org [`HOSTILE_ORG`],
/// recorded by a write key of that org; `env` keeps using the first-start admin key after.
pub(super) fn hostile_board(env: &mut TestEnv, ledger: &Ledger) {
    env.record_task(HOSTILE_ORIGIN, "in the default org", "HIGH");
    let (_, key) = ledger.create_key(env, HOSTILE_ORG, "read,write");
    env.set("METABOB_API_KEY", key);
    env.record_task(HOSTILE_ORIGIN, "in the hostile org", "HIGH");
    let out = env.run(&["task", "list", "--json"]);
    env.unset("METABOB_API_KEY");
    assert_eq!(out.code, 0, "{out:?}");
    let board: Value = serde_json::from_str(&out.stdout).expect("task list --json");
    assert_eq!(
        board["repositories"][0]["repository"], HOSTILE_REPO,
        "the repository's name on the board: {board}"
    );
}

/// What `promtool check metrics` (Debian's `prometheus` package) says of an exposition on its
/// stdin: its exit code and what it printed.
fn promtool_check_metrics(text: &str) -> (Option<i32>, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "promtool could not run ({e}): install Debian's `prometheus` package \
                 (scripts/test.sh does)"
            )
        });
    let mut stdin = child.stdin.take().expect("promtool's stdin");
    stdin.write_all(text.as_bytes()).expect("feed promtool");
    drop(stdin);
    let out = child.wait_with_output().expect("promtool's answer");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), said)
}

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

/// The text encoder of `prometheus-client` writes a label value as it is; the ledger escapes
/// it (`\` as `\\`, `"` as `\"`, a newline as `\n`), so the exposition of an org named to break
/// it, over a repository whose path is, still parses, and shows each value once, in its label.
#[test]
fn hostile_org_names_and_repository_paths_are_escaped_in_the_exposition() {
    let mut env = TestEnv::new();
    let l = env.ledger("hostile-labels", &[]);
    hostile_board(&mut env, &l);

    let (status, text) = l.http("GET", "/metrics", None, "");
    assert_eq!(status, 200, "{text}");
    for sample in [
        format!(
            "metabob_tasks{{org=\"default\",repo=\"{HOSTILE_REPO_ESCAPED}\",state=\"open\"}} 1"
        ),
        format!(
            "metabob_tasks{{org=\"{HOSTILE_ORG_ESCAPED}\",repo=\"{HOSTILE_REPO_ESCAPED}\",state=\"open\"}} 1"
        ),
        format!("metabob_cells{{org=\"{HOSTILE_ORG_ESCAPED}\",state=\"working\"}} 0"),
    ] {
        assert!(
            text.lines().any(|l| l == sample),
            "no line {sample} in:\n{text}"
        );
    }
    // What the names spell out is only ever inside their own labels, escaped: no label
    // `org="x"` or `repo="forged"` and no sample of value 999 of its own.
    let forged: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("org=\"x\"") || l.contains("repo=\"forged\"") || l.ends_with(" 999"))
        .collect();
    assert!(forged.is_empty(), "forged lines {forged:?} in:\n{text}");
    // The one `# EOF` line is the last.
    assert_eq!(
        text.lines().position(|l| l == "# EOF"),
        Some(text.lines().count() - 1),
        "{text}"
    );

    // `promtool check metrics` parses the exposition with the Prometheus text format's reader
    // (1 and "error while linting" when it cannot), whose label values are quoted and escaped
    // as OpenMetrics's are, and which reads `# EOF` as a comment. It then lints it (3 and a
    // line a problem). The only problems allowed come of where the formats differ: an
    // OpenMetrics counter family `x` has `_total` samples, which that reader takes for an
    // untyped family `x_total` with no help text.
    let (code, said) = promtool_check_metrics(&text);
    let counters: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let unexplained: Vec<&str> = said
        .lines()
        .filter(|l| {
            !l.strip_suffix("_total no help text")
                .is_some_and(|family| counters.contains(&family))
        })
        .collect();
    assert!(
        matches!(code, Some(0 | 3)) && unexplained.is_empty(),
        "promtool check metrics answered {code:?}: {said}\nof:\n{text}"
    );
}

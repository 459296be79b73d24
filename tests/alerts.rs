//! The Prometheus alerting rules of `examples/prometheus/alerts.yml`: `promtool check rules`
//! accepts them and `promtool test rules` passes their unit tests (`alerts_test.yml`, each
//! alert firing and not on either side of its boundary); every rule names a severity, a summary
//! and a description; and every `metabob_…` series they select is one a real ledger's
//! `GET /metrics` exposes, with the label values they match. promtool is Debian's `prometheus`
//! package (scripts/test.sh installs it): without it these tests fail, they never skip.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use crate::ledger::{family_of, ledger_with_a_claim};
use crate::support::TestEnv;

const ALERTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/prometheus/alerts.yml"
);
const ALERTS_TEST: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/prometheus/alerts_test.yml"
);

/// Runs `promtool <args>` and fails the test, with all promtool printed, unless it exits 0.
fn promtool(args: &[&str]) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(Path::new(ALERTS).parent().expect("examples/prometheus"))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "promtool could not run ({e}): install Debian's `prometheus` package \
                 (scripts/test.sh does)"
            )
        });
    assert!(
        out.status.success(),
        "promtool {} exited {}:\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    promtool(&["check", "rules", ALERTS]);
    promtool(&["test", "rules", ALERTS_TEST]);

    let rules = std::fs::read_to_string(ALERTS).expect("examples/prometheus/alerts.yml");
    let tests = std::fs::read_to_string(ALERTS_TEST).expect("examples/prometheus/alerts_test.yml");
    let alerts: Vec<&str> = rules.split("- alert: ").skip(1).collect();
    assert!(alerts.len() >= 6, "six alerts or more: {}", alerts.len());
    for rule in alerts {
        let name = rule.lines().next().unwrap_or_default();
        for key in ["for: ", "severity: ", "summary: ", "description: "] {
            assert!(rule.contains(key), "alert {name} has no {key:?}");
        }
        assert!(
            tests.contains(&format!("alertname: {name}\n")),
            "alert {name} has no unit test in alerts_test.yml"
        );
    }
}

/// Every `metabob_…` name in `text`, with the `label="value"` matchers of the selector it
/// opens, if any.
fn selectors(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("metabob_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..end].to_string();
        let mut matchers = Vec::new();
        if let Some(inner) = tail[end..].strip_prefix('{') {
            let inner = &inner[..inner.find('}').expect("a selector's closing brace")];
            for m in inner.split(',').map(str::trim).filter(|m| !m.is_empty()) {
                let (label, value) = m
                    .split_once('=')
                    .unwrap_or_else(|| panic!("{name}: matcher {m:?} is not label=\"value\""));
                let value = value
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or_else(|| panic!("{name}: matcher {m:?} is not label=\"value\""));
                matchers.push((label.trim().to_string(), value.to_string()));
            }
        }
        found.push((name, matchers));
        rest = &tail[end..];
    }
    found
}

#[test]
fn every_metabob_series_the_alerts_select_is_one_a_ledger_exposes() {
    let rules = std::fs::read_to_string(ALERTS).expect("examples/prometheus/alerts.yml");
    let used = selectors(&rules);
    assert!(!used.is_empty(), "alerts.yml selects no metabob series");

    // A ledger with a task that a take claimed, so the take counter has its `claimed` sample;
    // the task and cell gauges have every state of every repository and org.
    let env = TestEnv::new();
    let (ledger, _key) = ledger_with_a_claim(&env, "alerts");
    // Keyless, as the host's own Prometheus scrapes a loopback ledger.
    let (status, text) = ledger.http("GET", "/metrics", None, "");
    assert_eq!(status, 200, "{text}");
    let types: BTreeMap<String, String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(f, k)| (f.to_string(), k.to_string()))
        .collect();
    let samples: Vec<(&str, &str)> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let name = l.split(['{', ' ']).next()?;
            let labels = l[name.len()..]
                .strip_prefix('{')
                .and_then(|l| l.split_once('}'))
                .map_or("", |(labels, _)| labels);
            Some((name, labels))
        })
        .collect();

    let mut families = BTreeSet::new();
    for (name, matchers) in &used {
        let family = family_of(name, &types)
            .unwrap_or_else(|| panic!("alerts.yml: {name} is no family's sample in:\n{text}"));
        families.insert(family);
        // `job` and `instance` are Prometheus's, added to every series it scrapes.
        let wanted: Vec<String> = matchers
            .iter()
            .filter(|(label, _)| label != "job" && label != "instance")
            .map(|(label, value)| format!("{label}=\"{value}\""))
            .collect();
        assert!(
            samples.iter().any(|(sample, labels)| sample == name
                && wanted.iter().all(|w| labels.split(',').any(|l| l == w))),
            "alerts.yml: no {name} sample with {wanted:?} in:\n{text}"
        );
    }
    for family in ["metabob_tasks", "metabob_cells", "metabob_takes"] {
        assert!(families.contains(family), "the alerts use {family}");
    }
}

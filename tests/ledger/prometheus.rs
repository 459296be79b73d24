//! A real Prometheus (Debian's `prometheus`) scraping a real ledger with the scrape config README
//! shows: it parses the exposition, and its HTTP API comes to give the task gauges `task list`
//! gives as tasks move; an org's name and a repository's path made to break the exposition are
//! taken as they are, and forge nothing. The Grafana dashboard (`examples/grafana/fleet.json`)
//! queries only families a ledger exposes, and each of its queries is PromQL that Prometheus
//! runs.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::metrics::{HOSTILE_ORG, HOSTILE_REPO, hostile_board};
use crate::support::{Ledger, TestEnv, closed_port};

const DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/grafana/fleet.json");

/// How long Prometheus may take to start, or to show a change: tens of 1 s scrape intervals,
/// for a loaded machine.
const BOUND: Duration = Duration::from_secs(60);

/// What the dashboard's Grafana variables stand for when its queries are run here.
const GRAFANA_VARIABLES: [(&str, &str); 3] = [
    ("$__rate_interval", "1m"),
    ("${org}", "default"),
    ("$org", "default"),
];

/// One HTTP/1.0 GET (so the answer is never chunked and ends when the connection does): the
/// status and the body.
pub(super) fn get(addr: &str, path: &str, auth: Option<&str>) -> Result<(u16, String), String> {
    let exchange = || -> std::io::Result<String> {
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(20)))?;
        let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
        write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n")?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)?;
        Ok(String::from_utf8_lossy(&raw).into_owned())
    };
    let raw = exchange().map_err(|e| format!("GET http://{addr}{path}: {e}"))?;
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET http://{addr}{path}: no HTTP head in {raw:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("GET http://{addr}{path}: no status in {head:?}"))?;
    Ok((status, body.to_string()))
}

/// `s` as a URL query value: every byte but the unreserved ones percent-encoded.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A `prometheus` process on a loopback port with its storage under the test root; killed on
/// drop.
struct Prometheus {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Scrapes `ledger` every second as `job="metabob-ledger"`, with the key in `key_file` sent
    /// as README's scrape config sends it, or with no key (a loopback ledger's every org);
    /// returns once Prometheus says it is ready.
    fn start(env: &TestEnv, ledger: &Ledger, key_file: Option<&Path>) -> Prometheus {
        let dir = env.path("prometheus");
        std::fs::create_dir_all(&dir).expect("prometheus dir");
        let target = ledger.url.trim_start_matches("http://");
        let config = dir.join("prometheus.yml");
        let authorization = key_file.map_or(String::new(), |key| {
            format!(
                "    authorization: {{ type: ApiKey, credentials_file: {} }}\n",
                key.display()
            )
        });
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: metabob-ledger\n{authorization}    \
                 static_configs: [{{ targets: [\"{target}\"] }}]\n"
            ),
        )
        .expect("write prometheus.yml");
        let addr = format!("127.0.0.1:{}", closed_port());
        let log = dir.join("prometheus.log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("create the log"))
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "prometheus could not run ({e}): install Debian's `prometheus` package \
                     (scripts/test.sh does)"
                )
            });
        let mut p = Prometheus { child, addr, log };
        p.wait("Prometheus to be ready", |p| {
            match get(&p.addr, "/-/ready", None) {
                Ok((200, _)) => Ok(()),
                Ok((status, body)) => Err(format!("/-/ready answered {status}: {body}")),
                Err(e) => Err(e),
            }
        });
        p
    }

    /// Calls `probe` until it answers `Ok`, for at most [`BOUND`]; past it, or once Prometheus
    /// has exited, the test fails with `what`, the probe's last word and Prometheus's log.
    fn wait<T>(&mut self, what: &str, mut probe: impl FnMut(&Self) -> Result<T, String>) -> T {
        let start = Instant::now();
        loop {
            let last = match probe(self) {
                Ok(v) => return v,
                Err(e) => e,
            };
            let exited = self.child.try_wait().expect("poll prometheus");
            if exited.is_some() || start.elapsed() > BOUND {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                let end = match exited {
                    Some(status) => format!("prometheus exited ({status})"),
                    None => format!("gave up after {} s", BOUND.as_secs()),
                };
                panic!("waiting for {what}: {end}; last: {last}\nprometheus's log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `GET /api/v1/<path>`: its `data` when Prometheus answers `status: success`.
    fn api(&self, path: &str) -> Result<Value, String> {
        let (status, body) = get(&self.addr, &format!("/api/v1/{path}"), None)?;
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| format!("/api/v1/{path} answered {status}, not JSON ({e}): {body}"))?;
        if status != 200 || v["status"] != "success" {
            return Err(format!("/api/v1/{path} answered {status}: {v}"));
        }
        Ok(v["data"].clone())
    }

    /// An instant query's result vector.
    fn query(&self, promql: &str) -> Result<Vec<Value>, String> {
        let data = self.api(&format!("query?query={}", encode(promql)))?;
        match data["result"].as_array() {
            Some(result) if data["resultType"] == "vector" => Ok(result.clone()),
            _ => Err(format!("{promql}: not an instant vector: {data}")),
        }
    }
}

/// The task counts per (repository, state) as `task list --json` shows them, every state of
/// every repository named.
fn board_counts(env: &TestEnv) -> BTreeMap<(String, String), f64> {
    let out = env.run(&["task", "list", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let board: Value = serde_json::from_str(&out.stdout).expect("task list --json");
    let mut counts = BTreeMap::new();
    for repo in board["repositories"].as_array().expect("repositories") {
        let name = repo["repository"].as_str().expect("a repository name");
        for state in metabob_wire::board::GROUPS {
            let n = repo[state].as_array().map_or(0, Vec::len);
            counts.insert((name.to_string(), state.to_string()), n as f64);
        }
    }
    counts
}

/// `metabob_tasks` of org `default` as Prometheus last scraped it, per (repository, state).
fn scraped_counts(p: &Prometheus) -> Result<BTreeMap<(String, String), f64>, String> {
    let mut counts = BTreeMap::new();
    for sample in p.query("metabob_tasks{job=\"metabob-ledger\", org=\"default\"}")? {
        let label = |l: &str| sample["metric"][l].as_str().unwrap_or_default().to_string();
        let value = sample["value"][1]
            .as_str()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("no value in {sample}"))?;
        counts.insert((label("repo"), label("state")), value);
    }
    Ok(counts)
}

/// Waits until Prometheus's task gauges are exactly `task list`'s, which changed at `step`.
fn gauges_agree(p: &mut Prometheus, env: &TestEnv, step: &str) {
    let want = board_counts(env);
    p.wait(&format!("the task gauges after {step}"), |p| {
        let got = scraped_counts(p)?;
        if got == want {
            Ok(())
        } else {
            Err(format!("Prometheus has {got:?}, task list has {want:?}"))
        }
    });
}

/// Every panel of the dashboard, those inside rows included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for p in dashboard["panels"]
        .as_array()
        .expect("the dashboard has panels")
    {
        all.push(p);
        all.extend(p["panels"].as_array().into_iter().flatten());
    }
    all
}

/// The dashboard, read as Grafana imports it.
fn dashboard() -> Value {
    let text = std::fs::read_to_string(DASHBOARD).expect("examples/grafana/fleet.json");
    serde_json::from_str(&text).expect("examples/grafana/fleet.json is JSON")
}

/// Each query panel's title and PromQL expressions; fails on a panel that queries nothing or
/// another data source than the dashboard's Prometheus variable.
fn panel_exprs(dashboard: &Value) -> Vec<(String, Vec<String>)> {
    let ours = json!({"type": "prometheus", "uid": "${datasource}"});
    let mut exprs = Vec::new();
    for p in panels(dashboard) {
        let title = p["title"].as_str().expect("every panel has a title");
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"], ours, "panel {title:?}");
        let targets = p["targets"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        assert!(!targets.is_empty(), "panel {title:?} queries nothing");
        let mut mine = Vec::new();
        for t in targets {
            assert_eq!(t["datasource"], ours, "panel {title:?}: {t}");
            let expr = t["expr"].as_str().unwrap_or_default();
            assert!(!expr.trim().is_empty(), "panel {title:?}: no PromQL in {t}");
            mine.push(expr.to_string());
        }
        exprs.push((title.to_string(), mine));
    }
    exprs
}

/// The template variable named `name`.
fn variable<'a>(dashboard: &'a Value, name: &str) -> &'a Value {
    dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no ${name} variable in the dashboard"))
}

/// Every `metabob_…` name in a query.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("metabob_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// A ledger on which one task was recorded and claimed by a take, so the take counter has its
/// `claimed` sample and the task and cell gauges have their series; and its read-write key.
pub(crate) fn ledger_with_a_claim(env: &TestEnv, name: &str) -> (crate::support::Ledger, String) {
    let ledger = env.ledger(name, &[]);
    let (_, key) = ledger.create_key(env, "default", "read,write");
    let task = env.record_task("https://example.invalid/acme/app.git", "first", "HIGH");
    let task = task["concept_id"].as_str().expect("a concept id");
    let (status, v) = ledger.resolve(
        &key,
        json!({"type": "taskTake_write", "take": {
            "candidates": [task], "vessel_id": "cell-a", "session": "s1", "claim_minutes": 30}}),
    );
    assert_eq!(
        (status, &v["taken"]["outcome"]),
        (200, &json!("claimed")),
        "{v}"
    );
    (ledger, key)
}

/// The family a sample name belongs to, given the scrape's `# TYPE` lines: a gauge by its own
/// name, a counter's `_total`, a histogram's `_bucket`, `_sum` and `_count`, as OpenMetrics
/// names samples.
pub(crate) fn family_of(sample: &str, types: &BTreeMap<String, String>) -> Option<String> {
    let is = |family: &str, kind: &str| types.get(family).is_some_and(|k| k == kind);
    if is(sample, "gauge") {
        return Some(sample.to_string());
    }
    if let Some(f) = sample.strip_suffix("_total").filter(|f| is(f, "counter")) {
        return Some(f.to_string());
    }
    ["_bucket", "_sum", "_count"]
        .iter()
        .filter_map(|s| sample.strip_suffix(s))
        .find(|f| is(f, "histogram"))
        .map(str::to_string)
}

#[test]
fn a_real_prometheus_scrapes_task_gauges_equal_to_task_list_as_tasks_move() {
    let env = TestEnv::new();
    let ledger = env.ledger("prometheus", &[]);
    let (_, key) = ledger.create_key(&env, "default", "read");
    let key_file = env.path("metabob.key");
    std::fs::write(&key_file, &key).expect("write the key file");
    let (_, url) = env.origin("app", &[("a.py", "def a():\n    return 1\n")]);
    let mut prom = Prometheus::start(&env, &ledger, Some(&key_file));

    // Up: Prometheus sent the key, and read and parsed a whole exposition.
    prom.wait("the ledger's target to be up", |p| {
        let targets = p.api("targets?state=active")?;
        let target = &targets["activeTargets"][0];
        if target["health"] == "up" {
            Ok(())
        } else {
            Err(format!("target: {target}"))
        }
    });
    let up = prom.query("up{job=\"metabob-ledger\"}").expect("query up");
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(up[0]["value"][1], "1", "{up:?}");

    // A task whose ref the pull refuses (it is parked), then three to work on.
    env.record_task_with(
        &url,
        "a.py",
        "work on a weird branch",
        "CRITICAL",
        "ref: -x;rm -rf",
    );
    for summary in ["a should return 2", "tidy b", "rename c"] {
        env.record_task(&url, summary, "HIGH");
    }
    gauges_agree(&mut prom, &env, "four tasks were recorded");

    let out = env.task_pull(&url, "c0", &[]);
    assert_eq!(out.code, 5, "the refused ref is parked: {out:?}");
    for cell in ["c1", "c2"] {
        let out = env.task_pull(&url, cell, &[]);
        assert_eq!(out.code, 0, "{out:?}");
    }
    gauges_agree(&mut prom, &env, "one task was parked and two claimed");

    env.fix_push_close("c1");
    let task_dir = env.path("c2/task").display().to_string();
    let out = env.run(&["task", "release", "--task-dir", &task_dir]);
    assert_eq!(out.code, 0, "{out:?}");
    gauges_agree(&mut prom, &env, "one task was closed and one released");
    let want = board_counts(&env);
    for (state, n) in [
        ("open", 2.0),
        ("claimed", 0.0),
        ("closed", 1.0),
        ("parked", 1.0),
    ] {
        let states: Vec<_> = want.iter().filter(|((_, s), _)| s == state).collect();
        assert_eq!(states.len(), 1, "one repository: {want:?}");
        assert_eq!(*states[0].1, n, "{state}: {want:?}");
    }

    // The dashboard's queries are PromQL this Prometheus runs, over what it has scraped.
    let dashboard = dashboard();
    for (title, exprs) in panel_exprs(&dashboard) {
        for expr in exprs {
            let mut promql = expr.clone();
            for (var, value) in GRAFANA_VARIABLES {
                promql = promql.replace(var, value);
            }
            assert!(
                !promql.contains('$'),
                "panel {title:?}: a variable left in {promql}"
            );
            if let Err(e) = prom.query(&promql) {
                panic!("panel {title:?}: {e}");
            }
        }
    }
    let org = variable(&dashboard, "org");
    assert_eq!(org["query"]["query"], "label_values(metabob_tasks, org)");
    let orgs = prom
        .api(&format!(
            "label/org/values?{}",
            encode_pair("match[]", "metabob_tasks")
        ))
        .expect("the org variable's values");
    assert_eq!(orgs, json!(["default"]));
}

/// Each series of `selector` Prometheus last scraped, as the values of its `labels`.
fn series(
    p: &Prometheus,
    selector: &str,
    labels: &[&str],
) -> Result<BTreeSet<Vec<String>>, String> {
    Ok(p.query(selector)?
        .iter()
        .map(|s| {
            labels
                .iter()
                .map(|l| s["metric"][l].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .collect())
}

/// An org named, and a repository path chosen, to break the exposition and forge a series
/// (`metrics.rs@hostile_board`): Prometheus takes the scrape and holds each label value exactly
/// as it was named, in the series the ledger meant and in no other.
#[test]
fn a_real_prometheus_ingests_hostile_org_and_repository_labels_as_they_are() {
    let mut env = TestEnv::new();
    let ledger = env.ledger("prometheus-hostile", &[]);
    hostile_board(&mut env, &ledger);
    // Keyless on a loopback listener: every org's gauges, the hostile org's and default's.
    let mut prom = Prometheus::start(&env, &ledger, None);

    let target = prom.wait("the ledger's first scrape", |p| {
        let targets = p.api("targets?state=active")?;
        let target = targets["activeTargets"][0].clone();
        match target["health"].as_str() {
            Some("up" | "down") => Ok(target),
            _ => Err(format!("target: {target}")),
        }
    });
    assert_eq!(
        (&target["health"], &target["lastError"]),
        (&json!("up"), &json!("")),
        "Prometheus refused the exposition: {target}"
    );

    let orgs = [HOSTILE_ORG, "default"];
    let tasks: BTreeSet<Vec<String>> = orgs
        .iter()
        .flat_map(|org| {
            metabob_wire::board::GROUPS.iter().map(move |state| {
                vec![org.to_string(), HOSTILE_REPO.to_string(), state.to_string()]
            })
        })
        .collect();
    let cells: BTreeSet<Vec<String>> = orgs
        .iter()
        .flat_map(|org| ["working", "idle"].map(|state| vec![org.to_string(), state.to_string()]))
        .collect();
    prom.wait("the task and cell gauges", |p| {
        let got = (
            series(
                p,
                "metabob_tasks{job=\"metabob-ledger\"}",
                &["org", "repo", "state"],
            )?,
            series(
                p,
                "metabob_cells{job=\"metabob-ledger\"}",
                &["org", "state"],
            )?,
        );
        if got == (tasks.clone(), cells.clone()) {
            Ok(())
        } else {
            Err(format!("Prometheus has {got:?}"))
        }
    });

    // No series of any family holds another org or repository, or the forged value.
    let labelled = |label: &str| {
        series(
            &prom,
            &format!("{{job=\"metabob-ledger\", {label}!=\"\"}}"),
            &[label],
        )
        .expect("query the label's values")
    };
    assert_eq!(
        labelled("org"),
        orgs.iter().map(|o| vec![o.to_string()]).collect(),
        "the orgs of every series"
    );
    assert_eq!(
        labelled("repo"),
        BTreeSet::from([vec![HOSTILE_REPO.to_string()]]),
        "the repositories of every series"
    );
    let forged = prom
        .query("{job=\"metabob-ledger\"} == 999")
        .expect("query the forged value");
    assert!(forged.is_empty(), "forged series: {forged:?}");
    let values = prom
        .api(&format!(
            "label/org/values?{}",
            encode_pair("match[]", "metabob_cells")
        ))
        .expect("the org label's values");
    assert_eq!(values, json!([HOSTILE_ORG, "default"]));
}

fn encode_pair(name: &str, value: &str) -> String {
    format!("{}={}", encode(name), encode(value))
}

#[test]
fn the_grafana_dashboard_queries_every_family_a_ledger_exposes_and_no_other() {
    let dashboard = dashboard();
    assert!(dashboard["title"].is_string(), "a title");
    assert!(dashboard["uid"].is_string(), "a uid");
    assert!(dashboard["schemaVersion"].is_u64(), "a schemaVersion");
    let source = variable(&dashboard, "datasource");
    assert_eq!(
        (&source["type"], &source["query"]),
        (&json!("datasource"), &json!("prometheus"))
    );
    let org = variable(&dashboard, "org");
    assert_eq!(org["type"], "query", "{org}");
    let exprs = panel_exprs(&dashboard);
    for (title, promql) in &exprs {
        let uses_org = promql.iter().any(|e| e.contains("$org"));
        let per_org = promql
            .iter()
            .any(|e| e.contains("metabob_tasks") || e.contains("metabob_cells"));
        assert_eq!(
            uses_org, per_org,
            "panel {title:?}: the org variable filters the per-org gauges: {promql:?}"
        );
    }

    // A ledger that has served a take and a claim, so every labelled family has samples.
    let env = TestEnv::new();
    let (ledger, key) = ledger_with_a_claim(&env, "dashboard");
    let (status, text) = ledger.http("GET", "/metrics", Some(&key), "");
    assert_eq!(status, 200, "{text}");
    let types: BTreeMap<String, String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(f, k)| (f.to_string(), k.to_string()))
        .collect();
    let samples: BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();

    let mut queried = BTreeSet::new();
    let variable_query = org["query"]["query"]
        .as_str()
        .expect("the org variable's query");
    let all = exprs
        .iter()
        .flat_map(|(title, promql)| promql.iter().map(move |e| (title.as_str(), e.as_str())))
        .chain([("$org", variable_query)]);
    for (title, expr) in all {
        let names = metric_names(expr);
        assert!(
            !names.is_empty(),
            "{title:?} queries no metabob metric: {expr}"
        );
        for name in names {
            let family = family_of(&name, &types)
                .unwrap_or_else(|| panic!("{title:?}: {name} is no family's sample in:\n{text}"));
            assert!(
                samples.contains(name.as_str()),
                "{title:?}: no {name} sample in:\n{text}"
            );
            queried.insert(family);
        }
    }
    let exposed: BTreeSet<String> = types.into_keys().collect();
    assert_eq!(
        queried, exposed,
        "the dashboard shows every family a ledger exposes"
    );
}

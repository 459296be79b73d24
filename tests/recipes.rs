//! The CI examples (`examples/ci/`) and the agent recipes (`examples/harness/`), checked as far as
//! this machine can: the YAML parses and has the shape of N cells, every `metabob-mcp` command and
//! flag they name exists in the real binary, every variable they set is one a part of ours reads,
//! and each recipe runs a real cell end to end with the stand-in agent
//! (`examples/harness/standin/`), which speaks MCP through the official Python SDK to the server
//! the recipe configured. The real agents are not run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use crate::support::{Ledger, Output, TestEnv, bin, layout};

/// Long enough for a loaded machine; a cell with the stand-in takes seconds.
const BOUND: Duration = Duration::from_secs(120);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The interpreter with the MCP SDK and pyyaml that scripts/test.sh makes: a missing one fails
/// the test, since skipping would pass a suite that checked nothing.
fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let python = std::env::var_os("METABOB_TEST_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo().join("target/mcp-venv/bin/python"));
        let ready = Command::new(&python)
            .args(["-c", "import mcp, yaml"])
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ready,
            "{} cannot import mcp and yaml: run scripts/test.sh, which makes target/mcp-venv",
            python.display()
        );
        python
    })
}

/// A YAML file as the JSON value pyyaml reads it to.
fn yaml(rel: &str) -> Value {
    let out = Command::new(python())
        .env_clear()
        .args([
            "-c",
            "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)",
        ])
        .arg(repo().join(rel))
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{rel} does not parse as YAML: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("pyyaml's JSON")
}

fn ci_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(repo().join("examples/ci"))
        .expect("examples/ci")
        .map(|e| {
            e.expect("a dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".yml") || n.ends_with(".yaml"))
        .map(|n| format!("examples/ci/{n}"))
        .collect();
    files.sort();
    files
}

const GITHUB: &str = "examples/ci/github-actions.yml";
const GITLAB: &str = "examples/ci/gitlab-ci.yml";
const RECIPES: [&str; 2] = [
    "examples/harness/claude-code.sh",
    "examples/harness/codex.sh",
];
const COMMON: &str = "examples/harness/common.sh";

fn map(v: &Value) -> impl Iterator<Item = (&String, &Value)> {
    v.as_object().into_iter().flatten()
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The recipe a CI job's HARNESS runs: `sh …/examples/harness/NAME.sh`.
fn recipe_of(harness: &str) -> String {
    let at = harness
        .find("examples/harness/")
        .unwrap_or_else(|| panic!("HARNESS {harness:?} runs no recipe of examples/harness/"));
    let rel = harness[at..].split_whitespace().next().unwrap().to_string();
    assert!(
        repo().join(&rel).is_file(),
        "HARNESS names {rel}, which does not exist"
    );
    rel
}

/// The GitHub job that runs the cells: the one with a matrix.
fn github_cell_job(doc: &Value) -> (&String, &Value) {
    let cells: Vec<_> = map(&doc["jobs"])
        .filter(|(_, j)| j["strategy"]["matrix"].is_object())
        .collect();
    assert_eq!(cells.len(), 1, "{GITHUB}: one job with a matrix: {doc}");
    cells[0]
}

fn gitlab_cell_job(doc: &Value) -> (&String, &Value) {
    let cells: Vec<_> = map(doc)
        .filter(|(_, j)| j["parallel"].is_number())
        .collect();
    assert_eq!(cells.len(), 1, "{GITLAB}: one job with `parallel`: {doc}");
    cells[0]
}

/// Each `run:` of the job's steps.
fn github_scripts(job: &Value) -> Vec<String> {
    job["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter_map(|s| s["run"].as_str().map(str::to_string))
        .collect()
}

/// The job's script lines, in the order GitLab runs them.
fn gitlab_scripts(job: &Value) -> Vec<String> {
    ["before_script", "script", "after_script"]
        .iter()
        .flat_map(|k| job[*k].as_array().cloned().unwrap_or_default())
        .map(|l| text(&l))
        .collect()
}

/// `sh -n` (or bash's) on a script: it parses as shell.
fn parses_as_shell(shell: &str, script: &str, what: &str) {
    let out = Command::new(shell)
        .args(["-n", "-c", script])
        .output()
        .expect("run the shell");
    assert!(
        out.status.success(),
        "{what} does not parse as {shell}: {}\n{script}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `${{ … }}` expressions are GitHub's, replaced before the shell sees the script.
fn without_expressions(script: &str) -> String {
    let mut out = String::new();
    let mut rest = script;
    while let Some(at) = rest.find("${{") {
        out.push_str(&rest[..at]);
        out.push('X');
        rest = rest[at..].split_once("}}").map_or("", |(_, r)| r);
    }
    out + rest
}

#[test]
fn the_ci_examples_parse_and_run_n_cells_as_jobs_against_one_ledger() {
    assert_eq!(ci_files(), [GITHUB, GITLAB], "the CI examples");
    let readme = read("README.md");
    assert!(
        readme.contains("\n## Moving the ledger to PostgreSQL\n"),
        "the examples point at README's section on PostgreSQL replicas"
    );
    for rel in ci_files() {
        let raw = read(&rel);
        for needle in [
            "ledger serve --store postgres://",
            "README \"Moving the ledger to",
        ] {
            assert!(raw.contains(needle), "{rel} says the ledger is {needle:?}…");
        }
    }

    // GitHub: a matrix of cells, the key from secrets, a vessel per run, attempt and cell.
    let gh = yaml(GITHUB);
    let (name, job) = github_cell_job(&gh);
    let matrix = &job["strategy"]["matrix"];
    let (axis, cells) = map(matrix).next().expect("a matrix axis");
    let n = cells.as_array().map_or(0, Vec::len);
    assert!(n >= 2, "{GITHUB}: jobs.{name} runs {n} cells: {matrix}");
    assert_eq!(
        job["strategy"]["fail-fast"], false,
        "one cell's failure cancels none"
    );
    let env = &job["env"];
    assert_eq!(
        env["METABOB_API_KEY"], "${{ secrets.METABOB_API_KEY }}",
        "{GITHUB}: the key is a secret"
    );
    let vessel = text(&env["VESSEL_ID"]);
    for part in ["github.run_id", &format!("matrix.{axis}")] {
        assert!(
            vessel.contains(part),
            "{GITHUB}: VESSEL_ID {vessel:?} lacks {part}"
        );
    }
    assert!(text(&env["DISCOVERY_ENDPOINT"]).starts_with("${{"), "{env}");
    recipe_of(&text(&env["HARNESS"]));
    let scripts = github_scripts(job);
    assert!(
        scripts
            .iter()
            .any(|s| s.contains("sh entrypoint/cell-entrypoint")),
        "{GITHUB}: jobs.{name} runs the cell's loop: {scripts:?}"
    );
    for (_, j) in map(&gh["jobs"]) {
        for s in github_scripts(j) {
            parses_as_shell("bash", &without_expressions(&s), GITHUB);
        }
    }

    // GitLab: `parallel: N`, the key a masked CI/CD variable the file never sets.
    let gl = yaml(GITLAB);
    let (name, job) = gitlab_cell_job(&gl);
    let n = job["parallel"].as_u64().unwrap_or(0);
    assert!(n >= 2, "{GITLAB}: {name} runs {n} cells");
    for vars in [&gl["variables"], &job["variables"]] {
        assert!(
            vars.get("METABOB_API_KEY").is_none(),
            "{GITLAB}: the key is a masked CI/CD variable, never in the file: {vars}"
        );
    }
    assert!(
        read(GITLAB).contains("masked"),
        "{GITLAB} says the key is masked"
    );
    recipe_of(&text(&job["variables"]["HARNESS"]));
    let scripts = gitlab_scripts(job);
    let vessel = scripts
        .iter()
        .find(|l| l.contains("VESSEL_ID="))
        .map(String::as_str)
        .unwrap_or_else(|| job["variables"]["VESSEL_ID"].as_str().unwrap_or_default());
    for part in ["$CI_PIPELINE_ID", "$CI_NODE_INDEX"] {
        assert!(
            vessel.contains(part),
            "{GITLAB}: VESSEL_ID {vessel:?} lacks {part}"
        );
    }
    assert!(
        scripts.iter().any(|s| s == "sh entrypoint/cell-entrypoint"),
        "{GITLAB}: {name} runs the cell's loop: {scripts:?}"
    );
    for (_, j) in map(&gl) {
        parses_as_shell("sh", &gitlab_scripts(j).join("\n"), GITLAB);
    }
}

/// The job of a CI example that runs the review sweep: the one whose steps (or script) run
/// `finding close --pending`.
fn sweep_jobs(jobs: &Value, scripts: fn(&Value) -> Vec<String>) -> Vec<(&String, &Value)> {
    map(jobs)
        .filter(|(_, j)| {
            scripts(j)
                .iter()
                .any(|s| s.contains("finding close --pending --origin \"$ORIGIN\""))
        })
        .collect()
}

#[test]
fn each_ci_example_closes_merged_reviews_on_a_push_to_the_default_branch() {
    // GitHub: the workflow runs on a push to main, where only the sweep runs, with the ledger's
    // key from secrets and the tasks' repository as its origin.
    let gh = yaml(GITHUB);
    // YAML 1.1 reads the bare key `on` as true; pyyaml does.
    let on = gh
        .get("on")
        .or_else(|| gh.get("true"))
        .expect("the workflow's triggers");
    assert_eq!(
        on["push"]["branches"],
        serde_json::json!(["main"]),
        "{GITHUB}: {on}"
    );
    let sweeps = sweep_jobs(&gh["jobs"], github_scripts);
    assert_eq!(sweeps.len(), 1, "{GITHUB}: one job runs the sweep: {gh}");
    let (name, job) = sweeps[0];
    assert_eq!(
        job["if"], "github.event_name == 'push'",
        "{GITHUB}: jobs.{name}"
    );
    assert_eq!(
        job["needs"], "build",
        "{GITHUB}: jobs.{name} takes the built binary"
    );
    let env = &job["env"];
    assert_eq!(
        env["METABOB_API_KEY"], "${{ secrets.METABOB_API_KEY }}",
        "{GITHUB}: {env}"
    );
    assert_eq!(
        env["ORIGIN"], "${{ secrets.METABOB_ORIGIN }}",
        "{GITHUB}: {env}"
    );
    assert!(text(&env["DISCOVERY_ENDPOINT"]).starts_with("${{"), "{env}");
    let (cells, cell) = github_cell_job(&gh);
    assert_eq!(
        cell["if"], "github.event_name != 'push'",
        "{GITHUB}: jobs.{cells} runs no cells on a push"
    );
    let mut set: BTreeSet<String> = map(env).map(|(k, _)| k.clone()).collect();

    // GitLab: a job only for a push to the default branch, the key a masked variable.
    let gl = yaml(GITLAB);
    let sweeps = sweep_jobs(&gl, gitlab_scripts);
    assert_eq!(sweeps.len(), 1, "{GITLAB}: one job runs the sweep: {gl}");
    let (name, job) = sweeps[0];
    let rules: Vec<String> = job["rules"]
        .as_array()
        .unwrap_or_else(|| panic!("{GITLAB}: {name} has rules"))
        .iter()
        .map(|r| text(&r["if"]))
        .collect();
    assert_eq!(
        rules,
        ["$CI_PIPELINE_SOURCE == \"push\" && $CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH"],
        "{GITLAB}: {name}"
    );
    assert_eq!(
        job["needs"],
        serde_json::json!(["build"]),
        "{GITLAB}: {name}"
    );
    assert_eq!(
        job["variables"]["ORIGIN"], "$METABOB_ORIGIN",
        "{GITLAB}: {name}"
    );
    assert!(
        job["variables"].get("METABOB_API_KEY").is_none(),
        "{GITLAB}: the key is a masked CI/CD variable, never in the file"
    );
    set.extend(map(&job["variables"]).map(|(k, _)| k.clone()));
    set.extend(assigns(&gitlab_scripts(job).join("\n")));

    // Whatever the sweep jobs set, the binary reads (METABOB_BIN is the file's own name for it).
    set.remove("METABOB_BIN");
    let read = cli_reads(&set);
    let unread: Vec<&String> = set.difference(&read).collect();
    assert!(
        unread.is_empty(),
        "the sweep jobs set {unread:?}, which metabob-mcp never reads"
    );
}

// ---- commands and flags ------------------------------------------------------------------------

/// How a file names our binary.
const BINARY: [&str; 3] = ["metabob-mcp", "$METABOB_BIN", "${METABOB_BIN}"];

/// One `metabob-mcp …` in a file: where, and the words that follow it.
struct Invocation {
    at: String,
    words: Vec<String>,
}

fn trimmed(word: &str) -> &str {
    word.trim_matches(|c: char| "`\"'(),;:.".contains(c))
}

/// Every mention of the binary, in code and comments alike, with the words after it up to the end
/// of the command: a shell operator, a comment, or a word that closes a code span, a sentence or
/// a clause. Lines continued with `\` (in comments too) are one line.
fn invocations(rel: &str, text: &str) -> Vec<Invocation> {
    let mut lines: Vec<(usize, String)> = Vec::new();
    let mut continued = false;
    for (n, line) in text.lines().enumerate() {
        let mut l = line.trim_end();
        if continued {
            l = l.trim_start().trim_start_matches('#');
            let (_, prev) = lines.last_mut().unwrap();
            prev.push(' ');
            prev.push_str(l.trim_end_matches('\\'));
        } else {
            lines.push((n + 1, l.trim_end_matches('\\').to_string()));
        }
        continued = l.ends_with('\\');
    }
    let mut found = Vec::new();
    for (n, line) in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        for (i, raw) in words.iter().enumerate() {
            if !BINARY.contains(&trimmed(raw)) {
                continue;
            }
            let mut after = Vec::new();
            let mut end = raw.ends_with(|c: char| "`,.;)".contains(c));
            for w in &words[i + 1..] {
                if end
                    || ["|", "||", "&&", ";", "&"].contains(w)
                    || w.starts_with('#')
                    || w.starts_with('>')
                    || w.starts_with("2>")
                {
                    break;
                }
                after.push(trimmed(w).to_string());
                end = w.ends_with(|c: char| "`,.;)".contains(c));
            }
            found.push(Invocation {
                at: format!("{rel}:{n}"),
                words: after,
            });
        }
    }
    found
}

/// `metabob-mcp <path> --help`, once per path.
fn help(path: &[String], cache: &mut BTreeMap<Vec<String>, Option<String>>) -> Option<String> {
    cache
        .entry(path.to_vec())
        .or_insert_with(|| {
            let out = Command::new(bin())
                .args(path)
                .arg("--help")
                .env_clear()
                .stdin(Stdio::null())
                .output()
                .expect("run metabob-mcp --help");
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        })
        .clone()
}

/// The subcommands a help text lists.
fn commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

fn lists_flag(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(at, _)| {
        let before = help[..at].chars().next_back();
        let after = help[at + flag.len()..].chars().next();
        matches!(before, Some(' ' | ',' | '\n') | None)
            && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

/// Checks each invocation against the real binary's help: the command path exists (a word
/// after the binary is a subcommand, an option, or nothing) and every `--flag` is one the
/// command lists. Returns the paths seen and the problems.
fn check_invocations(found: &[Invocation]) -> (BTreeSet<String>, Vec<String>) {
    let mut cache = BTreeMap::new();
    let mut paths = BTreeSet::new();
    let mut problems = Vec::new();
    for inv in found {
        let mut path: Vec<String> = Vec::new();
        let mut words = inv.words.iter().peekable();
        let mut text = help(&path, &mut cache).expect("metabob-mcp --help");
        while let Some(w) = words.peek() {
            let subs = commands(&text);
            if subs.is_empty() || w.starts_with('-') {
                break;
            }
            if !subs.contains(w) {
                problems.push(format!(
                    "{}: `metabob-mcp {}` has no command {w:?} (it has {subs:?})",
                    inv.at,
                    path.join(" ")
                ));
                break;
            }
            path.push(words.next().unwrap().clone());
            text = help(&path, &mut cache).expect("a listed command has --help");
        }
        let shown = path.join(" ");
        for flag in words.filter(|w| w.starts_with("--")) {
            let flag = flag.split('=').next().unwrap();
            if !lists_flag(&text, flag) {
                problems.push(format!(
                    "{}: `metabob-mcp {shown}` has no option {flag}",
                    inv.at
                ));
            }
        }
        paths.insert(shown);
    }
    (paths, problems)
}

fn example_files() -> Vec<String> {
    let mut files = ci_files();
    files.extend(RECIPES.iter().map(|r| r.to_string()));
    files.push(COMMON.to_string());
    files
}

#[test]
fn every_metabob_command_and_flag_the_examples_use_is_in_the_binary() {
    let found: Vec<Invocation> = example_files()
        .iter()
        .flat_map(|rel| invocations(rel, &read(rel)))
        .collect();
    let (paths, problems) = check_invocations(&found);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The check saw what the examples do: were the extraction to find nothing, it would pass.
    for want in [
        "attach",
        "task list",
        "ledger serve",
        "ledger key create",
        "finding record",
        "finding close",
        "serve",
    ] {
        assert!(
            paths.contains(want),
            "no `metabob-mcp {want}` found: {paths:?}"
        );
    }
}

#[test]
fn a_command_or_flag_the_binary_lacks_is_reported() {
    let text = "run: metabob-mcp task pul --origin x\n\
                # `metabob-mcp finding record --no-such-flag` and\n\
                #   metabob-mcp ledger key create --org a \\\n\
                #     --scope read\n\
                \"$METABOB_BIN\" attach --check --json | jq .\n\
                the metabob-mcp, found on PATH\n";
    let found = invocations("t", text);
    let (paths, problems) = check_invocations(&found);
    assert_eq!(
        problems,
        [
            "t:1: `metabob-mcp task` has no command \"pul\" (it has [\"pull\", \"renew\", \
             \"release\", \"reopen\", \"list\", \"show\", \"cancel\", \"block\", \"unblock\", \"help\"])",
            "t:2: `metabob-mcp finding record` has no option --no-such-flag",
            "t:3: `metabob-mcp ledger key create` has no option --scope",
        ]
    );
    assert!(paths.contains("attach"), "{paths:?}");
    assert!(paths.contains(""), "a bare mention: {paths:?}");
}

// ---- variables ---------------------------------------------------------------------------------

/// The names a shell text reads as `$NAME` or `${NAME…}`.
fn reads(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices('$') {
        let rest = text[at + 1..].trim_start_matches('{');
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if name.len() > 1 && !name.starts_with(|c: char| c.is_ascii_digit()) {
            names.insert(name);
        }
    }
    names
}

/// The names a shell text assigns (`NAME=` at the start of a command).
fn assigns(text: &str) -> BTreeSet<String> {
    text.lines()
        .flat_map(|l| l.split_whitespace())
        .filter_map(|w| w.trim_start_matches("export ").split_once('='))
        .map(|(n, _)| n.to_string())
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .collect()
}

/// The Rust sources under `dir`, read whole.
fn sources(dir: &Path, into: &mut String) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
}

/// Which of `names` the CLI reads: every variable the binary looks up is named by a string
/// literal of its own, in `src/` or a crate's `src/` (`env.get("METABOB_CALL_LOG")`, clap's
/// `env = "METABOB_LEDGER_STORE"`).
fn cli_reads(names: &BTreeSet<String>) -> BTreeSet<String> {
    let mut code = String::new();
    sources(&repo().join("src"), &mut code);
    for krate in std::fs::read_dir(repo().join("crates")).unwrap() {
        sources(&krate.unwrap().path().join("src"), &mut code);
    }
    names
        .iter()
        .filter(|n| code.contains(&format!("\"{n}\"")))
        .cloned()
        .collect()
}

/// The variables a recipe's header documents as its own: the lines `#   NAME   what it is` of
/// its "Environment" paragraph.
fn documented(recipe: &str) -> BTreeMap<String, String> {
    read(recipe)
        .lines()
        .take_while(|l| l.starts_with('#'))
        .skip_while(|l| !l.starts_with("# Environment"))
        .take_while(|l| *l != "#")
        .filter_map(|l| l.strip_prefix("#   "))
        .filter_map(|l| {
            let (name, what) = l.split_once("  ")?;
            (name.len() > 2 && name.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
                .then(|| (name.to_string(), what.trim().to_string()))
        })
        .collect()
}

/// What docs/harness.md says a harness gets.
fn harness_gets() -> BTreeSet<String> {
    let doc = read("docs/harness.md");
    let table = doc
        .split("## What the harness gets")
        .nth(1)
        .and_then(|s| s.split("\n\n").find(|p| p.starts_with("| variable")))
        .expect("docs/harness.md's table of variables");
    table
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn every_variable_the_examples_set_or_read_is_one_a_part_of_ours_reads() {
    // The cell's settings are `cell run`'s, which the entrypoint execs.
    let mut entrypoint = reads(&read("entrypoint/cell-entrypoint"));
    entrypoint.extend(
        metabob_cell::cell_run::config::SETTINGS
            .iter()
            .chain(metabob_cell::cell_run::config::ALSO_READ)
            .map(|name| name.to_string()),
    );
    let common = read(COMMON);
    let server_env: BTreeSet<String> = common
        .split("for name in ")
        .nth(1)
        .and_then(|s| s.split("; do").next())
        .expect("common.sh's list of the server's variables")
        .split_whitespace()
        .filter(|w| *w != "\\")
        .map(str::to_string)
        .collect();

    let mut asked = BTreeSet::new();
    asked.extend(server_env.iter().cloned());
    let mut ci_sets: Vec<(String, String, String)> = Vec::new();
    for (rel, doc) in [(GITHUB, yaml(GITHUB)), (GITLAB, yaml(GITLAB))] {
        let mut sets = BTreeMap::new();
        if rel == GITHUB {
            let job = github_cell_job(&doc).1;
            for (k, v) in map(&doc["env"]).chain(map(&job["env"])) {
                sets.insert(k.clone(), text(v));
            }
            for step in job["steps"].as_array().unwrap() {
                for (k, v) in map(&step["env"]) {
                    sets.insert(k.clone(), text(v));
                }
            }
            for s in github_scripts(job) {
                for n in assigns(&s) {
                    sets.insert(n, String::new());
                }
            }
        } else {
            let job = gitlab_cell_job(&doc).1;
            for (k, v) in map(&doc["variables"]).chain(map(&job["variables"])) {
                sets.insert(k.clone(), text(v));
            }
            for n in assigns(&gitlab_scripts(job).join("\n")) {
                sets.insert(n, String::new());
            }
        }
        let recipe = recipe_of(&sets["HARNESS"]);
        for name in sets.keys() {
            ci_sets.push((rel.to_string(), name.clone(), recipe.clone()));
            asked.insert(name.clone());
        }
    }
    let recipe_docs: BTreeMap<&str, BTreeMap<String, String>> =
        RECIPES.iter().map(|r| (*r, documented(r))).collect();
    for r in RECIPES {
        asked.extend(reads(&read(r)));
    }
    asked.extend(reads(&common));
    let cli = cli_reads(&asked);
    let gets = harness_gets();
    let mut problems = Vec::new();

    // Each variable a CI job sets is read by the entrypoint, the CLI, or the recipe it runs.
    for (rel, name, recipe) in &ci_sets {
        if !entrypoint.contains(name)
            && !cli.contains(name)
            && !recipe_docs[recipe.as_str()].contains_key(name)
        {
            problems.push(format!(
                "{rel} sets {name}, which neither the entrypoint, metabob-mcp nor {recipe} reads"
            ));
        }
    }
    // Each variable a CI job reads is set in the file, the CI's own, or one its header tells
    // the user to set.
    for rel in ci_files() {
        let raw = read(&rel);
        let header: String = raw
            .lines()
            .take_while(|l| l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        let set: BTreeSet<&String> = ci_sets
            .iter()
            .filter(|(r, _, _)| *r == rel)
            .map(|(_, n, _)| n)
            .collect();
        let mut read_here = reads(&raw);
        for part in raw.split("${{").skip(1) {
            let expr = part.split("}}").next().unwrap_or_default();
            for scope in ["secrets.", "vars."] {
                if let Some(name) = expr.trim().strip_prefix(scope) {
                    read_here.insert(name.to_string());
                }
            }
        }
        for name in read_here {
            let ours = set.contains(&name)
                || name.starts_with("CI_")
                || name.starts_with("GITHUB_")
                || name == "PWD"
                || header.contains(&format!("#   {name} "))
                || header.contains(&format!(".{name} "));
            if !ours {
                problems.push(format!(
                    "{rel} reads {name}, which it neither sets nor tells the user to set"
                ));
            }
        }
    }
    // Each variable a recipe reads is one a harness gets, one the CLI reads, one it documents
    // as its own, or its own scratch.
    for r in RECIPES {
        let text = format!("{}\n{common}", read(r));
        let own = assigns(&text);
        let read_here: BTreeSet<String> = reads(&text).union(&server_env).cloned().collect();
        for name in &read_here {
            let ours = gets.contains(name)
                || cli.contains(name)
                || recipe_docs[r].contains_key(name)
                || own.contains(name)
                || name == "HOME";
            if !ours {
                problems.push(format!("{r} reads {name}, which it does not document"));
            }
        }
        // …and what it documents, it reads, or the agent does.
        for (name, what) in &recipe_docs[r] {
            if !read_here.contains(name) && !what.contains("itself") {
                problems.push(format!("{r} documents {name} but never reads it"));
            }
        }
    }
    // What the recipes hand the MCP server is what the server reads.
    for name in &server_env {
        if !cli.contains(name) {
            problems.push(format!(
                "{COMMON} hands the server {name}, which metabob-mcp never reads"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        cli.contains("METABOB_API_KEY") && entrypoint.contains("HARNESS"),
        "the lookups found what they must: {cli:?} {entrypoint:?}"
    );
}

// ---- the recipes, end to end -------------------------------------------------------------------

const FILE: &str = "src/parse.py";

/// A ledger, a key the cells get in their environment only, an origin and one task on FILE.
struct Fleet {
    env: TestEnv,
    ledger: Ledger,
    key: String,
    origin: String,
    bare: PathBuf,
    task: String,
}

fn fleet() -> Fleet {
    let env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    let (_, key) = ledger.create_key(&env, "default", "read,write");
    let (bare, origin) = env.origin(
        "app",
        &[(FILE, "def parse(s):\n    return s.split()[:-1]\n")],
    );
    let recorded = env.record_task_with(
        &origin,
        FILE,
        "parse drops the last token",
        "HIGH",
        "ref: main",
    );
    let task = recorded["finding_ids"][0]
        .as_str()
        .expect("finding record names the id")
        .to_string();
    Fleet {
        env,
        ledger,
        key,
        origin,
        bare,
        task,
    }
}

impl Fleet {
    /// `program` with the environment a cell has on a CI runner: the key and the ledger's
    /// address in variables, a HOME with no config (the recipes must hand them to the server),
    /// and the stand-ins as the agents.
    fn command(&self, program: &str) -> Command {
        let home = self.env.path("cell-home");
        std::fs::create_dir_all(&home).unwrap();
        let standin = repo().join("examples/harness/standin");
        // The venv's python3 first: where jq is missing the recipes read task.json with python3,
        // and a shim (pyenv's, say) may not find its interpreter under this HOME.
        let venv = python()
            .parent()
            .expect("the venv's bin")
            .display()
            .to_string();
        let path = self
            .env
            .vars
            .iter()
            .find(|(k, _)| k == "PATH")
            .map_or(String::new(), |(_, v)| v.clone());
        let mut c = self.env.program(program);
        c.env("PATH", format!("{venv}:{path}"))
            .env("HOME", &home)
            .env("METABOB_API_KEY", &self.key)
            .env("DISCOVERY_ENDPOINT", &self.ledger.url)
            .env("METABOB_BIN", bin())
            .env("CLAUDE_BIN", standin.join("claude"))
            .env("CODEX_BIN", standin.join("codex"))
            .env("STANDIN_PYTHON", python())
            .env("METABOB_CALL_LOG", self.env.path("calls.jsonl"));
        c
    }

    fn file_on_main(&self) -> String {
        self.env.git(&self.bare, &["show", &format!("main:{FILE}")])
    }

    /// `task pull` into `cell/`, as a cell's first step, in the key's environment.
    fn pull(&self, cell: &str) -> PathBuf {
        let out = Output::from(
            self.command(bin().to_str().unwrap())
                .args(["task", "pull", "--origin", &self.origin, "--task-dir"])
                .arg(self.env.path(&format!("{cell}/task")))
                .arg("--work-dir")
                .arg(self.env.path(&format!("{cell}/work")))
                .output()
                .unwrap(),
        );
        assert_eq!(out.code, 0, "{}", layout(&out));
        self.env.path(cell)
    }
}

/// Runs the whole cell loop (entrypoint/cell-entrypoint) with `recipe` as its HARNESS until
/// nothing is open, and checks the task closed with the stand-in's fix on main.
fn cell_closes_the_task_with(recipe: &str, agent: &str, committed_by: &str) {
    let f = fleet();
    let mut cell = f.command("sh");
    cell.arg(repo().join("entrypoint/cell-entrypoint"))
        .env("ORIGIN", &f.origin)
        .env("HARNESS", format!("sh '{}'", repo().join(recipe).display()))
        .env("TASK_DIR", f.env.path("cell/task"))
        .env("WORK_DIR", f.env.path("cell/work"))
        .env("VESSEL_ID", format!("cell-{agent}"))
        .env("RETRY_MAX", "2");
    let (out, took, ended) = f.env.run_in_own_group(cell, "cell", BOUND);
    let shown = layout(&out);
    assert!(ended, "the cell ran past {BOUND:?}:\n{shown}");
    assert_eq!(out.code, 0, "{shown}");
    let log = &out.stderr;
    let id = &f.task;
    assert!(
        log.contains(&format!("{id}: finding close exit 0, outcome closed")),
        "{shown}"
    );
    assert!(
        log.contains("cell-entrypoint: nothing open; done"),
        "{shown}"
    );
    assert!(
        log.contains(&format!(
            "standin: {agent}: called init_workspace, get_problems, analyze_impact; \
             edited {FILE}; {committed_by}"
        )),
        "the stand-in ran as {agent}: {shown}"
    );
    let name = Path::new(recipe).file_name().unwrap().to_string_lossy();
    assert!(
        log.contains(&format!("{name}: 1 commit(s) for {id}")),
        "{shown}"
    );

    // The fix is on main with its trailer, and the recipe's config (with the key) is not in it.
    let message = f.env.git(&f.bare, &["log", "-1", "--format=%B", "main"]);
    assert!(
        message.lines().any(|l| l == format!("Fixes-Finding: {id}")),
        "{message}"
    );
    assert!(
        f.file_on_main()
            .ends_with(&format!("# fixed by the {agent} stand-in for {id}")),
        "{}",
        f.file_on_main()
    );
    let tree = f
        .env
        .git(&f.bare, &["ls-tree", "-r", "--name-only", "main"]);
    assert_eq!(tree, FILE, "only the task's file is committed");

    // The server the stand-in started is ours, wired to the log the recipe handed it.
    let calls = std::fs::read_to_string(f.env.path("calls.jsonl")).unwrap_or_default();
    let tools: Vec<(String, String, String)> = calls
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a call log line"))
        .map(|c| (text(&c["tool"]), text(&c["via"]), text(&c["outcome"])))
        .collect();
    let want: Vec<(String, String, String)> = ["init_workspace", "get_problems", "analyze_impact"]
        .iter()
        .map(|t| (t.to_string(), "stdio".into(), "ok".into()))
        .collect();
    assert_eq!(tools, want, "{calls}");

    let board = f.env.run(&["task", "list", "--origin", &f.origin]);
    assert!(
        board.stdout.contains(&format!("closed    {id}")),
        "{}",
        layout(&board)
    );
    eprintln!("{recipe}: the cell took {took:.1?}");
}

#[test]
fn a_cell_running_the_claude_code_recipe_closes_its_task_with_the_stand_in() {
    cell_closes_the_task_with("examples/harness/claude-code.sh", "claude", "committed");
}

#[test]
fn a_cell_running_the_codex_recipe_closes_its_task_with_the_stand_in() {
    cell_closes_the_task_with("examples/harness/codex.sh", "codex", "left uncommitted");
}

/// Runs `recipe` once as a cell would, in a pulled task's clone; returns its output.
fn run_recipe(f: &Fleet, cell: &Path, recipe: &str, extra: &[(&str, &str)]) -> Output {
    let mut c = f.command("sh");
    c.arg(repo().join(recipe))
        .current_dir(cell.join("work"))
        .env("TASK_DIR", cell.join("task"))
        .env("WORK_DIR", cell.join("work"))
        .envs(extra.iter().copied());
    Output::from(c.output().unwrap())
}

fn failed_lines(out: &Output) -> Vec<&str> {
    out.stderr
        .lines()
        .filter(|l| l.starts_with("standin: FAILED:"))
        .collect()
}

#[test]
fn a_recipe_whose_agent_changes_nothing_fails_in_one_line() {
    let f = fleet();
    for (recipe, name) in [
        ("examples/harness/claude-code.sh", "claude-code.sh"),
        ("examples/harness/codex.sh", "codex.sh"),
    ] {
        let cell = f.pull(name);
        let out = run_recipe(&f, &cell, recipe, &[("STANDIN_EDIT", "0")]);
        assert_eq!(out.code, 1, "{}", layout(&out));
        assert_eq!(
            out.stderr.lines().last(),
            Some(
                format!("{name}: the agent changed nothing; the task goes back as failed").as_str()
            ),
            "{}",
            layout(&out)
        );
        let work = cell.join("work");
        assert_eq!(
            f.env
                .git(&work, &["rev-list", "--count", "origin/main..HEAD"]),
            "0"
        );
        // Given back, as the cell would, so the next recipe pulls the same task.
        let released = f.env.run(&[
            "task",
            "release",
            "--task-dir",
            &cell.join("task").display().to_string(),
        ]);
        assert_eq!(released.code, 0, "{}", layout(&released));
    }
}

#[test]
fn a_recipe_adds_the_trailer_to_a_commit_the_agent_made_without_it() {
    let f = fleet();
    let cell = f.pull("cell");
    // An agent that commits its fix but forgets the trailer.
    let agent = f.env.path("forgetful-agent");
    std::fs::write(
        &agent,
        format!("#!/bin/sh\necho '# fixed' >> {FILE}\ngit commit -qam 'Keep the last token'\n"),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&agent).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&agent, perms).unwrap();
    let out = run_recipe(
        &f,
        &cell,
        "examples/harness/claude-code.sh",
        &[("CLAUDE_BIN", agent.to_str().unwrap())],
    );
    assert_eq!(out.code, 0, "{}", layout(&out));
    let work = cell.join("work");
    let message = f.env.git(&work, &["log", "-1", "--format=%B"]);
    assert_eq!(
        message,
        format!("Keep the last token\n\nFixes-Finding: {}", f.task),
        "the agent's commit, with the trailer"
    );
    assert_eq!(
        f.env
            .git(&work, &["rev-list", "--count", "origin/main..HEAD"]),
        "1"
    );
}

/// The stand-in (as `agent`) run by hand in a pulled task's clone, the prompt its context.md.
struct Standin<'a> {
    f: &'a Fleet,
    cell: PathBuf,
    context: String,
    /// Codex homes made so far: each run gets its own.
    homes: std::cell::Cell<usize>,
}

impl Standin<'_> {
    fn run(&self, agent: &str, args: &[&str], vars: &[(&str, &str)]) -> Output {
        let mut c = self.f.command(python().to_str().unwrap());
        c.arg(repo().join("examples/harness/standin/standin.py"))
            .arg(agent)
            .args(args)
            .arg(&self.context)
            .current_dir(self.cell.join("work"))
            .envs(vars.iter().copied());
        Output::from(c.output().unwrap())
    }

    /// Claude Code's command line as the recipe builds it, with the config `{name: entry}`.
    fn claude(&self, name: &str, args: &[&str], allowed: &str) -> Output {
        let config = self
            .f
            .env
            .path(&format!("mcp-{name}-{}.json", args.join("-")));
        let entry = serde_json::json!({"mcpServers": {name: {"command": bin(), "args": args}}});
        std::fs::write(&config, entry.to_string()).unwrap();
        let config = config.display().to_string();
        let line = [
            "--mcp-config",
            &config,
            "--permission-mode",
            "acceptEdits",
            "--allowedTools",
            allowed,
            "-p",
        ];
        self.run("claude", &line, &[])
    }

    /// `codex exec` with `flags`, CODEX_HOME holding `config_toml`.
    fn codex(&self, flags: &[&str], config_toml: &str, vars: &[(&str, &str)]) -> Output {
        self.homes.set(self.homes.get() + 1);
        let home = self.f.env.path(&format!("codex-home-{}", self.homes.get()));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("config.toml"), config_toml).unwrap();
        let mut vars = vars.to_vec();
        vars.push(("CODEX_HOME", home.to_str().unwrap()));
        let mut line = vec!["exec"];
        line.extend_from_slice(flags);
        self.run("codex", &line, &vars)
    }
}

/// Exit 1 with exactly one `standin: FAILED:` line, holding `want`.
fn fails_with(out: &Output, want: &str) {
    let shown = layout(out);
    assert_eq!(out.code, 1, "{shown}");
    let lines = failed_lines(out);
    assert_eq!(lines.len(), 1, "one line: {shown}");
    assert!(lines[0].contains(want), "{want:?} in {shown}");
}

#[test]
fn the_stand_in_fails_in_one_line_when_the_mcp_config_is_wired_wrongly() {
    let f = fleet();
    let cell = f.pull("cell");
    let context = std::fs::read_to_string(cell.join("task/context.md")).unwrap();
    let standin = Standin {
        f: &f,
        cell: cell.clone(),
        context,
        homes: Default::default(),
    };
    let may = "mcp__metabob,Bash(git commit:*)";
    let bin = bin().display();

    fails_with(
        &standin.claude("other", &["serve"], may),
        "no mcpServers.metabob in",
    );
    fails_with(
        &standin.claude("metabob", &["--version"], may),
        &format!("the MCP server `{bin} --version` failed:"),
    );
    fails_with(
        &standin.claude("metabob", &["serve"], "Edit,Bash(git commit:*)"),
        "--allowedTools does not allow mcp__metabob",
    );

    // Codex gives a server only a whitelist of its environment: without the key in the entry's
    // env (and no config in HOME) the server never reaches the ledger.
    let entry = format!("[mcp_servers.metabob]\ncommand = \"{bin}\"\nargs = [\"serve\"]\n");
    let with_key = format!(
        "{entry}[mcp_servers.metabob.env]\nMETABOB_API_KEY = \"{}\"\nDISCOVERY_ENDPOINT = \"{}\"\n",
        f.key, f.ledger.url
    );
    fails_with(
        &standin.codex(&["--sandbox", "workspace-write"], &entry, &[]),
        &format!(
            "get_problems on {FILE} does not show {}: the server did not reach the ledger",
            f.task
        ),
    );
    fails_with(
        &standin.codex(&[], &with_key, &[]),
        "the sandbox is read-only",
    );
    // Rightly wired, the same stand-in gets through (told to change nothing, so the clone stays
    // as it was for the recipe below).
    let out = standin.codex(
        &["--sandbox", "workspace-write"],
        &with_key,
        &[("STANDIN_EDIT", "0")],
    );
    assert_eq!(out.code, 0, "{}", layout(&out));

    // Through a recipe: a binary that is no MCP server fails the agent, and so the recipe.
    let out = run_recipe(
        &f,
        &cell,
        "examples/harness/claude-code.sh",
        &[("METABOB_BIN", "/bin/true")],
    );
    fails_with(&out, "the MCP server `/bin/true serve` failed:");
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("claude-code.sh: ")
            && last.ends_with(" exited 1; the task goes back as failed"),
        "{}",
        layout(&out)
    );
}

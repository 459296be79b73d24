//! The container cell in real containers: the base image built offline (images/base/build.sh),
//! the shipped Dockerfiles built on it, and a ledger, a git daemon and cells on a user-defined
//! Docker network. Docker is driven through its CLI: the testcontainers crate would add a large
//! dependency tree for what a few `docker` commands do. No Docker is a failure, never a skip.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::{BIN, Output};

const BASE: &str = "metabob-base:bookworm";
const CELL: &str = "metabob-cell:test";
const LEDGER: &str = "metabob-ledger:test";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn docker(args: &[&str]) -> Output {
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("the container tests need the docker CLI and a running engine: {e}")
        });
    Output::from(out)
}

fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert_eq!(out.code, 0, "docker {args:?}: {out:?}");
    out.stdout.trim().to_string()
}

/// Builds the base image (once per machine: build.sh keeps an existing one) and the cell and
/// ledger images from a context holding this build's binary and the entrypoint; once per run.
fn images() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let info = docker(&["info", "--format", "{{.ServerVersion}}"]);
        assert_eq!(
            info.code, 0,
            "the container tests need a running Docker engine: {info:?}"
        );
        let base = Command::new("sh")
            .arg(repo().join("images/base/build.sh"))
            .env("IMAGE", BASE)
            .stdin(Stdio::null())
            .output()
            .expect("run images/base/build.sh");
        let base = Output::from(base);
        assert_eq!(base.code, 0, "images/base/build.sh: {base:?}");
        assert_eq!(base.stdout.trim(), BASE);

        let ctx = tempfile::Builder::new()
            .prefix("mbcell-ctx-")
            .tempdir()
            .expect("context dir");
        std::fs::copy(BIN, ctx.path().join("metabob-mcp")).expect("copy the binary");
        std::fs::copy(
            repo().join("entrypoint/cell-entrypoint"),
            ctx.path().join("cell-entrypoint"),
        )
        .expect("copy the entrypoint");
        let ctx_s = ctx.path().display().to_string();
        for (tag, file) in [
            (CELL, "images/cell/Dockerfile"),
            (LEDGER, "images/ledger/Dockerfile"),
        ] {
            let df = repo().join(file).display().to_string();
            docker_ok(&[
                "build",
                "-q",
                "--build-arg",
                &format!("BASE_IMAGE={BASE}"),
                "-t",
                tag,
                "-f",
                &df,
                &ctx_s,
            ]);
        }
    });
}

/// A user-defined network and the containers started on it; all removed on drop.
struct Fleet {
    net: String,
    containers: Vec<String>,
}

impl Fleet {
    fn new() -> Fleet {
        static N: AtomicUsize = AtomicUsize::new(0);
        let net = format!(
            "mbcell-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        docker_ok(&["network", "create", &net]);
        Fleet {
            net,
            containers: Vec::new(),
        }
    }

    /// `docker run -d` on the network with `alias` as its name there; returns the container.
    fn start(&mut self, alias: &str, args: &[&str]) -> String {
        let name = format!("{}-{alias}", self.net);
        let mut all = vec![
            "run",
            "-d",
            "--name",
            &name,
            "--network",
            &self.net,
            "--network-alias",
            alias,
        ];
        all.extend_from_slice(args);
        docker_ok(&all);
        self.containers.push(name.clone());
        name
    }

    /// A one-off `docker run --rm` on the network.
    fn run(&self, args: &[&str]) -> Output {
        let mut all = vec!["run", "--rm", "--network", &self.net];
        all.extend_from_slice(args);
        docker(&all)
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = docker(&["rm", "-f", "-v", c]);
        }
        let _ = docker(&["network", "rm", &self.net]);
    }
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("{what} within {timeout:?}");
}

#[test]
fn the_cell_image_with_no_ledger_configured_exits_2_naming_the_cause() {
    images();
    let out = docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        "-e",
        "ORIGIN=git://git/app.git",
        "-e",
        "HARNESS=true",
        CELL,
    ]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("not_configured"), "{out:?}");
}

/// The git server: a bare `app.git` whose main holds `files`, served by `git daemon` with
/// pushes enabled, in a container built from the same base image.
fn git_server(fleet: &mut Fleet, files: &[&str]) -> String {
    let mut script = String::from(
        "set -eu; mkdir -p /seed /srv; cd /seed; git init -q -b main; \
         git config user.name seed; git config user.email seed@example.invalid; ",
    );
    for f in files {
        script.push_str(&format!("echo 'x = 1' > {f}; "));
    }
    script.push_str(
        "git add -A; git commit -q -m initial; git clone -q --bare /seed /srv/app.git; \
         exec git daemon --reuseaddr --export-all --enable=receive-pack --base-path=/srv /srv",
    );
    let name = fleet.start("git", &[BASE, "sh", "-c", &script]);
    wait_for(
        "git daemon serving app.git",
        Duration::from_secs(30),
        || docker(&["exec", &name, "git", "ls-remote", "git://127.0.0.1/app.git"]).code == 0,
    );
    name
}

/// The ledger container, healthy, and a read-write key for the cells.
fn ledger(fleet: &mut Fleet) -> (String, String) {
    let name = fleet.start("ledger", &["-e", "PUBLIC_URL=http://ledger:18100", LEDGER]);
    wait_for(
        "the ledger's healthcheck passing",
        Duration::from_secs(60),
        || {
            docker(&["inspect", "-f", "{{.State.Health.Status}}", &name])
                .stdout
                .trim()
                == "healthy"
        },
    );
    let out = docker_ok(&[
        "exec",
        &name,
        "metabob-mcp",
        "ledger",
        "key",
        "create",
        "--data",
        "/data",
        "--org",
        "default",
        "--scopes",
        "read,write",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("key create --json");
    (name, v["key"].as_str().expect("a key").to_string())
}

fn attach_env(key: &str) -> Vec<String> {
    vec![
        "-e".into(),
        format!("METABOB_API_KEY={key}"),
        "-e".into(),
        "DISCOVERY_ENDPOINT=http://ledger:18100".into(),
    ]
}

/// `metabob-mcp ARGS` in a throwaway cell-image container on the network.
fn mb(fleet: &Fleet, key: &str, args: &[&str]) -> Output {
    let env = attach_env(key);
    let mut all: Vec<&str> = env.iter().map(String::as_str).collect();
    all.extend_from_slice(&["--entrypoint", "metabob-mcp", CELL]);
    all.extend_from_slice(args);
    fleet.run(&all)
}

fn logs(name: &str) -> String {
    let out = docker(&["logs", name]);
    format!("{}{}", out.stdout, out.stderr)
}

/// A ledger and a git server on a fresh network, and one task recorded per `(file, details)`;
/// the task ids in that order.
struct World {
    fleet: Fleet,
    git: String,
    key: String,
    ids: Vec<String>,
}

const ORIGIN: &str = "git://git/app.git";

fn world(tasks: &[(&str, &str)]) -> World {
    images();
    let mut fleet = Fleet::new();
    let files: Vec<&str> = tasks.iter().map(|(f, _)| *f).collect();
    let git = git_server(&mut fleet, &files);
    let (_ledger, key) = ledger(&mut fleet);
    let mut w = World {
        fleet,
        git,
        key,
        ids: Vec::new(),
    };
    for (f, details) in tasks {
        let out = w.mb(&[
            "finding",
            "record",
            "--origin",
            ORIGIN,
            "--category",
            "task",
            "--severity",
            "HIGH",
            "--file",
            f,
            "--summary",
            &format!("fix {f}"),
            "--details",
            details,
            "--json",
        ]);
        assert_eq!(out.code, 0, "{out:?}");
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("record --json");
        w.ids
            .push(v["finding_ids"][0].as_str().expect("an id").to_string());
    }
    w
}

impl World {
    fn mb(&self, args: &[&str]) -> Output {
        mb(&self.fleet, &self.key, args)
    }

    /// Starts a cell running the sample harness (or `harness`), with `extra` environment.
    fn cell(&mut self, alias: &str, harness: &str, extra: &[&str]) -> String {
        let mount = format!(
            "{}:/harness.sh:ro",
            repo().join("examples/fleet/harness.sh").display()
        );
        let mut env = vec![
            format!("ORIGIN={ORIGIN}"),
            format!("HARNESS={harness}"),
            "RETRY_MAX=2".into(),
        ];
        env.extend(extra.iter().map(|e| e.to_string()));
        let mut args: Vec<String> = attach_env(&self.key);
        for e in env {
            args.push("-e".into());
            args.push(e);
        }
        args.extend(["-v".into(), mount, CELL.into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.fleet.start(alias, &args)
    }

    /// Waits for the container to exit and asserts its code, showing its log when it differs.
    fn exits(&self, cell: &str, code: &str) {
        let got = docker_ok(&["wait", cell]);
        assert_eq!(got, code, "{cell} exited {got}:\n{}", logs(cell));
    }

    /// A fresh pull on a scratch container: (exit, stdout).
    fn pull(&self) -> Output {
        self.mb(&[
            "task",
            "pull",
            "--origin",
            ORIGIN,
            "--task-dir",
            "/tmp/t",
            "--work-dir",
            "/tmp/w",
            "--json",
        ])
    }

    fn main_log(&self) -> String {
        docker_ok(&[
            "exec",
            &self.git,
            "git",
            "-C",
            "/srv/app.git",
            "log",
            "--format=%B",
            "main",
        ])
    }

    fn fixes_on_main(&self, id: &str) -> usize {
        self.main_log()
            .matches(&format!("Fixes-Finding: {id}"))
            .count()
    }
}

fn closed_in(logs: &str, id: &str) -> usize {
    logs.matches(&format!("{id}: finding close exit 0, outcome closed"))
        .count()
}

fn wait_log(cell: &str, needle: &str) {
    wait_for(
        &format!("{cell} logging {needle:?}"),
        Duration::from_secs(60),
        || logs(cell).contains(needle),
    );
}

#[test]
fn a_fleet_of_four_cells_closes_eight_tasks_once_each_and_exits_0() {
    let t0 = Instant::now();
    images();
    let built = t0.elapsed();
    let files: Vec<String> = (1..=8).map(|n| format!("f{n}.py")).collect();
    let tasks: Vec<(&str, &str)> = files.iter().map(|f| (f.as_str(), "ref: main")).collect();
    let mut w = world(&tasks);

    let fleet_start = Instant::now();
    let cells: Vec<String> = (1..=4)
        .map(|n| w.cell(&format!("cell{n}"), "sh /harness.sh", &[]))
        .collect();
    for c in &cells {
        w.exits(c, "0");
    }
    let fleet_wall = fleet_start.elapsed();

    let all_logs: String = cells.iter().map(|c| logs(c)).collect();
    for id in &w.ids {
        assert_eq!(closed_in(&all_logs, id), 1, "{id}:\n{all_logs}");
        assert_eq!(w.fixes_on_main(id), 1, "{id} on main:\n{}", w.main_log());
    }
    assert_eq!(w.pull().code, 3, "nothing is left open");
    for f in &files {
        let text = docker_ok(&[
            "exec",
            &w.git,
            "git",
            "-C",
            "/srv/app.git",
            "show",
            &format!("main:{f}"),
        ]);
        assert_eq!(text.matches("# fixed for ").count(), 1, "{f}:\n{text}");
    }
    eprintln!(
        "container fleet: images {built:?}, 4 cells x 8 tasks wall {fleet_wall:?}, test {:?}",
        t0.elapsed()
    );
}

#[test]
fn docker_stop_releases_the_claim_and_the_task_is_free_at_once() {
    let mut w = world(&[("a.py", "ref: main")]);
    let started = Instant::now();
    let cell = w.cell("cell1", "sleep 600", &[]);
    wait_log(&cell, "pulled ");
    eprintln!(
        "container cell: docker run to task pulled {:?}",
        started.elapsed()
    );
    docker_ok(&["stop", "-t", "20", &cell]);
    w.exits(&cell, "143");
    assert!(
        logs(&cell).contains("interrupted; releasing the claim"),
        "{}",
        logs(&cell)
    );
    let out = w.pull();
    assert_eq!(out.code, 0, "the released task is pulled at once: {out:?}");
    assert!(out.stdout.contains(&w.ids[0]), "{out:?}");
}

#[test]
fn a_killed_cell_restarted_resumes_its_task_and_a_lapsed_claim_goes_to_another_cell() {
    let mut w = world(&[("a.py", "ref: main"), ("b.py", "ref: main")]);
    // First run: the harness hangs; after a restart (same container, same hostname, so the
    // same claimer) it fixes.
    let slow_once = "if [ ! -e /tmp/once ]; then touch /tmp/once; sleep 600; fi; sh /harness.sh";
    let a = w.cell("cella", slow_once, &["CLAIM_MINUTES=1"]);
    wait_log(&a, "pulled ");
    let first = logs(&a);
    docker_ok(&["kill", &a]);
    let held = w
        .ids
        .iter()
        .find(|id| first.contains(&format!("pulled {id}")))
        .expect("a pulled one of the tasks")
        .clone();
    let other = w.ids.iter().find(|id| **id != held).unwrap().clone();

    // A killed cell released nothing: a second, hanging cell takes the other task, and the
    // held one stays held until its claim lapses.
    let b = w.cell("cellb", slow_once, &["CLAIM_MINUTES=1"]);
    wait_log(&b, &format!("pulled {other}"));
    docker_ok(&["kill", &b]);

    // Restarted, cell a resumes the task it still holds and then closes what is left.
    docker_ok(&["start", &a]);
    w.exits(&a, "0");
    let a_logs = logs(&a);
    assert!(a_logs.contains(&format!("pulled {held}")), "{a_logs}");
    // Cell b's task came to cell a only after b's one-minute claim lapsed.
    assert_eq!(closed_in(&a_logs, &held), 1, "{a_logs}");
    assert_eq!(closed_in(&a_logs, &other), 1, "{a_logs}");
    assert!(a_logs.contains("held by others"), "{a_logs}");
    for id in &w.ids {
        assert_eq!(w.fixes_on_main(id), 1, "{id}:\n{}", w.main_log());
    }
}

#[test]
fn under_review_a_fix_on_its_task_branch_stays_pending_until_merged() {
    let mut w = world(&[("a.py", "ref: main\npush_to: task\nintegrate: review")]);
    let id = w.ids[0].clone();
    let cell = w.cell("cell1", "sh /harness.sh", &[]);
    w.exits(&cell, "0");
    assert!(
        logs(&cell).contains(&format!("{id}: finding close exit 0, outcome pending")),
        "{}",
        logs(&cell)
    );
    assert_eq!(w.fixes_on_main(&id), 0);
    assert_eq!(w.pull().code, 3, "a pending task is not pulled again");

    docker_ok(&[
        "exec",
        &w.git,
        "sh",
        "-c",
        &format!(
            "set -e; git clone -q /srv/app.git /m; cd /m; git -c user.name=r -c user.email=r@x \
             merge -q --no-ff origin/task/{id} -m 'merge task/{id}'; git push -q origin main"
        ),
    ]);
    let env = attach_env(&w.key);
    let mut args: Vec<&str> = env.iter().map(String::as_str).collect();
    let script = format!(
        "set -e; git clone -q {ORIGIN} /tmp/w; metabob-mcp finding close --work-dir /tmp/w \
         --commits origin/main~1..origin/task/{id} --target main --json"
    );
    args.extend_from_slice(&["--entrypoint", "sh", CELL, "-c", &script]);
    let out = w.fleet.run(&args);
    assert_eq!(out.code, 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("close --json");
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["finding_id"] == id.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{id} in {v}"));
    assert_eq!(f["outcome"], "closed", "{v}");
    assert_eq!(w.fixes_on_main(&id), 1);
}

#[test]
fn a_task_with_a_refused_ref_is_withdrawn_and_the_fleet_goes_on() {
    let mut w = world(&[("a.py", "ref: ..bad"), ("b.py", "ref: main")]);
    let cell = w.cell("cell1", "sh /harness.sh", &[]);
    w.exits(&cell, "0");
    let l = logs(&cell);
    assert_eq!(closed_in(&l, &w.ids[1]), 1, "{l}");
    assert_eq!(closed_in(&l, &w.ids[0]), 0, "{l}");
    assert_eq!(w.fixes_on_main(&w.ids[1]), 1);
}

#[test]
fn a_rebase_conflict_aborts_releases_the_claim_and_exits_1() {
    let mut w = world(&[("a.py", "ref: main")]);
    let id = w.ids[0].clone();
    // While the harness works, someone else lands a change to the same lines on main.
    let racing = "set -e; git clone -q \"$ORIGIN\" /tmp/other; cd /tmp/other; \
                  echo 'x = 2' > a.py; git commit -qam 'someone else'; git push -q origin main; \
                  cd \"$WORK_DIR\"; sh /harness.sh";
    let cell = w.cell("cell1", racing, &[]);
    w.exits(&cell, "1");
    let l = logs(&cell);
    assert!(
        l.contains(&format!("{id}: rebase onto origin/main conflicts")),
        "{l}"
    );
    assert_eq!(w.fixes_on_main(&id), 0);
    let out = w.pull();
    assert_eq!(out.code, 0, "the released task is pulled at once: {out:?}");
    assert!(out.stdout.contains(&id), "{out:?}");
}

#[test]
fn a_goal_dispatched_over_mcp_is_pulled_and_closed_by_a_cell() {
    images();
    let mut fleet = Fleet::new();
    let git = git_server(&mut fleet, &["g.py"]);
    let (_ledger, key) = ledger(&mut fleet);
    let mut w = World {
        fleet,
        git,
        key,
        ids: Vec::new(),
    };
    let goal = serde_json::json!({
        "goal": "make g.py say it was fixed",
        "variables": {"repo": ORIGIN, "files": ["g.py"], "ref": "main"},
    });
    let out = w.mb(&[
        "tool",
        "call",
        "run_goal_async",
        "--args",
        &goal.to_string(),
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let dispatch = out
        .stdout
        .split_whitespace()
        .find(|t| t.starts_with("dispatch_"))
        .unwrap_or_else(|| panic!("no dispatch id in {out:?}"))
        .trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .to_string();

    let cell = w.cell("cell1", "sh /harness.sh", &[]);
    w.exits(&cell, "0");
    let log = logs(&cell);
    assert!(
        log.contains("finding close exit 0, outcome closed"),
        "{log}"
    );
    let status = w.mb(&[
        "tool",
        "call",
        "goal_status",
        "--args",
        &serde_json::json!({"dispatch_id": dispatch}).to_string(),
    ]);
    assert_eq!(status.code, 0, "{status:?}");
    assert!(
        status.stdout.starts_with("reached: yes"),
        "{}",
        status.stdout
    );
    assert_eq!(w.pull().code, 3, "nothing is left open");
}

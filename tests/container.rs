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

#[test]
fn a_fleet_of_two_cells_closes_three_tasks_once_each_and_exits_0() {
    let t0 = Instant::now();
    images();
    let built = t0.elapsed();
    let mut fleet = Fleet::new();
    let files = ["a.py", "b.py", "c.py"];
    let git = git_server(&mut fleet, &files);
    let (_ledger, key) = ledger(&mut fleet);
    let origin = "git://git/app.git";

    let mut ids = Vec::new();
    for f in files {
        let out = mb(
            &fleet,
            &key,
            &[
                "finding",
                "record",
                "--origin",
                origin,
                "--category",
                "task",
                "--severity",
                "HIGH",
                "--file",
                f,
                "--summary",
                &format!("fix {f}"),
                "--details",
                "ref: main",
                "--json",
            ],
        );
        assert_eq!(out.code, 0, "{out:?}");
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("record --json");
        ids.push(v["finding_ids"][0].as_str().expect("an id").to_string());
    }

    let harness = repo().join("examples/fleet/harness.sh");
    let mount = format!("{}:/harness.sh:ro", harness.display());
    let fleet_start = Instant::now();
    let mut cells = Vec::new();
    for n in 1..=2 {
        let mut args: Vec<String> = attach_env(&key);
        for e in [
            format!("ORIGIN={origin}"),
            "HARNESS=sh /harness.sh".into(),
            "RETRY_MAX=2".into(),
        ] {
            args.push("-e".into());
            args.push(e);
        }
        args.extend(["-v".into(), mount.clone(), CELL.into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cells.push(fleet.start(&format!("cell{n}"), &args));
    }
    for c in &cells {
        let code = docker_ok(&["wait", c]);
        assert_eq!(code, "0", "{c} exited {code}:\n{}", logs(c));
    }
    let fleet_wall = fleet_start.elapsed();

    let all_logs: String = cells.iter().map(|c| logs(c)).collect();
    for id in &ids {
        let closed = all_logs
            .matches(&format!("{id}: finding close exit 0, outcome closed"))
            .count();
        assert_eq!(closed, 1, "{id} closed {closed} times:\n{all_logs}");
    }
    // Nothing is left open for a next cell.
    let scratch = mb(
        &fleet,
        &key,
        &[
            "task",
            "pull",
            "--origin",
            origin,
            "--task-dir",
            "/tmp/t",
            "--work-dir",
            "/tmp/w",
            "--json",
        ],
    );
    assert_eq!(scratch.code, 3, "{scratch:?}");
    // main holds each fix once, and every file its one fixed line.
    let log = docker_ok(&[
        "exec",
        &git,
        "git",
        "-C",
        "/srv/app.git",
        "log",
        "--format=%B",
        "main",
    ]);
    for id in &ids {
        assert_eq!(
            log.matches(&format!("Fixes-Finding: {id}")).count(),
            1,
            "{id} in main's log:\n{log}"
        );
    }
    for f in files {
        let text = docker_ok(&[
            "exec",
            &git,
            "git",
            "-C",
            "/srv/app.git",
            "show",
            &format!("main:{f}"),
        ]);
        assert_eq!(text.matches("# fixed for ").count(), 1, "{f}:\n{text}");
    }
    eprintln!(
        "container fleet: images {built:?}, 2 cells x 3 tasks wall {fleet_wall:?}, test {:?}",
        t0.elapsed()
    );
}

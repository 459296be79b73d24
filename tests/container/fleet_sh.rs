//! scripts/fleet.sh: up, record, status, task, backup, restore, down and down --purge on Docker
//! compose, its ledger on HTTPS, two fleets on one host at once, a fleet taken down and up again
//! with its data, and a fleet on the operator's own origin, logging in with a credentials file.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{BASE, Forge, images, repo, wait_for};
use crate::support::{Output, bin};

/// `scripts/fleet.sh ARGS` from the checkout, bounded by `timeout`, with this build's binary and
/// the offline base, under the compose project `project`.
fn fleet_sh(project: &str, args: &[&str]) -> Output {
    fleet_sh_with::<&str>(project, args, &[])
}

/// [`fleet_sh`] with `vars` set as well.
fn fleet_sh_with<V: AsRef<std::ffi::OsStr>>(
    project: &str,
    args: &[&str],
    vars: &[(&str, V)],
) -> Output {
    let out = Command::new("timeout")
        .arg("600")
        .arg(repo().join("scripts/fleet.sh"))
        .args(args)
        .env("METABOB_BIN", bin())
        .env("BASE_IMAGE", BASE)
        .env("FLEET_PROJECT", project)
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/fleet.sh");
    Output::from(out)
}

/// Where fleet.sh keeps a project's state (key, port, certificates, repositories).
fn state(project: &str) -> PathBuf {
    repo().join(format!("target/fleet-{project}"))
}

/// Purges the fleet however the test ends.
struct FleetDown(String);

impl Drop for FleetDown {
    fn drop(&mut self) {
        let out = fleet_sh(&self.0, &["down", "--purge"]);
        if out.code != 0 {
            eprintln!("scripts/fleet.sh down --purge: {out:?}");
        }
    }
}

/// Records a task on greet.py of the fleet's repository; its id.
fn record(project: &str, summary: &str) -> String {
    let out = fleet_sh(
        project,
        &[
            "record",
            "--summary",
            summary,
            "--file",
            "greet.py",
            // No --severity: the script's header says it defaults.
            "--details",
            "ref: main",
            "--json",
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("record --json");
    v["finding_ids"][0].as_str().expect("an id").to_string()
}

/// Waits until the fleet's board shows `id` closed; the last `status`.
fn closed_on_board(project: &str, id: &str) -> Output {
    let mut last = None;
    wait_for(
        &format!("{id} closed on {project}'s board"),
        Duration::from_secs(180),
        || {
            let status = fleet_sh(project, &["status"]);
            let closed = status.code == 0
                && status
                    .stdout
                    .lines()
                    .any(|l| l.trim_start().starts_with("closed") && l.contains(id));
            last = Some(status);
            closed
        },
    );
    last.expect("status ran")
}

fn running_cells(project: &str) -> usize {
    let running = Command::new("docker")
        .args(["ps", "-q", "--filter"])
        .arg(format!("label=com.docker.compose.project={project}"))
        .args(["--filter", "label=com.docker.compose.service=cell"])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&running.stdout).lines().count()
}

fn volume_exists(project: &str) -> bool {
    let out = Command::new("docker")
        .args(["volume", "ls", "-q", "--filter"])
        .arg(format!("name={project}_ledger-data"))
        .output()
        .expect("docker volume ls");
    !String::from_utf8_lossy(&out.stdout).trim().is_empty()
}

#[test]
fn two_fleets_close_their_own_tasks_and_a_fleet_taken_down_comes_back_with_its_data() {
    images();
    let (a, b) = (
        format!("mbtest-fleet-{}", std::process::id()),
        format!("mbtest-fleet2-{}", std::process::id()),
    );
    let (_down_a, _down_b) = (FleetDown(a.clone()), FleetDown(b.clone()));
    let up = fleet_sh(&a, &["up", "3"]);
    assert_eq!(up.code, 0, "{up:?}");
    assert!(
        up.stderr.contains("3 cells are up on git://git/app.git"),
        "{up:?}"
    );
    assert!(up.stderr.contains("/board (its key: cat "), "{up:?}");
    // The image build's output goes to a log, not the terminal.
    let build_log = std::fs::read_to_string(state(&a).join("build.log")).expect("build.log");
    assert!(!build_log.trim().is_empty());
    for builder_line in ["Step 1/", "#1 [", "Successfully built"] {
        assert!(!up.stderr.contains(builder_line), "{up:?}");
    }
    let up_b = fleet_sh(&b, &["up", "1"]);
    assert_eq!(up_b.code, 0, "{up_b:?}");
    let port = |p: &str| std::fs::read_to_string(state(p).join("port")).expect("port kept");
    assert_ne!(port(&a), port(&b), "each fleet publishes its own port");

    // Each ledger serves HTTPS with its fleet's own CA, which its cells trust: the published
    // port answers a client trusting that CA, and no plain HTTP.
    for p in [&a, &b] {
        let url = format!("https://127.0.0.1:{}", port(p).trim());
        let health = Command::new(bin())
            .args(["ledger", "health", "--url", &url])
            .env("METABOB_EXTRA_CA_CERTS", state(p).join("tls/ca.pem"))
            .env("METABOB_NO_SYSTEM_CA", "1")
            .output()
            .expect("ledger health");
        let health = Output::from(health);
        assert_eq!(health.code, 0, "{health:?}");
        assert!(health.stdout.contains("TLS verified"), "{health:?}");
        let plain = url.replace("https://", "http://");
        let plain = Command::new(bin())
            .args(["ledger", "health", "--url", &plain])
            .output()
            .expect("ledger health");
        assert_eq!(Output::from(plain).code, 1, "plain HTTP on the TLS port");
    }

    let id_a = record(&a, "greet says hello twice");
    let id_b = record(&b, "greet shouts");
    let status = closed_on_board(&a, &id_a);
    assert!(status.stdout.contains("cell cell-"), "{status:?}");
    assert!(
        !status.stdout.contains(&id_b),
        "a's board shows only a's task"
    );
    let status_b = closed_on_board(&b, &id_b);
    assert!(!status_b.stdout.contains(&id_a), "{status_b:?}");
    assert_eq!(
        running_cells(&a),
        3,
        "three cells running, waiting for more"
    );

    // The operator's other steps: a task's history, a backup while it serves, and a restore
    // that puts the board back as it was then.
    let shown = fleet_sh(&a, &["task", "show", &id_a]);
    assert_eq!(shown.code, 0, "{shown:?}");
    assert!(shown.stdout.contains("attempts (1)"), "{shown:?}");
    let backup = state(&a).join("kept.db");
    let out = fleet_sh(&a, &["backup", backup.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{out:?}");
    let copy = std::fs::read(&backup).expect("the backup is written");
    assert!(copy.starts_with(b"SQLite format 3\0"), "a SQLite database");
    let after = record(&a, "greet says goodbye");
    closed_on_board(&a, &after);
    let out = fleet_sh(&a, &["restore", backup.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{out:?}");
    let status = closed_on_board(&a, &id_a);
    assert!(
        !status.stdout.contains(&after),
        "the board as it was at the backup: {status:?}"
    );
    let out = fleet_sh(&a, &["restore", "/nonexistent.db"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("restore needs a backup file"),
        "{out:?}"
    );

    // Down keeps the ledger's data and the repository; up goes on with both.
    let down = fleet_sh(&a, &["down"]);
    assert_eq!(down.code, 0, "{down:?}");
    assert!(down.stderr.contains("kept"), "{down:?}");
    assert!(volume_exists(&a));
    let out = fleet_sh(&a, &["status"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("no fleet is up"), "{out:?}");
    let up = fleet_sh(&a, &["up", "1"]);
    assert_eq!(up.code, 0, "{up:?}");
    assert!(up.stderr.contains("kept repository"), "{up:?}");
    closed_on_board(&a, &id_a);
    let log = Command::new("git")
        .arg("--git-dir")
        .arg(state(&a).join("repos/app.git"))
        .args(["log", "--format=%B", "main"])
        .output()
        .expect("git log");
    let log = String::from_utf8_lossy(&log.stdout).into_owned();
    assert!(log.contains(&format!("Fixes-Finding: {id_a}")), "{log}");

    // --purge removes them and says so.
    let purge = fleet_sh(&a, &["down", "--purge"]);
    assert_eq!(purge.code, 0, "{purge:?}");
    assert!(purge.stderr.contains("purged"), "{purge:?}");
    assert!(!volume_exists(&a));
    assert!(!state(&a).exists());
    let out = fleet_sh(&a, &["status"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("no fleet is up"), "{out:?}");
}

#[test]
fn a_fleet_on_the_operators_origin_pushes_its_fixes_there_logging_in_with_the_credentials_file() {
    let project = format!("mbtest-origin-{}", std::process::id());
    let env = crate::support::TestEnv::new();
    let forge = Forge::new(&env, &[("greet.py", "print('hello')\n")]);
    let (url, bare) = (forge.url.clone(), forge.bare.clone());
    let (host, port) = (forge.host, forge.port);
    const PASSWORD: &str = Forge::PASSWORD;
    let with_credentials = forge.vars();

    // Refused before anything is built: a password in the URL, and a credentials file that is
    // not there.
    let in_url = format!("https://cell:{PASSWORD}@{host}:{port}/app.git");
    let out = fleet_sh(&project, &["up", "1", &in_url]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("ORIGIN holds a password"), "{out:?}");
    assert!(!out.stderr.contains(PASSWORD), "{out:?}");
    let missing = [("FLEET_GIT_CREDENTIALS", "/nonexistent/git-credentials")];
    let out = fleet_sh_with(&project, &["up", "1", &url], &missing);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("is not a file this user can read"),
        "{out:?}"
    );

    images();
    let _down = FleetDown(project.clone());
    let up = fleet_sh_with(&project, &["up", "1", &url], &with_credentials);
    assert_eq!(up.code, 0, "{up:?}");
    assert!(
        up.stderr.contains(&format!("1 cells are up on {url}")),
        "{up:?}"
    );
    assert!(!up.stderr.contains(PASSWORD), "{up:?}");
    let services = Command::new("docker")
        .args([
            "ps",
            "--format",
            "{{.Label \"com.docker.compose.service\"}}",
            "--filter",
        ])
        .arg(format!("label=com.docker.compose.project={project}"))
        .output()
        .expect("docker ps");
    let services = String::from_utf8_lossy(&services.stdout).into_owned();
    assert!(
        !services.lines().any(|s| s == "git"),
        "no git server for an origin the cells reach: {services}"
    );

    // The fix lands on the operator's origin itself, cloned and pushed with the file's login
    // over the private CA's https, while the cells still reach the ledger over the fleet's.
    let id = record(&project, "greet says hello twice");
    closed_on_board(&project, &id);
    let log = env.git(&bare, &["log", "--format=%B", "main"]);
    assert!(log.contains(&format!("Fixes-Finding: {id}")), "{log}");

    // The login reached the cells as a file, never in their environment.
    let cell = Command::new("docker")
        .args(["ps", "-q", "--filter"])
        .arg(format!("label=com.docker.compose.project={project}"))
        .args(["--filter", "label=com.docker.compose.service=cell"])
        .output()
        .expect("docker ps");
    let cell = String::from_utf8_lossy(&cell.stdout).trim().to_string();
    let inspect = Command::new("docker")
        .args(["inspect", &cell])
        .output()
        .expect("docker inspect");
    let inspect = String::from_utf8_lossy(&inspect.stdout).into_owned();
    assert!(
        !inspect.is_empty() && !inspect.contains(PASSWORD),
        "{inspect}"
    );

    // The origin is the operator's: down --purge removes the fleet's state, never the origin.
    let purge = fleet_sh(&project, &["down", "--purge"]);
    assert_eq!(purge.code, 0, "{purge:?}");
    assert!(!state(&project).exists());
    let log = env.git(&bare, &["log", "--format=%B", "main"]);
    assert!(log.contains(&format!("Fixes-Finding: {id}")), "{log}");
}

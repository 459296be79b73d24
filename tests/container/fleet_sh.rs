//! scripts/fleet.sh: up, record, status and down on Docker compose, its ledger on HTTPS.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::{BASE, images, repo, wait_for};
use crate::support::{Output, bin};

/// `scripts/fleet.sh ARGS` from the checkout, bounded by `timeout`, with this build's binary and
/// the offline base, under the compose project `project`.
fn fleet_sh(project: &str, args: &[&str]) -> Output {
    let out = Command::new("timeout")
        .arg("600")
        .arg(repo().join("scripts/fleet.sh"))
        .args(args)
        .env("METABOB_BIN", bin())
        .env("BASE_IMAGE", BASE)
        .env("FLEET_PROJECT", project)
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/fleet.sh");
    Output::from(out)
}

/// Takes the fleet down however the test ends.
struct FleetDown(String);

impl Drop for FleetDown {
    fn drop(&mut self) {
        let out = fleet_sh(&self.0, &["down"]);
        if out.code != 0 {
            eprintln!("scripts/fleet.sh down: {out:?}");
        }
    }
}

#[test]
fn fleet_sh_brings_up_three_cells_that_close_a_recorded_task_shown_by_status() {
    images();
    let project = format!("mbtest-fleet-{}", std::process::id());
    let _down = FleetDown(project.clone());
    let up = fleet_sh(&project, &["up", "3"]);
    assert_eq!(up.code, 0, "{up:?}");
    assert!(
        up.stderr.contains("3 cells are up on git://git/app.git"),
        "{up:?}"
    );
    // The ledger serves HTTPS with the fleet's own CA, which the cells trust: the published
    // port answers a client trusting that CA, and no plain HTTP.
    assert!(up.stderr.contains("serves HTTPS"), "{up:?}");
    let ca = repo().join("target/fleet/tls/ca.pem");
    let health = Command::new(bin())
        .args(["ledger", "health", "--url", "https://127.0.0.1:18100"])
        .env("METABOB_EXTRA_CA_CERTS", &ca)
        .env("METABOB_NO_SYSTEM_CA", "1")
        .output()
        .expect("ledger health");
    let health = Output::from(health);
    assert_eq!(health.code, 0, "{health:?}");
    assert!(health.stdout.contains("TLS verified"), "{health:?}");
    let plain = Command::new(bin())
        .args(["ledger", "health", "--url", "http://127.0.0.1:18100"])
        .output()
        .expect("ledger health");
    assert_eq!(Output::from(plain).code, 1, "plain HTTP on the TLS port");

    let out = fleet_sh(
        &project,
        &[
            "record",
            "--summary",
            "greet says hello twice",
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
    let id = v["finding_ids"][0].as_str().expect("an id").to_string();

    // The standing cells poll for work; the board shows the task closed by one of them.
    let mut last = None;
    wait_for(
        &format!("{id} closed on the board"),
        Duration::from_secs(180),
        || {
            let status = fleet_sh(&project, &["status"]);
            let closed = status.code == 0
                && status
                    .stdout
                    .lines()
                    .any(|l| l.trim_start().starts_with("closed") && l.contains(&id));
            last = Some(status);
            closed
        },
    );
    let status = last.expect("status ran");
    assert!(status.stdout.contains("cell cell-"), "{status:?}");
    // All three are still up, waiting for the next task.
    let running = Command::new("docker")
        .args(["ps", "-q", "--filter"])
        .arg(format!("label=com.docker.compose.project={project}"))
        .args(["--filter", "label=com.docker.compose.service=cell"])
        .output()
        .expect("docker ps");
    let running = String::from_utf8_lossy(&running.stdout).lines().count();
    assert_eq!(running, 3, "three cells running");

    // Without a fleet, each step says so in one line.
    drop(_down);
    let out = fleet_sh(&project, &["status"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("no fleet is up"), "{out:?}");
}

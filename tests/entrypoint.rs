//! The entrypoint on the host, as `docker stop` meets it: a cell stopped mid-task gives its claim
//! back and leaves no process of its harness behind (SPEC.md §The loop).

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{TestEnv, bin, running, wait_until};

#[test]
fn a_cell_stopped_mid_task_gives_its_claim_back_and_leaves_no_harness_process_behind() {
    let env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let (_, url) = env.origin("app", &[("a.py", "x = 1\n")]);
    env.record_task(&url, "a task", "HIGH");
    // A number no other process on the machine sleeps for; the child of the harness's shell, so
    // only a stop of its whole process group ends it.
    let harness = "sleep 4241; true";
    let sleeping = "sleep 4241";
    let log = env.path("cell.log");
    let mut cell = Command::new("sh")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/entrypoint/cell-entrypoint"
        ))
        .env_clear()
        .envs(env.vars.iter().map(|(k, v)| (k, v)))
        .envs([
            ("ORIGIN", url.as_str()),
            ("HARNESS", harness),
            ("RENEW_EVERY", "3000"),
            ("VESSEL_ID", "cell-host"),
        ])
        .env("METABOB_BIN", bin())
        .env("TASK_DIR", env.path("cell/task"))
        .env("WORK_DIR", env.path("cell/work"))
        .current_dir(env.cwd())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("sh runs the entrypoint");
    let at_work = wait_until(Duration::from_secs(60), || running(sleeping) == 1);
    let shown = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(at_work, "the harness runs:\n{}", shown());

    // What `docker stop` sends.
    let pid = cell.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let mut code = None;
    let ended = wait_until(Duration::from_secs(30), || {
        code = cell.try_wait().unwrap().and_then(|s| s.code());
        code.is_some()
    });
    assert!(ended, "the cell stopped on TERM:\n{}", shown());
    assert_eq!(code, Some(143), "{}", shown());
    assert!(
        wait_until(Duration::from_secs(5), || running(sleeping) == 0),
        "the harness's child outlived the cell:\n{}",
        shown()
    );
    // The claim went back: another cell takes the task at once.
    let out = env.task_pull(&url, "other", &[]);
    assert_eq!(out.code, 0, "{out:?}\n{}", shown());
}

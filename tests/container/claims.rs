//! Claims held and given back: docker stop releases, a killed cell resumes, and a claim that
//! passed to another cell stops the first one's push or its harness.

use std::time::{Duration, Instant};

use super::{closed_in, exec, kill, logs, wait_for, wait_log, world};

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
    // `docker stop -t 20`: SIGTERM, SIGKILL only after 20 s.
    cell.stop_with_timeout(Some(20)).expect("stop the cell");
    w.exits(&cell, 143);
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
    let a = w.cell("cella", slow_once, &[("CLAIM_MINUTES", "1")]);
    wait_log(&a, "pulled ");
    // "pulled" is logged before the harness starts: killed before it left its mark, the
    // restarted cell would hang once more instead of fixing.
    wait_for("cell a's harness to start", Duration::from_secs(60), || {
        exec(&a, &["test", "-e", "/tmp/once"]).code == 0
    });
    let first = logs(&a);
    kill(&a);
    let held = w
        .ids
        .iter()
        .find(|id| first.contains(&format!("pulled {id}")))
        .expect("a pulled one of the tasks")
        .clone();
    let other = w.ids.iter().find(|id| **id != held).unwrap().clone();

    // A killed cell released nothing: a second, hanging cell takes the other task, and the
    // held one stays held until its claim lapses.
    let b = w.cell("cellb", slow_once, &[("CLAIM_MINUTES", "1")]);
    wait_log(&b, &format!("pulled {other}"));
    kill(&b);

    // Restarted, cell a resumes the task it still holds and then closes what is left.
    a.start().expect("restart cell a");
    w.exits(&a, 0);
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

/// A harness that gives its claim back from inside, as if its cell had paused past its claim,
/// and waits until cell-b holds the task; then `then`.
fn handover_harness(then: &str) -> String {
    format!(
        "metabob-mcp task release --task-dir \"$TASK_DIR\" --reason handover >/dev/null; \
         until metabob-mcp task list --json | grep -q '\"holder\": \"cell-b\"'; do sleep 1; done; \
         {then}"
    )
}

#[test]
fn a_cell_whose_claim_passed_to_another_pushes_nothing_keeps_its_commits_and_goes_on() {
    let mut w = world(&[("a.py", "")]);
    let id = w.ids[0].clone();
    // A commits its fix once B holds the task; its renewal loop stays quiet meanwhile, so only
    // the fence before the push can stop it.
    let a = w.cell(
        "cella",
        &handover_harness("sh /harness.sh"),
        &[("VESSEL_ID", "cell-a"), ("RENEW_EVERY", "600")],
    );
    wait_log(&a, "pulled ");
    // B works slowly, so A tries to push while B holds the task.
    let b = w.cell(
        "cellb",
        "sleep 8; sh /harness.sh",
        &[("VESSEL_ID", "cell-b")],
    );
    w.exits(&a, 0);
    w.exits(&b, 0);
    let (la, lb) = (logs(&a), logs(&b));
    assert!(
        la.contains(&format!("{id}: the claim is no longer this cell's (cell-b holds this claim, not cell-a); not pushing, not closing")),
        "{la}"
    );
    assert!(
        la.contains(&format!(
            "kept the commits as branch salvage/{id} in /home/cell/metabob-salvage/"
        )),
        "{la}"
    );
    assert_eq!(closed_in(&la, &id), 0, "{la}");
    assert_eq!(closed_in(&lb, &id), 1, "{lb}");
    assert_eq!(
        w.fixes_on_main(&id),
        1,
        "only B's fix reached the origin:\n{}",
        w.main_log()
    );
}

#[test]
fn a_renewal_that_finds_the_claim_taken_stops_the_harness_at_once() {
    let mut w = world(&[("a.py", "")]);
    let id = w.ids[0].clone();
    // A would work for ten minutes once B holds the task; its first renewal comes after B's
    // pull and finds the claim B's.
    let a = w.cell(
        "cella",
        &handover_harness("sleep 600; echo harness-finished"),
        &[("VESSEL_ID", "cell-a"), ("RENEW_EVERY", "15")],
    );
    wait_log(&a, "pulled ");
    let b = w.cell(
        "cellb",
        "sleep 30; sh /harness.sh",
        &[("VESSEL_ID", "cell-b")],
    );
    wait_log(
        &a,
        "the claim is no longer this cell's; stopping the harness",
    );
    w.exits(&b, 0);
    w.exits(&a, 0);
    let la = logs(&a);
    assert!(!la.contains("harness-finished"), "{la}");
    assert!(
        la.contains(&format!(
            "{id}: the claim is no longer this cell's (cell-b holds this claim, not cell-a)"
        )),
        "{la}"
    );
    assert_eq!(closed_in(&logs(&b), &id), 1);
    assert_eq!(w.fixes_on_main(&id), 1);
}

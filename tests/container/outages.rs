//! Outages mid-task: a killed and restarted ledger, a git server down and back.

use std::time::Duration;

use super::{Running, closed_in, exec, kill, logs, wait_for, wait_log, world};

#[test]
fn three_cells_mid_task_wait_out_a_killed_and_restarted_ledger_and_close_every_task_once() {
    let mut w = world(&[("a.py", ""), ("b.py", ""), ("c.py", "")]);
    let cells: Vec<Running> = (1..=3)
        .map(|n| {
            w.cell(
                &format!("cell{n}"),
                // Done while the ledger is away: the fence before the push waits it out.
                "sleep 4; sh /harness.sh",
                &[("RENEW_EVERY", "3")],
            )
        })
        .collect();
    for c in &cells {
        wait_log(c, "pulled ");
    }
    let ip = w
        .ledger
        .get_bridge_ip_address()
        .expect("the ledger's address");
    kill(&w.ledger);
    std::thread::sleep(Duration::from_secs(10));
    w.ledger.start().expect("restart the ledger");
    assert_eq!(
        w.ledger
            .get_bridge_ip_address()
            .expect("the ledger's address"),
        ip,
        "the restarted ledger keeps its address (the cells know it by /etc/hosts)"
    );
    for c in &cells {
        w.exits(c, 0);
    }
    let l: String = cells.iter().map(logs).collect();
    assert!(l.contains("the ledger does not answer; waiting"), "{l}");
    assert!(l.contains("the ledger answers again after "), "{l}");
    for id in &w.ids {
        assert_eq!(closed_in(&l, id), 1, "{id}:\n{l}");
        assert_eq!(w.fixes_on_main(id), 1);
    }
    assert!(w.board("claimed").is_empty(), "no claim is left held");
}

#[test]
fn a_git_server_down_mid_task_parks_nothing_and_every_task_closes_once_it_is_back() {
    let mut w = world(&[("a.py", ""), ("b.py", ""), ("c.py", "")]);
    let cells: Vec<Running> = (1..=3)
        .map(|n| w.cell(&format!("cell{n}"), "sleep 4; sh /harness.sh", &[]))
        .collect();
    for c in &cells {
        wait_log(c, "pulled ");
    }
    // Down while the harnesses work: their fetch before the push meets a dead server.
    let ip = w
        .git
        .get_bridge_ip_address()
        .expect("the git server's address");
    kill(&w.git);
    std::thread::sleep(Duration::from_secs(10));
    w.git.start().expect("restart the git server");
    assert_eq!(
        w.git
            .get_bridge_ip_address()
            .expect("the git server's address"),
        ip,
        "the restarted git server keeps its address (the cells know it by /etc/hosts)"
    );
    wait_for(
        "git daemon serving app.git again",
        Duration::from_secs(30),
        || exec(&w.git, &["git", "ls-remote", "git://127.0.0.1/app.git"]).code == 0,
    );
    for c in &cells {
        w.exits(c, 0);
    }
    // (A fetch may also just wait in its connect until the server is back: either way the
    // outage is waited out.)
    let l: String = cells.iter().map(logs).collect();
    for id in &w.ids {
        assert_eq!(closed_in(&l, id), 1, "{id}:\n{l}");
        assert_eq!(w.fixes_on_main(id), 1);
    }
    assert!(
        w.board("parked").is_empty(),
        "an origin that was down parks nothing"
    );
}

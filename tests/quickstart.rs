//! `scripts/quickstart.sh`, the README's first command, run as a newcomer would but bounded and
//! non-interactive: the whole loop on one machine with no Docker must end with three tasks
//! closed on the board, the one that waits for another fixed after it.

use std::time::Duration;

use crate::support::{Output, TestEnv, bin, layout};

/// Long enough for a loaded CI machine; the script itself takes seconds.
const BOUND: Duration = Duration::from_secs(120);

/// Runs the script in its own process group, so a run past `BOUND` is stopped whole: TERM lets
/// its trap stop the ledger and the cells, KILL follows.
fn run_quickstart(env: &TestEnv) -> Output {
    let mut script = env.program("bash");
    script
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/quickstart.sh"
        ))
        .args(["--listen", "127.0.0.1:0"])
        .env("METABOB_BIN", bin())
        .env("QUICKSTART_EXIT", "1");
    let (output, _, ended) = env.run_in_own_group(script, "quickstart", BOUND);
    assert!(ended, "quickstart ran past {BOUND:?}:\n{}", layout(&output));
    output
}

#[test]
fn the_quickstart_closes_three_tasks_with_two_cells_and_prints_the_board() {
    let env = TestEnv::new();
    let out = run_quickstart(&env);
    let shown = layout(&out);
    assert_eq!(out.code, 0, "{shown}");
    assert!(out.stdout.contains("3 of 3 tasks closed"), "{shown}");
    // The third task waits for the first: not ready at first, and fixed on top of it (the
    // script judges that with git's merge-base).
    let ready: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("ready     agf_"))
        .collect();
    assert_eq!(
        ready.len(),
        2,
        "two of three tasks are ready at first: {shown}"
    );
    assert!(
        !ready.iter().any(|l| l.contains("to_fahrenheit")),
        "{shown}"
    );
    assert!(
        out.stdout.lines().any(|l| l.contains(" waited for agf_")),
        "{shown}"
    );

    // One line per closed task: its id, the cell that closed it and its fix commit on main.
    let closed: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("agf_") && l.contains(" closed by "))
        .collect();
    assert_eq!(closed.len(), 3, "{shown}");
    let mut ids: Vec<&str> = closed
        .iter()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "three distinct tasks: {shown}");
    for line in &closed {
        let id = line.split(' ').next().unwrap();
        assert!(
            line.contains(" fix ") && line.ends_with(&format!("Fix {id}")),
            "task line names its fix commit: {line}\n{shown}"
        );
        assert!(
            line.contains("closed by cell-1") || line.contains("closed by cell-2"),
            "{line}"
        );
    }
    // Both cells ran the loop to its end ("nothing open; done").
    for cell in ["cell-1", "cell-2"] {
        assert!(
            out.stdout
                .contains(&format!("{cell} | cell-entrypoint: nothing open; done")),
            "{cell} ran to the end: {shown}"
        );
    }

    let board = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("board: "))
        .unwrap_or_else(|| panic!("no board URL: {shown}"));
    assert!(
        board.starts_with("http://127.0.0.1:") && board.ends_with("/board"),
        "{board}"
    );

    // The newcomer's HOME is where the ledger's first start wrote the client configuration.
    assert!(
        env.home().join(".substrate/config.json").is_file(),
        "{shown}"
    );
}

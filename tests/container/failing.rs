//! Tasks that fail: poison tasks parked, a task every harness fails parked by two cells, and a
//! cell that fails FAIL_MAX tasks in a row.

use super::{Running, closed_in, logs, world};

#[test]
fn poison_tasks_are_parked_and_two_standing_cells_close_every_other_task() {
    // A refused ref, a ref the origin lacks, then three normal tasks.
    let mut w = world(&[
        ("a.py", "ref: ..bad"),
        ("b.py", "ref: no-such-branch"),
        ("c.py", "ref: main"),
        ("d.py", ""),
        ("e.py", ""),
    ]);
    let cells: Vec<Running> = (1..=2)
        .map(|n| w.cell(&format!("cell{n}"), "sh /harness.sh", &[]))
        .collect();
    for c in &cells {
        w.exits(c, 0);
    }
    let l: String = cells.iter().map(logs).collect();
    for id in &w.ids[..2] {
        assert_eq!(closed_in(&l, id), 0, "{l}");
        assert!(l.contains(&format!("parked {id}: ")), "{id}:\n{l}");
    }
    for id in &w.ids[2..] {
        assert_eq!(closed_in(&l, id), 1, "{id}:\n{l}");
        assert_eq!(w.fixes_on_main(id), 1);
    }
    let parked: Vec<String> = w
        .board("parked")
        .iter()
        .map(|t| {
            assert!(
                t["reason"].as_str().is_some_and(|r| r.contains("ref")),
                "{t}"
            );
            t["task_id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(parked.len(), 2, "{parked:?}");
    assert!(
        w.ids[..2].iter().all(|id| parked.contains(id)),
        "{parked:?}"
    );
}

#[test]
fn a_task_every_harness_fails_is_parked_by_two_cells_and_neither_cell_ends() {
    let mut w = world(&[("a.py", ""), ("b.py", "")]);
    let hopeless = w.ids[0].clone();
    // The harness gives up on a.py's task and fixes any other.
    let harness = format!(
        "if grep -q '\"task_id\": \"{hopeless}\"' \"$TASK_DIR/task.json\"; then exit 1; fi; \
         sh /harness.sh"
    );
    let a = w.cell("cella", &harness, &[]);
    let b = w.cell("cellb", &harness, &[]);
    w.exits(&a, 0);
    w.exits(&b, 0);
    let l = format!("{}{}", logs(&a), logs(&b));
    assert_eq!(closed_in(&l, &w.ids[1]), 1, "{l}");
    assert_eq!(closed_in(&l, &hopeless), 0, "{l}");
    let parked = w.board("parked");
    assert_eq!(parked.len(), 1, "{parked:?}\n{l}");
    let reason = parked[0]["reason"].as_str().unwrap();
    assert!(reason.contains("2 cells failed it"), "{reason}");
    assert!(
        reason.contains("cell-"),
        "the cells that tried it are named: {reason}"
    );
}

#[test]
fn a_cell_that_fails_fail_max_tasks_in_a_row_stops_with_exit_1_and_parks_nothing_alone() {
    let mut w = world(&[("a.py", ""), ("b.py", ""), ("c.py", "")]);
    let cell = w.cell("cell1", "exit 1", &[("FAIL_MAX", "2")]);
    w.exits(&cell, 1);
    let l = logs(&cell);
    assert!(
        l.contains("2 tasks failed in a row (FAIL_MAX=2); stopping"),
        "{l}"
    );
    assert!(
        w.board("parked").is_empty(),
        "one cell's failures park nothing"
    );
    assert_eq!(w.board("open").len(), 3, "every task is back on the board");
}

//! Rebase conflicts: the task given back as failed here, `conflicts: retry`, and pairs of
//! tasks that conflict.

use super::{Running, World, closed_in, exec_ok, logs, servers, world};

/// A harness that, the first `n` times it runs in this container, lands a change to the same
/// lines of `a.py` on main while it works, so the cell's rebase conflicts; the fix itself is the
/// sample harness's.
fn racing_harness(n: u32) -> String {
    format!(
        "set -e; c=$(cat /tmp/raced 2>/dev/null || echo 0); \
         if [ \"$c\" -lt {n} ]; then echo $((c + 1)) > /tmp/raced; \
           rm -rf /tmp/other; git clone -q \"$ORIGIN\" /tmp/other; cd /tmp/other; \
           echo \"x = race $c\" > a.py; git commit -qam 'someone else'; git push -q origin main; \
           cd \"$WORK_DIR\"; fi; sh /harness.sh"
    )
}

/// One task on `a.py` with `details`, one cell whose harness races it `races` times (with
/// `extra` environment), run to exit `code`: the world, the task's id and the cell's log, which
/// names the first conflict.
fn raced(details: &str, races: u32, extra: &[(&str, &str)], code: i32) -> (World, String, String) {
    let mut w = world(&[("a.py", details)]);
    let id = w.ids[0].clone();
    let cell = w.cell("cell1", &racing_harness(races), extra);
    w.exits(&cell, code);
    let l = logs(&cell);
    assert!(
        l.contains(&format!("{id}: rebase onto origin/main conflicts")),
        "{l}"
    );
    (w, id, l)
}

#[test]
fn a_rebase_conflict_gives_the_task_back_as_failed_and_another_cell_closes_it() {
    let (mut w, id, l) = raced("ref: main", 1, &[], 0);
    assert!(
        l.contains(&format!(
            "{id}: the claim is released; pulling the next task"
        )),
        "{l}"
    );
    assert_eq!(
        closed_in(&l, &id),
        0,
        "this cell is not offered it again: {l}"
    );
    // Another cell clones the fresh target and does it again.
    let other = w.cell("cell2", "sh /harness.sh", &[]);
    w.exits(&other, 0);
    assert_eq!(closed_in(&logs(&other), &id), 1, "{}", logs(&other));
    assert_eq!(w.fixes_on_main(&id), 1);
}

#[test]
fn a_task_that_keeps_conflicting_is_failed_here_and_never_ends_the_cell() {
    let (w, id, l) = raced("ref: main", 100, &[], 0);
    assert!(
        l.contains(&format!(
            "giving up {id}: the fix conflicts with the target in a.py"
        )),
        "{l}"
    );
    assert_eq!(w.fixes_on_main(&id), 0);
    // Failed by this cell only (two cells park a task): another cell is offered it at once.
    let out = w.pull();
    assert_eq!(out.code, 0, "the task is pulled by another cell: {out:?}");
    assert!(out.stdout.contains(&id), "{out:?}");
}

#[test]
fn under_conflicts_retry_the_same_cell_redoes_the_task_on_the_fresh_target_keeping_its_claim() {
    let (w, id, l) = raced("ref: main\nconflicts: retry", 1, &[], 0);
    assert!(
        l.contains(&format!(
            "{id}: keeping the claim; running the harness again on the fresh origin/main (1 of 2)"
        )),
        "{l}"
    );
    assert!(
        !l.contains("the claim is released"),
        "the claim was never given back: {l}"
    );
    assert_eq!(
        l.matches(&format!("pulled {id} ")).count(),
        1,
        "pulled once: {l}"
    );
    assert_eq!(closed_in(&l, &id), 1, "{l}");
    assert_eq!(w.fixes_on_main(&id), 1);
}

#[test]
fn three_cells_on_six_tasks_that_conflict_in_pairs_close_each_once_and_all_exit_0() {
    // Two tasks per file: the sample harness appends to the end of the file, so the second
    // fix of a pair conflicts with the first whenever both are worked on at once.
    let mut w = servers(&["a.py", "b.py", "c.py"]);
    for f in ["a.py", "b.py", "c.py"] {
        for n in 1..=2 {
            w.record(f, &format!("fix {f}, part {n}"), "ref: main");
        }
    }
    let cells: Vec<Running> = (1..=3)
        .map(|i| w.cell(&format!("cell{i}"), "sh /harness.sh", &[]))
        .collect();
    for c in &cells {
        w.exits(c, 0);
    }
    let all: String = cells.iter().map(logs).collect();
    for id in &w.ids {
        assert_eq!(closed_in(&all, id), 1, "{id} closed once: {all}");
        assert_eq!(w.fixes_on_main(id), 1, "{id} fixed once on main");
    }
}

/// The git server's hook lands one empty commit on top of the first push to main, as another
/// cell pushing right after this one would, before the cell looks at the branch again.
const PUSH_ON_TOP: &str = r#"cat > /srv/app.git/hooks/post-receive <<'HOOK'
#!/bin/sh
[ -e /srv/pushed-on-top ] && exit 0
while read old new ref; do
  [ "$ref" = refs/heads/main ] || continue
  touch /srv/pushed-on-top
  export GIT_AUTHOR_NAME=other GIT_AUTHOR_EMAIL=other@example.invalid
  export GIT_COMMITTER_NAME=other GIT_COMMITTER_EMAIL=other@example.invalid
  c=$(git commit-tree "$new^{tree}" -p "$new" -m 'another cell, on top')
  git update-ref refs/heads/main "$c" "$new"
done
HOOK
chmod +x /srv/app.git/hooks/post-receive"#;

#[test]
fn a_push_another_cell_built_on_before_the_check_counts_as_landed() {
    let mut w = world(&[("a.py", "ref: main")]);
    let id = w.ids[0].clone();
    exec_ok(&w.git, &["sh", "-c", PUSH_ON_TOP]);
    let cell = w.cell("cell1", "sh /harness.sh", &[]);
    w.exits(&cell, 0);
    let l = logs(&cell);
    assert!(!l.contains("not the pushed"), "{l}");
    assert_eq!(closed_in(&l, &id), 1, "{l}");
    assert_eq!(w.fixes_on_main(&id), 1);
    assert!(
        w.main_log().starts_with("another cell, on top"),
        "{}",
        w.main_log()
    );
}

//! One cell and a fleet of them: the image without a ledger, four cells closing eight tasks, a
//! fix under review, and a goal dispatched over MCP.

use std::time::Instant;

use testcontainers::ImageExt;

use super::{
    CELL, ORIGIN, Running, closed_in, exec_ok, image, images, logs, one_off, servers, world,
};

#[test]
fn the_cell_image_with_no_ledger_configured_exits_2_naming_the_cause() {
    images();
    let out = one_off(
        image(CELL)
            .with_network("none")
            .with_env_var("ORIGIN", "git://git/app.git")
            .with_env_var("HARNESS", "true"),
    );
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("not_configured"), "{out:?}");
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
    let cells: Vec<Running> = (1..=4)
        .map(|n| w.cell(&format!("cell{n}"), "sh /harness.sh", &[]))
        .collect();
    for c in &cells {
        w.exits(c, 0);
    }
    let fleet_wall = fleet_start.elapsed();

    let all_logs: String = cells.iter().map(logs).collect();
    for id in &w.ids {
        assert_eq!(closed_in(&all_logs, id), 1, "{id}:\n{all_logs}");
        assert_eq!(w.fixes_on_main(id), 1, "{id} on main:\n{}", w.main_log());
    }
    assert_eq!(w.pull().code, 3, "nothing is left open");
    for f in &files {
        let text = exec_ok(
            &w.git,
            &["git", "-C", "/srv/app.git", "show", &format!("main:{f}")],
        );
        assert_eq!(text.matches("# fixed for ").count(), 1, "{f}:\n{text}");
    }
    eprintln!(
        "container fleet: images {built:?}, 4 cells x 8 tasks wall {fleet_wall:?}, test {:?}",
        t0.elapsed()
    );
}

#[test]
fn under_review_a_fix_on_its_task_branch_stays_pending_until_merged() {
    let mut w = world(&[("a.py", "ref: main\npush_to: task\nintegrate: review")]);
    let id = w.ids[0].clone();
    let cell = w.cell("cell1", "sh /harness.sh", &[]);
    w.exits(&cell, 0);
    assert!(
        logs(&cell).contains(&format!("{id}: finding close exit 0, outcome pending")),
        "{}",
        logs(&cell)
    );
    assert_eq!(w.fixes_on_main(&id), 0);
    assert_eq!(w.pull().code, 3, "a pending task is not pulled again");

    exec_ok(
        &w.git,
        &[
            "sh",
            "-c",
            &format!(
                "set -e; git clone -q /srv/app.git /m; cd /m; git -c user.name=r -c user.email=r@x \
                 merge -q --no-ff origin/task/{id} -m 'merge task/{id}'; git push -q origin main"
            ),
        ],
    );
    let script = format!(
        "set -e; git clone -q {ORIGIN} /tmp/w; metabob-mcp finding close --work-dir /tmp/w \
         --commits origin/main~1..origin/task/{id} --target main --json"
    );
    let out = w.attached("sh", &["-c", &script]);
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
fn a_goal_dispatched_over_mcp_is_pulled_and_closed_by_a_cell() {
    let mut w = servers(&["g.py"]);
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
    w.exits(&cell, 0);
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

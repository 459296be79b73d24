//! What must always hold once the soak ends, read from the ledger's rows, the origin's log and
//! the cells' own records.

use std::collections::BTreeMap;

use serde_json::json;

use super::fleet::Fleet;
use super::ledger::{group, post, verdict_rows};
use super::{Report, Res, git};

/// How long before a push landed its cell's renewal as holder counts as the fence for it: the
/// fetch, rebase and push after the fence take seconds, more on a loaded machine.
const FENCE_WINDOW_MS: i64 = 15_000;

/// The landed fixes: (commit, task, cell) for each `Fixes-Finding:` commit on main.
fn landed(fleet: &Fleet<'_>) -> Res<Vec<(String, String, String)>> {
    let log = git(
        &fleet.plan.vars,
        &fleet.bare,
        &["log", "--format=%H %s", "main"],
    )?;
    Ok(log
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (sha, fix, task, by, cell) =
                (w.next()?, w.next()?, w.next()?, w.next()?, w.next()?);
            (fix == "Fix" && by == "by")
                .then(|| (sha.to_string(), task.to_string(), cell.to_string()))
        })
        .collect())
}

/// When each commit reached main: the push that brought it, from the hook's log.
fn push_times(fleet: &Fleet<'_>) -> Res<BTreeMap<String, i64>> {
    let log = std::fs::read_to_string(fleet.plan.root.join("pushes.log")).unwrap_or_default();
    let mut at = BTreeMap::new();
    for line in log.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let [ms, old, new, "refs/heads/main"] = w[..] else {
            continue;
        };
        let Ok(ms) = ms.parse::<i64>() else { continue };
        let range = if old.bytes().all(|b| b == b'0') {
            new.to_string()
        } else {
            format!("{old}..{new}")
        };
        for sha in git(&fleet.plan.vars, &fleet.bare, &["rev-list", &range])?.lines() {
            at.entry(sha.to_string()).or_insert(ms);
        }
    }
    Ok(at)
}

pub(super) fn check(
    fleet: &Fleet<'_>,
    normal: &[String],
    poison: &[String],
    acked: Vec<String>,
    events: BTreeMap<&'static str, usize>,
) -> Res<Report> {
    use metabob_wire::claims::holder;
    use metabob_wire::verdict::VerdictKind;
    let board = fleet.board()?;
    let (closed, parked, claimed) = (
        group(&board, "closed"),
        group(&board, "parked"),
        group(&board, "claimed"),
    );
    let url = fleet.url(0);
    let rows = verdict_rows(&url, &fleet.key)?;
    let rows_of = |task: &str| -> Vec<&metabob_wire::verdict::Verdict> {
        rows.iter()
            .filter(|v| v.finding_ids.iter().any(|i| i == task))
            .collect()
    };

    // Who held `task` at ledger time `t`, by the one holder rule over the rows written by then.
    let holder_at = |task: &str, t: i64| {
        let before: Vec<_> = rows_of(task)
            .into_iter()
            .filter(|v| v.created_ms <= t)
            .collect();
        holder(before, t).map(|h| h.holder)
    };
    // A cell set to work (its harness started) while another cell held the task.
    let starts = std::fs::read_to_string(fleet.plan.root.join("starts.log")).unwrap_or_default();
    let mut doubles = Vec::new();
    for line in starts.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let [at, task, cell] = w[..] else { continue };
        let Ok(at) = at.parse::<i64>() else { continue };
        if let Some(other) = holder_at(task, at).filter(|h| h != cell) {
            doubles.push(format!("{task}: {cell} started while {other} held it"));
        }
    }
    let pushed_at = push_times(fleet)?;
    let mut unfenced = Vec::new();
    for (sha, task, cell) in landed(fleet)? {
        let Some(&at) = pushed_at.get(&sha) else {
            continue;
        };
        // The cell held the claim when the push landed, or renewed it as its holder shortly
        // before: the fence renews ahead of the fetch, rebase and push, and a claim that
        // passes on inside that window is the one SPEC names (SPEC.md §The loop).
        let held = |t: i64| holder_at(&task, t).is_some_and(|h| h == cell);
        let fenced = rows_of(&task).into_iter().any(|v| {
            v.kind == metabob_wire::verdict::VerdictKind::Claimed
                && v.reviewed_by.as_deref() == Some(cell.as_str())
                && (at - FENCE_WINDOW_MS..=at).contains(&v.created_ms)
                && held(v.created_ms)
        });
        if !held(at) && !fenced {
            unfenced.push(format!("{task} by {cell} at {at}"));
        }
    }
    let mut lost = Vec::new();
    for id in &acked {
        match post(
            &url,
            &fleet.key,
            &json!({"type": "conceptGraph", "concept_id": id, "limit": 1}),
        ) {
            Ok((200, _)) => {}
            other => lost.push(format!("{id} ({other:?})")),
        }
    }
    let salvaged = (0..fleet.plan.cells)
        .map(|n| {
            std::fs::read_dir(fleet.cell_dir(n).join("salvage"))
                .map(|d| d.count())
                .unwrap_or(0)
        })
        .sum();
    Ok(Report {
        secs: 0.0,
        tasks: normal.len(),
        closed: normal.iter().filter(|t| closed.contains(*t)).count(),
        left_open: normal
            .iter()
            .filter(|t| !closed.contains(*t))
            .cloned()
            .collect(),
        doubles,
        closed_twice: normal
            .iter()
            .filter(|t| {
                rows_of(t)
                    .iter()
                    .filter(|v| v.kind == VerdictKind::Fixed)
                    .count()
                    > 1
            })
            .cloned()
            .collect(),
        unfenced,
        acked: acked.len(),
        lost,
        poison: poison.len(),
        parked: poison.iter().filter(|t| parked.contains(*t)).count(),
        unparked_poison: poison
            .iter()
            .filter(|t| !parked.contains(*t))
            .cloned()
            .collect(),
        held_at_end: claimed.into_iter().collect(),
        salvaged,
        events,
    })
}

//! An operator's actions on one task (SPEC.md §Operator actions): reopen a parked task, free a
//! claim a dead cell holds, cancel a task for good. This module decides, from the task's rows,
//! whether an action applies and which verdict it writes; `task reopen|release --force|cancel`
//! write that verdict over the attachment and the board's buttons through the ledger's
//! `taskAction_write`, so both speak the one rule.

use serde::{Deserialize, Serialize};

use super::claims;
use super::finding::Finding;
use super::verdict::{NewVerdict, Standing, Verdict, VerdictKind, VerdictOrigin, standing};

/// The shape the board's buttons send.
pub const TASK_ACTION_SHAPE: &str = "taskAction_write";
/// The shape of a task's history (`task show`, the board's detail view).
pub const TASK_HISTORY_SHAPE: &str = "taskHistory";
/// Longest reason an operator may give, in characters.
pub const MAX_REASON_CHARS: usize = 500;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskAction {
    /// A parked task back on the board.
    Reopen,
    /// The live claim given back on its holder's behalf, so another cell may take the task now.
    Release,
    /// The task withdrawn for good: no cell is offered it again, and it cannot be reopened.
    Cancel,
}

impl TaskAction {
    pub fn parse(s: &str) -> Option<TaskAction> {
        match s {
            "reopen" => Some(TaskAction::Reopen),
            "release" => Some(TaskAction::Release),
            "cancel" => Some(TaskAction::Cancel),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TaskAction::Reopen => "reopen",
            TaskAction::Release => "release",
            TaskAction::Cancel => "cancel",
        }
    }
}

/// Why an action was not taken; nothing is written for any of these.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the task is not parked: only a parked task is reopened")]
    NotParked,
    #[error("nobody holds the task's claim: there is nothing to release")]
    NotHeld,
    /// `verdict` is the closing verdict's word (`fixed`, `cancelled`, ...).
    #[error("the task is already closed ({verdict}): nothing to do")]
    Closed { verdict: String },
}

impl Refused {
    /// The `outcome` word `taskAction_write` answers it with.
    pub fn outcome(&self) -> &'static str {
        match self {
            Refused::NotParked => "not_parked",
            Refused::NotHeld => "not_held",
            Refused::Closed { .. } => "closed",
        }
    }
}

/// What an action did, as `taskAction_write` answers it and the CLI prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionDone {
    pub task_id: String,
    pub action: TaskAction,
    /// One line: what changed (for a release, whose claim was freed).
    pub done: String,
}

/// Decides `action` on `task`, whose rows are `rows`, at `now_ms`, by `by` (the operator): the
/// verdict to write and the line saying what it does, or why nothing is written.
pub fn decide<'a>(
    action: TaskAction,
    task: &'a Finding,
    rows: &[Verdict],
    by: &str,
    session: &str,
    reason: Option<&str>,
    now_ms: i64,
) -> Result<(NewVerdict<'a>, String), Refused> {
    let standing = standing(rows);
    if let Standing::Closed { verdict } = &standing {
        return Err(Refused::Closed {
            verdict: verdict.kind.line(),
        });
    }
    let reason = reason.map(str::trim).filter(|r| !r.is_empty());
    let verdict = |kind, reviewed_by: &str, reason: String| NewVerdict {
        finding: task,
        kind,
        reviewed_by: Some(reviewed_by.to_string()),
        session: session.to_string(),
        origin: VerdictOrigin::Remote,
        lines: vec![("reason", reason)],
    };
    match action {
        TaskAction::Reopen => match standing {
            Standing::Parked { .. } => Ok((
                verdict(
                    VerdictKind::Reopened,
                    by,
                    reason.unwrap_or("reopened by an operator").to_string(),
                ),
                format!("reopened by {by}: cells are offered it again"),
            )),
            Standing::Pending { verdict } => Err(Refused::Closed {
                verdict: verdict.kind.line(),
            }),
            _ => Err(Refused::NotParked),
        },
        TaskAction::Release => {
            // The withdrawal is written in the holder's name, since the holder rule ends a
            // claim only by its claimer's own withdrawal; the reason says who forced it.
            let Some(held) = claims::holder(rows, now_ms) else {
                return Err(Refused::NotHeld);
            };
            let why = format!(
                "released by {by} (forced): {}",
                reason.unwrap_or("the holder is gone")
            );
            Ok((
                verdict(VerdictKind::Withdrawn, &held.holder, why),
                format!("freed the claim {} held", held.holder),
            ))
        }
        TaskAction::Cancel => Ok((
            verdict(
                VerdictKind::Cancelled,
                by,
                reason.unwrap_or("cancelled by an operator").to_string(),
            ),
            format!("cancelled by {by}: no cell is offered it again"),
        )),
    }
}

/// A task's history as `taskHistory` answers it: the task, its attempts (one per claim span)
/// and every row about it, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskHistory {
    /// `None` when no task of the key's org has that id.
    #[serde(default)]
    pub task: Option<HistoryTask>,
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    #[serde(default)]
    pub events: Vec<HistoryEvent>,
    /// When the ledger read it, RFC 3339.
    #[serde(default)]
    pub now: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryTask {
    pub task_id: String,
    #[serde(default)]
    pub concept_id: String,
    #[serde(default)]
    pub summary: String,
    #[serde(default)]
    pub severity: String,
    #[serde(default)]
    pub repository: Option<String>,
    /// The board group it stands in now (`board::GROUPS`).
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub recorded_by: Option<String>,
    #[serde(default)]
    pub recorded_at: String,
}

/// One claim span: a cell's attempt at the task.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    pub vessel_id: String,
    #[serde(default)]
    pub began_at: String,
    #[serde(default)]
    pub ended_at: Option<String>,
    #[serde(default)]
    pub duration_ms: Option<i64>,
    /// running, pending, released, withdrawn, fixed, discarded, cancelled or lapsed.
    #[serde(default)]
    pub ending: String,
    /// Why it ended short of a fix: the release's or failure's reason (with the harness's last
    /// lines, which the cell loop records).
    #[serde(default)]
    pub reason: Option<String>,
}

/// One row about the task.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEvent {
    pub at: String,
    /// The verdict line: claimed, claim withdrawn, task failed, parked, reopened, fixed, ...
    pub kind: String,
    #[serde(default)]
    pub by: Option<String>,
    #[serde(default)]
    pub detail: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> Finding {
        crate::finding::tests::finding("agf_1")
    }

    fn row(seq: i64, kind: VerdictKind, by: &str) -> Verdict {
        Verdict {
            reviewed_by: Some(by.into()),
            claim_minutes: Some(60),
            ..crate::verdict::tests::v(kind, seq, None)
        }
    }

    fn go(action: TaskAction, rows: &[Verdict]) -> Result<(VerdictKind, String), Refused> {
        let t = task();
        decide(action, &t, rows, "ops", "s", Some("why"), 10)
            .map(|(nv, _)| (nv.kind, nv.reviewed_by.unwrap_or_default()))
    }

    #[test]
    fn each_action_applies_only_where_it_means_something() {
        let claimed = [row(1, VerdictKind::Claimed, "c1")];
        // A forced release is written in the holder's name, or the holder rule would ignore it.
        assert_eq!(
            go(TaskAction::Release, &claimed),
            Ok((VerdictKind::Withdrawn, "c1".into()))
        );
        assert_eq!(go(TaskAction::Release, &[]), Err(Refused::NotHeld));
        assert_eq!(go(TaskAction::Reopen, &claimed), Err(Refused::NotParked));
        let parked = [row(2, VerdictKind::Parked, "c1")];
        assert_eq!(
            go(TaskAction::Reopen, &parked),
            Ok((VerdictKind::Reopened, "ops".into()))
        );
        assert_eq!(
            go(TaskAction::Cancel, &parked),
            Ok((VerdictKind::Cancelled, "ops".into()))
        );
        let fixed = [row(3, VerdictKind::Fixed, "c1")];
        assert_eq!(
            go(TaskAction::Cancel, &fixed),
            Err(Refused::Closed {
                verdict: "fixed".into()
            })
        );
    }

    #[test]
    fn a_cancellation_outranks_a_later_fix_and_a_reopening() {
        let rows = [
            row(1, VerdictKind::Cancelled, "ops"),
            row(2, VerdictKind::Fixed, "c1"),
            row(3, VerdictKind::Reopened, "ops"),
        ];
        match standing(&rows) {
            Standing::Closed { verdict } => assert_eq!(verdict.kind, VerdictKind::Cancelled),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            go(TaskAction::Reopen, &rows),
            Err(Refused::Closed {
                verdict: "cancelled".into()
            })
        );
    }
}

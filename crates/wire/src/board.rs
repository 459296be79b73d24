//! The board's typed model, shared by the ledger that builds it and `task list` that shows it.
//!
//! `taskBoard` (SPEC.md §The board) answers one [`Board`]: per repository the tasks in six
//! groups ([`GROUPS`]), then the cells and the goals. The ledger fills it in and serializes it;
//! `task list` deserializes it once and reads it by field, so a field the one side emits and the
//! other reads is spelled in one place.
//!
//! The JSON is the wire format the page at `/board` reads too (`board.js`), so these types keep
//! it exactly: a field the ledger answers as `null` when it has no value is an `Option` that is
//! always serialized; the one field the ledger leaves out when it has no value
//! ([`ClosedTask::closed_at`]) is skipped when `None`. Read back, every answer is someone else's
//! input: an `Option` that is missing reads as `None` and a missing group or list as empty, so
//! an older or newer ledger's board still reads, and fields nobody here knows are ignored; what
//! a line of the board cannot do without (a task's id, a claim's holder) and `repositories`
//! itself are required, so a board missing them does not read at all.

use serde::{Deserialize, Serialize};

use crate::depends::OpenBlocker;

/// The groups of a repository's tasks, in the order the board shows them; each is a field of
/// [`BoardRepository`] of the same name.
pub const GROUPS: [&str; 7] = [
    "open",
    "blocked",
    "claimed",
    "pending",
    "closed",
    "withdrawn",
    "parked",
];

/// The whole `taskBoard` answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Board {
    /// The repository identity of the request's `origin`, or `null` for the whole org.
    #[serde(default)]
    pub origin_repository: Option<String>,
    /// One per repository with a task on the board, by name. Required: an answer without it
    /// (an error body, say) is no board, not an empty one.
    pub repositories: Vec<BoardRepository>,
    /// Every vessel id seen in a claim, the latest heartbeat first.
    #[serde(default)]
    pub cells: Vec<BoardCell>,
    /// The newest dispatches of the goal board.
    #[serde(default)]
    pub goals: Vec<BoardGoal>,
    /// How many tasks the board shows.
    #[serde(default)]
    pub tasks: u64,
    /// There were more tasks than the board shows (only the newest are).
    #[serde(default)]
    pub truncated: bool,
    /// There were more verdict and claim rows than the board weighed.
    #[serde(default)]
    pub verdicts_truncated: bool,
    /// When the ledger read it, RFC 3339.
    #[serde(default)]
    pub now: String,
}

/// One repository's tasks, one list per group ([`GROUPS`]), newest task first in each.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoardRepository {
    pub repository: String,
    /// Nobody holds it and nothing closed it.
    #[serde(default)]
    pub open: Vec<BoardTask>,
    /// Open, nobody holds it, and a blocker holds it back (SPEC.md §Dependencies).
    #[serde(default)]
    pub blocked: Vec<BlockedTask>,
    #[serde(default)]
    pub claimed: Vec<ClaimedTask>,
    #[serde(default)]
    pub pending: Vec<PendingTask>,
    #[serde(default)]
    pub closed: Vec<ClosedTask>,
    #[serde(default)]
    pub withdrawn: Vec<WithdrawnTask>,
    #[serde(default)]
    pub parked: Vec<ParkedTask>,
}

impl BoardRepository {
    /// A repository with no task yet.
    pub fn new(repository: impl Into<String>) -> Self {
        BoardRepository {
            repository: repository.into(),
            ..BoardRepository::default()
        }
    }

    /// How many tasks each group holds, in the order of [`GROUPS`].
    pub fn counts(&self) -> [(&'static str, usize); GROUPS.len()] {
        let n = [
            self.open.len(),
            self.blocked.len(),
            self.claimed.len(),
            self.pending.len(),
            self.closed.len(),
            self.withdrawn.len(),
            self.parked.len(),
        ];
        std::array::from_fn(|i| (GROUPS[i], n[i]))
    }

    /// Every task, group by group in the order of [`GROUPS`].
    pub fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        let open = self.open.iter().map(Entry::Open);
        let blocked = self.blocked.iter().map(Entry::Blocked);
        let claimed = self.claimed.iter().map(Entry::Claimed);
        let pending = self.pending.iter().map(Entry::Pending);
        let closed = self.closed.iter().map(Entry::Closed);
        let withdrawn = self.withdrawn.iter().map(Entry::Withdrawn);
        let parked = self.parked.iter().map(Entry::Parked);
        open.chain(blocked)
            .chain(claimed)
            .chain(pending)
            .chain(closed)
            .chain(withdrawn)
            .chain(parked)
    }
}

/// What every entry carries, whatever its group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoardTask {
    pub task_id: String,
    pub summary: String,
    pub severity: String,
}

/// A task that waits for others.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedTask {
    #[serde(flatten)]
    pub task: BoardTask,
    /// The blockers that hold it back, each with why.
    pub blocked_by: Vec<OpenBlocker>,
}

/// A claimed task: held now, or nobody holds it but its last claim ran out (`lapsed`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimedTask {
    #[serde(flatten)]
    pub task: BoardTask,
    pub holder: String,
    /// When the claim runs (or ran) out, RFC 3339.
    pub until: String,
    #[serde(default)]
    pub lapsed: bool,
}

/// A task whose fix awaits something.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingTask {
    #[serde(flatten)]
    pub task: BoardTask,
    /// What the fix awaits (the pending verdict's line).
    pub awaiting: String,
    #[serde(default)]
    pub fix_commit: Option<String>,
    #[serde(default)]
    pub fix_branch: Option<String>,
    #[serde(default)]
    pub by: Option<String>,
}

/// A closed task: by its closing verdict, or by its status (then `closed_at` is left out).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClosedTask {
    #[serde(flatten)]
    pub task: BoardTask,
    /// The closing verdict's line, or `status <status>`.
    pub verdict: String,
    #[serde(default)]
    pub fix_commit: Option<String>,
    #[serde(default)]
    pub closed_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<String>,
}

/// A task given back for good because no cell can set it up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WithdrawnTask {
    #[serde(flatten)]
    pub task: BoardTask,
    pub reason: String,
}

/// A parked task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParkedTask {
    #[serde(flatten)]
    pub task: BoardTask,
    pub reason: String,
    #[serde(default)]
    pub parked_by: Option<String>,
    /// When it was parked, RFC 3339.
    pub parked_at: String,
}

/// One task of a repository with its group, as [`BoardRepository::entries`] walks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    Open(&'a BoardTask),
    Blocked(&'a BlockedTask),
    Claimed(&'a ClaimedTask),
    Pending(&'a PendingTask),
    Closed(&'a ClosedTask),
    Withdrawn(&'a WithdrawnTask),
    Parked(&'a ParkedTask),
}

impl<'a> Entry<'a> {
    /// The group's name, one of [`GROUPS`].
    pub fn group(&self) -> &'static str {
        match self {
            Entry::Open(_) => GROUPS[0],
            Entry::Blocked(_) => GROUPS[1],
            Entry::Claimed(_) => GROUPS[2],
            Entry::Pending(_) => GROUPS[3],
            Entry::Closed(_) => GROUPS[4],
            Entry::Withdrawn(_) => GROUPS[5],
            Entry::Parked(_) => GROUPS[6],
        }
    }

    /// What the entry carries whatever its group.
    pub fn task(&self) -> &'a BoardTask {
        match *self {
            Entry::Open(t) => t,
            Entry::Blocked(t) => &t.task,
            Entry::Claimed(t) => &t.task,
            Entry::Pending(t) => &t.task,
            Entry::Closed(t) => &t.task,
            Entry::Withdrawn(t) => &t.task,
            Entry::Parked(t) => &t.task,
        }
    }
}

/// A vessel id seen in a claim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoardCell {
    pub vessel_id: String,
    /// Its latest claim or renewal, RFC 3339, or `null` if none had a time.
    #[serde(default)]
    pub last_heartbeat: Option<String>,
    /// The claimed tasks it holds now.
    #[serde(default)]
    pub holding: Vec<String>,
}

/// A dispatch of the goal board and its task's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoardGoal {
    pub dispatch_id: String,
    pub goal: String,
    pub task_id: String,
    /// `running`, `completed`, `failed`, or `not on the board`.
    pub state: String,
    /// The tasks its task waits for, nearest first, each blocker's own open blockers after it:
    /// the chain that must close before a cell is offered the goal's task.
    #[serde(default)]
    pub waits_for: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn task(id: &str) -> BoardTask {
        BoardTask {
            task_id: id.into(),
            summary: format!("summary of {id}"),
            severity: "HIGH".into(),
        }
    }

    fn keys(v: &Value) -> Vec<&str> {
        v.as_object().unwrap().keys().map(String::as_str).collect()
    }

    fn sorted(mut k: Vec<&str>) -> Vec<&str> {
        k.sort_unstable();
        k
    }

    fn full_repository() -> BoardRepository {
        BoardRepository {
            repository: "git.lan/app".into(),
            open: vec![task("agf_open")],
            blocked: vec![BlockedTask {
                task: task("agf_blocked"),
                blocked_by: vec![OpenBlocker {
                    task_id: "agf_open".into(),
                    state: "open".into(),
                }],
            }],
            claimed: vec![ClaimedTask {
                task: task("agf_claimed"),
                holder: "c1".into(),
                until: "2025-01-01T00:00:00.000Z".into(),
                lapsed: false,
            }],
            pending: vec![PendingTask {
                task: task("agf_pending"),
                awaiting: "fixed".into(),
                fix_commit: None,
                fix_branch: Some("fix/x".into()),
                by: None,
            }],
            closed: vec![
                ClosedTask {
                    task: task("agf_closed"),
                    verdict: "fixed".into(),
                    fix_commit: Some("abc".into()),
                    closed_by: Some("c1".into()),
                    closed_at: Some("2025-01-01T00:00:00.000Z".into()),
                },
                ClosedTask {
                    task: task("agf_status"),
                    verdict: "status closed".into(),
                    fix_commit: None,
                    closed_by: None,
                    closed_at: None,
                },
            ],
            withdrawn: vec![WithdrawnTask {
                task: task("agf_withdrawn"),
                reason: "ref refused".into(),
            }],
            parked: vec![ParkedTask {
                task: task("agf_parked"),
                reason: "ref refused".into(),
                parked_by: None,
                parked_at: "2025-01-01T00:00:00.000Z".into(),
            }],
        }
    }

    #[test]
    fn a_repository_serializes_every_group_under_its_name() {
        let v = serde_json::to_value(full_repository()).unwrap();
        let mut want = vec!["repository"];
        want.extend(GROUPS);
        assert_eq!(sorted(keys(&v)), sorted(want));
        let walked: Vec<&str> = full_repository()
            .entries()
            .map(|e| e.group())
            .collect::<Vec<_>>();
        let mut dedup = walked.clone();
        dedup.dedup();
        assert_eq!(dedup, GROUPS, "entries walk the groups in order");
        for e in full_repository().entries() {
            assert_eq!(
                v[e.group()]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|t| t["task_id"] == e.task().task_id.as_str())
                    .count(),
                1
            );
        }
    }

    #[test]
    fn each_entry_has_exactly_the_fields_the_ledger_answers() {
        let v = serde_json::to_value(full_repository()).unwrap();
        let base = ["task_id", "summary", "severity"];
        let want = |extra: &[&'static str]| sorted(base.iter().chain(extra).copied().collect());
        assert_eq!(sorted(keys(&v["open"][0])), want(&[]));
        assert_eq!(
            sorted(keys(&v["claimed"][0])),
            want(&["holder", "until", "lapsed"])
        );
        assert_eq!(
            sorted(keys(&v["pending"][0])),
            want(&["awaiting", "fix_commit", "fix_branch", "by"])
        );
        // Absent values the ledger answers as null stay present.
        assert_eq!(v["pending"][0]["fix_commit"], Value::Null);
        assert!(v["pending"][0].get("by").is_some());
        assert_eq!(
            sorted(keys(&v["closed"][0])),
            want(&["verdict", "fix_commit", "closed_by", "closed_at"])
        );
        // A task closed by its status has no closing verdict and no `closed_at`.
        assert_eq!(
            sorted(keys(&v["closed"][1])),
            want(&["verdict", "fix_commit", "closed_by"])
        );
        assert_eq!(v["closed"][1]["closed_by"], Value::Null);
        assert_eq!(sorted(keys(&v["withdrawn"][0])), want(&["reason"]));
        assert_eq!(
            sorted(keys(&v["parked"][0])),
            want(&["reason", "parked_by", "parked_at"])
        );
        assert_eq!(v["parked"][0]["parked_by"], Value::Null);
    }

    #[test]
    fn the_answer_has_the_ledgers_fields_and_reads_back_the_same() {
        let board = Board {
            origin_repository: None,
            repositories: vec![full_repository()],
            cells: vec![BoardCell {
                vessel_id: "c1".into(),
                last_heartbeat: None,
                holding: vec!["agf_claimed".into()],
            }],
            goals: vec![BoardGoal {
                dispatch_id: "dispatch_1".into(),
                goal: "fix it".into(),
                task_id: "agf_blocked".into(),
                state: "running".into(),
                waits_for: vec!["agf_open".into()],
            }],
            tasks: 8,
            truncated: false,
            verdicts_truncated: true,
            now: "2025-01-01T00:00:00.000Z".into(),
        };
        let v = serde_json::to_value(&board).unwrap();
        assert_eq!(
            sorted(keys(&v)),
            sorted(vec![
                "origin_repository",
                "repositories",
                "cells",
                "goals",
                "tasks",
                "truncated",
                "verdicts_truncated",
                "now",
            ])
        );
        assert_eq!(v["origin_repository"], Value::Null);
        assert_eq!(
            sorted(keys(&v["cells"][0])),
            sorted(vec!["vessel_id", "last_heartbeat", "holding"])
        );
        assert_eq!(v["cells"][0]["last_heartbeat"], Value::Null);
        assert_eq!(
            sorted(keys(&v["goals"][0])),
            sorted(vec!["dispatch_id", "goal", "task_id", "state", "waits_for"])
        );
        let back: Board = serde_json::from_value(v).unwrap();
        assert_eq!(back, board);
    }

    #[test]
    fn a_missing_optional_field_or_group_reads_as_none_or_empty() {
        let v = json!({
            "repositories": [{
                "repository": "git.lan/app",
                "pending": [{"task_id": "agf_1", "summary": "s", "severity": "LOW",
                             "awaiting": "fixed"}],
                "closed": [{"task_id": "agf_2", "summary": "s", "severity": "LOW",
                            "verdict": "fixed", "unknown": 1}],
                "parked": [{"task_id": "agf_3", "summary": "s", "severity": "LOW",
                            "reason": "r", "parked_at": "t"}],
            }],
            "cells": [{"vessel_id": "c1"}],
        });
        let b: Board = serde_json::from_value(v).unwrap();
        let repo = &b.repositories[0];
        assert!(repo.open.is_empty() && repo.claimed.is_empty() && repo.withdrawn.is_empty());
        assert_eq!(
            (
                &repo.pending[0].fix_commit,
                &repo.pending[0].fix_branch,
                &repo.pending[0].by
            ),
            (&None, &None, &None)
        );
        assert_eq!(
            (&repo.closed[0].closed_by, &repo.closed[0].closed_at),
            (&None, &None)
        );
        assert_eq!(repo.parked[0].parked_by, None);
        assert_eq!(b.cells[0].last_heartbeat, None);
        assert!(b.cells[0].holding.is_empty());
        assert!(b.goals.is_empty() && !b.truncated);
    }

    #[test]
    fn an_entry_of_the_wrong_shape_does_not_read() {
        for bad in [
            json!({"repositories": [{"repository": "r", "open": [{"task_id": 1}]}]}),
            json!({"repositories": [{"repository": "r", "claimed": [
                {"task_id": "a", "summary": "s", "severity": "LOW", "until": "t"}]}]}),
            json!({"repositories": {"repository": "r"}}),
            json!({}),
            json!({"error": "internal", "detail": "x"}),
        ] {
            assert!(
                serde_json::from_value::<Board>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }
}

//! Task dependencies (SPEC.md §Dependencies): which tasks a task waits for, and the one ready
//! rule every reader applies: the ledger's take and its index, `task pull`'s read-back path, the
//! board and `get_problems`.
//!
//! A task names its blockers when it is recorded (`blocked-by:` lines of its details) and gains
//! or loses one later by a `blocked` or `unblocked` row about it, whose `blocked_by:` line names
//! the blocker by its first id. A task is ready when every blocker is closed for good by a fix or
//! a retraction; a blocker that is open, claimed, pending, parked, cancelled or unknown holds it
//! back.

use super::finding::Finding;
use super::verdict::{NewVerdict, Standing, Verdict, VerdictKind, VerdictOrigin};

/// The read that lists what a take would hand out now (`task list --ready`).
pub const READY_SHAPE: &str = "taskReady";
/// The details line that names a blocker when a task is recorded (`_` is read as `-`).
pub const RECORDED_LINE: &str = "blocked-by";
/// The header line of a `blocked` or `unblocked` row: the blocker's first id.
pub const BLOCKER_FIELD: &str = "blocked_by";
/// The most blockers a task may have at once; a reader takes the first this many.
pub const MAX_BLOCKERS: usize = 32;

/// Whether `s` has the form of a finding id: `agf_` and up to 64 letters, digits, `_` or `-`.
pub fn is_task_id(s: &str) -> bool {
    s.strip_prefix("agf_").is_some_and(|rest| {
        (1..=64).contains(&rest.len())
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    })
}

/// Every word the `blocked-by:` lines of `details` name, in order, as written: ids are split at
/// commas and spaces. The ledger refuses a word that is no id; a reader skips it.
pub fn recorded_words(details: &str) -> Vec<&str> {
    details
        .lines()
        .filter_map(|line| {
            let (k, v) = line.trim_start().split_once(':')?;
            k.trim_end()
                .replace('_', "-")
                .eq_ignore_ascii_case(RECORDED_LINE)
                .then_some(v)
        })
        .flat_map(|v| v.split([',', ' ', '\t']).filter(|w| !w.is_empty()))
        .collect()
}

/// The blockers `task` has after `rows` (its own rows, any order), by their first ids, at most
/// [`MAX_BLOCKERS`]: those it was recorded with, then each `blocked` row adds one and each
/// `unblocked` row takes one away, in the ledger's order. `key` maps any id of a task to that
/// task's first id (`None` when the reader knows no such task: the id is kept as written, so an
/// unknown blocker still holds the task back).
pub fn blockers<'a>(
    task: &Finding,
    rows: impl IntoIterator<Item = &'a Verdict>,
    key: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    let key = |id: &str| key(id).unwrap_or_else(|| id.to_string());
    let mut out: Vec<String> = Vec::new();
    for word in recorded_words(&task.details) {
        let id = key(word);
        if is_task_id(word) && !task.has_id(&id) && !out.contains(&id) {
            out.push(id);
        }
    }
    let mut rows: Vec<&Verdict> = rows
        .into_iter()
        .filter(|v| matches!(v.kind, VerdictKind::Blocked | VerdictKind::Unblocked))
        .collect();
    rows.sort_by_key(|v| v.seq);
    for v in rows {
        let Some(id) = v.blocker.as_deref().map(key) else {
            continue;
        };
        out.retain(|b| *b != id);
        if v.kind == VerdictKind::Blocked && !task.has_id(&id) {
            out.push(id);
        }
    }
    out.truncate(MAX_BLOCKERS);
    out
}

/// Whether a blocker standing as `standing` (`None`: the reader knows no such task) holds its
/// dependents back, and in which word (anchor: ready-rule): only a fix or a retraction lets them
/// go; a cancelled blocker's work was never done, so its dependents wait for an operator.
pub fn holds_back(standing: Option<&Standing>) -> Option<&'static str> {
    match standing {
        None => Some("unknown"),
        Some(Standing::Open) => Some("open"),
        Some(Standing::Pending { .. }) => Some("pending"),
        Some(Standing::Parked { .. }) => Some("parked"),
        Some(Standing::Closed { verdict }) if verdict.kind == VerdictKind::Cancelled => {
            Some("cancelled")
        }
        Some(Standing::Closed { .. }) => None,
    }
}

/// One blocker that holds a task back, as the board and `get_problems` name it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OpenBlocker {
    pub task_id: String,
    /// Why it holds: `open`, `pending`, `parked`, `cancelled` or `unknown` ([`holds_back`]).
    pub state: String,
}

impl std::fmt::Display for OpenBlocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.state, self.task_id)
    }
}

/// The blockers that hold `task` back now, by [`blockers`] and [`holds_back`]: `find` answers a
/// task by any of its ids, as its first id and its standing, or `None` when the reader knows no
/// such task (it holds back as `unknown`).
pub fn open_blockers<'a>(
    task: &Finding,
    rows: impl IntoIterator<Item = &'a Verdict>,
    find: impl Fn(&str) -> Option<(String, Standing)>,
) -> Vec<OpenBlocker> {
    blockers(task, rows, |id| find(id).map(|(key, _)| key))
        .into_iter()
        .filter_map(|b| {
            let state = holds_back(find(&b).map(|(_, s)| s).as_ref())?;
            Some(OpenBlocker {
                task_id: b,
                state: state.to_string(),
            })
        })
        .collect()
}

/// "blocked by parked agf_1, open agf_2": the line a blocked task carries.
pub fn blocked_line(open: &[OpenBlocker]) -> String {
    let names: Vec<String> = open.iter().map(OpenBlocker::to_string).collect();
    format!("blocked by {}", names.join(", "))
}

/// The row that makes `task` wait for `blocker` (`Blocked`) or no longer (`Unblocked`).
pub fn edge_row<'a>(
    task: &'a Finding,
    kind: VerdictKind,
    blocker: &str,
    by: Option<String>,
    session: &str,
) -> NewVerdict<'a> {
    NewVerdict {
        finding: task,
        kind,
        reviewed_by: by,
        session: session.to_string(),
        origin: VerdictOrigin::Remote,
        lines: vec![(BLOCKER_FIELD, blocker.to_string())],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::tests::v;

    fn task(details: &str) -> Finding {
        let mut f = crate::finding::tests::finding("agf_1");
        f.details = details.into();
        f
    }

    fn edge(kind: VerdictKind, seq: i64, blocker: &str) -> Verdict {
        let mut r = v(kind, seq, None);
        r.blocker = Some(blocker.into());
        r
    }

    #[test]
    fn recorded_blockers_then_rows_in_the_ledgers_order() {
        let t = task("ref: main\nblocked-by: agf_a, agf_b\nBlocked_By: agf_c agf_1 nonsense\n");
        assert_eq!(
            recorded_words(&t.details),
            ["agf_a", "agf_b", "agf_c", "agf_1", "nonsense"]
        );
        let none = |_: &str| None;
        // Its own id and a word that is no id are no blockers.
        assert_eq!(blockers(&t, [], none), ["agf_a", "agf_b", "agf_c"]);
        let rows = [
            edge(VerdictKind::Unblocked, 5, "agf_a"),
            edge(VerdictKind::Blocked, 3, "agf_d"),
            edge(VerdictKind::Blocked, 7, "agf_a"),
            edge(VerdictKind::Unblocked, 8, "agf_d"),
        ];
        assert_eq!(blockers(&t, &rows, none), ["agf_b", "agf_c", "agf_a"]);
        // Another id of a known task counts as that task.
        let key = |id: &str| (id == "agf_c").then(|| "agf_b".to_string());
        assert_eq!(blockers(&t, [], key), ["agf_a", "agf_b"]);
    }

    #[test]
    fn only_a_fix_or_a_retraction_lets_dependents_go() {
        let closed = |kind| Standing::Closed {
            verdict: v(kind, 1, None),
        };
        assert_eq!(holds_back(Some(&closed(VerdictKind::Fixed))), None);
        assert_eq!(holds_back(Some(&closed(VerdictKind::Discarded))), None);
        assert_eq!(
            holds_back(Some(&closed(VerdictKind::Cancelled))),
            Some("cancelled")
        );
        assert_eq!(holds_back(Some(&Standing::Open)), Some("open"));
        let parked = Standing::Parked {
            verdict: v(VerdictKind::Parked, 1, None),
        };
        assert_eq!(holds_back(Some(&parked)), Some("parked"));
        assert_eq!(holds_back(None), Some("unknown"));
        assert!(is_task_id("agf_0123abcd") && !is_task_id("agf_") && !is_task_id("x"));
    }
}

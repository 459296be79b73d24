//! The board (SPEC.md §The board): `taskBoard`, one read model of the fleet's tasks answered
//! by the ledger itself, which `metabob-mcp task list` prints and `/board` shows.
//!
//! Nothing is stored and nothing is decided here: the rows are read page by page with the
//! ledger's own `conceptSearch`, each row with the client's owners (`Finding::read`,
//! `goals::store::read_task_row`), and a task's state is what its walk (`goals::walk::derive`),
//! the verdict precedence (`standing`) and the holder rule (`claims::holder`) say at read time.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use super::concepts::{MAX_LIMIT, Search};
use super::errors::ApiError;
use super::goals::reads::withdrawn_for_good;
use super::goals::store::{self, read_task_row};
use super::goals::walk::{self, Ending, Outcome, TaskRow, one_line};
use super::input::Fields;
use super::sql::Sql;
use metabob_wire::board::{
    BlockedTask, Board, BoardCell, BoardGoal, BoardRepository, BoardTask, ClaimedTask, ClosedTask,
    ParkedTask, PendingTask, WithdrawnTask,
};
use metabob_wire::claims;
use metabob_wire::depends::{MAX_BLOCKERS, OpenBlocker, open_blockers};
use metabob_wire::finding::{FINDING_SHAPE, Finding};
use metabob_wire::repo_identity::{identity_of_origin, vessel_aliases};
use metabob_wire::row::read_rows;
use metabob_wire::text::rfc3339_ms;
use metabob_wire::verdict::{Standing, VERDICT_SHAPE, Verdict, VerdictKind, standing};

/// The `/board` page: plain HTML, CSS and script, no build step and nothing fetched elsewhere.
/// The script and the style are files of their own, served beside the page, so the page's
/// Content-Security-Policy can allow scripts and styles from the ledger itself and nothing
/// inline (`routes.rs@board-headers`).
pub const PAGE: &str = include_str!("board.html");
/// `/board.js`: everything the page does.
pub const SCRIPT: &str = include_str!("board.js");
/// `/board.css`.
pub const STYLE: &str = include_str!("board.css");

/// Most tasks the board shows: the newest. `truncated` says when there were more.
// anchor: BOARD_TASKS
pub const BOARD_TASKS: usize = 1000;
/// Most finding rows read to find those tasks (findings that are no task are read and skipped).
pub const BOARD_FINDING_ROWS: i64 = 5_000;
/// Most verdict and claim rows weighed: the newest. `verdicts_truncated` says when there were
/// more, in which case an old task's oldest rows are not weighed.
pub const BOARD_VERDICT_ROWS: i64 = 20_000;
/// Goals listed: the newest dispatches.
pub const BOARD_GOALS: i64 = 200;
/// Longest text a board entry carries, in characters.
const TEXT_CHARS: usize = 200;
/// Longest `origin` a request may name, in bytes.
const ORIGIN_BYTES: usize = 2048;

/// A `taskBoard` request: the whole org, or one origin's repository.
pub struct BoardRequest {
    identity: Option<String>,
}

impl BoardRequest {
    /// The whole org's board.
    pub fn whole() -> Self {
        BoardRequest { identity: None }
    }

    pub fn parse(p: &Fields<'_>) -> Result<Self, ApiError> {
        Ok(BoardRequest {
            identity: origin_identity(p)?,
        })
    }

    /// The answer to `taskBoard`.
    pub fn run(self, conn: Sql<'_>, org: &str, now_ms: i64) -> Result<Value, ApiError> {
        serde_json::to_value(self.board(conn, org, now_ms)?).map_err(|source| ApiError::Serialize {
            what: "taskBoard",
            source,
        })
    }

    // anchor: task-board
    pub fn board(self, conn: Sql<'_>, org: &str, now_ms: i64) -> Result<Board, ApiError> {
        let (findings, findings_cut) = read_shape(conn, org, FINDING_SHAPE, BOARD_FINDING_ROWS)?;
        let mut tasks: Vec<Finding> = read_rows(&findings, "board task", Finding::read)
            .into_iter()
            .filter(|f| f.is_task() && self.wanted(f))
            .collect();
        tasks.sort_by_key(|f| std::cmp::Reverse(f.seq));
        let truncated = findings_cut || tasks.len() > BOARD_TASKS;
        tasks.truncate(BOARD_TASKS);
        let (rows, verdicts_cut) = read_shape(conn, org, VERDICT_SHAPE, BOARD_VERDICT_ROWS)?;
        let rows = read_rows(&rows, "board verdict", read_task_row);
        // Rows by the ids they name, so each task finds its own without scanning them all;
        // `concerns` (the client's rule) still decides.
        let mut by_id: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, r) in rows.iter().enumerate() {
            for id in &r.verdict.finding_ids {
                by_id.entry(id.as_str()).or_default().push(i);
            }
        }
        let weighed: Vec<(&Finding, Vec<TaskRow>)> = tasks
            .iter()
            .map(|task| {
                let mut mine: Vec<usize> = task
                    .finding_ids
                    .iter()
                    .flat_map(|id| by_id.get(id.as_str()).into_iter().flatten().copied())
                    .collect();
                mine.sort_unstable();
                mine.dedup();
                let mine: Vec<TaskRow> = mine
                    .into_iter()
                    .filter_map(|i| rows.get(i))
                    .filter(|r| r.verdict.concerns(task))
                    .cloned()
                    .collect();
                (task, mine)
            })
            .collect();
        // Every task's standing by each of its ids, for the blockers of the ones that wait.
        let mut standings: HashMap<&str, (String, Standing)> = HashMap::new();
        for (task, mine) in &weighed {
            let s = standing(mine.iter().map(|r| &r.verdict));
            for id in &task.finding_ids {
                standings.insert(id.as_str(), (task.id().to_string(), s.clone()));
            }
        }
        let mut board = Gathered::default();
        for (task, mine) in weighed {
            let waits = open_blockers(task, mine.iter().map(|r| &r.verdict), |id| {
                standings.get(id).cloned()
            });
            board.add(task, mine, waits, now_ms);
        }
        Ok(Board {
            goals: board.goals(conn, org)?,
            cells: board.cells(),
            repositories: board.repos.into_values().collect(),
            origin_repository: self.identity,
            tasks: tasks.len() as u64,
            truncated,
            verdicts_truncated: verdicts_cut,
            now: rfc3339_ms(now_ms),
        })
    }

    /// A task of the origin's repository, as `task pull` decides it, or any task for the org.
    fn wanted(&self, f: &Finding) -> bool {
        self.identity.as_deref().is_none_or(|id| {
            vessel_aliases(id).belongs(f.repo.as_deref().unwrap_or_default(), &f.files)
        })
    }
}

/// A read's optional `origin` (a clone URL, at most `ORIGIN_BYTES`), as the repository identity
/// `task pull` would give it: the board's and `taskReady`'s one field.
pub fn origin_identity(p: &Fields<'_>) -> Result<Option<String>, ApiError> {
    let origin = p
        .opt_str("origin")?
        .map(str::trim)
        .filter(|o| !o.is_empty());
    if origin.is_some_and(|o| o.len() > ORIGIN_BYTES) {
        return Err(ApiError::bad(format!(
            "origin: longer than {ORIGIN_BYTES} bytes"
        )));
    }
    Ok(origin.map(identity_of_origin))
}

/// The newest `cap` rows of `shape`, read with `conceptSearch` a page at a time, and whether
/// older ones were left.
fn read_shape(
    conn: Sql<'_>,
    org: &str,
    shape: &str,
    cap: i64,
) -> Result<(Vec<Value>, bool), ApiError> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < cap {
        let mut pointer = Map::new();
        pointer.insert("shape".into(), shape.into());
        pointer.insert("limit".into(), MAX_LIMIT.min(cap - offset).into());
        pointer.insert("offset".into(), offset.into());
        let page = Search::parse(&Fields::new(&pointer, ""))?.run(conn, org)?;
        let total = page.get("total").and_then(Value::as_i64).unwrap_or(0);
        let rows = match page.get("concepts") {
            Some(Value::Array(rows)) => rows.clone(),
            _ => Vec::new(),
        };
        offset += rows.len() as i64;
        out.extend(rows);
        if offset >= total {
            return Ok((out, false));
        }
    }
    Ok((out, true))
}

/// The board group (`board::GROUPS`) one task stands in, by the same weighing as the board's.
pub fn group_of(
    task: &Finding,
    rows: Vec<TaskRow>,
    waits: Vec<OpenBlocker>,
    now_ms: i64,
) -> &'static str {
    let mut one = Gathered::default();
    one.add(task, rows, waits, now_ms);
    let Some(repo) = one.repos.into_values().next() else {
        return "open";
    };
    repo.counts()
        .into_iter()
        .find(|(_, n)| *n > 0)
        .map_or("open", |(group, _)| group)
}

/// What the board gathers as it weighs each task.
#[derive(Default)]
struct Gathered {
    /// repository → its groups, in the order of their names.
    repos: BTreeMap<String, BoardRepository>,
    /// vessel id → (latest claim or renewal, task ids it holds now).
    cells: BTreeMap<String, (i64, Vec<String>)>,
    /// task id → the walk's state word, for the goals.
    states: BTreeMap<String, &'static str>,
    /// task id → the blockers that hold it back, for the goals' chains.
    waits: BTreeMap<String, Vec<String>>,
}

fn who(v: &Verdict) -> Option<String> {
    v.reviewed_by.as_deref().map(|w| one_line(w, TEXT_CHARS))
}

impl Gathered {
    /// Files `task` in its group; `waits` are the blockers that hold it back.
    fn add(&mut self, task: &Finding, rows: Vec<TaskRow>, waits: Vec<OpenBlocker>, now_ms: i64) {
        let verdicts: Vec<Verdict> = rows.iter().map(|r| r.verdict.clone()).collect();
        // A claim or its renewal is the cell's heartbeat.
        for v in verdicts.iter().filter(|v| v.kind == VerdictKind::Claimed) {
            if let Some(by) = &v.reviewed_by {
                let cell = self.cells.entry(one_line(by, TEXT_CHARS)).or_default();
                cell.0 = cell.0.max(v.created_ms);
            }
        }
        let held = claims::holder(&verdicts, now_ms);
        let walk = walk::derive(rows, withdrawn_for_good(task), now_ms);
        self.states.insert(
            task.id().to_string(),
            match walk.outcome {
                Outcome::Running => "running",
                Outcome::Completed => "completed",
                Outcome::Failed { .. } => "failed",
            },
        );
        if !waits.is_empty() {
            let ids = waits.iter().map(|b| b.task_id.clone()).collect();
            self.waits.insert(task.id().to_string(), ids);
        }
        let base = BoardTask {
            task_id: task.id().to_string(),
            summary: one_line(&task.summary, TEXT_CHARS),
            severity: task.severity.as_str().to_string(),
        };
        let name = one_line(
            task.repo.as_deref().unwrap_or("(no repository)"),
            TEXT_CHARS,
        );
        let repo = self
            .repos
            .entry(name)
            .or_insert_with_key(|name| BoardRepository::new(name.as_str()));
        match standing(&verdicts) {
            Standing::Closed { verdict } => repo.closed.push(ClosedTask {
                task: base,
                verdict: match (verdict.kind, &verdict.reason) {
                    (VerdictKind::Cancelled, Some(why)) => {
                        format!("cancelled: {}", one_line(why, TEXT_CHARS))
                    }
                    (kind, _) => kind.line(),
                },
                fix_commit: verdict.fix_commit.clone(),
                closed_by: who(&verdict),
                closed_at: Some(rfc3339_ms(verdict.created_ms)),
            }),
            Standing::Pending { verdict } => repo.pending.push(PendingTask {
                task: base,
                awaiting: verdict.kind.line(),
                fix_commit: verdict.fix_commit.clone(),
                fix_branch: verdict.fix_branch.clone(),
                by: who(&verdict),
            }),
            Standing::Parked { verdict } => repo.parked.push(ParkedTask {
                task: base,
                reason: walk::parked_reason(&verdict),
                parked_by: who(&verdict),
                parked_at: rfc3339_ms(verdict.created_ms),
            }),
            Standing::Open => match (&walk.outcome, held, walk.spans.last()) {
                (Outcome::Failed { error }, _, _) => repo.withdrawn.push(WithdrawnTask {
                    task: base,
                    reason: one_line(error, TEXT_CHARS),
                }),
                (_, Some(h), _) => {
                    // Holding is shown for open work only: a claim outlives the fix it led to.
                    let cell = self
                        .cells
                        .entry(one_line(&h.holder, TEXT_CHARS))
                        .or_default();
                    cell.1.push(task.id().to_string());
                    repo.claimed.push(ClaimedTask {
                        task: base,
                        holder: one_line(&h.holder, TEXT_CHARS),
                        until: rfc3339_ms(h.until_ms),
                        lapsed: h.until_ms < now_ms,
                    });
                }
                // Waiting comes before a lapsed claim: no cell may take it up again yet.
                _ if !waits.is_empty() && task.status.is_open() => repo.blocked.push(BlockedTask {
                    task: base,
                    blocked_by: waits,
                }),
                // Nobody holds it, but the last claim ran out rather than being given back:
                // shown as claimed and lapsed, since it is the stuck work an operator asks about.
                (_, None, Some(span)) if matches!(span.ending, Ending::Lapsed { .. }) => {
                    repo.claimed.push(ClaimedTask {
                        task: base,
                        holder: span.holder.clone(),
                        until: rfc3339_ms(span.until_ms),
                        lapsed: true,
                    });
                }
                // Closed by its status alone: no closing verdict, so no time it closed.
                _ if !task.status.is_open() => repo.closed.push(ClosedTask {
                    task: base,
                    verdict: format!("status {}", task.status),
                    fix_commit: None,
                    closed_by: task.recorded_by.clone(),
                    closed_at: None,
                }),
                _ => repo.open.push(base),
            },
        }
    }

    /// The cells, the latest heartbeat first.
    fn cells(&self) -> Vec<BoardCell> {
        let mut cells: Vec<_> = self.cells.iter().collect();
        cells.sort_by_key(|(id, (beat, _))| (std::cmp::Reverse(*beat), *id));
        cells
            .into_iter()
            .map(|(id, (beat, holding))| BoardCell {
                vessel_id: id.clone(),
                last_heartbeat: (*beat > 0).then(|| rfc3339_ms(*beat)),
                holding: holding.clone(),
            })
            .collect()
    }

    /// What `task_id` waits for, breadth first through each blocker's own open blockers, each
    /// task once and at most `MAX_BLOCKERS` of them.
    fn chain(&self, task_id: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut next = 0;
        let mut at = task_id.to_string();
        loop {
            for b in self.waits.get(&at).into_iter().flatten() {
                if out.len() < MAX_BLOCKERS && b != task_id && !out.contains(b) {
                    out.push(b.clone());
                }
            }
            let Some(b) = out.get(next) else {
                return out;
            };
            at = b.clone();
            next += 1;
        }
    }

    /// The newest dispatches and their task's state as its walk derives it here.
    fn goals(&self, conn: Sql<'_>, org: &str) -> Result<Vec<BoardGoal>, ApiError> {
        Ok(store::newest_dispatches(conn, org, BOARD_GOALS)?
            .into_iter()
            .map(|d| {
                let state = self.states.get(&d.task_id).copied();
                BoardGoal {
                    dispatch_id: d.id,
                    goal: one_line(&d.goal, TEXT_CHARS),
                    state: state.unwrap_or("not on the board").to_string(),
                    waits_for: self.chain(&d.task_id),
                    task_id: d.task_id,
                }
            })
            .collect())
    }
}

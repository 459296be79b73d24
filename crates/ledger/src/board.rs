//! The board (SPEC.md §The board): `taskBoard`, one read model of the fleet's tasks answered
//! by the ledger itself, which `metabob-mcp task list` prints and `/board` shows.
//!
//! Nothing is stored and nothing is decided here: the rows are read page by page with the
//! ledger's own `conceptSearch`, each row with the client's owners (`Finding::read`,
//! `goals::store::read_task_row`), and a task's state is what its walk (`goals::walk::derive`),
//! the verdict precedence (`standing`) and the holder rule (`claims::holder`) say at read time.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value, json};

use super::concepts::{MAX_LIMIT, Search};
use super::errors::ApiError;
use super::goals::reads::withdrawn_for_good;
use super::goals::store::{self, read_task_row};
use super::goals::walk::{self, Ending, Outcome, TaskRow, one_line};
use super::input::Fields;
use super::sql::Sql;
use metabob_wire::claims;
use metabob_wire::finding::{FINDING_SHAPE, Finding};
use metabob_wire::repo_identity::{identity_of_origin, vessel_aliases};
use metabob_wire::row::read_rows;
use metabob_wire::util::rfc3339_ms;
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
    pub fn parse(p: &Fields<'_>) -> Result<Self, ApiError> {
        let origin = p
            .opt_str("origin")?
            .map(str::trim)
            .filter(|o| !o.is_empty());
        if origin.is_some_and(|o| o.len() > ORIGIN_BYTES) {
            return Err(ApiError::bad(format!(
                "origin: longer than {ORIGIN_BYTES} bytes"
            )));
        }
        Ok(BoardRequest {
            identity: origin.map(identity_of_origin),
        })
    }

    // anchor: task-board
    pub fn run(self, conn: Sql<'_>, org: &str, now_ms: i64) -> Result<Value, ApiError> {
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
        let mut board = Board::default();
        for task in &tasks {
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
            board.add(task, mine, now_ms);
        }
        let goals = board.goals(conn, org)?;
        Ok(json!({
            "origin_repository": self.identity,
            "repositories": board.repositories(),
            "cells": board.cells(),
            "goals": goals,
            "tasks": tasks.len(),
            "truncated": truncated,
            "verdicts_truncated": verdicts_cut,
            "now": rfc3339_ms(now_ms),
        }))
    }

    /// A task of the origin's repository, as `task pull` decides it, or any task for the org.
    fn wanted(&self, f: &Finding) -> bool {
        self.identity.as_deref().is_none_or(|id| {
            vessel_aliases(id).belongs(f.repo.as_deref().unwrap_or_default(), &f.files)
        })
    }
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

/// What the board gathers as it weighs each task.
#[derive(Default)]
struct Board {
    /// repository → group → entries.
    repos: BTreeMap<String, BTreeMap<&'static str, Vec<Value>>>,
    /// vessel id → (latest claim or renewal, task ids it holds now).
    cells: BTreeMap<String, (i64, Vec<String>)>,
    /// task id → the walk's state word, for the goals.
    states: BTreeMap<String, &'static str>,
}

pub const GROUPS: [&str; 6] = [
    "open",
    "claimed",
    "pending",
    "closed",
    "withdrawn",
    "parked",
];

fn who(v: &Verdict) -> Value {
    v.reviewed_by
        .as_deref()
        .map_or(Value::Null, |w| one_line(w, TEXT_CHARS).into())
}

impl Board {
    fn add(&mut self, task: &Finding, rows: Vec<TaskRow>, now_ms: i64) {
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
        let mut entry = json!({
            "task_id": task.id(),
            "summary": one_line(&task.summary, TEXT_CHARS),
            "severity": task.severity.as_str(),
        });
        let group = match standing(&verdicts) {
            Standing::Closed { verdict } => {
                entry["verdict"] = verdict.kind.line().into();
                entry["fix_commit"] = verdict.fix_commit.clone().into();
                entry["closed_by"] = who(&verdict);
                entry["closed_at"] = rfc3339_ms(verdict.created_ms).into();
                "closed"
            }
            Standing::Pending { verdict } => {
                entry["awaiting"] = verdict.kind.line().into();
                entry["fix_commit"] = verdict.fix_commit.clone().into();
                entry["fix_branch"] = verdict.fix_branch.clone().into();
                entry["by"] = who(&verdict);
                "pending"
            }
            Standing::Parked { verdict } => {
                entry["reason"] = walk::parked_reason(&verdict).into();
                entry["parked_by"] = who(&verdict);
                entry["parked_at"] = rfc3339_ms(verdict.created_ms).into();
                "parked"
            }
            Standing::Open => match (&walk.outcome, held, walk.spans.last()) {
                (Outcome::Failed { error }, _, _) => {
                    entry["reason"] = one_line(error, TEXT_CHARS).into();
                    "withdrawn"
                }
                (_, Some(h), _) => {
                    // Holding is shown for open work only: a claim outlives the fix it led to.
                    let cell = self
                        .cells
                        .entry(one_line(&h.holder, TEXT_CHARS))
                        .or_default();
                    cell.1.push(task.id().to_string());
                    entry["holder"] = one_line(&h.holder, TEXT_CHARS).into();
                    entry["until"] = rfc3339_ms(h.until_ms).into();
                    entry["lapsed"] = (h.until_ms < now_ms).into();
                    "claimed"
                }
                // Nobody holds it, but the last claim ran out rather than being given back:
                // shown as claimed and lapsed, since it is the stuck work an operator asks about.
                (_, None, Some(span)) if matches!(span.ending, Ending::Lapsed { .. }) => {
                    entry["holder"] = span.holder.clone().into();
                    entry["until"] = rfc3339_ms(span.until_ms).into();
                    entry["lapsed"] = true.into();
                    "claimed"
                }
                _ if !task.status.is_open() => {
                    entry["verdict"] = format!("status {}", task.status).into();
                    entry["fix_commit"] = Value::Null;
                    entry["closed_by"] = task.recorded_by.clone().into();
                    "closed"
                }
                _ => "open",
            },
        };
        let repo = task.repo.as_deref().unwrap_or("(no repository)");
        self.repos
            .entry(one_line(repo, TEXT_CHARS))
            .or_default()
            .entry(group)
            .or_default()
            .push(entry);
    }

    fn repositories(&self) -> Vec<Value> {
        self.repos
            .iter()
            .map(|(repo, groups)| {
                let mut r = json!({ "repository": repo });
                for g in GROUPS {
                    r[g] = groups.get(g).cloned().unwrap_or_default().into();
                }
                r
            })
            .collect()
    }

    /// The cells, the latest heartbeat first.
    fn cells(&self) -> Vec<Value> {
        let mut cells: Vec<_> = self.cells.iter().collect();
        cells.sort_by_key(|(id, (beat, _))| (std::cmp::Reverse(*beat), *id));
        cells
            .into_iter()
            .map(|(id, (beat, holding))| {
                json!({
                    "vessel_id": id,
                    "last_heartbeat": (*beat > 0).then(|| rfc3339_ms(*beat)),
                    "holding": holding,
                })
            })
            .collect()
    }

    /// The newest dispatches and their task's state as its walk derives it here.
    fn goals(&self, conn: Sql<'_>, org: &str) -> Result<Vec<Value>, ApiError> {
        Ok(store::newest_dispatches(conn, org, BOARD_GOALS)?
            .into_iter()
            .map(|d| {
                let state = self.states.get(&d.task_id).copied();
                json!({
                    "dispatch_id": d.id,
                    "goal": one_line(&d.goal, TEXT_CHARS),
                    "task_id": d.task_id,
                    "state": state.unwrap_or("not on the board"),
                })
            })
            .collect())
    }
}

//! The goal board's rows in the ledger's SQLite file: dispatches and labels, and the read of a
//! dispatched task's own verdict and claim rows. Every statement filters by org.

use serde_json::Value;

use super::walk::TaskRow;
use crate::concepts::{load_concept, load_concepts};
use crate::errors::ApiError;
use crate::sql::{Row, Sql, args};
use metabob_wire::finding::Finding;
use metabob_wire::row::read_rows;
use metabob_wire::verdict::{VERDICT_SHAPE, Verdict};

/// Created with the rest of the schema (`db::migrate`); `IF NOT EXISTS`, so running it again
/// changes nothing.
// anchor: goal-schema
pub const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS goal_dispatches (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    org_id          TEXT NOT NULL REFERENCES orgs(id),
    task_concept    TEXT NOT NULL REFERENCES concepts(id),
    task_id         TEXT NOT NULL,
    goal            TEXT NOT NULL,
    operator        TEXT NOT NULL,
    tags            TEXT NOT NULL,
    learning_mode   TEXT,
    variables       TEXT NOT NULL,
    key_id          TEXT NOT NULL,
    key_admin       INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    client_claim    TEXT
);
CREATE INDEX IF NOT EXISTS goal_dispatches_by_org ON goal_dispatches(org_id, seq);
CREATE INDEX IF NOT EXISTS goal_dispatches_by_task ON goal_dispatches(org_id, task_id);
CREATE TABLE IF NOT EXISTS goal_labels (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    org_id          TEXT NOT NULL REFERENCES orgs(id),
    dispatch_id     TEXT NOT NULL,
    execution_id    TEXT,
    activity_id     TEXT,
    goal            TEXT NOT NULL,
    verdict         TEXT NOT NULL,
    confidence      REAL NOT NULL,
    labeler         TEXT NOT NULL,
    notes           TEXT NOT NULL,
    key_id          TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    client_claim    TEXT
);
CREATE INDEX IF NOT EXISTS goal_labels_by_dispatch ON goal_labels(org_id, dispatch_id, seq);
"#;

/// Most of a task's rows read: the newest, which decide where it stands. A task with more has
/// been written to by something other than cells, and its oldest rows are not weighed.
pub const MAX_TASK_ROWS: i64 = 500;

/// One dispatch as stored.
#[derive(Clone, Debug)]
pub struct Dispatch {
    pub id: String,
    pub task_concept: String,
    pub task_id: String,
    pub goal: String,
    pub operator: String,
    pub tags: Vec<String>,
    pub learning_mode: Option<String>,
    pub key_id: String,
    pub key_admin: bool,
    pub created_ms: i64,
}

const DISPATCH_COLS: &str = "id, task_concept, task_id, goal, operator, tags, learning_mode, \
     key_id, key_admin, created_at";

fn dispatch_row(r: &Row<'_>) -> Result<Dispatch, ApiError> {
    let tags: String = r.get(5)?;
    Ok(Dispatch {
        id: r.get(0)?,
        task_concept: r.get(1)?,
        task_id: r.get(2)?,
        goal: r.get(3)?,
        operator: r.get(4)?,
        // Written by this server as a JSON list of strings; anything else reads as none.
        tags: serde_json::from_str(&tags).unwrap_or_default(),
        learning_mode: r.get(6)?,
        key_id: r.get(7)?,
        key_admin: r.get::<i64>(8)? != 0,
        created_ms: r.get(9)?,
    })
}

/// What a new dispatch row holds besides what [`Dispatch`] reads back.
pub struct NewDispatch<'a> {
    pub row: &'a Dispatch,
    pub variables: &'a Value,
    pub claim: Option<&'a str>,
}

pub fn insert_dispatch(conn: Sql<'_>, org: &str, d: &NewDispatch<'_>) -> Result<(), ApiError> {
    let r = d.row;
    conn.execute(
        "INSERT INTO goal_dispatches (id, org_id, task_concept, task_id, goal, operator, tags,
             learning_mode, variables, key_id, key_admin, created_at, client_claim)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        args![
            r.id,
            org,
            r.task_concept,
            r.task_id,
            r.goal,
            r.operator,
            Value::from(r.tags.clone()).to_string(),
            r.learning_mode,
            d.variables.to_string(),
            r.key_id,
            i64::from(r.key_admin),
            r.created_ms,
            d.claim,
        ],
    )?;
    Ok(())
}

/// The dispatch `id` of `org`, or `None`: another org's reads exactly like none.
pub fn load_dispatch(conn: Sql<'_>, org: &str, id: &str) -> Result<Option<Dispatch>, ApiError> {
    conn.query_opt(
        &format!("SELECT {DISPATCH_COLS} FROM goal_dispatches WHERE org_id = ?1 AND id = ?2"),
        args![org, id],
        dispatch_row,
    )
}

/// The newest `limit` dispatches of `org`, newest first.
pub fn newest_dispatches(conn: Sql<'_>, org: &str, limit: i64) -> Result<Vec<Dispatch>, ApiError> {
    conn.query(
        &format!(
            "SELECT {DISPATCH_COLS} FROM goal_dispatches WHERE org_id = ?1 ORDER BY seq DESC LIMIT ?2"
        ),
        args![org, limit],
        dispatch_row,
    )
}

/// The dispatches whose task is one of `task_ids` (a claim row names the task's finding ids).
pub fn dispatches_of_tasks(
    conn: Sql<'_>,
    org: &str,
    task_ids: &[String],
) -> Result<Vec<Dispatch>, ApiError> {
    let mut out = Vec::new();
    let sql =
        format!("SELECT {DISPATCH_COLS} FROM goal_dispatches WHERE org_id = ?1 AND task_id = ?2");
    for id in task_ids {
        out.extend(conn.query(&sql, args![org, id], dispatch_row)?);
    }
    Ok(out)
}

/// The dispatch's task as the client reads it. Its concept was written with the dispatch row,
/// so a task that does not read back is a fault of this file, not an answer.
pub fn load_task(conn: Sql<'_>, org: &str, d: &Dispatch) -> Result<Finding, ApiError> {
    let concept = load_concept(conn, org, &d.task_concept)?;
    match Finding::read(&concept) {
        Ok(Some(f)) => Ok(f),
        _ => Err(ApiError::Internal(format!(
            "the task concept of dispatch {} does not read as a task",
            d.id
        ))),
    }
}

/// The task's verdict and claim rows, as the client gathers them: every verdict row naming one
/// of the task's ids (found through the id index, then checked by `Verdict::concerns`), joined
/// with the rows linked to its concept. Rows that fail validation are skipped.
pub fn task_rows(conn: Sql<'_>, org: &str, task: &Finding) -> Result<Vec<TaskRow>, ApiError> {
    let ids: Vec<String> = task
        .finding_ids
        .iter()
        .take(metabob_wire::row::MAX_IDS_PER_ROW)
        .cloned()
        .collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    // Two lookups, each on its own index, in one statement, and the join done here: joined in
    // SQL, a planner with no statistics walks every concept of the org to match the few linked
    // ones. Then every row they name in one more: a round trip each, not one per row.
    let (list, words) = crate::row_ids::id_list(5, &ids);
    let mut bound = args![org, VERDICT_SHAPE, MAX_TASK_ROWS, &task.concept_id].to_vec();
    bound.extend(words);
    let named: Vec<(String, i64)> = conn.query(
        &format!(
            "SELECT id, linked FROM (SELECT concept_id AS id, CAST(0 AS BIGINT) AS linked FROM row_ids
                 WHERE org_id = ?1 AND shape = ?2 AND finding_id IN {list}
                 ORDER BY seq DESC LIMIT ?3) AS named
             UNION ALL
             SELECT id, linked FROM (SELECT from_id AS id, CAST(1 AS BIGINT) AS linked FROM edges
                 WHERE org_id = ?1 AND to_id = ?4 AND edge_type = 'derived_from'
                 ORDER BY seq DESC LIMIT ?3) AS linked"
        ),
        &bound,
        |r| Ok((r.get::<String>(0)?, r.get::<i64>(1)?)),
    )?;
    let mut ids: Vec<String> = named.iter().map(|(id, _)| id.clone()).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut loaded = load_concepts(conn, org, &ids)?;
    // A row named by id is kept whatever its shape says (the reader judges it); a linked
    // concept only if it is a verdict row.
    let mut found: Vec<(i64, String)> = Vec::with_capacity(ids.len());
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    for (id, linked) in &named {
        let Some(c) = loaded.get(id) else {
            continue;
        };
        if *linked == 1 && c.get("shape").and_then(Value::as_str) != Some(VERDICT_SHAPE) {
            continue;
        }
        if let Some(seq) = c.get("seq").and_then(Value::as_i64)
            && seen.insert(id.as_str())
        {
            found.push((seq, id.clone()));
        }
    }
    found.sort_unstable_by_key(|(seq, _)| std::cmp::Reverse(*seq));
    found.truncate(MAX_TASK_ROWS as usize);
    let concepts: Vec<Value> = found
        .into_iter()
        .filter_map(|(_, id)| loaded.remove(&id))
        .collect();
    let read = |c: &Value| -> Result<Option<TaskRow>, metabob_wire::row::BadRow> {
        Ok(read_task_row(c)?.filter(|r| r.verdict.concerns(task)))
    };
    Ok(read_rows(&concepts, "goal task verdict", read))
}

/// One verdict or claim row as a task's walk reads it; `None` when it is no verdict. Which
/// task it concerns is the caller's question.
pub fn read_task_row(c: &Value) -> Result<Option<TaskRow>, metabob_wire::row::BadRow> {
    Ok(Verdict::read(c)?.map(|verdict| TaskRow { verdict }))
}

/// One label as stored.
pub struct NewLabel<'a> {
    pub id: &'a str,
    pub dispatch_id: &'a str,
    pub execution_id: Option<&'a str>,
    pub activity_id: Option<&'a str>,
    pub goal: &'a str,
    pub verdict: &'a str,
    pub confidence: f64,
    pub labeler: &'a str,
    pub notes: &'a str,
    pub key_id: &'a str,
    pub created_ms: i64,
    pub claim: Option<&'a str>,
}

pub fn insert_label(conn: Sql<'_>, org: &str, l: &NewLabel<'_>) -> Result<(), ApiError> {
    conn.execute(
        "INSERT INTO goal_labels (id, org_id, dispatch_id, execution_id, activity_id, goal, verdict,
             confidence, labeler, notes, key_id, created_at, client_claim)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        args![
            l.id,
            org,
            l.dispatch_id,
            l.execution_id,
            l.activity_id,
            l.goal,
            l.verdict,
            l.confidence,
            l.labeler,
            l.notes,
            l.key_id,
            l.created_ms,
            l.claim,
        ],
    )?;
    Ok(())
}

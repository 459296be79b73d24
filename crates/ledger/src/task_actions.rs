//! One task, for an operator (SPEC.md §Operator actions): `taskHistory`, every row about it in
//! order with its attempts, and `taskAction_write`, the board's reopen, release and cancel.
//! Which verdict an action writes, and when it applies, is `metabob_wire::task_action`'s rule;
//! this file reads the task's rows and writes that verdict in one write.

use serde_json::Value;

use super::board::group_of;
use super::concepts::{CreateConcept, Link, load_concept};
use super::db::Writer;
use super::errors::ApiError;
use super::goals::reads::withdrawn_for_good;
use super::goals::store::task_rows;
use super::goals::walk::{self, Ending, one_line};
use super::input::Fields;
use super::sql::{Sql, args};
use metabob_wire::finding::{FINDING_SHAPE, Finding};
use metabob_wire::task_action::{
    ActionDone, Attempt, HistoryEvent, HistoryTask, MAX_REASON_CHARS, Refused, TaskAction,
    TaskHistory, decide,
};
use metabob_wire::text::rfc3339_ms;
use metabob_wire::verdict::{Verdict, VerdictKind, link_pointer};

/// Longest task id a request may name.
const ID_CHARS: usize = 200;
/// Longest text an event or attempt carries, in characters.
const TEXT_CHARS: usize = 2000;
/// Finding rows naming one id that are weighed to find the task.
const ROWS_PER_ID: i64 = 20;

fn task_field(p: &Fields<'_>) -> Result<String, ApiError> {
    let id = p.req_str("task")?.trim();
    if id.is_empty() || id.chars().count() > ID_CHARS || id.chars().any(char::is_control) {
        return Err(ApiError::bad(format!(
            "task: a task id (agf_…) or concept id of at most {ID_CHARS} characters"
        )));
    }
    Ok(id.to_string())
}

/// The task `id` names in `org`: by concept id, or the first task row naming that `agf_` id.
pub(crate) fn find_task(conn: Sql<'_>, org: &str, id: &str) -> Result<Option<Finding>, ApiError> {
    let concepts = if id.starts_with("concept_") {
        vec![id.to_string()]
    } else {
        conn.query(
            "SELECT concept_id FROM row_ids
               WHERE org_id = ?1 AND finding_id = ?2 AND shape = ?3
               ORDER BY seq LIMIT ?4",
            args![org, id, FINDING_SHAPE, ROWS_PER_ID],
            |r| r.get::<String>(0),
        )?
    };
    for c in concepts {
        let concept = match load_concept(conn, org, &c) {
            Ok(concept) => concept,
            Err(ApiError::ConceptNotFound { .. }) => continue,
            Err(e) => return Err(e),
        };
        if let Ok(Some(f)) = Finding::read(&concept)
            && f.is_task()
            && (id.starts_with("concept_") || f.has_id(id))
        {
            return Ok(Some(f));
        }
    }
    Ok(None)
}

fn verdicts(conn: Sql<'_>, org: &str, task: &Finding) -> Result<Vec<Verdict>, ApiError> {
    let mut rows: Vec<Verdict> = task_rows(conn, org, task)?
        .into_iter()
        .map(|r| r.verdict)
        .collect();
    rows.sort_by_key(|v| (v.seq, v.created_ms));
    Ok(rows)
}

/// `taskHistory`: `{task}` → [`TaskHistory`].
pub struct HistoryRequest {
    task: String,
}

impl HistoryRequest {
    pub fn parse(p: &Fields<'_>) -> Result<Self, ApiError> {
        Ok(HistoryRequest {
            task: task_field(p)?,
        })
    }

    // anchor: task-history
    pub fn run(self, conn: Sql<'_>, org: &str, now_ms: i64) -> Result<Value, ApiError> {
        let history = match find_task(conn, org, &self.task)? {
            None => TaskHistory {
                now: rfc3339_ms(now_ms),
                ..TaskHistory::default()
            },
            Some(task) => history(conn, org, &task, now_ms)?,
        };
        serde_json::to_value(history).map_err(|source| ApiError::Serialize {
            what: "taskHistory",
            source,
        })
    }
}

fn history(conn: Sql<'_>, org: &str, task: &Finding, now_ms: i64) -> Result<TaskHistory, ApiError> {
    let rows = task_rows(conn, org, task)?;
    let mut verdicts: Vec<Verdict> = rows.iter().map(|r| r.verdict.clone()).collect();
    verdicts.sort_by_key(|v| (v.seq, v.created_ms));
    let waits = crate::task_edges::waits(conn, org, task)?;
    let group = group_of(task, rows.clone(), waits, now_ms);
    let walk = walk::derive(rows, withdrawn_for_good(task), now_ms);
    let text = |s: &str| one_line(s, TEXT_CHARS);
    let attempts = walk
        .spans
        .iter()
        .map(|s| {
            let ended = s.ending.ended_ms();
            Attempt {
                vessel_id: s.holder.clone(),
                began_at: rfc3339_ms(s.began_ms),
                ended_at: ended.map(rfc3339_ms),
                duration_ms: Some(ended.unwrap_or(now_ms).saturating_sub(s.began_ms).max(0)),
                ending: ending_word(&s.ending).to_string(),
                reason: s.ending.failure_mode().map(|r| text(&r)),
            }
        })
        .collect();
    let events = verdicts
        .iter()
        .map(|v| HistoryEvent {
            at: rfc3339_ms(v.created_ms),
            kind: v.kind.line(),
            by: v.reviewed_by.as_deref().map(text),
            detail: event_detail(v).map(|d| text(&d)),
        })
        .collect();
    Ok(TaskHistory {
        task: Some(HistoryTask {
            task_id: task.id().to_string(),
            concept_id: task.concept_id.clone(),
            summary: text(&task.summary),
            severity: task.severity.as_str().to_string(),
            repository: task.repo.as_deref().map(text),
            group: group.to_string(),
            recorded_by: task.recorded_by.as_deref().map(text),
            recorded_at: rfc3339_ms(task.created_ms),
        }),
        attempts,
        events,
        now: rfc3339_ms(now_ms),
    })
}

fn ending_word(e: &Ending) -> &'static str {
    match e {
        Ending::Running => "running",
        Ending::Pending => "pending",
        Ending::Released { .. } => "released",
        Ending::Withdrawn { .. } => "withdrawn",
        Ending::Fixed { .. } => "fixed",
        Ending::Discarded { .. } => "discarded",
        Ending::Cancelled { .. } => "cancelled",
        Ending::Lapsed { .. } => "lapsed",
    }
}

/// What a row says beyond its kind: a claim's length, a fix's commit, a reason.
fn event_detail(v: &Verdict) -> Option<String> {
    let mut parts = Vec::new();
    if v.kind == VerdictKind::Claimed {
        parts.push(format!(
            "{} min",
            v.claim_minutes
                .unwrap_or(metabob_wire::claims::DEFAULT_CLAIM_MINUTES)
        ));
    }
    if let Some(sha) = &v.fix_commit {
        parts.push(format!("commit {sha}"));
    }
    if let Some(branch) = &v.fix_branch {
        parts.push(format!("branch {branch}"));
    }
    if let Some(reason) = &v.reason {
        parts.push(reason.clone());
    }
    if !v.tried_by.is_empty() {
        parts.push(format!("tried by {}", v.tried_by.join(", ")));
    }
    if let Some(blocker) = &v.blocker {
        parts.push(format!("blocker {blocker}"));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// `taskAction_write`: `{task, action, reason?, by?}`, decided and written on the writer.
pub struct ActionRequest {
    task: String,
    action: TaskAction,
    reason: Option<String>,
    by: Option<String>,
    claim: Option<Value>,
}

impl ActionRequest {
    pub fn parse(p: &Fields<'_>, claim: Option<&Value>) -> Result<Self, ApiError> {
        let action = p.req_str("action")?;
        let action = TaskAction::parse(action)
            .ok_or_else(|| ApiError::bad("action: one of reopen, release, cancel"))?;
        let bounded = |name: &str, chars: usize| -> Result<Option<String>, ApiError> {
            let v = p.opt_str(name)?.map(str::trim).filter(|v| !v.is_empty());
            if v.is_some_and(|v| v.chars().count() > chars || v.chars().any(char::is_control)) {
                return Err(ApiError::bad(format!(
                    "{name}: one line of at most {chars} characters"
                )));
            }
            Ok(v.map(str::to_owned))
        };
        Ok(ActionRequest {
            task: task_field(p)?,
            action,
            reason: bounded("reason", MAX_REASON_CHARS)?,
            by: bounded("by", ID_CHARS)?,
            claim: claim.cloned(),
        })
    }

    /// Decides and writes the action for a key labelled `label` (anchor: run-task-action): the
    /// task's rows are read and its verdict written in one write, after the holder locks of its
    /// ids, so no take or renewal comes between.
    pub fn run(&self, w: &mut Writer, org: &str, label: Option<&str>) -> Result<Value, ApiError> {
        let Some(task) = find_task(w.sql(), org, &self.task)? else {
            return Ok(serde_json::json!({
                "outcome": "not_found",
                "detail": format!("no task {} in this key's org", one_line(&self.task, ID_CHARS)),
            }));
        };
        let now = w.tick_holding(org, &task.finding_ids)?;
        let rows = verdicts(w.sql(), org, &task)?;
        let by = self
            .by
            .clone()
            .or_else(|| label.map(|l| format!("operator {}", one_line(l, ID_CHARS))))
            .unwrap_or_else(|| "an operator".to_string());
        let session = format!("operator-{now}");
        let (verdict, done) = match decide(
            self.action,
            &task,
            &rows,
            &by,
            &session,
            self.reason.as_deref(),
            now,
        ) {
            Ok(decided) => decided,
            Err(refused) => return Ok(refused_body(&refused)),
        };
        let written = CreateConcept::parse(
            &Fields::composed(&verdict.to_pointer()),
            self.claim.as_ref(),
        )?
        .insert(w.sql(), org, now)?;
        let id = written
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let link = link_pointer(id, &task.concept_id);
        Link::parse(&Fields::composed(&link), self.claim.as_ref())?.run(w, org)?;
        let done = ActionDone {
            task_id: task.id().to_string(),
            action: self.action,
            done,
        };
        let mut body = serde_json::to_value(done).map_err(|source| ApiError::Serialize {
            what: "taskAction_write",
            source,
        })?;
        body["outcome"] = "done".into();
        Ok(body)
    }
}

fn refused_body(r: &Refused) -> Value {
    serde_json::json!({ "outcome": r.outcome(), "detail": r.to_string() })
}

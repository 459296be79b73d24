//! The goal board's reads: `goalWalkState`, `executionTraceList` and `activityExecutionTrace`,
//! each derived on read from the dispatched task's own rows (`walk::derive`).

use crate::sql::Sql;
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::store::{self, Dispatch};
use super::walk::{self, Outcome, Span, Walk, claim_of_execution, execution_id, one_line};
use super::{ID_CHARS, not_found};
use crate::concepts::load_concept;
use crate::errors::ApiError;
use crate::resolve::Answer;
use metabob_wire::finding::Finding;
use metabob_wire::header::find_line;
use metabob_wire::refname::validate_ref;
use metabob_wire::text::{rfc3339_ms, sha256_hex};
use metabob_wire::verdict::{Verdict, VerdictKind};

/// The walk log's last lines a walk state carries.
pub const WALK_LOG_LINES: usize = 60;
/// Dispatches whose executions the listing reads: the newest. Older dispatches' executions are
/// not listed (nor counted in `total`).
pub const LISTED_DISPATCHES: i64 = 200;

/// A dispatch's task and its walk at `now_ms`.
fn walk_of(
    conn: Sql<'_>,
    org: &str,
    d: &Dispatch,
    now_ms: i64,
) -> Result<(Finding, Walk), ApiError> {
    let task = store::load_task(conn, org, d)?;
    let rows = store::task_rows(conn, org, &task)?;
    let walk = walk::derive(rows, withdrawn_for_good(&task), now_ms);
    Ok((task, walk))
}

/// The pull's own decision: a ref it refuses can never be set up, so a withdrawal of the task
/// is final rather than a return to the board.
pub fn withdrawn_for_good(task: &Finding) -> bool {
    find_line(&task.details, "ref").is_some_and(|r| validate_ref(r).is_err())
}

/// `key:` and the first 8 hex of the key id's SHA-256: names a key without revealing its id.
fn principal(d: &Dispatch) -> Value {
    let digest = sha256_hex(d.key_id.as_bytes());
    json!({
        "kind": "key",
        "operator": d.key_admin,
        "tag": format!("key:{}", &digest[..8]),
    })
}

// anchor: goal-walk-state
pub fn walk_state(conn: Sql<'_>, org: &str, id: &str, now_ms: i64) -> Result<Answer, ApiError> {
    let Some(d) = store::load_dispatch(conn, org, id)? else {
        return Ok(not_found(
            "dispatch_not_found",
            "dispatchId",
            id,
            "no such dispatch in this key's org",
        ));
    };
    let (task, walk) = walk_of(conn, org, &d, now_ms)?;
    let (status, reached, error) = match &walk.outcome {
        Outcome::Running => ("running", Value::Null, Value::Null),
        Outcome::Completed => ("completed", Value::Bool(true), Value::Null),
        Outcome::Failed { error } => ("failed", Value::Bool(false), Value::from(error.clone())),
    };
    let repository = task.repo.as_deref().unwrap_or("(no repository)");
    let mut log = vec![format!(
        "{} dispatched by {}: task {} on {}",
        rfc3339_ms(d.created_ms),
        one_line(&d.operator, ID_CHARS),
        task.id(),
        one_line(repository, ID_CHARS)
    )];
    log.extend(
        walk.log
            .iter()
            .map(|(at, text)| format!("{} {text}", rfc3339_ms(*at))),
    );
    let skip = log.len().saturating_sub(WALK_LOG_LINES);
    let execution = walk.spans.last().map(|s| execution_id(&s.claim));
    Ok(Answer::Json(
        StatusCode::OK,
        json!({
            "dispatchId": d.id,
            "status": status,
            "reached": reached,
            "executionId": execution,
            "operator": d.operator,
            "selectedTemplateId": null,
            "error": error,
            "goal": d.goal,
            "learningMode": d.learning_mode,
            "tags": d.tags,
            "taskId": d.task_id,
            "conceptId": d.task_concept,
            "walkLog": log.split_off(skip),
            "principal": principal(&d),
            "learning": null,
        }),
    ))
}

/// An execution's tags: who dispatched it, how it ended, the claim's session, the dispatch's own.
fn tags(d: &Dispatch, span: &Span) -> Vec<String> {
    let mut tags = vec![format!("operator:{}", d.operator)];
    if let Some(reached) = span.ending.reached() {
        tags.push(format!("reached:{reached}"));
    }
    if let Some(session) = &span.session {
        tags.push(format!("session:{session}"));
    }
    tags.extend(d.tags.iter().cloned());
    tags
}

/// One execution as the listing shows it.
fn execution_row(d: &Dispatch, span: &Span) -> Value {
    let ended = span.ending.ended_ms();
    json!({
        "execution_id": execution_id(&span.claim),
        "status": span.ending.status(),
        "activity_template_id": null,
        "vessel_id": span.holder,
        "dispatch_id": d.id,
        "duration_ms": ended.map(|e| (e - span.began_ms).max(0)),
        "created_at": rfc3339_ms(span.began_ms),
        "ended_at": ended.map(rfc3339_ms),
        "failure_mode": span.ending.failure_mode(),
        "tags": tags(d, span),
    })
}

/// One row of a trace's task sequence. `name`, `success` and `failure_mode` repeat what the
/// event says in the fields a trace reader (`execution_trace`) prints.
fn task_row(seq: usize, e: &walk::Event) -> Value {
    let mut row = json!({
        "seq": seq,
        "event": e.kind.as_str(),
        "holder": e.holder,
        "at": rfc3339_ms(e.at_ms),
        "detail": e.detail,
        "name": format!("{} by {}", e.kind.as_str(), e.holder),
    });
    use walk::EventKind::*;
    match e.kind {
        Fixed => row["success"] = Value::Bool(true),
        Released | Withdrawn | Discarded | Cancelled => {
            row["success"] = Value::Bool(false);
            row["failure_mode"] = Value::from(e.detail.clone());
        }
        Claimed | Renewed | Pending => {}
    }
    row
}

// anchor: execution-trace-list
pub fn trace_list(conn: Sql<'_>, org: &str, limit: usize, now_ms: i64) -> Result<Answer, ApiError> {
    let mut rows: Vec<(i64, String, Value)> = Vec::new();
    for d in store::newest_dispatches(conn, org, LISTED_DISPATCHES)? {
        let (_, walk) = walk_of(conn, org, &d, now_ms)?;
        for span in &walk.spans {
            rows.push((span.began_ms, span.claim.clone(), execution_row(&d, span)));
        }
    }
    // Newest first; the claim id breaks a tie so the order is the same on every read.
    rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
    let total = rows.len();
    let executions: Vec<Value> = rows.into_iter().take(limit).map(|(_, _, v)| v).collect();
    Ok(Answer::Json(
        StatusCode::OK,
        json!({ "executions": executions, "total": total }),
    ))
}

/// The claim row an execution id names, when it is a claim of this org.
fn claim_row(conn: Sql<'_>, org: &str, claim: &str) -> Result<Option<Verdict>, ApiError> {
    let concept = match load_concept(conn, org, claim) {
        Ok(c) => c,
        Err(ApiError::ConceptNotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Verdict::read(&concept)
        .ok()
        .flatten()
        .filter(|v| v.kind == VerdictKind::Claimed))
}

// anchor: activity-execution-trace
pub fn trace_read(conn: Sql<'_>, org: &str, id: &str, now_ms: i64) -> Result<Answer, ApiError> {
    let missing = || {
        not_found(
            "execution_not_found",
            "executionId",
            id,
            "no such execution in this key's org",
        )
    };
    let Some(claim) = claim_of_execution(id) else {
        return Ok(missing());
    };
    let Some(row) = claim_row(conn, org, &claim)? else {
        return Ok(missing());
    };
    for d in store::dispatches_of_tasks(conn, org, &row.finding_ids)? {
        let (_, walk) = walk_of(conn, org, &d, now_ms)?;
        let Some(span) = walk.spans.iter().find(|s| s.claim == claim) else {
            continue;
        };
        let mut body = execution_row(&d, span);
        body["composition_chain"] = json!([]);
        let tasks: Vec<Value> = span
            .events
            .iter()
            .enumerate()
            .map(|(i, e)| task_row(i + 1, e))
            .collect();
        body["execution_trace"] = json!({ "tasks": tasks });
        return Ok(Answer::Json(StatusCode::OK, body));
    }
    Ok(missing())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::goals::walk::Ending;

    #[test]
    fn a_running_span_has_no_end_and_a_fixed_one_is_reached() {
        let d = Dispatch {
            id: "dispatch_1".into(),
            task_concept: "concept_t".into(),
            task_id: "agf_1".into(),
            goal: "g".into(),
            operator: "ops".into(),
            tags: vec!["team:a".into()],
            learning_mode: None,
            key_id: "key_1".into(),
            key_admin: false,
            created_ms: 0,
        };
        let mut span = Span {
            claim: "concept_ab".into(),
            holder: "cell".into(),
            began_ms: 1000,
            until_ms: 61_000,
            session: Some("s1".into()),
            events: Vec::new(),
            ending: Ending::Running,
        };
        let row = execution_row(&d, &span);
        assert_eq!(row["execution_id"], "exec_ab");
        assert_eq!(row["status"], "running");
        assert!(row["ended_at"].is_null() && row["duration_ms"].is_null());
        assert_eq!(row["tags"], json!(["operator:ops", "session:s1", "team:a"]));
        span.ending = Ending::Fixed { at_ms: 4000 };
        let row = execution_row(&d, &span);
        assert_eq!(
            (row["status"].as_str(), row["duration_ms"].as_i64()),
            (Some("completed"), Some(3000))
        );
        assert_eq!(row["tags"][1], "reached:true");
        assert_eq!(principal(&d)["tag"].as_str().map(str::len), Some(12));
    }
}

//! provide_feedback: an agent's verdict on a finished dispatch, written once as an oracle label
//! (`goal_verification_label_write`). The label is always `automated`: the tool runs on an
//! agent's key, and a human label is ground truth to goal-host.

use std::fmt::Write as _;

use serde_json::json;

use super::record::{Record, dispatch_id_arg, read_record};
use super::{FeedbackArgs, given};
use crate::ctx::{Ctx, Here};
use crate::tools::inspect::text;
use crate::tools::inspect::trace::{LIST, Row, bare_execution_id, listed_rows};
use crate::tools::{CallResult, Reply, attached, resolve_failed};
use metabob_net::attachment::{Attachment, ResolveError};

const TOOL: &str = "provide_feedback";
const LABEL_WRITE: &str = "goal_verification_label_write";
/// How many of the newest traces are searched for the execution's activity.
const LISTED: u32 = 50;
const DEFAULT_CONFIDENCE: f64 = 0.9;
/// The activity a label names when the goal ran on the ledger's task board, which selects no
/// template (anchor: TASK_BOARD_ACTIVITY).
const TASK_BOARD_ACTIVITY: &str = "task-board";

pub async fn provide_feedback(_ctx: &Ctx, here: &Here<'_>, a: FeedbackArgs) -> Reply {
    match feedback(here, &a).await {
        Ok(reply) => reply.with_result(CallResult::Ok),
        Err(reply) => reply,
    }
}

async fn feedback(here: &Here<'_>, a: &FeedbackArgs) -> Result<Reply, Reply> {
    let id = dispatch_id_arg(TOOL, &a.dispatch_id)?;
    let rationale = a.rationale.trim();
    if rationale.is_empty() {
        return Err(not_written(
            "rationale is empty: give the evidence behind the verdict",
        ));
    }
    let confidence = a.confidence.unwrap_or(DEFAULT_CONFIDENCE);
    if !(0.0..=1.0).contains(&confidence) {
        return Err(not_written("confidence must be between 0 and 1"));
    }
    let att = attached(here, TOOL).await?;
    let rec = read_record(att, &id, false).await.map_err(|f| {
        let mut r = f.line(TOOL, &id);
        r.text.push_str("; no label was written");
        r.with_result(CallResult::Error)
    })?;
    if rec.running() {
        return Err(not_written(&format!(
            "dispatch {id} is still running; label it once goal_status shows it finished"
        )));
    }
    let Some(goal) = rec
        .goal
        .clone()
        .or_else(|| given(&a.goal).map(str::to_string))
    else {
        return Err(not_written(&format!(
            "the record of {id} carries no goal text; pass it as goal"
        )));
    };
    let Some(exec) = rec.execution_id.clone() else {
        return Err(elsewhere(&format!("dispatch {id} records no execution")));
    };
    let activity = activity(att, &rec, &exec).await?;
    let claim = att.claim();
    let notes = format!(
        "{rationale} [operator: {}] [session: {}]",
        claim.operator, claim.session
    );
    let data = json!({
        "dispatch_id": id,
        "execution_id": exec,
        "activity_id": activity.id,
        "goal": goal,
        "verdict": a.verdict.label(),
        "confidence": confidence,
        "labeler": "automated",
        "notes": notes,
    });
    let pointer = json!({"type": LABEL_WRITE, "labelData": data});
    let body = match att.resolve(pointer).await.and_then(|r| r.ok(LABEL_WRITE)) {
        Ok(body) => body,
        Err(e) => return Err(write_failed(e)),
    };
    let label = body
        .get("label")
        .and_then(|l| text(l, "id"))
        .unwrap_or_else(|| "(the answer named no label id)".into());
    let mut out = format!(
        "Label {label} stored for dispatch {id}: verdict {}, confidence {confidence}, labeler \
         automated.\nexecution: {exec}\nactivity: {}{}\n",
        a.verdict.label(),
        activity.id,
        activity.source
    );
    let _ = write!(
        out,
        "notes: {notes}\nIt joins the oracle corpus, read by offline audit; no reach-gate acts \
         on it."
    );
    Ok(Reply::ok(out))
}

/// The activity a label names, and where it came from.
struct Activity {
    id: String,
    source: &'static str,
}

/// The record's selected template; else the activity on the execution's row among the newest
/// traces; else, for a dispatch the goal board mapped onto a task, the task board.
async fn activity(att: &Attachment, rec: &Record, exec: &str) -> Result<Activity, Reply> {
    if let Some(t) = &rec.selected_template {
        return Ok(Activity {
            id: t.clone(),
            source: " (the record's selectedTemplateId)",
        });
    }
    let listed = att
        .resolve(json!({"type": LIST, "limit": LISTED}))
        .await
        .and_then(|r| r.ok(LIST));
    let bare = bare_execution_id(exec);
    let from_row = listed.ok().and_then(|body| {
        listed_rows(&body)?
            .iter()
            .take(LISTED as usize)
            .filter_map(Row::parse)
            .find(|r| r.id == bare)?
            .template
    });
    if let Some(t) = from_row {
        return Ok(Activity {
            id: t,
            source: " (the record names no selected template, so this is the activity on the \
                     execution's row among the newest 50 traces)",
        });
    }
    if rec.task_id.is_some() {
        return Ok(Activity {
            id: TASK_BOARD_ACTIVITY.into(),
            source: " (neither the record nor the execution's trace row names a template, as on \
                     the embedded ledger, whose goal board selects none: the goal ran as a task \
                     on the task board, which the label names as its activity)",
        });
    }
    Err(elsewhere("no activity is named for its execution"))
}

/// A refusal before anything was written.
fn not_written(why: &str) -> Reply {
    Reply::error(format!("{TOOL}: {why}; no label was written")).with_result(CallResult::NotApplied)
}

/// No label can name what ran: the assessment belongs in a finding instead.
fn elsewhere(why: &str) -> Reply {
    Reply::error(format!(
        "{TOOL}: {why}, so there is nothing to label and no label was written; record the \
         assessment with record_finding, category goal-routing"
    ))
    .with_result(CallResult::NotApplied)
}

fn write_failed(e: ResolveError) -> Reply {
    let reply = match e {
        ResolveError::NoProducer { .. } => Reply::error(format!(
            "{TOOL}: no_producer({LABEL_WRITE}): either no producer answered or the producer \
             refused the label; no label was written"
        )),
        e @ ResolveError::Answer { .. } => {
            Reply::error(format!("{TOOL}: {e}; no label was written"))
        }
        e @ ResolveError::ProducerTimeout { .. } => Reply::error(format!(
            "{TOOL}: {e}; not retried, since a label is a write: it may have been stored all the \
             same"
        )),
        e => resolve_failed(TOOL, e),
    };
    reply.with_result(CallResult::Error)
}

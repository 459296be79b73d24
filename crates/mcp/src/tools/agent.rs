//! The agent-resolver tools (SPEC.md §Agent-resolver queue): `pull_assigned_work` drains the
//! queue the loopback resolver fills, `submit_resolution` answers one task and delivers the
//! answer to goal-host, and a long-running session's start re-sends what an earlier session with
//! the same identity recorded but could not deliver.

use std::path::Path;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{CallResult, Reply};
use crate::agent_queue::{Answer, Outcome, Resolution, Sidecar, Task, queue_vessel, sidecar_path};
use crate::ctx::{Ctx, Here};
use metabob_net::attachment::{Attachment, ResolveError, Sending};
use metabob_process::clock::now_ms;
use metabob_process::env::Env;
use metabob_wire::report;

/// The shape an answer goes back to goal-host as.
const SHAPE: &str = "solicitationResponse_write";
/// One delivery waits this long; goal-host answers a response at once or not at all.
const DELIVERY_CAP: Duration = Duration::from_secs(20);
/// What an empty pull says instead of an empty list an agent would keep polling
/// (anchor: NO_INBOUND_OFFER).
const NO_INBOUND_OFFER: &str = "None can arrive from the substrate: this session advertises no \
    shape, so the substrate has no inbound offer to dispatch a task to. Only a local caller of \
    the loopback resolver (a human_input impulse) fills this queue; polling again changes nothing \
    until one does.";

#[derive(Debug, Deserialize, JsonSchema)]
pub struct PullArgs {
    /// Most tasks to list (default 10).
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeArg {
    Answered,
    Declined,
    InsufficientContext,
}

impl From<OutcomeArg> for Outcome {
    fn from(o: OutcomeArg) -> Outcome {
        match o {
            OutcomeArg::Answered => Outcome::Answered,
            OutcomeArg::Declined => Outcome::Declined,
            OutcomeArg::InsufficientContext => Outcome::InsufficientContext,
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SubmitArgs {
    /// A task_id from pull_assigned_work.
    pub task_id: String,
    /// answered, declined (not now), or insufficient_context (the question cannot be answered
    /// as asked).
    pub outcome: OutcomeArg,
    /// The answer; required (non-blank) when outcome is answered.
    pub answer: Option<String>,
}

/// The queue and this session's key into it, or the reply saying why there is none.
fn queue(
    ctx: &Ctx,
    here: &Here<'_>,
    tool: &str,
) -> Result<(std::sync::Arc<Sidecar>, String), Reply> {
    let q = ctx
        .sidecar()
        .map_err(|e| Reply::error(format!("{tool}: {e}")))?;
    Ok((q, queue_vessel(here.session.vessel.as_deref())))
}

/// Lists the queued tasks oldest first, claiming each for this session (anchor: pull_assigned_work).
pub async fn pull_assigned_work(ctx: &Ctx, here: &Here<'_>, a: PullArgs) -> Reply {
    const TOOL: &str = "pull_assigned_work";
    let (q, vessel) = match queue(ctx, here, TOOL) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let limit = a.limit.unwrap_or(10) as usize;
    let pulled = match q.pull(&vessel, ctx.session_id(), limit) {
        Ok(p) => p,
        Err(e) => return Reply::failed(TOOL, &e),
    };
    let mut out = String::new();
    if pulled.tasks.is_empty() {
        out.push_str(&format!(
            "No task is queued for this session's vessel ({vessel}). {NO_INBOUND_OFFER}"
        ));
    } else {
        let n = pulled.tasks.len();
        out.push_str(&format!(
            "{n} task{} for {vessel}, oldest first, now claimed by this session (a claim is not \
             exclusive). Answer each with submit_resolution(task_id, outcome, answer).\n",
            if n == 1 { "" } else { "s" }
        ));
        let now = now_ms();
        for t in &pulled.tasks {
            out.push('\n');
            out.push_str(&render_task(t, now));
        }
        if pulled.more > 0 {
            out.push_str(&format!(
                "\n{} more queued beyond limit {limit}.",
                pulled.more
            ));
        }
    }
    if pulled.expired > 0 {
        out.push_str(&format!(
            "\n{} task{} passed {} deadline unanswered and expired.",
            pulled.expired,
            if pulled.expired == 1 { "" } else { "s" },
            if pulled.expired == 1 { "its" } else { "their" }
        ));
    }
    Reply::ok(out)
}

/// One task as the agent reads it. The question is a caller's markdown: shown whole (it is
/// bounded when queued), with control characters other than line breaks and tabs blanked.
fn render_task(t: &Task, now: i64) -> String {
    let question: String = t
        .question
        .trim()
        .chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                ' '
            } else {
                c
            }
        })
        .collect();
    format!(
        "task_id: {}\ndispatch_id: {}\ntime left: {}\nquestion:\n{question}\n---\n",
        t.id,
        t.dispatch_id.as_deref().unwrap_or("—"),
        time_left(t.deadline_ms.saturating_sub(now)),
    )
}

/// Milliseconds left as minutes and seconds, rounded down.
fn time_left(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m {s}s"),
        (h, m, _) => format!("{h}h {m}m"),
    }
}

/// Records one task's resolution, then delivers it once (anchor: submit_resolution).
pub async fn submit_resolution(ctx: &Ctx, here: &Here<'_>, a: SubmitArgs) -> Reply {
    const TOOL: &str = "submit_resolution";
    let (q, vessel) = match queue(ctx, here, TOOL) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let res = Resolution {
        outcome: a.outcome.into(),
        answer: a.answer,
    };
    let answer = match q.record(&vessel, &a.task_id, &res) {
        Ok(answer) => answer,
        Err(e) => return Reply::failed(TOOL, &e),
    };
    let recorded = format!(
        "task {} resolved ({}) and its answer recorded",
        answer.task_id,
        answer.outcome.as_str()
    );
    match deliver(&here.session.att, &q, &vessel, &answer).await {
        Sent::Delivered => Reply::ok(format!("{recorded}; delivered to goal-host ({SHAPE})."))
            .with_result(CallResult::Ok),
        Sent::TimedOut => Reply::ok(format!(
            "{recorded}; goal-host answered 404: the solicitation had already timed out, so the \
             answer counts as delivered and is not sent again."
        ))
        .with_result(CallResult::Ok),
        Sent::Kept(e) => Reply::ok(format!(
            "{recorded}; not delivered: {}. It stays queued and is sent again when the next \
             session with this identity starts; nothing retries before then.",
            kept_line(&e)
        ))
        .with_result(CallResult::NotShared),
    }
}

/// How one delivery ended.
#[derive(Debug)]
enum Sent {
    Delivered,
    /// goal-host's own 404: the solicitation is gone; the answer counts as delivered.
    TimedOut,
    /// Not delivered, and queued for a later session: why.
    Kept(ResolveError),
}

/// Why an answer was kept, as the reply, the log and the queue's row say it.
fn kept_line(e: &ResolveError) -> String {
    match e {
        ResolveError::Refused(refusal) => format!("not attached: {refusal}"),
        e => report::with_hint(e),
    }
}

/// Sends one recorded answer to goal-host once, capped, and records how it went
/// (anchor: deliver_resolution).
async fn deliver(att: &Attachment, q: &Sidecar, vessel: &str, a: &Answer) -> Sent {
    let pointer = json!({
        "type": SHAPE,
        "solicitationId": a.task_id,
        "outcome": a.outcome.as_str(),
        "answer": a.answer,
    });
    let how = Sending {
        once: true,
        cap: Some(DELIVERY_CAP),
    };
    let sent = match att.resolve_with(pointer, how).await {
        Ok(r) if (200..300).contains(&r.status) => Sent::Delivered,
        // Discovery's own 404 (no producer) is classified apart; this one is goal-host's.
        Ok(r) if r.status == 404 => Sent::TimedOut,
        // Any other status: `ok` reads it as the producer's refusal.
        Ok(r) => match r.ok(SHAPE) {
            Err(e) => Sent::Kept(e),
            Ok(_) => Sent::Delivered,
        },
        Err(e) => Sent::Kept(e),
    };
    let marked = match &sent {
        Sent::Delivered => q.mark_delivered(vessel, &a.task_id, None),
        Sent::TimedOut => q.mark_delivered(
            vessel,
            &a.task_id,
            Some("goal-host answered 404: the solicitation had timed out"),
        ),
        Sent::Kept(e) => q.mark_undelivered(vessel, &a.task_id, &kept_line(e)),
    };
    if let Err(e) = marked {
        // The send already happened; a lost mark only means one more send at the next start.
        tracing::warn!(
            "agent queue: the delivery of task {} was not recorded: {e}",
            a.task_id
        );
    }
    sent
}

/// Re-sends, in the background, the answers an earlier session with this identity recorded but
/// could not deliver (anchor: spawn_reconcile). Each goes once; what fails again stays queued
/// for the next start. No queue file means nothing was ever recorded: none is created.
pub fn spawn_reconcile(env: &Env, att: &Attachment, vessel: Option<&str>) {
    let Some(path) = sidecar_path(env).filter(|p| p.exists()) else {
        return;
    };
    let att = att.clone();
    let vessel = queue_vessel(vessel);
    // Only what was recorded before this start: this session delivers its own answers.
    let started = now_ms();
    tokio::spawn(async move { reconcile(&path, &att, &vessel, started).await });
}

async fn reconcile(path: &Path, att: &Attachment, vessel: &str, started: i64) {
    let pending = Sidecar::open(path).and_then(|q| {
        let v = q.undelivered(vessel, started, crate::agent_queue::READ_MAX)?;
        Ok((q, v))
    });
    let (q, answers) = match pending {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!("agent queue: undelivered answers not re-sent: {e}");
            return;
        }
    };
    if answers.is_empty() {
        return;
    }
    tracing::info!(
        "agent queue: re-sending {} answer(s) an earlier session of {vessel} could not deliver",
        answers.len()
    );
    for a in &answers {
        match deliver(att, &q, vessel, a).await {
            Sent::Delivered => tracing::info!("agent queue: task {} delivered", a.task_id),
            Sent::TimedOut => tracing::info!(
                "agent queue: task {}: goal-host answered 404 (the solicitation timed out); \
                 marked delivered",
                a.task_id
            ),
            Sent::Kept(e) => tracing::warn!(
                "agent queue: task {} still undelivered ({}); kept for the next start",
                a.task_id,
                kept_line(&e)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_reads_in_minutes_and_never_goes_negative() {
        assert_eq!(time_left(-5), "0s");
        assert_eq!(time_left(59_999), "59s");
        assert_eq!(time_left(300_000), "5m 0s");
        assert_eq!(time_left(7_260_000), "2h 1m");
    }

    #[test]
    fn a_question_cannot_smuggle_control_characters() {
        let t = Task {
            id: "t1".into(),
            dispatch_id: None,
            question: "line one\n\u{1b}[2Jline two\r".into(),
            created_ms: 0,
            deadline_ms: 60_000,
            state: crate::agent_queue::TaskState::Pending,
            claimed_by: None,
        };
        let shown = render_task(&t, 0);
        assert!(shown.contains("line one\n [2Jline two\n---"), "{shown}");
        assert!(shown.contains("dispatch_id: —"));
    }
}

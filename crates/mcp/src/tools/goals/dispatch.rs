//! run_goal_async and run_goal: one `goalDispatchAsync` write, sent once; run_goal then follows
//! the dispatch record with short `goalWalkState` polls, so no request is held open for the
//! goal itself.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::record::{Learning, Record, header, learning_line, read_record};
use super::{DispatchArgs, LearningMode, follow_hint, given};
use crate::ctx::{Ctx, Here};
use crate::tools::inspect::{FIELD_CHARS, clean, text};
use crate::tools::{CallResult, Reply, attached, resolve_failed};
use metabob_net::attachment::{Attachment, ResolveError, Resolved, Sending};
use metabob_process::env::Env;

const DISPATCH: &str = "goalDispatchAsync";

/// The pause between run_goal's first polls, in ms (anchor: RUN_GOAL_POLL_MS).
const POLL_VAR: &str = "RUN_GOAL_POLL_MS";
/// The longest pause once they double (anchor: RUN_GOAL_POLL_MAX_MS).
const POLL_MAX_VAR: &str = "RUN_GOAL_POLL_MAX_MS";
/// How long run_goal follows a dispatch before handing back its id (anchor: RUN_GOAL_TIMEOUT_MS).
const TIMEOUT_VAR: &str = "RUN_GOAL_TIMEOUT_MS";
const DEFAULT_POLL_MS: u64 = 2_000;
const DEFAULT_POLL_MAX_MS: u64 = 15_000;
const DEFAULT_TIMEOUT_MS: u64 = 290_000;
/// How many polls keep the first pause before it starts doubling.
const EVEN_POLLS: u32 = 3;

pub async fn run_goal_async(_ctx: &Ctx, here: &Here<'_>, a: DispatchArgs) -> Reply {
    const TOOL: &str = "run_goal_async";
    match dispatch(here, TOOL, &a).await {
        Ok((d, _)) => Reply::ok(d.text(a.learning_mode)).with_result(CallResult::Ok),
        Err(reply) => reply.with_result(CallResult::Error),
    }
}

pub async fn run_goal(ctx: &Ctx, here: &Here<'_>, a: DispatchArgs) -> Reply {
    const TOOL: &str = "run_goal";
    let started = Instant::now();
    let (d, att) = match dispatch(here, TOOL, &a).await {
        Ok(sent) => sent,
        Err(reply) => return reply.with_result(CallResult::Error),
    };
    let timing = PollTiming::from_env(&ctx.env);
    let deadline = started + timing.timeout;
    let mut polls = 0;
    let mut last_failure = None;
    while Instant::now() < deadline {
        let pause = timing.pause(polls).min(deadline - Instant::now());
        tokio::time::sleep(pause).await;
        polls += 1;
        match read_record(att, &d.id, true).await {
            Ok(rec) if !rec.running() => {
                return Reply::ok(finished(&rec, &d.id, started.elapsed(), a.learning_mode))
                    .with_result(CallResult::Ok);
            }
            Ok(_) => last_failure = None,
            Err(f) if f.transient() => last_failure = Some(f.line(TOOL, &d.id).text),
            Err(f) => {
                let mut r = f.line(TOOL, &d.id);
                let _ = write!(
                    r.text,
                    "\nThe goal was dispatched as {}; follow it with {}.",
                    d.id,
                    follow_hint(&d.id)
                );
                return r.with_result(CallResult::Ok);
            }
        }
    }
    let mut out = format!(
        "The goal is still running after {} ms ({TIMEOUT_VAR}); it goes on without this call.\n\
         dispatchId: {}\n",
        timing.timeout.as_millis(),
        d.id
    );
    if let Some(failure) = last_failure {
        let _ = writeln!(out, "The last poll failed: {failure}");
    }
    let _ = write!(out, "Follow it with {}.", follow_hint(&d.id));
    Reply::ok(out).with_result(CallResult::Ok)
}

/// run_goal's answer for a dispatch that left running.
fn finished(rec: &Record, id: &str, took: Duration, mode: Option<LearningMode>) -> String {
    let mut out = header(rec, id);
    let _ = writeln!(out, "duration: {} ms", took.as_millis());
    out.push_str(&learning_line(&rec.learning));
    if mode == Some(LearningMode::Observe)
        && let Learning::Reported(l) = &rec.learning
    {
        if !l.posterior.is_empty() || !l.gaps.is_empty() || l.label {
            out.push_str(
                "warning: observe was requested, yet goal-host reports learning from this walk \
                 (the mode may not have been applied; goal_reasoning's walk log shows the \
                 effective learningMode)\n",
            );
        } else if l.goal_path {
            out.push_str(
                "note: a goal path reported under observe is not evidence of a write: goal-host \
                 sets the flag on its trace branch whether or not it wrote the path\n",
            );
        }
    }
    let _ = write!(
        out,
        "goal_reasoning {{\"dispatch_id\": \"{id}\"}} shows the walk; provide_feedback records \
         your verdict."
    );
    out
}

/// The polling schedule, from the environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PollTiming {
    poll: Duration,
    max: Duration,
    timeout: Duration,
}

impl PollTiming {
    fn from_env(env: &Env) -> PollTiming {
        // Anything that is not a positive whole number of ms reads as the default.
        let ms = |var: &str, default: u64| {
            let v = env.get(var).and_then(|v| v.trim().parse::<u64>().ok());
            Duration::from_millis(v.filter(|v| *v > 0).unwrap_or(default))
        };
        let poll = ms(POLL_VAR, DEFAULT_POLL_MS);
        PollTiming {
            poll,
            max: ms(POLL_MAX_VAR, DEFAULT_POLL_MAX_MS).max(poll),
            timeout: ms(TIMEOUT_VAR, DEFAULT_TIMEOUT_MS),
        }
    }

    /// The pause before poll `n` (0-based; anchor: run_goal_poll): the first pause three
    /// times, then doubling up to the longest, since every read makes goal-host re-read the
    /// execution's labels.
    fn pause(&self, n: u32) -> Duration {
        if n < EVEN_POLLS {
            return self.poll;
        }
        let doubled = self
            .poll
            .checked_mul(1 << (n - EVEN_POLLS + 1).min(20))
            .unwrap_or(self.max);
        doubled.min(self.max)
    }
}

/// What a dispatch answered.
struct Dispatched {
    id: String,
    status: Option<String>,
    task_id: Option<String>,
}

impl Dispatched {
    fn text(&self, mode: Option<LearningMode>) -> String {
        let mut out = format!(
            "Dispatched {} ({}).\n",
            self.id,
            self.status.as_deref().unwrap_or("status not reported")
        );
        if let Some(task) = &self.task_id {
            let _ = writeln!(out, "taskId: {task}");
        }
        if let Some(m) = mode {
            let _ = writeln!(
                out,
                "learning_mode: {} (as requested; not verified as applied)",
                m.as_str()
            );
        }
        let _ = write!(
            out,
            "Follow it with {}; once it has finished, goal_reasoning shows the walk and \
             provide_feedback records your verdict.",
            follow_hint(&self.id)
        );
        out
    }
}

/// Sends the one `goalDispatchAsync` (anchor: dispatch_goal).
async fn dispatch<'a>(
    here: &'a Here<'_>,
    tool: &str,
    a: &DispatchArgs,
) -> Result<(Dispatched, &'a Attachment), Reply> {
    if given(&a.goal).is_none() && given(&a.target_template_id).is_none() {
        return Err(Reply::error(format!(
            "{tool}: give goal (what to achieve, in words) or target_template_id; nothing was sent"
        )));
    }
    let att = attached(here, tool).await?;
    let pointer = pointer(att, a);
    let how = Sending {
        once: true,
        cap: None,
    };
    match att.resolve_with(pointer, how).await {
        Ok(r) if (200..300).contains(&r.status) => dispatched(tool, &r.body).map(|d| (d, att)),
        Ok(r) => Err(refused(tool, &r)),
        Err(e) => Err(send_failed(tool, e)),
    }
}

/// The dispatch pointer: the goal text exactly as given, the declared operator, and the tags
/// with this session's.
fn pointer(att: &Attachment, a: &DispatchArgs) -> Value {
    let claim = att.claim();
    let session_tag = format!("session:{}", claim.session);
    let mut tags = a.tags.clone().unwrap_or_default();
    if !tags.contains(&session_tag) {
        tags.push(session_tag);
    }
    let mut p = json!({"type": DISPATCH, "operator": claim.operator, "tags": tags});
    let mut put = |k: &str, v: Value| {
        p[k] = v;
    };
    if let Some(g) = &a.goal {
        put("goal", json!(g));
    }
    if let Some(t) = given(&a.target_template_id) {
        put("targetTemplateId", json!(t));
    }
    if let Some(v) = &a.variables {
        put("variables", Value::Object(v.clone()));
    }
    if let Some(e) = given(&a.parent_execution_id) {
        put("parent_execution_id", json!(e));
    }
    if let Some(c) = &a.composition_chain {
        put("composition_chain", json!(c));
    }
    if let Some(m) = a.learning_mode {
        put("learning_mode", json!(m.as_str()));
    }
    p
}

fn dispatched(tool: &str, body: &Value) -> Result<Dispatched, Reply> {
    let id = text(body, "dispatchId")
        .filter(|id| id.len() <= FIELD_CHARS && !id.contains(char::is_whitespace));
    let Some(id) = id else {
        return Err(Reply::error(format!(
            "{tool}: {DISPATCH} was accepted but answered no readable dispatchId; it was sent \
             once and may be running, but it cannot be followed from here"
        )));
    };
    Ok(Dispatched {
        id,
        status: text(body, "status").map(|s| clean(&s, 40)),
        task_id: text(body, "taskId"),
    })
}

/// A refusal (429 from the spend-rate breaker, 503 while draining, 400 for what the producer
/// does not do) as one line with its status and error.
fn refused(tool: &str, r: &Resolved) -> Reply {
    let error = text(&r.body, "error");
    let detail = text(&r.body, "detail").or_else(|| text(&r.body, "message"));
    let said = match (error, detail) {
        (Some(e), Some(d)) => format!(" {e}: {d}"),
        (Some(s), None) | (None, Some(s)) => format!(" {s}"),
        (None, None) => String::new(),
    };
    Reply::error(format!(
        "{tool}: {DISPATCH} refused with HTTP {}{said}; nothing was dispatched, and a dispatch \
         is never retried",
        r.status
    ))
}

fn send_failed(tool: &str, e: ResolveError) -> Reply {
    match e {
        ResolveError::NoProducer { .. } => Reply::error(format!(
            "{tool}: no_producer({DISPATCH}): no goal-host took the dispatch (none is reachable \
             through this attachment, or a producer behind a peer refused it); nothing was retried"
        )),
        e @ ResolveError::ProducerTimeout { .. } => Reply::error(format!(
            "{tool}: {e}; not retried, since a dispatch is a write: it may have been queued all \
             the same"
        )),
        e => resolve_failed(tool, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(vars: &[(&str, &str)]) -> PollTiming {
        let env = Env::new(
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())),
            "/",
        );
        PollTiming::from_env(&env)
    }

    #[test]
    fn three_even_polls_then_doubling_to_the_longest() {
        let t = timing(&[]);
        let pauses: Vec<u64> = (0..8).map(|n| t.pause(n).as_millis() as u64).collect();
        assert_eq!(pauses, [2000, 2000, 2000, 4000, 8000, 15000, 15000, 15000]);
        assert_eq!(t.timeout, Duration::from_millis(290_000));
        let t = timing(&[(POLL_VAR, "10"), (POLL_MAX_VAR, "5"), (TIMEOUT_VAR, "x")]);
        assert_eq!(
            t.max,
            Duration::from_millis(10),
            "the longest is never shorter"
        );
        assert_eq!(t.timeout, Duration::from_millis(DEFAULT_TIMEOUT_MS));
        assert_eq!(t.pause(u32::MAX), Duration::from_millis(10));
        assert_eq!(timing(&[(POLL_VAR, "0")]).poll, Duration::from_millis(2000));
    }
}

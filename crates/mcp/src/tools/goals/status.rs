//! goal_status and goal_reasoning: the dispatch record, and for a finished dispatch the durable
//! trace of its execution, read as execution_trace reads it (crates/mcp/src/tools/inspect/trace.rs).

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::StatusArgs;
use super::record::{Record, dispatch_id_arg, header, learning_line, read_record};
use crate::ctx::{Ctx, Here};
use crate::tools::inspect::trace::{
    REACH_TAGS, READ, bare_execution_id, failed, failure_mode, is_satisfier, render_trace,
    satisfier, status, strings_all, task_lines, tasks_of, trace_row,
};
use crate::tools::inspect::{FIELD_CHARS, clean, first_text};
use crate::tools::{Reply, attached};
use metabob_net::attachment::{Attachment, ResolveError};

/// How many of the newest walk-log lines goal_status shows while the dispatch runs.
const LIVE_LOG_LINES: usize = 6;

pub async fn goal_status(_ctx: &Ctx, here: &Here<'_>, a: StatusArgs) -> Reply {
    const TOOL: &str = "goal_status";
    let (att, id, rec) = match record(here, TOOL, &a).await {
        Ok(found) => found,
        Err(reply) => return reply,
    };
    let mut out = header(&rec, &id);
    if rec.running() {
        out.push_str(&live_log(&rec));
        let _ = write!(
            out,
            "Still running: check again with goal_status; goal_reasoning once it has finished."
        );
        return Reply::ok(out);
    }
    out.push_str(&learning_line(&rec.learning));
    match trace_target(&rec) {
        Target::None => out.push_str(
            "No execution is recorded for this dispatch, so there is no trace to read; \
             goal_reasoning shows its walk log.\n",
        ),
        Target::Satisfier { exec: raw } => {
            let _ = writeln!(out, "{}", satisfier(&raw).text);
        }
        Target::Trace { exec } => match read_trace(att, &exec).await {
            Ok(body) => {
                let _ = writeln!(out, "trace ({READ}):\n{}", render_trace(&exec, &body).text);
            }
            Err(line) => {
                let _ = writeln!(out, "trace: {line}");
            }
        },
    }
    let _ = write!(
        out,
        "goal_reasoning {{\"dispatch_id\": \"{id}\"}} shows the walk; provide_feedback records \
         your verdict."
    );
    Reply::ok(out)
}

pub async fn goal_reasoning(_ctx: &Ctx, here: &Here<'_>, a: StatusArgs) -> Reply {
    const TOOL: &str = "goal_reasoning";
    let (att, id, rec) = match record(here, TOOL, &a).await {
        Ok(found) => found,
        Err(reply) => return reply,
    };
    if rec.running() {
        return Reply::ok("still running");
    }
    let mut out = header(&rec, &id);
    out.push_str(&learning_line(&rec.learning));
    if !rec.walk_log.is_empty() {
        let _ = writeln!(
            out,
            "walk log ({} lines, oldest first):",
            rec.walk_log.len()
        );
        for (i, line) in rec.walk_log.iter().enumerate() {
            let _ = writeln!(out, "  {}. {line}", i + 1);
        }
    }
    let mut has_tasks = false;
    match trace_target(&rec) {
        Target::None => {}
        Target::Satisfier { exec: raw } => {
            let _ = writeln!(out, "{}", satisfier(&raw).text);
        }
        Target::Trace { exec } => match read_trace(att, &exec).await {
            Ok(body) => {
                let row = trace_row(&body);
                has_tasks = tasks_of(row).is_some_and(|t| !t.is_empty());
                if has_tasks {
                    let _ = write!(out, "trace {exec}: {}\n{}", status(row), task_lines(row));
                }
                out.push_str(&reach_block(&rec, row));
            }
            Err(line) => {
                let _ = writeln!(out, "trace: {line}");
            }
        },
    }
    if rec.walk_log.is_empty() && !has_tasks {
        out.push_str(
            "decision-log unavailable: the record carries no walk log and no trace has tasks \
             (typically a direct vessel resolve rather than a walk)\n",
        );
    }
    Reply::ok(out.trim_end().to_string())
}

/// The gate, the id and the record, or the one line that ends the call.
async fn record<'a>(
    here: &'a Here<'_>,
    tool: &str,
    a: &StatusArgs,
) -> Result<(&'a Attachment, String, Record), Reply> {
    let id = dispatch_id_arg(tool, &a.dispatch_id)?;
    let att = attached(here, tool).await?;
    let rec = read_record(att, &id, false)
        .await
        .map_err(|f| f.line(tool, &id))?;
    Ok((att, id, rec))
}

/// The last walk-log lines of a running dispatch.
fn live_log(rec: &Record) -> String {
    let n = rec.walk_log.len();
    if n == 0 {
        return "walk log: nothing yet\n".into();
    }
    let shown = n.min(LIVE_LOG_LINES);
    let mut out = format!("walk log (last {shown} of {n}):\n");
    for line in &rec.walk_log[n - shown..] {
        let _ = writeln!(out, "  {line}");
    }
    out
}

enum Target {
    None,
    /// A satisfier reach persists no trace, so none is read.
    Satisfier {
        exec: String,
    },
    Trace {
        exec: String,
    },
}

fn trace_target(rec: &Record) -> Target {
    let Some(exec) = &rec.execution_id else {
        return Target::None;
    };
    let by_template = rec
        .selected_template
        .as_deref()
        .is_some_and(|t| t.starts_with("satisfier:"));
    if is_satisfier(exec) || by_template {
        return Target::Satisfier { exec: exec.clone() };
    }
    Target::Trace {
        exec: bare_execution_id(exec),
    }
}

/// The trace of `exec`, or the line execution_trace gives for its failure.
async fn read_trace(att: &Attachment, exec: &str) -> Result<Value, String> {
    let pointer = json!({"type": READ, "executionId": exec, "format": "json"});
    let shown = clean(exec, FIELD_CHARS);
    match att.resolve(pointer).await.and_then(|r| r.ok(READ)) {
        Ok(body) if trace_row(&body).is_object() => Ok(body),
        Ok(_) => Err(format!("{READ} answered without a trace object")),
        Err(ResolveError::Answer { status: 404, .. }) => Err(format!(
            "activity-api has no trace {shown} (HTTP 404), as for a satisfier-only reach, which \
             persists none"
        )),
        Err(e) => Err(failed(e, Some(&shown)).text),
    }
}

/// The reach verdict: the record's reached, and what the trace says about the state reached.
fn reach_block(rec: &Record, row: &Value) -> String {
    let tags = strings_all(row, "tags");
    let tag = |prefix: &str| {
        tags.iter()
            .find_map(|t| t.strip_prefix(prefix))
            .map(str::to_string)
    };
    let mut out = format!(
        "reach verdict:\n  reached: {} (the dispatch record's verdict)\n",
        rec.reached_word()
    );
    let mut line = |name: &str, v: Option<String>| {
        if let Some(v) = v {
            let _ = writeln!(out, "  {name}: {v}");
        }
    };
    line(
        "state-space",
        first_text(row, &["state_signature", "state_space_signature"])
            .or_else(|| tag("state_signature:")),
    );
    let produced = strings_all(row, "produced_shapes");
    line(
        "produced shapes",
        (!produced.is_empty())
            .then(|| produced.join(", "))
            .or_else(|| tag("completion_shapes:")),
    );
    let reach: Vec<&str> = REACH_TAGS
        .iter()
        .filter_map(|p| tags.iter().find(|t| t.starts_with(p)))
        .map(String::as_str)
        .collect();
    line(
        "reach tags",
        Some(if reach.is_empty() {
            "none".into()
        } else {
            reach.join(", ")
        }),
    );
    line("α/β", thompson(row));
    line("failure mode", failure_mode(row));
    out
}

/// Thompson α/β as the trace gives them, flat or under `thompson`.
fn thompson(row: &Value) -> Option<String> {
    let num = |v: &Value, keys: &[&str]| {
        keys.iter()
            .find_map(|k| v.get(*k).and_then(Value::as_f64))
            .filter(|n| n.is_finite())
    };
    let from = |v: &Value| {
        Some((
            num(v, &["alpha", "thompson_alpha"])?,
            num(v, &["beta", "thompson_beta"])?,
        ))
    };
    let (a, b) = from(row).or_else(|| row.get("thompson").and_then(from))?;
    Some(format!("{a}/{b}"))
}

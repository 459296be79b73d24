//! execution_trace: activity-api's durable traces, listed (`executionTraceList`) or read one at
//! a time (`activityExecutionTrace`). Both are trace reads, which the ingress never retries:
//! activity-api keeps running a query discovery cut.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::{FIELD_CHARS, TraceArgs, clean, first_text, skipped, text};
use crate::ctx::{Ctx, Here};
use crate::tools::{Reply, attached, resolve_failed};
use metabob_net::attachment::{Attachment, ResolveError};
use metabob_wire::text::parse_rfc3339_ms;

const TOOL: &str = "execution_trace";
pub(crate) const LIST: &str = "executionTraceList";
pub(crate) const READ: &str = "activityExecutionTrace";
const DEFAULT_LIMIT: u32 = 10;
const MAX_LIMIT: u32 = 50;
/// Most tasks one trace shows.
const MAX_TASKS: usize = 200;
/// Most entries shown of a list inside a row (a composition chain, a task's shapes).
const MAX_LIST: usize = 20;
/// The tags a trace's reach is read from; the first of each is shown.
pub(crate) const REACH_TAGS: [&str; 4] = [
    "state_signature:",
    "reached:",
    "completion_shapes:",
    "operator:",
];

pub async fn execution_trace(_ctx: &Ctx, here: &Here<'_>, a: TraceArgs) -> Reply {
    let raw = a.execution_id.as_deref().map(str::trim);
    let raw = raw.filter(|s| !s.is_empty());
    // Answered from the id alone: activity-api stores no task trace for it.
    if let Some(raw) = raw
        && is_satisfier(raw)
    {
        return satisfier(raw);
    }
    let id = raw.map(bare_execution_id);
    if id.as_deref() == Some("") {
        return Reply::error(format!(
            "{TOOL}: execution_id names no execution once its table and brackets are removed; \
             nothing was sent"
        ));
    }
    let att = match attached(here, TOOL).await {
        Ok(att) => att,
        Err(reply) => return reply,
    };
    match id {
        None => list(att, a.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT)).await,
        Some(id) => read(att, &id).await,
    }
}

/// The bare `exec_…` form of an execution id: a stored record id
/// (`v_paradigm_execution_traces:⟨exec_…⟩`) loses its table and brackets (anchor: bare_execution_id).
pub fn bare_execution_id(raw: &str) -> String {
    let s = raw.trim();
    let s = match s.split_once(':') {
        Some((table, rest)) if is_table_name(table) => rest.trim(),
        _ => s,
    };
    let unwrapped = [('⟨', '⟩'), ('`', '`'), ('"', '"')]
        .iter()
        .find_map(|(open, close)| s.strip_prefix(*open)?.strip_suffix(*close));
    unwrapped.unwrap_or(s).trim().to_string()
}

fn is_table_name(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && s != "satisfier"
}

/// A satisfier reach, named by its id or its template (anchor: is_satisfier_execution).
pub(crate) fn is_satisfier(raw: &str) -> bool {
    raw.starts_with("satisfier:") || bare_execution_id(raw).starts_with("walk-satisfier-")
}

pub(crate) fn satisfier(raw: &str) -> Reply {
    Reply::ok(format!(
        "{} is a satisfier reach: it persists no task trace (activity-api answers 404 for one, \
         a successful one included), so activity-api was not asked. Its walk is in the dispatch \
         record: read it with goal_reasoning.",
        clean(raw, FIELD_CHARS)
    ))
}

/// A failed trace read as its one line.
pub(crate) fn failed(e: ResolveError, id: Option<&str>) -> Reply {
    match (e, id) {
        (ResolveError::NoProducer { .. }, None) => Reply::error(format!(
            "{TOOL}: no_producer({LIST}): no producer serves the trace listing on this substrate, \
             so no execution trace can be read here"
        )),
        (ResolveError::NoProducer { .. }, Some(id)) => Reply::error(format!(
            "{TOOL}: no_producer({READ}): either no producer answered or trace {id} does not \
             exist (a satisfier-only reach persists none; its walk is in goal_reasoning)"
        )),
        (e @ ResolveError::ProducerTimeout { .. }, _) => Reply::error(format!(
            "{TOOL}: {e}; not retried, since the producer keeps running the query it was cut on"
        )),
        (e, _) => resolve_failed(TOOL, e),
    }
}

async fn list(att: &Attachment, limit: u32) -> Reply {
    let answer = att.resolve(json!({ "type": LIST, "limit": limit })).await;
    match answer.and_then(|r| r.ok(LIST)) {
        Ok(body) => render_list(&body, limit as usize),
        Err(e) => failed(e, None),
    }
}

async fn read(att: &Attachment, id: &str) -> Reply {
    let pointer = json!({ "type": READ, "executionId": id, "format": "json" });
    let answer = att.resolve(pointer).await;
    let shown = clean(id, FIELD_CHARS);
    match answer.and_then(|r| r.ok(READ)) {
        Ok(body) => render_trace(&shown, &body),
        Err(ResolveError::Answer { status: 404, .. }) => Reply::error(format!(
            "{TOOL}: the trace producer (activity-api, or the embedded ledger's goal board) has no \
             trace {shown} (HTTP 404). That is expected for a satisfier-only reach, which persists \
             no task trace; its walk is in goal_reasoning."
        )),
        Err(e) => failed(e, Some(&shown)),
    }
}

/// One listed trace, validated.
pub(crate) struct Row {
    pub(crate) id: String,
    status: String,
    outcome: Option<bool>,
    duration: Option<String>,
    pub(crate) template: Option<String>,
    time: Option<String>,
    at_ms: Option<i64>,
}

impl Row {
    pub(crate) fn parse(v: &Value) -> Option<Row> {
        let id = match (v.get("execution_id"), v.get("id")) {
            (Some(Value::String(s)), _) | (_, Some(Value::String(s))) => s.clone(),
            (_, Some(Value::Object(o))) => o.get("id")?.as_str()?.to_string(),
            _ => return None,
        };
        let id = clean(&bare_execution_id(&id), FIELD_CHARS);
        if id.is_empty() {
            return None;
        }
        let time = first_text(v, &["executed_at", "started_at", "created_at"]);
        Some(Row {
            id,
            status: status(v),
            outcome: outcome(v),
            duration: v.get("duration_ms").and_then(Value::as_f64).map(duration),
            template: first_text(v, &["activity_id", "activity_template_id", "template_id"]),
            at_ms: time.as_deref().and_then(parse_rfc3339_ms),
            time,
        })
    }

    fn is_satisfier(&self) -> bool {
        self.id.starts_with("walk-satisfier-")
            || self
                .template
                .as_deref()
                .is_some_and(|t| t.starts_with("satisfier:"))
    }
}

/// A row's status as given, or read from its `success` flag.
pub(crate) fn status(v: &Value) -> String {
    match (text(v, "status"), v.get("success").and_then(Value::as_bool)) {
        (Some(s), _) => s,
        (None, Some(true)) => "success".into(),
        (None, Some(false)) => "failed".into(),
        (None, None) => "unknown".into(),
    }
}

/// Whether a row succeeded: its `success` flag, else its status word; `None` when neither says.
fn outcome(v: &Value) -> Option<bool> {
    if let Some(b) = v.get("success").and_then(Value::as_bool) {
        return Some(b);
    }
    let s = text(v, "status")?.to_ascii_lowercase();
    match s.as_str() {
        "success" | "succeeded" | "completed" | "ok" => Some(true),
        "failed" | "failure" | "error" | "errored" | "timeout" => Some(false),
        _ => None,
    }
}

fn duration(ms: f64) -> String {
    if !ms.is_finite() || ms < 0.0 {
        "(bad duration)".into()
    } else if ms < 1000.0 {
        format!("{} ms", ms.round())
    } else {
        format!("{:.1} s", ms / 1000.0)
    }
}

/// The rows of a listing: `executions` (activity-api's key), `traces`, or a bare array.
pub(crate) fn listed_rows(body: &Value) -> Option<&Vec<Value>> {
    body.get("executions")
        .or_else(|| body.get("traces"))
        .unwrap_or(body)
        .as_array()
}

fn render_list(body: &Value, limit: usize) -> Reply {
    let Some(listed) = listed_rows(body) else {
        return Reply::error(format!(
            "{TOOL}: {LIST} answered without a list of executions"
        ));
    };
    let mut rows: Vec<Row> = listed.iter().take(limit).filter_map(Row::parse).collect();
    let dropped = listed.len().min(limit) - rows.len();
    // Newest first whatever order arrived; rows without a readable time keep theirs, last.
    rows.sort_by_key(|r| std::cmp::Reverse(r.at_ms));
    if rows.is_empty() {
        let mut text = "No execution trace is recorded for this org.".to_string();
        if dropped > 0 {
            let _ = write!(text, " {}", skipped(dropped, "row", "rows"));
        }
        return Reply::ok(text);
    }
    let ok = rows.iter().filter(|r| r.outcome == Some(true)).count();
    let bad = rows.iter().filter(|r| r.outcome == Some(false)).count();
    let mut out = format!(
        "Recent execution traces ({}, newest first; this page: {ok} succeeded, {bad} failed",
        rows.len()
    );
    if let Some(total) = body.get("total").and_then(Value::as_u64) {
        let _ = write!(out, "; {total} recorded in all");
    }
    out.push_str("):\n");
    for r in &rows {
        let _ = write!(out, "  {}  {}", r.id, r.status);
        for part in [&r.duration, &r.template, &r.time].into_iter().flatten() {
            let _ = write!(out, "  {part}");
        }
        if r.is_satisfier() {
            out.push_str("  [satisfier reach: no task trace; its walk is in goal_reasoning]");
        }
        out.push('\n');
    }
    if dropped > 0 {
        let _ = writeln!(out, "{}", skipped(dropped, "row", "rows"));
    }
    let _ = write!(
        out,
        "Read one with execution_trace {{\"execution_id\": \"{}\"}}.",
        rows[0].id
    );
    Reply::ok(out)
}

/// Up to [`MAX_LIST`] strings of `v[key]`, cleaned; more is said as `… +n`.
fn strings(v: &Value, keys: &[&str]) -> Vec<String> {
    let Some(items) = keys
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_array))
    else {
        return Vec::new();
    };
    let mut out: Vec<String> = items
        .iter()
        .filter_map(Value::as_str)
        .take(MAX_LIST)
        .map(|s| clean(s, FIELD_CHARS))
        .collect();
    if items.len() > MAX_LIST {
        out.push(format!("… +{}", items.len() - MAX_LIST));
    }
    out
}

/// A failure mode as a string, or `{type, message}` as `type: message`.
pub(crate) fn failure_mode(v: &Value) -> Option<String> {
    match v.get("failure_mode") {
        Some(Value::String(s)) => Some(clean(s, FIELD_CHARS)).filter(|s| !s.is_empty()),
        Some(o @ Value::Object(_)) => {
            let kind = first_text(o, &["type", "kind", "mode"]);
            let detail = first_text(o, &["message", "detail", "reason"]);
            match (kind, detail) {
                (Some(k), Some(d)) => Some(format!("{k}: {d}")),
                (k, d) => k.or(d),
            }
        }
        _ => text(v, "failure_mode_type"),
    }
}

/// The stored row, unwrapped from an envelope when the answer has one.
pub(crate) fn trace_row(body: &Value) -> &Value {
    let is_row = [
        "status",
        "success",
        "execution_id",
        "activity_id",
        "activity_template_id",
    ]
    .iter()
    .any(|k| body.get(*k).is_some());
    if is_row {
        return body;
    }
    ["execution", "data", "result"]
        .iter()
        .find_map(|k| body.get(*k).filter(|v| v.is_object()))
        .unwrap_or(body)
}

pub(crate) fn render_trace(id: &str, body: &Value) -> Reply {
    let row = trace_row(body);
    if !row.is_object() {
        return Reply::error(format!("{TOOL}: {READ} answered without a trace object"));
    }
    let mut out = format!("Execution {id}: {}\n", status(row));
    let mut field = |name: &str, value: Option<String>| {
        if let Some(v) = value {
            let _ = writeln!(out, "  {name}: {v}");
        }
    };
    field(
        "activity_template_id",
        first_text(row, &["activity_template_id", "activity_id", "template_id"]),
    );
    field("vessel_id", text(row, "vessel_id"));
    let chain = strings(row, &["composition_chain"]);
    field(
        "composition_chain",
        (!chain.is_empty()).then(|| chain.join(" → ")),
    );
    let tags = strings_all(row, "tags");
    let reach: Vec<&String> = REACH_TAGS
        .iter()
        .filter_map(|prefix| tags.iter().find(|t| t.starts_with(prefix)))
        .collect();
    field(
        "reach tags",
        (!reach.is_empty()).then(|| {
            reach
                .iter()
                .map(|t| t.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        }),
    );
    field("failure mode", failure_mode(row));
    field("error", first_text(row, &["error_message", "error"]));
    out.push_str(&task_lines(row));
    Reply::ok(out.trim_end().to_string())
}

/// Every string of `v[key]` (bounded by the tag scan's needs), cleaned.
pub(crate) fn strings_all(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .take(1_000)
                .filter_map(Value::as_str)
                .map(|s| clean(s, FIELD_CHARS))
                .collect()
        })
        .unwrap_or_default()
}

/// The per-task sequence, lifted from `execution_trace.tasks` (an object, or that object as a
/// JSON string), else a `tasks` list on the row.
pub(crate) fn tasks_of(row: &Value) -> Option<Vec<Value>> {
    let from = |blob: &Value| blob.get("tasks").and_then(Value::as_array).cloned();
    match row.get("execution_trace") {
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).ok().and_then(|b| from(&b)),
        Some(blob) => from(blob),
        None => None,
    }
    .or_else(|| row.get("trace").and_then(from))
    .or_else(|| from(row))
}

pub(crate) fn task_lines(row: &Value) -> String {
    let Some(tasks) = tasks_of(row).filter(|t| !t.is_empty()) else {
        return "No per-task sequence is recorded (execution_trace.tasks is empty or absent).\n"
            .into();
    };
    let mut out = format!("Tasks ({}):\n", tasks.len());
    for (i, t) in tasks.iter().take(MAX_TASKS).enumerate() {
        let mark = match outcome(t) {
            Some(true) => "✓",
            Some(false) => "✗",
            None => "?",
        };
        let resolver = first_text(t, &["resolver_id", "resolver", "tool", "task_id", "name"]);
        let _ = write!(
            out,
            "  #{} {mark} {}",
            i + 1,
            resolver.as_deref().unwrap_or("?")
        );
        if let Some(tier) = scalar(t, "tier") {
            let _ = write!(out, "/{tier}");
        }
        let ins = strings(t, &["input_shapes", "inShapes", "in_shapes"]);
        let outs = strings(t, &["output_shapes", "outShapes", "out_shapes"]);
        if !ins.is_empty() || !outs.is_empty() {
            let _ = write!(out, " {} → {}", ins.join(", "), outs.join(", "));
        }
        if let Some(f) = failure_mode(t).or_else(|| text(t, "error")) {
            let _ = write!(out, ", {f}");
        }
        out.push('\n');
    }
    if tasks.len() > MAX_TASKS {
        let _ = writeln!(out, "  … {} more tasks", tasks.len() - MAX_TASKS);
    }
    out
}

/// A string or number field, as text.
fn scalar(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::Number(n) => Some(n.to_string()),
        Value::String(_) => text(v, key),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_ids_are_read_by_their_bare_id() {
        for raw in [
            "exec_abc",
            " v_paradigm_execution_traces:⟨exec_abc⟩ ",
            "execution:exec_abc",
            "execution:`exec_abc`",
            "⟨exec_abc⟩",
        ] {
            assert_eq!(bare_execution_id(raw), "exec_abc", "{raw}");
        }
        assert_eq!(
            bare_execution_id("walk-satisfier-1-2"),
            "walk-satisfier-1-2"
        );
        assert!(is_satisfier("walk-satisfier-1-2"));
        assert!(is_satisfier("satisfier:webSearchResult"));
        assert!(is_satisfier(
            "v_paradigm_execution_traces:⟨walk-satisfier-3⟩"
        ));
        assert!(!is_satisfier("exec_abc"));
    }

    #[test]
    fn hostile_rows_are_skipped_not_trusted() {
        let body = json!({"executions": [
            {"execution_id": "exec_a\nforged line", "success": true, "duration_ms": 1500.0},
            {"id": {"tb": "execution", "id": "exec_b"}, "status": "failed"},
            {"status": "success"},
            "not a row",
            {"execution_id": "exec_c", "duration_ms": -4, "executed_at": 7},
        ]});
        let text = render_list(&body, 10).text;
        assert!(
            text.contains("exec_a forged line  success  1.5 s"),
            "{text}"
        );
        assert!(text.contains("exec_b  failed"), "{text}");
        assert!(text.contains("exec_c  unknown  (bad duration)"), "{text}");
        assert!(text.contains("1 succeeded, 1 failed"), "{text}");
        assert!(text.contains("(2 malformed rows skipped)"), "{text}");
        assert!(render_list(&json!({"executions": 3}), 10).is_error);
    }

    #[test]
    fn tasks_come_from_the_blob_even_as_a_string() {
        let blob = json!({"tasks": [{"resolver_id": "r", "tier": 2, "success": false,
            "input_shapes": ["a"], "output_shapes": ["b"], "failure_mode": {"type": "timeout"}}]});
        let row = json!({"status": "failed", "execution_trace": blob.to_string()});
        let lines = task_lines(&row);
        assert!(lines.contains("#1 ✗ r/2 a → b, timeout"), "{lines}");
    }

    /// A discovery that serves neither trace shape (the embedded ledger answers both itself, so
    /// only a peer substrate gives this answer now).
    #[test]
    fn no_producer_names_the_missing_trace_shape() {
        let listing = failed(ResolveError::NoProducer { shape: LIST.into() }, None);
        assert!(listing.is_error);
        assert!(
            listing.text.contains("no_producer(executionTraceList)"),
            "{}",
            listing.text
        );
        let one = failed(
            ResolveError::NoProducer { shape: READ.into() },
            Some("exec_k3j4"),
        );
        assert!(
            one.text
                .contains("no_producer(activityExecutionTrace): either no producer answered or trace exec_k3j4"),
            "{}",
            one.text
        );
    }
}

//! The dispatch record `goalWalkState` answers, read as hostile input, and the lines every goal
//! tool prints from it: reached first, then status and the rest, who dispatched (the principal),
//! and what the walk taught (learning).

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use crate::tools::inspect::{FIELD_CHARS, clean, first_text, text};
use crate::tools::{Reply, resolve_failed};
use metabob_net::attachment::{Attachment, ResolveError, Sending};

pub(super) const WALK_STATE: &str = "goalWalkState";
/// The record is in goal-host's memory, so a read of it is short (anchor: WALK_STATE_CAP).
pub(super) const WALK_STATE_CAP: Duration = Duration::from_secs(15);
/// Most walk-log lines kept from one record (goal-host sends its last 60).
const MAX_LOG: usize = 200;
/// Longest walk-log line printed.
const LOG_CHARS: usize = 500;
/// Longest goal text taken from a record.
const GOAL_CHARS: usize = 4096;
/// Most posterior changes or filed gaps listed on the learning line.
const MAX_LEARNED: usize = 10;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Status {
    Running,
    Completed,
    Failed,
    /// A status word this client does not know; it is not running.
    Other {
        word: String,
    },
    Missing,
}

impl Status {
    fn read(v: Option<String>) -> Status {
        match v.as_deref() {
            None => Status::Missing,
            Some("running") => Status::Running,
            Some("completed") => Status::Completed,
            Some("failed") => Status::Failed,
            Some(_) => Status::Other {
                word: v.unwrap_or_default(),
            },
        }
    }

    fn word(&self) -> &str {
        match self {
            Status::Running => "running",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Other { word } => word,
            Status::Missing => "(not reported)",
        }
    }
}

/// Who goal-host says dispatched: validated by goal-host, unlike the claimed operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Principal {
    NotReported,
    Reported {
        kind: String,
        tag: String,
        operator: bool,
    },
}

/// What goal-host says the walk taught.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Learned {
    pub goal_path: bool,
    /// `template (Δα +a, Δβ +b)`, only the templates that moved.
    pub posterior: Vec<String>,
    pub gaps: Vec<String>,
    pub label: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Learning {
    NotReported,
    Reported(Learned),
}

/// One dispatch record, every field bounded and cleaned.
#[derive(Clone, Debug)]
pub(super) struct Record {
    pub status: Status,
    pub reached: Option<bool>,
    pub execution_id: Option<String>,
    pub operator: Option<String>,
    pub selected_template: Option<String>,
    pub error: Option<String>,
    /// The goal as goal-host holds it: bounded, control characters other than line ends
    /// removed, so it can go into a label.
    pub goal: Option<String>,
    pub task_id: Option<String>,
    pub walk_log: Vec<String>,
    pub principal: Principal,
    pub learning: Learning,
}

impl Record {
    /// The record in `body`, or in the envelope goal-host wraps it in.
    pub(super) fn read(body: &Value) -> Option<Record> {
        let r = if body.get("status").is_some() {
            body
        } else {
            ["record", "dispatch", "data"]
                .iter()
                .find_map(|k| body.get(*k).filter(|v| v.is_object()))?
        };
        if !r.is_object() {
            return None;
        }
        Some(Record {
            status: Status::read(text(r, "status")),
            reached: r.get("reached").and_then(Value::as_bool),
            execution_id: first_text(r, &["executionId", "execution_id"]),
            operator: first_text(r, &["operator", "operator_label"]),
            selected_template: first_text(r, &["selectedTemplateId", "selected_template_id"]),
            error: text(r, "error"),
            goal: r.get("goal").and_then(Value::as_str).and_then(goal_text),
            task_id: first_text(r, &["taskId", "task_id"]),
            walk_log: walk_log(r.get("walkLog")),
            principal: principal(r.get("principal")),
            learning: learning(r.get("learning")),
        })
    }

    pub(super) fn running(&self) -> bool {
        self.status == Status::Running
    }

    /// The reach verdict as printed: yes, no, (running) or unknown.
    pub(super) fn reached_word(&self) -> &'static str {
        match (self.reached, self.running()) {
            (Some(true), _) => "yes",
            (Some(false), _) => "no",
            (None, true) => "(running)",
            (None, false) => "unknown",
        }
    }
}

fn goal_text(s: &str) -> Option<String> {
    let kept: String = s
        .chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .take(GOAL_CHARS)
        .collect();
    let kept = kept.trim().to_string();
    (!kept.is_empty()).then_some(kept)
}

fn walk_log(v: Option<&Value>) -> Vec<String> {
    let Some(lines) = v.and_then(Value::as_array) else {
        return Vec::new();
    };
    // The newest lines are the ones worth keeping when there are too many.
    let skip = lines.len().saturating_sub(MAX_LOG);
    lines
        .iter()
        .skip(skip)
        .filter_map(Value::as_str)
        .map(|l| clean(l, LOG_CHARS))
        .filter(|l| !l.is_empty())
        .collect()
}

/// A principal tag as shown: a key's tag only as `key:<hex>` (a hash prefix), anything else
/// that names a key is withheld, so a raw key id is never displayed.
fn shown_tag(p: &Value) -> String {
    let withheld = "key id withheld".to_string();
    let names_key = |s: &str| s.starts_with("key:") || s.contains("key_") || s.contains("mb_live");
    if let Some(tag) = text(p, "tag") {
        let hashed = tag.strip_prefix("key:").is_some_and(|h| {
            (4..=16).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_hexdigit())
        });
        return if hashed || !names_key(&tag) {
            tag
        } else {
            withheld
        };
    }
    match text(p, "label") {
        Some(label) if names_key(&label) => withheld,
        Some(label) => label,
        None => "no tag".into(),
    }
}

fn principal(v: Option<&Value>) -> Principal {
    let Some(p) = v.filter(|p| p.is_object()) else {
        return Principal::NotReported;
    };
    Principal::Reported {
        kind: clean(&text(p, "kind").unwrap_or_else(|| "unknown".into()), 40),
        tag: shown_tag(p),
        operator: p.get("operator").and_then(Value::as_bool) == Some(true),
    }
}

fn learning(v: Option<&Value>) -> Learning {
    let Some(l) = v.filter(|l| l.is_object()) else {
        return Learning::NotReported;
    };
    let flag = |keys: &[&str]| {
        keys.iter()
            .any(|k| l.get(*k).and_then(Value::as_bool) == Some(true))
    };
    let posterior = l
        .get("posteriorChanges")
        .or_else(|| l.get("posterior"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(posterior_change)
                .take(MAX_LEARNED)
                .collect()
        })
        .unwrap_or_default();
    let gaps = match l.get("gapsFiled").or_else(|| l.get("gaps")) {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|g| match g {
                Value::String(s) => Some(clean(s, FIELD_CHARS)),
                o => text(o, "id"),
            })
            .take(MAX_LEARNED)
            .collect(),
        Some(Value::Number(n)) => (0..n.as_u64().unwrap_or(0).min(MAX_LEARNED as u64))
            .map(|_| "(unnamed)".to_string())
            .collect(),
        _ => Vec::new(),
    };
    Learning::Reported(Learned {
        goal_path: flag(&["goalPathRecorded", "goal_path_recorded"]),
        posterior,
        gaps,
        label: flag(&["labelWritten", "oracleLabelWritten", "label_written"]),
    })
}

/// One posterior change, or `None` for a template listed with no change (Δ0 is not a change).
fn posterior_change(v: &Value) -> Option<String> {
    let template = first_text(v, &["templateId", "template_id", "template"])?;
    let delta = |keys: &[&str]| keys.iter().find_map(|k| v.get(*k).and_then(Value::as_f64));
    let da = delta(&["deltaAlpha", "dAlpha", "alpha_delta"]).unwrap_or(0.0);
    let db = delta(&["deltaBeta", "dBeta", "beta_delta"]).unwrap_or(0.0);
    if !(da.is_finite() && db.is_finite()) || (da == 0.0 && db == 0.0) {
        return None;
    }
    Some(format!("{template} (Δα {da:+}, Δβ {db:+})"))
}

/// The header of goal_status, goal_reasoning and run_goal: reached first, always.
pub(super) fn header(rec: &Record, dispatch_id: &str) -> String {
    let or_none = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".into());
    let mut out = format!("reached: {}\n", rec.reached_word());
    let _ = writeln!(out, "status: {}", rec.status.word());
    match (&rec.status, rec.reached) {
        (Status::Completed, Some(false)) => out.push_str(
            "  (completed without reaching the goal: a hollow completion; reached is the verdict, status only the template's exit)\n",
        ),
        (Status::Failed, Some(true)) => out.push_str(
            "  (failed, yet the goal was reached, e.g. by a satisfier; reached is the verdict, status only the template's exit)\n",
        ),
        _ => {}
    }
    let _ = writeln!(out, "dispatchId: {dispatch_id}");
    let _ = writeln!(out, "executionId: {}", or_none(&rec.execution_id));
    if let Some(task) = &rec.task_id {
        let _ = writeln!(out, "taskId: {task}");
    }
    let _ = writeln!(
        out,
        "operator: {} (claimed, unverified)",
        rec.operator.as_deref().unwrap_or("not reported")
    );
    let _ = writeln!(
        out,
        "selectedTemplateId: {}",
        or_none(&rec.selected_template)
    );
    let _ = writeln!(out, "error: {}", or_none(&rec.error));
    out.push_str(&principal_lines(&rec.principal));
    out
}

/// Who dispatched, as goal-host validated it (anchor: principal_lines).
pub(super) fn principal_lines(p: &Principal) -> String {
    match p {
        Principal::NotReported => "principal: not reported (an older goal-host, or a record from \
            before callers were validated); this does not mean the caller lacked operator \
            authority\n"
            .into(),
        Principal::Reported {
            kind,
            tag,
            operator: true,
        } => format!("principal: {kind} ({tag})\noperator authority: yes (validated)\n"),
        Principal::Reported { kind, tag, .. } => {
            let why = match kind.as_str() {
                "key" => {
                    ": an ordinary keyed caller; directed edits and operator priority do not apply"
                }
                "node_self" => " (node self-call)",
                _ => "",
            };
            format!("principal: {kind} ({tag})\nran without operator authority{why}\n")
        }
    }
}

/// What the walk taught, as goal-host reports it (anchor: learning_line).
pub(super) fn learning_line(l: &Learning) -> String {
    let Learning::Reported(l) = l else {
        return "learning: not reported by goal-host\n".into();
    };
    let mut parts = Vec::new();
    if l.goal_path {
        parts.push("goal path recorded".to_string());
    }
    if !l.posterior.is_empty() {
        parts.push(format!("posterior changes: {}", l.posterior.join(", ")));
    }
    if !l.gaps.is_empty() {
        parts.push(format!("gaps filed: {}", l.gaps.join(", ")));
    }
    if l.label {
        parts.push("oracle label written".to_string());
    }
    if parts.is_empty() {
        return "learning: none recorded\n".into();
    }
    format!("learning: {}\n", parts.join("; "))
}

/// How a `goalWalkState` read failed.
pub(super) enum WalkFail {
    /// goal-host's own 404: no such dispatch in this org.
    NotFound,
    /// An answer without a readable record: `missing` names what it lacks.
    Malformed {
        missing: &'static str,
    },
    Resolve(ResolveError),
}

impl WalkFail {
    /// Worth another poll: the producer was slow or briefly unavailable.
    pub(super) fn transient(&self) -> bool {
        match self {
            WalkFail::Resolve(
                ResolveError::ProducerTimeout { .. } | ResolveError::ProducerUnreachable { .. },
            ) => true,
            WalkFail::Resolve(ResolveError::Answer { status, .. }) => *status >= 500,
            _ => false,
        }
    }

    /// The failure as `tool`'s one line.
    pub(super) fn line(self, tool: &str, id: &str) -> Reply {
        match self {
            WalkFail::NotFound => Reply::error(format!(
                "{tool}: goal-host (or the embedded ledger's goal board) has no dispatch {id} \
                 (HTTP 404 dispatch_not_found): it never existed in this org, or its record was \
                 pruned (goal-host keeps about the last 100)"
            )),
            WalkFail::Malformed { missing } => Reply::error(format!(
                "{tool}: {WALK_STATE} answered without a readable dispatch record ({missing})"
            )),
            WalkFail::Resolve(ResolveError::NoProducer { .. }) => Reply::error(format!(
                "{tool}: no_producer({WALK_STATE}): either no producer answered (no goal-host is \
                 reachable through this attachment) or goal-host has no dispatch {id}"
            )),
            WalkFail::Resolve(e) => resolve_failed(tool, e),
        }
    }
}

/// Reads the record of `id`; `once` for a poll, whose retry is the next poll.
pub(super) async fn read_record(
    att: &Attachment,
    id: &str,
    once: bool,
) -> Result<Record, WalkFail> {
    let pointer = json!({"type": WALK_STATE, "dispatchId": id});
    let how = Sending {
        once,
        cap: Some(WALK_STATE_CAP),
    };
    let r = att
        .resolve_with(pointer, how)
        .await
        .map_err(WalkFail::Resolve)?;
    if r.status == 404 && r.body.get("error").and_then(Value::as_str) == Some("dispatch_not_found")
    {
        return Err(WalkFail::NotFound);
    }
    let body = r.ok(WALK_STATE).map_err(WalkFail::Resolve)?;
    Record::read(&body).ok_or(WalkFail::Malformed {
        missing: "no status",
    })
}

/// A dispatch id given by the agent, as sent and shown: trimmed, and refused when blank or not
/// one bounded line.
pub(super) fn dispatch_id_arg(tool: &str, raw: &str) -> Result<String, Reply> {
    let id = raw.trim();
    if id.is_empty() || id.len() > FIELD_CHARS || id.chars().any(char::is_control) {
        return Err(Reply::error(format!(
            "{tool}: dispatch_id must be the dispatchId run_goal_async answered (one line, at most \
             {FIELD_CHARS} characters); nothing was sent"
        )));
    }
    Ok(id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_key_id_is_never_shown() {
        let tag = |p: Value| match principal(Some(&p)) {
            Principal::Reported { tag, .. } => tag,
            Principal::NotReported => "not reported".into(),
        };
        assert_eq!(
            tag(json!({"kind": "key", "tag": "key:1a2b3c4d"})),
            "key:1a2b3c4d"
        );
        assert_eq!(
            tag(json!({"kind": "key", "tag": "key:key_0123456789ab"})),
            "key id withheld"
        );
        assert_eq!(
            tag(json!({"kind": "key", "label": "key:key_0123456789ab"})),
            "key id withheld"
        );
        assert_eq!(
            tag(json!({"kind": "node_self", "tag": "node-self"})),
            "node-self"
        );
        assert_eq!(principal(Some(&json!("key"))), Principal::NotReported);
        assert_eq!(principal(None), Principal::NotReported);
    }

    #[test]
    fn a_template_listed_with_no_change_is_no_change() {
        let l = learning(Some(&json!({
            "goalPathRecorded": true,
            "posteriorChanges": [
                {"templateId": "t1", "deltaAlpha": 1, "deltaBeta": 0},
                {"templateId": "t2", "deltaAlpha": 0, "deltaBeta": 0},
            ],
            "gapsFiled": ["gap_1"],
        })));
        assert_eq!(
            learning_line(&l),
            "learning: goal path recorded; posterior changes: t1 (Δα +1, Δβ +0); gaps filed: gap_1\n"
        );
        assert_eq!(
            learning_line(&learning(Some(&json!({})))),
            "learning: none recorded\n"
        );
        assert_eq!(
            learning_line(&learning(Some(&Value::Null))),
            "learning: not reported by goal-host\n"
        );
    }

    #[test]
    fn hostile_records_are_bounded() {
        let long: Vec<Value> = (0..500)
            .map(|i| json!(format!("line {i}\nforged")))
            .collect();
        let r = Record::read(&json!({"status": 3, "walkLog": long, "reached": "yes"})).unwrap();
        assert_eq!(r.status, Status::Missing);
        assert_eq!(r.reached_word(), "unknown");
        assert_eq!(r.walk_log.len(), MAX_LOG);
        assert_eq!(r.walk_log[MAX_LOG - 1], "line 499 forged");
        assert!(Record::read(&json!([1])).is_none());
        let wrapped = Record::read(&json!({"record": {"status": "running"}})).unwrap();
        assert_eq!(wrapped.reached_word(), "(running)");
    }
}

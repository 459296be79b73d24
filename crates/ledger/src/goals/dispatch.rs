//! `goalDispatchAsync`: a goal becomes a task on the board cells pull, composed by the same
//! owners `finding record --category task --origin URL` uses, and the dispatch row beside it,
//! in one transaction.

use serde_json::{Map, Value, json};

use super::store::{self, Dispatch, NewDispatch};
use super::walk::one_line;
use crate::concepts::CreateConcept;
use crate::db::Writer;
use crate::errors::ApiError;
use crate::input::Fields;
use crate::keys::{KeyIdentity, Scope};
use metabob_process::guard::redact_url_credentials;
use metabob_process::random::random_hex;
use metabob_wire::depends::{MAX_BLOCKERS, RECORDED_LINE, is_task_id};
use metabob_wire::fields::field_rule;
use metabob_wire::finding::{Finding, FindingStatus, Severity};
use metabob_wire::record::FindingDraft;
use metabob_wire::repo_identity::{identity_of_origin, last_segment};

/// Most files one dispatched task names: each gets its own finding id, and the ids' header line
/// must stay within its cap for every reader.
pub const MAX_FILES: usize = 100;
/// Most tags one dispatch carries.
pub const MAX_TAGS: usize = 50;
/// Longest summary taken from a goal's first line, in characters.
const SUMMARY_CHARS: usize = 200;
/// Longest operator, session or id accepted, in bytes.
const ID_BYTES: usize = 200;

/// A dispatch, validated and composed; nothing written yet.
pub struct DispatchRequest {
    row: Dispatch,
    variables: Value,
    create: CreateConcept,
    claim: Option<String>,
}

fn bad(field: &str, why: impl std::fmt::Display) -> ApiError {
    ApiError::bad(format!("{field}: {why}"))
}

/// A string within `cap` bytes on one line (a newline would add a line to the task's details).
fn line(field: &str, value: &str, cap: usize) -> Result<String, ApiError> {
    let value = value.trim();
    if value.len() > cap {
        return Err(bad(field, format!("longer than {cap} bytes")));
    }
    if value.chars().any(char::is_control) {
        return Err(bad(field, "must be one line without control characters"));
    }
    Ok(value.to_string())
}

fn opt_line(v: &Fields<'_>, name: &str, cap: usize) -> Result<Option<String>, ApiError> {
    let field = format!("variables.{name}");
    match v.opt_str(name)? {
        None => Ok(None),
        Some(s) if s.trim().is_empty() => Ok(None),
        Some(s) => line(&field, s, cap).map(Some),
    }
}

/// `variables.files`: a list of paths or one comma-separated string, at least one.
fn files(vars: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    const FIELD: &str = "variables.files";
    let raw: Vec<String> = match vars.get("files") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => s.split(',').map(str::to_string).collect(),
        Some(Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len().min(MAX_FILES));
            for item in items {
                let s = item.as_str().ok_or_else(|| {
                    bad(
                        FIELD,
                        "must be an array of paths or a comma-separated string",
                    )
                })?;
                if s.contains(',') {
                    return Err(bad(
                        FIELD,
                        "a path holding a comma cannot be named in a task's files line",
                    ));
                }
                out.push(s.to_string());
            }
            out
        }
        Some(_) => {
            return Err(bad(
                FIELD,
                "must be an array of paths or a comma-separated string",
            ));
        }
    };
    // Counted before anything else is done per entry, so a body of a million commas costs one pass.
    if raw.iter().filter(|f| !f.trim().is_empty()).count() > MAX_FILES {
        return Err(bad(FIELD, format!("more than {MAX_FILES} files")));
    }
    let cap = field_rule("file").cap;
    let mut files = Vec::new();
    for f in raw {
        let f = line(FIELD, &f, cap)?;
        if !f.is_empty() && !files.contains(&f) {
            files.push(f);
        }
    }
    if files.is_empty() {
        return Err(bad(
            FIELD,
            "required: a task names at least one file (as finding record requires); give the files the goal is about",
        ));
    }
    if files.join(", ").len() > field_rule("files").cap {
        return Err(bad(
            FIELD,
            format!("longer than {} bytes in all", field_rule("files").cap),
        ));
    }
    Ok(files)
}

/// The goal's first non-blank line, cut to a summary's length.
fn summary_of(goal: &str) -> String {
    let first = goal.lines().find(|l| !l.trim().is_empty()).unwrap_or(goal);
    one_line(first, SUMMARY_CHARS)
}

fn tags(p: &Fields<'_>) -> Result<Vec<String>, ApiError> {
    let tags = p.opt_str_list("tags")?.unwrap_or_default();
    if tags.len() > MAX_TAGS {
        return Err(bad("tags", format!("more than {MAX_TAGS} tags")));
    }
    tags.iter()
        .map(|t| line("tags", t, field_rule("tags").cap))
        .collect()
}

/// The provenance fields: accepted when well-formed, recorded nowhere (the embedded ledger
/// composes no executions into chains).
fn provenance(p: &Fields<'_>) -> Result<(), ApiError> {
    if let Some(id) = p.opt_str("parent_execution_id")? {
        line("parent_execution_id", id, ID_BYTES)?;
    }
    let chain = p.opt_str_list("composition_chain")?.unwrap_or_default();
    if chain.len() > MAX_TAGS {
        return Err(bad(
            "composition_chain",
            format!("more than {MAX_TAGS} ids"),
        ));
    }
    for id in &chain {
        line("composition_chain", id, ID_BYTES)?;
    }
    Ok(())
}

/// What the goal's variables ask of the task, validated.
struct Variables {
    origin: String,
    files: Vec<String>,
    policy: Vec<(&'static str, String)>,
    /// The tasks the goal's task waits for (SPEC.md §Dependencies), by id.
    blocked_by: Vec<String>,
    severity: Severity,
    summary: Option<String>,
}

impl Variables {
    fn parse(pointer: &Fields<'_>) -> Result<Variables, ApiError> {
        let missing_repo = || {
            bad(
                "variables.repo",
                "required: the origin URL the task is pulled for, exactly as task pull --origin takes it",
            )
        };
        let vars = pointer.opt_obj("variables")?.ok_or_else(missing_repo)?;
        let v = Fields::new(vars, "variables.");
        let origin = opt_line(&v, "repo", field_rule("repo").cap)?.ok_or_else(missing_repo)?;
        let mut policy = Vec::new();
        for (key, cap) in [
            ("ref", field_rule("ref").cap),
            ("push_to", field_rule("status").cap),
            ("integrate", field_rule("status").cap),
        ] {
            if let Some(value) = opt_line(&v, key, cap)? {
                policy.push((key, value));
            }
        }
        let severity = match opt_line(&v, "severity", field_rule("severity").cap)? {
            None => Severity::High,
            Some(s) => s
                .parse()
                .map_err(|e: String| bad("variables.severity", e))?,
        };
        let blocked_by = v.opt_str_list("blocked_by")?.unwrap_or_default();
        if blocked_by.len() > MAX_BLOCKERS {
            return Err(bad(
                "variables.blocked_by",
                format!("at most {MAX_BLOCKERS} task ids"),
            ));
        }
        if let Some(word) = blocked_by.iter().find(|b| !is_task_id(b)) {
            return Err(bad(
                "variables.blocked_by",
                format!("{:?} is not a task id (agf_…)", one_line(word, 80)),
            ));
        }
        Ok(Variables {
            files: files(vars)?,
            blocked_by,
            summary: opt_line(&v, "summary", field_rule("summary").cap)?,
            origin,
            policy,
            severity,
        })
    }

    /// What the dispatch row keeps of them: the known fields, the origin without credentials.
    fn stored(&self, summary: &str) -> Value {
        let mut v = json!({
            "repo": redact_url_credentials(&self.origin),
            "files": self.files,
            "severity": self.severity.as_str(),
            "summary": summary,
        });
        for (key, value) in &self.policy {
            v[*key] = Value::from(value.clone());
        }
        if !self.blocked_by.is_empty() {
            v["blocked_by"] = json!(self.blocked_by);
        }
        v
    }
}

impl DispatchRequest {
    // anchor: parse-dispatch
    pub fn parse(
        pointer: &Map<String, Value>,
        claim: Option<&Value>,
        key: &KeyIdentity,
    ) -> Result<DispatchRequest, ApiError> {
        let p = &Fields::new(pointer, "");
        // Any template named at all is refused, whatever its type: nothing here would run it.
        let template = pointer
            .get("targetTemplateId")
            .filter(|v| !v.is_null() && v.as_str().is_none_or(|s| !s.trim().is_empty()));
        if template.is_some() {
            return Err(bad(
                "targetTemplateId",
                "the embedded ledger selects no templates; send the goal with variables.repo and it becomes a task on that repository's board",
            ));
        }
        let goal = match p.opt_str("goal")? {
            Some(g) if !g.trim().is_empty() => g.trim().to_string(),
            _ => {
                return Err(bad(
                    "goal",
                    "required: the embedded ledger dispatches a goal's text as a task; it selects no templates",
                ));
            }
        };
        let cap = field_rule("goal").cap;
        if goal.len() > cap {
            return Err(bad("goal", format!("longer than {cap} bytes")));
        }
        let operator = line("operator", p.req_str("operator")?, ID_BYTES)?;
        let vars = Variables::parse(p)?;
        let tags = tags(p)?;
        provenance(p)?;
        let learning_mode = match p.opt_enum("learning_mode", &["observe", "learn"], "")? {
            "" => None,
            mode => Some(mode.to_string()),
        };
        let id = format!("dispatch_{}", random_hex(12));
        let session = claim
            .and_then(|c| c.get("session"))
            .and_then(Value::as_str)
            .map(|s| one_line(s, ID_BYTES))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| id.clone());
        let summary = vars.summary.clone().unwrap_or_else(|| summary_of(&goal));
        let create = task_concept(&vars, &goal, &summary, &operator, session, claim)?;
        Ok(DispatchRequest {
            variables: vars.stored(&summary),
            row: Dispatch {
                id,
                task_concept: String::new(),
                task_id: String::new(),
                goal,
                operator,
                tags,
                learning_mode,
                key_id: key.key_id.clone(),
                key_admin: key.scopes.contains(&Scope::Admin),
                created_ms: 0,
            },
            create,
            claim: claim.map(Value::to_string),
        })
    }

    /// Writes the task concept and the dispatch row in one transaction; the task is read back
    /// with the client's own reader first, so a task no cell could read is never written.
    // anchor: run-dispatch
    pub fn run(&self, w: &mut Writer, org: &str) -> Result<Value, ApiError> {
        let now = w.tick()?;
        let tx = w.sql();
        let concept = self.create.insert(tx, org, now)?;
        let task = match Finding::read(&concept) {
            Ok(Some(f)) if f.is_task() => f,
            Ok(_) => {
                return Err(ApiError::Internal(
                    "the composed task does not read as a task".into(),
                ));
            }
            Err(why) => {
                return Err(ApiError::bad(format!(
                    "variables: the task would not be read by cells ({why}); nothing was written"
                )));
            }
        };
        let mut row = self.row.clone();
        row.task_concept = task.concept_id.clone();
        row.task_id = task.id().to_string();
        row.created_ms = now;
        let stored = NewDispatch {
            row: &row,
            variables: &self.variables,
            claim: self.claim.as_deref(),
        };
        store::insert_dispatch(tx, org, &stored)?;
        Ok(json!({
            "dispatchId": row.id,
            "status": "running",
            "taskId": task.id(),
            "conceptId": task.concept_id,
        }))
    }
}

/// The task's concept write, composed as `finding record --category task --origin` composes
/// it: the draft's rules, the origin's identity, the policy lines first in the details (the
/// pull reads the first of each), then the goal.
fn task_concept(
    vars: &Variables,
    goal: &str,
    summary: &str,
    operator: &str,
    session: String,
    claim: Option<&Value>,
) -> Result<CreateConcept, ApiError> {
    let mut details: Vec<String> = vars
        .policy
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .chain(
            vars.blocked_by
                .iter()
                .map(|b| format!("{RECORDED_LINE}: {b}")),
        )
        .collect();
    if !details.is_empty() {
        details.push(String::new());
    }
    details.push(goal.to_string());
    let draft = FindingDraft {
        files: vars.files.clone(),
        summary: summary.to_string(),
        details: details.join("\n"),
        severity: vars.severity,
        category: "task".into(),
        line_start: None,
        line_end: None,
        status: FindingStatus::Open,
    }
    .checked()
    .map_err(|e| ApiError::bad(format!("variables: {e}")))?;
    let repository = identity_of_origin(&vars.origin);
    let name = last_segment(&repository).to_string();
    let pointer = draft
        .into_new(
            repository,
            name,
            Some(operator.to_string()),
            session,
            metabob_process::random::new_finding_id,
        )
        .to_pointer();
    let empty = Map::new();
    let obj = pointer.as_object().unwrap_or(&empty);
    CreateConcept::parse(&Fields::new(obj, ""), claim)
}

//! `task pull`: the cell's entrypoint step (SPEC.md §task pull). Takes a task from the ledger,
//! claims it, clones the origin at the task's validated ref and writes the task directory.
//! Anything that fails after the claim withdraws it.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Value, json};

use super::CellError;
use super::policy::{self, CONVENTION_SHAPE, Convention, Policy, TrustList};
use super::refname::validate_ref;
use crate::attachment::{Attachment, ResolveError, vessel_id};
use crate::env::Env;
use crate::ledger::claims::{self, ClaimAction, ClaimOutcome, Held};
use crate::ledger::finding::Finding;
use crate::ledger::header::{Header, find_line};
use crate::ledger::recall::{self, LedgerView, Recalled};
use crate::ledger::repo_identity::{identity_of_origin, vessel_aliases};
use crate::ledger::verdict::Standing;
use crate::util::{now_ms, rfc3339_ms, write_atomic};

/// How soon to look again when a claim did not settle either way.
const UNSETTLED_RETRY_MS: i64 = 5_000;

#[derive(Clone, Debug)]
pub struct PullOptions {
    pub origin: String,
    pub task_dir: PathBuf,
    pub work_dir: PathBuf,
    pub minutes: i64,
    pub trust: Option<String>,
    /// Clone progress on stderr; the caller sets it when stderr is a terminal.
    pub progress: bool,
}

/// What happened to one candidate.
#[derive(Clone, Debug, Serialize)]
pub struct Candidate {
    pub task_id: String,
    pub concept_id: String,
    pub summary: String,
    /// claimed, renewed, held, lost, unsettled, closed, refused, withdrawn
    pub outcome: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PullStatus {
    Pulled,
    NothingOpen,
    TryLater,
}

/// The reply: `--json` prints it as is.
#[derive(Clone, Debug, Serialize)]
pub struct PullReport {
    pub status: PullStatus,
    pub task: Option<Value>,
    /// When a cell that found every task held should look again: the earliest claim end.
    pub retry_after: Option<String>,
    pub retry_after_seconds: Option<i64>,
    pub candidates: Vec<Candidate>,
    /// The ledger's window was full: older tasks may exist past it and were not considered.
    pub recall_truncated: bool,
}

/// Runs the pull (anchor: run_task_pull).
pub async fn run(opts: PullOptions, mut env: Env) -> Result<PullReport, CellError> {
    for dir in [&opts.task_dir, &opts.work_dir] {
        ensure_empty(dir)?;
    }
    let work_abs = absolute(&env, &opts.work_dir);
    let att = super::attach_once(&mut env, &work_abs).await?;
    let Some(me) = vessel_id(&env, &work_abs) else {
        return Err(CellError::Failed(
            "no vessel identity: set VESSEL_ID or an API key".into(),
        ));
    };
    let session = att.claim().session.clone();

    let repository = identity_of_origin(&opts.origin);
    let aliases = vessel_aliases(&repository);
    let view = recall::recall(&att, |f| {
        aliases.map_finding(f.repo.as_deref().unwrap_or_default(), &f.files)
    })
    .await?;
    let now = now_ms();

    // Open tasks: category task, recorded open, no verdict that closes it or holds a fix.
    let mut mine = Vec::new();
    let mut free = Vec::new();
    let mut report = PullReport {
        status: PullStatus::NothingOpen,
        task: None,
        retry_after: None,
        retry_after_seconds: None,
        candidates: Vec::new(),
        recall_truncated: view.findings_truncated,
    };
    let mut retry_at: Option<i64> = None;
    let mut open = 0usize;
    for r in view
        .findings
        .iter()
        .filter(|r| r.finding.is_task() && r.finding.status == "open")
    {
        if !matches!(view.standing(&r.finding), Standing::Open) {
            continue;
        }
        open += 1;
        match view.holder(&r.finding, now) {
            Some(h) if h.holder == me => mine.push(r),
            Some(h) => {
                earliest(&mut retry_at, claims::lapses_at(&h));
                report
                    .candidates
                    .push(candidate(&r.finding, "held", Some(held_line(&h))));
            }
            None => free.push(r),
        }
    }
    free.sort_by_key(|r| (r.finding.severity, r.finding.seq));
    let conventions = read_conventions(&att, &repository).await?;

    for r in mine.into_iter().chain(free) {
        let f = &r.finding;
        let outcome = claims::claim_finding(
            &att,
            f,
            &me,
            &session,
            opts.minutes,
            ClaimAction::Claim,
            None,
        )
        .await?;
        let held = match &outcome {
            ClaimOutcome::Claimed { held } | ClaimOutcome::Renewed { held } => held.clone(),
            ClaimOutcome::Held { by } | ClaimOutcome::Lost { winner: by } => {
                earliest(&mut retry_at, claims::lapses_at(by));
                report
                    .candidates
                    .push(candidate(f, outcome.word(), Some(held_line(by))));
                continue;
            }
            ClaimOutcome::Unsettled => {
                earliest(&mut retry_at, now_ms() + UNSETTLED_RETRY_MS);
                report.candidates.push(candidate(f, "unsettled", None));
                continue;
            }
            // A claim can only be refused for the key itself (read-only): no task can be taken.
            ClaimOutcome::Refused { reason } => return Err(CellError::Failed(reason.clone())),
            ClaimOutcome::Closed | ClaimOutcome::Released => {
                report.candidates.push(candidate(f, outcome.word(), None));
                continue;
            }
        };
        report
            .candidates
            .push(candidate(f, outcome.word(), Some(held_line(&held))));

        // Past the claim: every failure withdraws it, so one bad task never blocks the fleet
        // for the claim's length.
        let trust = TrustList::new(opts.trust.as_deref(), &env, f.recorded_by.as_deref());
        let policy = policy::decide(&f.details, &conventions, &trust);
        let reference = find_line(&f.details, "ref").map(str::to_owned);
        if let Some(reference) = &reference
            && let Err(refused) = validate_ref(reference)
        {
            let why = format!("ref {reference:?} refused: {refused}");
            withdraw(&att, f, &me, &session, &why).await;
            let last = report.candidates.last_mut().expect("pushed above");
            last.outcome = "withdrawn".into();
            last.detail = Some(why);
            continue;
        }
        let setup = set_up(
            &opts,
            &repository,
            r,
            &view,
            &policy,
            &trust,
            &held,
            &me,
            &session,
            reference.as_deref(),
        )
        .await;
        match setup {
            Ok(task) => {
                report.status = PullStatus::Pulled;
                report.task = Some(task);
                return Ok(report);
            }
            Err(why) => {
                withdraw(&att, f, &me, &session, &why).await;
                clear(&opts.work_dir);
                clear(&opts.task_dir);
                return Err(CellError::Failed(format!(
                    "{why}; the claim on {} was withdrawn",
                    f.id()
                )));
            }
        }
    }

    // Tasks others hold, or whose claim did not settle, can still come free; a withdrawn task
    // (its ref is refused) or one closed meanwhile cannot.
    if open > 0
        && report
            .candidates
            .iter()
            .any(|c| matches!(c.outcome.as_str(), "held" | "lost" | "unsettled"))
    {
        let at = retry_at.unwrap_or(now_ms() + UNSETTLED_RETRY_MS);
        report.status = PullStatus::TryLater;
        report.retry_after = Some(rfc3339_ms(at));
        report.retry_after_seconds = Some(((at - now_ms()).max(0) + 999) / 1000);
    }
    Ok(report)
}

/// Keeps the earliest moment worth looking again.
fn earliest(slot: &mut Option<i64>, at: i64) {
    *slot = Some(slot.map_or(at, |t| t.min(at)));
}

fn candidate(f: &Finding, outcome: &str, detail: Option<String>) -> Candidate {
    Candidate {
        task_id: f.id().to_string(),
        concept_id: f.concept_id.clone(),
        summary: f.summary.clone(),
        outcome: outcome.to_string(),
        detail,
    }
}

fn held_line(h: &Held) -> String {
    format!("{} until {}", h.holder, rfc3339_ms(h.until_ms))
}

async fn withdraw(att: &Attachment, f: &Finding, me: &str, session: &str, why: &str) {
    tracing::warn!("withdrawing the claim on {}: {why}", f.id());
    if let Err(e) =
        claims::claim_finding(att, f, me, session, 0, ClaimAction::Release, Some(why)).await
    {
        tracing::warn!("the withdrawal was not written ({e}); the claim lapses by itself");
    }
}

fn absolute(env: &Env, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        env.cwd().join(p)
    }
}

/// A task never reuses a directory: each must be empty or missing.
fn ensure_empty(dir: &Path) -> Result<(), CellError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => Err(CellError::Failed(format!(
                "{} is not empty; a cell starts from empty task and work directories",
                dir.display()
            ))),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CellError::Failed(format!(
            "{} cannot be read: {e}",
            dir.display()
        ))),
    }
}

/// Removes what a failed pull left in a directory that was empty when it started.
fn clear(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            let _ = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
    }
}

/// This repository's `project_convention` concepts.
async fn read_conventions(
    att: &Attachment,
    repository: &str,
) -> Result<Vec<Convention>, ResolveError> {
    let window = recall::read_window(att, CONVENTION_SHAPE).await?;
    Ok(window
        .rows
        .iter()
        .filter_map(|c| {
            let content = c.get("content").and_then(Value::as_str)?.to_string();
            let repo = Header::parse(&content).get("repo")?.to_ascii_lowercase();
            if repo != repository.to_ascii_lowercase() {
                return None;
            }
            Some(Convention {
                concept_id: crate::ledger::finding::concept_id(c)?,
                seq: c.get("seq").and_then(Value::as_i64).unwrap_or(0),
                content,
            })
        })
        .collect())
}

/// Clones the work directory and writes task.json and context.md; the error line says which
/// step failed.
#[allow(clippy::too_many_arguments)]
async fn set_up(
    opts: &PullOptions,
    repository: &str,
    r: &Recalled,
    view: &LedgerView,
    policy: &Policy,
    trust: &TrustList,
    held: &Held,
    me: &str,
    session: &str,
    reference: Option<&str>,
) -> Result<Value, String> {
    let (origin, work, progress) = (opts.origin.clone(), opts.work_dir.clone(), opts.progress);
    let branch = reference.map(str::to_owned);
    let base = tokio::task::spawn_blocking(move || {
        crate::git::clone_at(&origin, &work, branch.as_deref(), progress).map(|(_, sha)| sha)
    })
    .await
    .map_err(|e| format!("the clone stopped: {e}"))?
    .map_err(|e| format!("cloning {} failed: {e}", opts.origin))?;

    let f = &r.finding;
    let task = json!({
        "task_id": f.id(),
        "concept_id": f.concept_id,
        "finding_ids": f.finding_ids,
        "summary": f.summary,
        "severity": f.severity,
        "category": f.category,
        "files": r.files,
        "details": f.details,
        "origin": opts.origin,
        "repository": repository,
        "ref": reference,
        "policy": {
            "push_to": policy.push_to,
            "integrate": policy.integrate,
            "conflicts": policy.conflicts,
            "push_branch": policy.push_branch(f.id()),
            "target": policy.target(f.id()),
            "refused": policy.refused,
        },
        "claim": { "holder": held.holder, "until": rfc3339_ms(held.until_ms), "minutes": opts.minutes },
        "recorder": f.recorded_by,
        "pulled_at": rfc3339_ms(now_ms()),
        "vessel_id": me,
        "session": session,
        "trust": trust,
        "base": base,
    });
    let text = serde_json::to_string_pretty(&task).map_err(|e| format!("task.json: {e}"))?;
    write_atomic(
        &opts.task_dir.join("task.json"),
        format!("{text}\n").as_bytes(),
        None,
    )
    .map_err(|e| format!("writing {}: {e}", opts.task_dir.join("task.json").display()))?;
    let context = context_md(r, view, policy, &task);
    write_atomic(&opts.task_dir.join("context.md"), context.as_bytes(), None).map_err(|e| {
        format!(
            "writing {}: {e}",
            opts.task_dir.join("context.md").display()
        )
    })?;
    Ok(task)
}

/// The harness's briefing: details, policy, open non-task findings on the task's files, and the
/// task as recorded.
fn context_md(r: &Recalled, view: &LedgerView, policy: &Policy, task: &Value) -> String {
    use std::fmt::Write as _;
    let f = &r.finding;
    let mut s = String::new();
    let _ = writeln!(s, "# Task {}: {}\n", f.id(), f.summary);
    let _ = writeln!(
        s,
        "Severity {}; files: {}\n",
        f.severity,
        r.files.join(", ")
    );
    let _ = writeln!(
        s,
        "## Details\n\n{}\n",
        if f.details.trim().is_empty() {
            "(none)"
        } else {
            f.details.trim()
        }
    );
    let _ = writeln!(s, "## Integration policy\n");
    let _ = writeln!(
        s,
        "- push to `{}` ({:?})\n- integrate: {:?} ({:?})\n- conflicts: {:?}\n- the fix closes once merged into `{}`; \
         commit it with a `Fixes-Finding: {}` trailer\n",
        task["policy"]["push_branch"].as_str().unwrap_or_default(),
        policy.push_to.source,
        policy.integrate.value,
        policy.integrate.source,
        policy.conflicts.value,
        task["policy"]["target"].as_str().unwrap_or_default(),
        f.id()
    );
    let related: Vec<&Recalled> = view
        .findings
        .iter()
        .filter(|o| !o.finding.is_task() && matches!(view.standing(&o.finding), Standing::Open))
        .filter(|o| o.files.iter().any(|x| r.files.contains(x)))
        .collect();
    let _ = writeln!(s, "## Open findings on these files ({})\n", related.len());
    for o in related {
        let _ = writeln!(
            s,
            "- [{}][{}] {} — {} ({})",
            o.finding.severity,
            o.finding.category,
            o.finding.summary,
            o.files.join(", "),
            o.finding.id()
        );
    }
    let _ = writeln!(
        s,
        "\n## The task as recorded\n\n```json\n{}\n```",
        serde_json::to_string_pretty(task).unwrap_or_default()
    );
    s
}

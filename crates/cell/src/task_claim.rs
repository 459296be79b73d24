//! `task renew`, `task release` and `task reopen`: the entrypoint's heartbeat on the claim `task
//! pull` took, read from task.json, and the operator's way back for a parked task.
//! (SPEC.md §task renew and task release)
//! (SPEC.md §Parked tasks)

use std::path::Path;

use super::CellError;
use super::task_file::TaskFile;
use crate::ledger::claims::{self};
use crate::ledger::parking::{self};
use crate::ledger::recall::{fetch_concept, read_window};
use crate::ledger::verdict::{self};
use metabob_net::attachment::{Attachment, vessel_id};
use metabob_process::env::Env;
use metabob_wire::claims::{ClaimAction, ClaimOutcome};
use metabob_wire::depends::edge_row;
use metabob_wire::finding::{FINDING_SHAPE, Finding};
use metabob_wire::parking::{Parked, Reopen};
use metabob_wire::row::read_rows;
use metabob_wire::task_action::{TASK_ACTION_SHAPE, TASK_HISTORY_SHAPE, TaskAction};
use metabob_wire::verdict::VerdictKind;

/// What the entrypoint does with the claim it holds.
#[derive(Clone, Debug)]
pub enum GiveBack {
    /// Keep it, for these minutes (default: what task.json recorded).
    Renew { minutes: Option<i64> },
    /// Give it back, recording why on the withdrawal.
    Release { reason: Option<String> },
    /// Give it back as failed in this cell; failures by `park_after` cells park the task.
    Fail {
        reason: Option<String>,
        park_after: usize,
    },
    /// Park it at once: the cause is the task's and lasting (a push the origin refuses for
    /// good, a target it lacks), so no other cell needs to try.
    Park { reason: String },
}

/// Renews, releases or fails the claim recorded in `<task_dir>/task.json` (anchor:
/// renew_or_release); a release records its reason, so the ledger says why the task came
/// back. A failure that parks the task answers the park.
pub async fn renew_or_release(
    task_dir: &Path,
    given: GiveBack,
    mut env: Env,
) -> Result<(ClaimOutcome, Option<Parked>), CellError> {
    let task = TaskFile::read(&task_dir.join("task.json"))?;
    let cwd = env.cwd().to_path_buf();
    let att = super::attach_once(&mut env, &cwd).await?;
    let concept_id = &task.concept_id;
    let finding = fetch_concept(&att, concept_id)
        .await?
        .as_ref()
        .and_then(Finding::from_concept)
        .ok_or_else(|| CellError::NoSuchTask {
            concept_id: concept_id.clone(),
        })?;
    let (action, minutes, reason) = match &given {
        GiveBack::Renew { minutes } => (ClaimAction::Renew, *minutes, None),
        GiveBack::Release { reason } => (ClaimAction::Release, None, reason.as_deref()),
        GiveBack::Fail { reason, .. } => (ClaimAction::Fail, None, reason.as_deref()),
        GiveBack::Park { reason } => (ClaimAction::Release, None, Some(reason.as_str())),
    };
    let (me, session) = (&task.vessel_id, &task.session);
    // The park goes first: a parked task is held by nobody, and the release after it says why.
    let parked = match &given {
        GiveBack::Park { reason } => {
            let parked = Parked {
                reason: reason.clone(),
                tried_by: vec![me.clone()],
            };
            parking::park(&att, &finding, me, session, &parked).await?;
            Some(parked)
        }
        _ => None,
    };
    let minutes = minutes.unwrap_or(task.claim.minutes);
    let outcome =
        claims::claim_finding(&att, &finding, me, session, minutes, action, reason).await?;
    let parked = match given {
        GiveBack::Fail { reason, park_after } if outcome == ClaimOutcome::Released => {
            let reason = reason.as_deref().unwrap_or("the task failed");
            parking::park_after_failures(&att, &finding, me, session, reason, park_after).await?
        }
        _ => parked,
    };
    Ok((outcome, parked))
}

/// Reopens a parked task named by its `agf_` id or its concept id (anchor: reopen_task).
pub async fn reopen_task(task: &str, mut env: Env) -> Result<Reopen, CellError> {
    let cwd = env.cwd().to_path_buf();
    let att = super::attach_once(&mut env, &cwd).await?;
    let finding = find_task(&att, task).await?;
    let me = vessel_id(&env, &cwd).unwrap_or_else(|| "operator".to_string());
    let session = att.claim().session.clone();
    Ok(parking::reopen(&att, &finding, &me, &session).await?)
}

/// Makes `task` wait for `blocker` (`Blocked`), or no longer (`Unblocked`), both named by
/// `agf_` id or concept id (anchor: change_edge); the row names the blocker by its first id,
/// which is answered. The ledger checks the edge in the write that stores it and refuses it in
/// one line (SPEC.md §Dependencies); what it notes is said as a warning.
pub async fn change_edge(
    task: &str,
    blocker: &str,
    kind: VerdictKind,
    mut env: Env,
) -> Result<String, CellError> {
    let cwd = env.cwd().to_path_buf();
    let att = super::attach_once(&mut env, &cwd).await?;
    let dependent = find_task(&att, task).await?;
    let blocker = find_task(&att, blocker).await?;
    let me = vessel_id(&env, &cwd).unwrap_or_else(|| "operator".to_string());
    let session = att.claim().session.clone();
    let row = edge_row(&dependent, kind, blocker.id(), Some(me), &session);
    verdict::write(&att, &row, "dependency").await?;
    Ok(blocker.id().to_string())
}

/// A task by concept id, or by `agf_` id among the findings the ledger's window holds.
async fn find_task(att: &Attachment, id: &str) -> Result<Finding, CellError> {
    let not_found = || CellError::NotInWindow { id: id.to_string() };
    let finding = if id.starts_with("concept_") {
        fetch_concept(att, id)
            .await?
            .as_ref()
            .and_then(Finding::from_concept)
    } else {
        let window = read_window(att, FINDING_SHAPE).await?;
        read_rows(&window.rows, "finding", Finding::read)
            .into_iter()
            .find(|f| f.has_id(id))
    };
    finding.filter(Finding::is_task).ok_or_else(not_found)
}

/// Asks the ledger one of its own task shapes: `taskHistory` or `taskAction_write` (SPEC.md
/// §Operator actions). An action is decided and written by the ledger in one write, in the name
/// of this vessel (else "operator"); the answer comes back as the ledger gave it.
pub async fn ask_about_task(
    task: &str,
    action: Option<TaskAction>,
    reason: Option<&str>,
    mut env: Env,
) -> Result<serde_json::Value, CellError> {
    let cwd = env.cwd().to_path_buf();
    let att = super::attach_once(&mut env, &cwd).await?;
    let (shape, pointer) = match action {
        None => (
            TASK_HISTORY_SHAPE,
            serde_json::json!({ "type": TASK_HISTORY_SHAPE, "task": task }),
        ),
        Some(action) => {
            let by = vessel_id(&env, &cwd).unwrap_or_else(|| "operator".to_string());
            let mut p = serde_json::json!({
                "type": TASK_ACTION_SHAPE, "task": task, "action": action.as_str(), "by": by,
            });
            if let Some(reason) = reason {
                p["reason"] = reason.into();
            }
            (TASK_ACTION_SHAPE, p)
        }
    };
    Ok(att.resolve(pointer).await?.ok(shape)?)
}

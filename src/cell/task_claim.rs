//! `task renew` and `task release`: the entrypoint's heartbeat on the claim `task pull` took,
//! read from task.json (SPEC.md §task renew and task release).

use std::path::Path;

use super::CellError;
use super::task_file::TaskFile;
use crate::env::Env;
use crate::ledger::claims::{self, ClaimAction, ClaimOutcome};
use crate::ledger::finding::Finding;
use crate::ledger::recall::fetch_concept;

/// Renews or releases the claim recorded in `<task_dir>/task.json` (anchor: renew_or_release);
/// a release records `reason` on the withdrawal, so the ledger says why the task came back.
pub async fn renew_or_release(
    task_dir: &Path,
    action: ClaimAction,
    minutes: Option<i64>,
    reason: Option<&str>,
    mut env: Env,
) -> Result<ClaimOutcome, CellError> {
    let task = TaskFile::read(&task_dir.join("task.json"))?;
    let minutes = minutes.unwrap_or(task.claim.minutes);
    let cwd = env.cwd().to_path_buf();
    let att = super::attach_once(&mut env, &cwd).await?;
    let concept_id = &task.concept_id;
    let finding = fetch_concept(&att, concept_id)
        .await?
        .as_ref()
        .and_then(Finding::from_concept)
        .ok_or_else(|| CellError::Failed(format!("the ledger has no task {concept_id}")))?;
    Ok(claims::claim_finding(
        &att,
        &finding,
        &task.vessel_id,
        &task.session,
        minutes,
        action,
        reason,
    )
    .await?)
}

//! `task renew` and `task release`: the entrypoint's heartbeat on the claim `task pull` took,
//! read from task.json (SPEC.md §task renew and task release).

use std::path::Path;

use serde_json::Value;

use super::CellError;
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
    let path = task_dir.join("task.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        CellError::Failed(format!(
            "{} cannot be read ({e}); run `task pull` first",
            path.display()
        ))
    })?;
    let task: Value = serde_json::from_str(&text)
        .map_err(|e| CellError::Failed(format!("{} is not valid JSON ({e})", path.display())))?;
    let field = |k: &str| {
        task.get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                CellError::Failed(format!(
                    "{} has no {k}; it was not written by task pull",
                    path.display()
                ))
            })
    };
    let (concept_id, holder, session) =
        (field("concept_id")?, field("vessel_id")?, field("session")?);
    let minutes = minutes
        .or_else(|| task.pointer("/claim/minutes").and_then(Value::as_i64))
        .unwrap_or(claims::DEFAULT_CLAIM_MINUTES);

    let cwd = env.cwd().to_path_buf();
    let att = super::attach_once(&mut env, &cwd).await?;
    let finding = fetch_concept(&att, &concept_id)
        .await?
        .as_ref()
        .and_then(Finding::from_concept)
        .ok_or_else(|| CellError::Failed(format!("the ledger has no task {concept_id}")))?;
    Ok(claims::claim_finding(&att, &finding, &holder, &session, minutes, action, reason).await?)
}

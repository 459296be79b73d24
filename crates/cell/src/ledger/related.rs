//! The open findings on a task's files, for context.md (SPEC.md §Related findings): on a ledger
//! that answers `findingsOnFiles`, one bounded read; otherwise the recall window, filtered.

use metabob_wire::related::{MAX_RELATED, MAX_RELATED_FILES, RELATED_SHAPE};
use serde_json::{Value, json};

use super::recall::{self, LedgerView, Recalled};
use metabob_net::attachment::{Attachment, ResolveError};
use metabob_wire::finding::Finding;
use metabob_wire::repo_identity::Aliases;
use metabob_wire::row::read_rows;
use metabob_wire::verdict::Standing;

/// The open findings that are no task and share a file with the task, newest first.
#[derive(Clone, Debug, Default)]
pub struct Related {
    pub findings: Vec<Recalled>,
    /// More may exist than were looked at.
    pub truncated: bool,
}

/// Whether `o` is a finding context.md lists for `task`.
fn relates(o: &Recalled, task: &Recalled) -> bool {
    !o.finding.is_task()
        && o.finding.concept_id != task.finding.concept_id
        && o.files.iter().any(|x| task.files.contains(x))
}

/// From a recall already read: its open findings on the task's files.
pub fn in_view(view: &LedgerView, task: &Recalled) -> Related {
    Related {
        findings: view
            .findings
            .iter()
            .filter(|o| relates(o, task) && matches!(view.standing(&o.finding), Standing::Open))
            .cloned()
            .collect(),
        truncated: view.findings_truncated,
    }
}

/// Asks the ledger (anchor: related_on_files). The answer is read as hostile: a finding of
/// another repository, or one on none of the task's files, is dropped; at most [`MAX_RELATED`]
/// are kept. A ledger that does not know the shape is read the old way, through the window.
pub async fn on_files(
    att: &Attachment,
    aliases: &Aliases,
    task: &Recalled,
) -> Result<Related, ResolveError> {
    let files: Vec<&String> = task.files.iter().take(MAX_RELATED_FILES).collect();
    if files.is_empty() {
        return Ok(Related::default());
    }
    let answer = att
        .resolve(json!({
            "type": RELATED_SHAPE, "repository": aliases.identity(), "files": files,
            "exclude": task.finding.concept_id,
        }))
        .await;
    let body = match answer.and_then(|a| a.ok(RELATED_SHAPE)) {
        Ok(body) => body,
        Err(ResolveError::NoProducer { .. }) => {
            let view = recall::recall(att, aliases).await?;
            return Ok(in_view(&view, task));
        }
        Err(e) => return Err(e),
    };
    let rows = match body.get("findings") {
        Some(Value::Array(rows)) => rows.as_slice(),
        _ => &[],
    };
    let findings = read_rows(rows, "related finding", Finding::read)
        .into_iter()
        .filter_map(|finding| {
            aliases
                .map_finding(finding.repo.as_deref().unwrap_or_default(), &finding.files)
                .map(|files| Recalled { finding, files })
        })
        .filter(|o| relates(o, task))
        .take(MAX_RELATED)
        .collect();
    Ok(Related {
        findings,
        truncated: body.get("truncated").and_then(Value::as_bool) == Some(true),
    })
}

//! The client's half of `record`: what it does over the attachment. The vocabulary it speaks is
//! `metabob_wire::record`'s, which callers import from there: one path per item.

use metabob_wire::record::same_summary;
use serde::Serialize;

use super::recall::{self, LedgerView, Recalled};
use metabob_net::attachment::{Attachment, ResolveError};
use metabob_wire::repo_identity::Aliases;
use metabob_wire::verdict::Standing;

/// An open finding the ledger already holds on the same files under the same summary.
#[derive(Clone, Debug, Serialize)]
pub struct Duplicate {
    pub id: String,
    pub concept_id: String,
    pub summary: String,
    pub files: Vec<String>,
}

/// The ledger's open duplicate of a finding about to be recorded, read from a fresh recall of
/// the repository `aliases` describe.
pub async fn open_duplicate(
    att: &Attachment,
    aliases: &Aliases,
    files: &[String],
    summary: &str,
) -> Result<Option<Duplicate>, ResolveError> {
    let view = recall::recall(att, aliases).await?;
    Ok(
        find_open_duplicate(&view, files, summary).map(|d| Duplicate {
            id: d.finding.id().to_string(),
            concept_id: d.finding.concept_id.clone(),
            summary: d.finding.summary.clone(),
            files: d.files.clone(),
        }),
    )
}

/// An open recalled finding on one of `files` with the same summary (anchor: find_open_duplicate).
pub fn find_open_duplicate<'a>(
    view: &'a LedgerView,
    files: &[String],
    summary: &str,
) -> Option<&'a Recalled> {
    view.findings.iter().find(|r| {
        r.finding.status.is_open()
            && matches!(view.standing(&r.finding), Standing::Open)
            && r.files.iter().any(|f| files.contains(f))
            && same_summary(&r.finding.summary, summary)
    })
}

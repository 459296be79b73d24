//! The client's half of `verdict`: what it does over the attachment. The vocabulary it speaks is
//! `metabob_wire::verdict`'s, which callers import from there: one path per item.

use metabob_wire::verdict::{NewVerdict, link_pointer};
use serde_json::json;

use metabob_net::attachment::{Attachment, ResolveError};

/// Writes one verdict (anchor: write_verdict): the concept, its link to the finding, and for a
/// closing verdict the usage credit on the finding's concept. Only the concept write decides
/// the result; a failed link or credit is logged, since the verdict already stands. `trace`
/// names the surface in the credit's trace id.
pub async fn write(
    att: &Attachment,
    nv: &NewVerdict<'_>,
    trace: &str,
) -> Result<String, ResolveError> {
    let id = super::write_concept(att, nv.to_pointer()).await?;
    let finding = &nv.finding.concept_id;
    if let Err(e) = att.resolve(link_pointer(&id, finding)).await {
        tracing::debug!(
            "linking verdict {id} failed: {}",
            metabob_wire::report::line(&e)
        );
    }
    if let Some(outcome) = nv.kind.credit() {
        let usage = json!({"type": "conceptUsage_write", "usageData": {
            "concept_id": finding, "trace_id": format!("{trace}:{id}"), "outcome": outcome}});
        if let Err(e) = att.resolve(usage).await {
            tracing::warn!(
                "recording the verdict's relevance failed: {}",
                metabob_wire::report::line(&e)
            );
        }
    }
    Ok(id)
}

//! The client's half of `verdict`: what it does over the attachment. The vocabulary it speaks is
//! `metabob_wire::verdict`'s, which callers import from there: one path per item.

use metabob_wire::verdict::{NewVerdict, VERDICT_WRITE_SHAPE, credit_trace, link_pointer};
use serde_json::json;

use metabob_net::attachment::{Attachment, ResolveError};

/// Writes one verdict (anchor: write_verdict): the concept, its link to the finding, and for a
/// closing verdict the usage credit on the finding's concept, as one write where the ledger
/// serves [`VERDICT_WRITE_SHAPE`]. Only the concept decides the result: a finding the ledger
/// does not hold, or (on a ledger without the one write) a failed link or credit, is logged,
/// since the verdict already stands. `trace` names the surface in the credit's trace id.
pub async fn write(
    att: &Attachment,
    nv: &NewVerdict<'_>,
    trace: &str,
) -> Result<String, ResolveError> {
    let answer = att.resolve(nv.to_write(trace)).await;
    match answer.and_then(|a| a.ok(VERDICT_WRITE_SHAPE)) {
        Ok(body) => {
            let id = super::written_concept(&body, VERDICT_WRITE_SHAPE)?;
            if body.get("linked").and_then(serde_json::Value::as_bool) != Some(true) {
                tracing::warn!(
                    "verdict {id}: the ledger holds no finding {}, so it is not linked",
                    nv.finding.concept_id
                );
            }
            Ok(id)
        }
        Err(ResolveError::NoProducer { .. }) => write_in_three(att, nv, trace).await,
        Err(e) => Err(e),
    }
}

/// [`write`] to a ledger that does not serve the one write: the concept, the link and the
/// credit as the three requests they were.
async fn write_in_three(
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
            "concept_id": finding, "trace_id": credit_trace(trace, &id), "outcome": outcome}});
        if let Err(e) = att.resolve(usage).await {
            tracing::warn!(
                "recording the verdict's relevance failed: {}",
                metabob_wire::report::line(&e)
            );
        }
    }
    Ok(id)
}

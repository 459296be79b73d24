//! The client's reads and writes of ledger rows, over the attachment: claims and the atomic
//! take, verdict writes, parking, recall and the duplicate check. The vocabulary they speak is
//! metabob-wire's; each decision (the holder, the standing) is made there, once.

pub mod claims;
pub mod parking;
pub mod recall;
pub mod record;
pub mod related;
pub mod repo_identity;
pub mod verdict;

use metabob_net::attachment::{Attachment, ResolveError};

/// The most notes of one write that are said.
const MAX_NOTES: usize = 32;

/// Sends a `concept_create_write` and returns the new concept's id.
pub async fn write_concept(
    att: &Attachment,
    pointer: serde_json::Value,
) -> Result<String, ResolveError> {
    const SHAPE: &str = "concept_create_write";
    let body = att.resolve(pointer).await?.ok(SHAPE)?;
    written_concept(&body, SHAPE)
}

/// The id of the concept a write of `shape` answers with. What the ledger found worth saying
/// about a write it took (a blocker already closed) is said once here, for every writer.
fn written_concept(body: &serde_json::Value, shape: &str) -> Result<String, ResolveError> {
    if let Some(notes) = body.get("notes").and_then(serde_json::Value::as_array) {
        for note in notes
            .iter()
            .filter_map(serde_json::Value::as_str)
            .take(MAX_NOTES)
        {
            tracing::warn!("{}", metabob_wire::text::one_line(note, 300));
        }
    }
    body.get("concept")
        .and_then(metabob_wire::finding::concept_id)
        .ok_or_else(|| ResolveError::Answer {
            shape: shape.into(),
            status: 200,
            said: "the answer names no concept".into(),
        })
}

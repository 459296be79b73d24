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

/// Sends a `concept_create_write` and returns the new concept's id.
pub async fn write_concept(
    att: &Attachment,
    pointer: serde_json::Value,
) -> Result<String, ResolveError> {
    let body = att.resolve(pointer).await?.ok("concept_create_write")?;
    body.get("concept")
        .and_then(metabob_wire::finding::concept_id)
        .ok_or_else(|| ResolveError::Answer {
            shape: "concept_create_write".into(),
            status: 200,
            detail: "the answer names no concept".into(),
        })
}

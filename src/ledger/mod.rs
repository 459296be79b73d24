//! The ledger's vocabulary on the client side: findings, verdicts, claims, header blocks and
//! recall. Each fact has one owner here; commands and tools only adapt.

pub mod claims;
pub mod finding;
pub mod header;
pub mod parking;
pub mod recall;
pub mod record;
pub mod repo_identity;
pub mod row;
pub mod verdict;

use crate::attachment::{Attachment, ResolveError};

/// Sends a `concept_create_write` and returns the new concept's id.
pub async fn write_concept(
    att: &Attachment,
    pointer: serde_json::Value,
) -> Result<String, ResolveError> {
    let body = att.resolve(pointer).await?.ok("concept_create_write")?;
    body.get("concept")
        .and_then(finding::concept_id)
        .ok_or_else(|| ResolveError::Answer {
            shape: "concept_create_write".into(),
            status: 200,
            detail: "the answer names no concept".into(),
        })
}

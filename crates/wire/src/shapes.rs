//! Which shapes write (SPEC.md §Write shapes): one explicit list, read by the client's ingress
//! (never retried, carries the client claim, refused for a read-only key before sending) and by
//! the embedded ledger (needs a write scope). A shape's name does not say whether it writes:
//! `goalDispatchAsync` writes and has no `_write` suffix.

/// Every write shape the client sends or the ledger serves or forwards (anchor: WRITE_SHAPES).
pub const WRITE_SHAPES: &[&str] = &[
    "concept_create_write",
    "conceptLink_write",
    "conceptUsage_write",
    "verdict_write",
    "memoryNote_write",
    "goalDispatchAsync",
    "solicitationResponse_write",
    "goal_verification_label_write",
    "taskTake_write",
    "taskAction_write",
];

/// Whether `shape` writes. A listed shape does; so does an unlisted one named `…_write`, since
/// treating an unknown write as a read would retry it and let a read-only key send it, while
/// treating a read as a write only sends it once.
// anchor: is_write
pub fn is_write(shape: &str) -> bool {
    WRITE_SHAPES.contains(&shape) || shape.ends_with("_write")
}

/// Every shape the ledger answers itself, as advertised in `vesselRegistry`.
// anchor: LEDGER_SHAPES
pub const LEDGER_SHAPES: &[&str] = &[
    "vesselRegistry",
    "vesselCapability",
    "conceptSearch",
    "conceptGraph",
    "concept_create_write",
    "conceptLink_write",
    "conceptUsage_write",
    "verdict_write",
    "conceptUsageStats",
    "conceptSequence",
    "goalDispatchAsync",
    "goalWalkState",
    "executionTraceList",
    "activityExecutionTrace",
    "goal_verification_label_write",
    "taskBoard",
    "taskTake_write",
    "taskHistory",
    "taskAction_write",
    "findingsOnFiles",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_names_writes_without_the_suffix() {
        assert!(is_write("goalDispatchAsync"));
        assert!(is_write("concept_create_write"));
        assert!(is_write("somethingNew_write"));
        assert!(!is_write("conceptSearch"));
        assert!(!is_write("goalWalkState"));
        assert!(!is_write("substrateGap"));
    }
}

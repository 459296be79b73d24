//! Which shapes `resolve_impulse` sends (SPEC.md §Inspection tools). It is an allowlist because
//! a shape's name does not say whether it reads or acts (`bash`, `code_replace_lines`,
//! `llm_completion` read like reads): a shape is sent only when it is listed here as a plain
//! read or as the one write with no dedicated tool, and everything else is refused before any
//! request. The known writes carry their reason and what to do instead.
//!
//! tests/fixtures/registry-vocabulary.json decides every shape of a vocabulary; the unit test
//! below holds these tables to it both ways, so a shape added on either side without a decision
//! fails the build.

/// Plain reads: records, reports, statistics, summaries and policies. Sending one changes
/// nothing at its producer.
// anchor: escape-hatch-reads
pub const ESCAPE_HATCH_READS: &[&str] = &[
    // discovery
    "vesselRegistry",
    "vesselCapability",
    // concept-db
    "concept",
    "conceptSearch",
    "conceptGraph",
    "relatedConcepts",
    "conceptUsageStats",
    "conceptSequence",
    // development-vessel: memory, gaps, the walk's pool
    "memoryNote",
    "substrateGap",
    "poolImpulse",
    // activity-api: traces and the reports over them
    "activityExecutionTrace",
    "executionTraceList",
    "traceAggregateReport",
    "groupedExecutionStats",
    "templateAuditReport",
    "topologyCoverage",
    // activity-api: the registry and what it learned, read only
    "activity",
    "activityTemplate",
    "activityMetrics",
    "activityTemplatesByMetrics",
    "variantMetricsSummary",
    "compositionGraph",
    "compositionSuccess",
    "impulseRelevance",
    "thompson_posterior",
    "contextThompsonScores",
    "toolRiskProfile",
    "goalExecutionPath",
    "shape_producer_inventory",
    "shape_gap_resolution",
    // gate evidence and the oracle corpus, read only
    "test_report",
    "test_audit_report",
    "test_registration",
    "goal_verification_label",
    // goal-host: a dispatch record
    "goalWalkState",
    // the embedded ledger's board of tasks (SPEC.md §The board)
    "taskBoard",
    // a task's attempts and actions, as `task show` reads them (SPEC.md §Operator actions)
    "taskHistory",
    // what a take would hand out now, as `task list --ready` reads it (SPEC.md §Dependencies)
    "taskReady",
    // the embedded ledger's open findings on a task's files (SPEC.md §Related findings)
    "findingsOnFiles",
    // spend, leases and policies, read only
    "llmSpendSummary",
    "maintenanceLease",
    "substrateGapLease",
    "pushPolicy",
    "llmModelPolicy",
    "docFixPolicy",
    "renderPolicy",
];

/// The writes it sends: memory notes have no dedicated tool.
// anchor: escape-hatch-writes
pub const ESCAPE_HATCH_WRITES: &[&str] = &["memoryNote_write"];

/// Why a shape is refused, each with its reason and what to do instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Coordination,
    GradedRecord,
    LearnedState,
    GateEvidence,
    HumanSurface,
    VesselFiles,
    SystemPolicy,
    OracleCorpus,
    WalkInput,
    GapStore,
    /// The write has a dedicated tool, named here.
    DedicatedTool(&'static str),
    /// Overwriting, deleting or retiring a concept.
    ConceptHistory,
    /// Advertised by concept-db, not implemented there.
    NotImplemented,
    /// Not on any list: an action, or a read nobody decided.
    Undecided,
}

/// Writes an agent does not make through the escape hatch, each with its group.
// anchor: coordination-writes
pub const REFUSED_WRITES: &[(&str, Refusal)] = &[
    ("maintenanceLease_write", Refusal::Coordination),
    ("substrateGapLease_write", Refusal::Coordination),
    ("taskTake_write", Refusal::Coordination),
    ("taskAction_write", Refusal::Coordination),
    ("activityExecutionTrace_write", Refusal::GradedRecord),
    ("execution_write", Refusal::GradedRecord),
    ("activityTemplate_write", Refusal::LearnedState),
    ("activityVariant_write", Refusal::LearnedState),
    ("activityComposition_write", Refusal::LearnedState),
    ("activityFeedback_write", Refusal::LearnedState),
    ("impulseRelevance_write", Refusal::LearnedState),
    ("shapeScore_write", Refusal::LearnedState),
    ("executionSequences_write", Refusal::LearnedState),
    ("conceptSequence_write", Refusal::LearnedState),
    ("toolUsage_write", Refusal::LearnedState),
    ("toolArgumentPattern_write", Refusal::LearnedState),
    ("similarState_write", Refusal::LearnedState),
    ("shapeGapResolution_write", Refusal::LearnedState),
    ("conceptSignatureUpsert_write", Refusal::LearnedState),
    ("conceptCreditDecontaminate_write", Refusal::LearnedState),
    ("test_report_write", Refusal::GateEvidence),
    ("test_audit_report_write", Refusal::GateEvidence),
    ("test_registration_write", Refusal::GateEvidence),
    ("fs_write", Refusal::VesselFiles),
    ("pushPolicy_write", Refusal::SystemPolicy),
    ("llmModelPolicy_write", Refusal::SystemPolicy),
    ("docFixPolicy_write", Refusal::SystemPolicy),
    ("renderPolicy_write", Refusal::SystemPolicy),
    ("goal_verification_label_write", Refusal::OracleCorpus),
    ("poolImpulse_write", Refusal::WalkInput),
    ("substrateGap_write", Refusal::GapStore),
    (
        "concept_create_write",
        Refusal::DedicatedTool("concept_create"),
    ),
    ("conceptLink_write", Refusal::DedicatedTool("concept_link")),
    (
        "conceptUsage_write",
        Refusal::DedicatedTool("concept_record_usage"),
    ),
    ("verdict_write", Refusal::DedicatedTool("mark_complete")),
    (
        "solicitationResponse_write",
        Refusal::DedicatedTool("submit_resolution"),
    ),
    ("concept_write", Refusal::ConceptHistory),
    ("concept_delete_write", Refusal::ConceptHistory),
    ("concept_retire_write", Refusal::ConceptHistory),
    ("concept_supersede_write", Refusal::NotImplemented),
];

/// Write families named by prefix (`interactor*_write`, `ui*_write`): the human surface's own
/// records, whatever the record is called.
pub const REFUSED_WRITE_FAMILIES: &[(&str, &str, Refusal)] = &[
    ("interactor", "_write", Refusal::HumanSurface),
    ("ui", "_write", Refusal::HumanSurface),
];

/// What the escape hatch does with one shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Read,
    Write,
    Refused(Refusal),
}

/// The decision for `shape`, exactly as named: a shape on no list is refused (anchor: decide).
pub fn decide(shape: &str) -> Decision {
    if ESCAPE_HATCH_READS.contains(&shape) {
        return Decision::Read;
    }
    if ESCAPE_HATCH_WRITES.contains(&shape) {
        return Decision::Write;
    }
    if let Some((_, r)) = REFUSED_WRITES.iter().find(|(s, _)| *s == shape) {
        return Decision::Refused(*r);
    }
    match REFUSED_WRITE_FAMILIES
        .iter()
        .find(|(prefix, suffix, _)| in_family(shape, prefix, suffix))
    {
        Some((_, _, r)) => Decision::Refused(*r),
        None => Decision::Refused(Refusal::Undecided),
    }
}

/// `prefix…suffix` where what follows the prefix starts a new word (`uiLayout_write`,
/// `ui_theme_write`, not `uint_write`).
fn in_family(shape: &str, prefix: &str, suffix: &str) -> bool {
    let Some(rest) = shape.strip_prefix(prefix) else {
        return false;
    };
    rest.ends_with(suffix)
        && rest
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_uppercase() || c == '_')
}

impl Decision {
    /// The decision as the fixture names it: `read`, `write`, or `refused:<group>`.
    pub fn label(self) -> String {
        match self {
            Decision::Read => "read".into(),
            Decision::Write => "write".into(),
            Decision::Refused(r) => format!("refused:{}", r.group()),
        }
    }
}

impl Refusal {
    /// The group's name in the fixture.
    pub fn group(self) -> &'static str {
        match self {
            Refusal::Coordination => "coordination",
            Refusal::GradedRecord => "graded_record",
            Refusal::LearnedState => "learned_state",
            Refusal::GateEvidence => "gate_evidence",
            Refusal::HumanSurface => "human_surface",
            Refusal::VesselFiles => "vessel_files",
            Refusal::SystemPolicy => "system_policy",
            Refusal::OracleCorpus => "oracle_corpus",
            Refusal::WalkInput => "walk_input",
            Refusal::GapStore => "gap_store",
            Refusal::DedicatedTool(_) => "dedicated_tool",
            Refusal::ConceptHistory => "concept_history",
            Refusal::NotImplemented => "not_implemented",
            Refusal::Undecided => "undecided",
        }
    }

    /// Why an agent does not send it.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Coordination => {
                "it is the system's own coordination (maintenance windows, the auto-pick lane, \
                 a gap's landing)"
            }
            Refusal::GradedRecord => {
                "it is the graded record: a trace's tags decide what the work reached"
            }
            Refusal::LearnedState => {
                "the system learns this from its own graded work; writing it by hand feeds \
                 the learner an ungraded answer"
            }
            Refusal::GateEvidence => "it is gate evidence, which the gates write themselves",
            Refusal::HumanSurface => "it is a record of the human surface, kept by that surface",
            Refusal::VesselFiles => "it writes files on a vessel",
            Refusal::SystemPolicy => {
                "system policy is an operator's decision, and this key carries no operator \
                 authority"
            }
            Refusal::OracleCorpus => "verification labels are the oracle corpus",
            Refusal::WalkInput => "a pool impulse is walk input with no stamped principal",
            Refusal::GapStore => "gaps are filed by the system's own detectors",
            Refusal::DedicatedTool(_) => {
                "a dedicated tool sends it, checking its input and recording provenance"
            }
            Refusal::ConceptHistory => {
                "it overwrites, deletes or retires the system's memory in place"
            }
            Refusal::NotImplemented => {
                "concept-db advertises it but does not implement it (it throws)"
            }
            Refusal::Undecided => {
                "it is not an allowlisted plain read, and a shape's name does not tell a read \
                 from an action"
            }
        }
    }

    /// What to do instead.
    pub fn instead(self) -> String {
        let history = "concept_create the corrected concept and concept_link it derived_from \
                       the wrong one, which keeps the history";
        match self {
            Refusal::Coordination => "dispatch the work as a goal or let the system land the \
                gap; record_finding when a lease looks stuck or foreign"
                .into(),
            Refusal::GradedRecord => {
                "dispatch the work as a goal, so goal-host traces it and its judge grades it".into()
            }
            Refusal::LearnedState => {
                "dispatch a goal, or record_finding with what you observed".into()
            }
            Refusal::GateEvidence => "run the check, or dispatch it as a goal".into(),
            Refusal::HumanSurface => "the person makes it on that surface, as themselves".into(),
            Refusal::VesselFiles => {
                "dispatch a goal, or make the change as a reviewed commit".into()
            }
            Refusal::SystemPolicy => {
                "ask the person, or record_finding proposing the change".into()
            }
            Refusal::OracleCorpus => "use provide_feedback".into(),
            Refusal::WalkInput => "dispatch a goal".into(),
            Refusal::GapStore => "use record_finding".into(),
            Refusal::DedicatedTool(tool) => format!("use {tool}"),
            Refusal::ConceptHistory => history.into(),
            Refusal::NotImplemented => history.into(),
            Refusal::Undecided => "dispatch the work as a goal, so it is routed and its judge \
                grades it, or use a dedicated tool"
                .into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use metabob_wire::shapes::LEDGER_SHAPES;
    use metabob_wire::shapes::{WRITE_SHAPES, is_write};

    const FIXTURE: &str = include_str!("../../../../../tests/fixtures/registry-vocabulary.json");

    fn fixture() -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let v: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
        let table = |key: &str| -> BTreeMap<String, String> {
            v[key]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, d)| (k.clone(), d.as_str().unwrap().to_string()))
                .collect()
        };
        (table("shapes"), table("patterns"))
    }

    #[test]
    fn the_code_decides_every_fixture_shape_as_the_fixture_does() {
        let (shapes, _) = fixture();
        let wrong: Vec<String> = shapes
            .iter()
            .filter(|(s, d)| decide(s).label() != **d)
            .map(|(s, d)| format!("{s}: fixture {d}, code {}", decide(s).label()))
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn every_shape_the_code_lists_is_in_the_fixture() {
        let (shapes, patterns) = fixture();
        let listed = ESCAPE_HATCH_READS
            .iter()
            .chain(ESCAPE_HATCH_WRITES)
            .chain(REFUSED_WRITES.iter().map(|(s, _)| s))
            .chain(LEDGER_SHAPES)
            .chain(WRITE_SHAPES);
        let missing: Vec<&&str> = listed.filter(|s| !shapes.contains_key(**s)).collect();
        assert!(missing.is_empty(), "undecided in the fixture: {missing:?}");
        let families: BTreeMap<String, String> = REFUSED_WRITE_FAMILIES
            .iter()
            .map(|(p, s, r)| (format!("{p}*{s}"), Decision::Refused(*r).label()))
            .collect();
        assert_eq!(families, patterns);
    }

    #[test]
    fn every_fixture_pattern_is_decided_by_its_family() {
        let (_, patterns) = fixture();
        for (pattern, label) in &patterns {
            let (prefix, suffix) = pattern.split_once('*').unwrap();
            for example in [
                format!("{prefix}Profile{suffix}"),
                format!("{prefix}_state{suffix}"),
            ] {
                assert_eq!(&decide(&example).label(), label, "{example}");
            }
        }
        assert_eq!(decide("uint_write"), Decision::Refused(Refusal::Undecided));
    }

    #[test]
    fn reads_are_reads_and_the_write_is_a_write() {
        for s in ESCAPE_HATCH_READS {
            assert!(!is_write(s), "{s} is listed as a read but writes");
        }
        for s in ESCAPE_HATCH_WRITES {
            assert!(is_write(s), "{s}");
        }
        for (s, _) in REFUSED_WRITES {
            assert!(is_write(s), "{s}");
        }
    }

    #[test]
    fn an_unlisted_shape_is_refused() {
        for s in ["bash", "", "memorynote", "memoryNote ", "goalDispatchAsync"] {
            assert_eq!(decide(s), Decision::Refused(Refusal::Undecided), "{s:?}");
        }
    }
}

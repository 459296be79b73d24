//! The instructions the initialize result carries (SPEC.md §Agent instructions). They change
//! only with the tool set; a test holds that every tool they name is served.

// anchor: INSTRUCTIONS
pub const INSTRUCTIONS: &str = "\
metabob-mcp shares a findings ledger and a concept graph between the agents working on this \
codebase, and gives you a local code graph and git co-change for it.

Before editing files that other agents or the substrate also work on: call `get_problems` with \
the file's path to see open findings, claims and tasks on it, then `path_activity` on the same \
paths to see what the substrate is landing, holding or has queued there. A problem you notice \
and do not fix goes to `record_finding` (a bug mentioned only in a reply is lost); what you fix \
goes to `mark_complete`, which reads where the fix is from git. Take a finding or task with \
`claim_finding` before starting on it, so no one else does the same work.

If your client has the metabob skill, load it before your first call: it holds the order of \
calls and the rules. Without it, these four are the first calls: `get_analysis_context`, \
`get_problems`, `record_finding`, `mark_complete`.

The ledger loop: `get_problems` -> `claim_finding` -> fix and commit with a \
`Fixes-Finding: <id>` trailer -> `mark_complete`. The memory loop: `concept_search` before \
solving something others may have solved, `concept_record_usage` for whether what you found \
helped, `concept_create` and `concept_link` for what others should find next time. The goal \
loop hands work to the fleet: `run_goal_async` -> `goal_status` (read `reached`, not the status) \
-> `goal_reasoning` -> `provide_feedback`; `run_goal` waits for a short goal. To see what ran \
recently, `execution_trace` with no id lists the latest traces. A decision queued for you on \
this machine comes from `pull_assigned_work` and is answered with `submit_resolution`.

Local tools (run on this machine, send nothing): `init_workspace`, `search_codebase`, \
`analyze_impact`, `predict_cochanges`, `assign_git_changes`, `get_metrics`, \
`annotate_component`. Ledger tools (reach the shared ledger): `get_problems`, \
`get_analysis_context`, `record_finding`, `mark_complete`, `claim_finding`; their local halves \
still run when the ledger is out of reach. Substrate tools (reach the substrate only): \
`path_activity`, `concept_search`, `concept_neighbors`, `concept_usage_stats`, \
`concept_sequence`, `concept_link`, `concept_create`, `concept_record_usage`, \
`registry_query`, `execution_trace`, the goal tools, `submit_resolution`, and \
`resolve_impulse`, an escape hatch for allowlisted reads: prefer a dedicated tool.

A named cause in a ledger or substrate tool's answer (key_rejected, connect_timeout(...), \
not_configured, no_producer(...), ...) is the attachment's state, not your input: diagnose it \
with `metabob-mcp attach --check`.";

/// The tool names the instructions mention (backticked snake_case words).
pub fn named_tools() -> Vec<&'static str> {
    INSTRUCTIONS
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| w.contains('_') && w.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_tool_the_instructions_name_is_served() {
        let named = super::named_tools();
        assert!(named.len() >= 30, "{named:?}");
        for n in named {
            assert!(
                crate::tools::spec(n).is_some(),
                "the instructions name {n}, which is not a tool"
            );
        }
    }
}

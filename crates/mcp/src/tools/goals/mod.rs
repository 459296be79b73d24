//! The goal tools (SPEC.md §Goal tools): dispatch a goal to goal-host (or the embedded ledger's
//! goal board, which answers the same shapes), follow its dispatch record, read the walk that
//! ran it, and label the outcome for the oracle corpus. Every answer comes from a producer this
//! process does not control, so every field is validated and bounded before it is printed or
//! sent on (SPEC.md §Hostile rows).

mod dispatch;
mod feedback;
mod record;
mod status;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use dispatch::{run_goal, run_goal_async};
pub use feedback::provide_feedback;
pub use status::{goal_reasoning, goal_status};

/// What goal-host is asked to do with what the walk teaches.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LearningMode {
    /// Trace the walk, but ask goal-host not to learn from it.
    Observe,
    /// A learning run (goal-host's default).
    Learn,
}

impl LearningMode {
    fn as_str(self) -> &'static str {
        match self {
            LearningMode::Observe => "observe",
            LearningMode::Learn => "learn",
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct DispatchArgs {
    /// The goal in natural language, forwarded unchanged. goal or target_template_id is
    /// required.
    pub goal: Option<String>,
    /// Run this activity template instead of letting goal-host select one.
    pub target_template_id: Option<String>,
    /// Seed variables of the walk; the embedded ledger's goal board needs `repo` (the origin
    /// URL, as `task pull --origin` takes it) and reads `files`, `ref`, `push_to`, `integrate`,
    /// `severity` and `summary`.
    pub variables: Option<Map<String, Value>>,
    /// The execution this dispatch descends from, for provenance across vessels.
    pub parent_execution_id: Option<String>,
    /// Ancestor execution ids, root first.
    #[schemars(length(max = 50))]
    pub composition_chain: Option<Vec<String>>,
    /// observe: trace the walk without learning from it; learn: goal-host's default. Sent as
    /// requested; whether it was applied shows in the walk log.
    pub learning_mode: Option<LearningMode>,
    /// Tags carried onto the dispatch and its trace; `session:<id>` is added.
    #[schemars(length(max = 50))]
    pub tags: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct StatusArgs {
    /// The dispatchId run_goal_async or run_goal answered.
    pub dispatch_id: String,
}

/// An agent's verdict on whether a dispatched goal was achieved.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Reached,
    NotReached,
    Partial,
}

impl Verdict {
    /// The word the oracle corpus stores.
    fn label(self) -> &'static str {
        match self {
            Verdict::Reached => "achieved",
            Verdict::NotReached => "not_achieved",
            Verdict::Partial => "partial",
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct FeedbackArgs {
    /// The dispatchId of a finished dispatch.
    pub dispatch_id: String,
    /// Whether the goal was achieved: reached, not_reached or partial.
    pub verdict: Verdict,
    /// The evidence behind the verdict; stored as the label's notes.
    pub rationale: String,
    /// How sure the verdict is, 0..1 (default 0.9).
    #[schemars(range(min = 0.0, max = 1.0))]
    pub confidence: Option<f64>,
    /// The goal text, used when the dispatch record does not carry it.
    pub goal: Option<String>,
}

/// The hint every goal tool ends with: the call that follows a dispatch.
fn follow_hint(dispatch_id: &str) -> String {
    format!("goal_status {{\"dispatch_id\": \"{dispatch_id}\"}}")
}

/// `s` when it has something besides white space.
fn given(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.trim().is_empty())
}

//! The local tier (SPEC.md §Local tools): the code graph, git co-change and the local store.
//! Nothing here makes a request or sends file content anywhere.

mod analyze;
mod annotate;
mod assign;
mod init;
mod metrics;
mod predict;
mod search;
pub mod shared;

use schemars::JsonSchema;
use serde::Deserialize;

pub use analyze::analyze_impact;
pub use annotate::annotate_component;
pub use assign::assign_git_changes;
pub use init::{INDEX_BUDGET, init_workspace};
pub use metrics::get_metrics;
pub use predict::predict_cochanges;
pub use search::search_codebase;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct NoArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct InitArgs {
    /// Absolute path to the workspace root; it must be an existing directory. Default: the
    /// configured workspace.
    pub workspace_path: Option<String>,
    /// Changed files: the reply counts their co-change neighbours in git history.
    #[serde(default)]
    pub recently_changed_files: Vec<String>,
    /// Accepted (1-20) and ignored.
    #[schemars(range(min = 1, max = 20))]
    pub batch_size: Option<u32>,
    /// Extensions to index, with or without the dot. Default: ts, tsx, js, jsx, mjs, cjs, py, rs, go.
    pub include: Option<Vec<String>>,
    /// Directory names to skip; dot-directories are always skipped.
    pub exclude: Option<Vec<String>>,
    /// Accepted and ignored.
    pub sync_api: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    Components,
    Problems,
    Both,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SearchArgs {
    /// Keywords; camelCase, snake_case and kebab-case are split into tokens.
    pub query: String,
    /// Max results (default 10).
    #[schemars(range(min = 1, max = 50))]
    pub limit: Option<usize>,
    /// What to search: components, problems or both (default).
    pub target: Option<Target>,
    /// Keep only these file paths (substring match).
    pub file_filter: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct CochangeArgs {
    /// Files being changed (workspace-relative or absolute).
    pub changed_files: Vec<String>,
    /// Max suggestions (default 10).
    #[schemars(range(min = 1, max = 50))]
    pub limit: Option<usize>,
    /// Minimum co-change confidence (default 0.3).
    #[schemars(range(min = 0.0, max = 1.0))]
    pub confidence_threshold: Option<f64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DirectionArg {
    Forward,
    Backward,
    Both,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ImpactArgs {
    pub changed_files: Vec<String>,
    /// Accepted for compatibility; not read.
    pub diff: Option<String>,
    /// forward = what the changed code depends on, backward = what depends on it (default).
    pub direction: Option<DirectionArg>,
    /// Max traversal depth (default 5).
    #[schemars(range(min = 1, max = 10))]
    pub max_depth: Option<usize>,
    /// Include test files (default true).
    pub include_tests: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AssignArgs {
    pub changed_files: Vec<String>,
    /// Accepted for compatibility; not read.
    pub diff: Option<String>,
    /// Include the git-history co-changes (default true).
    pub include_cochange_predictions: Option<bool>,
    /// Co-change budget per changed file (default 5).
    #[schemars(range(min = 1, max = 20))]
    pub prediction_limit: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Explain,
    Recommend,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AnnotateArgs {
    /// A finding id from get_problems (agf_…).
    pub problem_id: String,
    /// explain: why-focused notes (default); recommend: how-to-fix notes.
    pub mode: Option<Mode>,
    /// Additional context to include in the notes.
    pub context: Option<String>,
}

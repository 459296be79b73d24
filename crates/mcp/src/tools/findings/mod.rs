//! The findings tools (SPEC.md §Findings tools) on the ledger's vocabulary: the local store is
//! this machine's half, the ledger the shared half. A detached session still runs every local
//! half; the shared half names the attachment's cause instead of pretending to be empty.

mod claim;
mod mark;
mod problems;
mod record;

use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::ctx::Ctx;
use crate::store::Seed;
use metabob_cell::ledger::recall::{self, LedgerView, fetch_concept};
use metabob_cell::ledger::repo_identity::repo_identity;
use metabob_net::attachment::Attachment;
use metabob_wire::finding::{Finding, Severity};

pub use claim::claim_finding;
pub use mark::mark_complete;
pub use problems::{get_analysis_context, get_problems};
pub use record::record_finding;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ProblemsArgs {
    /// Max results (default 10).
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<usize>,
    /// Keep these severities only.
    pub severity: Option<Vec<Severity>>,
    /// Keep these category slugs only (include "task" to list tasks as the findings).
    pub category: Option<Vec<String>>,
    /// Substring of the file path.
    pub file_path: Option<String>,
    /// Accepted; a discarded finding is deleted from the local store, so it changes nothing.
    pub include_discarded: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ContextArgs {
    /// Files whose git-history co-changes are listed.
    #[serde(default)]
    pub recently_changed_files: Vec<String>,
    /// Max open problems to include (default 10).
    #[schemars(range(min = 1, max = 50))]
    pub problem_limit: Option<usize>,
    /// session (default), project or org. Accepted for compatibility; not read.
    pub scope: Option<Scope>,
}

/// The scopes `get_analysis_context` accepts. None changes the answer, but a word outside them is
/// refused like any other bad enum, so a client's typo is not silently taken for the default.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Session,
    Project,
    Org,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct RecordArgs {
    /// Files the finding is attributed to (workspace-relative or absolute).
    pub files: Vec<String>,
    /// One-line description.
    pub summary: String,
    /// Longer explanation or suggested fix; for a task, its policy lines (`ref: BRANCH`) and a
    /// `blocked-by: agf_…` line per task it waits for.
    pub details: Option<String>,
    pub severity: Severity,
    /// Free-form slug: security, correctness, design-constraint, task, …
    pub category: String,
    /// Start line, in the first file.
    #[schemars(range(min = 1))]
    pub line_start: Option<u32>,
    #[schemars(range(min = 1))]
    pub line_end: Option<u32>,
    /// Finding status (default open); anything else stores the seed already resolved.
    pub status: Option<String>,
    /// Record even when the same finding is already open.
    pub force: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MarkAction {
    Endorse,
    Discard,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct MarkArgs {
    /// An agf_… finding id or the concept_… id recall shows.
    pub problem_id: String,
    /// endorse = fixed (default), discard = false positive.
    pub action: Option<MarkAction>,
    /// Endorse only: the commit (7-40 hex digits) that fixes it, when the fix touches none of
    /// its files or was committed before the finding was recorded.
    pub fix_commit: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ClaimArg {
    Claim,
    Renew,
    Release,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ClaimArgs {
    /// An agf_… finding id or the concept_… id recall shows.
    pub problem_id: String,
    /// claim before starting (default), renew while working, release on stopping unfixed.
    pub action: Option<ClaimArg>,
    /// How long the claim lasts from now (default 60, at most 240).
    #[schemars(range(min = 1, max = 240))]
    pub minutes: Option<i64>,
}

/// The recall for this workspace, or the line saying why it did not run.
async fn recall_here(att: &Attachment, ws: &Path) -> Result<LedgerView, String> {
    att.gate().await.map_err(|r| r.to_string())?;
    let aliases = metabob_cell::ledger::repo_identity::aliases_for_workspace(ws);
    recall::recall(att, &aliases)
        .await
        .map_err(|e| metabob_wire::report::with_hint(&e))
}

/// A finding named by id: its local seeds, and the ledger's view of it when attached.
struct Named {
    seeds: Vec<Seed>,
    recalled: Option<Finding>,
    /// Its files as this checkout names them.
    files: Vec<String>,
    view: Option<LedgerView>,
}

async fn resolve_named(ctx: &Ctx, att: &Attachment, ws: &Path, id: &str) -> Result<Named, String> {
    let line = |e: crate::store::StoreError| metabob_wire::report::with_hint(&e);
    let seeds = match &ctx.store_to_read() {
        Ok(Some(st)) if id.starts_with("agf_") => match st.get(id).map_err(line)? {
            Some(seed) => st.group(&seed.group_id).map_err(line)?,
            None => Vec::new(),
        },
        Ok(Some(st)) => st.by_concept(id).map_err(line)?,
        Ok(None) | Err(_) => Vec::new(),
    };
    let concept = seeds
        .iter()
        .find_map(|x| x.concept_ref.clone())
        .or_else(|| id.starts_with("concept_").then(|| id.to_string()));
    let view = recall_here(att, ws).await.ok();
    let mut recalled = view.as_ref().and_then(|v| {
        v.by_id(id)
            .or_else(|| concept.as_deref().and_then(|c| v.by_id(c)))
            .map(|r| r.finding.clone())
    });
    if recalled.is_none()
        && view.is_some()
        && let Some(c) = &concept
        && let Ok(Some(raw)) = fetch_concept(att, c).await
    {
        recalled = Finding::from_concept(&raw);
    }
    let files = match (&recalled, &view) {
        (Some(f), Some(v)) => v
            .by_id(f.id())
            .map(|r| r.files.clone())
            .unwrap_or_else(|| f.files.clone()),
        (Some(f), None) => f.files.clone(),
        _ => seeds.iter().map(|x| x.file.clone()).collect(),
    };
    Ok(Named {
        seeds,
        recalled,
        files,
        view,
    })
}

/// A finding as the verdict names it, from its seeds when the ledger never saw it.
fn finding_of_seeds(seeds: &[Seed], ws: &Path) -> Finding {
    let first = &seeds[0];
    let name = ws.file_name().map(|n| n.to_string_lossy().into_owned());
    Finding {
        concept_id: first.concept_ref.clone().unwrap_or_default(),
        seq: 0,
        created_ms: seeds.iter().map(|x| x.created_ms).min().unwrap_or(0),
        summary: first.summary.clone(),
        severity: first.severity,
        category: first.category.clone(),
        repo: Some(repo_identity(ws)),
        repo_name: name.clone(),
        workspace: name,
        files: seeds.iter().map(|x| x.file.clone()).collect(),
        lines: None,
        status: first.status.clone(),
        finding_ids: seeds.iter().map(|x| x.id.clone()).collect(),
        recorded_by: None,
        session: None,
        details: first.details.clone(),
    }
}

//! What the local tools share with each other and with the findings and gap tools: the one way
//! to reach the workspace's index, git co-change, and the local store's seeds as they are listed.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::ctx::Ctx;
use crate::store::Seed;
use metabob_git::Repo;
use metabob_git::cochange::mine_cochanges;
use metabob_index::{Index, IndexOptions};
use metabob_wire::report;

pub const NO_SERVER_ANALYSIS: &str = "There is no server-side analysis: this server sends no \
    workspace content off the machine, so every finding here was recorded by an agent.";

/// A path as the index and the store name it: workspace-relative with `/`.
pub fn relative(ws: &Path, file: &str) -> String {
    let p = Path::new(file);
    let rel = p.strip_prefix(ws).unwrap_or(p);
    rel.to_string_lossy()
        .replace('\\', "/")
        .trim_start_matches("./")
        .to_string()
}

/// Runs `f` on the workspace's index: the one in memory, else the persisted one when it is
/// still valid. The error is the line to answer: no index yet, or the parser cannot load.
pub(super) fn with_index<T>(
    ctx: &Ctx,
    ws: &Path,
    f: impl FnOnce(&Index) -> T,
) -> Result<T, String> {
    if let Some(e) = ctx.index_unavailable.get() {
        return Err(e.clone());
    }
    let ws = real(ws);
    let mut slot = ctx.index.lock().expect("no index user panics");
    if slot.as_ref().is_none_or(|i| i.root() != ws) {
        *slot = load_persisted(ctx.index_cache_path(&ws), &ws, &IndexOptions::default());
    }
    slot.as_ref().map(f).ok_or_else(|| NO_INDEX.to_string())
}

pub(super) fn real(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The persisted index of `ws` when every file it was built from is unchanged; an index an
/// earlier release left as JSON beside it is read once and rewritten.
pub(super) fn load_persisted(
    cache: Option<PathBuf>,
    ws: &Path,
    opts: &IndexOptions,
) -> Option<Index> {
    let cache = cache?;
    match Index::migrate(&cache, &cache.with_extension("json"), ws, opts) {
        Ok(index) => Some(index),
        Err(why) => {
            tracing::debug!("the persisted index was not used: {why}");
            None
        }
    }
}

/// Where `ws`'s co-change index is kept.
pub(super) fn cochange_cache(ctx: &Ctx, ws: &Path) -> Option<PathBuf> {
    ctx.cochange_cache_path(&real(ws))
}

const NO_INDEX: &str = "No code graph for this workspace yet: run init_workspace first.";

/// Git co-change for workspace files, through the persisted co-change index at `cache` (see
/// [`cochange_cache`]); the error line says why there is none.
pub(super) fn cochanges(
    cache: Option<PathBuf>,
    ws: &Path,
    files: &[String],
    limit: usize,
    threshold: f64,
) -> Result<metabob_git::cochange::CochangeReport, String> {
    let repo = Repo::discover(ws)
        .map_err(|e| format!("git did not answer ({})", report::with_hint(&e)))?
        .ok_or_else(|| "not a git repository, so there is no history to mine".to_string())?;
    let mapped = repo.workspace_paths(ws, files);
    let (report, unsaved) = mine_cochanges(&repo, cache.as_deref(), &mapped, limit, threshold)
        .map_err(|e| format!("git: {}", report::with_hint(&e)))?;
    if let Some(e) = unsaved {
        tracing::debug!("the co-change index was not saved: {e}");
    }
    Ok(report)
}
/// The code graph's size in one line, or why there is none.
pub fn graph_line(ctx: &Ctx, ws: &Path) -> String {
    match with_index(ctx, ws, |i| i.stats()) {
        Ok(s) => format!(
            "Code graph: {} files, {} components, {} call edges, {} import edges{}.",
            s.files_indexed,
            s.components,
            s.calls_edges,
            s.imports_edges,
            if s.complete { "" } else { " (partial)" }
        ),
        Err(e) => format!("Code graph: {e}"),
    }
}

/// The open seeds of this workspace (none before anything was recorded), or the store's error
/// line.
pub fn local_seeds(ctx: &Ctx, ws: &Path) -> Result<Vec<Seed>, String> {
    match ctx.store_to_read()? {
        None => Ok(Vec::new()),
        Some(store) => (store.seeds(&ws.display().to_string(), false))
            .map_err(|e| metabob_wire::report::with_hint(&e)),
    }
}

/// One seed per finding: a multi-file finding's seeds share a group.
pub fn by_group(seeds: &[Seed]) -> Vec<&Seed> {
    let mut seen = std::collections::HashSet::new();
    seeds
        .iter()
        .filter(|s| seen.insert(s.group_id.as_str()))
        .collect()
}

pub fn seed_line(s: &Seed) -> String {
    let lines = s.line_start.map(|a| format!(":{a}")).unwrap_or_default();
    format!(
        "- {} [{}][{}] {} ({}{lines}; {})",
        s.id,
        s.severity,
        s.category,
        s.summary,
        s.file,
        age(s.created_ms)
    )
}

/// "3 min ago", "2 d ago".
pub fn age(ms: i64) -> String {
    let secs = ((metabob_process::clock::now_ms() - ms).max(0) / 1000) as u64;
    match secs {
        s if s < 60 => "just now".into(),
        s if s < 3600 => format!("{} min ago", s / 60),
        s if s < 86_400 => format!("{} h ago", s / 3600),
        s => format!("{} d ago", s / 86_400),
    }
}

/// Appends the local store's open findings on `files`.
pub(super) fn append_findings(
    ctx: &Ctx,
    ws: &Path,
    files: &[String],
    cap: usize,
    out: &mut String,
) {
    let files: Vec<String> = files.iter().map(|f| relative(ws, f)).collect();
    match local_seeds(ctx, ws) {
        Err(e) => {
            let _ = writeln!(out, "Local findings: {e}");
        }
        Ok(seeds) => {
            let hits: Vec<&Seed> = seeds
                .iter()
                .filter(|s| files.contains(&s.file))
                .take(cap)
                .collect();
            if !hits.is_empty() {
                let _ = writeln!(out, "Local findings on these files ({}):", hits.len());
                for s in hits {
                    let _ = writeln!(out, "{}", seed_line(s));
                }
            }
        }
    }
}

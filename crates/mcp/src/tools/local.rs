//! The local tier (SPEC.md §Local tools): the code graph, git co-change and the local store.
//! Nothing here makes a request or sends file content anywhere.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::Reply;
use crate::ctx::{Ctx, Here};
use crate::store::Seed;
use metabob_git::Repo;
use metabob_git::cochange::mine_cochanges;
use metabob_index::{Direction, EdgeKind, Index, IndexOptions, tokenize};

/// Sets its flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// How long one `init_workspace` parses before it answers; the next call resumes.
pub const INDEX_BUDGET: Duration = Duration::from_secs(20);

pub const NO_SERVER_ANALYSIS: &str = "There is no server-side analysis: this server sends no \
    workspace content off the machine, so every finding here was recorded by an agent.";

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
fn with_index<T>(ctx: &Ctx, ws: &Path, f: impl FnOnce(&Index) -> T) -> Result<T, String> {
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

fn real(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The persisted index of `ws` when every file it was built from is unchanged.
fn load_persisted(cache: Option<PathBuf>, ws: &Path, opts: &IndexOptions) -> Option<Index> {
    match Index::load(&cache?, ws, opts) {
        Ok(index) => Some(index),
        Err(why) => {
            tracing::debug!("the persisted index was not used: {why}");
            None
        }
    }
}

const NO_INDEX: &str = "No code graph for this workspace yet: run init_workspace first.";

/// What one indexing run did, for init_workspace's reply.
struct Indexed {
    report: metabob_index::RunReport,
    stats: metabob_index::IndexStats,
    /// Some when the index was complete and new, so it was persisted (or failed to be).
    saved: Option<Result<(), String>>,
    /// Every indexed file was unchanged: nothing was parsed.
    reused: bool,
}

/// Indexes `ws` on a blocking thread, reusing what is still valid; a cancelled call stops the
/// parse at its next file.
async fn index_workspace(ctx: &Ctx, ws: &Path, opts: IndexOptions) -> Result<Indexed, String> {
    let slot = ctx.index.clone();
    let root = real(ws);
    let cache = ctx.index_cache_path(&root);
    // Dropped with this call's future, so a cancelled call stops the parse too.
    let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
    let stopped = stop.0.clone();
    let run = tokio::task::spawn_blocking(move || {
        let mut guard = slot.lock().expect("no index user panics");
        // A complete index is reused only while every file it was built from is unchanged;
        // otherwise the whole index is rebuilt (never a part of it: see src/index).
        let reuse = guard
            .as_ref()
            .is_some_and(|i| i.root() == root && !i.is_complete())
            .then(|| guard.take())
            .flatten()
            .or_else(|| load_persisted(cache.clone(), &root, &opts));
        let reused = reuse.as_ref().is_some_and(Index::is_complete);
        let index = guard.insert(reuse.unwrap_or_else(|| Index::new(&root)));
        // Progress goes to a person watching a terminal, never into a log.
        let terminal = std::io::stderr().is_terminal();
        let mut progress = |done: usize, total: usize| {
            if terminal {
                metabob_wire::err!("\rindexing: {done}/{total} files");
            }
        };
        let report = index.run_with(&opts, INDEX_BUDGET, &stopped, &mut progress)?;
        if terminal {
            metabob_wire::errln!("\rindexing: {} files parsed", report.files_parsed);
        }
        let saved = match (&cache, report.complete && !reused) {
            (Some(path), true) => Some(index.save(path).map_err(|e| e.to_string())),
            _ => None,
        };
        Ok::<_, metabob_index::IndexError>(Indexed {
            report,
            stats: index.stats(),
            saved,
            reused,
        })
    })
    .await;
    match run {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => {
            // A grammar that cannot load will not load later: every local tool says so.
            if let e @ metabob_index::IndexError::Unavailable { .. } = &e {
                let _ = ctx.index_unavailable.set(e.to_string());
            }
            Err(format!("init_workspace: {e}"))
        }
        Err(e) => Err(format!("init_workspace: indexing stopped: {e}")),
    }
}

pub async fn init_workspace(ctx: &Ctx, here: &Here<'_>, a: InitArgs) -> Reply {
    let ws = here.ws();
    let mut opts = IndexOptions::default();
    if let Some(inc) = a.include {
        opts.include = inc;
    }
    if let Some(exc) = a.exclude {
        opts.exclude = exc;
    }
    let done = match index_workspace(ctx, ws, opts).await {
        Ok(d) => d,
        Err(line) => return Reply::error(line),
    };
    let mut out = String::new();
    let _ = writeln!(out, "Workspace: {}", ws.display());
    render_indexed(&mut out, &done);
    if !a.recently_changed_files.is_empty() {
        match cochanges(ws, &a.recently_changed_files, 50, 0.3) {
            Ok(r) => {
                let _ = writeln!(
                    out,
                    "Recently changed files: {} co-change neighbours in git history.",
                    r.predictions.len()
                );
            }
            Err(e) => {
                let _ = writeln!(out, "Co-change: {e}");
            }
        }
    }
    out.push_str(
        "The local store is bound to this workspace. No file content was sent off the machine.",
    );
    Reply::ok(out)
}

/// The graph's size, what was parsed or skipped, and whether the run finished.
fn render_indexed(out: &mut String, done: &Indexed) {
    let (report, stats) = (&done.report, &done.stats);
    let _ = writeln!(
        out,
        "Code graph: {} files, {} components, {} call edges, {} import edges ({}).",
        stats.files_indexed,
        stats.components,
        stats.calls_edges,
        stats.imports_edges,
        stats
            .languages
            .iter()
            .map(|(l, n)| format!("{l} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if done.reused {
        out.push_str(
            "Every indexed file is unchanged since the index was built: nothing was re-parsed.\n",
        );
    } else {
        let _ = writeln!(
            out,
            "Parsed {} files in {} ms.",
            report.parsed_this_run, report.elapsed_ms
        );
    }
    if stats.skipped_too_large + stats.skipped_unreadable > 0 || stats.file_cap_hit {
        let _ = writeln!(
            out,
            "Skipped: {} over {} KB, {} unreadable{}.",
            stats.skipped_too_large,
            metabob_index::MAX_FILE_BYTES / 1024,
            stats.skipped_unreadable,
            if stats.file_cap_hit {
                format!(
                    "; only the first {} files (by path) are indexed",
                    metabob_index::MAX_FILES
                )
            } else {
                String::new()
            }
        );
    }
    if !report.complete {
        let _ = writeln!(
            out,
            "Partial: {} files still to parse after the {} s budget; call init_workspace again to resume where it stopped. {}",
            report.files_pending,
            INDEX_BUDGET.as_secs(),
            report.note.as_deref().unwrap_or("")
        );
    }
    if let Some(Err(e)) = &done.saved {
        let _ = writeln!(
            out,
            "The index could not be persisted ({e}); a restart will index again."
        );
    }
}

pub async fn search_codebase(ctx: &Ctx, here: &Here<'_>, a: SearchArgs) -> Reply {
    let ws = here.ws().to_path_buf();
    let limit = a.limit.unwrap_or(10);
    let filter = a.file_filter.unwrap_or_default();
    let target = a.target.unwrap_or(Target::Both);
    let mut out = String::new();
    if matches!(target, Target::Components | Target::Both) {
        match with_index(ctx, &ws, |i| i.search(&a.query, limit, &filter)) {
            Err(e) => {
                let _ = writeln!(out, "{e}");
            }
            Ok(hits) if hits.is_empty() => {
                let _ = writeln!(out, "Components: none match {:?}.", a.query);
            }
            Ok(hits) => {
                let _ = writeln!(out, "Components ({}):", hits.len());
                for h in hits {
                    let c = &h.component;
                    let _ = writeln!(
                        out,
                        "- {} {} ({}:{}-{})",
                        c.kind.as_str(),
                        c.qualified_name,
                        c.file,
                        c.start_line,
                        c.end_line
                    );
                }
            }
        }
    }
    if matches!(target, Target::Problems | Target::Both) {
        let query = tokenize(&a.query);
        match local_seeds(ctx, &ws) {
            Err(e) => {
                let _ = writeln!(out, "Problems: {e}");
            }
            Ok(seeds) => {
                let hits: Vec<&Seed> = seeds
                    .iter()
                    .filter(|s| filter.is_empty() || filter.iter().any(|f| s.file.contains(f)))
                    .filter(|s| {
                        let hay = tokenize(&format!("{} {} {}", s.summary, s.category, s.file));
                        query
                            .iter()
                            .all(|q| hay.iter().any(|t| t.contains(q.as_str())))
                    })
                    .take(limit)
                    .collect();
                let _ = writeln!(out, "Problems in the local store ({}):", hits.len());
                for s in hits {
                    let _ = writeln!(out, "{}", seed_line(s));
                }
                out.push_str(NO_SERVER_ANALYSIS);
            }
        }
    }
    Reply::ok(out.trim_end().to_string())
}

/// Git co-change for workspace files; the error line says why there is none.
fn cochanges(
    ws: &Path,
    files: &[String],
    limit: usize,
    threshold: f64,
) -> Result<metabob_git::cochange::CochangeReport, String> {
    let repo = Repo::discover(ws)
        .map_err(|e| format!("git did not answer ({e})"))?
        .ok_or_else(|| "not a git repository, so there is no history to mine".to_string())?;
    let mapped = repo.workspace_paths(ws, files);
    mine_cochanges(&repo, &mapped, limit, threshold).map_err(|e| format!("git: {e}"))
}

pub async fn predict_cochanges(ctx: &Ctx, here: &Here<'_>, a: CochangeArgs) -> Reply {
    let ws = here.ws().to_path_buf();
    let limit = a.limit.unwrap_or(10);
    let threshold = a.confidence_threshold.unwrap_or(0.3);
    let files = a.changed_files.clone();
    let root = ws.clone();
    let mined =
        tokio::task::spawn_blocking(move || cochanges(&root, &files, limit, threshold)).await;
    let mut out = String::new();
    match mined {
        Err(e) => return Reply::error(format!("predict_cochanges: {e}")),
        Ok(Err(e)) => {
            let _ = writeln!(out, "No co-change prediction: {e}.");
        }
        Ok(Ok(r)) if r.predictions.is_empty() => {
            let _ = writeln!(
                out,
                "No file changed with {} at confidence {threshold} or more in the last {} commits ({} touched the given files).",
                a.changed_files.join(", "),
                r.scanned,
                r.given_commits
            );
        }
        Ok(Ok(r)) => {
            let _ = writeln!(
                out,
                "Files that changed with {} ({} of the last {} commits touched them; {} sweeps over 30 files skipped):",
                a.changed_files.join(", "),
                r.given_commits,
                r.scanned,
                r.skipped_sweeps
            );
            for p in &r.predictions {
                let _ = writeln!(
                    out,
                    "- {} (confidence {:.2}, {} commits)",
                    p.file, p.confidence, p.commits
                );
            }
            out.push_str(
                "History mining can miss files that should change together but never have.\n",
            );
        }
    }
    append_findings(ctx, &ws, &a.changed_files, 20, &mut out);
    Reply::ok(out.trim_end().to_string())
}

pub async fn analyze_impact(ctx: &Ctx, here: &Here<'_>, a: ImpactArgs) -> Reply {
    let ws = here.ws().to_path_buf();
    let direction = match a.direction.unwrap_or(DirectionArg::Backward) {
        DirectionArg::Forward => Direction::Forward,
        DirectionArg::Backward => Direction::Backward,
        DirectionArg::Both => Direction::Both,
    };
    let depth = a.max_depth.unwrap_or(5);
    let files: Vec<String> = a.changed_files.iter().map(|f| relative(&ws, f)).collect();
    let impact = match with_index(ctx, &ws, |i| {
        i.impact(&files, direction, depth, a.include_tests.unwrap_or(true))
    }) {
        Ok(impact) => impact,
        Err(e) => return Reply::error(format!("analyze_impact: {e}")),
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Impact of changing {} ({direction}, depth ≤ {depth}): {} components in {} files.",
        files.join(", "),
        impact.affected_total,
        impact.files.len()
    );
    for f in &impact.files {
        let _ = writeln!(out, "{}{}:", f.file, if f.is_test { " [test]" } else { "" });
        for c in &f.components {
            let via: Vec<&str> = c
                .via
                .iter()
                .map(|e| match e {
                    EdgeKind::Calls => "calls",
                    EdgeKind::Imports => "imports",
                    EdgeKind::Contains => "contains",
                })
                .collect();
            let _ = writeln!(
                out,
                "  - {} {} (line {}, depth {}, via {})",
                c.kind.as_str(),
                c.qualified_name,
                c.start_line,
                c.depth,
                via.join(" > ")
            );
        }
    }
    if !impact.not_indexed.is_empty() {
        let _ = writeln!(
            out,
            "Not in the code graph: {} (not indexed, or not a supported language).",
            impact.not_indexed.join(", ")
        );
    }
    append_findings(ctx, &ws, &files, 20, &mut out);
    out.push_str(&super::gaps::gap_summary_lines(here, &files));
    Reply::ok(out.trim_end().to_string())
}

pub async fn assign_git_changes(ctx: &Ctx, here: &Here<'_>, a: AssignArgs) -> Reply {
    let ws = here.ws().to_path_buf();
    let files: Vec<String> = a.changed_files.iter().map(|f| relative(&ws, f)).collect();
    let map = match with_index(ctx, &ws, |i| {
        files
            .iter()
            .map(|f| {
                let comps: Vec<String> = i
                    .components_in_file(f)
                    .iter()
                    .map(|c| {
                        format!(
                            "{} {} (lines {}-{})",
                            c.kind.as_str(),
                            c.qualified_name,
                            c.start_line,
                            c.end_line
                        )
                    })
                    .collect();
                (f.clone(), comps)
            })
            .collect::<Vec<_>>()
    }) {
        Ok(map) => map,
        Err(e) => return Reply::error(format!("assign_git_changes: {e}")),
    };
    let mut out = String::from("File → components:\n");
    for (f, comps) in &map {
        if comps.is_empty() {
            let _ = writeln!(out, "- {f}: no components (not indexed or no code)");
        } else {
            let _ = writeln!(out, "- {f}: {}", comps.join("; "));
        }
    }
    if a.include_cochange_predictions.unwrap_or(true) {
        let limit = a.prediction_limit.unwrap_or(5) * 2;
        let root = ws.clone();
        let given = files.clone();
        match tokio::task::spawn_blocking(move || cochanges(&root, &given, limit, 0.3)).await {
            Ok(Ok(r)) if !r.predictions.is_empty() => {
                out.push_str("Co-changes in git history:\n");
                for p in &r.predictions {
                    let _ = writeln!(
                        out,
                        "- {} (confidence {:.2}, {} commits)",
                        p.file, p.confidence, p.commits
                    );
                }
            }
            Ok(Ok(_)) => {
                out.push_str("Co-changes in git history: none at confidence 0.3 or more.\n")
            }
            Ok(Err(e)) => {
                let _ = writeln!(out, "Co-changes: {e}.");
            }
            Err(e) => {
                let _ = writeln!(out, "Co-changes: stopped ({e}).");
            }
        }
    }
    append_findings(ctx, &ws, &files, 20, &mut out);
    out.push_str(&super::gaps::gap_summary_lines(here, &files));
    Reply::ok(out.trim_end().to_string())
}

pub async fn get_metrics(ctx: &Ctx, here: &Here<'_>, _a: NoArgs) -> Reply {
    let ws = here.ws().to_path_buf();
    let mut out = String::new();
    match local_seeds(ctx, &ws) {
        Err(e) => {
            let _ = writeln!(out, "Local store: {e}");
        }
        Ok(seeds) => {
            let groups = by_group(&seeds);
            let mut sev: std::collections::BTreeMap<_, usize> = Default::default();
            let mut cats: std::collections::HashMap<&str, usize> = Default::default();
            for s in &groups {
                *sev.entry(s.severity).or_default() += 1;
                *cats.entry(s.category.as_str()).or_default() += 1;
            }
            let agent = groups.iter().filter(|s| s.id.starts_with("agf_")).count();
            let _ = writeln!(
                out,
                "Open findings in the local store: {} ({} agent-recorded, {} other).",
                groups.len(),
                agent,
                groups.len() - agent
            );
            if !sev.is_empty() {
                let _ = writeln!(
                    out,
                    "By severity: {}.",
                    sev.iter()
                        .map(|(s, n)| format!("{s} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                let mut top: Vec<_> = cats.into_iter().collect();
                top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
                top.truncate(5);
                let _ = writeln!(
                    out,
                    "Top categories: {}.",
                    top.iter()
                        .map(|(c, n)| format!("{c} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
    }
    let _ = writeln!(out, "{}", graph_line(ctx, &ws));
    out.push_str(NO_SERVER_ANALYSIS);
    Reply::ok(out)
}

pub async fn annotate_component(ctx: &Ctx, here: &Here<'_>, a: AnnotateArgs) -> Reply {
    let ws = here.ws().to_path_buf();
    let store = match ctx.store() {
        Ok(s) => s,
        Err(e) => return Reply::error(format!("annotate_component: {e}")),
    };
    let seed = match store.get(&a.problem_id) {
        Ok(Some(s)) => s,
        Ok(None) => {
            return Reply::error(format!(
                "annotate_component: {} is not in the local store. Only local findings can be annotated: there is no server-side analysis, so no other ids exist here.",
                a.problem_id
            ));
        }
        Err(e) => return Reply::error(format!("annotate_component: {e}")),
    };
    let component = seed.line_start.and_then(|line| {
        with_index(ctx, &ws, |i| {
            i.component_for_line(&seed.file, line)
                .map(|c| format!("{} {}", c.kind.as_str(), c.qualified_name))
        })
        .ok()
        .flatten()
    });
    let lines = match (seed.line_start, seed.line_end) {
        (Some(a), Some(b)) => format!(":{a}-{b}"),
        (Some(a), None) => format!(":{a}"),
        _ => String::new(),
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} [{}][{}] {}",
        seed.id, seed.severity, seed.category, seed.summary
    );
    let _ = writeln!(out, "file: {}{lines}", seed.file);
    if let Some(c) = &component {
        let _ = writeln!(out, "component: {c}");
    }
    let _ = writeln!(
        out,
        "refs: {}",
        seed.concept_ref.as_deref().unwrap_or("not shared yet")
    );
    let _ = writeln!(out, "status: {}", seed.status);
    if !seed.details.is_empty() {
        let _ = writeln!(out, "details: {}", seed.details);
    }
    let place = component.unwrap_or_else(|| format!("{}{lines}", seed.file));
    render_notes(&mut out, &seed, &place, a.mode.unwrap_or(Mode::Explain));
    if let Some(c) = a.context.filter(|c| !c.trim().is_empty()) {
        let _ = writeln!(out, "Context: {c}");
    }
    out.push_str("Notes are built locally; no request was made.");
    Reply::ok(out)
}

/// The why or how-to-fix notes of one local finding at `place`.
fn render_notes(out: &mut String, seed: &Seed, place: &str, mode: Mode) {
    match mode {
        Mode::Explain => {
            out.push_str("Why it matters:\n");
            let _ = writeln!(
                out,
                "- {}: {}",
                seed.severity,
                match seed.severity {
                    metabob_wire::finding::Severity::Critical =>
                        "breaks correctness, security or data; fix before other work on this code",
                    metabob_wire::finding::Severity::High =>
                        "likely to fail in real use; fix in this change if you touch the code",
                    metabob_wire::finding::Severity::Medium =>
                        "a real defect with a narrow trigger or a workaround",
                    _ => "worth knowing before changing the code; low risk on its own",
                }
            );
            let _ = writeln!(
                out,
                "- where: {place}; callers and importers of it share the risk (analyze_impact shows them)."
            );
        }
        Mode::Recommend => {
            out.push_str("How to fix:\n");
            let _ = writeln!(
                out,
                "- claim it first (claim_finding {}) so no one else starts the same work;",
                seed.id
            );
            let _ = writeln!(
                out,
                "- change {place}, and check the files that usually change with it (predict_cochanges);"
            );
            let _ = writeln!(
                out,
                "- commit with the trailer `Fixes-Finding: {}` and push;",
                seed.id
            );
            let _ = writeln!(
                out,
                "- then mark_complete {} (endorse), which records where the fix is.",
                seed.id
            );
        }
    }
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

/// The open seeds of this workspace, or the store's error line.
pub fn local_seeds(ctx: &Ctx, ws: &Path) -> Result<Vec<Seed>, String> {
    ctx.store()?
        .seeds(&ws.display().to_string(), false)
        .map_err(|e| e.to_string())
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
    let secs = ((metabob_wire::util::now_ms() - ms).max(0) / 1000) as u64;
    match secs {
        s if s < 60 => "just now".into(),
        s if s < 3600 => format!("{} min ago", s / 60),
        s if s < 86_400 => format!("{} h ago", s / 3600),
        s => format!("{} d ago", s / 86_400),
    }
}

/// Appends the local store's open findings on `files`.
fn append_findings(ctx: &Ctx, ws: &Path, files: &[String], cap: usize, out: &mut String) {
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

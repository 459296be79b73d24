//! init_workspace: the workspace indexed into the local code graph within a time budget, so a
//! large tree answers in parts and the next call resumes where this one stopped.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::InitArgs;
use super::shared::{cochange_cache, cochanges, load_persisted, real};
use crate::ctx::{Ctx, Here};
use crate::tools::Reply;
use metabob_index::{Index, IndexOptions};

/// Sets its flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// How long one `init_workspace` parses before it answers; the next call resumes.
pub const INDEX_BUDGET: Duration = Duration::from_secs(20);

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
                metabob_process::err!("\rindexing: {done}/{total} files");
            }
        };
        let report = index.run_with(&opts, INDEX_BUDGET, &stopped, &mut progress)?;
        if terminal {
            metabob_process::errln!("\rindexing: {} files parsed", report.files_parsed);
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
            let line = metabob_wire::report::with_hint(&e);
            if let metabob_index::IndexError::Unavailable { .. } = &e {
                let _ = ctx.index_unavailable.set(line.clone());
            }
            Err(format!("init_workspace: {line}"))
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
        match cochanges(
            cochange_cache(ctx, ws),
            ws,
            &a.recently_changed_files,
            50,
            0.3,
        ) {
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

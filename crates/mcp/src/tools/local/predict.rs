//! predict_cochanges: the files git history says change together with the given ones.

use std::fmt::Write as _;

use super::CochangeArgs;
use super::shared::{append_findings, cochange_cache, cochanges};
use crate::ctx::{Ctx, Here};
use crate::tools::Reply;

pub async fn predict_cochanges(ctx: &Ctx, here: &Here<'_>, a: CochangeArgs) -> Reply {
    let ws = here.ws().to_path_buf();
    let limit = a.limit.unwrap_or(10);
    let threshold = a.confidence_threshold.unwrap_or(0.3);
    let files = a.changed_files.clone();
    let root = ws.clone();
    let cache = cochange_cache(ctx, &ws);
    let mined =
        tokio::task::spawn_blocking(move || cochanges(cache, &root, &files, limit, threshold))
            .await;
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

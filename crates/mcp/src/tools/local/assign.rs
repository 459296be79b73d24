//! assign_git_changes: changed files mapped to the components they touch, with their co-changes.

use std::fmt::Write as _;

use super::AssignArgs;
use super::shared::{append_findings, cochange_cache, cochanges, relative, with_index};
use crate::ctx::{Ctx, Here};
use crate::tools::Reply;

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
        let cache = cochange_cache(ctx, &ws);
        let mined = move || cochanges(cache, &root, &given, limit, 0.3);
        match tokio::task::spawn_blocking(mined).await {
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
    out.push_str(&crate::tools::gaps::gap_summary_lines(here, &files));
    Reply::ok(out.trim_end().to_string())
}

//! analyze_impact: the components a change reaches through calls and imports in the code graph.

use std::fmt::Write as _;

use super::shared::{append_findings, relative, with_index};
use super::{DirectionArg, ImpactArgs};
use crate::ctx::{Ctx, Here};
use crate::tools::Reply;
use metabob_index::{Direction, EdgeKind};

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
    out.push_str(&crate::tools::gaps::gap_summary_lines(here, &files));
    Reply::ok(out.trim_end().to_string())
}

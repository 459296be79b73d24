//! search_codebase: the code graph's components and the local store's findings, by keyword.

use std::fmt::Write as _;

use super::shared::{NO_SERVER_ANALYSIS, local_seeds, seed_line, with_index};
use super::{SearchArgs, Target};
use crate::ctx::{Ctx, Here};
use crate::store::Seed;
use crate::tools::Reply;
use metabob_index::tokenize;

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

//! get_metrics: the local store's open findings counted, and the code graph's size.

use std::fmt::Write as _;

use super::NoArgs;
use super::shared::{NO_SERVER_ANALYSIS, by_group, graph_line, local_seeds};
use crate::ctx::{Ctx, Here};
use crate::tools::Reply;

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

//! annotate_component: notes on one local finding, built on this machine from its seed and the
//! code graph, since there is no server-side analysis to ask.

use std::fmt::Write as _;

use super::shared::with_index;
use super::{AnnotateArgs, Mode};
use crate::ctx::{Ctx, Here};
use crate::store::Seed;
use crate::tools::Reply;

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

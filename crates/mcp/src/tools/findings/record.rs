//! record_finding: the local half (seeds, the local duplicate check) over the ledger's one
//! recording path.

use std::fmt::Write as _;
use std::path::Path;

use super::RecordArgs;
use crate::ctx::{Ctx, Here, Session};
use crate::store::NewSeeds;
use crate::tools::local::shared::relative;
use crate::tools::{CallResult, Reply};
use metabob_cell::ledger::record::open_duplicate;
use metabob_cell::ledger::repo_identity::repo_identity;
use metabob_wire::finding::{FindingStatus, NewFinding};
use metabob_wire::record::{FindingDraft, same_summary};
use metabob_wire::report;

pub async fn record_finding(ctx: &Ctx, here: &Here<'_>, a: RecordArgs) -> Reply {
    let (s, ws) = (here.session, here.ws());
    let draft = FindingDraft {
        files: a.files.iter().map(|f| relative(ws, f)).collect(),
        summary: a.summary,
        details: a.details.unwrap_or_default(),
        severity: a.severity,
        category: a.category,
        line_start: a.line_start,
        line_end: a.line_end,
        status: a
            .status
            .as_deref()
            .map_or(FindingStatus::Open, FindingStatus::parse),
    };
    let draft = match draft.checked() {
        Ok(d) => d,
        Err(e) => return Reply::error(format!("record_finding: {e}; nothing was recorded")),
    };
    let store = match ctx.store() {
        Ok(st) => st,
        Err(e) => return Reply::error(format!("record_finding: {e}; nothing was recorded")),
    };
    let ws_key = ws.display().to_string();
    let mut recall_note = None;
    if !a.force.unwrap_or(false) && draft.status.is_open() {
        match find_duplicate(&store, s, ws, &draft).await {
            Ok(Some(reply)) => return reply,
            Ok(None) => {}
            Err(cause) => recall_note = Some(cause),
        }
    }
    let name = ws
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nf = draft.into_new(
        repo_identity(ws),
        name,
        s.vessel.clone(),
        s.att.claim().session.clone(),
        metabob_process::random::new_finding_id,
    );
    let seeds = match store.insert(&NewSeeds {
        workspace: &ws_key,
        ids: &nf.finding_ids,
        files: &nf.files,
        summary: &nf.summary,
        details: &nf.details,
        severity: nf.severity,
        category: &nf.category,
        lines: (a.line_start, a.line_end),
        open: nf.status.is_open(),
    }) {
        Ok(v) => v,
        Err(e) => {
            return Reply::error(format!(
                "record_finding: {}; nothing was recorded",
                report::with_hint(&e)
            ));
        }
    };
    let shared = match s.att.gate().await {
        Err(refusal) => Err(refusal.to_string()),
        Ok(_) => metabob_cell::ledger::write_concept(&s.att, nf.to_pointer())
            .await
            .map_err(|e| metabob_wire::report::with_hint(&e)),
    };
    let link_failed = match &shared {
        Ok(concept) => store
            .set_concept(&seeds[0].group_id, concept)
            .err()
            .map(|e| {
                let e = report::with_hint(&e);
                format!("Linking the seeds to {concept} failed: {e}.")
            }),
        Err(_) => None,
    };
    let notes = Notes {
        link_failed,
        recall: recall_note,
    };
    render_recorded(&nf, &shared, &notes)
}

/// What went wrong beside a recording that still happened.
struct Notes {
    link_failed: Option<String>,
    /// Why the duplicate check could not read the ledger.
    recall: Option<String>,
}

/// The same finding already open here or on the ledger: the reply that says so, or the line
/// saying why the ledger could not be asked.
async fn find_duplicate(
    store: &crate::store::Store,
    s: &Session,
    ws: &Path,
    d: &FindingDraft,
) -> Result<Option<Reply>, String> {
    let local = store
        .seeds(&ws.display().to_string(), false)
        .unwrap_or_default();
    if let Some(x) = local
        .iter()
        .find(|x| d.files.contains(&x.file) && same_summary(&x.summary, &d.summary))
    {
        let files = std::slice::from_ref(&x.file);
        return Ok(Some(already(&x.id, &x.summary, files, "the local store")));
    }
    s.att.gate().await.map_err(|r| r.to_string())?;
    let aliases = metabob_cell::ledger::repo_identity::aliases_for_workspace(ws);
    let Some(dup) = open_duplicate(&s.att, &aliases, &d.files, &d.summary)
        .await
        .map_err(|e| metabob_wire::report::with_hint(&e))?
    else {
        return Ok(None);
    };
    let local_id = store
        .by_concept(&dup.concept_id)
        .ok()
        .and_then(|v| v.first().map(|x| x.id.clone()));
    let id = local_id.as_deref().unwrap_or(&dup.concept_id);
    Ok(Some(already(
        id,
        &dup.summary,
        &dup.files,
        "the shared ledger",
    )))
}

fn render_recorded(nf: &NewFinding, shared: &Result<String, String>, notes: &Notes) -> Reply {
    let ids = &nf.finding_ids;
    let mut out = format!(
        "Recorded {} [{}][{}] {} on {}.\n",
        ids.join(", "),
        nf.severity,
        nf.category,
        nf.summary,
        nf.files.join(", ")
    );
    if let Some(line) = &notes.link_failed {
        let _ = writeln!(out, "{line}");
    }
    let result = match shared {
        Ok(concept) => {
            let _ = writeln!(
                out,
                "Shared on the ledger as concept {concept}, so other agents on this codebase see it."
            );
            CallResult::Ok
        }
        Err(cause) => {
            let _ = writeln!(
                out,
                "Not shared: {cause}. It is in the local store only; other agents do not see it."
            );
            CallResult::NotShared
        }
    };
    if let Some(cause) = &notes.recall {
        let _ = writeln!(
            out,
            "The duplicate check could not read the ledger ({cause})."
        );
    }
    let _ = write!(
        out,
        "Close it with mark_complete {} once fixed (commit trailer: Fixes-Finding: {}).",
        ids[0], ids[0]
    );
    Reply::ok(out).with_result(result)
}

fn already(id: &str, summary: &str, files: &[String], whence: &str) -> Reply {
    Reply::ok(format!(
        "Already recorded (open): {id} — use mark_complete or add details there.\nsummary: {summary}\nfiles: {}\nfound in {whence}; nothing was written.",
        files.join(", ")
    ))
    .with_result(CallResult::Duplicate)
}

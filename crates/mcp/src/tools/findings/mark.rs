//! mark_complete: the fix location from git, the verdict through the ledger's one writer, and
//! the local seeds retired to match.

use std::fmt::Write as _;
use std::path::Path;

use super::{MarkAction, MarkArgs, Named, finding_of_seeds, resolve_named};
use crate::ctx::{Ctx, Here, Session};
use crate::store::{Retire, Seed};
use crate::tools::{CallResult, Reply};
use metabob_cell::fix_location::{FixRefused, Located, locate_fix};
use metabob_cell::ledger::verdict;
use metabob_git::Repo;
use metabob_wire::finding::Finding;
use metabob_wire::report;
use metabob_wire::text::rfc3339_ms;
use metabob_wire::verdict::{NewVerdict, VerdictKind, VerdictOrigin};

pub async fn mark_complete(ctx: &Ctx, here: &Here<'_>, a: MarkArgs) -> Reply {
    let (s, ws) = (here.session, here.ws());
    let id = a.problem_id.trim();
    let discard = matches!(a.action, Some(MarkAction::Discard));
    if let Err(refused) = check_mark_args(id, discard, a.fix_commit.as_deref()) {
        return refused;
    }
    let named = match resolve_named(ctx, &s.att, ws, id).await {
        Ok(n) => n,
        Err(e) => return Reply::error(format!("mark_complete: {e}")),
    };
    if named.seeds.is_empty() && named.recalled.is_none() {
        let why = match s.att.gate().await {
            Ok(_) => "neither the local store nor the ledger knows it".to_string(),
            Err(cause) => format!(
                "the local store does not hold it and the ledger could not be asked ({cause})"
            ),
        };
        return Reply::error(format!(
            "mark_complete: {id} not found: {why}; nothing was recorded"
        ));
    }
    let finding = named
        .recalled
        .clone()
        .unwrap_or_else(|| finding_of_seeds(&named.seeds, ws));
    let Judged { kind, lines, note } = if discard {
        Judged {
            kind: VerdictKind::Discarded,
            lines: Vec::new(),
            note: None,
        }
    } else {
        match judge_fix(ws, &named, &finding, id, a.fix_commit.as_deref()) {
            Ok(judged) => judged,
            Err(reply) => return reply,
        }
    };
    let mut out = claim_note(&named, &finding, s.vessel.as_deref(), kind.closes());
    let nv = NewVerdict {
        finding: &finding,
        kind,
        reviewed_by: s.vessel.clone(),
        session: s.att.claim().session.clone(),
        origin: if named.seeds.is_empty() {
            VerdictOrigin::Remote
        } else {
            VerdictOrigin::Local
        },
        lines,
    };
    let (shared, local_only) = share_verdict(s, &nv).await;
    let result = render_verdict(&mut out, &nv, &shared);
    if let Some(n) = note {
        let _ = writeln!(out, "{n}");
    }
    let retire = kind.closes() && (shared.is_ok() || local_only);
    out.push_str(&retire_named(ctx, &named.seeds, retire, discard));
    Reply::ok(out.trim_end().to_string()).with_result(result)
}

/// Refuses what mark_complete cannot act on before anything is read.
fn check_mark_args(id: &str, discard: bool, fix_commit: Option<&str>) -> Result<(), Reply> {
    if !id.starts_with("agf_") && !id.starts_with("concept_") {
        return Err(Reply::error(format!(
            "mark_complete: {id} is not a finding id (agf_…) or a concept id (concept_…); nothing was recorded: there are no backend detections for it to name"
        )));
    }
    let Some(c) = fix_commit else { return Ok(()) };
    if discard {
        return Err(Reply::error(
            "mark_complete: fix_commit goes with endorse, not discard; nothing was recorded",
        ));
    }
    if !(7..=40).contains(&c.len()) || !c.chars().all(|ch| ch.is_ascii_hexdigit()) {
        return Err(Reply::error(format!(
            "mark_complete: fix_commit {c:?} is not a commit id (7-40 hex digits); nothing was recorded"
        )));
    }
    Ok(())
}

/// The verdict to write, its fix-location lines, and a note for the reply.
struct Judged {
    kind: VerdictKind,
    lines: Vec<(&'static str, String)>,
    note: Option<String>,
}

/// An endorse's verdict from git: where the fix is, or the reply saying why none is written.
fn judge_fix(
    ws: &Path,
    named: &Named,
    finding: &Finding,
    id: &str,
    fix_commit: Option<&str>,
) -> Result<Judged, Reply> {
    let repo = Repo::discover(ws).map_err(|e| {
        Reply::error(format!(
            "mark_complete: git did not answer ({}); nothing was recorded, try again",
            report::with_hint(&e)
        ))
    })?;
    let files = match &repo {
        Some(r) => r.workspace_paths(ws, &named.files),
        None => named.files.clone(),
    };
    let not_applied = |why: &dyn std::fmt::Display| {
        Reply::ok(format!(
            "No verdict written for {id}: {why}. Nothing was retired."
        ))
        .with_result(CallResult::NotApplied)
    };
    match locate_fix(repo.as_ref(), finding, &files, fix_commit) {
        Ok(Located::Verdict { kind, lines, note }) => Ok(Judged { kind, lines, note }),
        Ok(Located::NoVerdict { why }) => Err(not_applied(&why)),
        Err(e @ FixRefused::Git(_)) => Err(Reply::error(format!(
            "mark_complete: {}; nothing was recorded",
            report::with_hint(&e)
        ))),
        Err(e) => Err(not_applied(&report::with_hint(&e))),
    }
}

/// The line about someone else's live claim, since a verdict affects it.
fn claim_note(named: &Named, finding: &Finding, me: Option<&str>, closes: bool) -> String {
    let Some(h) = named
        .view
        .as_ref()
        .and_then(|v| v.holder(finding, metabob_process::clock::now_ms()))
        .filter(|h| Some(h.holder.as_str()) != me)
    else {
        return String::new();
    };
    if closes {
        format!(
            "claim: claimed by {} until {}; this closes it anyway, which ends their claim.\n",
            h.holder,
            rfc3339_ms(metabob_wire::claims::lapses_at(&h))
        )
    } else {
        format!(
            "claim: claimed by {}; the claim was not applied, since the fix is not closed yet.\n",
            h.holder
        )
    }
}

/// The shared half through the ledger's one verdict writer: the verdict's id, or why it was not
/// shared; and whether the finding only ever lived here (so local seeds retire regardless).
async fn share_verdict(s: &Session, nv: &NewVerdict<'_>) -> (Result<String, String>, bool) {
    let gate = s.att.gate().await;
    let never_shared = nv.finding.concept_id.is_empty();
    let local_only = gate.is_err() || never_shared;
    let shared = match gate {
        Err(refusal) => Err(refusal.to_string()),
        Ok(_) if never_shared => {
            Err("the finding was never shared (recorded while detached)".into())
        }
        Ok(_) => verdict::write(&s.att, nv, "mark-complete")
            .await
            .map_err(|e| metabob_wire::report::with_hint(&e)),
    };
    (shared, local_only)
}

fn render_verdict(
    out: &mut String,
    nv: &NewVerdict<'_>,
    shared: &Result<String, String>,
) -> CallResult {
    let verdict_line = nv.kind.line();
    match shared {
        Ok(vid) => {
            let _ = writeln!(
                out,
                "verdict: {verdict_line} ({vid}, origin {}).",
                nv.origin.as_str()
            );
            for (k, v) in &nv.lines {
                let _ = writeln!(out, "{k}: {v}");
            }
            if nv.kind.closes() {
                CallResult::Ok
            } else {
                CallResult::Pending
            }
        }
        Err(cause) => {
            let _ = writeln!(out, "verdict: {verdict_line}, not shared: {cause}.");
            CallResult::NotShared
        }
    }
}

/// The local half: a fix leaves the seeds stale, a discard deletes them; pending retires none.
fn retire_named(ctx: &Ctx, seeds: &[Seed], retire: bool, discard: bool) -> String {
    if seeds.is_empty() {
        return "Nothing local was retired: this machine holds no seed of the finding.".into();
    }
    if !retire {
        return "Nothing local was retired.".into();
    }
    let how = if discard {
        Retire::Delete
    } else {
        Retire::Stale
    };
    match ctx
        .store()
        .and_then(|st| (st.retire(seeds, how)).map_err(|e| metabob_wire::report::with_hint(&e)))
    {
        Ok(n) => format!(
            "{n} local seeds retired ({}).",
            if discard { "deleted" } else { "resolved" }
        ),
        Err(e) => format!("Retiring the local seeds failed: {e}."),
    }
}

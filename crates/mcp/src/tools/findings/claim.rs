//! claim_finding: the claim rule of `ledger::claims`, rendered.

use super::{ClaimArg, ClaimArgs, resolve_named};
use crate::ctx::{Ctx, Here};
use crate::tools::{CallResult, Reply, not_attached};
use metabob_cell::ledger::claims;
use metabob_wire::claims::{
    ClaimAction, ClaimOutcome, ClaimWord, DEFAULT_CLAIM_MINUTES, Held, lapses_at,
};
use metabob_wire::depends::blocked_line;
use metabob_wire::text::rfc3339_ms;

pub async fn claim_finding(ctx: &Ctx, here: &Here<'_>, a: ClaimArgs) -> Reply {
    let (s, ws) = (here.session, here.ws());
    if let Err(cause) = s.att.gate().await {
        return not_attached("claim_finding", &cause);
    }
    let refused = CallResult::Claim(ClaimWord::Refused);
    let Some(me) = s.vessel.clone() else {
        return Reply::error("claim_finding: a claim must name its holder and this process has no vessel identity (set VESSEL_ID or METABOB_API_KEY); nothing was written").with_result(refused);
    };
    let named = match resolve_named(ctx, &s.att, ws, a.problem_id.trim()).await {
        Ok(n) => n,
        Err(e) => {
            return Reply::error(format!("claim_finding: {e}")).with_result(CallResult::Error);
        }
    };
    let Some(finding) = named.recalled else {
        let why = if named.seeds.is_empty() {
            "neither the local store nor the ledger knows it"
        } else {
            "it is in the local store only (recorded while detached), so there is nothing shared to claim"
        };
        return Reply::error(format!(
            "claim_finding: {} not found: {why}; nothing was written",
            a.problem_id
        ))
        .with_result(refused);
    };
    let action = match a.action.unwrap_or(ClaimArg::Claim) {
        ClaimArg::Claim => ClaimAction::Claim,
        ClaimArg::Renew => ClaimAction::Renew,
        ClaimArg::Release => ClaimAction::Release,
    };
    // A task that waits for others is not claimed, as no pull hands it out; a holder renews.
    if action == ClaimAction::Claim
        && let Some(view) = &named.view
        && view
            .holder(&finding, metabob_process::clock::now_ms())
            .is_none_or(|h| h.holder != me)
    {
        let waits = view.open_blockers(&finding);
        if !waits.is_empty() {
            let reason = format!(
                "{} is {}; claim it once each is fixed",
                finding.id(),
                blocked_line(&waits)
            );
            return Reply::error(claim_text(&ClaimOutcome::Refused { reason }, finding.id()))
                .with_result(refused);
        }
    }
    let minutes = a.minutes.unwrap_or(DEFAULT_CLAIM_MINUTES);
    let session_id = s.att.claim().session.clone();
    let claimed = claims::claim_finding(&s.att, &finding, &me, &session_id, minutes, action, None);
    let outcome = match claimed.await {
        Ok(o) => o,
        Err(e) => {
            return Reply::failed("claim_finding", &e).with_result(CallResult::Error);
        }
    };
    let mut reply = Reply::ok(claim_text(&outcome, finding.id()));
    reply.is_error = matches!(outcome, ClaimOutcome::Refused { .. });
    reply.with_result(CallResult::Claim(outcome.word()))
}

fn claim_text(outcome: &ClaimOutcome, id: &str) -> String {
    let until = |h: &Held| rfc3339_ms(lapses_at(h));
    match outcome {
        ClaimOutcome::Claimed { held } => format!(
            "Claimed {id} until {}: it is yours; renew while working, release if you stop without a fix.",
            until(held)
        ),
        ClaimOutcome::Renewed { held } => format!("Renewed: {id} is yours until {}.", until(held)),
        ClaimOutcome::Released => format!("Released {id}: others may take it."),
        ClaimOutcome::Held { by } => format!(
            "Not claimed: {} holds {id} until {}; pick another finding.",
            by.holder,
            until(by)
        ),
        ClaimOutcome::Lost { winner } => format!(
            "Not claimed: {} claimed {id} first (until {}); ours was withdrawn.",
            winner.holder,
            until(winner)
        ),
        ClaimOutcome::Unsettled => format!(
            "The claim on {id} is written but not settled (the read-back never showed it); run claim_finding again before starting."
        ),
        ClaimOutcome::Closed => format!("{id} is closed; there is nothing to claim."),
        ClaimOutcome::Refused { reason } => format!("Refused: {reason}; nothing was written."),
    }
}

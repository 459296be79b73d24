//! The heartbeat: the claim renewed while the harness works, and the word that it is gone.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;

use super::log::Log;
use crate::task_claim::{GiveBack as Claim, renew_or_release};
use metabob_process::env::Env;
use metabob_wire::claims::ClaimOutcome;

/// Why a renewal's answer means the claim is gone.
pub(super) fn claim_gone(outcome: &ClaimOutcome) -> String {
    match outcome {
        ClaimOutcome::Held { by } | ClaimOutcome::Lost { winner: by } => {
            format!("the claim is held by {}", by.holder)
        }
        ClaimOutcome::Closed => "the task is closed".into(),
        ClaimOutcome::Refused { reason } => reason.clone(),
        other => format!("the renewal answered {}", other.word().as_str()),
    }
}

/// The heartbeat (anchor: heartbeat): renews every RENEW_EVERY; when a renewal says the claim
/// is no longer this cell's, it says so once and stops. A renewal that failed only logs: the
/// claim has two more renewals' time before it lapses.
pub(super) async fn heartbeat(
    task_dir: PathBuf,
    minutes: i64,
    every: Duration,
    env: Env,
    lost: watch::Sender<Option<String>>,
    log: Log,
) {
    loop {
        tokio::time::sleep(every).await;
        let given = Claim::Renew {
            minutes: Some(minutes),
        };
        match renew_or_release(&task_dir, given, env.clone()).await {
            Ok((ClaimOutcome::Renewed { .. }, _)) => {}
            Ok((ClaimOutcome::Unsettled, _)) => {
                log.note(
                    "renew",
                    "a renewal did not settle; the claim may lapse".into(),
                );
            }
            Ok((other, _)) => {
                let why = claim_gone(&other);
                log.note(
                    "renew",
                    format!("the claim is no longer this cell's; stopping the harness ({why})"),
                );
                let _ = lost.send(Some(why));
                return;
            }
            // Only the ledger's answer says the claim is gone; a renewal that failed says
            // nothing about it, and the fence before the push asks again.
            Err(e) => {
                log.note(
                    "renew",
                    format!(
                        "task renew failed ({}); the claim may lapse",
                        metabob_wire::report::with_hint(&e)
                    ),
                );
            }
        }
    }
}

//! The cell's steps once the harness is done (SPEC.md §The cell entrypoint): renew right before
//! the push, move the harness's commits onto the target, push, verify and close.

use std::time::Instant;

use super::git::{Pushed, Rebased};
use super::heartbeat::claim_gone;
use super::machine::{Backoff, CloseEnd, FenceEnd, IntegrateEnd, PushEnd};
use super::{Cell, random};
use crate::finding_close::{self, CloseOptions, Commits, Outcome};
use crate::task_claim::{GiveBack as Claim, renew_or_release};
use metabob_wire::claims::ClaimOutcome;
use metabob_wire::report;

impl Cell {
    /// Renews right before the push (anchor: fence): only a `renewed` for this cell lets it
    /// go ahead.
    pub(super) async fn fence(&mut self) -> FenceEnd {
        let task_dir = self.cfg.task_dir.clone();
        let minutes = Some(self.cfg.claim_minutes);
        let renewed = self
            .ledger(|env| renew_or_release(&task_dir, Claim::Renew { minutes }, env))
            .await;
        match renewed {
            Ok((ClaimOutcome::Renewed { .. }, _)) => FenceEnd::Held,
            Ok((other, _)) => FenceEnd::Lost {
                why: claim_gone(&other),
            },
            Err(e) if e.is_outage() => FenceEnd::LedgerAway,
            Err(e) => FenceEnd::Lost {
                why: format!("the renewal failed: {}", report::with_hint(&e)),
            },
        }
    }

    /// Moves the harness's commits, `base..HEAD` and only those, onto the fresh target.
    pub(super) async fn integrate(&mut self) -> IntegrateEnd {
        let since = Instant::now();
        let Some(cur) = self.current.as_ref() else {
            return IntegrateEnd::OriginAway {
                why: "no task in hand".into(),
            };
        };
        let target = cur.task.policy.target.clone();
        let base = cur.base.clone();
        if let Err(e) = self.git.clean().await {
            return IntegrateEnd::OriginAway {
                why: report::line(&e),
            };
        }
        if let Err(why) = self.origin("fetching origin", || self.git.fetch()).await {
            return IntegrateEnd::OriginAway { why };
        }
        let Some(onto) = self
            .git
            .resolve(&format!("refs/remotes/origin/{target}"))
            .await
        else {
            return IntegrateEnd::NoTarget { branch: target };
        };
        if onto == base {
            return IntegrateEnd::Clean;
        }
        match self.git.rebase_onto(&onto, &base).await {
            Ok(Rebased::Clean) => {
                if let Some(cur) = self.current.as_mut() {
                    cur.base = onto;
                }
                IntegrateEnd::Clean
            }
            Ok(Rebased::Conflict { files }) => {
                let id = self.task_id();
                self.task_line(
                    "integrate",
                    "conflict",
                    Some(since),
                    None,
                    format!(
                        "{id}: rebase onto origin/{target} conflicts ({})",
                        files.join(", ")
                    ),
                );
                IntegrateEnd::Conflict { files }
            }
            Err(e) => IntegrateEnd::OriginAway {
                why: report::line(&e),
            },
        }
    }

    pub(super) async fn push(&mut self) -> PushEnd {
        let since = Instant::now();
        let Some(cur) = self.current.as_ref() else {
            return PushEnd::OriginAway {
                why: "no task in hand".into(),
            };
        };
        let branch = cur.task.policy.push_branch.clone();
        let force = branch != cur.task.policy.target;
        let mut backoff = Backoff::new(self.cfg.origin_wait);
        let end = loop {
            match self.git.push(&branch, force).await {
                Ok(Pushed::Landed) => break PushEnd::Landed,
                Ok(Pushed::Race) => break PushEnd::Race,
                Ok(Pushed::Refused { why }) => break PushEnd::Refused { why },
                Ok(Pushed::Away { why }) => match backoff.next(random()) {
                    Some(pause) => tokio::time::sleep(pause).await,
                    None => break PushEnd::OriginAway { why },
                },
                Err(e) => {
                    break PushEnd::OriginAway {
                        why: report::line(&e),
                    };
                }
            }
        };
        let (outcome, reason) = match &end {
            PushEnd::Landed => ("landed", None),
            PushEnd::Race => ("race", None),
            PushEnd::Refused { why } => ("refused", Some(why.as_str())),
            PushEnd::OriginAway { why } => ("origin_away", Some(why.as_str())),
        };
        let id = self.task_id();
        let message = match reason {
            Some(r) => format!("{id}: push to {branch}: {outcome} ({r})"),
            None => format!("{id}: push to {branch}: {outcome}"),
        };
        self.task_line("push", outcome, Some(since), reason, message);
        end
    }

    pub(super) async fn verify(&mut self) -> bool {
        let Some(cur) = self.current.as_ref() else {
            return false;
        };
        let branch = cur.task.policy.push_branch.clone();
        let Some(head) = self.git.resolve("HEAD").await else {
            return false;
        };
        match self
            .origin("verifying the push", || self.git.holds(&branch, &head))
            .await
        {
            Ok(held) => {
                if !held {
                    let id = self.task_id();
                    self.task_line(
                        "verify",
                        "missing",
                        None,
                        None,
                        format!("{id}: origin's {branch} does not hold the pushed {head}"),
                    );
                }
                held
            }
            Err(why) => {
                self.task_line("verify", "origin_away", None, Some(&why), why.clone());
                false
            }
        }
    }

    /// Closes what the harness's commits fixed, once merged (finding close, in process).
    pub(super) async fn close(&mut self) -> CloseEnd {
        let since = Instant::now();
        let Some(cur) = self.current.as_ref() else {
            return CloseEnd::NotClosed {
                outcome: "not judged".into(),
            };
        };
        let id = cur.task.task_id.clone();
        let commits = match self.git.rev_list(&format!("{}..HEAD", cur.base)).await {
            Ok(c) => c,
            Err(e) => {
                return CloseEnd::NotClosed {
                    outcome: format!("not judged ({})", report::line(&e)),
                };
            }
        };
        let file = self.cfg.task_dir.join("commits");
        let listed: String = commits.iter().map(|c| format!("{c}\n")).collect();
        if let Err(e) = std::fs::write(&file, listed) {
            return CloseEnd::NotClosed {
                outcome: format!("not judged (writing {}: {e})", file.display()),
            };
        }
        let opts = CloseOptions {
            commits: Commits::File(file),
            target: None,
            work_dir: self.cfg.work_dir.clone(),
            task: Some(self.cfg.task_dir.join("task.json")),
        };
        let report = self
            .ledger(|env| finding_close::run(opts.clone(), env))
            .await;
        let (end, exit) = match &report {
            Ok(r) => {
                let end = match r
                    .findings
                    .iter()
                    .find(|f| f.finding_id == id)
                    .map(|f| &f.outcome)
                {
                    Some(Outcome::Closed { .. }) => CloseEnd::Closed,
                    Some(Outcome::Pending { .. }) => CloseEnd::Pending,
                    Some(other) => CloseEnd::NotClosed {
                        outcome: metabob_wire::text::wire_name(other),
                    },
                    None => CloseEnd::NotClosed {
                        outcome: "not named by the commits".into(),
                    },
                };
                (end, 0)
            }
            Err(e) if e.is_outage() => (CloseEnd::LedgerAway, 2),
            Err(e) => (
                CloseEnd::NotClosed {
                    outcome: format!("not judged ({})", report::with_hint(e)),
                },
                if e.is_not_attached() { 2 } else { 1 },
            ),
        };
        let word = match &end {
            CloseEnd::Closed => "closed".to_string(),
            CloseEnd::Pending => "pending".to_string(),
            CloseEnd::NotClosed { outcome } => outcome.clone(),
            CloseEnd::LedgerAway => "none".to_string(),
        };
        self.task_line(
            "close",
            &word,
            Some(since),
            None,
            format!("{id}: finding close exit {exit}, outcome {word}"),
        );
        end
    }
}

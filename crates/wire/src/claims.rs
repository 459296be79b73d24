//! Claims on a finding and the one rule that says who holds it (SPEC.md §Claims).
//!
//! The ledger has no compare-and-set, so two cells can both write a claim. Every reader applies
//! [`holder`] to the same rows, ordered by the ledger's own creation sequence, and so reaches the
//! same answer.

use serde::Serialize;

use super::finding::Finding;
use super::verdict::{NewVerdict, Verdict, VerdictKind, VerdictOrigin};

/// A claim counts as live until this long past its end, so a reader whose clock runs fast never
/// frees a claim early (anchor: CLAIM_SKEW_MS).
pub const CLAIM_SKEW_MS: i64 = 120_000;
pub const DEFAULT_CLAIM_MINUTES: i64 = 60;
pub const MAX_CLAIM_MINUTES: i64 = 240;

/// Who holds a finding now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Held {
    pub holder: String,
    /// The ledger time the holder's current claim began.
    pub began_ms: i64,
    /// The ledger time it ends (the latest renewal's creation plus its minutes).
    pub until_ms: i64,
    /// The claim row that began it; the tie-breaker.
    pub concept_id: String,
}

/// Applies the holder rule to a finding's claim rows at reader time `now_ms`
/// (anchor: claim-holder):
/// - a claimer's current claim begins with the first claim it wrote while none of its earlier
///   claims was live; a later claim while one is live renews it; a withdrawal ends it;
/// - of the claimers whose claim is live now, the one whose claim began earliest holds it, and
///   on a tie the lower concept id.
///
/// One clock: a claim ends at its ledger creation time plus its minutes; only "now" is the
/// reader's, with the skew allowance.
pub fn holder<'a>(rows: impl IntoIterator<Item = &'a Verdict>, now_ms: i64) -> Option<Held> {
    let mut rows: Vec<&Verdict> = rows
        .into_iter()
        .filter(|v| v.kind.is_claim_row() && v.reviewed_by.is_some())
        .collect();
    rows.sort_by_key(|v| (v.seq, v.created_ms));
    let mut current: Vec<Held> = Vec::new();
    for row in rows {
        let who = row
            .reviewed_by
            .clone()
            .expect("filtered to rows with a claimer");
        let at = row.created_ms;
        let existing = current.iter().position(|h| h.holder == who);
        match row.kind {
            VerdictKind::Withdrawn | VerdictKind::Failed => {
                if let Some(i) = existing {
                    current.remove(i);
                }
            }
            VerdictKind::Claimed => {
                let until = at + row.claim_minutes.unwrap_or(DEFAULT_CLAIM_MINUTES) * 60_000;
                match existing {
                    Some(i) if at < current[i].until_ms => current[i].until_ms = until,
                    Some(i) => {
                        current[i] = Held {
                            holder: who,
                            began_ms: at,
                            until_ms: until,
                            concept_id: row.concept_id.clone(),
                        }
                    }
                    None => current.push(Held {
                        holder: who,
                        began_ms: at,
                        until_ms: until,
                        concept_id: row.concept_id.clone(),
                    }),
                }
            }
            _ => {}
        }
    }
    current
        .into_iter()
        .filter(|h| now_ms < h.until_ms + CLAIM_SKEW_MS)
        .min_by(|a, b| {
            a.began_ms
                .cmp(&b.began_ms)
                .then_with(|| a.concept_id.cmp(&b.concept_id))
        })
}

/// The earliest moment any of these claims stops counting as live: when a cell that found every
/// task held should look again (`retry_after`).
pub fn lapses_at(held: &Held) -> i64 {
    held.until_ms + CLAIM_SKEW_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: i64, who: &str, kind: VerdictKind, at_min: i64, minutes: i64) -> Verdict {
        Verdict {
            concept_id: format!("concept_{seq:03}"),
            seq,
            created_ms: at_min * 60_000,
            kind,
            finding_ids: vec!["agf_1".into()],
            reviewed_by: Some(who.into()),
            session: None,
            fix_commit: None,
            fix_branch: None,
            fix_target: None,
            claim_minutes: Some(minutes),
            claim_until: None,
            reason: None,
            tried_by: Vec::new(),
            blocker: None,
        }
    }

    const C: VerdictKind = VerdictKind::Claimed;
    const W: VerdictKind = VerdictKind::Withdrawn;

    #[test]
    fn the_earliest_live_claim_holds_and_renewal_keeps_the_start() {
        let rows = [
            row(1, "a", C, 0, 10),
            row(2, "b", C, 1, 60),
            row(3, "a", C, 9, 10),
        ];
        let h = holder(&rows, 15 * 60_000).unwrap();
        assert_eq!(
            (h.holder.as_str(), h.began_ms, h.until_ms),
            ("a", 0, 19 * 60_000)
        );
        // a's claim lapses (19 min + 2 min skew); b holds from then on.
        assert_eq!(holder(&rows, 20 * 60_000).unwrap().holder, "a");
        assert_eq!(holder(&rows, 21 * 60_000 + 1).unwrap().holder, "b");
    }

    #[test]
    fn a_withdrawal_ends_a_claim_and_a_late_claim_starts_anew() {
        let rows = [
            row(1, "a", C, 0, 10),
            row(2, "b", C, 1, 60),
            row(3, "a", W, 2, 0),
        ];
        assert_eq!(holder(&rows, 3 * 60_000).unwrap().holder, "b");
        // a claims again after its first lapsed: a new claim, begun after b's.
        let rows = [
            row(1, "a", C, 0, 1),
            row(2, "b", C, 1, 60),
            row(3, "a", C, 5, 60),
        ];
        assert_eq!(holder(&rows, 6 * 60_000).unwrap().holder, "b");
    }

    #[test]
    fn cells_started_together_mostly_try_different_tasks_first() {
        let tasks: Vec<String> = (0..50).map(|i| format!("agf_{i:012x}")).collect();
        let first: std::collections::BTreeSet<&String> = (0..32)
            .map(|c| {
                let cell = format!("metabob-mcp-{c:012x}");
                tasks.iter().max_by_key(|t| rendezvous(&cell, t)).unwrap()
            })
            .collect();
        // 32 independent uniform picks from 50 land on about 24 distinct tasks; one shared order
        // would put all 32 on one.
        assert!(first.len() >= 18, "{} distinct first picks", first.len());
        // The order is a cell's own, and stable.
        assert_eq!(rendezvous("a", "t"), rendezvous("a", "t"));
        assert_ne!(rendezvous("a", "t"), rendezvous("b", "t"));
    }

    #[test]
    fn a_tie_goes_to_the_lower_concept_id_and_nothing_live_is_free() {
        let rows = [row(2, "b", C, 0, 10), row(1, "a", C, 0, 10)];
        assert_eq!(holder(&rows, 60_000).unwrap().holder, "a");
        assert_eq!(holder(&rows, 13 * 60_000), None);
    }
}

/// What a claim call did; the reply names it (and the call log's `result`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ClaimOutcome {
    /// Written, read back, and held by us.
    Claimed {
        held: Held,
    },
    Renewed {
        held: Held,
    },
    Released,
    /// Someone else holds it; nothing was written.
    Held {
        by: Held,
    },
    /// Written, but another claimer's claim began first; ours was withdrawn.
    Lost {
        winner: Held,
    },
    /// Written, but the read-back never showed it: not reported as held.
    Unsettled,
    /// The finding is closed; nothing was written.
    Closed,
    /// Refused before anything was written (the line says why).
    Refused {
        reason: String,
    },
}

/// A claim outcome without its details: what logs, replies and candidate lists name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimWord {
    Claimed,
    Renewed,
    Released,
    Held,
    Lost,
    Unsettled,
    Closed,
    Refused,
}

impl ClaimWord {
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimWord::Claimed => "claimed",
            ClaimWord::Renewed => "renewed",
            ClaimWord::Released => "released",
            ClaimWord::Held => "held",
            ClaimWord::Lost => "lost",
            ClaimWord::Unsettled => "unsettled",
            ClaimWord::Closed => "closed",
            ClaimWord::Refused => "refused",
        }
    }
}

impl std::fmt::Display for ClaimWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl ClaimOutcome {
    /// The word the call log and replies use.
    pub fn word(&self) -> ClaimWord {
        match self {
            ClaimOutcome::Claimed { .. } => ClaimWord::Claimed,
            ClaimOutcome::Renewed { .. } => ClaimWord::Renewed,
            ClaimOutcome::Released => ClaimWord::Released,
            ClaimOutcome::Held { .. } => ClaimWord::Held,
            ClaimOutcome::Lost { .. } => ClaimWord::Lost,
            ClaimOutcome::Unsettled => ClaimWord::Unsettled,
            ClaimOutcome::Closed => ClaimWord::Closed,
            ClaimOutcome::Refused { .. } => ClaimWord::Refused,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimAction {
    Claim,
    Renew,
    Release,
    /// A release that says the task failed in this cell; it counts toward parking the task.
    Fail,
}

impl ClaimAction {
    /// Whether the action gives the claim back (a release or a failure).
    pub fn gives_back(self) -> bool {
        matches!(self, ClaimAction::Release | ClaimAction::Fail)
    }
}

/// The claim row `me` writes on `finding` at `now` for `minutes` (anchor: claim_row): one
/// composition for both claim paths, so every reader sees the same rows whichever wrote them.
pub fn claim_row<'a>(
    finding: &'a Finding,
    me: &str,
    session: &str,
    minutes: i64,
    now: i64,
) -> NewVerdict<'a> {
    NewVerdict {
        finding,
        kind: VerdictKind::Claimed,
        reviewed_by: Some(me.to_string()),
        session: session.to_string(),
        origin: VerdictOrigin::Remote,
        lines: vec![
            ("claim_minutes", minutes.to_string()),
            (
                "claim_until",
                crate::text::rfc3339_ms(now + minutes * 60_000),
            ),
        ],
    }
}

/// The atomic take (SPEC.md §The atomic take): a ledger that owns its writer can decide a claim
/// in the same write that makes it, so it advertises this shape (anchor: TAKE_SHAPE).
pub const TAKE_SHAPE: &str = "taskTake_write";

/// The most candidates one take carries: the whole recall window a pull can see.
pub const MAX_TAKE_CANDIDATES: usize = (crate::window::PAGE * crate::window::MAX_PAGES) as usize;

/// What a take did with one candidate it passed over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Passed {
    /// Another claimer holds it.
    Held(Held),
    /// Closed, no longer a task, or gone: it will not come free.
    Closed,
    /// Another writer was deciding its holder at that moment (a PostgreSQL store): not free
    /// for this take, though it may be for the next.
    Busy,
    /// The claimer failed it before: it is left to other cells.
    FailedHere,
}

/// The task a take claimed for us: as the ledger holds it, and the claim that holds it.
#[derive(Clone, Debug)]
pub struct Taken {
    pub task: Finding,
    pub held: Held,
    /// The claimer held it already, and the take renewed its claim.
    pub renewed: bool,
}

/// A take's answer: the task claimed for us, and the candidates passed over before it, in
/// order, with why; when nothing was taken, the repository's tasks others hold.
#[derive(Clone, Debug, Default)]
pub struct Take {
    pub taken: Option<Taken>,
    pub passed: Vec<(String, Passed)>,
    pub waiting: Vec<Waiting>,
}

/// One of the repository's open tasks another claimer holds, named by a take that claimed
/// nothing: those whose claims end first.
#[derive(Clone, Debug)]
pub struct Waiting {
    pub concept_id: String,
    pub task_id: String,
    pub summary: String,
    pub held: Held,
}

/// What a take asks for: candidates in order; with a repository, that repository's other open
/// tasks after them (the ones past the caller's recall window), except `skip`.
pub struct TakeAsk<'a> {
    pub candidates: &'a [&'a Finding],
    pub repository: Option<&'a str>,
    pub skip: &'a [String],
}

/// This claimer's weight for a task (anchor: rendezvous): a hash of both names, so each cell
/// orders the same tasks differently but always the same way, and cells started together
/// spread over the open tasks instead of all trying the same one first. FNV-1a over the two
/// names, then a 64-bit finaliser so that names differing in one character land far apart.
pub fn rendezvous(claimer: &str, task_id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in claimer.bytes().chain([0xff]).chain(task_id.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

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
    fn gives_back(self) -> bool {
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
                crate::util::rfc3339_ms(now + minutes * 60_000),
            ),
        ],
    }
}

/// Pauses before each read-back; a read can miss a row written moments before.
const READ_BACK_PAUSES_MS: [u64; 4] = [0, 150, 500, 1500];

/// Claims, renews or releases `finding` for `me` (anchor: claim_finding). One rule decides the
/// holder ([`holder`]); the write is read back before anything is reported as held, and a lost
/// race is withdrawn at once.
pub async fn claim_finding(
    att: &crate::attachment::Attachment,
    finding: &Finding,
    me: &str,
    session: &str,
    minutes: i64,
    action: ClaimAction,
    reason: Option<&str>,
) -> Result<ClaimOutcome, crate::attachment::ResolveError> {
    use super::recall::verdicts_of;
    use super::verdict::{Standing, standing};
    use crate::attachment::ResolveError;

    let minutes = minutes.clamp(1, MAX_CLAIM_MINUTES);
    if action == ClaimAction::Renew
        && finding.is_task()
        && ledger_takes(att).await
        && let Some(outcome) = renew_by_take(att, finding, me, session, minutes).await?
    {
        return Ok(outcome);
    }
    let rows = verdicts_of(att, finding).await?;
    match standing(&rows) {
        Standing::Closed { .. } => return Ok(ClaimOutcome::Closed),
        // A parked task comes free only when reopened; its claim may still be given back.
        Standing::Parked { .. } if !action.gives_back() => return Ok(ClaimOutcome::Closed),
        _ => {}
    }
    let now = crate::util::now_ms();
    let current = holder(&rows, now);
    let mine = current.as_ref().is_some_and(|h| h.holder == me);
    match (action, &current) {
        (ClaimAction::Claim, Some(h)) if !mine => return Ok(ClaimOutcome::Held { by: h.clone() }),
        (ClaimAction::Renew | ClaimAction::Release | ClaimAction::Fail, _) if !mine => {
            return Ok(ClaimOutcome::Refused {
                reason: match current {
                    Some(h) => format!("{} holds this claim, not {me}", h.holder),
                    None => format!("{me} holds no live claim on this finding"),
                },
            });
        }
        _ => {}
    }

    let verdict = match action {
        ClaimAction::Release | ClaimAction::Fail => NewVerdict {
            finding,
            kind: if action == ClaimAction::Fail {
                VerdictKind::Failed
            } else {
                VerdictKind::Withdrawn
            },
            reviewed_by: Some(me.to_string()),
            session: session.to_string(),
            origin: VerdictOrigin::Remote,
            lines: vec![("reason", reason.unwrap_or("released").to_string())],
        },
        _ => claim_row(finding, me, session, minutes, now),
    };
    let written = match write_once_more_on_give_up(att, verdict.to_pointer()).await {
        Ok(id) => id,
        Err(e @ ResolveError::KeyReadOnly { .. }) => {
            return Ok(ClaimOutcome::Refused {
                reason: e.to_string(),
            });
        }
        Err(e) => return Err(e),
    };
    if action.gives_back() {
        link(att, &written, &finding.concept_id).await;
        return Ok(ClaimOutcome::Released);
    }

    for pause in READ_BACK_PAUSES_MS {
        tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
        let rows = verdicts_of(att, finding).await?;
        if !rows.iter().any(|v| v.concept_id == written) {
            continue;
        }
        return Ok(match holder(&rows, crate::util::now_ms()) {
            Some(h) if h.holder == me => {
                link(att, &written, &finding.concept_id).await;
                if action == ClaimAction::Renew || mine {
                    ClaimOutcome::Renewed { held: h }
                } else {
                    ClaimOutcome::Claimed { held: h }
                }
            }
            Some(winner) => {
                let withdraw = NewVerdict {
                    finding,
                    kind: VerdictKind::Withdrawn,
                    reviewed_by: Some(me.to_string()),
                    session: session.to_string(),
                    origin: VerdictOrigin::Remote,
                    lines: vec![("reason", format!("lost the claim to {}", winner.holder))],
                };
                if let Err(e) = att.resolve(withdraw.to_pointer()).await {
                    tracing::warn!("withdrawing a lost claim failed ({e}); it lapses by itself");
                }
                ClaimOutcome::Lost { winner }
            }
            None => ClaimOutcome::Unsettled,
        });
    }
    Ok(ClaimOutcome::Unsettled)
}

/// Renews a task's claim with one take of that task alone (anchor: renew_by_take): the ledger
/// weighs the task's rows and writes the renewal in the same write, where the read-back path
/// reads the verdict window twice. Held by `me`, or free because `me`'s claim lapsed and
/// nobody took the task since, the take's claim stands and the task is `me`'s: renewed. `None`
/// when another writer was deciding the task's holder at that moment: the caller renews by
/// read-back instead.
async fn renew_by_take(
    att: &crate::attachment::Attachment,
    finding: &Finding,
    me: &str,
    session: &str,
    minutes: i64,
) -> Result<Option<ClaimOutcome>, crate::attachment::ResolveError> {
    use crate::attachment::ResolveError;
    let ask = TakeAsk {
        candidates: &[finding],
        repository: None,
        skip: &[],
    };
    let take = match take(att, &ask, me, session, minutes).await {
        Ok(t) => t,
        Err(e @ ResolveError::KeyReadOnly { .. }) => {
            return Ok(Some(ClaimOutcome::Refused {
                reason: e.to_string(),
            }));
        }
        Err(e) => return Err(e),
    };
    if let Some(taken) = take.taken {
        return Ok(Some(ClaimOutcome::Renewed { held: taken.held }));
    }
    Ok(match take.passed.into_iter().next().map(|(_, why)| why) {
        Some(Passed::Held(h)) => Some(ClaimOutcome::Refused {
            reason: format!("{} holds this claim, not {me}", h.holder),
        }),
        Some(Passed::Busy) => None,
        Some(Passed::FailedHere) => Some(ClaimOutcome::Refused {
            reason: format!("{me} gave this task up as failed"),
        }),
        Some(Passed::Closed) | None => Some(ClaimOutcome::Closed),
    })
}

/// Writes a concept and returns its id. A write concept-db gave up on (seen under concurrent
/// writes) is sent once more after a short random pause: repeating a claim only renews it.
async fn write_once_more_on_give_up(
    att: &crate::attachment::Attachment,
    pointer: serde_json::Value,
) -> Result<String, crate::attachment::ResolveError> {
    use crate::attachment::ResolveError;
    let mut tries = 0;
    loop {
        tries += 1;
        match super::write_concept(att, pointer.clone()).await {
            Err(ResolveError::NoProducer(_) | ResolveError::ProducerTimeout { .. })
                if tries == 1 =>
            {
                let jitter = u64::from(crate::util::random_u16() % 400) + 100;
                tokio::time::sleep(std::time::Duration::from_millis(jitter)).await;
            }
            other => return other,
        }
    }
}

/// Best-effort `derived_from` link from a settled claim or release to its finding.
async fn link(att: &crate::attachment::Attachment, from: &str, finding_concept: &str) {
    let pointer = super::verdict::link_pointer(from, finding_concept);
    if let Err(e) = att.resolve(pointer).await {
        tracing::debug!("linking {from} to {finding_concept} failed: {e}");
    }
}

/// The atomic take (SPEC.md §The atomic take): a ledger that owns its writer can decide a claim
/// in the same write that makes it, so it advertises this shape (anchor: TAKE_SHAPE).
pub const TAKE_SHAPE: &str = "taskTake_write";

/// The most candidates one take carries: the whole recall window a pull can see.
pub const MAX_TAKE_CANDIDATES: usize = (super::recall::PAGE * super::recall::MAX_PAGES) as usize;

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
/// order, with why.
#[derive(Clone, Debug, Default)]
pub struct Take {
    pub taken: Option<Taken>,
    pub passed: Vec<(String, Passed)>,
}

/// What a take asks for: candidates in order; with a repository, that repository's other open
/// tasks after them (the ones past the caller's recall window), except `skip`.
pub struct TakeAsk<'a> {
    pub candidates: &'a [&'a Finding],
    pub repository: Option<&'a str>,
    pub skip: &'a [String],
}

/// Whether the attached ledger takes tasks atomically: some vessel advertises [`TAKE_SHAPE`]
/// (anchor: ledger_takes). A substrate that does not know the question answers no.
pub async fn ledger_takes(att: &crate::attachment::Attachment) -> bool {
    let pointer = serde_json::json!({ "type": "vesselCapability", "shape": TAKE_SHAPE });
    match att
        .resolve(pointer)
        .await
        .and_then(|a| a.ok("vesselCapability"))
    {
        Ok(body) => body
            .get("vessels")
            .and_then(serde_json::Value::as_array)
            .is_some_and(|v| !v.is_empty()),
        Err(e) => {
            tracing::debug!("asking who takes tasks failed ({e}); claiming by read-back");
            false
        }
    }
}

/// Asks the ledger to claim for `me`, in one write, the first task of `ask` nobody else holds
/// (anchor: take). The answer is read as hostile: a passed candidate the request did not name,
/// a taken task that is no task, or one not held by `me`, is refused.
pub async fn take(
    att: &crate::attachment::Attachment,
    ask: &TakeAsk<'_>,
    me: &str,
    session: &str,
    minutes: i64,
) -> Result<Take, crate::attachment::ResolveError> {
    use crate::attachment::ResolveError;
    let ids: Vec<&str> = ask
        .candidates
        .iter()
        .take(MAX_TAKE_CANDIDATES)
        .map(|f| f.concept_id.as_str())
        .collect();
    let pointer = serde_json::json!({
        "type": TAKE_SHAPE,
        "take": {
            "candidates": ids,
            "repository": ask.repository,
            "skip": ask.skip.iter().take(MAX_TAKE_CANDIDATES).collect::<Vec<_>>(),
            "vessel_id": me,
            "session": session,
            "claim_minutes": minutes.clamp(1, MAX_CLAIM_MINUTES),
        }
    });
    let body = att.resolve(pointer).await?.ok(TAKE_SHAPE)?;
    read_take(&body, &ids, me).map_err(|detail| ResolveError::Answer {
        shape: TAKE_SHAPE.into(),
        status: 200,
        detail,
    })
}

/// The longest holder name a take's answer may carry: as long as a row's header value may be.
const MAX_HOLDER_CHARS: usize = 512;

fn read_take(body: &serde_json::Value, asked: &[&str], me: &str) -> Result<Take, String> {
    use serde_json::Value;
    let held = |v: &Value| -> Result<Held, String> {
        let h = v.get("held").ok_or("a claim without its holder")?;
        let time = |k: &str| {
            h.get(k)
                .and_then(Value::as_i64)
                .filter(|t| (0..=super::row::MAX_TIME_MS).contains(t))
                .ok_or(format!("held.{k}: not a time"))
        };
        let text = |k: &str| {
            h.get(k)
                .and_then(Value::as_str)
                .filter(|s| {
                    !s.is_empty() && s.chars().count() <= MAX_HOLDER_CHARS && !s.contains('\n')
                })
                .map(str::to_owned)
                .ok_or(format!("held.{k}: not a name"))
        };
        Ok(Held {
            holder: text("holder")?,
            began_ms: time("began_ms")?,
            until_ms: time("until_ms")?,
            concept_id: text("concept_id")?,
        })
    };
    let mut out = Take::default();
    let passed = body
        .get("passed")
        .and_then(Value::as_array)
        .ok_or("no passed list")?;
    for p in passed.iter().take(asked.len()) {
        let id = p.get("concept_id").and_then(Value::as_str).unwrap_or("");
        let Some(id) = asked.iter().find(|a| **a == id) else {
            return Err("the answer passes over a task that was not asked for".into());
        };
        let why = match p.get("outcome").and_then(Value::as_str) {
            Some("held") => Passed::Held(held(p)?),
            Some("busy") => Passed::Busy,
            Some("failed_here") => Passed::FailedHere,
            _ => Passed::Closed,
        };
        out.passed.push((id.to_string(), why));
    }
    match body.get("taken") {
        None | Some(Value::Null) => {}
        Some(t) => {
            let task = match t.get("task").map(Finding::read) {
                Some(Ok(Some(f))) if f.is_task() => f,
                _ => return Err("the taken task does not read as a task".into()),
            };
            if t.get("concept_id").and_then(Value::as_str) != Some(task.concept_id.as_str()) {
                return Err("the taken task is not the one named".into());
            }
            let h = held(t)?;
            if h.holder != me {
                return Err(format!("the taken task is held by {}, not by us", h.holder));
            }
            let renewed = t.get("outcome").and_then(Value::as_str) == Some("renewed");
            out.taken = Some(Taken {
                task,
                held: h,
                renewed,
            });
        }
    }
    Ok(out)
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

#[cfg(test)]
mod take_tests {
    use serde_json::{Value, json};

    use super::*;

    fn task_concept(id: &str) -> Value {
        json!({
            "id": id, "seq": 7, "shape": "code_finding", "source_type": "metabob_annotation",
            "summary": "[HIGH][task] a.py: step", "created_at": "2026-12-01T00:00:00.000Z",
            "content": "repo: example.test/o/app\nfiles: a.py\nseverity: HIGH\ncategory: task\nstatus: open\nfinding_ids: agf_0123456789abcdef\n\n",
        })
    }

    fn held(by: &str) -> Value {
        json!({"holder": by, "began_ms": 1_000, "until_ms": 61_000, "concept_id": "concept_c1"})
    }

    #[test]
    fn a_take_answer_is_read_as_hostile() {
        let asked = ["concept_a", "concept_b"];
        let good = json!({
            "taken": {"concept_id": "concept_b", "outcome": "claimed", "held": held("me"),
                      "task": task_concept("concept_b")},
            "passed": [{"concept_id": "concept_a", "outcome": "held", "held": held("other")}],
        });
        let take = read_take(&good, &asked, "me").unwrap();
        let taken = take.taken.unwrap();
        assert_eq!(taken.task.concept_id, "concept_b");
        assert!(!taken.renewed);
        assert_eq!(take.passed.len(), 1);
        assert!(matches!(&take.passed[0].1, Passed::Held(h) if h.holder == "other"));

        // A task past the candidates (found by repository) is accepted when it reads as a task.
        let mut beyond = good.clone();
        beyond["taken"]["concept_id"] = json!("concept_z");
        beyond["taken"]["task"] = task_concept("concept_z");
        assert!(read_take(&beyond, &asked, "me").is_ok());

        let refused = |change: &dyn Fn(&mut Value), says: &str| {
            let mut v = good.clone();
            change(&mut v);
            let err = read_take(&v, &asked, "me").unwrap_err();
            assert!(err.contains(says), "{err}");
        };
        refused(
            &|v| v["passed"][0]["concept_id"] = json!("concept_x"),
            "not asked for",
        );
        refused(&|v| v["taken"]["held"] = held("someone-else"), "not by us");
        refused(
            &|v| v["taken"]["task"]["content"] = json!("category: style\n\n"),
            "does not read as a task",
        );
        refused(
            &|v| v["taken"]["concept_id"] = json!("concept_a"),
            "not the one named",
        );
        refused(
            &|v| v["taken"]["held"]["until_ms"] = json!(-5),
            "held.until_ms",
        );
        refused(
            &|v| v["taken"]["held"]["holder"] = json!("a\nb"),
            "held.holder",
        );
        refused(&|v| v["passed"] = json!(null), "no passed list");
    }
}

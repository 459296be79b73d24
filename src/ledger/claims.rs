//! Claims on a finding and the one rule that says who holds it (SPEC.md §Claims).
//!
//! The ledger has no compare-and-set, so two cells can both write a claim. Every reader applies
//! [`holder`] to the same rows, ordered by the ledger's own creation sequence, and so reaches the
//! same answer.

use serde::Serialize;

use super::verdict::{Verdict, VerdictKind};

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
            VerdictKind::Withdrawn => {
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
    fn a_tie_goes_to_the_lower_concept_id_and_nothing_live_is_free() {
        let rows = [row(2, "b", C, 0, 10), row(1, "a", C, 0, 10)];
        assert_eq!(holder(&rows, 60_000).unwrap().holder, "a");
        assert_eq!(holder(&rows, 13 * 60_000), None);
    }
}

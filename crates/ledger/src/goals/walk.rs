//! What a dispatched task's own rows say happened, derived on read and never stored: the
//! claim spans (one execution each), how each ended, and where the task stands.
//!
//! Pure: the rows come in, already read with the client's owners (`Verdict::read`), and no
//! decision about holding is made here. Who holds the task at any moment is asked of
//! `claims::holder`, the one rule every reader applies; a span is the run of rows over which
//! the holder's answer names the same beginning claim.

use metabob_wire::claims;
use metabob_wire::text::rfc3339_ms;
use metabob_wire::verdict::{Standing, Verdict, VerdictKind, standing};

/// Longest reason or detail a log line or trace row carries, in characters.
const DETAIL_CHARS: usize = 300;

/// One of the task's linked rows as the client reads it.
#[derive(Clone, Debug)]
pub struct TaskRow {
    pub verdict: Verdict,
}

/// What one row did to the task, as a trace names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Claimed,
    Renewed,
    Released,
    Withdrawn,
    Fixed,
    Pending,
    Discarded,
    Cancelled,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Claimed => "claimed",
            EventKind::Renewed => "renewed",
            EventKind::Released => "released",
            EventKind::Withdrawn => "withdrawn",
            EventKind::Fixed => "fixed",
            EventKind::Pending => "pending",
            EventKind::Discarded => "discarded",
            EventKind::Cancelled => "cancelled",
        }
    }
}

/// One row inside a span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub holder: String,
    pub at_ms: i64,
    /// The row's own words as the trace shows them (its JSON `detail`): data read from the
    /// ledger, not the text of an error, so there is no source to keep.
    pub detail: String,
}

/// How a span ended, or that it has not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The claim is live and nothing ended it.
    Running,
    /// A fix awaits merge: not an outcome yet.
    Pending,
    /// The claimer gave the task back to the board.
    Released {
        at_ms: i64,
        reason: String,
    },
    /// The claimer gave it back and no cell can ever set it up (its ref is refused).
    Withdrawn {
        at_ms: i64,
        reason: String,
    },
    Fixed {
        at_ms: i64,
    },
    Discarded {
        at_ms: i64,
    },
    /// An operator withdrew the task for good while this claim held it.
    Cancelled {
        at_ms: i64,
        reason: String,
    },
    /// The claim ran out with no release and no fix.
    Lapsed {
        at_ms: i64,
    },
}

impl Ending {
    /// The execution's status word.
    pub fn status(&self) -> &'static str {
        match self {
            Ending::Running | Ending::Pending => "running",
            Ending::Fixed { .. } => "completed",
            _ => "failed",
        }
    }

    /// `Some(true)` for a fix, `Some(false)` for any other end, `None` while undecided.
    pub fn reached(&self) -> Option<bool> {
        match self {
            Ending::Running | Ending::Pending => None,
            Ending::Fixed { .. } => Some(true),
            _ => Some(false),
        }
    }

    pub fn ended_ms(&self) -> Option<i64> {
        match self {
            Ending::Running | Ending::Pending => None,
            Ending::Released { at_ms, .. }
            | Ending::Withdrawn { at_ms, .. }
            | Ending::Fixed { at_ms }
            | Ending::Discarded { at_ms }
            | Ending::Cancelled { at_ms, .. }
            | Ending::Lapsed { at_ms } => Some(*at_ms),
        }
    }

    pub fn failure_mode(&self) -> Option<String> {
        match self {
            Ending::Released { reason, .. } | Ending::Withdrawn { reason, .. } => {
                Some(reason.clone())
            }
            Ending::Cancelled { reason, .. } => Some(format!("cancelled: {reason}")),
            Ending::Discarded { .. } => Some("discarded".into()),
            Ending::Lapsed { .. } => Some("claim lapsed with no release and no fix".into()),
            _ => None,
        }
    }

    fn is_open(&self) -> bool {
        matches!(self, Ending::Running | Ending::Pending)
    }
}

/// One claim span: a holder's claim from the row that began it, through its renewals, to how
/// it ended. The execution the goal board lists.
#[derive(Clone, Debug)]
pub struct Span {
    /// The concept id of the claim row that began it; the execution id derives from it.
    pub claim: String,
    pub holder: String,
    pub began_ms: i64,
    pub until_ms: i64,
    pub session: Option<String>,
    pub events: Vec<Event>,
    pub ending: Ending,
}

/// Where the task stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Running,
    Completed,
    Failed { error: String },
}

/// The derivation's result: log lines (time, text) in creation order, the spans in the order
/// they began, and the task's outcome.
#[derive(Clone, Debug)]
pub struct Walk {
    pub log: Vec<(i64, String)>,
    pub spans: Vec<Span>,
    pub outcome: Outcome,
}

pub use metabob_wire::text::one_line;

/// `exec_` and the hex of the claim concept that began the span: stable for as long as the
/// row exists, and readable back to that row.
pub fn execution_id(claim_concept: &str) -> String {
    format!(
        "exec_{}",
        claim_concept
            .strip_prefix("concept_")
            .unwrap_or(claim_concept)
    )
}

/// The claim concept an execution id names; `None` for any other form.
pub fn claim_of_execution(execution_id: &str) -> Option<String> {
    let hex = execution_id.trim().strip_prefix("exec_")?;
    (!hex.is_empty() && hex.len() <= 64 && hex.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| format!("concept_{hex}"))
}

/// Derives the walk from the task's rows at reader time `now_ms`. `for_good` says the task can
/// never be set up (its ref is refused), so a withdrawal ends it rather than returning it.
pub fn derive(mut rows: Vec<TaskRow>, for_good: bool, now_ms: i64) -> Walk {
    // The holder rule's own order, so every prefix below is what a reader saw at that row.
    rows.sort_by_key(|r| (r.verdict.seq, r.verdict.created_ms));
    let verdicts: Vec<Verdict> = rows.iter().map(|r| r.verdict.clone()).collect();
    let mut w = Walk {
        log: Vec::new(),
        spans: Vec::new(),
        outcome: Outcome::Running,
    };
    for (i, row) in rows.iter().enumerate() {
        let v = &row.verdict;
        match v.kind {
            VerdictKind::Claimed => {
                // A claim with no claimer counts for nobody (the holder rule skips it too).
                if let Some(who) = &v.reviewed_by {
                    w.claimed(v, who, claims::holder(&verdicts[..=i], v.created_ms));
                }
            }
            VerdictKind::Withdrawn | VerdictKind::Failed => {
                if let Some(who) = &v.reviewed_by {
                    let reason = v.reason.as_deref().unwrap_or("no reason recorded");
                    let reason = match v.kind {
                        VerdictKind::Failed => format!("task failed: {reason}"),
                        _ => reason.to_string(),
                    };
                    w.withdrawn(v, who, &one_line(&reason, DETAIL_CHARS), for_good);
                }
            }
            VerdictKind::Parked => {
                let text = format!("parked by {}: {}", who_of(v), parked_reason(v));
                w.note(v.created_ms, text);
            }
            VerdictKind::Reopened => w.note(v.created_ms, format!("reopened by {}", who_of(v))),
            VerdictKind::Blocked | VerdictKind::Unblocked => {
                let blocker = v.blocker.as_deref().unwrap_or("(no task)");
                let text = match v.kind {
                    VerdictKind::Blocked => format!("made to wait for {blocker} by {}", who_of(v)),
                    _ => format!("no longer waits for {blocker} (by {})", who_of(v)),
                };
                w.note(v.created_ms, text);
            }
            VerdictKind::Pending(_)
            | VerdictKind::Fixed
            | VerdictKind::Discarded
            | VerdictKind::Cancelled => {
                w.verdict(v, claims::holder(&verdicts[..i], v.created_ms));
            }
        }
    }
    let current = claims::holder(&verdicts, now_ms);
    for span in &mut w.spans {
        let live = current.as_ref().is_some_and(|h| h.concept_id == span.claim);
        if span.ending == Ending::Running && !live {
            span.ending = Ending::Lapsed {
                at_ms: span.until_ms,
            };
        }
    }
    w.outcome = outcome(&verdicts, &w.spans, for_good);
    w
}

fn who_of(v: &Verdict) -> String {
    v.reviewed_by
        .as_deref()
        .map_or_else(|| "(no reviewer)".into(), |s| one_line(s, DETAIL_CHARS))
}

impl Walk {
    fn note(&mut self, at_ms: i64, text: String) {
        self.log.push((at_ms, text));
    }

    /// A claim row by `who`; `held` is who holds the task once it is counted.
    fn claimed(&mut self, v: &Verdict, who: &str, held: Option<claims::Held>) {
        let shown = one_line(who, DETAIL_CHARS);
        let Some(h) = held.filter(|h| h.holder == who) else {
            // A lost race: the row exists, but the task was never this claimer's.
            self.note(
                v.created_ms,
                format!("claim by {shown} not taken (another claim holds the task)"),
            );
            return;
        };
        let until = rfc3339_ms(h.until_ms);
        if let Some(span) = self.spans.iter_mut().find(|s| s.claim == h.concept_id) {
            span.until_ms = h.until_ms;
            span.events.push(Event {
                kind: EventKind::Renewed,
                holder: shown.clone(),
                at_ms: v.created_ms,
                detail: format!("until {until}"),
            });
            self.note(v.created_ms, format!("renewed by {shown} until {until}"));
            return;
        }
        // A new holder: every span still running has lapsed, or it would hold.
        for span in &mut self.spans {
            if span.ending == Ending::Running {
                span.ending = Ending::Lapsed {
                    at_ms: span.until_ms,
                };
            }
        }
        let exec = execution_id(&h.concept_id);
        let minutes = v.claim_minutes.unwrap_or(claims::DEFAULT_CLAIM_MINUTES);
        self.spans.push(Span {
            claim: h.concept_id.clone(),
            holder: shown.clone(),
            began_ms: h.began_ms,
            until_ms: h.until_ms,
            session: v.session.as_deref().map(|s| one_line(s, DETAIL_CHARS)),
            events: vec![Event {
                kind: EventKind::Claimed,
                holder: shown.clone(),
                at_ms: v.created_ms,
                detail: format!("{minutes} min, until {until}"),
            }],
            ending: Ending::Running,
        });
        self.note(
            v.created_ms,
            format!("claimed by {shown} for {minutes} min (execution {exec})"),
        );
    }

    /// A withdrawal by `who`: it ends that claimer's running span; after a pending fix it is
    /// only noted, since the fix, not the release, is how that span ends.
    fn withdrawn(&mut self, v: &Verdict, who: &str, reason: &str, for_good: bool) {
        let shown = one_line(who, DETAIL_CHARS);
        let kind = if for_good {
            EventKind::Withdrawn
        } else {
            EventKind::Released
        };
        let span = self
            .spans
            .iter_mut()
            .rev()
            .find(|s| s.holder == shown && s.ending.is_open());
        let Some(span) = span else {
            self.note(
                v.created_ms,
                format!("claim withdrawn by {shown}: {reason}"),
            );
            return;
        };
        span.events.push(Event {
            kind,
            holder: shown.clone(),
            at_ms: v.created_ms,
            detail: reason.to_string(),
        });
        if span.ending == Ending::Running {
            let (at_ms, reason) = (v.created_ms, reason.to_string());
            span.ending = if for_good {
                Ending::Withdrawn { at_ms, reason }
            } else {
                Ending::Released { at_ms, reason }
            };
        }
        self.note(
            v.created_ms,
            format!("{} by {shown}: {reason}", kind.as_str()),
        );
    }

    /// A verdict: it belongs to the span holding the task when it was written; a fix or a
    /// retraction with no holder then closes the span whose fix was pending.
    fn verdict(&mut self, v: &Verdict, held: Option<claims::Held>) {
        let who = who_of(v);
        let (kind, detail) = match v.kind {
            VerdictKind::Fixed => (
                EventKind::Fixed,
                match &v.fix_commit {
                    Some(sha) => format!("commit {sha}"),
                    None => "no commit named".into(),
                },
            ),
            VerdictKind::Discarded => (EventKind::Discarded, "retracted".into()),
            VerdictKind::Cancelled => (EventKind::Cancelled, reason_of(v)),
            _ => (EventKind::Pending, pending_detail(v)),
        };
        let held_span = held.and_then(|h| {
            self.spans
                .iter()
                .position(|s| s.claim == h.concept_id && s.ending.is_open())
        });
        let target = held_span.or_else(|| {
            (kind != EventKind::Pending)
                .then(|| self.spans.iter().rposition(|s| s.ending == Ending::Pending))
                .flatten()
        });
        self.note(
            v.created_ms,
            format!("{} by {who}: {detail}", kind.as_str()),
        );
        let Some(span) = target.and_then(|i| self.spans.get_mut(i)) else {
            return;
        };
        span.events.push(Event {
            kind,
            holder: who,
            at_ms: v.created_ms,
            detail,
        });
        let at_ms = v.created_ms;
        span.ending = match kind {
            EventKind::Fixed => Ending::Fixed { at_ms },
            EventKind::Discarded => Ending::Discarded { at_ms },
            EventKind::Cancelled => Ending::Cancelled {
                at_ms,
                reason: reason_of(v),
            },
            _ => Ending::Pending,
        };
    }
}

/// A park's reason and the cells whose failures parked it, on one line.
pub fn parked_reason(v: &Verdict) -> String {
    let mut s = one_line(
        v.reason.as_deref().unwrap_or("no reason recorded"),
        DETAIL_CHARS,
    );
    if !v.tried_by.is_empty() {
        let cells: Vec<String> = v
            .tried_by
            .iter()
            .map(|c| one_line(c, DETAIL_CHARS))
            .collect();
        s.push_str(&format!(" (tried by {})", cells.join(", ")));
    }
    s
}

fn reason_of(v: &Verdict) -> String {
    one_line(
        v.reason.as_deref().unwrap_or("no reason recorded"),
        DETAIL_CHARS,
    )
}

fn pending_detail(v: &Verdict) -> String {
    let mut s = one_line(&v.kind.line(), DETAIL_CHARS);
    if let Some(branch) = &v.fix_branch {
        s.push_str(&format!(" on {}", one_line(branch, DETAIL_CHARS)));
    }
    if let Some(target) = &v.fix_target {
        s.push_str(&format!(" for {}", one_line(target, DETAIL_CHARS)));
    }
    s
}

/// The task's outcome: the verdicts' standing (the one precedence rule) decides a closed or
/// pending task; an open one has failed only when a cell withdrew it for good.
fn outcome(verdicts: &[Verdict], spans: &[Span], for_good: bool) -> Outcome {
    match standing(verdicts) {
        Standing::Closed { verdict } if verdict.kind == VerdictKind::Discarded => Outcome::Failed {
            error: format!(
                "discarded by {} at {}",
                who_of(&verdict),
                rfc3339_ms(verdict.created_ms)
            ),
        },
        Standing::Closed { verdict } if verdict.kind == VerdictKind::Cancelled => Outcome::Failed {
            error: format!("cancelled by {}: {}", who_of(&verdict), reason_of(&verdict)),
        },
        Standing::Closed { .. } => Outcome::Completed,
        Standing::Pending { .. } => Outcome::Running,
        Standing::Parked { verdict } => Outcome::Failed {
            error: format!("parked: {}", parked_reason(&verdict)),
        },
        Standing::Open => {
            // A reopen puts the task back to be tried again, whatever ended the tries before it.
            let reopened_ms = verdicts
                .iter()
                .filter(|v| v.kind == VerdictKind::Reopened)
                .map(|v| v.created_ms)
                .max();
            let withdrawn = spans.iter().rev().find_map(|s| match &s.ending {
                Ending::Withdrawn { reason, at_ms } if reopened_ms.is_none_or(|r| r < *at_ms) => {
                    Some(reason.clone())
                }
                _ => None,
            });
            match withdrawn {
                Some(error) if for_good => Outcome::Failed { error },
                _ => Outcome::Running,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metabob_wire::verdict::Pending;

    const MIN: i64 = 60_000;

    fn row(seq: i64, who: &str, kind: VerdictKind, at_min: i64) -> TaskRow {
        TaskRow {
            verdict: Verdict {
                concept_id: format!("concept_{seq:024x}"),
                seq,
                created_ms: at_min * MIN,
                kind,
                finding_ids: vec!["agf_1".into()],
                reviewed_by: Some(who.into()),
                session: Some("s".into()),
                fix_commit: (kind == VerdictKind::Fixed).then(|| "abcdef1".into()),
                fix_branch: None,
                fix_target: None,
                claim_minutes: kind.is_claim_row().then_some(10),
                claim_until: None,
                reason: (kind == VerdictKind::Withdrawn).then(|| "gave up".into()),
                tried_by: Vec::new(),
                blocker: None,
            },
        }
    }

    const C: VerdictKind = VerdictKind::Claimed;
    const W: VerdictKind = VerdictKind::Withdrawn;

    #[test]
    fn a_claim_renewed_then_fixed_is_one_completed_span() {
        let rows = vec![
            row(1, "a", C, 0),
            row(2, "a", C, 5),
            row(3, "a", VerdictKind::Fixed, 8),
        ];
        let w = derive(rows, false, 9 * MIN);
        assert_eq!(w.outcome, Outcome::Completed);
        assert_eq!(w.spans.len(), 1);
        let s = &w.spans[0];
        assert_eq!(s.ending, Ending::Fixed { at_ms: 8 * MIN });
        let kinds: Vec<&str> = s.events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["claimed", "renewed", "fixed"]);
        assert_eq!(w.log.len(), 3);
        assert_eq!(execution_id(&s.claim), format!("exec_{:024x}", 1));
        assert_eq!(
            claim_of_execution(&execution_id(&s.claim)),
            Some(s.claim.clone())
        );
    }

    #[test]
    fn a_lost_claim_is_no_span_and_a_release_returns_the_task() {
        let rows = vec![
            row(1, "a", C, 0),
            row(2, "b", C, 1),
            row(3, "b", W, 1),
            row(4, "a", W, 3),
        ];
        let w = derive(rows, false, 4 * MIN);
        assert_eq!(w.spans.len(), 1, "b never held the task");
        assert!(matches!(w.spans[0].ending, Ending::Released { .. }));
        assert_eq!(w.spans[0].ending.failure_mode().as_deref(), Some("gave up"));
        assert_eq!(
            w.outcome,
            Outcome::Running,
            "released work is back on the board"
        );
        // Withdrawn for good (the ref is refused): the task has failed with the reason.
        let rows = vec![row(1, "a", C, 0), row(2, "a", W, 0)];
        let w = derive(rows.clone(), true, MIN);
        assert_eq!(
            w.outcome,
            Outcome::Failed {
                error: "gave up".into()
            }
        );
        // Reopened after that, it is back to be tried; a withdrawal after the reopen fails it
        // again.
        let mut reopened = rows;
        reopened.push(row(3, "ops", VerdictKind::Reopened, 1));
        assert_eq!(
            derive(reopened.clone(), true, 2 * MIN).outcome,
            Outcome::Running
        );
        reopened.extend([row(4, "b", C, 2), row(5, "b", W, 3)]);
        assert!(matches!(
            derive(reopened, true, 4 * MIN).outcome,
            Outcome::Failed { .. }
        ));
    }

    #[test]
    fn a_lapsed_claim_ends_its_span_and_the_next_holder_begins_another() {
        let rows = vec![row(1, "a", C, 0), row(2, "b", C, 20)];
        let w = derive(rows, false, 21 * MIN);
        assert_eq!(w.spans.len(), 2);
        assert_eq!(w.spans[0].ending, Ending::Lapsed { at_ms: 10 * MIN });
        assert_eq!(w.spans[1].ending, Ending::Running);
        // Past b's claim (and the skew), nothing is live: b's span lapsed too.
        let w = derive(vec![row(1, "a", C, 0)], false, 13 * MIN);
        assert_eq!(w.spans[0].ending, Ending::Lapsed { at_ms: 10 * MIN });
    }

    #[test]
    fn a_pending_fix_stays_running_until_a_later_fix_closes_it() {
        let pending = VerdictKind::Pending(Pending::AwaitingMerge);
        let rows = vec![
            row(1, "a", C, 0),
            row(2, "a", pending, 2),
            row(3, "a", W, 3),
            row(4, "reviewer", VerdictKind::Fixed, 30),
        ];
        let w = derive(rows[..3].to_vec(), false, 4 * MIN);
        assert_eq!(w.spans[0].ending, Ending::Pending);
        assert_eq!(w.outcome, Outcome::Running);
        let w = derive(rows, false, 31 * MIN);
        assert_eq!(w.spans[0].ending, Ending::Fixed { at_ms: 30 * MIN });
        assert_eq!(w.outcome, Outcome::Completed);
    }

    #[test]
    fn a_retraction_fails_the_task_whoever_wrote_it() {
        let rows = vec![row(1, "a", C, 0), row(2, "lead", VerdictKind::Discarded, 1)];
        let w = derive(rows, false, 2 * MIN);
        assert!(matches!(w.outcome, Outcome::Failed { .. }));
        assert_eq!(w.spans[0].ending, Ending::Discarded { at_ms: MIN });
    }

    proptest::proptest! {
        /// Whatever rows any write key wrote, in whatever order and at whatever times, the walk
        /// derives without panicking, each span has one beginning claim, and an ended span has
        /// an end no earlier than its beginning claim's row.
        #[test]
        fn any_rows_derive_a_consistent_walk(
            raw in proptest::collection::vec((0u8..3, 0u8..6, 0i64..400, 1i64..=240), 0..40),
            now in 0i64..500,
            for_good: bool,
        ) {
            let kinds = [C, W, VerdictKind::Fixed, VerdictKind::Discarded,
                VerdictKind::Pending(Pending::Unpushed), C];
            // The ledger's clock and sequence agree (SPEC.md §Storage), so times only grow.
            let mut at = 0;
            let rows: Vec<TaskRow> = raw.iter().enumerate().map(|(i, (who, kind, step, minutes))| {
                at += step / 40;
                let mut r = row(i as i64, ["a", "b", "c"][*who as usize], kinds[*kind as usize], at);
                if r.verdict.kind.is_claim_row() {
                    r.verdict.claim_minutes = Some(*minutes);
                }
                r
            }).collect();
            let w = derive(rows, for_good, now * MIN);
            let mut claims: Vec<&str> = w.spans.iter().map(|s| s.claim.as_str()).collect();
            claims.sort_unstable();
            claims.dedup();
            proptest::prop_assert_eq!(claims.len(), w.spans.len());
            for s in &w.spans {
                proptest::prop_assert_eq!(s.events[0].kind, EventKind::Claimed);
                if let Some(end) = s.ending.ended_ms() {
                    proptest::prop_assert!(end >= s.began_ms, "{:?}", s);
                }
            }
        }
    }

    #[test]
    fn one_line_cuts_and_flattens() {
        assert_eq!(one_line(" a\nb ", 10), "a b");
        assert_eq!(one_line("abcdef", 3), "abc…");
        assert_eq!(claim_of_execution("exec_zz"), None);
        assert_eq!(claim_of_execution("concept_ab"), None);
    }
}

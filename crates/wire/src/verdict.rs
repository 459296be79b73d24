//! Verdicts: `finding_verdict` concepts keyed on a finding's `agf_` id (SPEC.md §Verdicts).
//! Claims are verdicts too; their holder rule lives in `claims.rs`.

use serde::Serialize;
use serde_json::{Value, json};

use super::claims::MAX_CLAIM_MINUTES;
use super::finding::{FINDING_SOURCE_TYPE, Finding};
use super::header::{self, Header};
use super::row::{BadRow, MAX_IDS_PER_ROW, RowMeta};

pub const VERDICT_SHAPE: &str = "finding_verdict";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pending {
    Uncommitted,
    Unpushed,
    AwaitingMerge,
}

impl Pending {
    fn phrase(self) -> &'static str {
        match self {
            Pending::Uncommitted => "uncommitted",
            Pending::Unpushed => "unpushed",
            Pending::AwaitingMerge => "awaiting merge",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "pending")]
pub enum VerdictKind {
    Fixed,
    Discarded,
    Pending(Pending),
    Claimed,
    Withdrawn,
    /// A claim given back because the task failed in this cell (its harness gave up): it ends
    /// the claim like a withdrawal, and counts toward parking the task (SPEC.md §Parked tasks).
    Failed,
    /// The task is withdrawn for good: no cell is offered it until it is reopened.
    Parked,
    /// A parked task put back on the board; failures before it no longer count.
    Reopened,
    /// Withdrawn for good by an operator (`task cancel`): it outranks every other verdict, so
    /// nothing reopens the task.
    Cancelled,
    /// The task waits for the task its `blocked_by:` line names (SPEC.md §Dependencies).
    Blocked,
    /// The task no longer waits for the task its `blocked_by:` line names.
    Unblocked,
}

impl VerdictKind {
    /// The `verdict:` line's value.
    pub fn line(self) -> String {
        match self {
            VerdictKind::Fixed => "fixed".into(),
            VerdictKind::Discarded => "discarded".into(),
            VerdictKind::Pending(p) => format!("fix pending ({})", p.phrase()),
            VerdictKind::Claimed => "claimed".into(),
            VerdictKind::Withdrawn => "claim withdrawn".into(),
            VerdictKind::Failed => "task failed".into(),
            VerdictKind::Parked => "parked".into(),
            VerdictKind::Reopened => "reopened".into(),
            VerdictKind::Cancelled => "cancelled".into(),
            VerdictKind::Blocked => "blocked".into(),
            VerdictKind::Unblocked => "unblocked".into(),
        }
    }

    /// The summary tag; a reader that knows only fixed and discarded reads the others as no
    /// verdict, which is what they are to it.
    fn tag(self) -> &'static str {
        match self {
            VerdictKind::Fixed => "[verdict:fixed]",
            VerdictKind::Discarded => "[verdict:discarded]",
            VerdictKind::Pending(_) => "[verdict:pending]",
            VerdictKind::Claimed => "[verdict:claimed]",
            VerdictKind::Withdrawn => "[verdict:withdrawn]",
            VerdictKind::Failed => "[verdict:failed]",
            VerdictKind::Parked => "[verdict:parked]",
            VerdictKind::Reopened => "[verdict:reopened]",
            VerdictKind::Cancelled => "[verdict:cancelled]",
            VerdictKind::Blocked => "[verdict:blocked]",
            VerdictKind::Unblocked => "[verdict:unblocked]",
        }
    }

    pub fn parse(s: &str) -> Option<VerdictKind> {
        let s = s.trim().to_ascii_lowercase();
        Some(match s.as_str() {
            "fixed" | "endorsed" => VerdictKind::Fixed,
            "discarded" | "retracted" => VerdictKind::Discarded,
            "claimed" => VerdictKind::Claimed,
            "claim withdrawn" | "withdrawn" => VerdictKind::Withdrawn,
            "task failed" => VerdictKind::Failed,
            "parked" => VerdictKind::Parked,
            "reopened" => VerdictKind::Reopened,
            "cancelled" => VerdictKind::Cancelled,
            "blocked" => VerdictKind::Blocked,
            "unblocked" => VerdictKind::Unblocked,
            "fix pending (uncommitted)" => VerdictKind::Pending(Pending::Uncommitted),
            "fix pending (unpushed)" => VerdictKind::Pending(Pending::Unpushed),
            "fix pending (awaiting merge)" => VerdictKind::Pending(Pending::AwaitingMerge),
            _ => return None,
        })
    }

    pub fn is_claim_row(self) -> bool {
        matches!(
            self,
            VerdictKind::Claimed | VerdictKind::Withdrawn | VerdictKind::Failed
        )
    }

    /// Whether the row ends its writer's claim.
    pub fn ends_claim(self) -> bool {
        matches!(self, VerdictKind::Withdrawn | VerdictKind::Failed)
    }

    /// Whether the verdict ends the finding (a pending fix or a claim does not).
    pub fn closes(self) -> bool {
        matches!(
            self,
            VerdictKind::Fixed | VerdictKind::Discarded | VerdictKind::Cancelled
        )
    }

    /// The usage outcome a closing verdict credits the finding's concept with: a fix says the
    /// finding was worth recording, a retraction that it was not.
    pub fn credit(self) -> Option<&'static str> {
        match self {
            VerdictKind::Fixed => Some("success"),
            VerdictKind::Discarded => Some("failure"),
            _ => None,
        }
    }
}

/// Which side judged the verdict: a local seed of this machine, or a recalled concept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictOrigin {
    Local,
    Remote,
}

impl VerdictOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictOrigin::Local => "local",
            VerdictOrigin::Remote => "remote",
        }
    }
}

/// A verdict as recalled; every field from the header block.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub concept_id: String,
    pub seq: i64,
    pub created_ms: i64,
    pub kind: VerdictKind,
    pub finding_ids: Vec<String>,
    pub reviewed_by: Option<String>,
    pub session: Option<String>,
    /// The sha of `fix: commit <sha>`.
    pub fix_commit: Option<String>,
    pub fix_branch: Option<String>,
    pub fix_target: Option<String>,
    pub claim_minutes: Option<i64>,
    pub claim_until: Option<String>,
    /// The `reason:` line of a withdrawal, a failure or a park.
    pub reason: Option<String>,
    /// A park's `tried_by:` line: the cells whose failures parked the task.
    pub tried_by: Vec<String>,
    /// A block's or unblock's `blocked_by:` line: the blocker's task id.
    pub blocker: Option<String>,
}

/// The most cells a park names.
pub const MAX_TRIED_BY: usize = 16;

impl Verdict {
    /// Reads a concept row, or names why it is refused; `None` when it is no verdict. A claim
    /// length outside what a claim may ask for is refused, since the holder rule adds it to a
    /// time (anchor: read_verdict_row).
    pub fn read(c: &Value) -> Result<Option<Verdict>, BadRow> {
        let Some(row) = RowMeta::read(c)? else {
            return Ok(None);
        };
        let h = Header::parse(&row.content);
        let Some(kind) = h.get("verdict").and_then(VerdictKind::parse) else {
            return Ok(None);
        };
        row.check_header(&h)?;
        let finding_ids = row.ids("finding_ids", h.list("finding_ids"), MAX_IDS_PER_ROW)?;
        let claim_minutes = match h.get("claim_minutes") {
            None => None,
            Some(m) => Some(
                m.parse::<i64>()
                    .ok()
                    .filter(|m| (1..=MAX_CLAIM_MINUTES).contains(m))
                    .ok_or_else(|| {
                        row.bad(
                            "claim_minutes",
                            format!("not a whole number from 1 to {MAX_CLAIM_MINUTES}"),
                        )
                    })?,
            ),
        };
        let fix_commit = h
            .get("fix")
            .and_then(|f| f.strip_prefix("commit "))
            .map(|s| s.trim().to_string())
            .filter(|s| (7..=64).contains(&s.len()) && s.chars().all(|c| c.is_ascii_hexdigit()));
        Ok(Some(Verdict {
            kind,
            finding_ids,
            reviewed_by: h.get("reviewed_by").map(str::to_owned),
            session: h.get("session").map(str::to_owned),
            fix_commit,
            fix_branch: h.get("fix_branch").map(str::to_owned),
            fix_target: h.get("fix_target").map(str::to_owned),
            claim_minutes,
            claim_until: h.get("claim_until").map(str::to_owned),
            // check_header bounded every value already.
            reason: h.get("reason").map(str::to_owned),
            tried_by: h.list("tried_by").into_iter().take(MAX_TRIED_BY).collect(),
            blocker: h
                .get(crate::depends::BLOCKER_FIELD)
                .filter(|id| crate::depends::is_task_id(id))
                .map(str::to_owned),
            concept_id: row.concept_id,
            seq: row.seq,
            created_ms: row.created_ms,
        }))
    }

    pub fn concerns(&self, f: &Finding) -> bool {
        self.finding_ids.iter().any(|id| f.has_id(id))
    }
}

/// Where a finding stands once its verdicts are weighed.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Standing {
    Open,
    /// Withdrawn for good: no cell is offered it until a later row reopens it.
    Parked {
        verdict: Verdict,
    },
    Pending {
        verdict: Verdict,
    },
    Closed {
        verdict: Verdict,
    },
}

impl Standing {
    pub fn is_closed(&self) -> bool {
        matches!(self, Standing::Closed { .. })
    }
}

/// Weighs a finding's verdicts (anchor: verdict-precedence): a retraction outranks a fix, a fix
/// with a commit one without, and any fix a pending one; among equals the newest counts. With
/// none of those, the newest of its parks and reopenings decides whether it is parked. Claim
/// rows are not verdicts here.
pub fn standing<'a>(verdicts: impl IntoIterator<Item = &'a Verdict>) -> Standing {
    let rank = |v: &Verdict| match v.kind {
        VerdictKind::Cancelled => Some(5),
        VerdictKind::Discarded => Some(4),
        VerdictKind::Fixed if v.fix_commit.is_some() => Some(3),
        VerdictKind::Fixed => Some(2),
        VerdictKind::Pending(_) => Some(1),
        VerdictKind::Claimed
        | VerdictKind::Withdrawn
        | VerdictKind::Failed
        | VerdictKind::Parked
        | VerdictKind::Reopened
        | VerdictKind::Blocked
        | VerdictKind::Unblocked => None,
    };
    let mut best: Option<(i32, i64, &Verdict)> = None;
    let mut parking: Option<&Verdict> = None;
    for v in verdicts {
        if let Some(r) = rank(v)
            && best.is_none_or(|(br, bs, _)| (r, v.seq) > (br, bs))
        {
            best = Some((r, v.seq, v));
        }
        if matches!(v.kind, VerdictKind::Parked | VerdictKind::Reopened)
            && parking.is_none_or(|p| v.seq > p.seq)
        {
            parking = Some(v);
        }
    }
    match (best, parking) {
        (Some((1, _, v)), _) => Standing::Pending { verdict: v.clone() },
        (Some((_, _, v)), _) => Standing::Closed { verdict: v.clone() },
        (None, Some(p)) if p.kind == VerdictKind::Parked => Standing::Parked { verdict: p.clone() },
        (None, _) => Standing::Open,
    }
}

/// The distinct cells whose failures on a task count toward parking it (anchor: failed_by):
/// every `task failed` row newer than the task's last reopening, in the order they failed.
pub fn failed_by<'a>(verdicts: impl IntoIterator<Item = &'a Verdict>) -> Vec<String> {
    let mut rows: Vec<&Verdict> = verdicts.into_iter().collect();
    rows.sort_by_key(|v| v.seq);
    let since = rows
        .iter()
        .rposition(|v| v.kind == VerdictKind::Reopened)
        .map_or(0, |i| i + 1);
    let mut cells: Vec<String> = Vec::new();
    for v in &rows[since..] {
        if v.kind == VerdictKind::Failed
            && let Some(by) = &v.reviewed_by
            && !cells.contains(by)
        {
            cells.push(by.clone());
        }
    }
    cells
}

/// A verdict to write; `to_pointer` composes the concept write (anchor: verdict_lines).
#[derive(Clone, Debug)]
pub struct NewVerdict<'a> {
    pub finding: &'a Finding,
    pub kind: VerdictKind,
    pub reviewed_by: Option<String>,
    pub session: String,
    pub origin: VerdictOrigin,
    /// Extra lines: fix location, claim length, a withdrawal's reason.
    pub lines: Vec<(&'static str, String)>,
}

impl NewVerdict<'_> {
    pub fn to_pointer(&self) -> Value {
        let f = self.finding;
        let mut fields: Vec<(&str, String)> = Vec::new();
        if let Some(by) = &self.reviewed_by {
            fields.push(("reviewed_by", by.clone()));
        }
        fields.extend([
            ("session", self.session.clone()),
            ("verdict", self.kind.line()),
            ("finding_ids", f.finding_ids.join(", ")),
            ("finding_concept", f.concept_id.clone()),
            ("repo", f.repo.clone().unwrap_or_default()),
            ("repo_name", f.repo_name.clone().unwrap_or_default()),
            ("files", f.files.join(", ")),
            ("origin", self.origin.as_str().to_string()),
        ]);
        fields.extend(self.lines.iter().map(|(k, v)| (*k, v.clone())));
        json!({
            "type": "concept_create_write",
            "conceptData": {
                "shape": VERDICT_SHAPE,
                "source_type": FINDING_SOURCE_TYPE,
                "summary": format!("{} {}", self.kind.tag(), f.summary),
                "content": header::compose(&fields, ""),
            }
        })
    }
}

/// The one write of a verdict with its link and credit (anchor: VERDICT_WRITE_SHAPE): the ledger
/// writes the row, links it `derived_from` the finding its `finding_concept:` line names, and
/// credits that finding as [`VerdictKind::credit`] says, in one transaction. A ledger that does
/// not serve it is written the three requests it replaces.
pub const VERDICT_WRITE_SHAPE: &str = "verdict_write";
/// The longest surface name a verdict write's credit carries in its trace id.
pub const MAX_TRACE_CHARS: usize = 64;

impl NewVerdict<'_> {
    /// The [`VERDICT_WRITE_SHAPE`] pointer: the concept write's, with the surface that writes it.
    pub fn to_write(&self, trace: &str) -> Value {
        let mut pointer = self.to_pointer();
        pointer["type"] = json!(VERDICT_WRITE_SHAPE);
        pointer["trace"] = json!(trace);
        pointer
    }
}

/// The usage row's trace id when a verdict credits its finding: the surface that wrote it and
/// the verdict's concept, so the credit is traced to its verdict.
pub fn credit_trace(trace: &str, verdict_concept: &str) -> String {
    format!("{trace}:{verdict_concept}")
}

/// `conceptLink_write` tying a verdict to its finding, so a reader whose window the verdict fell
/// out of still finds it through the finding (anchor: link-verdict).
pub fn link_pointer(verdict_concept: &str, finding_concept: &str) -> Value {
    json!({
        "type": "conceptLink_write",
        "linkData": {
            "from_concept_id": verdict_concept,
            "to_concept_id": finding_concept,
            "edge_type": "derived_from",
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A row of `agf_1` with nothing but its kind, order and fix commit; other tests of the
    /// crate fill in what they need on top.
    pub(crate) fn v(kind: VerdictKind, seq: i64, commit: Option<&str>) -> Verdict {
        Verdict {
            concept_id: format!("concept_{seq}"),
            seq,
            created_ms: seq,
            kind,
            finding_ids: vec!["agf_1".into()],
            reviewed_by: None,
            session: None,
            fix_commit: commit.map(str::to_owned),
            fix_branch: None,
            fix_target: None,
            claim_minutes: None,
            claim_until: None,
            reason: None,
            tried_by: Vec::new(),
            blocker: None,
        }
    }

    #[test]
    fn a_park_stands_until_reopened_and_a_fix_outranks_it() {
        let park = v(VerdictKind::Parked, 3, None);
        let reopen = v(VerdictKind::Reopened, 5, None);
        let park_again = v(VerdictKind::Parked, 7, None);
        assert!(matches!(standing([&park]), Standing::Parked { .. }));
        assert!(matches!(standing([&park, &reopen]), Standing::Open));
        assert!(matches!(
            standing([&park_again, &reopen, &park]),
            Standing::Parked { .. }
        ));
        let fixed = v(VerdictKind::Fixed, 1, None);
        assert!(matches!(standing([&park, &fixed]), Standing::Closed { .. }));
    }

    #[test]
    fn failures_count_per_cell_and_only_since_the_last_reopening() {
        let mut rows = Vec::new();
        for (seq, kind, by) in [
            (1, VerdictKind::Failed, "a"),
            (2, VerdictKind::Reopened, "admin"),
            (3, VerdictKind::Failed, "b"),
            (4, VerdictKind::Withdrawn, "c"),
            (5, VerdictKind::Failed, "b"),
            (6, VerdictKind::Failed, "d"),
        ] {
            let mut r = v(kind, seq, None);
            r.reviewed_by = Some(by.into());
            rows.push(r);
        }
        assert_eq!(failed_by(&rows), ["b", "d"]);
        assert_eq!(failed_by(&rows[..1]), ["a"]);
    }

    #[test]
    fn precedence_retraction_then_commit_fix_then_fix_then_pending() {
        let pending = v(VerdictKind::Pending(Pending::Unpushed), 9, None);
        let fixed = v(VerdictKind::Fixed, 2, None);
        let fixed_commit = v(VerdictKind::Fixed, 1, Some("abcdef1"));
        let discarded = v(VerdictKind::Discarded, 0, None);
        let claim = v(VerdictKind::Claimed, 10, None);
        assert!(matches!(standing([&claim]), Standing::Open));
        assert!(matches!(
            standing([&pending, &claim]),
            Standing::Pending { .. }
        ));
        let Standing::Closed { verdict } = standing([&pending, &fixed]) else {
            panic!()
        };
        assert_eq!(verdict.seq, 2);
        let Standing::Closed { verdict } = standing([&fixed, &fixed_commit, &pending]) else {
            panic!()
        };
        assert_eq!(verdict.seq, 1);
        let Standing::Closed { verdict } = standing([&fixed_commit, &discarded]) else {
            panic!()
        };
        assert_eq!(verdict.kind, VerdictKind::Discarded);
    }

    #[test]
    fn kinds_round_trip_through_their_lines() {
        for k in [
            VerdictKind::Fixed,
            VerdictKind::Discarded,
            VerdictKind::Claimed,
            VerdictKind::Withdrawn,
            VerdictKind::Failed,
            VerdictKind::Parked,
            VerdictKind::Reopened,
            VerdictKind::Blocked,
            VerdictKind::Unblocked,
            VerdictKind::Pending(Pending::Uncommitted),
            VerdictKind::Pending(Pending::Unpushed),
            VerdictKind::Pending(Pending::AwaitingMerge),
        ] {
            assert_eq!(VerdictKind::parse(&k.line()), Some(k));
        }
    }
}

use super::*;
use metabob_wire::finding::{FindingStatus, Severity};
use metabob_wire::verdict::{Pending, Verdict, VerdictKind};

fn task(id: &str, seq: i64, severity: Severity, category: &str) -> Recalled {
    let finding = Finding {
        concept_id: format!("concept_{id}"),
        seq,
        created_ms: seq,
        summary: format!("task {id}"),
        severity,
        category: category.into(),
        repo: None,
        repo_name: None,
        workspace: None,
        files: vec!["a.py".into()],
        lines: None,
        status: FindingStatus::Open,
        finding_ids: vec![id.into()],
        recorded_by: None,
        session: None,
        details: String::new(),
    };
    Recalled {
        files: finding.files.clone(),
        finding,
    }
}

fn verdict(id: &str, seq: i64, kind: VerdictKind, by: &str) -> Verdict {
    Verdict {
        concept_id: format!("concept_v{seq}"),
        seq,
        created_ms: seq * 1000,
        kind,
        finding_ids: vec![id.into()],
        reviewed_by: Some(by.into()),
        session: None,
        fix_commit: None,
        fix_branch: None,
        fix_target: None,
        claim_minutes: Some(60),
        claim_until: None,
        reason: None,
        tried_by: Vec::new(),
        blocker: None,
    }
}

fn ids(rs: &[&Recalled]) -> Vec<String> {
    rs.iter().map(|r| r.finding.id().to_string()).collect()
}

#[test]
fn open_tasks_are_sorted_mine_first_then_free_by_severity_and_rendezvous_and_held_apart() {
    let mut stale = task("agf_stale", 1, Severity::Critical, "task");
    stale.finding.status = FindingStatus::Other("stale".into());
    let view = LedgerView {
        findings: vec![
            task("agf_low_old", 2, Severity::Low, "task"),
            task("agf_high_new", 9, Severity::High, "task"),
            task("agf_high_old", 3, Severity::High, "task"),
            task("agf_mine", 10, Severity::Low, "task"),
            task("agf_theirs", 4, Severity::Critical, "task"),
            task("agf_fixed", 5, Severity::Critical, "task"),
            task("agf_pending", 6, Severity::Critical, "task"),
            task("agf_finding", 7, Severity::Critical, "correctness"),
            stale,
        ],
        verdicts: vec![
            verdict("agf_mine", 20, VerdictKind::Claimed, "me"),
            verdict("agf_theirs", 21, VerdictKind::Claimed, "other"),
            verdict("agf_fixed", 22, VerdictKind::Fixed, "other"),
            verdict(
                "agf_pending",
                23,
                VerdictKind::Pending(Pending::AwaitingMerge),
                "other",
            ),
        ],
        findings_truncated: false,
        verdicts_truncated: false,
    };
    let c = classify(&view, "me", 30_000);
    assert_eq!(ids(&c.mine), ["agf_mine"]);
    // Within a severity, this cell's own order; across severities, the most severe first.
    let mut high = ["agf_high_old", "agf_high_new"];
    high.sort_by_key(|id| std::cmp::Reverse(metabob_wire::claims::rendezvous("me", id)));
    let expected = [high[0], high[1], "agf_low_old"];
    assert_eq!(ids(&c.free), expected);
    let held: Vec<(&str, &str)> = c
        .held
        .iter()
        .map(|(r, h)| (r.finding.id(), h.holder.as_str()))
        .collect();
    assert_eq!(held, [("agf_theirs", "other")]);
    assert_eq!(c.open(), 5);
    let order: Vec<&str> = c.to_claim().map(|r| r.finding.id()).collect();
    assert_eq!(order, ["agf_mine", expected[0], expected[1], expected[2]]);

    // Once their claim lapses (skew allowance included), the task is free again.
    let lapse = metabob_wire::claims::lapses_at(&c.held[0].1);
    assert!(!classify(&view, "me", lapse - 1).held.is_empty());
    let later = classify(&view, "me", lapse);
    assert!(later.held.is_empty());
    assert_eq!(later.free[0].finding.id(), "agf_theirs");
}

#[test]
fn only_held_lost_and_unsettled_candidates_may_come_free() {
    use ClaimWord::*;
    for w in [
        Claimed, Renewed, Released, Held, Lost, Unsettled, Closed, Refused,
    ] {
        let o = CandidateOutcome::Claim(w);
        assert_eq!(o.may_come_free(), matches!(w, Held | Lost | Unsettled));
        assert_eq!(serde_json::to_value(o).expect("json"), w.as_str());
    }
    assert!(CandidateOutcome::Withdrawn.may_come_free());
    assert!(!CandidateOutcome::Parked.may_come_free());
    assert_eq!(
        serde_json::to_value(CandidateOutcome::Parked).expect("json"),
        "parked"
    );
}

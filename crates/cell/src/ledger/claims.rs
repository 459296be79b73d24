//! The client's half of `claims`: what it does over the attachment. The vocabulary it speaks is
//! `metabob_wire::claims`'s, which callers import from there: one path per item.

use metabob_wire::claims::{
    ClaimAction, ClaimOutcome, Held, MAX_CLAIM_MINUTES, MAX_TAKE_CANDIDATES, Passed, TAKE_SHAPE,
    Take, TakeAsk, Taken, Waiting, claim_row, holder,
};
use metabob_wire::finding::Finding;
use metabob_wire::verdict::{NewVerdict, VerdictKind, VerdictOrigin};

/// Pauses before each read-back; a read can miss a row written moments before.
const READ_BACK_PAUSES_MS: [u64; 4] = [0, 150, 500, 1500];

/// The longest holder name a take's answer may carry: as long as a row's header value may be.
const MAX_HOLDER_CHARS: usize = 512;

/// Claims, renews or releases `finding` for `me` (anchor: claim_finding). One rule decides the
/// holder ([`holder`]); the write is read back before anything is reported as held, and a lost
/// race is withdrawn at once.
pub async fn claim_finding(
    att: &metabob_net::attachment::Attachment,
    finding: &Finding,
    me: &str,
    session: &str,
    minutes: i64,
    action: ClaimAction,
    reason: Option<&str>,
) -> Result<ClaimOutcome, metabob_net::attachment::ResolveError> {
    use super::recall::verdicts_of;
    use metabob_net::attachment::ResolveError;
    use metabob_wire::verdict::{Standing, standing};

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
    let now = metabob_process::clock::now_ms();
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
                reason: metabob_wire::report::with_hint(&e),
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
        return Ok(match holder(&rows, metabob_process::clock::now_ms()) {
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
                    tracing::warn!(
                        "withdrawing a lost claim failed ({}); it lapses by itself",
                        metabob_wire::report::line(&e)
                    );
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
    att: &metabob_net::attachment::Attachment,
    finding: &Finding,
    me: &str,
    session: &str,
    minutes: i64,
) -> Result<Option<ClaimOutcome>, metabob_net::attachment::ResolveError> {
    use metabob_net::attachment::ResolveError;
    let ask = TakeAsk {
        candidates: &[finding],
        repository: None,
        skip: &[],
    };
    let take = match take(att, &ask, me, session, minutes).await {
        Ok(t) => t,
        Err(e @ ResolveError::KeyReadOnly { .. }) => {
            return Ok(Some(ClaimOutcome::Refused {
                reason: metabob_wire::report::with_hint(&e),
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
    att: &metabob_net::attachment::Attachment,
    pointer: serde_json::Value,
) -> Result<String, metabob_net::attachment::ResolveError> {
    use metabob_net::attachment::ResolveError;
    let mut tries = 0;
    loop {
        tries += 1;
        match super::write_concept(att, pointer.clone()).await {
            Err(ResolveError::NoProducer { .. } | ResolveError::ProducerTimeout { .. })
                if tries == 1 =>
            {
                let jitter = u64::from(metabob_process::random::random_u16() % 400) + 100;
                tokio::time::sleep(std::time::Duration::from_millis(jitter)).await;
            }
            other => return other,
        }
    }
}

/// Best-effort `derived_from` link from a settled claim or release to its finding.
async fn link(att: &metabob_net::attachment::Attachment, from: &str, finding_concept: &str) {
    let pointer = metabob_wire::verdict::link_pointer(from, finding_concept);
    if let Err(e) = att.resolve(pointer).await {
        tracing::debug!(
            "linking {from} to {finding_concept} failed: {}",
            metabob_wire::report::line(&e)
        );
    }
}

/// Whether the attached ledger takes tasks atomically: some vessel advertises [`TAKE_SHAPE`]
/// (anchor: ledger_takes). A substrate that does not know the question answers no.
pub async fn ledger_takes(att: &metabob_net::attachment::Attachment) -> bool {
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
            tracing::debug!(
                "asking who takes tasks failed ({}); claiming by read-back",
                metabob_wire::report::line(&e)
            );
            false
        }
    }
}

/// Asks the ledger to claim for `me`, in one write, the first task of `ask` nobody else holds
/// (anchor: take). The answer is read as hostile: a passed candidate the request did not name,
/// a taken task that is no task, or one not held by `me`, is refused.
pub async fn take(
    att: &metabob_net::attachment::Attachment,
    ask: &TakeAsk<'_>,
    me: &str,
    session: &str,
    minutes: i64,
) -> Result<Take, metabob_net::attachment::ResolveError> {
    use metabob_net::attachment::ResolveError;
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
    read_take(&body, &ids, me).map_err(|said| ResolveError::Answer {
        shape: TAKE_SHAPE.into(),
        status: 200,
        said,
    })
}

/// A field of a take's answer that must be one short line of text.
fn one_line(v: &serde_json::Value, k: &str) -> Result<String, String> {
    v.get(k)
        .and_then(serde_json::Value::as_str)
        .filter(|s| !s.is_empty() && s.chars().count() <= MAX_HOLDER_CHARS && !s.contains('\n'))
        .map(str::to_owned)
        .ok_or(format!("{k}: not one line of text"))
}

fn read_take(body: &serde_json::Value, asked: &[&str], me: &str) -> Result<Take, String> {
    use serde_json::Value;
    let held = |v: &Value| -> Result<Held, String> {
        let h = v.get("held").ok_or("a claim without its holder")?;
        let time = |k: &str| {
            h.get(k)
                .and_then(Value::as_i64)
                .filter(|t| (0..=metabob_wire::row::MAX_TIME_MS).contains(t))
                .ok_or(format!("held.{k}: not a time"))
        };
        let text = |k: &str| one_line(h, k).map_err(|_| format!("held.{k}: not a name"));
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
    let waiting = match body.get("waiting") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(w)) => w.as_slice(),
        Some(_) => return Err("waiting: not a list".into()),
    };
    for w in waiting.iter().take(MAX_TAKE_CANDIDATES) {
        out.waiting.push(Waiting {
            concept_id: one_line(w, "concept_id")?,
            task_id: one_line(w, "task_id")?,
            summary: one_line(w, "summary").unwrap_or_default(),
            held: held(w)?,
        });
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

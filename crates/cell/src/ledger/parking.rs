//! The client's half of `parking`: what it does over the attachment. The vocabulary it speaks
//! is `metabob_wire::parking`'s.

use super::recall::verdicts_of;
use super::verdict;
use metabob_net::attachment::{Attachment, ResolveError};
use metabob_wire::finding::Finding;
use metabob_wire::parking::{Parked, Reopen};
use metabob_wire::verdict::{
    MAX_TRIED_BY, NewVerdict, Standing, VerdictKind, VerdictOrigin, failed_by, standing,
};

/// Parks `finding` at once, for a cause the task itself carries (anchor: park_task).
pub async fn park(
    att: &Attachment,
    finding: &Finding,
    me: &str,
    session: &str,
    parked: &Parked,
) -> Result<(), ResolveError> {
    let mut lines = vec![("reason", parked.reason.clone())];
    if !parked.tried_by.is_empty() {
        lines.push(("tried_by", parked.tried_by.join(", ")));
    }
    let nv = NewVerdict {
        finding,
        kind: VerdictKind::Parked,
        reviewed_by: Some(me.to_string()),
        session: session.to_string(),
        origin: VerdictOrigin::Remote,
        lines,
    };
    verdict::write(att, &nv, "park").await?;
    Ok(())
}

/// After a `task failed` row: parks the task once failures by `park_after` distinct cells stand
/// against it since it was last reopened (anchor: park_after_failures). `None` while fewer have
/// failed it, or when it no longer stands open.
pub async fn park_after_failures(
    att: &Attachment,
    finding: &Finding,
    me: &str,
    session: &str,
    reason: &str,
    park_after: usize,
) -> Result<Option<Parked>, ResolveError> {
    let rows = verdicts_of(att, finding).await?;
    if !matches!(standing(&rows), Standing::Open) {
        return Ok(None);
    }
    let cells = failed_by(&rows);
    if cells.len() < park_after.max(1) {
        return Ok(None);
    }
    let parked = Parked {
        reason: match cells.len() {
            1 => format!("one cell failed it: {reason}"),
            n => format!("{n} cells failed it; the last: {reason}"),
        },
        tried_by: cells.into_iter().rev().take(MAX_TRIED_BY).collect(),
    };
    park(att, finding, me, session, &parked).await?;
    Ok(Some(parked))
}

/// Puts a parked task back on the board (anchor: reopen_task): its earlier failures stop
/// counting, and the take offers it again. When it applies is `task_action::decide`'s rule.
pub async fn reopen(
    att: &Attachment,
    finding: &Finding,
    me: &str,
    session: &str,
) -> Result<Reopen, ResolveError> {
    use metabob_wire::task_action::{Refused, TaskAction, decide};
    let rows = verdicts_of(att, finding).await?;
    let now = metabob_process::clock::now_ms();
    match decide(TaskAction::Reopen, finding, &rows, me, session, None, now) {
        Ok((nv, _)) => {
            verdict::write(att, &nv, "reopen").await?;
            Ok(Reopen::Reopened)
        }
        Err(Refused::NotParked | Refused::NotHeld) => Ok(Reopen::NotParked),
        Err(Refused::Closed { .. }) => Ok(Reopen::Closed),
    }
}

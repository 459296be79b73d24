//! The dependency index (SPEC.md §Dependencies): which task waits for which, and whether each
//! blocker still holds its dependent back, kept in step with every row the ledger writes, with
//! each open task's count of holding blockers in its open-task index row, so a take drops a
//! blocked task with no lookup of its own. Every edge is checked in the write that
//! stores it: the blocker must be a task of the org, not the task itself, and not a task that
//! already waits, however indirectly, for the dependent.

use serde_json::Value;

use super::errors::ApiError;
use super::goals::store::task_rows;
use super::sql::{Sql, args};
use super::task_actions::find_task;
use metabob_wire::depends::{
    BLOCKER_FIELD, MAX_BLOCKERS, OpenBlocker, blockers, holds_back, is_task_id, recorded_words,
};
use metabob_wire::finding::{FINDING_SHAPE, Finding};
use metabob_wire::header::Header;
use metabob_wire::verdict::{VERDICT_SHAPE, Verdict, VerdictKind, standing};

// anchor: task-edges-schema
pub const SCHEMA_V7: &str = r#"
CREATE TABLE IF NOT EXISTS task_edges (
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    -- Both by their first finding ids, the ids every verdict about them names.
    task_id     TEXT NOT NULL,
    blocker_id  TEXT NOT NULL,
    -- 1 while the blocker holds the task back (the ready rule's answer when its rows last changed).
    holds       INTEGER NOT NULL,
    PRIMARY KEY (org_id, task_id, blocker_id)
);
CREATE INDEX IF NOT EXISTS task_edges_by_blocker ON task_edges(org_id, blocker_id);
-- How many of an open task's blockers hold it back, kept beside the task so that a take reads
-- whether it is blocked with the rest of the open-task index, no lookup per task.
ALTER TABLE open_tasks ADD COLUMN blocked INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS open_tasks_by_task ON open_tasks(org_id, task_id);
"#;

/// The most tasks a cycle check walks through: far more than a backlog's chains, and a bound on
/// one write's work whatever an org wrote.
const MAX_WALKED: usize = 20_000;

/// The pseudo id whose holder lock serializes every edge write of an org on PostgreSQL, so two
/// replicas cannot each add half of a cycle (SQLite's one writer already does).
pub const EDGE_LOCK: &str = "\u{1}task-edges";

/// The ids whose holder locks a row that may write an edge takes before it is written: the
/// graph's, the blockers' (so a blocker's verdict and an edge to it are weighed in one order)
/// and the dependent's. Empty for a row that writes none.
pub fn lock_ids(shape: &str, content: &str) -> Vec<String> {
    let h = Header::parse(content);
    let mut ids: Vec<String> = match shape {
        FINDING_SHAPE => recorded_words(metabob_wire::header::body(content))
            .into_iter()
            .filter(|w| is_task_id(w))
            .take(MAX_BLOCKERS + 1)
            .map(str::to_owned)
            .collect(),
        VERDICT_SHAPE
            if matches!(
                h.get("verdict").map(str::trim),
                Some("blocked" | "unblocked")
            ) =>
        {
            h.get(BLOCKER_FIELD)
                .map(str::to_owned)
                .into_iter()
                .collect()
        }
        _ => Vec::new(),
    };
    if !ids.is_empty() {
        ids.push(EDGE_LOCK.to_string());
    }
    ids
}

/// Keeps the index in step with one row just written on `conn`, refusing the row when an edge
/// it adds is not allowed (anchor: index-edges). A task recorded with `blocked-by:` lines gains
/// those edges; a `blocked` row adds one, an `unblocked` row takes one away; any other verdict
/// about a blocker weighs again whether it holds its dependents back.
pub fn on_insert(conn: Sql<'_>, org: &str, concept: &Value) -> Result<(), ApiError> {
    match concept.get("shape").and_then(Value::as_str) {
        Some(FINDING_SHAPE) => {
            let Ok(Some(task)) = Finding::read(concept) else {
                return Ok(());
            };
            let words = recorded_words(&task.details);
            if words.is_empty() || !task.is_task() {
                return Ok(());
            }
            if words.len() > MAX_BLOCKERS {
                return Err(ApiError::bad(format!(
                    "blocked-by: at most {MAX_BLOCKERS} blockers per task"
                )));
            }
            lock(conn, org, &words)?;
            for word in words {
                let blocker = check(conn, org, &task, word)?;
                add(conn, org, &task, &blocker)?;
            }
        }
        Some(VERDICT_SHAPE) => {
            let Ok(Some(v)) = Verdict::read(concept) else {
                return Ok(());
            };
            match v.kind {
                VerdictKind::Blocked | VerdictKind::Unblocked => edge_row(conn, org, &v)?,
                k if k.is_claim_row() => {}
                _ => reweigh(conn, org, &v)?,
            }
        }
        _ => {}
    }
    Ok(())
}

/// Waits for the org's edge lock and the holder locks of `blockers` inside the transaction (on
/// PostgreSQL; SQLite's one writer needs none): edge writes of two replicas are checked one
/// after the other, and a blocker's verdict and an edge to it are weighed in one order, so the
/// stored `holds` is never a stale answer. Locks the write holds already are taken at once, so
/// a row whose write took them first (`lock_ids`) waits for nothing here.
fn lock(conn: Sql<'_>, org: &str, blockers: &[&str]) -> Result<(), ApiError> {
    let mut ids: Vec<String> = blockers.iter().map(|b| b.to_string()).collect();
    ids.push(EDGE_LOCK.to_string());
    conn.lock_holders_then_clock(org, &ids).map(drop)
}

/// A `blocked` or `unblocked` row: the edge it names, checked and stored, or taken away.
fn edge_row(conn: Sql<'_>, org: &str, v: &Verdict) -> Result<(), ApiError> {
    let word = v.kind.line();
    let task = match v.finding_ids.first() {
        Some(id) => find_task(conn, org, id)?,
        None => None,
    };
    let Some(task) = task else {
        return Err(ApiError::bad(format!(
            "{word}: the row names no task of this org in its finding_ids"
        )));
    };
    let Some(named) = v.blocker.as_deref() else {
        return Err(ApiError::bad(format!(
            "{word}: the row needs a {BLOCKER_FIELD}: line naming a task id (agf_…)"
        )));
    };
    lock(conn, org, &[named])?;
    if v.kind == VerdictKind::Blocked {
        let blocker = check(conn, org, &task, named)?;
        if blocker.id() != named {
            return Err(ApiError::bad(format!(
                "{BLOCKER_FIELD}: name the blocker by its first id, {}",
                blocker.id()
            )));
        }
        if count(conn, org, task.id())? >= MAX_BLOCKERS {
            return Err(ApiError::bad(format!(
                "{} already waits for {MAX_BLOCKERS} tasks, the most a task may",
                task.id()
            )));
        }
        return add(conn, org, &task, &blocker);
    }
    let Some(held) = edge_holds(conn, org, task.id(), named)? else {
        return Err(ApiError::bad(format!(
            "{} does not wait for {named}: there is nothing to unblock",
            task.id()
        )));
    };
    conn.execute(
        "DELETE FROM task_edges WHERE org_id = ?1 AND task_id = ?2 AND blocker_id = ?3",
        args![org, task.id(), named],
    )?;
    count_by(conn, org, task.id(), -i64::from(held))
}

/// The blocker `word` names for `task`, or the one line saying why it may not be one.
fn check(conn: Sql<'_>, org: &str, task: &Finding, word: &str) -> Result<Finding, ApiError> {
    if !is_task_id(word) {
        return Err(ApiError::bad(format!(
            "blocked-by: {:?} is not a task id (agf_…)",
            one_line(word)
        )));
    }
    if task.has_id(word) {
        return Err(ApiError::bad(format!(
            "blocked-by {word}: a task cannot wait for itself"
        )));
    }
    let Some(blocker) = find_task(conn, org, word)? else {
        return Err(ApiError::bad(format!(
            "blocked-by {word}: no task of this org has that id; record the blocker first"
        )));
    };
    if task.has_id(blocker.id()) {
        return Err(ApiError::bad(format!(
            "blocked-by {word}: that is another id of this task, which cannot wait for itself"
        )));
    }
    // A ring through the new edge ends in an edge to this task: with none, there is no walk.
    if is_blocker(conn, org, task.id())?
        && let Some(path) = path(conn, org, blocker.id(), task.id())?
    {
        let mut names = vec![task.id().to_string()];
        names.extend(path);
        return Err(ApiError::bad(format!(
            "blocked-by {word}: that closes a cycle {}; unblock one of its edges first",
            names.join(" → ")
        )));
    }
    Ok(blocker)
}

/// Stores the edge `task` ← `blocker` with whether the blocker holds it back now.
fn add(conn: Sql<'_>, org: &str, task: &Finding, blocker: &Finding) -> Result<(), ApiError> {
    let was = edge_holds(conn, org, task.id(), blocker.id())?;
    let now = holds(conn, org, blocker)?;
    conn.execute(
        "INSERT INTO task_edges (org_id, task_id, blocker_id, holds) VALUES (?1, ?2, ?3, ?4)
           ON CONFLICT (org_id, task_id, blocker_id) DO UPDATE SET holds = excluded.holds",
        args![org, task.id(), blocker.id(), i64::from(now)],
    )?;
    count_by(
        conn,
        org,
        task.id(),
        i64::from(now) - i64::from(was == Some(true)),
    )
}

/// Whether the edge `task_id` ← `blocker_id` holds; `None` when there is no such edge.
fn edge_holds(
    conn: Sql<'_>,
    org: &str,
    task_id: &str,
    blocker_id: &str,
) -> Result<Option<bool>, ApiError> {
    conn.query_opt(
        "SELECT holds FROM task_edges WHERE org_id = ?1 AND task_id = ?2 AND blocker_id = ?3",
        args![org, task_id, blocker_id],
        |r| Ok(r.get::<i64>(0)? != 0),
    )
}

/// Moves `task_id`'s count of holding blockers in the open-task index by `by`. A change, not a
/// count read and written back: two blockers of one task may change at once on two replicas,
/// each under its own lock, and a count computed by each would lose the other's change, where
/// the row's own update applies both.
fn count_by(conn: Sql<'_>, org: &str, task_id: &str, by: i64) -> Result<(), ApiError> {
    if by != 0 {
        conn.execute(
            "UPDATE open_tasks SET blocked = blocked + ?3 WHERE org_id = ?1 AND task_id = ?2",
            args![org, task_id, by],
        )?;
    }
    Ok(())
}

/// Writes into the open-task index how many of `task_id`'s blockers hold it back now, from its
/// edges: for the rebuild, which runs alone.
fn count_holding(conn: Sql<'_>, org: &str, task_id: &str) -> Result<(), ApiError> {
    conn.execute(
        "UPDATE open_tasks SET blocked = (SELECT COUNT(*) FROM task_edges e
             WHERE e.org_id = ?1 AND e.task_id = ?2 AND e.holds = 1)
           WHERE org_id = ?1 AND task_id = ?2",
        args![org, task_id],
    )?;
    Ok(())
}

/// Whether `blocker`'s rows hold its dependents back now (the wire's ready rule).
fn holds(conn: Sql<'_>, org: &str, blocker: &Finding) -> Result<bool, ApiError> {
    let rows: Vec<Verdict> = task_rows(conn, org, blocker)?
        .into_iter()
        .map(|r| r.verdict)
        .collect();
    Ok(holds_back(Some(&standing(&rows))).is_some())
}

/// A verdict about a task others wait for: whether it holds them back, weighed again.
fn reweigh(conn: Sql<'_>, org: &str, v: &Verdict) -> Result<(), ApiError> {
    // An org with no edge has no blocker to find: one point read instead of a task lookup per
    // id. An edge written to one of these tasks waited for the holder lock this write holds, so
    // it has committed before this read or is not written yet.
    if !has_edges(conn, org)? {
        return Ok(());
    }
    let mut done: Vec<String> = Vec::new();
    for id in &v.finding_ids {
        let Some(blocker) = find_task(conn, org, id)? else {
            continue;
        };
        if done.iter().any(|d| d == blocker.id()) || !is_blocker(conn, org, blocker.id())? {
            continue;
        }
        done.push(blocker.id().to_string());
        // The blocker's holder lock, which this verdict's write holds, orders every change to
        // its edges, so the ones read here are the ones that flip.
        let now = i64::from(holds(conn, org, &blocker)?);
        let flipped = conn.query(
            "SELECT task_id FROM task_edges WHERE org_id = ?1 AND blocker_id = ?2 AND holds <> ?3",
            args![org, blocker.id(), now],
            |r| r.get::<String>(0),
        )?;
        if flipped.is_empty() {
            continue;
        }
        conn.execute(
            "UPDATE task_edges SET holds = ?3 WHERE org_id = ?1 AND blocker_id = ?2",
            args![org, blocker.id(), now],
        )?;
        for task_id in flipped {
            count_by(conn, org, &task_id, if now == 1 { 1 } else { -1 })?;
        }
    }
    Ok(())
}

fn has_edges(conn: Sql<'_>, org: &str) -> Result<bool, ApiError> {
    conn.exists(
        "SELECT 1 FROM task_edges WHERE org_id = ?1 LIMIT 1",
        args![org],
    )
}

fn is_blocker(conn: Sql<'_>, org: &str, id: &str) -> Result<bool, ApiError> {
    conn.exists(
        "SELECT 1 FROM task_edges WHERE org_id = ?1 AND blocker_id = ?2 LIMIT 1",
        args![org, id],
    )
}

fn count(conn: Sql<'_>, org: &str, task_id: &str) -> Result<usize, ApiError> {
    Ok(blockers_of(conn, org, task_id)?.len())
}

/// The blockers `task_id` waits for in the index, with whether each holds it back.
pub fn blockers_of(
    conn: Sql<'_>,
    org: &str,
    task_id: &str,
) -> Result<Vec<(String, bool)>, ApiError> {
    conn.query(
        "SELECT blocker_id, holds FROM task_edges WHERE org_id = ?1 AND task_id = ?2
           ORDER BY blocker_id",
        args![org, task_id],
        |r| Ok((r.get::<String>(0)?, r.get::<i64>(1)? != 0)),
    )
}

/// The blockers that hold `task` back now, each with why, weighed from its blockers' rows by the
/// wire's rule (the index says which tasks it waits for).
pub fn waits(conn: Sql<'_>, org: &str, task: &Finding) -> Result<Vec<OpenBlocker>, ApiError> {
    let mut out = Vec::new();
    for (id, _) in blockers_of(conn, org, task.id())? {
        let standing = match find_task(conn, org, &id)? {
            Some(b) => Some(standing(
                &task_rows(conn, org, &b)?
                    .into_iter()
                    .map(|r| r.verdict)
                    .collect::<Vec<_>>(),
            )),
            None => None,
        };
        if let Some(state) = holds_back(standing.as_ref()) {
            out.push(OpenBlocker {
                task_id: id,
                state: state.to_string(),
            });
        }
    }
    Ok(out)
}

/// Whether some blocker of `task_id` holds it back now.
pub fn blocked(conn: Sql<'_>, org: &str, task_id: &str) -> Result<bool, ApiError> {
    conn.exists(
        "SELECT 1 FROM task_edges WHERE org_id = ?1 AND task_id = ?2 AND holds = 1 LIMIT 1",
        args![org, task_id],
    )
}

/// The chain of waits from `from` to `to` (`from` first, `to` last), if `from` waits for `to`
/// however indirectly: breadth first, so the path named is a shortest one.
fn path(conn: Sql<'_>, org: &str, from: &str, to: &str) -> Result<Option<Vec<String>>, ApiError> {
    // Each task walked, with the task it was reached from.
    let mut seen: Vec<(String, usize)> = vec![(from.to_string(), usize::MAX)];
    let mut next = 0;
    while next < seen.len() && seen.len() < MAX_WALKED {
        let at = seen[next].0.clone();
        if at == to {
            let mut chain = Vec::new();
            let mut i = next;
            while i != usize::MAX {
                chain.push(seen[i].0.clone());
                i = seen[i].1;
            }
            chain.reverse();
            return Ok(Some(chain));
        }
        for (b, _) in blockers_of(conn, org, &at)? {
            if !seen.iter().any(|(s, _)| *s == b) {
                seen.push((b, next));
            }
        }
        next += 1;
    }
    if seen.len() >= MAX_WALKED {
        return Err(ApiError::bad(format!(
            "blocked-by: the tasks {from} waits for number more than {MAX_WALKED}; \
             the ledger does not check a cycle through so many"
        )));
    }
    Ok(None)
}

/// The notes a write that stored edges answers with: a blocker already closed lets its
/// dependent go at once, which is allowed but worth saying.
pub fn notes(conn: Sql<'_>, org: &str, concept: &Value) -> Result<Vec<String>, ApiError> {
    let (task_id, only) = match concept.get("shape").and_then(Value::as_str) {
        Some(FINDING_SHAPE) => match Finding::read(concept) {
            Ok(Some(f)) if !recorded_words(&f.details).is_empty() => (f.id().to_string(), None),
            _ => return Ok(Vec::new()),
        },
        Some(VERDICT_SHAPE) => match Verdict::read(concept) {
            Ok(Some(v)) if v.kind == VerdictKind::Blocked => {
                (v.finding_ids[0].clone(), v.blocker.clone())
            }
            _ => return Ok(Vec::new()),
        },
        _ => return Ok(Vec::new()),
    };
    Ok(blockers_of(conn, org, &task_id)?
        .into_iter()
        .filter(|(b, holds)| !holds && only.as_ref().is_none_or(|o| o == b))
        .map(|(b, _)| format!("{b} is already closed, so {task_id} does not wait for it"))
        .collect())
}

/// Builds the index from the rows already stored: run once, when the schema gains it. Rows are
/// replayed in order without the checks, which no ledger before this version applied: an edge
/// to no task is left out, and a cycle among old rows is kept (its tasks wait until unblocked).
pub fn backfill(conn: Sql<'_>) -> Result<(), ApiError> {
    let rows = conn.query(
        "SELECT org_id, id FROM concepts
           WHERE (shape = ?1 OR shape = ?2) AND lower(content) LIKE '%blocked%' ORDER BY seq",
        args![FINDING_SHAPE, VERDICT_SHAPE],
        |r| Ok((r.get::<String>(0)?, r.get::<String>(1)?)),
    )?;
    for (org, id) in rows {
        let concept = super::concepts::load_concept(conn, &org, &id)?;
        let task = match Finding::read(&concept) {
            Ok(Some(f)) if f.is_task() => Some(f),
            _ => match Verdict::read(&concept) {
                Ok(Some(v)) if matches!(v.kind, VerdictKind::Blocked | VerdictKind::Unblocked) => {
                    match v.finding_ids.first() {
                        Some(id) => find_task(conn, &org, id)?,
                        None => None,
                    }
                }
                _ => None,
            },
        };
        let Some(task) = task else { continue };
        let rows: Vec<Verdict> = task_rows(conn, &org, &task)?
            .into_iter()
            .map(|r| r.verdict)
            .collect();
        conn.execute(
            "DELETE FROM task_edges WHERE org_id = ?1 AND task_id = ?2",
            args![&org, task.id()],
        )?;
        let key = |id: &str| {
            find_task(conn, &org, id)
                .ok()
                .flatten()
                .map(|f| f.id().to_string())
        };
        for b in blockers(&task, &rows, key) {
            if let Some(blocker) = find_task(conn, &org, &b)? {
                add(conn, &org, &task, &blocker)?;
            }
        }
        count_holding(conn, &org, task.id())?;
    }
    Ok(())
}

/// A word as a refusal quotes it: at most 80 characters.
fn one_line(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{TestLedger, finding, ledger};
    use metabob_wire::depends::edge_row;
    use metabob_wire::verdict::{NewVerdict, VerdictOrigin};

    trait Edges {
        fn task(&self, blockers: &[&Finding]) -> Result<Finding, ApiError>;
        fn verdict(&self, f: &Finding, kind: VerdictKind);
        fn edge(&self, t: &Finding, kind: VerdictKind, b: &Finding) -> Result<Value, ApiError>;
        fn edges(&self) -> Vec<(String, String, bool)>;
    }

    impl Edges for TestLedger {
        fn task(&self, blockers: &[&Finding]) -> Result<Finding, ApiError> {
            let lines: Vec<String> = blockers
                .iter()
                .map(|b| format!("blocked-by: {}", b.id()))
                .collect();
            let v = self.write(finding("step", "task", &lines.join("\n")).to_pointer())?;
            Ok(Finding::read(&v["concept"]).unwrap().unwrap())
        }

        fn verdict(&self, f: &Finding, kind: VerdictKind) {
            let nv = NewVerdict {
                finding: f,
                kind,
                reviewed_by: Some("ops".into()),
                session: "s".into(),
                origin: VerdictOrigin::Remote,
                lines: Vec::new(),
            };
            self.write(nv.to_pointer()).unwrap();
        }

        fn edge(&self, t: &Finding, kind: VerdictKind, b: &Finding) -> Result<Value, ApiError> {
            self.write(edge_row(t, kind, b.id(), None, "s").to_pointer())
        }

        /// Every edge, as (task, blocker, holds), in order.
        fn edges(&self) -> Vec<(String, String, bool)> {
            self.db
                .with_writer(|w| {
                    w.sql().query(
                        "SELECT task_id, blocker_id, holds FROM task_edges ORDER BY task_id, blocker_id",
                        &[],
                        |r| Ok((r.get::<String>(0)?, r.get::<String>(1)?, r.get::<i64>(2)? != 0)),
                    )
                })
                .unwrap()
        }
    }

    fn refusal(r: Result<impl std::fmt::Debug, ApiError>) -> String {
        match r {
            Err(ApiError::BadRequest(why)) => why,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn the_index_follows_edges_and_verdicts_and_is_rebuilt_the_same_from_the_rows() {
        let l = ledger();
        let a = l.task(&[]).unwrap();
        let b = l.task(&[&a]).unwrap();
        let c = l.task(&[&b]).unwrap();
        let e = |t: &Finding, bl: &Finding, holds| (t.id().to_string(), bl.id().to_string(), holds);
        let mut want = vec![e(&b, &a, true), e(&c, &b, true)];
        want.sort();
        assert_eq!(l.edges(), want);

        // A fix lets b go; a cancellation after it outranks the fix and holds b back again.
        l.verdict(&a, VerdictKind::Fixed);
        assert!(l.edges().contains(&e(&b, &a, false)));
        l.verdict(&a, VerdictKind::Cancelled);
        assert!(l.edges().contains(&e(&b, &a, true)));

        // Rows change the edges; the refused one changes nothing.
        l.edge(&c, VerdictKind::Blocked, &a).unwrap();
        l.edge(&c, VerdictKind::Unblocked, &b).unwrap();
        let why = refusal(l.edge(&a, VerdictKind::Blocked, &c));
        assert!(
            why.contains(&format!("cycle {} → {} → {}", a.id(), c.id(), a.id())),
            "{why}"
        );
        let mut want = vec![e(&b, &a, true), e(&c, &a, true)];
        want.sort();
        assert_eq!(l.edges(), want);

        // Built again from the rows alone, the index says the same.
        let before = l.edges();
        l.db.with_writer(|w| {
            w.sql().execute("DELETE FROM task_edges", &[])?;
            backfill(w.sql())
        })
        .unwrap();
        assert_eq!(l.edges(), before);
    }

    #[test]
    fn a_task_waits_for_at_most_the_most_blockers() {
        let l = ledger();
        let many: Vec<Finding> = (0..=MAX_BLOCKERS).map(|_| l.task(&[]).unwrap()).collect();
        let named: Vec<&Finding> = many.iter().collect();
        let why = refusal(l.task(&named));
        assert!(
            why.contains(&format!("at most {MAX_BLOCKERS} blockers")),
            "{why}"
        );
        let full = l.task(&named[..MAX_BLOCKERS]).unwrap();
        let why = refusal(l.edge(&full, VerdictKind::Blocked, &many[MAX_BLOCKERS]));
        assert!(why.contains("already waits for"), "{why}");
        // What a refused write was to store is not stored: one task holds every edge.
        assert_eq!(l.edges().len(), MAX_BLOCKERS);
    }
}

//! The open-task index (SPEC.md §The atomic take): which task concepts of an org are open, kept
//! in step with every concept the ledger writes, so the take can find a repository's open tasks
//! without reading every finding and verdict the org ever wrote. It is derived with the client's
//! own readers and standing rule. A task it does not hold is not open (no verdict reopens a
//! closed task; a parked one stays in it); one it holds is weighed again by the take before it
//! is claimed. It also keeps, per
//! task, the claim that the holder rule put first among the task's current claims: if that
//! claim is live now, it holds the task now (no other live claim began earlier).

use serde_json::Value;

use super::concepts::load_concept;
use super::errors::ApiError;
use super::goals::store::task_rows;
use super::sql::{Row, Sql, args};
use metabob_wire::claims::{self, Held};
use metabob_wire::finding::{FINDING_SHAPE, Finding, Severity};
use metabob_wire::repo_identity::finding_keys;
use metabob_wire::verdict::{Standing, VERDICT_SHAPE, Verdict, standing};

// anchor: open-tasks-schema
pub const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS open_tasks (
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    concept_id  TEXT NOT NULL REFERENCES concepts(id),
    seq         INTEGER NOT NULL,
    task_id     TEXT NOT NULL,
    severity    TEXT NOT NULL,
    repo        TEXT NOT NULL,
    files       TEXT NOT NULL,
    -- The claim that held it when its rows last changed (the holder rule's answer then).
    holder      TEXT,
    held_since  INTEGER,
    held_until  INTEGER,
    held_claim  TEXT,
    PRIMARY KEY (org_id, concept_id)
);
CREATE INDEX IF NOT EXISTS open_tasks_by_seq ON open_tasks(org_id, seq);
"#;

/// Version 5: the task's summary, so a take can name the tasks it found held without reading
/// them.
pub const SCHEMA_V5: &str = "ALTER TABLE open_tasks ADD COLUMN summary TEXT NOT NULL DEFAULT '';\n";

/// Version 8: each open task filed under its repository's keys (anchor: open-task-keys), with
/// its severity's rank, its age and when the claim the index saw holding it lapses, so that a
/// take reads its repository's free tasks in order, a page at a time, off one index range
/// whatever else the org has open; and the tasks a claimer holds, by holder.
pub const SCHEMA_V8: &str = r#"
CREATE TABLE IF NOT EXISTS open_task_keys (
    org_id      TEXT NOT NULL,
    repo_key    TEXT NOT NULL,
    concept_id  TEXT NOT NULL,
    rank        INTEGER NOT NULL,
    seq         INTEGER NOT NULL,
    -- The holder's claim lapses then (skew allowance included); NULL when the index saw none.
    lapses      INTEGER,
    PRIMARY KEY (org_id, concept_id, repo_key)
);
-- The free ones (no holder seen) in take order, those whose claims lapsed by when, and those
-- held by when they lapse: one index, so no range a take reads steps over held tasks.
CREATE INDEX IF NOT EXISTS open_task_keys_by_state
    ON open_task_keys(org_id, repo_key, lapses, rank, seq);
CREATE INDEX IF NOT EXISTS open_tasks_by_holder ON open_tasks(org_id, holder);
"#;

/// The most open tasks one take or ready list looks through: far more than a fleet keeps open,
/// and a bound on a take's work whatever an org wrote.
pub const MAX_SCANNED: i64 = 10_000;

/// Keeps the index in step with one concept just written on `conn` (anchor: index-concept): a
/// task recorded open joins it; a verdict that closes a task, or holds its fix pending, takes
/// every task it names out once the task's rows no longer stand open. Claim rows change nothing.
pub fn on_insert(conn: Sql<'_>, org: &str, concept: &Value) -> Result<(), ApiError> {
    on_insert_known(conn, org, concept, None)
}

/// A task whose rows the write already read, under its holder locks, before the verdict row it
/// writes: the index weighs the task from them and the new row instead of reading them again.
pub struct Known<'a> {
    pub task: &'a Finding,
    /// The task's rows as `task_rows` read them, newest first.
    pub rows: &'a [Verdict],
}

/// [`on_insert`] for a verdict about `known`'s task.
pub fn on_insert_known(
    conn: Sql<'_>,
    org: &str,
    concept: &Value,
    known: Option<Known<'_>>,
) -> Result<(), ApiError> {
    match concept.get("shape").and_then(Value::as_str) {
        // A finding names its ids in its header: a row without the word is none, and is not
        // read, which spares most rows of other kinds a full read.
        Some(FINDING_SHAPE) if names_ids(concept) => {
            let Ok(Some(f)) = Finding::read(concept) else {
                return Ok(());
            };
            crate::related::on_insert(conn, org, concept, &f)?;
            if f.is_task() && f.status.is_open() {
                let seq = concept.get("seq").and_then(Value::as_i64).unwrap_or(0);
                // What ordering, the repository test and a take's report need, kept beside the
                // id so that a take weighs every open task without reading one row.
                conn.execute_deferred(
                    "INSERT INTO open_tasks (org_id, concept_id, seq, task_id, severity, repo, files, summary)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT DO NOTHING",
                    args![
                        org,
                        &f.concept_id,
                        seq,
                        f.id(),
                        f.severity.as_str(),
                        f.repo.as_deref().unwrap_or_default(),
                        serde_json::to_string(&f.files).unwrap_or_default(),
                        &f.summary,
                    ],
                )?;
                file_keys(conn, org, &f.concept_id, &f, seq)?;
            }
        }
        Some(VERDICT_SHAPE) => {
            if let Ok(Some(v)) = Verdict::read(concept) {
                let known = known.filter(|k| v.concerns(k.task));
                let skip = known.as_ref().map(|k| k.task.concept_id.as_str());
                for task in tasks_named(conn, org, &v, skip)? {
                    refresh(conn, org, &task)?;
                }
                if let Some(k) = known {
                    // As `task_rows` would read them now: the new row is the newest.
                    let rows: Vec<Verdict> = std::iter::once(v.clone())
                        .chain(k.rows.iter().cloned())
                        .take(crate::goals::store::MAX_TASK_ROWS as usize)
                        .collect();
                    settle(conn, org, k.task, &rows)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// Files an indexed task under its repository's keys ([`finding_keys`]), free of any holder.
fn file_keys(
    conn: Sql<'_>,
    org: &str,
    concept_id: &str,
    f: &Finding,
    seq: i64,
) -> Result<(), ApiError> {
    for key in finding_keys(f.repo.as_deref().unwrap_or_default(), &f.files) {
        conn.execute_deferred(
            "INSERT INTO open_task_keys (org_id, repo_key, concept_id, rank, seq)
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
            args![org, &key, concept_id, f.severity as i64, seq],
        )?;
    }
    Ok(())
}

/// Whether a finding row's content could hold the header line [`Finding::read`] needs (keys
/// are read without case). The cheap test before the full read; it never says no to a finding.
fn names_ids(concept: &Value) -> bool {
    const KEY: &[u8] = b"finding_ids";
    concept
        .get("content")
        .and_then(Value::as_str)
        .is_some_and(|c| {
            c.as_bytes()
                .windows(KEY.len())
                .any(|w| w.eq_ignore_ascii_case(KEY))
        })
}

/// The indexed tasks a verdict names by id, found through the id index; `skip`'s is left out
/// unread.
fn tasks_named(
    conn: Sql<'_>,
    org: &str,
    v: &Verdict,
    skip: Option<&str>,
) -> Result<Vec<Finding>, ApiError> {
    let mut out = Vec::new();
    for id in &v.finding_ids {
        let ids = conn.query(
            "SELECT o.concept_id FROM row_ids r
               JOIN open_tasks o ON o.org_id = r.org_id AND o.concept_id = r.concept_id
               WHERE r.org_id = ?1 AND r.finding_id = ?2 AND r.shape = ?3",
            args![org, id, FINDING_SHAPE],
            |r| r.get::<String>(0),
        )?;
        for cid in ids.into_iter().filter(|c| Some(c.as_str()) != skip) {
            if let Ok(Some(f)) = Finding::read(&load_concept(conn, org, &cid)?)
                && v.concerns(&f)
                && !out.iter().any(|o: &Finding| o.concept_id == f.concept_id)
            {
                out.push(f);
            }
        }
    }
    Ok(out)
}

/// Takes `task` out of the index once its rows close it or hold its fix pending, and keeps who
/// holds it. A parked task stays: the take passes it over, and a reopening makes it open again
/// without a verdict that puts it back.
fn refresh(conn: Sql<'_>, org: &str, task: &Finding) -> Result<(), ApiError> {
    let rows: Vec<Verdict> = task_rows(conn, org, task)?
        .into_iter()
        .map(|r| r.verdict)
        .collect();
    settle(conn, org, task, &rows)
}

/// [`refresh`] from the task's rows, read already.
fn settle(conn: Sql<'_>, org: &str, task: &Finding, rows: &[Verdict]) -> Result<(), ApiError> {
    if matches!(
        standing(rows),
        Standing::Closed { .. } | Standing::Pending { .. }
    ) {
        for table in ["open_tasks", "open_task_keys"] {
            conn.execute_deferred(
                &format!("DELETE FROM {table} WHERE org_id = ?1 AND concept_id = ?2"),
                args![org, &task.concept_id],
            )?;
        }
        return Ok(());
    }
    // Who holds it now, and until when: the holder rule's answer changes only with the rows,
    // and by the clock, which a reader of these columns applies itself.
    let held = claims::holder(rows, i64::MIN);
    conn.execute_deferred(
        "UPDATE open_tasks SET holder = ?3, held_since = ?4, held_until = ?5, held_claim = ?6
           WHERE org_id = ?1 AND concept_id = ?2",
        args![
            org,
            &task.concept_id,
            held.as_ref().map(|h| h.holder.as_str()),
            held.as_ref().map(|h| h.began_ms),
            held.as_ref().map(|h| h.until_ms),
            held.as_ref().map(|h| h.concept_id.as_str()),
        ],
    )?;
    conn.execute_deferred(
        "UPDATE open_task_keys SET lapses = ?3 WHERE org_id = ?1 AND concept_id = ?2",
        args![org, &task.concept_id, held.as_ref().map(claims::lapses_at)],
    )?;
    Ok(())
}

/// The claim the index last saw holding `concept_id`, if it is still live at `now` (the holder
/// rule's skew allowance included); `None` when nobody's claim is, or the task is not indexed.
pub fn held(
    conn: Sql<'_>,
    org: &str,
    concept_id: &str,
    now: i64,
) -> Result<Option<Held>, ApiError> {
    Ok(entry(conn, org, concept_id)?
        .flatten()
        .filter(|h| now < claims::lapses_at(h)))
}

/// Whether the index holds `concept_id` as one of the org's open tasks (`None` when not) and
/// the claim it last saw holding it, live or not: one point read.
pub fn entry(conn: Sql<'_>, org: &str, concept_id: &str) -> Result<Option<Option<Held>>, ApiError> {
    conn.query_opt(
        "SELECT holder, held_since, held_until, held_claim FROM open_tasks
           WHERE org_id = ?1 AND concept_id = ?2",
        args![org, concept_id],
        |r| read_held(r, 0),
    )
}

/// The holder columns (holder, held_since, held_until, held_claim) from column `at` on.
fn read_held(r: &Row<'_>, at: usize) -> Result<Option<Held>, ApiError> {
    Ok(match r.get::<Option<String>>(at)? {
        Some(holder) => Some(Held {
            holder,
            began_ms: r.get(at + 1)?,
            until_ms: r.get(at + 2)?,
            concept_id: r.get(at + 3)?,
        }),
        None => None,
    })
}

/// One indexed open task, as the index keeps it.
pub struct OpenTask {
    pub concept_id: String,
    pub task_id: String,
    pub severity: Severity,
    pub repo: String,
    pub files: Vec<String>,
    pub summary: String,
    /// The claim the index last saw holding it, live or not: the reader applies the clock.
    pub held: Option<Held>,
    /// A blocker holds it back (SPEC.md §Dependencies): the dependency index's count, kept in
    /// this index's own row.
    pub blocked: bool,
    /// Its age: the order of its row among the org's.
    pub seq: i64,
}

/// The columns [`OpenTask::read`] reads, of `open_tasks` as `o`.
const TASK_COLUMNS: &str = "o.concept_id, o.task_id, o.severity, o.repo, o.files, o.summary,
    o.holder, o.held_since, o.held_until, o.held_claim, o.blocked, o.seq";

/// [`free_page`]'s query for `keys` keys: per key, the tasks no holder was seen on, one ordered
/// range of the index, and those whose holder's claim has lapsed (few: a cell that stopped
/// without giving its task back), all in one statement, so a page costs one round trip and
/// never steps over the tasks held at the front of a backlog, however many. The free range is
/// ordered by `lapses` too, all null there, so that it is the index's own order on PostgreSQL,
/// whose planner does not take `IS NULL` for a constant: ordered by rank and age alone, it read
/// and sorted every free task of the key for each page (7 ms a take at 2,000 open tasks).
pub fn free_page_sql(keys: usize) -> String {
    let part = |key: usize, i: usize, state: &str, order: &str| {
        format!(
            "SELECT * FROM (SELECT {TASK_COLUMNS} FROM open_task_keys k
               JOIN open_tasks o ON o.org_id = k.org_id AND o.concept_id = k.concept_id
               WHERE k.org_id = ?1 AND k.repo_key = ?{key} AND {state}
                 AND (k.rank, k.seq) > (?2, ?3) AND o.blocked = 0
               ORDER BY {order} LIMIT ?5) AS page{i}"
        )
    };
    (0..keys)
        .flat_map(|i| {
            [
                part(6 + i, 2 * i, "k.lapses IS NULL", "k.lapses, k.rank, k.seq"),
                part(6 + i, 2 * i + 1, "k.lapses <= ?4", "k.rank, k.seq"),
            ]
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
}

impl OpenTask {
    fn read(r: &Row<'_>) -> Result<OpenTask, ApiError> {
        let severity: String = r.get(2)?;
        let files: String = r.get(4)?;
        let held = read_held(r, 6)?;
        Ok(OpenTask {
            concept_id: r.get(0)?,
            task_id: r.get(1)?,
            severity: severity.parse().unwrap_or(Severity::Info),
            repo: r.get(3)?,
            files: serde_json::from_str(&files).unwrap_or_default(),
            summary: r.get(5)?,
            held,
            blocked: r.get::<i64>(10)? > 0,
            seq: r.get(11)?,
        })
    }
}

/// The org's indexed open tasks, oldest first; at most [`MAX_SCANNED`]. No concept is read.
pub fn open(conn: Sql<'_>, org: &str) -> Result<Vec<OpenTask>, ApiError> {
    conn.query(
        &format!(
            "SELECT {TASK_COLUMNS} FROM open_tasks o WHERE o.org_id = ?1 ORDER BY o.seq LIMIT ?2"
        ),
        args![org, MAX_SCANNED],
        OpenTask::read,
    )
}

/// Where a page of [`free_page`] starts: after this rank and age.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    rank: i64,
    seq: i64,
}

impl Cursor {
    pub const START: Cursor = Cursor { rank: -1, seq: -1 };

    pub fn after(t: &OpenTask) -> Cursor {
        Cursor {
            rank: t.severity as i64,
            seq: t.seq,
        }
    }
}

/// Up to `limit` tasks filed under each of `keys`, after `from` in (severity, age) order, that
/// no claim the index saw holds at `now` and no blocker holds back (anchor: free-page), read
/// off `open_task_keys_by_state` ([`free_page_sql`]). A task filed under two keys comes twice.
pub fn free_page(
    conn: Sql<'_>,
    org: &str,
    keys: &[String],
    from: Cursor,
    now: i64,
    limit: i64,
) -> Result<Vec<OpenTask>, ApiError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut bound = args![org, from.rank, from.seq, now, limit].to_vec();
    bound.extend(keys.iter().map(|k| crate::sql::Arg::from(k.as_str())));
    conn.query(&free_page_sql(keys.len()), &bound, OpenTask::read)
}

/// Up to `limit` tasks filed under `key` whose holder's claim, as the index saw it, is still
/// live at `now`, those that lapse first first.
pub fn held_under(
    conn: Sql<'_>,
    org: &str,
    key: &str,
    now: i64,
    limit: i64,
) -> Result<Vec<OpenTask>, ApiError> {
    conn.query(
        &format!(
            "SELECT {TASK_COLUMNS} FROM open_task_keys k
               JOIN open_tasks o ON o.org_id = k.org_id AND o.concept_id = k.concept_id
               WHERE k.org_id = ?1 AND k.repo_key = ?2 AND k.lapses > ?3
               ORDER BY k.lapses LIMIT ?4"
        ),
        args![org, key, now, limit],
        OpenTask::read,
    )
}

/// The open tasks the index last saw `holder` holding, live or not, oldest first; at most
/// [`MAX_SCANNED`].
pub fn held_by(conn: Sql<'_>, org: &str, holder: &str) -> Result<Vec<OpenTask>, ApiError> {
    let mut held = conn.query(
        &held_by_sql(),
        args![org, holder, MAX_SCANNED],
        OpenTask::read,
    )?;
    held.sort_by_key(|t| t.seq);
    Ok(held)
}

/// [`held_by`]'s query. Ordered in SQL, SQLite's planner would walk every open task of the org
/// by age to keep the order, rather than the few a claimer holds by holder.
pub fn held_by_sql() -> String {
    format!(
        "SELECT {TASK_COLUMNS} FROM open_tasks o WHERE o.org_id = ?1 AND o.holder = ?2 LIMIT ?3"
    )
}

/// Files every indexed task under its keys, with its holder's lapse: run once, when the
/// schema gains them.
pub fn backfill_keys(conn: Sql<'_>) -> Result<(), ApiError> {
    let orgs = conn.query("SELECT DISTINCT org_id FROM open_tasks", &[], |r| {
        r.get::<String>(0)
    })?;
    for org in orgs {
        let tasks = conn.query(
            &format!("SELECT {TASK_COLUMNS} FROM open_tasks o WHERE o.org_id = ?1"),
            args![&org],
            OpenTask::read,
        )?;
        for t in tasks {
            for key in finding_keys(&t.repo, &t.files) {
                conn.execute(
                    "INSERT INTO open_task_keys (org_id, repo_key, concept_id, rank, seq, lapses)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
                    args![
                        &org,
                        &key,
                        &t.concept_id,
                        t.severity as i64,
                        t.seq,
                        t.held.as_ref().map(claims::lapses_at),
                    ],
                )?;
            }
        }
    }
    Ok(())
}

/// Fills the summaries of tasks indexed before version 5.
pub fn backfill_summaries(conn: Sql<'_>) -> Result<(), ApiError> {
    let rows = conn.query("SELECT org_id, concept_id FROM open_tasks", &[], |r| {
        Ok((r.get::<String>(0)?, r.get::<String>(1)?))
    })?;
    for (org, id) in rows {
        if let Ok(Some(f)) = Finding::read(&load_concept(conn, &org, &id)?) {
            conn.execute(
                "UPDATE open_tasks SET summary = ?3 WHERE org_id = ?1 AND concept_id = ?2",
                args![&org, &id, &f.summary],
            )?;
        }
    }
    Ok(())
}

/// Builds the index from what the file already holds: run once, when the schema gains it.
pub fn backfill(conn: Sql<'_>) -> Result<(), ApiError> {
    let tasks = conn.query(
        "SELECT org_id, id FROM concepts WHERE shape = ?1 ORDER BY seq",
        args![FINDING_SHAPE],
        |r| Ok((r.get::<String>(0)?, r.get::<String>(1)?)),
    )?;
    for (org, id) in tasks {
        let concept = load_concept(conn, &org, &id)?;
        on_insert(conn, &org, &concept)?;
        if let Ok(Some(f)) = Finding::read(&concept)
            && indexed(conn, &org, &f.concept_id)?
        {
            refresh(conn, &org, &f)?;
        }
    }
    Ok(())
}

/// Whether the index holds `concept_id` as one of the org's open tasks.
pub fn indexed(conn: Sql<'_>, org: &str, concept_id: &str) -> Result<bool, ApiError> {
    Ok(entry(conn, org, concept_id)?.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;
    use crate::test_support::{TestLedger, finding, ledger};
    use metabob_wire::verdict::{NewVerdict, VerdictKind, VerdictOrigin};

    fn write(l: &TestLedger, pointer: Value) -> Value {
        l.write(pointer).unwrap()["concept"].clone()
    }

    fn verdict(l: &TestLedger, f: &Finding, kind: VerdictKind) {
        let nv = NewVerdict {
            finding: f,
            kind,
            reviewed_by: Some("cell".into()),
            session: "s".into(),
            origin: VerdictOrigin::Remote,
            lines: vec![("claim_minutes", "10".into())],
        };
        write(l, nv.to_pointer());
    }

    fn open_ids(db: &Db) -> Vec<String> {
        db.with_writer(|w| open(w.sql(), "org_a"))
            .unwrap()
            .into_iter()
            .map(|t| t.task_id)
            .collect()
    }

    fn holder_now(db: &Db, f: &Finding) -> Option<String> {
        db.with_writer(|w| {
            held(
                w.sql(),
                "org_a",
                &f.concept_id,
                metabob_process::clock::now_ms(),
            )
        })
        .unwrap()
        .map(|h| h.holder)
    }

    #[test]
    fn the_index_follows_tasks_and_their_closing_verdicts_and_is_rebuilt_from_the_file() {
        let l = ledger();
        let db = &l.db;
        let read = |c: &Value| Finding::read(c).unwrap().unwrap();
        let a = read(&write(&l, finding("A", "task", "").to_pointer()));
        let b = read(&write(&l, finding("B", "task", "").to_pointer()));
        write(&l, finding("not a task", "correctness", "").to_pointer());
        assert_eq!(open_ids(db), [a.id(), b.id()]);

        // A claim and its withdrawal leave a task open, and the index says who holds it; a fix
        // closes it.
        verdict(&l, &a, VerdictKind::Claimed);
        assert_eq!(holder_now(db, &a).as_deref(), Some("cell"));
        assert_eq!(holder_now(db, &b), None);
        verdict(&l, &a, VerdictKind::Withdrawn);
        assert_eq!(holder_now(db, &a), None);
        assert_eq!(open_ids(db).len(), 2);
        verdict(&l, &a, VerdictKind::Fixed);
        assert_eq!(open_ids(db), [b.id()]);

        // Built again from the rows alone, the index says the same.
        db.with_writer(|w| {
            w.sql().execute("DELETE FROM open_tasks", &[])?;
            backfill(w.sql())
        })
        .unwrap();
        assert_eq!(open_ids(db), [b.id()]);
        // Another org's index is its own.
        assert!(
            db.with_writer(|w| open(w.sql(), "org_b"))
                .unwrap()
                .is_empty()
        );
    }
}

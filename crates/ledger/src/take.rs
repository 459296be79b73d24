//! `taskTake_write`: the atomic take (SPEC.md §The atomic take). The ledger owns its writer, so
//! it can read a task's claim rows and write a claim in the one write that decides it: no other
//! write comes between the read and the claim, and no read-back or withdrawal is needed. The
//! rows it writes are the claim row and link `task pull`'s read-back path writes, composed by
//! the same code, so every reader weighs them with the same holder rule.

use serde_json::{Value, json};

use super::concepts::{CreateConcept, Link, load_concept};
use super::db::Writer;
use super::errors::ApiError;
use super::goals::store::task_rows;
use super::input::Fields;
use super::open_tasks;
use super::sql::Sql;
use super::task_edges;
use metabob_wire::claims::{
    self, DEFAULT_CLAIM_MINUTES, Held, MAX_CLAIM_MINUTES, MAX_TAKE_CANDIDATES,
};
use metabob_wire::finding::{Finding, plain_concept_id};
use metabob_wire::repo_identity::{finding_keys, vessel_aliases};
use metabob_wire::verdict::{Standing, Verdict, failed_by, link_pointer, standing};

/// The longest claimer or session name a take accepts, in characters.
const MAX_NAME_CHARS: usize = 512;
/// The longest repository identity a take accepts, as the board's origin.
const MAX_REPOSITORY_BYTES: usize = 2048;
/// The most tasks held by others a take that claimed nothing names, those whose claims end
/// first.
const MAX_WAITING: usize = 50;
/// The repository's free tasks one page of a take weighs: enough that the cells taking at once
/// rarely pick the same one, few enough that a page costs the same whatever the backlog.
const TAKE_PAGE: i64 = 64;

pub struct TakeRequest {
    candidates: Vec<String>,
    /// The repository whose other open tasks are looked at once the candidates are not free.
    repository: Option<String>,
    /// Tasks the caller will not take (it gave them back): never handed out from the
    /// repository's.
    skip: Vec<String>,
    vessel: String,
    session: String,
    minutes: i64,
    claim: Option<Value>,
}

fn name_field(d: &Fields<'_>, name: &str) -> Result<String, ApiError> {
    let v = d.req_str(name)?;
    if v.chars().count() > MAX_NAME_CHARS || v.chars().any(char::is_control) {
        return Err(ApiError::bad(format!(
            "take.{name}: one line of at most {MAX_NAME_CHARS} characters"
        )));
    }
    Ok(v.trim().to_string())
}

/// Where the take stopped on one candidate.
enum Look {
    /// Nobody else holds it: claim it (`renew` when the claimer already does).
    Free {
        task: Box<Open>,
        rows: Vec<Verdict>,
        renew: bool,
    },
    Held(Held),
    Closed,
    /// This claimer failed it (a `task failed` row since it was last reopened): another cell
    /// may do it, this one is not offered it again.
    FailedHere,
    /// Another write is deciding its holder at this moment (another replica's, on PostgreSQL).
    Busy,
    /// A blocker holds it back, and this claimer does not hold it already.
    Blocked,
}

impl TakeRequest {
    // anchor: parse-take
    pub fn parse(p: &Fields<'_>, claim: Option<&Value>) -> Result<Self, ApiError> {
        let d = p.req_obj("take")?;
        let candidates = d.opt_str_list("candidates")?.unwrap_or_default();
        if candidates.len() > MAX_TAKE_CANDIDATES {
            return Err(ApiError::bad(format!(
                "take.candidates: at most {MAX_TAKE_CANDIDATES} concept ids"
            )));
        }
        let repository = d
            .opt_str("repository")?
            .map(str::trim)
            .filter(|r| !r.is_empty());
        if repository.is_some_and(|r| r.len() > MAX_REPOSITORY_BYTES) {
            return Err(ApiError::bad(format!(
                "take.repository: longer than {MAX_REPOSITORY_BYTES} bytes"
            )));
        }
        if candidates.is_empty() && repository.is_none() {
            return Err(ApiError::bad(
                "take: name candidates, a repository, or both",
            ));
        }
        let skip = d.opt_str_list("skip")?.unwrap_or_default();
        if skip.len() > MAX_TAKE_CANDIDATES {
            return Err(ApiError::bad(format!(
                "take.skip: at most {MAX_TAKE_CANDIDATES} concept ids"
            )));
        }
        Ok(TakeRequest {
            repository: repository.map(str::to_owned),
            skip: skip.iter().map(|c| plain_concept_id(c)).collect(),
            candidates: candidates.iter().map(|c| plain_concept_id(c)).collect(),
            vessel: name_field(&d, "vessel_id")?,
            session: name_field(&d, "session")?,
            minutes: d
                .opt_i64_in("claim_minutes", 1, MAX_CLAIM_MINUTES)?
                .unwrap_or(DEFAULT_CLAIM_MINUTES),
            claim: claim.cloned(),
        })
    }

    /// Claims the first candidate nobody else holds, in the candidates' order, then the
    /// repository's other open tasks (one this claimer holds first, then in its own order),
    /// and names the ones passed over before it (anchor: run-take). Runs inside one write: what it read cannot change
    /// before its claim is written.
    pub fn run(&self, w: &mut Writer, org: &str) -> Result<Value, ApiError> {
        let now = w.tick()?;
        let mut passed = Vec::new();
        for id in &self.candidates {
            match self.look(w.sql(), org, id, now)? {
                Look::Free { task, rows, renew } => {
                    return self.take(w, org, id, (task, rows, renew), now, passed);
                }
                Look::Held(h) => {
                    passed.push(json!({ "concept_id": id, "outcome": "held", "held": h }))
                }
                Look::Closed => passed.push(json!({ "concept_id": id, "outcome": "closed" })),
                Look::FailedHere => {
                    passed.push(json!({ "concept_id": id, "outcome": "failed_here" }))
                }
                Look::Busy => passed.push(json!({ "concept_id": id, "outcome": "busy" })),
                Look::Blocked => passed.push(json!({ "concept_id": id, "outcome": "blocked" })),
            }
        }
        // Read only once the named ones are taken. What is passed over here the caller never
        // saw: only the tasks others hold are reported, as `waiting`, so a caller that named
        // nothing still learns when to look again.
        let keys = self.repository_keys();
        let mut waiting: Vec<(open_tasks::OpenTask, Held)> = Vec::new();
        // A task this claimer holds comes first, so a restarted cell resumes its own work.
        let mine = open_tasks::held_by(w.sql(), org, &self.vessel)?
            .into_iter()
            .filter(|t| {
                t.held.as_ref().is_some_and(|h| now < claims::lapses_at(h))
                    && self.looks_at(t, &keys)
            });
        for t in mine.collect::<Vec<_>>() {
            match self.weigh(w.sql(), org, &t.concept_id, now)? {
                Look::Free { task, rows, renew } => {
                    return self.take(w, org, &t.concept_id, (task, rows, renew), now, passed);
                }
                Look::Held(h) => waiting.push((t, h)),
                Look::Closed | Look::FailedHere | Look::Busy | Look::Blocked => {}
            }
        }
        // Then the free ones, a page at a time: the index left out those others hold and
        // those a blocker holds back, so the first one weighed is nearly always taken.
        let mut cursor = open_tasks::Cursor::START;
        let mut scanned = 0;
        while scanned < open_tasks::MAX_SCANNED {
            let page = self.page(w.sql(), org, &keys, &mut cursor, now)?;
            if page.is_empty() {
                break;
            }
            scanned += page.len() as i64;
            for t in page {
                match self.weigh(w.sql(), org, &t.concept_id, now)? {
                    Look::Free { task, rows, renew } => {
                        return self.take(w, org, &t.concept_id, (task, rows, renew), now, passed);
                    }
                    Look::Held(h) => waiting.push((t, h)),
                    Look::Closed | Look::FailedHere | Look::Busy | Look::Blocked => {}
                }
            }
        }
        // Nothing came free: name those whose claims end first. A blocked task is not worth
        // waiting for.
        for key in &keys {
            for t in open_tasks::held_under(w.sql(), org, key, now, MAX_WAITING as i64)? {
                let others = t.held.clone().filter(|h| h.holder != self.vessel);
                if let Some(h) = others
                    && !t.blocked
                    && !self.passes_over(&t)
                    && !waiting.iter().any(|(o, _)| o.concept_id == t.concept_id)
                {
                    waiting.push((t, h));
                }
            }
        }
        waiting.sort_by_key(|(_, h)| claims::lapses_at(h));
        let waiting: Vec<Value> = waiting
            .into_iter()
            .take(MAX_WAITING)
            .map(|(t, h)| {
                json!({
                    "concept_id": t.concept_id, "task_id": t.task_id, "summary": t.summary,
                    "held": h,
                })
            })
            .collect();
        Ok(json!({ "taken": null, "passed": passed, "waiting": waiting }))
    }

    /// Claims the free task `id` and answers the take.
    fn take(
        &self,
        w: &mut Writer,
        org: &str,
        id: &str,
        (task, rows, renew): (Box<Open>, Vec<Verdict>, bool),
        now: i64,
        passed: Vec<Value>,
    ) -> Result<Value, ApiError> {
        let Open { finding, concept } = *task;
        let held = self.claim(w, org, &finding, rows, now)?;
        Ok(json!({
            "taken": {
                "concept_id": id,
                "outcome": if renew { "renewed" } else { "claimed" },
                "held": held,
                "task": concept,
            },
            "passed": passed,
        }))
    }

    /// The index keys of the repository's tasks ([`vessel_aliases`], aliases included); none
    /// without a repository.
    fn repository_keys(&self) -> Vec<String> {
        self.repository
            .as_deref()
            .and_then(|r| vessel_aliases(r).index_keys())
            .unwrap_or_default()
    }

    /// Whether `t` is one of the repository's tasks this take may hand out.
    fn looks_at(&self, t: &open_tasks::OpenTask, keys: &[String]) -> bool {
        !self.passes_over(t)
            && finding_keys(&t.repo, &t.files)
                .iter()
                .any(|k| keys.contains(k))
    }

    /// A task the caller named (weighed already) or gave back.
    fn passes_over(&self, t: &open_tasks::OpenTask) -> bool {
        self.candidates.contains(&t.concept_id) || self.skip.contains(&t.concept_id)
    }

    /// The next page of the repository's free tasks after `cursor` (anchor: take-page): the
    /// most severe and then oldest [`TAKE_PAGE`] of them, in this claimer's own rendezvous order
    /// within each severity, so cells taking at once spread over the page instead of all trying
    /// its first task.
    fn page(
        &self,
        conn: Sql<'_>,
        org: &str,
        keys: &[String],
        cursor: &mut open_tasks::Cursor,
        now: i64,
    ) -> Result<Vec<open_tasks::OpenTask>, ApiError> {
        let mut page = open_tasks::free_page(conn, org, keys, *cursor, now, TAKE_PAGE)?;
        // A task filed under two keys is one task; each key's page reaches past the merged
        // page's end, so one cursor serves them all.
        page.sort_by_key(|t| (t.severity, t.seq));
        page.dedup_by(|a, b| a.concept_id == b.concept_id);
        page.truncate(TAKE_PAGE as usize);
        if let Some(last) = page.last() {
            *cursor = open_tasks::Cursor::after(last);
        }
        page.retain(|t| !self.passes_over(t));
        page.sort_by_cached_key(|t| {
            (
                t.severity,
                std::cmp::Reverse(claims::rendezvous(&self.vessel, &t.task_id)),
            )
        });
        Ok(page)
    }

    fn look(&self, conn: Sql<'_>, org: &str, id: &str, now: i64) -> Result<Look, ApiError> {
        // A task the index does not hold is not open: passed without reading its rows, so a
        // caller whose recall still shows closed tasks as open costs one point read for each.
        let Some(held) = open_tasks::entry(conn, org, id)? else {
            return Ok(Look::Closed);
        };
        // Held by another, by the claim the index saw when the task's rows last changed and
        // still live now: that answer is the holder rule's, so the rows need not be read.
        if let Some(h) = held
            && now < claims::lapses_at(&h)
            && h.holder != self.vessel
        {
            return Ok(Look::Held(h));
        }
        self.weigh(conn, org, id, now)
    }

    /// Weighs an indexed task by its rows: the holder rule, its standing and who failed it.
    fn weigh(&self, conn: Sql<'_>, org: &str, id: &str, now: i64) -> Result<Look, ApiError> {
        let Some(task) = open_task(conn, org, id)? else {
            return Ok(Look::Closed);
        };
        // Another replica is writing a row about this task right now (PostgreSQL): it is not
        // free for this take, and waiting could only lose. Once locked, the rows read below
        // hold every row about it that committed before.
        for tid in &task.finding.finding_ids {
            if !conn.try_lock_holder(org, tid)? {
                return Ok(Look::Busy);
            }
        }
        self.judge(conn, org, task, now)
    }

    /// The take's verdict on an open task, from its rows: closed or parked, failed by this
    /// claimer, held by another, blocked, or free.
    fn judge(&self, conn: Sql<'_>, org: &str, task: Open, now: i64) -> Result<Look, ApiError> {
        let rows: Vec<Verdict> = task_rows(conn, org, &task.finding)?
            .into_iter()
            .map(|r| r.verdict)
            .collect();
        // A parked task will not come free either, until it is reopened.
        if matches!(
            standing(&rows),
            Standing::Closed { .. } | Standing::Parked { .. }
        ) {
            return Ok(Look::Closed);
        }
        if failed_by(&rows).contains(&self.vessel) {
            return Ok(Look::FailedHere);
        }
        Ok(match claims::holder(&rows, now) {
            Some(h) if h.holder != self.vessel => Look::Held(h),
            // A claim this claimer holds is renewed though a blocker came since: the edge does
            // not take back work begun (SPEC.md §Dependencies).
            None if task_edges::blocked(conn, org, task.finding.id())? => Look::Blocked,
            mine => Look::Free {
                task: Box::new(task),
                rows,
                renew: mine.is_some(),
            },
        })
    }

    /// Writes the claim row and its link, and answers the claim that now holds the task.
    fn claim(
        &self,
        w: &mut Writer,
        org: &str,
        task: &Finding,
        mut rows: Vec<Verdict>,
        now: i64,
    ) -> Result<Held, ApiError> {
        let row = claims::claim_row(task, &self.vessel, &self.session, self.minutes, now);
        let written =
            CreateConcept::parse(&Fields::composed(&row.to_pointer()), self.claim.as_ref())?
                // The row names the task's ids, whose holder locks `look` took, and the rows
                // read under them are the index's too.
                .insert_known(
                    w.sql(),
                    org,
                    now,
                    Some(open_tasks::Known { task, rows: &rows }),
                )?;
        let verdict = Verdict::read(&written).ok().flatten().ok_or_else(|| {
            ApiError::Internal("the claim row written does not read as a claim".into())
        })?;
        let link = link_pointer(&verdict.concept_id, &task.concept_id);
        Link::parse(&Fields::composed(&link), self.claim.as_ref())?.insert_fresh(w, org, now)?;
        rows.push(verdict);
        match claims::holder(&rows, now) {
            Some(h) if h.holder == self.vessel => Ok(h),
            _ => Err(ApiError::Internal(
                "the claim written does not hold the task".into(),
            )),
        }
    }
}

/// An open task as read: the client's reading, and the row a take answers with.
struct Open {
    finding: Finding,
    concept: Value,
}

/// The open task `id` names, read as the client reads it; `None` for anything else.
fn open_task(conn: Sql<'_>, org: &str, id: &str) -> Result<Option<Open>, ApiError> {
    let concept = match load_concept(conn, org, id) {
        Ok(c) => c,
        Err(ApiError::ConceptNotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(match Finding::read(&concept) {
        Ok(Some(finding)) if finding.is_task() && finding.status.is_open() => {
            Some(Open { finding, concept })
        }
        _ => None,
    })
}

/// `taskReady {origin?}` (anchor: task-ready): every task a take would hand out now to a cell
/// that failed none and holds none, weighed by the take's own code, most severe first and then
/// oldest. Reads only: what `task list --ready` prints.
pub struct ReadyRequest {
    repository: Option<String>,
}

/// The most tasks `taskReady` names.
pub const MAX_READY: usize = 1000;

impl ReadyRequest {
    pub fn parse(p: &Fields<'_>) -> Result<Self, ApiError> {
        Ok(ReadyRequest {
            repository: super::board::origin_identity(p)?,
        })
    }

    pub fn run(self, conn: Sql<'_>, org: &str, now: i64) -> Result<Value, ApiError> {
        // A claimer that is nobody: no task is its own, and it failed none.
        let nobody = TakeRequest {
            candidates: Vec::new(),
            repository: self.repository.clone(),
            skip: Vec::new(),
            vessel: String::new(),
            session: String::new(),
            minutes: DEFAULT_CLAIM_MINUTES,
            claim: None,
        };
        let aliases = self.repository.as_deref().map(vessel_aliases);
        let mut ready = Vec::new();
        let mut more = false;
        for t in open_tasks::open(conn, org)? {
            if t.blocked
                || t.held.as_ref().is_some_and(|h| now < claims::lapses_at(h))
                || aliases
                    .as_ref()
                    .is_some_and(|a| !a.belongs(&t.repo, &t.files))
            {
                continue;
            }
            let Some(task) = open_task(conn, org, &t.concept_id)? else {
                continue;
            };
            if let Look::Free { .. } = nobody.judge(conn, org, task, now)? {
                if ready.len() == MAX_READY {
                    more = true;
                    break;
                }
                ready.push(t);
            }
        }
        ready.sort_by_key(|t| t.severity);
        let tasks: Vec<Value> = ready
            .iter()
            .map(|t| {
                json!({
                    "concept_id": t.concept_id, "task_id": t.task_id, "summary": t.summary,
                    "severity": t.severity, "repository": t.repo,
                })
            })
            .collect();
        Ok(json!({ "ready": tasks, "truncated": more }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::args;
    use crate::test_support::{finding, ledger, query_plan};

    fn claimer(vessel: &str) -> TakeRequest {
        TakeRequest {
            candidates: Vec::new(),
            repository: Some("example.test/o/app".into()),
            skip: Vec::new(),
            vessel: vessel.into(),
            session: "s".into(),
            minutes: DEFAULT_CLAIM_MINUTES,
            claim: None,
        }
    }

    #[test]
    fn cells_taking_at_once_spread_over_a_page_and_the_page_is_read_off_the_key_index() {
        let l = ledger();
        for i in 0..TAKE_PAGE {
            l.write(finding(&format!("step {i}"), "task", "").to_pointer())
                .unwrap();
        }
        let first = |vessel: &str| {
            l.db.with_writer(|w| {
                let c = claimer(vessel);
                let keys = c.repository_keys();
                let mut cursor = open_tasks::Cursor::START;
                let page = c.page(w.sql(), "org_a", &keys, &mut cursor, 0)?;
                assert_eq!(page.len(), TAKE_PAGE as usize);
                Ok(page[0].concept_id.clone())
            })
            .unwrap()
        };
        // Issue 14's guarantee: 32 cells would each try a different task first, nearly all.
        let mut firsts: Vec<String> = (0..32).map(|i| first(&format!("cell-{i}"))).collect();
        firsts.sort();
        firsts.dedup();
        assert!(
            firsts.len() >= 20,
            "only {} distinct first tries",
            firsts.len()
        );
        // The same cell always tries the same one first.
        assert_eq!(first("cell-7"), first("cell-7"));

        let plan =
            l.db.with_writer(|w| {
                Ok(query_plan(
                    w.sql(),
                    &open_tasks::free_page_sql(2),
                    args!["org_a", 0_i64, 0_i64, 0_i64, 1_i64, "r:x", "v:x"],
                ))
            })
            .unwrap();
        // Per key, the free ones are one ordered range, no sort; the lapsed ones a range too.
        let range = |state: &str| {
            plan.iter()
                .filter(|p| {
                    p.contains(&format!(
                        "INDEX open_task_keys_by_state (org_id=? AND repo_key=? AND {state}"
                    ))
                })
                .count()
        };
        assert_eq!(range("lapses=? AND (rank,seq)>(?,?))"), 2, "{plan:?}");
        assert_eq!(range("lapses<?)"), 2, "{plan:?}");
        // The tasks a claimer holds, by holder: not every open task of the org by age.
        let plan =
            l.db.with_writer(|w| {
                Ok(query_plan(
                    w.sql(),
                    &open_tasks::held_by_sql(),
                    args!["org_a", "cell-7", 1_i64],
                ))
            })
            .unwrap();
        assert_eq!(
            plan,
            ["SEARCH o USING INDEX open_tasks_by_holder (org_id=? AND holder=?)"]
        );
    }
}

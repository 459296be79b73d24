//! The agent-resolver queue (SPEC.md §Agent-resolver queue): the solicitations a local caller of
//! the loopback resolver queued for this vessel, and the answers the agent gave them, in SQLite.
//! Rows are keyed by the resolver's vessel identity, so a later session with the same identity
//! resumes the same queue and re-delivers what an earlier one could not send.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};

use metabob_wire::env::Env;
use metabob_wire::util::{now_ms, uuid_v4};

/// A question is markdown a person or agent reads; more than this is refused, not cut.
pub const QUESTION_MAX_BYTES: usize = 64 * 1024;
/// An answer goes back to goal-host in one write; more than this is refused.
pub const ANSWER_MAX_BYTES: usize = 64 * 1024;
/// A solicitation or dispatch id longer than this is refused.
pub const ID_MAX_BYTES: usize = 200;
/// A solicitation without `timeout_ms` may be answered for five minutes.
pub const DEFAULT_TIMEOUT_MS: u64 = 300_000;
/// No solicitation waits longer than a day; goal-host's own deadlines are minutes.
pub const TIMEOUT_MAX_MS: u64 = 86_400_000;
/// Open tasks one vessel may hold: a local caller looping on the resolver fills no disk.
pub const QUEUE_MAX: usize = 1000;
/// The most rows one queue read returns, whatever the caller asks.
pub const READ_MAX: usize = 100;
/// Resolved and expired rows older than this are dropped when the queue opens, once their
/// answer no longer waits for delivery.
const RETAIN_MS: i64 = 30 * 86_400_000;

#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    #[error("the agent queue at {path} could not be opened: {cause}")]
    Open { path: String, cause: String },
    #[error("the agent queue failed: {0}")]
    Sql(#[from] rusqlite::Error),
    /// The solicitation or resolution was malformed; nothing was stored.
    #[error("{0}")]
    Invalid(String),
    #[error(
        "the agent queue holds {QUEUE_MAX} open tasks for this vessel; answer or let some expire \
         before queueing more"
    )]
    Full,
    #[error("no task {0} is queued for this vessel")]
    UnknownTask(String),
    #[error("task {id} expired at {at}: its solicitation timed out; nothing was recorded or sent")]
    Expired { id: String, at: String },
    #[error(
        "task {id} was already resolved ({outcome}) and its answer is {delivery}; nothing was \
         recorded or sent"
    )]
    AlreadyResolved {
        id: String,
        outcome: &'static str,
        delivery: &'static str,
    },
}

/// A solicitation to queue, as the loopback resolver read it from a `human_input` pointer.
#[derive(Clone, Debug, Default)]
pub struct Solicitation {
    /// `solicitation_id` (or `id`); one is generated when absent or blank. Queueing an id this
    /// vessel already holds is idempotent: the first question stands.
    pub id: Option<String>,
    /// Required and non-blank, at most [`QUESTION_MAX_BYTES`].
    pub question_markdown: String,
    /// How long the task may be answered; [`DEFAULT_TIMEOUT_MS`] when absent, 1 ms to
    /// [`TIMEOUT_MAX_MS`].
    pub timeout_ms: Option<u64>,
    /// The goal-host dispatch that asked, when the caller names it (blank reads as absent).
    pub dispatch_id: Option<String>,
}

/// What queueing answered: the id the task is known by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    pub solicitation_id: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    Pending,
    /// Listed to a session; not exclusive, it lists again until resolved or expired.
    Claimed,
    Resolved,
    Expired,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Claimed => "claimed",
            TaskState::Resolved => "resolved",
            TaskState::Expired => "expired",
        }
    }

    /// A state this code never writes reads as expired: a tampered row is never offered or
    /// answered.
    fn parse(s: &str) -> TaskState {
        match s {
            "pending" => TaskState::Pending,
            "claimed" => TaskState::Claimed,
            "resolved" => TaskState::Resolved,
            _ => TaskState::Expired,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Answered,
    Declined,
    /// The question was not answerable as asked.
    InsufficientContext,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::Declined => "declined",
            Outcome::InsufficientContext => "insufficient_context",
        }
    }

    pub fn parse(s: &str) -> Option<Outcome> {
        match s {
            "answered" => Some(Outcome::Answered),
            "declined" => Some(Outcome::Declined),
            "insufficient_context" => Some(Outcome::InsufficientContext),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Recorded, not yet tried.
    Stored,
    Delivered,
    /// Tried and failed; `last_error` says why. Re-sent at the next session's start.
    Undelivered,
}

impl Delivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Stored => "stored",
            Delivery::Delivered => "delivered",
            Delivery::Undelivered => "undelivered",
        }
    }

    fn parse(s: &str) -> Delivery {
        match s {
            "stored" => Delivery::Stored,
            "undelivered" => Delivery::Undelivered,
            // Anything else is never re-sent: a tampered row sends nothing.
            _ => Delivery::Delivered,
        }
    }
}

/// One queued solicitation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    pub id: String,
    pub dispatch_id: Option<String>,
    pub question: String,
    pub created_ms: i64,
    pub deadline_ms: i64,
    pub state: TaskState,
    /// The session that last listed it.
    pub claimed_by: Option<String>,
}

/// What one pull saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pulled {
    /// Oldest first, each now claimed by the pulling session.
    pub tasks: Vec<Task>,
    /// Tasks this pull found past their deadline and expired.
    pub expired: usize,
    /// Open tasks beyond the limit.
    pub more: usize,
}

/// The agent's resolution of one task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolution {
    pub outcome: Outcome,
    /// Required (non-blank) when answered; optional otherwise.
    pub answer: Option<String>,
}

/// A recorded answer and how its delivery stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub task_id: String,
    pub outcome: Outcome,
    /// Empty when the resolution gave none.
    pub answer: String,
    pub recorded_ms: i64,
    pub delivery: Delivery,
    pub last_error: Option<String>,
}

pub struct Sidecar {
    conn: Mutex<Connection>,
    path: PathBuf,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tasks (
    vessel TEXT NOT NULL,
    id TEXT NOT NULL,
    dispatch_id TEXT,
    question TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    deadline_ms INTEGER NOT NULL,
    state TEXT NOT NULL,
    claimed_by TEXT,
    claimed_ms INTEGER,
    PRIMARY KEY (vessel, id)
);
CREATE INDEX IF NOT EXISTS tasks_open ON tasks(vessel, state, created_ms);
CREATE TABLE IF NOT EXISTS answers (
    vessel TEXT NOT NULL,
    task_id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    answer TEXT NOT NULL,
    recorded_ms INTEGER NOT NULL,
    delivery TEXT NOT NULL,
    last_error TEXT,
    delivered_ms INTEGER,
    PRIMARY KEY (vessel, task_id)
);
CREATE INDEX IF NOT EXISTS answers_delivery ON answers(vessel, delivery, recorded_ms);
";

/// The vessel whose queue a session reads and a resolver fills: its identity, else one shared
/// stand-in, so a process without one still reads what it queued (anchor: queue_vessel).
pub fn queue_vessel(vessel: Option<&str>) -> String {
    vessel.unwrap_or("metabob-mcp-unidentified").to_string()
}

/// `METABOB_SIDECAR`, else `~/.metabob/sidecar.db` (anchor: sidecar_path).
pub fn sidecar_path(env: &Env) -> Option<PathBuf> {
    if let Some(p) = env.get("METABOB_SIDECAR") {
        return Some(PathBuf::from(p));
    }
    env.home().map(|h| h.join(".metabob").join("sidecar.db"))
}

/// Task columns, each text bounded in SQL so a tampered row never loads whole
/// (SQLite's `substr` counts characters; [`cut`] then bounds the bytes).
const TASK_COLUMNS: &str = "substr(id, 1, 200), substr(dispatch_id, 1, 200), \
                            substr(question, 1, 65536), created_ms, deadline_ms, \
                            substr(state, 1, 16), substr(claimed_by, 1, 200)";

const ANSWER_COLUMNS: &str = "substr(task_id, 1, 200), substr(outcome, 1, 32), \
                              substr(answer, 1, 65536), recorded_ms, substr(delivery, 1, 16), \
                              substr(last_error, 1, 1000)";

/// `s` cut to at most `max` bytes on a character boundary.
fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

fn task_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Task> {
    let opt = |i: usize| -> rusqlite::Result<Option<String>> {
        Ok(r.get::<_, Option<String>>(i)?.map(|s| cut(s, ID_MAX_BYTES)))
    };
    Ok(Task {
        id: cut(r.get(0)?, ID_MAX_BYTES),
        dispatch_id: opt(1)?,
        question: cut(r.get(2)?, QUESTION_MAX_BYTES),
        created_ms: r.get(3)?,
        deadline_ms: r.get(4)?,
        state: TaskState::parse(&r.get::<_, String>(5)?),
        claimed_by: opt(6)?,
    })
}

fn answer_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Answer> {
    let outcome: String = r.get(1)?;
    Ok(Answer {
        task_id: cut(r.get(0)?, ID_MAX_BYTES),
        // Reads filter on the outcomes this code writes; the fallback only keeps a row readable.
        outcome: Outcome::parse(&outcome).unwrap_or(Outcome::Declined),
        answer: cut(r.get(2)?, ANSWER_MAX_BYTES),
        recorded_ms: r.get(3)?,
        delivery: Delivery::parse(&r.get::<_, String>(4)?),
        last_error: r.get::<_, Option<String>>(5)?.map(|s| cut(s, 1000)),
    })
}

/// An id a caller gave: blank reads as absent; otherwise bounded, with no whitespace or control
/// characters, since it is shown to the agent and sent back to goal-host as given.
fn caller_id(what: &str, id: Option<&str>) -> Result<Option<String>, SidecarError> {
    let Some(id) = id.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    if id.len() > ID_MAX_BYTES {
        return Err(SidecarError::Invalid(format!(
            "{what} is longer than {ID_MAX_BYTES} bytes"
        )));
    }
    if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(SidecarError::Invalid(format!(
            "{what} holds whitespace or control characters"
        )));
    }
    Ok(Some(id.to_string()))
}

/// A text the agent or a caller wrote: bounded, with no NUL (SQLite would cut the text there).
fn text(what: &str, s: &str, max: usize) -> Result<(), SidecarError> {
    if s.len() > max {
        return Err(SidecarError::Invalid(format!(
            "{what} is {} bytes; at most {max} are accepted",
            s.len()
        )));
    }
    if s.contains('\0') {
        return Err(SidecarError::Invalid(format!(
            "{what} holds a NUL character"
        )));
    }
    Ok(())
}

/// The checked fields of a solicitation: (id when given, question, timeout, dispatch id).
fn checked(s: &Solicitation) -> Result<(Option<String>, u64, Option<String>), SidecarError> {
    if s.question_markdown.trim().is_empty() {
        return Err(SidecarError::Invalid(
            "question_markdown is required and must not be blank".into(),
        ));
    }
    text(
        "question_markdown",
        &s.question_markdown,
        QUESTION_MAX_BYTES,
    )?;
    let timeout = s.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
    if !(1..=TIMEOUT_MAX_MS).contains(&timeout) {
        return Err(SidecarError::Invalid(format!(
            "timeout_ms must be 1 to {TIMEOUT_MAX_MS} (a day); it was {timeout}"
        )));
    }
    Ok((
        caller_id("solicitation_id", s.id.as_deref())?,
        timeout,
        caller_id("dispatch_id", s.dispatch_id.as_deref())?,
    ))
}

impl Sidecar {
    pub fn open(path: &Path) -> Result<Sidecar, SidecarError> {
        let conn = super::open_sqlite(path, SCHEMA).map_err(|cause| SidecarError::Open {
            path: path.display().to_string(),
            cause,
        })?;
        let sidecar = Sidecar {
            conn: Mutex::new(conn),
            path: path.to_path_buf(),
        };
        sidecar.prune(now_ms())?;
        Ok(sidecar)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, SidecarError>,
    ) -> Result<T, SidecarError> {
        let conn = self
            .conn
            .lock()
            .expect("no sidecar call panics while holding the connection");
        f(&conn)
    }

    /// Drops finished rows past retention; an answer still waiting for delivery keeps its task.
    fn prune(&self, now: i64) -> Result<(), SidecarError> {
        let before = now.saturating_sub(RETAIN_MS);
        self.with(|c| {
            c.execute(
                "DELETE FROM answers WHERE delivery = 'delivered' AND recorded_ms < ?1",
                [before],
            )?;
            c.execute(
                "DELETE FROM tasks WHERE state IN ('resolved', 'expired') AND created_ms < ?1 \
                 AND NOT EXISTS (SELECT 1 FROM answers a \
                                 WHERE a.vessel = tasks.vessel AND a.task_id = tasks.id)",
                [before],
            )?;
            Ok(())
        })
    }

    /// Queues a solicitation for `vessel`'s agent (anchor: sidecar_enqueue): the loopback
    /// resolver's one call for a `human_input` impulse. Validates `s` first (nothing is stored
    /// on [`SidecarError::Invalid`]); generates an id when none is given; an id this vessel
    /// already holds answers the same [`Ack`] and changes nothing. [`SidecarError::Full`] when
    /// the vessel holds [`QUEUE_MAX`] open tasks.
    pub fn enqueue(&self, vessel: &str, s: Solicitation) -> Result<Ack, SidecarError> {
        self.enqueue_at(vessel, s, now_ms())
    }

    /// [`Sidecar::enqueue`] on a given clock (epoch ms).
    pub fn enqueue_at(&self, vessel: &str, s: Solicitation, now: i64) -> Result<Ack, SidecarError> {
        let (id, timeout, dispatch) = checked(&s)?;
        let id = id.unwrap_or_else(uuid_v4);
        let deadline = now.saturating_add(i64::try_from(timeout).unwrap_or(i64::MAX));
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            let held: Option<i64> = tx
                .query_row(
                    "SELECT 1 FROM tasks WHERE vessel = ?1 AND id = ?2",
                    params![vessel, id],
                    |r| r.get(0),
                )
                .optional()?;
            if held.is_none() {
                let open: i64 = tx.query_row(
                    "SELECT count(*) FROM tasks WHERE vessel = ?1 \
                     AND state IN ('pending', 'claimed') AND deadline_ms > ?2",
                    params![vessel, now],
                    |r| r.get(0),
                )?;
                if usize::try_from(open).unwrap_or(usize::MAX) >= QUEUE_MAX {
                    return Err(SidecarError::Full);
                }
                tx.execute(
                    "INSERT INTO tasks (vessel, id, dispatch_id, question, created_ms, \
                     deadline_ms, state) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending')",
                    params![vessel, id, dispatch, s.question_markdown, now, deadline],
                )?;
            }
            tx.commit()?;
            Ok(Ack {
                solicitation_id: id,
            })
        })
    }

    /// Expires `vessel`'s tasks past their deadline, then lists up to `limit` (at most
    /// [`READ_MAX`]) pending and claimed tasks oldest first, marking each claimed by `session`.
    pub fn pull(&self, vessel: &str, session: &str, limit: usize) -> Result<Pulled, SidecarError> {
        self.pull_at(vessel, session, limit, now_ms())
    }

    /// [`Sidecar::pull`] on a given clock (epoch ms).
    pub fn pull_at(
        &self,
        vessel: &str,
        session: &str,
        limit: usize,
        now: i64,
    ) -> Result<Pulled, SidecarError> {
        let limit = limit.clamp(1, READ_MAX);
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            let expired = tx.execute(
                "UPDATE tasks SET state = 'expired' WHERE vessel = ?1 \
                 AND state IN ('pending', 'claimed') AND deadline_ms <= ?2",
                params![vessel, now],
            )?;
            let mut tasks: Vec<Task> = tx
                .prepare(&format!(
                    "SELECT {TASK_COLUMNS} FROM tasks WHERE vessel = ?1 \
                     AND state IN ('pending', 'claimed') ORDER BY created_ms, rowid LIMIT ?2"
                ))?
                .query_map(params![vessel, limit as i64], task_row)?
                .collect::<rusqlite::Result<_>>()?;
            let open: i64 = tx.query_row(
                "SELECT count(*) FROM tasks WHERE vessel = ?1 AND state IN ('pending', 'claimed')",
                [vessel],
                |r| r.get(0),
            )?;
            for t in &mut tasks {
                tx.execute(
                    "UPDATE tasks SET state = 'claimed', claimed_by = ?3, claimed_ms = ?4 \
                     WHERE vessel = ?1 AND id = ?2",
                    params![vessel, t.id, session, now],
                )?;
                t.state = TaskState::Claimed;
                t.claimed_by = Some(session.to_string());
            }
            tx.commit()?;
            Ok(Pulled {
                more: usize::try_from(open)
                    .unwrap_or(0)
                    .saturating_sub(tasks.len()),
                tasks,
                expired,
            })
        })
    }

    /// One task of `vessel`, in whatever state.
    pub fn task(&self, vessel: &str, id: &str) -> Result<Option<Task>, SidecarError> {
        self.with(|c| {
            Ok(c.query_row(
                &format!("SELECT {TASK_COLUMNS} FROM tasks WHERE vessel = ?1 AND id = ?2"),
                params![vessel, id],
                task_row,
            )
            .optional()?)
        })
    }

    /// The answer recorded for a task, if any.
    pub fn answer(&self, vessel: &str, task_id: &str) -> Result<Option<Answer>, SidecarError> {
        self.with(|c| {
            Ok(c.query_row(
                &format!("SELECT {ANSWER_COLUMNS} FROM answers WHERE vessel = ?1 AND task_id = ?2"),
                params![vessel, task_id],
                answer_row,
            )
            .optional()?)
        })
    }
    /// Records the agent's resolution of a task durably and marks the task resolved
    /// (anchor: sidecar_record): the answer is stored before any delivery is tried, so a failed
    /// or interrupted send is re-sent by a later session. Refuses an unknown, expired or already
    /// resolved task, and an `answered` resolution without a non-blank answer.
    pub fn record(
        &self,
        vessel: &str,
        task_id: &str,
        res: &Resolution,
    ) -> Result<Answer, SidecarError> {
        self.record_at(vessel, task_id, res, now_ms())
    }

    /// [`Sidecar::record`] on a given clock (epoch ms).
    pub fn record_at(
        &self,
        vessel: &str,
        task_id: &str,
        res: &Resolution,
        now: i64,
    ) -> Result<Answer, SidecarError> {
        let answer = res.answer.as_deref().map(str::trim).unwrap_or_default();
        if res.outcome == Outcome::Answered && answer.is_empty() {
            return Err(SidecarError::Invalid(
                "an answered resolution needs a non-blank answer".into(),
            ));
        }
        text("answer", answer, ANSWER_MAX_BYTES)?;
        let unknown = || SidecarError::UnknownTask(cut(task_id.to_string(), ID_MAX_BYTES));
        let task = self.task(vessel, task_id)?.ok_or_else(unknown)?;
        self.with(|c| {
            let tx = c.unchecked_transaction()?;
            // Read again inside the transaction: another session may have answered meanwhile.
            let state: String = tx
                .query_row(
                    "SELECT state FROM tasks WHERE vessel = ?1 AND id = ?2",
                    params![vessel, task_id],
                    |r| r.get(0),
                )
                .optional()?
                .ok_or_else(unknown)?;
            match TaskState::parse(&state) {
                TaskState::Resolved => {
                    let prior: Option<(String, String)> = tx
                        .query_row(
                            "SELECT outcome, delivery FROM answers \
                             WHERE vessel = ?1 AND task_id = ?2",
                            params![vessel, task_id],
                            |r| Ok((r.get(0)?, r.get(1)?)),
                        )
                        .optional()?;
                    let (outcome, delivery) = prior.unwrap_or_default();
                    return Err(SidecarError::AlreadyResolved {
                        id: task.id.clone(),
                        outcome: Outcome::parse(&outcome).map_or("unknown", Outcome::as_str),
                        delivery: Delivery::parse(&delivery).as_str(),
                    });
                }
                TaskState::Expired => return Err(expired(&task)),
                _ if task.deadline_ms <= now => {
                    tx.execute(
                        "UPDATE tasks SET state = 'expired' WHERE vessel = ?1 AND id = ?2",
                        params![vessel, task_id],
                    )?;
                    tx.commit()?;
                    return Err(expired(&task));
                }
                _ => {}
            }
            tx.execute(
                "INSERT OR REPLACE INTO answers (vessel, task_id, outcome, answer, recorded_ms, \
                 delivery) VALUES (?1, ?2, ?3, ?4, ?5, 'stored')",
                params![vessel, task_id, res.outcome.as_str(), answer, now],
            )?;
            tx.execute(
                "UPDATE tasks SET state = 'resolved' WHERE vessel = ?1 AND id = ?2",
                params![vessel, task_id],
            )?;
            tx.commit()?;
            Ok(Answer {
                task_id: task.id.clone(),
                outcome: res.outcome,
                answer: answer.to_string(),
                recorded_ms: now,
                delivery: Delivery::Stored,
                last_error: None,
            })
        })
    }

    /// Marks an answer delivered; `note` says why when it was not taken as such (goal-host's
    /// 404: the solicitation had timed out). A delivered answer is never sent again.
    pub fn mark_delivered(
        &self,
        vessel: &str,
        task_id: &str,
        note: Option<&str>,
    ) -> Result<(), SidecarError> {
        self.with(|c| {
            c.execute(
                "UPDATE answers SET delivery = 'delivered', delivered_ms = ?3, last_error = ?4 \
                 WHERE vessel = ?1 AND task_id = ?2",
                params![vessel, task_id, now_ms(), note],
            )?;
            Ok(())
        })
    }

    /// Leaves an answer queued for the next session's start, with the failure that kept it.
    pub fn mark_undelivered(
        &self,
        vessel: &str,
        task_id: &str,
        error: &str,
    ) -> Result<(), SidecarError> {
        let error = cut(error.to_string(), 1000);
        self.with(|c| {
            c.execute(
                "UPDATE answers SET delivery = 'undelivered', last_error = ?3 \
                 WHERE vessel = ?1 AND task_id = ?2 AND delivery != 'delivered'",
                params![vessel, task_id, error],
            )?;
            Ok(())
        })
    }

    /// Answers of `vessel` recorded before `before_ms` but not delivered, oldest first, at most
    /// `limit` (and [`READ_MAX`]) (anchor: sidecar_undelivered): what a session's start
    /// re-sends. The cut keeps a session's start from sending again what the same session is
    /// delivering itself.
    pub fn undelivered(
        &self,
        vessel: &str,
        before_ms: i64,
        limit: usize,
    ) -> Result<Vec<Answer>, SidecarError> {
        let limit = limit.clamp(1, READ_MAX) as i64;
        self.with(|c| {
            Ok(c.prepare(&format!(
                "SELECT {ANSWER_COLUMNS} FROM answers WHERE vessel = ?1 \
                     AND delivery IN ('stored', 'undelivered') \
                     AND outcome IN ('answered', 'declined', 'insufficient_context') \
                     AND recorded_ms < ?3 ORDER BY recorded_ms, rowid LIMIT ?2"
            ))?
            .query_map(params![vessel, limit, before_ms], answer_row)?
            .collect::<rusqlite::Result<_>>()?)
        })
    }
}

fn expired(task: &Task) -> SidecarError {
    SidecarError::Expired {
        id: task.id.clone(),
        at: metabob_wire::util::rfc3339_ms(task.deadline_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> (tempfile::TempDir, Sidecar) {
        let dir = tempfile::tempdir().expect("tempdir");
        let q = Sidecar::open(&dir.path().join("sidecar.db")).expect("open");
        (dir, q)
    }

    fn ask(id: Option<&str>, question: &str, timeout_ms: Option<u64>) -> Solicitation {
        Solicitation {
            id: id.map(str::to_string),
            question_markdown: question.to_string(),
            timeout_ms,
            dispatch_id: Some("d-1".into()),
        }
    }

    fn answered(text: &str) -> Resolution {
        Resolution {
            outcome: Outcome::Answered,
            answer: Some(text.to_string()),
        }
    }

    #[test]
    fn a_task_goes_pending_claimed_resolved_and_its_answer_stored_then_delivered() {
        let (_d, q) = queue();
        let ack = q
            .enqueue_at("v", ask(Some("s1"), "Which?", None), 1_000)
            .expect("enqueue");
        assert_eq!(ack.solicitation_id, "s1");
        assert_eq!(
            q.task("v", "s1").expect("read").expect("held").state,
            TaskState::Pending
        );

        let pulled = q.pull_at("v", "sess-a", 10, 2_000).expect("pull");
        assert_eq!(pulled.tasks.len(), 1);
        let t = &pulled.tasks[0];
        assert_eq!(
            (t.state, t.claimed_by.as_deref()),
            (TaskState::Claimed, Some("sess-a"))
        );
        assert_eq!(t.deadline_ms, 1_000 + DEFAULT_TIMEOUT_MS as i64);
        assert_eq!(t.dispatch_id.as_deref(), Some("d-1"));
        // A claim is not exclusive: another session still sees it, and now holds the claim.
        let again = q.pull_at("v", "sess-b", 10, 3_000).expect("pull");
        assert_eq!(again.tasks[0].claimed_by.as_deref(), Some("sess-b"));

        let a = q
            .record_at("v", "s1", &answered("  A  "), 4_000)
            .expect("record");
        assert_eq!((a.answer.as_str(), a.delivery), ("A", Delivery::Stored));
        assert_eq!(
            q.task("v", "s1").expect("read").expect("held").state,
            TaskState::Resolved
        );
        assert!(
            q.pull_at("v", "sess-a", 10, 5_000)
                .expect("pull")
                .tasks
                .is_empty()
        );
        assert_eq!(
            q.undelivered("v", i64::MAX, 10).expect("read"),
            vec![a.clone()]
        );

        q.mark_undelivered("v", "s1", "no_producer(x)")
            .expect("mark");
        let kept = q.undelivered("v", i64::MAX, 10).expect("read");
        assert_eq!(kept[0].delivery, Delivery::Undelivered);
        assert_eq!(kept[0].last_error.as_deref(), Some("no_producer(x)"));

        q.mark_delivered("v", "s1", None).expect("mark");
        assert!(q.undelivered("v", i64::MAX, 10).expect("read").is_empty());
        // A delivered answer is never put back in the queue.
        q.mark_undelivered("v", "s1", "late").expect("mark");
        assert!(q.undelivered("v", i64::MAX, 10).expect("read").is_empty());
        match q.record_at("v", "s1", &answered("again"), 6_000) {
            Err(SidecarError::AlreadyResolved {
                outcome, delivery, ..
            }) => {
                assert_eq!((outcome, delivery), ("answered", "delivered"));
            }
            other => panic!("expected already resolved, got {other:?}"),
        }
    }

    #[test]
    fn a_start_resends_only_what_was_recorded_before_it() {
        let (_d, q) = queue();
        for (id, at) in [("early", 10), ("late", 20)] {
            q.enqueue_at("v", ask(Some(id), "q", None), 1)
                .expect("enqueue");
            q.record_at("v", id, &answered("a"), at).expect("record");
        }
        let ids = |before| -> Vec<String> {
            let v = q.undelivered("v", before, 10).expect("read");
            v.into_iter().map(|a| a.task_id).collect()
        };
        assert_eq!(ids(20), ["early"]);
        assert_eq!(ids(21), ["early", "late"]);
    }

    #[test]
    fn queueing_an_id_again_is_idempotent_and_a_missing_id_is_generated() {
        let (_d, q) = queue();
        q.enqueue_at("v", ask(Some("s1"), "first", None), 1)
            .expect("enqueue");
        let ack = q
            .enqueue_at("v", ask(Some("s1"), "second", None), 2)
            .expect("again");
        assert_eq!(ack.solicitation_id, "s1");
        assert_eq!(
            q.task("v", "s1").expect("read").expect("held").question,
            "first"
        );

        let a = q
            .enqueue_at("v", ask(None, "q", None), 3)
            .expect("generated");
        let b = q
            .enqueue_at("v", ask(Some("  "), "q", None), 4)
            .expect("blank id");
        assert_ne!(a.solicitation_id, b.solicitation_id);
        let pulled = q.pull_at("v", "s", 100, 5).expect("pull");
        let ids: Vec<&str> = pulled.tasks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(
            ids,
            ["s1", a.solicitation_id.as_str(), b.solicitation_id.as_str()]
        );
    }

    #[test]
    fn tasks_are_scoped_to_their_vessel() {
        let (_d, q) = queue();
        q.enqueue_at("v1", ask(Some("s1"), "q", None), 1)
            .expect("enqueue");
        assert!(q.pull_at("v2", "s", 10, 2).expect("pull").tasks.is_empty());
        assert!(matches!(
            q.record_at("v2", "s1", &answered("a"), 3),
            Err(SidecarError::UnknownTask(_))
        ));
    }

    #[test]
    fn a_task_past_its_deadline_expires_on_pull_and_cannot_be_answered() {
        let (_d, q) = queue();
        q.enqueue_at("v", ask(Some("s1"), "q", Some(100)), 1_000)
            .expect("enqueue");
        q.enqueue_at("v", ask(Some("s2"), "q", Some(100)), 1_000)
            .expect("enqueue");
        q.enqueue_at("v", ask(Some("s3"), "q", None), 1_000)
            .expect("enqueue");
        let pulled = q.pull_at("v", "s", 10, 1_100).expect("pull");
        assert_eq!(pulled.expired, 2);
        assert_eq!(pulled.tasks.len(), 1);
        assert!(matches!(
            q.record_at("v", "s1", &answered("a"), 1_200),
            Err(SidecarError::Expired { .. })
        ));
        // Without a pull in between, answering past the deadline expires the task too.
        q.enqueue_at("v", ask(Some("s4"), "q", Some(100)), 2_000)
            .expect("enqueue");
        assert!(matches!(
            q.record_at("v", "s4", &answered("a"), 2_100),
            Err(SidecarError::Expired { .. })
        ));
        assert_eq!(
            q.task("v", "s4").expect("read").expect("held").state,
            TaskState::Expired
        );
        assert!(q.answer("v", "s4").expect("read").is_none());
    }

    #[test]
    fn a_pull_is_bounded_and_counts_what_it_left() {
        let (_d, q) = queue();
        for i in 0..5 {
            q.enqueue_at("v", ask(Some(&format!("s{i}")), "q", None), i)
                .expect("enqueue");
        }
        let pulled = q.pull_at("v", "s", 2, 10).expect("pull");
        assert_eq!((pulled.tasks.len(), pulled.more), (2, 3));
        assert_eq!(q.pull_at("v", "s", 0, 10).expect("pull").tasks.len(), 1);
    }

    #[test]
    fn declining_needs_no_answer_but_answering_does() {
        let (_d, q) = queue();
        q.enqueue_at("v", ask(Some("s1"), "q", None), 1)
            .expect("enqueue");
        for blank in [None, Some("   ")] {
            let res = Resolution {
                outcome: Outcome::Answered,
                answer: blank.map(str::to_string),
            };
            assert!(matches!(
                q.record_at("v", "s1", &res, 2),
                Err(SidecarError::Invalid(_))
            ));
        }
        let declined = Resolution {
            outcome: Outcome::InsufficientContext,
            answer: None,
        };
        let a = q.record_at("v", "s1", &declined, 3).expect("record");
        assert_eq!(
            (a.outcome, a.answer.as_str()),
            (Outcome::InsufficientContext, "")
        );
    }

    #[test]
    fn hostile_solicitations_are_refused_before_anything_is_stored() {
        let (_d, q) = queue();
        let huge = "x".repeat(QUESTION_MAX_BYTES + 1);
        let long_id = "i".repeat(ID_MAX_BYTES + 1);
        let bad = [
            ask(None, "", None),
            ask(None, " \n\t", None),
            ask(None, &huge, None),
            ask(None, "a\0b", None),
            ask(None, "q", Some(0)),
            ask(None, "q", Some(TIMEOUT_MAX_MS + 1)),
            ask(None, "q", Some(u64::MAX)),
            ask(Some(&long_id), "q", None),
            ask(Some("two words"), "q", None),
            ask(Some("line\u{7}"), "q", None),
            Solicitation {
                dispatch_id: Some("d\n2".into()),
                ..ask(None, "q", None)
            },
        ];
        for s in bad {
            assert!(
                matches!(
                    q.enqueue_at("v", s.clone(), 1),
                    Err(SidecarError::Invalid(_))
                ),
                "{s:?} was accepted"
            );
        }
        assert!(q.pull_at("v", "s", 100, 2).expect("pull").tasks.is_empty());
        // Exactly at the bound is accepted.
        let max = "y".repeat(QUESTION_MAX_BYTES);
        q.enqueue_at("v", ask(Some("max"), &max, Some(TIMEOUT_MAX_MS)), 1)
            .expect("at bound");
        let oversized = Resolution {
            outcome: Outcome::Answered,
            answer: Some("z".repeat(ANSWER_MAX_BYTES + 1)),
        };
        assert!(matches!(
            q.record_at("v", "max", &oversized, 2),
            Err(SidecarError::Invalid(_))
        ));
    }

    #[test]
    fn a_full_queue_refuses_more_and_an_unknown_id_is_cut_in_its_message() {
        let (_d, q) = queue();
        for i in 0..QUEUE_MAX {
            q.enqueue_at("v", ask(Some(&format!("s{i}")), "q", None), 1)
                .expect("enqueue");
        }
        assert!(matches!(
            q.enqueue_at("v", ask(None, "q", None), 1),
            Err(SidecarError::Full)
        ));
        // An id already held is still idempotent when full, and another vessel is unaffected.
        q.enqueue_at("v", ask(Some("s0"), "q", None), 1)
            .expect("held id");
        q.enqueue_at("w", ask(None, "q", None), 1)
            .expect("other vessel");
        let e = q.record_at("v", &"k".repeat(10_000), &answered("a"), 2);
        match e {
            Err(SidecarError::UnknownTask(id)) => assert_eq!(id.len(), ID_MAX_BYTES),
            other => panic!("expected unknown task, got {other:?}"),
        }
    }

    #[test]
    fn tampered_rows_are_read_bounded_and_never_offered_or_resent() {
        let (_d, q) = queue();
        q.with(|c| {
            c.execute_batch(
                "INSERT INTO tasks (vessel, id, question, created_ms, deadline_ms, state) VALUES \
                 ('v', 'big', 'é' || hex(zeroblob(70000)), 1, 9223372036854775807, 'pending'), \
                 ('v', 'odd', 'q', 2, 9223372036854775807, 'haunted'); \
                 INSERT INTO answers (vessel, task_id, outcome, answer, recorded_ms, delivery) \
                 VALUES ('v', 'x', 'shrugged', 'a', 1, 'stored'), \
                        ('v', 'y', 'answered', 'a', 2, 'lost');",
            )?;
            Ok(())
        })
        .expect("tamper");
        let pulled = q.pull_at("v", "s", 100, 10).expect("pull");
        assert_eq!(pulled.tasks.len(), 1);
        assert!(pulled.tasks[0].question.len() <= QUESTION_MAX_BYTES);
        assert!(q.undelivered("v", i64::MAX, 100).expect("read").is_empty());
        assert_eq!(
            q.task("v", "odd").expect("read").expect("held").state,
            TaskState::Expired
        );
    }

    #[test]
    fn opening_drops_finished_rows_past_retention_but_keeps_undelivered_answers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sidecar.db");
        let q = Sidecar::open(&path).expect("open");
        for id in ["old-done", "old-kept"] {
            q.enqueue_at("v", ask(Some(id), "q", None), 1)
                .expect("enqueue");
            q.record_at("v", id, &answered("a"), 2).expect("record");
        }
        q.mark_delivered("v", "old-done", None).expect("mark");
        drop(q);
        let q = Sidecar::open(&path).expect("reopen");
        assert!(q.task("v", "old-done").expect("read").is_none());
        assert!(q.answer("v", "old-done").expect("read").is_none());
        assert!(q.task("v", "old-kept").expect("read").is_some());
        assert_eq!(q.undelivered("v", i64::MAX, 10).expect("read").len(), 1);
    }
}

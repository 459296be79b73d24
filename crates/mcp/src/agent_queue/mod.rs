//! The agent-resolver queue (SPEC.md §Agent-resolver queue): the solicitations a local caller of
//! the loopback resolver queued for this vessel, and the answers the agent gave them, in SQLite.
//! Rows are keyed by the resolver's vessel identity, so a later session with the same identity
//! resumes the same queue and re-delivers what an earlier one could not send.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};

use metabob_process::clock::now_ms;
use metabob_process::env::Env;
use metabob_process::random::uuid_v4;

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
    #[error("the agent queue at {path} could not be opened: {source}")]
    Open {
        path: String,
        #[source]
        source: crate::store::OpenError,
    },
    #[error("the agent queue failed: {0}")]
    Sql(#[from] rusqlite::Error),
    /// The solicitation or resolution was malformed; nothing was stored. The words are the
    /// check's own, written where the field is refused.
    #[error("{0}")]
    Invalid(String),
    #[error("the agent queue holds {QUEUE_MAX} open tasks for this vessel")]
    Full,
    #[error("no task {id} is queued for this vessel")]
    UnknownTask { id: String },
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

impl metabob_wire::report::Hint for SidecarError {
    fn hint(&self) -> Option<String> {
        match self {
            SidecarError::Full => Some("answer or let some expire before queueing more".into()),
            SidecarError::UnknownTask { .. } => Some(
                "tasks come from pull_assigned_work, and the substrate dispatches no task to \
                 this session"
                    .into(),
            ),
            _ => None,
        }
    }
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
        let conn =
            crate::store::open_sqlite(path, SCHEMA).map_err(|source| SidecarError::Open {
                path: path.display().to_string(),
                source,
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
        let unknown = || SidecarError::UnknownTask {
            id: cut(task_id.to_string(), ID_MAX_BYTES),
        };
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
        at: metabob_wire::text::rfc3339_ms(task.deadline_ms),
    }
}

#[cfg(test)]
mod tests;

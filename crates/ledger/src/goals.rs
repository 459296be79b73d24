//! The goal board (SPEC.md §Goal board): goal-host's and activity-api's shapes answered by the
//! embedded ledger itself, mapped onto the task board that cells already pull.
//!
//! A dispatched goal is a task (`dispatch`); its state, executions and traces are derived on
//! every read from the task's own claim and verdict rows (`walk`), read with the client's
//! owners; labels are stored as given (`labels`). The ledger selects no templates, learns
//! nothing and grades nothing: it reports only what the rows say happened.
//!
//! A `--producer` named for one of these shapes takes it over (a real goal-host or
//! activity-api beside the ledger), so the ledger answers them only when nothing else does.

mod dispatch;
mod labels;
pub(super) mod reads;
pub(super) mod store;
pub(super) mod walk;

use axum::http::StatusCode;
use serde_json::{Map, Value, json};

pub use reads::{LISTED_DISPATCHES, WALK_LOG_LINES};
pub use store::SCHEMA;
pub use walk::{claim_of_execution, execution_id};

use super::db::Budget;
use super::errors::ApiError;
use super::input::Fields;
use super::keys::KeyIdentity;
use super::resolve::{Answer, Ledger};
use walk::one_line;

/// The shapes the goal board answers (anchor: GOAL_SHAPES).
pub const GOAL_SHAPES: &[&str] = &[
    "goalDispatchAsync",
    "goalWalkState",
    "executionTraceList",
    "activityExecutionTrace",
    "goal_verification_label_write",
];

/// The listing's page size: at most, and by default.
pub const MAX_TRACE_LIMIT: i64 = 50;
pub const DEFAULT_TRACE_LIMIT: i64 = 10;
/// Longest id a request may name, and an error body echoes, in characters.
pub(crate) const ID_CHARS: usize = 200;

/// A producer's own 404 for an id it does not hold: `{error, <id field>, detail}`, which the
/// client passes through as an answer (never the no-producer body).
fn not_found(error: &str, field: &str, id: &str, detail: &str) -> Answer {
    let mut body = json!({ "error": error, "detail": detail });
    body[field] = Value::from(one_line(id, ID_CHARS));
    Answer::Json(StatusCode::NOT_FOUND, body)
}

/// A required id field, bounded.
fn id_field(p: &Fields<'_>, name: &str) -> Result<String, ApiError> {
    let id = p.req_str(name)?.trim();
    if id.chars().count() > ID_CHARS {
        return Err(ApiError::bad(format!(
            "{name}: longer than {ID_CHARS} characters"
        )));
    }
    Ok(id.to_string())
}

/// Answers one goal board shape for `key`'s org.
// anchor: resolve-goal-shape
pub async fn resolve(
    ledger: &Ledger,
    budget: Budget,
    key: &KeyIdentity,
    shape: &str,
    pointer: &Map<String, Value>,
    claim: Option<&Value>,
) -> Result<Answer, ApiError> {
    let p = Fields::new(pointer, "");
    let org = key.org_id.clone();
    let now = metabob_process::clock::now_ms();
    match shape {
        "goalDispatchAsync" => {
            let req = dispatch::DispatchRequest::parse(pointer, claim, key)?;
            let body = ledger.db.write(budget, move |w| req.run(w, &org)).await?;
            Ok(Answer::Json(StatusCode::ACCEPTED, body))
        }
        "goal_verification_label_write" => {
            let req = labels::LabelRequest::parse(&p, claim, &key.key_id)?;
            ledger.db.write(budget, move |w| req.run(w, &org)).await
        }
        "goalWalkState" => {
            let id = id_field(&p, "dispatchId")?;
            ledger
                .db
                .read(&key.org_id, budget, move |c| {
                    reads::walk_state(c, &org, &id, now)
                })
                .await
        }
        "executionTraceList" => {
            let limit = p
                .opt_i64_in("limit", 1, MAX_TRACE_LIMIT)?
                .unwrap_or(DEFAULT_TRACE_LIMIT) as usize;
            ledger
                .db
                .read(&key.org_id, budget, move |c| {
                    reads::trace_list(c, &org, limit, now)
                })
                .await
        }
        "activityExecutionTrace" => {
            let id = id_field(&p, "executionId")?;
            // Only JSON is answered; `format` is read so that a wrong type is still refused.
            p.opt_str("format")?;
            ledger
                .db
                .read(&key.org_id, budget, move |c| {
                    reads::trace_read(c, &org, &id, now)
                })
                .await
        }
        other => Err(ApiError::NoProducer {
            shape: other.to_string(),
        }),
    }
}

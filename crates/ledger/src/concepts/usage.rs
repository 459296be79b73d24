//! `conceptUsage_write`, `conceptUsageStats` and `GET /concepts/:id/usage`: the outcomes of
//! using a concept, which its relevance is read from.

use serde_json::{Value, json};

use super::{claim_text, concept_id_field, load_concept, relevance};
use crate::db::Writer;
use crate::errors::ApiError;
use crate::input::Fields;
use crate::sql::{Row, Sql, args, json_text};
use metabob_process::random::time_ordered_hex;
use metabob_wire::finding::plain_concept_id;
use metabob_wire::text::rfc3339_ms;

pub struct RecordUsage {
    concept_id: String,
    trace_id: String,
    outcome: &'static str,
    activity_id: Option<String>,
    task_id: Option<String>,
    claim: Option<String>,
}

const USAGE_COLS: &str =
    "id, concept_id, outcome, trace_id, activity_id, task_id, created_at, client_claim";

fn usage_json(r: &Row<'_>) -> Result<Value, ApiError> {
    let mut obj = json!({
        "id": r.get::<String>(0)?,
        "concept_id": r.get::<String>(1)?,
        "outcome": r.get::<String>(2)?,
        "trace_id": r.get::<String>(3)?,
        "activity_id": r.get::<Option<String>>(4)?,
        "task_id": r.get::<Option<String>>(5)?,
        "created_at": rfc3339_ms(r.get(6)?),
    });
    if let Some(claim) = json_text(r.get(7)?) {
        obj["client_claim"] = claim;
    }
    Ok(obj)
}

impl RecordUsage {
    pub fn parse(p: &Fields<'_>, claim: Option<&Value>) -> Result<Self, ApiError> {
        let d = p.req_obj("usageData")?;
        Ok(RecordUsage {
            concept_id: concept_id_field(&d, "concept_id")?,
            trace_id: d.req_str("trace_id")?.to_string(),
            outcome: d.req_enum("outcome", &["success", "failure", "neutral"])?,
            activity_id: d.opt_str("activity_id")?.map(str::to_string),
            task_id: d.opt_str("task_id")?.map(str::to_string),
            claim: claim_text(claim),
        })
    }

    /// The credit a verdict gives its finding's concept (`verdict_write`): traced to the
    /// verdict, with no activity or task.
    pub fn credit(
        concept_id: &str,
        trace_id: String,
        outcome: &'static str,
        claim: Option<&Value>,
    ) -> Self {
        RecordUsage {
            concept_id: concept_id.to_string(),
            trace_id,
            outcome,
            activity_id: None,
            task_id: None,
            claim: claim_text(claim),
        }
    }

    // anchor: record-usage
    pub fn run(&self, w: &mut Writer, org: &str) -> Result<Value, ApiError> {
        let now = w.tick()?;
        let tx = w.sql();
        let id = self
            .insert(tx, org, now)?
            .ok_or_else(|| ApiError::ConceptNotFound {
                id: self.concept_id.clone(),
            })?;
        let usage = tx
            .query_opt(
                &format!("SELECT {USAGE_COLS} FROM usage WHERE id = ?1"),
                args![&id],
                usage_json,
            )?
            .ok_or_else(|| {
                ApiError::Internal("the usage just written does not read back".into())
            })?;
        let concept = load_concept(tx, org, &self.concept_id)?;
        Ok(json!({ "usage": usage, "concept": concept }))
    }

    /// Moves the concept's counters and writes the usage row: the row's id, or `None` (and
    /// nothing written) when `org` holds no such concept. The counters go first, since the rows
    /// they change say whether the concept is there.
    pub fn insert(&self, tx: Sql<'_>, org: &str, now: i64) -> Result<Option<String>, ApiError> {
        // Every outcome counts as a load; only success earns credit toward relevance.
        let (succ, fail) = match self.outcome {
            "success" => (1, 0),
            "failure" => (0, 1),
            _ => (0, 0),
        };
        let counted = tx.execute(
            "UPDATE concepts SET times_loaded = times_loaded + 1, times_succeeded = times_succeeded + ?3,
                 times_failed = times_failed + ?4, updated_at = ?5
             WHERE org_id = ?1 AND id = ?2",
            args![org, self.concept_id, succ, fail, now],
        )?;
        if counted == 0 {
            return Ok(None);
        }
        let id = format!("usage_{}", time_ordered_hex(now));
        tx.execute_deferred(
            &format!("INSERT INTO usage (org_id, {USAGE_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
            args![org, id, self.concept_id, self.outcome, self.trace_id, self.activity_id, self.task_id, now, self.claim],
        )?;
        Ok(Some(id))
    }
}

pub struct UsageStats {
    concept_id: String,
}

impl UsageStats {
    pub fn parse(p: &Fields<'_>) -> Result<Self, ApiError> {
        Ok(UsageStats {
            concept_id: concept_id_field(p, "concept_id")?,
        })
    }

    // anchor: usage-stats
    pub fn run(self, conn: Sql<'_>, org: &str) -> Result<Value, ApiError> {
        let row = conn.query_opt(
            "SELECT times_loaded, times_succeeded, times_failed FROM concepts WHERE org_id = ?1 AND id = ?2",
            args![org, &self.concept_id],
            |r| Ok((r.get::<i64>(0)?, r.get::<i64>(1)?, r.get::<i64>(2)?)),
        )?;
        let Some((loaded, succeeded, failed)) = row else {
            return Err(ApiError::ConceptNotFound {
                id: self.concept_id,
            });
        };
        let rate = |n: i64| {
            if loaded == 0 {
                0.0
            } else {
                n as f64 / loaded as f64
            }
        };
        Ok(json!({
            "concept_id": self.concept_id,
            "total_uses": loaded,
            "successes": succeeded,
            "failures": failed,
            "neutral": loaded - succeeded - failed,
            "success_rate": rate(succeeded),
            "failure_rate": rate(failed),
            "relevance": relevance(succeeded, loaded),
        }))
    }
}

/// `GET /concepts/:id/usage`: the newest usage rows of one concept.
// anchor: usage-history
pub fn usage_history(
    conn: Sql<'_>,
    org: &str,
    raw_id: &str,
    limit: i64,
) -> Result<Value, ApiError> {
    let id = plain_concept_id(raw_id);
    load_concept(conn, org, &id)?;
    let usage = conn.query(
        &format!(
            "SELECT {USAGE_COLS} FROM usage WHERE org_id = ?1 AND concept_id = ?2 ORDER BY seq DESC LIMIT ?3"
        ),
        args![org, &id, limit],
        usage_json,
    )?;
    Ok(json!({ "concept_id": id, "usage": usage }))
}

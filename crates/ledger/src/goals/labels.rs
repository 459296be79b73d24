//! `goal_verification_label_write`: an operator's verdict on a dispatch, stored as given. The
//! embedded ledger grades nothing and learns nothing from a label; it keeps it for audit.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::store::{self, NewLabel};
use super::{ID_CHARS, not_found};
use crate::db::Writer;
use crate::errors::ApiError;
use crate::input::Fields;
use crate::resolve::Answer;
use metabob_process::random::time_ordered_hex;
use metabob_wire::fields::field_rule;
use metabob_wire::text::rfc3339_ms;

pub const VERDICTS: &[&str] = &["achieved", "not_achieved", "partial"];
pub const LABELERS: &[&str] = &["automated", "human"];

/// A label, validated; nothing written yet.
pub struct LabelRequest {
    dispatch_id: String,
    execution_id: Option<String>,
    activity_id: Option<String>,
    goal: String,
    verdict: &'static str,
    confidence: f64,
    labeler: &'static str,
    notes: String,
    key_id: String,
    claim: Option<String>,
}

fn capped(name: &str, value: &str, cap: usize) -> Result<String, ApiError> {
    if value.len() > cap {
        return Err(ApiError::bad(format!(
            "labelData.{name}: longer than {cap} bytes"
        )));
    }
    Ok(value.to_string())
}

impl LabelRequest {
    // anchor: parse-label
    pub fn parse(
        p: &Fields<'_>,
        claim: Option<&Value>,
        key_id: &str,
    ) -> Result<LabelRequest, ApiError> {
        let d = p.req_obj("labelData")?;
        let id_cap = ID_CHARS;
        let opt_id = |name: &str| -> Result<Option<String>, ApiError> {
            match d.opt_str(name)? {
                Some(s) if !s.trim().is_empty() => capped(name, s.trim(), id_cap).map(Some),
                _ => Ok(None),
            }
        };
        let confidence = d
            .opt_f64_in("confidence", 0.0, 1.0)?
            .ok_or_else(|| ApiError::bad("labelData.confidence: required number in 0..1"))?;
        Ok(LabelRequest {
            dispatch_id: capped("dispatch_id", d.req_str("dispatch_id")?.trim(), id_cap)?,
            execution_id: opt_id("execution_id")?,
            activity_id: opt_id("activity_id")?,
            goal: capped("goal", d.req_str("goal")?, field_rule("goal").cap)?,
            verdict: d.req_enum("verdict", VERDICTS)?,
            confidence,
            labeler: d.req_enum("labeler", LABELERS)?,
            notes: capped("notes", d.req_str("notes")?, field_rule("notes").cap)?,
            key_id: key_id.to_string(),
            claim: claim.map(Value::to_string),
        })
    }

    /// Stores the label for a dispatch of this org; another org's dispatch reads as none.
    // anchor: write-label
    pub fn run(&self, w: &mut Writer, org: &str) -> Result<Answer, ApiError> {
        let now = w.tick()?;
        let tx = w.sql();
        if store::load_dispatch(tx, org, &self.dispatch_id)?.is_none() {
            return Ok(not_found(
                "dispatch_not_found",
                "dispatchId",
                &self.dispatch_id,
                "no such dispatch in this key's org; no label was written",
            ));
        }
        let id = format!("label_{}", time_ordered_hex(now));
        store::insert_label(
            tx,
            org,
            &NewLabel {
                id: &id,
                dispatch_id: &self.dispatch_id,
                execution_id: self.execution_id.as_deref(),
                activity_id: self.activity_id.as_deref(),
                goal: &self.goal,
                verdict: self.verdict,
                confidence: self.confidence,
                labeler: self.labeler,
                notes: &self.notes,
                key_id: &self.key_id,
                created_ms: now,
                claim: self.claim.as_deref(),
            },
        )?;
        let mut label = json!({
            "id": id,
            "dispatch_id": self.dispatch_id,
            "execution_id": self.execution_id,
            "activity_id": self.activity_id,
            "goal": self.goal,
            "verdict": self.verdict,
            "confidence": self.confidence,
            "labeler": self.labeler,
            "notes": self.notes,
            "created_at": rfc3339_ms(now),
        });
        if let Some(claim) = self
            .claim
            .as_deref()
            .and_then(|c| serde_json::from_str::<Value>(c).ok())
        {
            label["client_claim"] = claim;
        }
        Ok(Answer::Json(StatusCode::CREATED, json!({ "label": label })))
    }
}

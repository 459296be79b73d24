//! `verdict_write`: a verdict, its `derived_from` link to its finding and, for a verdict that
//! closes, the finding's usage credit, in one write (SPEC.md §Verdicts). The three used to be
//! three requests, each its own transaction: a task's close was half its writes, and on
//! PostgreSQL each one is a `BEGIN`, a clock and a `COMMIT` of its own.

use serde_json::{Value, json};

use super::concepts::{CreateConcept, Link, RecordUsage, concept_exists};
use super::db::Writer;
use super::errors::ApiError;
use super::input::Fields;
use metabob_wire::finding::plain_concept_id;
use metabob_wire::header::Header;
use metabob_wire::verdict::{
    MAX_TRACE_CHARS, VERDICT_SHAPE, VerdictKind, credit_trace, link_pointer,
};

pub struct VerdictWrite {
    row: CreateConcept,
    kind: VerdictKind,
    /// The concept the row's `finding_concept:` line names: linked to, and credited.
    finding: String,
    trace: String,
    claim: Option<Value>,
}

impl VerdictWrite {
    /// The concept write's fields, which must be a verdict row naming its finding's concept,
    /// and `trace`, the surface that writes it.
    pub fn parse(p: &Fields<'_>, claim: Option<&Value>) -> Result<Self, ApiError> {
        let row = CreateConcept::parse(p, claim)?;
        if row.shape() != VERDICT_SHAPE {
            return Err(ApiError::bad(format!(
                "conceptData.shape: a verdict write writes a {VERDICT_SHAPE} row"
            )));
        }
        let header = Header::parse(row.content());
        let kind = header
            .get("verdict")
            .and_then(VerdictKind::parse)
            .ok_or_else(|| ApiError::bad("conceptData.content: no verdict: line a reader knows"))?;
        let finding = header
            .get("finding_concept")
            .map(plain_concept_id)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| ApiError::bad("conceptData.content: no finding_concept: line"))?;
        let trace = p.req_str("trace")?;
        if trace.chars().count() > MAX_TRACE_CHARS || trace.chars().any(char::is_control) {
            return Err(ApiError::bad(format!(
                "trace: one line of at most {MAX_TRACE_CHARS} characters"
            )));
        }
        Ok(VerdictWrite {
            row,
            kind,
            finding,
            trace: trace.to_string(),
            claim: claim.cloned(),
        })
    }

    /// Writes the row as `concept_create_write` does (under its findings' holder locks), then,
    /// when the finding's concept is in the org, the credit and the link. A finding the org
    /// does not hold leaves the verdict standing unlinked, as a failed link request did: the
    /// answer says so.
    // anchor: verdict-write
    pub fn run(&self, w: &mut Writer, org: &str) -> Result<Value, ApiError> {
        let mut out = self.row.run(w, org)?;
        let id = out["concept"]["id"]
            .as_str()
            .ok_or_else(|| ApiError::Internal("the verdict written has no id".into()))?
            .to_string();
        let now = w.tick()?;
        // The credit, when there is one, finds the finding's concept as it counts: no read
        // before it.
        let credited = match self.kind.credit() {
            Some(outcome) => RecordUsage::credit(
                &self.finding,
                credit_trace(&self.trace, &id),
                outcome,
                self.claim.as_ref(),
            )
            .insert(w.sql(), org, now)?
            .is_some(),
            None => false,
        };
        let linked = credited || concept_exists(w.sql(), org, &self.finding)?;
        if linked {
            let link = link_pointer(&id, &self.finding);
            // The verdict was created by this write, so no edge from it exists yet.
            Link::parse(&Fields::composed(&link), self.claim.as_ref())?
                .insert_fresh(w, org, now)?;
        }
        out["linked"] = json!(linked);
        out["credited"] = json!(credited);
        Ok(out)
    }
}

//! `concept_create_write`: the one insert every concept the ledger writes goes through.

use serde_json::{Value, json};

use super::{CONCEPT_COLS, DEFAULT_PRIORITY, claim_text, concept_json};
use crate::db::Writer;
use crate::errors::ApiError;
use crate::input::Fields;
use crate::sql::{Sql, args};
use metabob_process::random::time_ordered_hex;
use metabob_wire::finding::FINDING_SHAPE;
use metabob_wire::header::Header;
use metabob_wire::repo_path::check_repo_path;
use metabob_wire::row::{MAX_IDS_PER_ROW, RowTexts};
use metabob_wire::verdict::VERDICT_SHAPE;

pub struct CreateConcept {
    content: String,
    shape: String,
    source_type: String,
    summary: String,
    /// The pointer as stored: serialized once, for the size check and the insert alike.
    pointer: String,
    budget: Option<i64>,
    priority: f64,
    claim: Option<String>,
}

impl CreateConcept {
    pub fn parse(p: &Fields<'_>, claim: Option<&Value>) -> Result<Self, ApiError> {
        let d = p.req_obj("conceptData")?;
        let shape = d.req_str("shape")?.to_string();
        let pointer = match d.opt_obj("pointer")? {
            Some(m) => serde_json::to_string(m).unwrap_or_default(),
            None => json!({ "type": shape }).to_string(),
        };
        let content = d.req_str("content")?;
        if shape == FINDING_SHAPE {
            check_finding_files(content)?;
        }
        Ok(CreateConcept {
            content: content.to_string(),
            source_type: d.req_str("source_type")?.to_string(),
            summary: d.opt_str("summary")?.unwrap_or("").to_string(),
            pointer,
            budget: d.opt_i64_in("budget", 0, i64::MAX)?,
            priority: d
                .opt_f64_in("priority", 0.0, 1.0)?
                .unwrap_or(DEFAULT_PRIORITY),
            shape,
            claim: claim_text(claim),
        })
    }

    /// The row's shape and content as sent, for a write that composes more rows from them.
    pub fn shape(&self) -> &str {
        &self.shape
    }

    pub fn content(&self) -> &str {
        &self.content
    }

    /// Holds each of the row's texts to what every reader reads, so that no write key can
    /// store a row that blinds the readers of its org.
    fn check_size(&self) -> Result<(), ApiError> {
        let texts = RowTexts {
            content: &self.content,
            summary: &self.summary,
            pointer: &self.pointer,
            client_claim: self.claim.as_deref().unwrap_or_default(),
            shape: &self.shape,
            source_type: &self.source_type,
        };
        match texts.over_cap() {
            Some((field, bytes, max_bytes)) => Err(ApiError::RowTooLarge {
                field,
                bytes,
                max_bytes,
            }),
            None => Ok(()),
        }
    }

    /// Takes the holder lock of every finding a verdict row names, then the creation time, then
    /// writes: so on PostgreSQL two rows about one finding are numbered and stamped in the
    /// order they commit (SPEC.md §Claim order on each store).
    // anchor: create-concept
    pub fn run(&self, w: &mut Writer, org: &str) -> Result<Value, ApiError> {
        let ids = self.holder_ids();
        // A row that decides no holder needs no shared clock: this replica's own saves
        // PostgreSQL a round trip.
        let now = if ids.is_empty() {
            w.tick_local()
        } else {
            w.tick_holding(org, &ids)?
        };
        let concept = self.insert(w.sql(), org, now)?;
        let notes = crate::task_edges::notes(w.sql(), org, &concept)?;
        if notes.is_empty() {
            return Ok(json!({ "concept": concept }));
        }
        Ok(json!({ "concept": concept, "notes": notes }))
    }

    /// The finding ids whose holder this row may change: the ones a verdict row names (a claim
    /// is one), and for a row that writes a dependency, its blockers and the org's edge lock
    /// (`task_edges::lock_ids`). Read from the header as the client writes it; bounded as any
    /// row's ids are.
    fn holder_ids(&self) -> Vec<String> {
        let mut ids = crate::task_edges::lock_ids(&self.shape, &self.content);
        if self.shape == VERDICT_SHAPE {
            let mut named = Header::parse(&self.content).list("finding_ids");
            named.truncate(MAX_IDS_PER_ROW);
            ids.extend(named);
        }
        ids
    }

    /// Inserts the concept with creation time `now` on `conn`, inside the caller's transaction
    /// (the goal board writes a task and its dispatch in one), keeps the open-task index in
    /// step, and returns it as answered. Every concept the ledger writes comes through here. A
    /// verdict row must be written under its findings' holder locks, taken before `now` was
    /// drawn: [`CreateConcept::run`] takes them; the take holds them already.
    pub fn insert(&self, conn: Sql<'_>, org: &str, now: i64) -> Result<Value, ApiError> {
        self.insert_known(conn, org, now, None)
    }

    /// [`CreateConcept::insert`] of a verdict row about a task whose rows the write has read
    /// already (the take's claim): the open-task index weighs the task from them.
    pub fn insert_known(
        &self,
        conn: Sql<'_>,
        org: &str,
        now: i64,
        known: Option<crate::open_tasks::Known<'_>>,
    ) -> Result<Value, ApiError> {
        self.check_size()?;
        let id = format!("concept_{}", time_ordered_hex(now));
        // The concept as stored comes back with the insert: no second statement reads it.
        let concept = conn
            .query_opt(
                &format!(
                    "INSERT INTO concepts (id, org_id, shape, source_type, summary, content, pointer, budget,
                                           priority, created_at, updated_at, client_claim)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11)
                     RETURNING {CONCEPT_COLS}"
                ),
                args![
                    id,
                    org,
                    self.shape,
                    self.source_type,
                    self.summary,
                    self.content,
                    self.pointer,
                    self.budget,
                    self.priority,
                    now,
                    self.claim
                ],
                concept_json,
            )?
            .ok_or_else(|| ApiError::Internal("an insert answered no row".into()))?;
        // The ids first: the open-task index weighs a verdict's task by the rows they find.
        crate::row_ids::on_insert(conn, org, &concept)?;
        crate::open_tasks::on_insert_known(conn, org, &concept, known)?;
        crate::task_edges::on_insert(conn, org, &concept)?;
        Ok(concept)
    }
}

/// A finding names only repository paths (SPEC.md §Recording): each name of its header's
/// `files:` line, read as every reader reads it, passes the wire's one rule, else 400 naming the
/// path and the rule (anchor: finding-files).
fn check_finding_files(content: &str) -> Result<(), ApiError> {
    for file in Header::parse(content).list("files") {
        check_repo_path(&file)
            .map_err(|e| ApiError::bad(format!("conceptData.content: files: {e}")))?;
    }
    Ok(())
}

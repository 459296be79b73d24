//! The file index and `findingsOnFiles` (SPEC.md §Related findings). Every finding's files are
//! kept beside it, case-folded, as it is written, so the open findings on a task's files are an
//! indexed lookup per file, newest first and bounded, where the client would otherwise read the
//! whole recall window and filter it. Standing is decided with the client's own rule over the
//! finding's own rows.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::concepts::load_concept;
use super::errors::ApiError;
use super::goals::store::task_rows;
use super::input::Fields;
use super::sql::{Sql, args};
use metabob_wire::finding::{FINDING_SHAPE, Finding, plain_concept_id};
use metabob_wire::related::{MAX_RELATED, MAX_RELATED_FILES, MAX_SCANNED_PER_FILE};
use metabob_wire::repo_identity::{last_segment, vessel_aliases};
use metabob_wire::verdict::{Standing, Verdict, standing};

// anchor: finding-files-schema
pub const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS finding_files (
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    file_key    TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    concept_id  TEXT NOT NULL REFERENCES concepts(id),
    PRIMARY KEY (org_id, file_key, seq)
);
"#;

/// The longest repository identity or file name a request may carry, in bytes.
const MAX_NAME_BYTES: usize = 2048;

/// The lookup key of a file name: case-folded, without a leading `./`, as the aliases compare.
fn file_key(file: &str) -> String {
    file.trim()
        .strip_prefix("./")
        .unwrap_or(file.trim())
        .to_lowercase()
}

/// Indexes the files of a finding just written on `conn` (anchor: index-files). A task is not
/// filed: related findings are never tasks, and a backlog of tasks on one file would otherwise
/// be read and passed over by every lookup of that file.
pub fn on_insert(conn: Sql<'_>, org: &str, concept: &Value, f: &Finding) -> Result<(), ApiError> {
    if f.is_task() {
        return Ok(());
    }
    let seq = concept.get("seq").and_then(Value::as_i64).unwrap_or(0);
    for file in &f.files {
        conn.execute(
            "INSERT INTO finding_files (org_id, file_key, seq, concept_id)
             VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
            args![org, file_key(file), seq, &f.concept_id],
        )?;
    }
    Ok(())
}

/// Builds the index from what the store already holds: run once, when the schema gains it.
pub fn backfill(conn: Sql<'_>) -> Result<(), ApiError> {
    let rows = conn.query(
        "SELECT org_id, id FROM concepts WHERE shape = ?1 ORDER BY seq",
        args![FINDING_SHAPE],
        |r| Ok((r.get::<String>(0)?, r.get::<String>(1)?)),
    )?;
    for (org, id) in rows {
        let concept = load_concept(conn, &org, &id)?;
        if let Ok(Some(f)) = Finding::read(&concept) {
            on_insert(conn, &org, &concept, &f)?;
        }
    }
    Ok(())
}

/// A `findingsOnFiles` request: the open findings of `repository` that are no task and share a
/// file with `files` (named as a checkout of that repository names them).
pub struct RelatedRequest {
    repository: String,
    files: Vec<String>,
    /// The task asking, left out of the answer.
    exclude: Option<String>,
}

impl RelatedRequest {
    pub fn parse(p: &Fields<'_>) -> Result<Self, ApiError> {
        let repository = p.req_str("repository")?.trim();
        let files = p.opt_str_list("files")?.unwrap_or_default();
        if files.is_empty() || files.len() > MAX_RELATED_FILES {
            return Err(ApiError::bad(format!(
                "files: required, 1 to {MAX_RELATED_FILES} file names"
            )));
        }
        if repository.len() > MAX_NAME_BYTES || files.iter().any(|f| f.len() > MAX_NAME_BYTES) {
            return Err(ApiError::bad(format!(
                "repository and files: each at most {MAX_NAME_BYTES} bytes"
            )));
        }
        Ok(RelatedRequest {
            repository: repository.to_string(),
            files,
            exclude: p.opt_str("exclude")?.map(plain_concept_id),
        })
    }

    /// The answer: up to [`MAX_RELATED`] findings, newest first; `truncated` when a file had
    /// more findings than were looked at, or more matched than are answered.
    pub fn run(self, conn: Sql<'_>, org: &str) -> Result<Value, ApiError> {
        let aliases = vessel_aliases(&self.repository);
        let vessel = last_segment(aliases.identity()).to_string();
        let asked: HashSet<&str> = self.files.iter().map(String::as_str).collect();
        // A super-repo names this repository's files under `repos/<name>/`: both are looked up.
        let mut keys: Vec<String> = Vec::new();
        for f in &self.files {
            for k in [file_key(f), file_key(&format!("repos/{vessel}/{f}"))] {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
        let mut truncated = false;
        let mut hits: Vec<(i64, String)> = Vec::new();
        for key in &keys {
            let rows = conn.query(
                "SELECT seq, concept_id FROM finding_files
                   WHERE org_id = ?1 AND file_key = ?2 ORDER BY seq DESC LIMIT ?3",
                args![org, key, MAX_SCANNED_PER_FILE],
                |r| Ok((r.get::<i64>(0)?, r.get::<String>(1)?)),
            )?;
            truncated |= rows.len() as i64 >= MAX_SCANNED_PER_FILE;
            hits.extend(rows);
        }
        hits.sort_unstable_by_key(|h| std::cmp::Reverse(h.0));
        hits.dedup_by(|a, b| a.1 == b.1);
        let mut out = Vec::new();
        for (_, id) in hits {
            if self.exclude.as_deref() == Some(id.as_str()) {
                continue;
            }
            let concept = match load_concept(conn, org, &id) {
                Ok(c) => c,
                Err(ApiError::ConceptNotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            let Ok(Some(f)) = Finding::read(&concept) else {
                continue;
            };
            if f.is_task() || !f.status.is_open() {
                continue;
            }
            let shares_a_file = aliases
                .map_finding(f.repo.as_deref().unwrap_or_default(), &f.files)
                .is_some_and(|mapped| mapped.iter().any(|m| asked.contains(m.as_str())));
            if !shares_a_file {
                continue;
            }
            let rows: Vec<Verdict> = task_rows(conn, org, &f)?
                .into_iter()
                .map(|r| r.verdict)
                .collect();
            if !matches!(standing(&rows), Standing::Open) {
                continue;
            }
            if out.len() == MAX_RELATED {
                truncated = true;
                break;
            }
            out.push(concept);
        }
        Ok(json!({ "findings": out, "truncated": truncated }))
    }
}

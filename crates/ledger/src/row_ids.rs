//! The id index (SPEC.md §The atomic take): which finding and verdict rows name each finding id,
//! kept as each row is written, so a task's rows and the tasks a verdict names are an indexed
//! lookup whatever the org's history holds, where a full-text match of the id would walk every
//! row of the org. A superset by design: the ids come from the header as written, and every
//! reader reads the rows it finds with its own reader and `Verdict::concerns`.

use serde_json::Value;

use super::concepts::load_concept;
use super::errors::ApiError;
use super::sql::{Arg, Sql, args};
use metabob_wire::finding::FINDING_SHAPE;
use metabob_wire::header::Header;
use metabob_wire::row::MAX_IDS_PER_ROW;
use metabob_wire::verdict::VERDICT_SHAPE;

// anchor: row-ids-schema
pub const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS row_ids (
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    finding_id  TEXT NOT NULL,
    shape       TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    concept_id  TEXT NOT NULL REFERENCES concepts(id),
    PRIMARY KEY (org_id, finding_id, shape, seq)
);
"#;

/// Indexes the ids a finding or verdict row just written names (anchor: index-ids).
pub fn on_insert(conn: Sql<'_>, org: &str, concept: &Value) -> Result<(), ApiError> {
    let shape = concept.get("shape").and_then(Value::as_str).unwrap_or("");
    if shape != FINDING_SHAPE && shape != VERDICT_SHAPE {
        return Ok(());
    }
    let content = concept.get("content").and_then(Value::as_str).unwrap_or("");
    let mut ids = Header::parse(content).list("finding_ids");
    ids.truncate(MAX_IDS_PER_ROW);
    let seq = concept.get("seq").and_then(Value::as_i64).unwrap_or(0);
    let id = concept.get("id").and_then(Value::as_str).unwrap_or("");
    for finding_id in &ids {
        conn.execute_deferred(
            "INSERT INTO row_ids (org_id, finding_id, shape, seq, concept_id)
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
            args![org, finding_id, shape, seq, id],
        )?;
    }
    Ok(())
}

/// Builds the index from what the store already holds: run once, when the schema gains it.
pub fn backfill(conn: Sql<'_>) -> Result<(), ApiError> {
    let rows = conn.query(
        "SELECT org_id, id FROM concepts WHERE shape = ?1 OR shape = ?2 ORDER BY seq",
        args![FINDING_SHAPE, VERDICT_SHAPE],
        |r| Ok((r.get::<String>(0)?, r.get::<String>(1)?)),
    )?;
    for (org, id) in rows {
        on_insert(conn, &org, &load_concept(conn, &org, &id)?)?;
    }
    Ok(())
}

/// `(?first, ?first+1, …)` for `n` ids, and the ids as arguments.
pub fn id_list(first: usize, ids: &[String]) -> (String, Vec<Arg>) {
    let marks: Vec<String> = (first..first + ids.len())
        .map(|i| format!("?{i}"))
        .collect();
    (
        format!("({})", marks.join(", ")),
        ids.iter().map(|id| Arg::from(id.as_str())).collect(),
    )
}

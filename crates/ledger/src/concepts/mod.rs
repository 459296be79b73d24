//! concept-db: concepts, typed edges and usage outcomes, all scoped to one org.
//!
//! Every statement filters by `org_id`, so a key never sees another org's rows: a concept id of
//! another org reads exactly like one that does not exist. Each request type parses its pointer
//! first (`parse`, no I/O) and then runs on a connection (`run`, blocking).
//!
//! The request types live by job: creating a concept (`create`), searching (`search`), the
//! graph and sequence walks over edges (`graph`), linking (`link`) and usage (`usage`); a page's
//! bound in bytes (`page`) is shared by the search and the graph.

mod create;
mod graph;
mod link;
mod page;
mod search;
mod usage;

use serde_json::{Map, Value, json};

use super::errors::ApiError;
use super::input::Fields;
use super::sql::{Row, Sql, args, json_text};
use metabob_wire::finding::plain_concept_id;
use metabob_wire::text::rfc3339_ms;

pub use create::CreateConcept;
pub use graph::{Graph, Sequence};
pub use link::{Link, Linked};
pub(crate) use search::query_terms;
pub use search::{Search, check_query, max_query_bytes};
pub use usage::{RecordUsage, UsageStats, usage_history};

pub const EDGE_TYPES: &[&str] = &[
    "related_to",
    "derived_from",
    "resolves_to",
    "sequence_next",
    "sequence_prev",
    "description_of",
    "example_of",
    "contradicts",
];

/// Upper bound on `limit` for searches, graphs and sequences.
pub const MAX_LIMIT: i64 = 1000;
pub const DEFAULT_LIMIT: i64 = 10;
/// Upper bound on the searchable words in a `conceptSearch` query. Each word is one more FTS5
/// phrase that every candidate row is tested against, so the words, not the bytes, set a
/// search's cost; a query of a hundred thousand words once held a reader for 48 s.
pub const MAX_QUERY_TERMS: usize = 32;
/// Upper bound on `GET /concepts/:id/usage?limit=`.
pub const MAX_USAGE_LIMIT: i64 = 50;
/// How far a repeated link moves the edge's weight toward the new observation.
pub const EMA_ALPHA: f64 = 0.3;
pub const DEFAULT_PRIORITY: f64 = 0.5;
pub const DEFAULT_NEW_EDGE_WEIGHT: f64 = 0.5;
/// The observation a repeated link without a weight counts as.
pub const DEFAULT_REPEAT_WEIGHT: f64 = 1.0;

/// Bayesian posterior mean of "this concept helps", with a uniform prior: 0.5 before any use.
// anchor: relevance
pub fn relevance(succeeded: i64, loaded: i64) -> f64 {
    (succeeded as f64 + 1.0) / (loaded as f64 + 2.0)
}

/// The same formula in SQL, for filtering and ordering. Unqualified, so that the rank index's
/// expression is this text and both stores' planners match a search's `ORDER BY` to it.
pub(super) const RELEVANCE_SQL: &str = "((times_succeeded + 1.0) / (times_loaded + 2.0))";

/// The index a list-mode `conceptSearch` walks (anchor: rank-index): one org's concepts of one
/// shape in the search's order, so a page is read off the index instead of sorting every row of
/// the shape, once per page.
pub fn rank_index_ddl() -> String {
    format!(
        "CREATE INDEX concepts_by_rank ON concepts (org_id, shape, {RELEVANCE_SQL} DESC, seq DESC);"
    )
}

/// Unqualified, so that an insert can answer them too (SQLite's `RETURNING` takes no alias).
const CONCEPT_COLS: &str = "seq, id, shape, source_type, summary, content, pointer, budget, \
     priority, times_loaded, times_succeeded, times_failed, created_at, updated_at, client_claim";
/// How many columns [`CONCEPT_COLS`] names: a column selected after them is at this index.
const CONCEPT_COLS_COUNT: usize = 15;

/// The concept object every shape answers with.
// anchor: concept_json
fn concept_json(r: &Row<'_>) -> Result<Value, ApiError> {
    let loaded: i64 = r.get(9)?;
    let succeeded: i64 = r.get(10)?;
    let mut obj = json!({
        "id": r.get::<String>(1)?,
        "shape": r.get::<String>(2)?,
        "source_type": r.get::<String>(3)?,
        "summary": r.get::<String>(4)?,
        "content": r.get::<String>(5)?,
        "pointer": json_text(r.get(6)?).unwrap_or(Value::Null),
        "budget": r.get::<Option<i64>>(7)?,
        "priority": r.get::<f64>(8)?,
        "relevance": relevance(succeeded, loaded),
        "times_loaded": loaded,
        "times_succeeded": succeeded,
        "times_failed": r.get::<i64>(11)?,
        "created_at": rfc3339_ms(r.get(12)?),
        "updated_at": rfc3339_ms(r.get(13)?),
        "seq": r.get::<i64>(0)?,
    });
    if let Some(claim) = json_text(r.get(14)?) {
        obj["client_claim"] = claim;
    }
    Ok(obj)
}

const EDGE_COLS: &str = "e.id, e.from_id, e.to_id, e.edge_type, e.weight, e.traversal_count, e.description, \
     e.created_at, e.updated_at, e.client_claim, e.seq";

struct EdgeRow {
    json: Value,
    from_id: String,
    to_id: String,
    weight: f64,
    traversal_count: i64,
    seq: i64,
}

fn edge_row(r: &Row<'_>) -> Result<EdgeRow, ApiError> {
    let from_id: String = r.get(1)?;
    let to_id: String = r.get(2)?;
    let weight: f64 = r.get(4)?;
    let traversal_count: i64 = r.get(5)?;
    let mut json = json!({
        "id": r.get::<String>(0)?,
        "from_concept_id": from_id,
        "to_concept_id": to_id,
        "edge_type": r.get::<String>(3)?,
        "weight": weight,
        "traversal_count": traversal_count,
        "description": r.get::<Option<String>>(6)?,
        "created_at": rfc3339_ms(r.get(7)?),
        "updated_at": rfc3339_ms(r.get(8)?),
    });
    if let Some(claim) = json_text(r.get(9)?) {
        json["client_claim"] = claim;
    }
    Ok(EdgeRow {
        json,
        from_id,
        to_id,
        weight,
        traversal_count,
        seq: r.get(10)?,
    })
}

/// The concept `id` in `org`, or `concept_not_found`.
pub fn load_concept(conn: Sql<'_>, org: &str, id: &str) -> Result<Value, ApiError> {
    // Cached: every write reads its concept back, and every take reads several.
    conn.query_opt(
        &format!("SELECT {CONCEPT_COLS} FROM concepts c WHERE c.org_id = ?1 AND c.id = ?2"),
        args![org, id],
        concept_json,
    )?
    .ok_or_else(|| ApiError::ConceptNotFound { id: id.to_string() })
}

/// Whether `org` holds the concept `id`, read without its row.
pub fn concept_exists(conn: Sql<'_>, org: &str, id: &str) -> Result<bool, ApiError> {
    conn.exists(
        "SELECT 1 FROM concepts WHERE org_id = ?1 AND id = ?2",
        args![org, id],
    )
}

/// The concepts of `ids` in `org` that exist, by id, read a bounded number per statement: one
/// round trip for the rows of a task where a read per row would be one each.
pub fn load_concepts(
    conn: Sql<'_>,
    org: &str,
    ids: &[String],
) -> Result<std::collections::HashMap<String, Value>, ApiError> {
    /// Ids per statement: bounds a statement's size and the number of distinct texts prepared.
    const PER_STATEMENT: usize = 100;
    let mut out = std::collections::HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(PER_STATEMENT) {
        let (list, bound) = crate::row_ids::id_list(1, chunk);
        let rows = conn.query(&load_concepts_sql(&list), &bound, |r| {
            Ok((concept_json(r)?, r.get::<String>(CONCEPT_COLS_COUNT)?))
        })?;
        for (c, owner) in rows {
            if owner != org {
                continue;
            }
            if let Some(id) = c.get("id").and_then(Value::as_str) {
                out.insert(id.to_string(), c);
            }
        }
    }
    Ok(out)
}

/// [`load_concepts`]'s query for an id list. The org is checked on the rows read: named in the
/// query, it led SQLite's planner (with no statistics) to walk the org's concepts by age rather
/// than look up the few ids.
fn load_concepts_sql(list: &str) -> String {
    format!("SELECT {CONCEPT_COLS}, c.org_id FROM concepts c WHERE c.id IN {list}")
}

fn claim_text(claim: Option<&Value>) -> Option<String> {
    claim.map(Value::to_string)
}

fn limit_field(p: &Fields<'_>, max: i64) -> Result<i64, ApiError> {
    Ok(p.opt_i64_in("limit", 1, max)?.unwrap_or(DEFAULT_LIMIT))
}

fn concept_id_field(p: &Fields<'_>, name: &str) -> Result<String, ApiError> {
    Ok(plain_concept_id(p.req_str(name)?))
}

/// Reads `client_claim` off a pointer: an object stored with written rows, absent when not sent.
pub fn client_claim(pointer: &Map<String, Value>) -> Result<Option<&Value>, ApiError> {
    match pointer.get("client_claim") {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Object(_)) => Ok(Some(v)),
        Some(_) => Err(ApiError::bad("pointer.client_claim: must be an object")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::args;

    #[test]
    fn load_concepts_looks_up_each_id_and_keeps_the_orgs_own() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::db::open_connection(dir.path()).unwrap();
        let row = |id: &str, org: &str| {
            format!(
                "INSERT OR IGNORE INTO orgs VALUES ('{org}', '{org}', 0);
                 INSERT INTO concepts (id, org_id, shape, source_type, summary, content, pointer,
                                       priority, created_at, updated_at)
                   VALUES ('{id}', '{org}', 'note', 'metabob_annotation', 's', 'c', '{{}}', 0.5,
                           0, 0);"
            )
        };
        conn.execute_batch(&format!(
            "{}{}{}",
            row("c_1", "org_a"),
            row("c_2", "org_b"),
            row("c_3", "org_a")
        ))
        .unwrap();
        let sql = Sql::Lite(&conn);
        let ids = ["c_1", "c_2", "c_3", "c_none"].map(String::from);
        let mut found: Vec<String> = load_concepts(sql, "org_a", &ids)
            .unwrap()
            .into_keys()
            .collect();
        found.sort();
        assert_eq!(found, ["c_1", "c_3"]);
        let plan = crate::test_support::query_plan(
            sql,
            &load_concepts_sql("(?1, ?2)"),
            args!["c_1", "c_2"],
        );
        assert_eq!(
            plan,
            ["SEARCH c USING INDEX sqlite_autoindex_concepts_1 (id=?)"]
        );
    }
}

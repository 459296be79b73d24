//! `conceptGraph` and `conceptSequence`: walks over one concept's edges.

use serde_json::{Value, json};

use super::page::{Page, Take, row_bytes, skipped_row};
use super::{
    EDGE_COLS, EDGE_TYPES, EdgeRow, MAX_LIMIT, concept_id_field, edge_row, limit_field,
    load_concept,
};
use crate::errors::ApiError;
use crate::input::Fields;
use crate::sql::{Arg, IntoArg, Sql};

pub struct Graph {
    concept_id: String,
    direction: &'static str,
    edge_types: Vec<String>,
    limit: i64,
}

fn edges_touching(
    conn: Sql<'_>,
    org: &str,
    column: &str,
    id: &str,
    edge_types: &[String],
    limit: i64,
) -> Result<Vec<EdgeRow>, ApiError> {
    let mut sql = format!("SELECT {EDGE_COLS} FROM edges e WHERE e.org_id = ? AND e.{column} = ?");
    let mut args: Vec<Arg> = vec![org.arg(), id.arg()];
    if !edge_types.is_empty() {
        sql.push_str(&format!(
            " AND e.edge_type IN ({})",
            vec!["?"; edge_types.len()].join(", ")
        ));
        args.extend(edge_types.iter().map(Arg::from));
    }
    sql.push_str(" ORDER BY e.seq DESC LIMIT ?");
    args.push(limit.arg());
    conn.query(&sql, &args, edge_row)
}

impl Graph {
    pub fn parse(p: &Fields<'_>) -> Result<Self, ApiError> {
        let mut edge_types = p.opt_str_list("edge_types")?.unwrap_or_default();
        if let Some(bad) = edge_types
            .iter()
            .find(|t| !EDGE_TYPES.contains(&t.as_str()))
        {
            return Err(ApiError::bad(format!(
                "edge_types: unknown edge type {bad:?}"
            )));
        }
        // A repeated type filters nothing more; kept once, the list is never longer than
        // EDGE_TYPES, whatever the body repeats.
        edge_types.sort();
        edge_types.dedup();
        Ok(Graph {
            concept_id: concept_id_field(p, "concept_id")?,
            direction: p.opt_enum("direction", &["outgoing", "incoming", "both"], "both")?,
            edge_types,
            limit: limit_field(p, MAX_LIMIT)?,
        })
    }

    // anchor: concept-graph
    pub fn run(self, conn: Sql<'_>, org: &str) -> Result<Value, ApiError> {
        let root = load_concept(conn, org, &self.concept_id)?;
        let mut found: Vec<(&str, EdgeRow)> = Vec::new();
        if self.direction != "incoming" {
            let rows = edges_touching(
                conn,
                org,
                "from_id",
                &self.concept_id,
                &self.edge_types,
                self.limit,
            )?;
            found.extend(rows.into_iter().map(|e| ("outgoing", e)));
        }
        if self.direction != "outgoing" {
            let rows = edges_touching(
                conn,
                org,
                "to_id",
                &self.concept_id,
                &self.edge_types,
                self.limit,
            )?;
            found.extend(rows.into_iter().map(|e| ("incoming", e)));
        }
        found.sort_by_key(|(_, e)| std::cmp::Reverse(e.seq));
        found.truncate(self.limit as usize);
        let mut edges = Vec::with_capacity(found.len());
        // Bounded like a search page: a neighbour no reader accepts is named, and the edges stop
        // once their rows fill a page.
        let mut page = Page::new();
        for (direction, e) in found {
            let other = if direction == "outgoing" {
                &e.to_id
            } else {
                &e.from_id
            };
            let neighbor = load_concept(conn, org, other)?;
            let size = i64::try_from(row_bytes(&neighbor)).unwrap_or(i64::MAX);
            let neighbor = match page.take(size) {
                Take::Stop => break,
                Take::Skip => skipped_row(other, size),
                Take::Read => neighbor,
            };
            edges.push(json!({ "direction": direction, "edge": e.json, "neighbor": neighbor }));
        }
        let mut answer = json!({ "root": root, "edges": edges });
        if page.cut_short {
            answer["truncated"] = true.into();
        }
        Ok(answer)
    }
}

pub struct Sequence {
    concept_id: String,
    direction: &'static str,
    limit: i64,
}

impl Sequence {
    pub fn parse(p: &Fields<'_>) -> Result<Self, ApiError> {
        Ok(Sequence {
            concept_id: concept_id_field(p, "concept_id")?,
            direction: p.opt_enum("direction", &["next", "prev", "both"], "next")?,
            limit: limit_field(p, MAX_LIMIT)?,
        })
    }

    /// Both edge types say the same thing from opposite ends: `A -sequence_next-> B` and
    /// `B -sequence_prev-> A` both mean B follows A, so each direction reads both.
    // anchor: concept-sequence
    pub fn run(self, conn: Sql<'_>, org: &str) -> Result<Value, ApiError> {
        load_concept(conn, org, &self.concept_id)?;
        let id = &self.concept_id;
        let mut found: Vec<(&str, EdgeRow, String)> = Vec::new();
        let mut collect =
            |label: &'static str, column: &str, edge_type: &str| -> Result<(), ApiError> {
                let types = [edge_type.to_string()];
                for e in edges_touching(conn, org, column, id, &types, self.limit)? {
                    let other = if column == "from_id" {
                        e.to_id.clone()
                    } else {
                        e.from_id.clone()
                    };
                    found.push((label, e, other));
                }
                Ok(())
            };
        if self.direction != "prev" {
            collect("next", "from_id", "sequence_next")?;
            collect("next", "to_id", "sequence_prev")?;
        }
        if self.direction != "next" {
            collect("prev", "from_id", "sequence_prev")?;
            collect("prev", "to_id", "sequence_next")?;
        }
        // Strongest link first; among equals the newest edge.
        found.sort_by(|a, b| {
            b.1.weight
                .total_cmp(&a.1.weight)
                .then(b.1.seq.cmp(&a.1.seq))
        });
        found.truncate(self.limit as usize);
        let mut sequence = Vec::with_capacity(found.len());
        for (direction, e, other) in found {
            sequence.push(json!({
                "direction": direction,
                "concept": load_concept(conn, org, &other)?,
                "weight": e.weight,
                "traversal_count": e.traversal_count,
            }));
        }
        Ok(json!({ "concept_id": self.concept_id, "sequence": sequence }))
    }
}

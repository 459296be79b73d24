//! `conceptLink_write`: a typed edge between two concepts, its weight moved on each repeat.

use serde_json::{Value, json};

use super::{
    DEFAULT_NEW_EDGE_WEIGHT, DEFAULT_REPEAT_WEIGHT, EDGE_COLS, EDGE_TYPES, EMA_ALPHA, claim_text,
    concept_id_field, edge_row, load_concept,
};
use crate::db::Writer;
use crate::errors::ApiError;
use crate::input::Fields;
use crate::sql::args;
use metabob_process::random::time_ordered_hex;

pub struct Link {
    from: String,
    to: String,
    edge_type: &'static str,
    description: Option<String>,
    weight: Option<f64>,
    claim: Option<String>,
}

/// What a link write did: the status differs between a new edge and an upsert.
pub struct Linked {
    pub created: bool,
    pub body: Value,
}

impl Link {
    pub fn parse(p: &Fields<'_>, claim: Option<&Value>) -> Result<Self, ApiError> {
        let d = p.req_obj("linkData")?;
        Ok(Link {
            from: concept_id_field(&d, "from_concept_id")?,
            to: concept_id_field(&d, "to_concept_id")?,
            edge_type: d.req_enum("edge_type", EDGE_TYPES)?,
            description: d.opt_str("description")?.map(str::to_string),
            weight: d.opt_f64_in("weight", 0.0, 1.0)?,
            claim: claim_text(claim),
        })
    }

    /// Writes the edge as new, with no check: for a write that has just created the concept
    /// it links from (so no edge from it can exist) and read the one it links to. Its id.
    pub fn insert_fresh(&self, w: &mut Writer, org: &str, now: i64) -> Result<String, ApiError> {
        self.insert(w.sql(), org, now)
    }

    fn insert(&self, tx: crate::sql::Sql<'_>, org: &str, now: i64) -> Result<String, ApiError> {
        let id = format!("edge_{}", time_ordered_hex(now));
        tx.execute_deferred(
            "INSERT INTO edges (id, org_id, from_id, to_id, edge_type, weight, traversal_count, description,
                                created_at, updated_at, client_claim)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7, ?8, ?8, ?9)",
            args![
                id,
                org,
                self.from,
                self.to,
                self.edge_type,
                self.weight.unwrap_or(DEFAULT_NEW_EDGE_WEIGHT),
                self.description,
                now,
                self.claim
            ],
        )?;
        Ok(id)
    }

    // anchor: link-upsert
    pub fn run(&self, w: &mut Writer, org: &str) -> Result<Linked, ApiError> {
        let now = w.tick()?;
        let tx = w.sql();
        for id in [&self.from, &self.to] {
            load_concept(tx, org, id)?;
        }
        let existing: Option<(String, f64)> = tx.query_opt(
            "SELECT id, weight FROM edges WHERE org_id = ?1 AND from_id = ?2 AND to_id = ?3 AND edge_type = ?4",
            args![org, &self.from, &self.to, self.edge_type],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let (edge_id, previous) = match existing {
            None => (self.insert(tx, org, now)?, None),
            Some((id, old)) => {
                let observed = self.weight.unwrap_or(DEFAULT_REPEAT_WEIGHT);
                let weight = old + EMA_ALPHA * (observed - old);
                tx.execute(
                    "UPDATE edges SET weight = ?2, traversal_count = traversal_count + 1,
                         description = coalesce(?3, description), updated_at = ?4,
                         client_claim = coalesce(?5, client_claim)
                     WHERE id = ?1",
                    args![id, weight, self.description, now, self.claim],
                )?;
                (id, Some(old))
            }
        };
        let edge = tx
            .query_opt(
                &format!("SELECT {EDGE_COLS} FROM edges e WHERE e.id = ?1"),
                args![&edge_id],
                edge_row,
            )?
            .ok_or_else(|| ApiError::Internal("the edge just written does not read back".into()))?;
        Ok(match previous {
            None => Linked {
                created: true,
                body: json!({ "created": true, "edge": edge.json }),
            },
            Some(old) => Linked {
                created: false,
                body: json!({ "created": false, "previous_weight": old, "edge": edge.json }),
            },
        })
    }
}

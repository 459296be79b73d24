//! `conceptSearch`: the query's bounds, and one page of an org's concepts in relevance order.

use serde_json::{Value, json};

use super::page::{Page, ROW_BYTES_SQL, Take, skipped_row};
use super::{
    CONCEPT_COLS, CONCEPT_COLS_COUNT, MAX_LIMIT, MAX_QUERY_TERMS, RELEVANCE_SQL, concept_json,
    limit_field,
};
use crate::errors::{ApiError, QueryBound};
use crate::input::Fields;
use crate::sql::{Arg, IntoArg, Sql};

pub struct Search {
    shape: Option<String>,
    source_type: Option<String>,
    query: Option<String>,
    min_relevance: Option<f64>,
    limit: i64,
    offset: i64,
}

/// Upper bound on a `conceptSearch` query's text, in bytes: the client's own cap on a `query`
/// field (`metabob_process::guard`, SPEC.md §Field kinds and caps), so whatever the client lets through
/// the ledger searches, and the two cannot drift apart.
// anchor: max_query_bytes
pub fn max_query_bytes() -> usize {
    metabob_wire::fields::field_rule("query").cap
}

/// The searchable words of query text: whitespace-separated words holding a letter or a digit.
pub(crate) fn query_terms(text: &str) -> impl Iterator<Item = &str> {
    text.split_whitespace()
        .filter(|w| w.chars().any(char::is_alphanumeric))
}

/// Holds query text to the search bounds: at most [`max_query_bytes`] bytes, no NUL (SQLite
/// would end the text there), at most [`MAX_QUERY_TERMS`] searchable words.
// anchor: check_query
pub fn check_query(text: &str) -> Result<(), ApiError> {
    let max = max_query_bytes();
    if text.len() > max {
        return Err(ApiError::QueryTooLarge {
            bound: QueryBound::Bytes,
            got: text.len(),
            max,
        });
    }
    if text.contains('\0') {
        return Err(ApiError::bad(
            "query: contains a NUL byte (U+0000), which no text can match",
        ));
    }
    let terms = query_terms(text).count();
    if terms > MAX_QUERY_TERMS {
        return Err(ApiError::QueryTooLarge {
            bound: QueryBound::Terms,
            got: terms,
            max: MAX_QUERY_TERMS,
        });
    }
    Ok(())
}

impl Search {
    pub fn parse(p: &Fields<'_>) -> Result<Self, ApiError> {
        Ok(Search {
            shape: p.opt_str("shape")?.map(str::to_string),
            source_type: p.opt_str("source_type")?.map(str::to_string),
            query: match p.opt_str("query")? {
                Some(q) => {
                    check_query(q)?;
                    Some(q).filter(|q| !q.trim().is_empty()).map(str::to_string)
                }
                None => None,
            },
            min_relevance: p.opt_f64_in("min_relevance", 0.0, 1.0)?,
            limit: limit_field(p, MAX_LIMIT)?,
            offset: p.opt_i64_in("offset", 0, i64::MAX)?.unwrap_or(0),
        })
    }

    /// Whether the search matches text, which on SQLite reads the full-text index.
    pub fn reads_text(&self) -> bool {
        self.query.is_some()
    }

    // anchor: concept-search
    pub fn run(self, conn: Sql<'_>, org: &str) -> Result<Value, ApiError> {
        let mode = if self.query.is_some() {
            "query"
        } else {
            "list"
        };
        let mut clauses = vec!["c.org_id = ?".to_string()];
        let mut args: Vec<Arg> = vec![org.arg()];
        if let Some(shape) = self.shape {
            clauses.push("c.shape = ?".into());
            args.push(shape.arg());
        }
        if let Some(st) = self.source_type {
            clauses.push("c.source_type = ?".into());
            args.push(st.arg());
        }
        if let Some(min) = self.min_relevance {
            clauses.push(format!("{RELEVANCE_SQL} >= ?"));
            args.push(min.arg());
        }
        if let Some(q) = &self.query {
            match conn.fts_filter("c.", args.len() + 1, q) {
                Some((filter, words)) => {
                    clauses.push(filter);
                    args.extend(words);
                }
                // Only punctuation: nothing can match, and that is an answer, not an error.
                None => clauses.push("1 = 0".into()),
            }
        }
        let filter = clauses.join(" AND ");
        let total: i64 = conn.value(
            &format!("SELECT count(*) FROM concepts c WHERE {filter}"),
            &args,
        )?;
        args.push(self.limit.arg());
        args.push(self.offset.arg());
        // One pass, in order, each row's size read before its texts: the page stops once its
        // texts would pass the page's bytes, and a row no reader accepts is named, not read.
        let mut page = Page::new();
        let mut concepts = Vec::new();
        conn.query_until(
            &format!(
                "SELECT {CONCEPT_COLS}, {ROW_BYTES_SQL} FROM concepts c WHERE {filter}
                 ORDER BY {RELEVANCE_SQL} DESC, c.seq DESC LIMIT ? OFFSET ?"
            ),
            &args,
            |r| {
                let size = r.get::<i64>(CONCEPT_COLS_COUNT)?;
                match page.take(size) {
                    Take::Stop => return Ok(false),
                    Take::Skip => concepts.push(skipped_row(&r.get::<String>(1)?, size)),
                    Take::Read => concepts.push(concept_json(r)?),
                }
                Ok(true)
            },
        )?;
        let mut answer = json!({
            "mode": mode,
            "concepts": concepts,
            "total": total,
            "limit": self.limit,
            "offset": self.offset,
        });
        if page.cut_short {
            answer["next_offset"] = (self.offset + page.taken as i64).into();
        }
        Ok(answer)
    }
}

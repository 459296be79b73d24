//! concept-db: concepts, typed edges and usage outcomes, all scoped to one org.
//!
//! Every statement filters by `org_id`, so a key never sees another org's rows: a concept id of
//! another org reads exactly like one that does not exist. Each request type parses its pointer
//! first (`parse`, no I/O) and then runs on a connection (`run`, blocking).

use serde_json::{Map, Value, json};

use super::db::Writer;
use super::errors::{ApiError, QueryBound};
use super::input::Fields;
use super::sql::{Arg, IntoArg, Row, Sql, args, json_text};
use metabob_wire::finding::plain_concept_id;
use metabob_wire::header::Header;
use metabob_wire::row::{MAX_IDS_PER_ROW, PAGE_BYTES, RowTexts, SKIPPED_KEY, max_row_bytes};
use metabob_wire::util::{random_hex, rfc3339_ms};
use metabob_wire::verdict::VERDICT_SHAPE;

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
    .ok_or_else(|| ApiError::ConceptNotFound(id.to_string()))
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

// ---------------------------------------------------------------------------------------------
// concept_create_write

pub struct CreateConcept {
    content: String,
    shape: String,
    source_type: String,
    summary: String,
    pointer: Value,
    budget: Option<i64>,
    priority: f64,
    claim: Option<String>,
}

impl CreateConcept {
    pub fn parse(p: &Fields<'_>, claim: Option<&Value>) -> Result<Self, ApiError> {
        let d = p.req_obj("conceptData")?;
        let shape = d.req_str("shape")?.to_string();
        let pointer = match d.opt_obj("pointer")? {
            Some(m) => Value::Object(m.clone()),
            None => json!({ "type": shape }),
        };
        Ok(CreateConcept {
            content: d.req_str("content")?.to_string(),
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

    /// Holds each of the row's texts to what every reader reads, so that no write key can
    /// store a row that blinds the readers of its org.
    fn check_size(&self) -> Result<(), ApiError> {
        let pointer = self.pointer.to_string();
        let texts = RowTexts {
            content: &self.content,
            summary: &self.summary,
            pointer: &pointer,
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
        let now = w.tick_holding(org, &self.holder_ids())?;
        let concept = self.insert(w.sql(), org, now)?;
        Ok(json!({ "concept": concept }))
    }

    /// The finding ids whose holder this row may change: the ones a verdict row names (a claim
    /// is one). Read from the header as the client writes it; bounded as any row's ids are.
    fn holder_ids(&self) -> Vec<String> {
        if self.shape != VERDICT_SHAPE {
            return Vec::new();
        }
        let mut ids = Header::parse(&self.content).list("finding_ids");
        ids.truncate(MAX_IDS_PER_ROW);
        ids
    }

    /// Inserts the concept with creation time `now` on `conn`, inside the caller's transaction
    /// (the goal board writes a task and its dispatch in one), keeps the open-task index in
    /// step, and returns it as answered. Every concept the ledger writes comes through here. A
    /// verdict row must be written under its findings' holder locks, taken before `now` was
    /// drawn: [`CreateConcept::run`] takes them; the take holds them already.
    pub fn insert(&self, conn: Sql<'_>, org: &str, now: i64) -> Result<Value, ApiError> {
        self.check_size()?;
        let id = format!("concept_{}", random_hex(12));
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
                    self.pointer.to_string(),
                    self.budget,
                    self.priority,
                    now,
                    self.claim
                ],
                concept_json,
            )?
            .ok_or_else(|| ApiError::Internal("an insert answered no row".into()))?;
        super::open_tasks::on_insert(conn, org, &concept)?;
        Ok(concept)
    }
}

// ---------------------------------------------------------------------------------------------
// conceptSearch

pub struct Search {
    shape: Option<String>,
    source_type: Option<String>,
    query: Option<String>,
    min_relevance: Option<f64>,
    limit: i64,
    offset: i64,
}

/// Upper bound on a `conceptSearch` query's text, in bytes: the client's own cap on a `query`
/// field (`metabob_wire::guard`, SPEC.md §Field kinds and caps), so whatever the client lets through
/// the ledger searches, and the two cannot drift apart.
// anchor: max_query_bytes
pub fn max_query_bytes() -> usize {
    metabob_wire::guard::field_rule("query").cap
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

/// A row's stored texts in bytes, as [`RowTexts`] counts them.
const ROW_BYTES_SQL: &str = "CAST(octet_length(c.content) + octet_length(c.summary) \
     + COALESCE(octet_length(c.pointer), 0) + COALESCE(octet_length(c.client_claim), 0) \
     + octet_length(c.shape) + octet_length(c.source_type) AS BIGINT)";

/// What a page does with its next row.
#[derive(Debug, PartialEq, Eq)]
enum Take {
    Read,
    /// Over what every reader accepts (an older row): answered by id and size alone.
    Skip,
    /// The page's bytes are spent: the page ends before this row.
    Stop,
}

/// A page's running count of rows and bytes (anchor: page-cut).
struct Page {
    bytes: i64,
    read: usize,
    /// Rows the page answers (read or skipped).
    taken: usize,
    cut_short: bool,
}

impl Page {
    fn new() -> Page {
        Page {
            bytes: 0,
            read: 0,
            taken: 0,
            cut_short: false,
        }
    }

    /// Rows are taken in order while their texts fit [`PAGE_BYTES`]: always the first row a
    /// reader accepts, never one it does not (that one is answered as skipped).
    fn take(&mut self, size: i64) -> Take {
        let max_row = i64::try_from(max_row_bytes()).unwrap_or(i64::MAX);
        let budget = i64::try_from(PAGE_BYTES).unwrap_or(i64::MAX);
        let take = if size > max_row {
            Take::Skip
        } else if self.bytes + size > budget && self.read > 0 {
            self.cut_short = true;
            return Take::Stop;
        } else {
            self.bytes += size;
            self.read += 1;
            Take::Read
        };
        self.taken += 1;
        take
    }
}

/// A loaded concept's stored texts in bytes, as [`ROW_BYTES_SQL`] counts them.
fn row_bytes(c: &Value) -> usize {
    let text = |k: &str| c.get(k).and_then(Value::as_str).map_or(0, str::len);
    let json = |k: &str| {
        c.get(k)
            .filter(|v| !v.is_null())
            .map_or(0, |v| v.to_string().len())
    };
    ["content", "summary", "shape", "source_type"]
        .into_iter()
        .map(text)
        .sum::<usize>()
        + json("pointer")
        + json("client_claim")
}

/// What a page answers in place of a row no reader accepts.
fn skipped_row(id: &str, bytes: i64) -> Value {
    json!({
        "id": id,
        SKIPPED_KEY: format!("row_too_large: {bytes} bytes, over the {} a reader reads", max_row_bytes()),
    })
}

// ---------------------------------------------------------------------------------------------
// conceptGraph

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

// ---------------------------------------------------------------------------------------------
// conceptLink_write

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
            None => {
                let id = format!("edge_{}", random_hex(12));
                tx.execute(
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
                (id, None)
            }
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

// ---------------------------------------------------------------------------------------------
// conceptUsage_write, conceptUsageStats, GET /concepts/:id/usage

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

    // anchor: record-usage
    pub fn run(&self, w: &mut Writer, org: &str) -> Result<Value, ApiError> {
        let now = w.tick()?;
        let tx = w.sql();
        load_concept(tx, org, &self.concept_id)?;
        let id = format!("usage_{}", random_hex(12));
        tx.execute(
            &format!("INSERT INTO usage (org_id, {USAGE_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
            args![org, id, self.concept_id, self.outcome, self.trace_id, self.activity_id, self.task_id, now, self.claim],
        )?;
        // Every outcome counts as a load; only success earns credit toward relevance.
        let (succ, fail) = match self.outcome {
            "success" => (1, 0),
            "failure" => (0, 1),
            _ => (0, 0),
        };
        tx.execute(
            "UPDATE concepts SET times_loaded = times_loaded + 1, times_succeeded = times_succeeded + ?3,
                 times_failed = times_failed + ?4, updated_at = ?5
             WHERE org_id = ?1 AND id = ?2",
            args![org, self.concept_id, succ, fail, now],
        )?;
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
            return Err(ApiError::ConceptNotFound(self.concept_id));
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

// ---------------------------------------------------------------------------------------------
// conceptSequence

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

    fn cut(sizes: &[i64]) -> (Vec<Take>, Page) {
        let mut page = Page::new();
        let mut takes = Vec::new();
        for &size in sizes {
            let take = page.take(size);
            let stop = take == Take::Stop;
            takes.push(take);
            if stop {
                break;
            }
        }
        (takes, page)
    }

    #[test]
    fn a_page_stops_at_its_bytes_and_names_a_row_no_reader_accepts() {
        let max = i64::try_from(max_row_bytes()).expect("small");
        let budget = i64::try_from(PAGE_BYTES).expect("small");
        // Rows at the bound: as many as fit the page's bytes, then the page ends.
        let (takes, page) = cut(&[max; 40]);
        let fit = usize::try_from(budget / max).expect("small");
        assert_eq!(takes.len(), fit + 1);
        assert_eq!(takes.last(), Some(&Take::Stop));
        assert_eq!((page.taken, page.cut_short), (fit, true));
        // An oversized row is skipped wherever it stands, the first included.
        let (takes, page) = cut(&[max + 5, 10, max + 1, 5]);
        assert_eq!(takes, [Take::Skip, Take::Read, Take::Skip, Take::Read]);
        assert_eq!((page.taken, page.cut_short), (4, false));
    }
}

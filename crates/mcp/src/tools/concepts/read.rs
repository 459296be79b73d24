//! concept_search, concept_neighbors, concept_usage_stats and concept_sequence: concept-db's
//! read shapes, rendered. None of them records a load on what it returns; concept_record_usage
//! is the relevance signal.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::render::{
    ConceptRow, NAME_CHARS, count, line, num, or_dash, push_body, push_skipped, read_count,
    read_f64, read_list, read_text,
};
use super::{
    ContentMode, EdgeDirection, NeighborsArgs, SearchArgs, Sent, SequenceArgs, SequenceDirection,
    UsageStatsArgs, answer_body, ask, either, history, malformed, required_id, unknown_concept,
};
use crate::ctx::{Ctx, Here};
use crate::tools::{Reply, attached};
use metabob_net::attachment::Attachment;

const DEFAULT_LIMIT: u32 = 10;

pub async fn concept_search(_ctx: &Ctx, here: &Here<'_>, a: SearchArgs) -> Reply {
    const TOOL: &str = "concept_search";
    let att = match attached(here, TOOL).await {
        Ok(att) => att,
        Err(reply) => return reply,
    };
    either(match a.concept_id.as_deref() {
        Some(raw) => by_id(att, raw, a.content.unwrap_or(ContentMode::Full)).await,
        None => search(att, &a).await,
    })
}

/// One concept by id: the root `conceptGraph` answers, the row `GET /concepts/:id` returns.
async fn by_id(att: &Attachment, raw: &str, mode: ContentMode) -> Result<Reply, Reply> {
    const TOOL: &str = "concept_search";
    let id = required_id(TOOL, "concept_id", raw)?;
    let pointer = json!({"type": "conceptGraph", "concept_id": id, "limit": 1});
    let r = ask(att, TOOL, pointer).await?;
    if unknown_concept(&r) {
        return Ok(Reply::ok(format!(
            "No concept {}: concept-db holds none by that id in this key's org.",
            line(&id, NAME_CHARS)
        )));
    }
    let body = answer_body(TOOL, "conceptGraph", r, Sent::Read)?;
    let Some(c) = body.get("root").and_then(ConceptRow::read) else {
        return Err(malformed(TOOL, "conceptGraph", "no readable root concept"));
    };
    let mut out = format!("Concept {}\n", c.head());
    c.push_summary(&mut out);
    push_stats(&mut out, &c);
    push_body(&mut out, &c.content, mode);
    Ok(Reply::ok(out.trim_end().to_string()))
}

fn push_stats(out: &mut String, c: &ConceptRow) {
    let updated = c.updated_at.as_deref().unwrap_or("?");
    let _ = writeln!(out, "   {} · updated {updated}", c.counts());
}

async fn search(att: &Attachment, a: &SearchArgs) -> Result<Reply, Reply> {
    const TOOL: &str = "concept_search";
    let limit = a.limit.unwrap_or(DEFAULT_LIMIT);
    let mut pointer = json!({"type": "conceptSearch", "limit": limit});
    let query = a.query.as_deref().map(str::trim).filter(|q| !q.is_empty());
    let mut filters = Vec::new();
    if let Some(q) = query {
        pointer["query"] = json!(q);
    }
    for (k, v) in [("source_type", &a.source_type), ("shape", &a.shape)] {
        if let Some(v) = v {
            pointer[k] = json!(v);
            filters.push(format!("{k} {}", line(v, NAME_CHARS)));
        }
    }
    if let Some(min) = a.min_relevance {
        pointer["min_relevance"] = json!(min);
        filters.push(format!("relevance ≥ {min:.2}"));
    }
    let r = ask(att, TOOL, pointer).await?;
    let body = answer_body(TOOL, "conceptSearch", r, Sent::Read)?;
    let Some(list) = body.get("concepts").and_then(Value::as_array) else {
        return Err(malformed(TOOL, "conceptSearch", "no concepts list"));
    };
    let (rows, skipped) = read_list(list, limit as usize, ConceptRow::read);
    let matching = query.map_or_else(String::new, |q| format!(" matching \"{}\"", line(q, 200)));
    let within = if filters.is_empty() {
        String::new()
    } else {
        format!(" with {}", filters.join(", "))
    };
    let total = read_count(body.get("total")).map_or_else(String::new, |t| format!(" of {t}"));
    let mut out = if rows.is_empty() {
        format!("No concepts{matching}{within}.\n")
    } else {
        let n = rows.len();
        format!("Concepts{matching}{within}: {n}{total}, most relevant first.\n")
    };
    let mode = a.content.unwrap_or(ContentMode::Preview);
    for (i, c) in rows.iter().enumerate() {
        let _ = writeln!(out, "\n{}. {}", i + 1, c.head());
        c.push_summary(&mut out);
        push_stats(&mut out, c);
        push_body(&mut out, &c.content, mode);
    }
    push_skipped(&mut out, skipped, "concepts");
    Ok(Reply::ok(out.trim_end().to_string()))
}

pub async fn concept_neighbors(_ctx: &Ctx, here: &Here<'_>, a: NeighborsArgs) -> Reply {
    either(neighbors(here, a).await)
}

async fn neighbors(here: &Here<'_>, a: NeighborsArgs) -> Result<Reply, Reply> {
    const TOOL: &str = "concept_neighbors";
    let att = attached(here, TOOL).await?;
    let id = required_id(TOOL, "concept_id", &a.concept_id)?;
    let direction = match a.direction.unwrap_or(EdgeDirection::Both) {
        EdgeDirection::Outgoing => "outgoing",
        EdgeDirection::Incoming => "incoming",
        EdgeDirection::Both => "both",
    };
    let limit = a.limit.unwrap_or(DEFAULT_LIMIT);
    let mut pointer =
        json!({"type": "conceptGraph", "concept_id": id, "direction": direction, "limit": limit});
    if let Some(types) = a.edge_types.as_ref().filter(|t| !t.is_empty()) {
        pointer["edge_types"] = json!(types);
    }
    let r = ask(att, TOOL, pointer).await?;
    let shown_id = line(&id, NAME_CHARS);
    if unknown_concept(&r) {
        return Ok(Reply::ok(format!(
            "No neighbours: concept-db holds no concept {shown_id} in this key's org."
        )));
    }
    let body = answer_body(TOOL, "conceptGraph", r, Sent::Read)?;
    let Some(list) = body.get("edges").and_then(Value::as_array) else {
        return Err(malformed(TOOL, "conceptGraph", "no edges list"));
    };
    let (edges, skipped) = read_list(list, limit as usize, Neighbor::read);
    let dirs = if direction == "both" {
        "both directions".to_string()
    } else {
        format!("{direction} edges")
    };
    let mut out = match edges.len() {
        0 => format!("No neighbours of {shown_id} ({dirs}).\n"),
        n => format!("Neighbours of {shown_id} ({dirs}): {n}, newest edge first.\n"),
    };
    let mode = a.content.unwrap_or(ContentMode::Preview);
    for (i, n) in edges.iter().enumerate() {
        let arrow = if n.outgoing { "→" } else { "←" };
        let way = if n.outgoing { "outgoing" } else { "incoming" };
        let _ = writeln!(
            out,
            "\n{}. {way} {} {arrow} {}",
            i + 1,
            n.edge_type,
            n.concept.head()
        );
        n.concept.push_summary(&mut out);
        let _ = writeln!(
            out,
            "   edge weight {} · traversals {} · relevance {}",
            num(n.weight),
            count(n.traversals),
            num(n.concept.relevance)
        );
        push_body(&mut out, &n.concept.content, mode);
    }
    push_skipped(&mut out, skipped, "edges");
    Ok(Reply::ok(out.trim_end().to_string()))
}

/// One edge of a `conceptGraph` answer and the concept at its other end.
struct Neighbor {
    outgoing: bool,
    edge_type: String,
    weight: Option<f64>,
    traversals: Option<i64>,
    concept: ConceptRow,
}

impl Neighbor {
    fn read(v: &Value) -> Option<Neighbor> {
        let outgoing = match v.get("direction").and_then(Value::as_str)? {
            "outgoing" => true,
            "incoming" => false,
            _ => return None,
        };
        let edge = v.get("edge")?;
        Some(Neighbor {
            outgoing,
            edge_type: or_dash(&read_text(edge.get("edge_type"), NAME_CHARS)).to_string(),
            weight: read_f64(edge.get("weight")),
            traversals: read_count(edge.get("traversal_count")),
            concept: ConceptRow::read(v.get("neighbor")?)?,
        })
    }
}

pub async fn concept_usage_stats(_ctx: &Ctx, here: &Here<'_>, a: UsageStatsArgs) -> Reply {
    either(usage_stats(here, a).await)
}

async fn usage_stats(here: &Here<'_>, a: UsageStatsArgs) -> Result<Reply, Reply> {
    const TOOL: &str = "concept_usage_stats";
    let att = attached(here, TOOL).await?;
    let id = required_id(TOOL, "concept_id", &a.concept_id)?;
    let pointer = json!({"type": "conceptUsageStats", "concept_id": id});
    let r = ask(att, TOOL, pointer).await?;
    let body = answer_body(TOOL, "conceptUsageStats", r, Sent::Read)?;
    let Some(total) = read_count(body.get("total_uses")) else {
        return Err(malformed(TOOL, "conceptUsageStats", "no total_uses count"));
    };
    let pct = |k: &str| {
        read_f64(body.get(k)).map_or_else(|| "?".into(), |r| format!("{:.0}%", r * 100.0))
    };
    let uses = if total == 1 { "use" } else { "uses" };
    let mut out = format!(
        "Usage of {}: {total} {uses} — {} succeeded ({}), {} failed ({}), {} neutral; relevance {}.\n",
        line(&id, NAME_CHARS),
        count(read_count(body.get("successes"))),
        pct("success_rate"),
        count(read_count(body.get("failures"))),
        pct("failure_rate"),
        count(read_count(body.get("neutral"))),
        num(read_f64(body.get("relevance"))),
    );
    if a.include_history.unwrap_or(true) {
        let limit = a.history_limit.unwrap_or(DEFAULT_LIMIT);
        out.push('\n');
        out.push_str(&history::section(att, &id, limit).await);
    }
    Ok(Reply::ok(out.trim_end().to_string()))
}

pub async fn concept_sequence(_ctx: &Ctx, here: &Here<'_>, a: SequenceArgs) -> Reply {
    either(sequence(here, a).await)
}

async fn sequence(here: &Here<'_>, a: SequenceArgs) -> Result<Reply, Reply> {
    const TOOL: &str = "concept_sequence";
    let att = attached(here, TOOL).await?;
    let id = required_id(TOOL, "concept_id", &a.concept_id)?;
    let direction = match a.direction.unwrap_or(SequenceDirection::Next) {
        SequenceDirection::Next => "next",
        SequenceDirection::Prev => "prev",
        SequenceDirection::Both => "both",
    };
    let limit = a.limit.unwrap_or(DEFAULT_LIMIT);
    let pointer = json!({"type": "conceptSequence", "concept_id": id, "direction": direction, "limit": limit});
    let r = ask(att, TOOL, pointer).await?;
    let body = answer_body(TOOL, "conceptSequence", r, Sent::Read)?;
    let Some(list) = body.get("sequence").and_then(Value::as_array) else {
        return Err(malformed(TOOL, "conceptSequence", "no sequence list"));
    };
    let (steps, skipped) = read_list(list, limit as usize, Step::read);
    let which = match direction {
        "next" => "following",
        "prev" => "preceding",
        _ => "following or preceding",
    };
    let shown_id = line(&id, NAME_CHARS);
    let mut out = match steps.len() {
        0 => format!("No concepts observed {which} {shown_id}.\n"),
        n => format!("Concepts observed {which} {shown_id}: {n}, strongest first.\n"),
    };
    for (i, s) in steps.iter().enumerate() {
        let arrow = if s.next { "next →" } else { "prev ←" };
        let _ = writeln!(out, "\n{}. {arrow} {}", i + 1, s.concept.head());
        s.concept.push_summary(&mut out);
        let _ = writeln!(
            out,
            "   weight {} · traversals {} · relevance {}",
            num(s.weight),
            count(s.traversals),
            num(s.concept.relevance)
        );
    }
    push_skipped(&mut out, skipped, "entries");
    Ok(Reply::ok(out.trim_end().to_string()))
}

/// One entry of a `conceptSequence` answer.
struct Step {
    next: bool,
    weight: Option<f64>,
    traversals: Option<i64>,
    concept: ConceptRow,
}

impl Step {
    fn read(v: &Value) -> Option<Step> {
        let next = match v.get("direction").and_then(Value::as_str)? {
            "next" => true,
            "prev" => false,
            _ => return None,
        };
        Some(Step {
            next,
            weight: read_f64(v.get("weight")),
            traversals: read_count(v.get("traversal_count")),
            concept: ConceptRow::read(v.get("concept")?)?,
        })
    }
}

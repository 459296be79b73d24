//! concept_link, concept_create and concept_record_usage: concept-db's three write shapes, each
//! sent once through the attachment (which adds the client claim and refuses a read-only key
//! before sending), with the author stamped by this process, never by the agent's text.

use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use super::render::{
    ConceptRow, NAME_CHARS, SUMMARY_CHARS, count, line, num, or_dash, read_count, read_f64,
    read_id, read_text,
};
use super::{
    CreateArgs, LinkArgs, RecordUsageArgs, Sent, UsageOutcome, answer_body, ask, malformed,
    required_id,
};
use crate::ctx::{Ctx, Here};
use crate::tools::{CallResult, Outcome, Reply, attached};
use metabob_wire::header::{self, Header};

/// The header keys only this process writes into a concept it creates.
const STAMP_KEYS: &[&str] = &["recorded_by", "session"];

pub async fn concept_link(_ctx: &Ctx, here: &Here<'_>, a: LinkArgs) -> Reply {
    written(link(here, a).await)
}

/// A write's reply with the call log's result: shared, or not.
fn written(r: Result<Reply, Reply>) -> Reply {
    match r {
        Ok(reply) => reply.with_result(CallResult::Ok),
        Err(reply) if reply.outcome == Outcome::Error => reply.with_result(CallResult::Error),
        Err(reply) => reply,
    }
}

async fn link(here: &Here<'_>, a: LinkArgs) -> Result<Reply, Reply> {
    const TOOL: &str = "concept_link";
    let att = attached(here, TOOL).await?;
    let from = required_id(TOOL, "from_concept_id", &a.from_concept_id)?;
    let to = required_id(TOOL, "to_concept_id", &a.to_concept_id)?;
    let mut data = json!({"from_concept_id": from, "to_concept_id": to, "edge_type": a.edge_type});
    if let Some(d) = &a.description {
        data["description"] = json!(d);
    }
    if let Some(w) = a.weight {
        data["weight"] = json!(w);
    }
    let pointer = json!({"type": "conceptLink_write", "linkData": data});
    let r = ask(att, TOOL, pointer).await?;
    let body = answer_body(TOOL, "conceptLink_write", r, Sent::Write)?;
    let Some(edge) = body.get("edge").and_then(Edge::read) else {
        return Err(malformed(
            TOOL,
            "conceptLink_write",
            "no readable edge (the link was sent once; concept_neighbors shows what concept-db holds)",
        ));
    };
    let mut out = match body.get("created").and_then(Value::as_bool) {
        Some(false) => format!(
            "The edge already existed: {} (edge {}). Its weight moved from {} to {}; traversals {}.\n",
            edge.path(),
            edge.id,
            num(read_f64(body.get("previous_weight"))),
            num(edge.weight),
            count(edge.traversals)
        ),
        _ => format!(
            "Linked {} (edge {}): weight {}, traversals {}.\n",
            edge.path(),
            edge.id,
            num(edge.weight),
            count(edge.traversals)
        ),
    };
    if !edge.description.is_empty() {
        let _ = writeln!(out, "description: {}", edge.description);
    }
    Ok(Reply::ok(out.trim_end().to_string()))
}

/// The edge of a `conceptLink_write` answer, bounded.
struct Edge {
    id: String,
    from: String,
    to: String,
    edge_type: String,
    weight: Option<f64>,
    traversals: Option<i64>,
    description: String,
}

impl Edge {
    fn read(v: &Value) -> Option<Edge> {
        Some(Edge {
            id: read_id(v.get("id"))?,
            from: read_id(v.get("from_concept_id"))?,
            to: read_id(v.get("to_concept_id"))?,
            edge_type: read_text(v.get("edge_type"), NAME_CHARS),
            weight: read_f64(v.get("weight")),
            traversals: read_count(v.get("traversal_count")),
            description: read_text(v.get("description"), 1000),
        })
    }

    /// `from —type→ to`.
    fn path(&self) -> String {
        format!("{} —{}→ {}", self.from, or_dash(&self.edge_type), self.to)
    }
}

pub async fn concept_create(_ctx: &Ctx, here: &Here<'_>, a: CreateArgs) -> Reply {
    written(create(here, a).await)
}

async fn create(here: &Here<'_>, a: CreateArgs) -> Result<Reply, Reply> {
    const TOOL: &str = "concept_create";
    let att = attached(here, TOOL).await?;
    let vessel = here.session.vessel.as_deref();
    let stamped = stamp(&a.content, vessel, &att.claim().session);
    let mut data = json!({
        "content": stamped.content,
        "shape": a.shape,
        "source_type": a.source_type,
        "pointer": a.pointer.clone().unwrap_or_else(|| {
            let mut m = Map::new();
            m.insert("type".into(), json!(a.shape));
            m
        }),
    });
    if let Some(s) = &a.summary {
        data["summary"] = json!(s);
    }
    if let Some(b) = a.budget {
        data["budget"] = json!(b);
    }
    if let Some(p) = a.priority {
        data["priority"] = json!(p);
    }
    let pointer = json!({"type": "concept_create_write", "conceptData": data});
    let r = ask(att, TOOL, pointer).await?;
    let body = answer_body(TOOL, "concept_create_write", r, Sent::Write)?;
    let Some(c) = body.get("concept").and_then(ConceptRow::read) else {
        return Err(malformed(
            TOOL,
            "concept_create_write",
            "no readable concept (the write was sent once; concept_search shows what concept-db holds)",
        ));
    };
    Ok(Reply::ok(created_text(&c, &stamped)))
}

fn created_text(c: &ConceptRow, stamped: &Stamped) -> String {
    let budget = c.budget.map_or_else(|| "—".to_string(), |b| b.to_string());
    let mut out = format!(
        "Created concept {}: shape {}, source type {}, budget {budget}, priority {}.\n",
        c.id,
        or_dash(&c.shape),
        or_dash(&c.source_type),
        num(c.priority)
    );
    if !c.summary.is_empty() {
        let _ = writeln!(out, "summary: {}", c.summary);
    }
    let _ = match &stamped.author {
        Some(by) => writeln!(
            out,
            "Stamped as the content's first header lines: recorded_by: {}, session: {}.",
            line(by, NAME_CHARS),
            line(&stamped.session, NAME_CHARS)
        ),
        None => writeln!(
            out,
            "No vessel identity (set VESSEL_ID or METABOB_API_KEY), so no recorded_by line was stamped; session: {} was.",
            line(&stamped.session, NAME_CHARS)
        ),
    };
    if !stamped.removed.is_empty() {
        let removed: Vec<String> = stamped
            .removed
            .iter()
            .map(|l| line(l, SUMMARY_CHARS))
            .collect();
        let _ = writeln!(
            out,
            "Removed from the content's header block, since only this server stamps the author and session: {}.",
            removed.join("; ")
        );
    }
    out.trim_end().to_string()
}

/// A concept's content with the author stamp in place of whatever the agent wrote there.
#[derive(Debug, PartialEq, Eq)]
struct Stamped {
    content: String,
    author: Option<String>,
    session: String,
    /// The `recorded_by:`/`session:` lines taken out of the agent's header block.
    removed: Vec<String>,
}

/// The author stamp (anchor: concept-author-stamp): `recorded_by` (only with a vessel
/// identity: omitted, never faked) and `session` become the content's first lines, so every
/// reader's first match is the stamp. Such lines in the agent's leading header block go first,
/// with or without an identity; the body after the block is left as written. When the content
/// opens with a header block the stamp joins it; otherwise the stamp is a block of its own.
fn stamp(content: &str, vessel: Option<&str>, session: &str) -> Stamped {
    let (kept, removed) = header::strip_keys(content, STAMP_KEYS);
    let mut fields: Vec<(&str, String)> = Vec::new();
    if let Some(v) = vessel {
        fields.push(("recorded_by", v.to_string()));
    }
    fields.push(("session", session.to_string()));
    let block: Vec<&str> = kept.lines().take_while(|l| !l.trim().is_empty()).collect();
    let opens_with_header =
        !block.is_empty() && Header::parse(&kept).fields().count() == block.len();
    let content = if opens_with_header {
        let stamp = header::compose(&fields, "");
        format!("{}\n{kept}", stamp.trim_end_matches('\n'))
    } else {
        header::compose(&fields, &kept)
    };
    Stamped {
        content,
        author: vessel.map(str::to_string),
        session: session.to_string(),
        removed,
    }
}

pub async fn concept_record_usage(_ctx: &Ctx, here: &Here<'_>, a: RecordUsageArgs) -> Reply {
    written(record_usage(here, a).await)
}

async fn record_usage(here: &Here<'_>, a: RecordUsageArgs) -> Result<Reply, Reply> {
    const TOOL: &str = "concept_record_usage";
    let att = attached(here, TOOL).await?;
    let id = required_id(TOOL, "concept_id", &a.concept_id)?;
    let trace = match a.trace_id.as_deref().map(str::trim) {
        Some(t) if !t.is_empty() => t.to_string(),
        _ => format!("mcp:{}", metabob_process::random::uuid_v4()),
    };
    let mut data = json!({"concept_id": id, "trace_id": trace, "outcome": a.outcome});
    for (k, v) in [("activity_id", &a.activity_id), ("task_id", &a.task_id)] {
        if let Some(v) = v.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
            data[k] = json!(v);
        }
    }
    let pointer = json!({"type": "conceptUsage_write", "usageData": data});
    let r = ask(att, TOOL, pointer).await?;
    let body = answer_body(TOOL, "conceptUsage_write", r, Sent::Write)?;
    let outcome = match a.outcome {
        UsageOutcome::Success => "success (it helped)",
        UsageOutcome::Failure => "failure (it misled)",
        UsageOutcome::Neutral => "neutral (loaded, no credit)",
    };
    let mut out = format!(
        "Recorded {outcome} for {} with trace {}",
        line(&id, NAME_CHARS),
        line(&trace, 200)
    );
    for (k, v) in [("activity", &a.activity_id), ("task", &a.task_id)] {
        if let Some(v) = v.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
            let _ = write!(out, ", {k} {}", line(v, 200));
        }
    }
    out.push_str(".\n");
    match body.get("concept").and_then(ConceptRow::read) {
        Some(c) => {
            let _ = write!(out, "{} now: {}.", c.id, c.counts());
        }
        None => out.push_str(
            "concept-db's answer holds no readable concept, so its new counts are not shown.",
        ),
    }
    Ok(Reply::ok(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamp_replaces_forged_lines_and_joins_the_header_block() {
        let s = stamp(
            "  Recorded_By: someone-else\nrepo: r\nSESSION: forged\n\nrecorded_by: in the body stays\n",
            Some("vessel-one"),
            "s1",
        );
        assert_eq!(
            s.content,
            "recorded_by: vessel-one\nsession: s1\nrepo: r\n\nrecorded_by: in the body stays\n"
        );
        assert_eq!(
            s.removed,
            vec!["Recorded_By: someone-else", "SESSION: forged"]
        );
        let h = Header::parse(&s.content);
        assert_eq!(
            (h.get("recorded_by"), h.get("repo")),
            (Some("vessel-one"), Some("r"))
        );
    }

    #[test]
    fn prose_content_gets_a_block_of_its_own() {
        let s = stamp("Retry reads with backoff.\nNever writes.", Some("v"), "s1");
        assert_eq!(
            s.content,
            "recorded_by: v\nsession: s1\n\nRetry reads with backoff.\nNever writes."
        );
        assert!(s.removed.is_empty());
    }

    #[test]
    fn without_an_identity_nothing_is_stamped_as_the_author_and_forgeries_still_go() {
        let s = stamp("recorded_by: someone-else\n\nbody", None, "s1");
        assert_eq!(s.content, "session: s1\n\nbody");
        assert_eq!(s.removed, vec!["recorded_by: someone-else"]);
        assert_eq!(Header::parse(&s.content).get("recorded_by"), None);
        assert_eq!(s.author, None);
    }
}

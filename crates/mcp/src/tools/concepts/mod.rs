//! The concept graph tools (SPEC.md §Concept tools): concept-db's concepts, typed edges and
//! usage outcomes, reached through the attachment's one ingress as concept-db's own shapes. Reads
//! there are retried within the family's cap and writes sent once; these handlers only shape
//! the pointer and print the answer, whose every field is untrusted (SPEC.md §Hostile rows).

mod history;
mod read;
mod render;
mod write;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::tools::{Reply, resolve_failed};
use metabob_net::attachment::{Attachment, Resolved};
use metabob_wire::finding::plain_concept_id;

pub use read::{concept_neighbors, concept_search, concept_sequence, concept_usage_stats};
pub use write::{concept_create, concept_link, concept_record_usage};

/// How a concept's body is printed.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ContentMode {
    Preview,
    Full,
    #[serde(rename = "none")]
    Omit,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SearchArgs {
    /// Read exactly this concept (concept_…, concept:concept_… or ⟨concept_…⟩) with its full
    /// body; the filters below are then ignored.
    pub concept_id: Option<String>,
    /// Body per result: preview (default; about 700 characters, cut at a line), full, or none.
    /// With concept_id the default is full.
    pub content: Option<ContentMode>,
    /// Words to match in summaries, bodies and shapes; omitted, concepts are listed.
    pub query: Option<String>,
    /// Keep this source type only (memo, llm, metabob_annotation, …).
    pub source_type: Option<String>,
    /// Keep this shape only.
    pub shape: Option<String>,
    /// Keep concepts whose relevance is at least this.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub min_relevance: Option<f64>,
    /// Max results (default 10).
    #[schemars(range(min = 1, max = 50))]
    pub limit: Option<u32>,
}

#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EdgeDirection {
    Outgoing,
    Incoming,
    Both,
}

/// The typed relationships concept-db keeps between two concepts.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EdgeType {
    RelatedTo,
    DerivedFrom,
    ResolvesTo,
    SequenceNext,
    SequencePrev,
    DescriptionOf,
    ExampleOf,
    Contradicts,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct NeighborsArgs {
    /// The concept whose edges are followed.
    pub concept_id: String,
    /// Body per neighbour: preview (default), full, or none.
    pub content: Option<ContentMode>,
    /// outgoing (edges from it), incoming (edges to it) or both (default).
    pub direction: Option<EdgeDirection>,
    /// Follow only these edge types.
    pub edge_types: Option<Vec<EdgeType>>,
    /// Max neighbours (default 10).
    #[schemars(range(min = 1, max = 50))]
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct UsageStatsArgs {
    /// The concept whose usage is summed up.
    pub concept_id: String,
    /// Also list the most recent usage rows (default true).
    pub include_history: Option<bool>,
    /// Max usage rows (default 10).
    #[schemars(range(min = 1, max = 50))]
    pub history_limit: Option<u32>,
}

#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SequenceDirection {
    Next,
    Prev,
    Both,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SequenceArgs {
    /// The concept whose successors (or predecessors) are listed.
    pub concept_id: String,
    /// next (default: what follows it), prev (what precedes it) or both.
    pub direction: Option<SequenceDirection>,
    /// Max concepts (default 10).
    #[schemars(range(min = 1, max = 50))]
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct LinkArgs {
    /// The edge's source concept.
    pub from_concept_id: String,
    /// The edge's target concept.
    pub to_concept_id: String,
    pub edge_type: EdgeType,
    /// Why the two are related.
    pub description: Option<String>,
    /// The edge's weight (concept-db's default when omitted); repeating a link moves the
    /// existing weight toward this one.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub weight: Option<f64>,
}

/// The substrate category of a concept.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SourceType {
    Goal,
    Memo,
    HumanInput,
    Search,
    Llm,
    MetabobAnnotation,
    Write,
    Read,
    CpgEmbedding,
    Extracted,
    ImpulseSignature,
    VesselConstructionPattern,
    ImpulseActivityPattern,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct CreateArgs {
    /// The concept's body, embedded for similarity search. The server stamps the author and
    /// session as its first header lines; such lines written here are removed.
    pub content: String,
    /// One-line gist.
    pub summary: Option<String>,
    /// The impulse shape this concept represents.
    pub shape: String,
    pub source_type: SourceType,
    /// The pointer envelope (default {"type": <shape>}).
    pub pointer: Option<Map<String, Value>>,
    /// Token budget for resolution snapshots (concept-db's default when omitted).
    #[schemars(range(min = 0))]
    pub budget: Option<u64>,
    /// Initial priority (concept-db's default when omitted).
    #[schemars(range(min = 0.0, max = 1.0))]
    pub priority: Option<f64>,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UsageOutcome {
    Success,
    Failure,
    Neutral,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct RecordUsageArgs {
    /// The concept the outcome applies to.
    pub concept_id: String,
    /// success: it helped; failure: it misled; neutral: it was loaded, no more.
    pub outcome: UsageOutcome,
    /// The execution or trace id (default mcp:<uuid>).
    pub trace_id: Option<String>,
    pub activity_id: Option<String>,
    /// A task id within the activity.
    pub task_id: Option<String>,
}

/// The plain id of a tool's `field`, or the tool's one line when nothing is left of it.
fn required_id(tool: &str, field: &str, raw: &str) -> Result<String, Reply> {
    let id = plain_concept_id(raw);
    if id.is_empty() {
        return Err(Reply::error(format!(
            "{tool}: {field} is empty; name a concept (concept_…)"
        )));
    }
    Ok(id)
}

/// Sends one pointer; a resolve that got no producer answer is the tool's one line.
async fn ask(att: &Attachment, tool: &str, pointer: Value) -> Result<Resolved, Reply> {
    att.resolve(pointer)
        .await
        .map_err(|e| resolve_failed(tool, e))
}

/// concept-db's 404 for a concept it does not hold in this key's org.
fn unknown_concept(r: &Resolved) -> bool {
    r.status == 404 && r.body.get("error").and_then(Value::as_str) == Some("concept_not_found")
}

/// Whether a pointer wrote, for how a refusal is worded.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sent {
    Read,
    Write,
}

/// The object a 2xx answer carries; any other answer as the tool's one line naming concept-db's
/// refusal (anchor: concept-db-refusal).
fn answer_body(tool: &str, shape: &str, r: Resolved, sent: Sent) -> Result<Value, Reply> {
    if (200..300).contains(&r.status) {
        return match r.body {
            Value::Object(_) => Ok(r.body),
            _ => Err(malformed(tool, shape, "it is not a JSON object")),
        };
    }
    let field = |k: &str| {
        r.body
            .get(k)
            .and_then(Value::as_str)
            .map(|s| render::line(s, 300))
    };
    let token = field("error").unwrap_or_else(|| "no error token".into());
    let detail = field("detail")
        .map(|d| format!(": {d}"))
        .unwrap_or_default();
    let verb = if r.status < 500 { "refused" } else { "failed" };
    let tail = match (sent, r.status < 500) {
        (Sent::Read, _) => "",
        (Sent::Write, true) => "; nothing was written",
        // A write is sent once: after a server failure only a read can say whether it landed.
        (Sent::Write, false) => {
            "; it was sent once and is not retried, so read before sending it again"
        }
    };
    Err(Reply::error(format!(
        "{tool}: concept-db {verb} {shape} (HTTP {} {token}){detail}{tail}",
        r.status
    )))
}

/// An answer that does not hold what the shape promises, as one line.
fn malformed(tool: &str, shape: &str, what: &str) -> Reply {
    Reply::error(format!(
        "{tool}: concept-db's {shape} answer is malformed: {what}"
    ))
}

/// Runs a handler written with `?` on replies: the error side is a reply too.
fn either(r: Result<Reply, Reply>) -> Reply {
    match r {
        Ok(reply) | Err(reply) => reply,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_plain_from_every_form() {
        for raw in [
            "concept_ab12",
            "concept:concept_ab12",
            "⟨concept_ab12⟩",
            " ⟨concept:concept_ab12⟩ ",
            "concept:⟨concept_ab12⟩",
        ] {
            assert_eq!(plain_concept_id(raw), "concept_ab12", "{raw}");
        }
    }

    #[test]
    fn a_refusal_is_one_line_naming_concept_db() {
        let r = Resolved {
            status: 400,
            body: serde_json::json!({"error": "bad_request", "detail": "linkData.weight:\nout of range"}),
        };
        let reply = answer_body("concept_link", "conceptLink_write", r, Sent::Write)
            .expect_err("a 400 is a refusal");
        assert!(reply.is_error);
        assert_eq!(
            reply.text,
            "concept_link: concept-db refused conceptLink_write (HTTP 400 bad_request): linkData.weight: out of range; nothing was written"
        );
        let r = Resolved {
            status: 200,
            body: serde_json::json!([1, 2]),
        };
        let reply = answer_body("concept_search", "conceptSearch", r, Sent::Read)
            .expect_err("an array is not an answer");
        assert!(!reply.text.contains('\n'), "{}", reply.text);
    }
}

//! registry_query: discovery's own shapes, `vesselRegistry` (the advertised vocabulary) and
//! `vesselCapability` (who serves one shape), read through the one ingress.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::{FIELD_CHARS, RegistryArgs, RegistryMode, clean, first_text, skipped, text};
use crate::ctx::{Ctx, Here};
use crate::tools::{Reply, attached, resolve_failed};
use metabob_net::attachment::{Attachment, ResolveError};
use metabob_process::guard::redact_url_credentials;

const TOOL: &str = "registry_query";
/// Most vessels read from one answer; a registry larger than this is cut and says so.
const MAX_VESSELS: usize = 500;
/// Most shapes read from one vessel.
const MAX_SHAPES_PER_VESSEL: usize = 5_000;
/// Most shapes one reply lists.
const MAX_LISTED: usize = 1_000;
/// Longest shape name taken as one.
const SHAPE_CHARS: usize = 200;

pub async fn registry_query(_ctx: &Ctx, here: &Here<'_>, a: RegistryArgs) -> Reply {
    let shape = a.shape.as_deref().map(str::trim).filter(|s| !s.is_empty());
    if a.mode == RegistryMode::Vessels && shape.is_none() {
        return Reply::error(format!(
            "{TOOL}: mode vessels needs shape (the shape whose producers to list); nothing was sent"
        ));
    }
    let att = match attached(here, TOOL).await {
        Ok(att) => att,
        Err(reply) => return reply,
    };
    let answer = match (a.mode, shape) {
        (RegistryMode::Vessels, Some(shape)) => vessels(att, shape).await,
        _ => shapes(att, shape).await,
    };
    answer.unwrap_or_else(|e| e.reply())
}

/// A discovery read that gave no usable answer.
enum ReadError {
    Resolve(ResolveError),
    /// The answer was 2xx but not the shape's form.
    Malformed(&'static str),
}

impl ReadError {
    fn reply(self) -> Reply {
        match self {
            ReadError::Resolve(e) => resolve_failed(TOOL, e),
            ReadError::Malformed(why) => Reply::error(format!("{TOOL}: {why}")),
        }
    }
}

impl From<ResolveError> for ReadError {
    fn from(e: ResolveError) -> Self {
        ReadError::Resolve(e)
    }
}

/// The advertised vocabulary: the union of every vessel's shapes, as far as the answer was sound.
struct Vocabulary {
    shapes: BTreeSet<String>,
    /// Entries that were not a vessel or not a shape name.
    skipped: usize,
    /// More vessels than [`MAX_VESSELS`] were answered.
    cut: bool,
}

/// A shape name as a producer may give one: non-empty, bounded, no whitespace or controls.
fn shape_name(v: &Value) -> Option<&str> {
    v.as_str().filter(|s| {
        !s.is_empty()
            && s.chars().count() <= SHAPE_CHARS
            && !s.chars().any(|c| c.is_whitespace() || c.is_control())
    })
}

/// The answer's vessels, or `missing` as the reply when it has no list of them.
fn vessel_list<'a>(body: &'a Value, missing: &'static str) -> Result<&'a [Value], ReadError> {
    body.get("vessels")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .ok_or(ReadError::Malformed(missing))
}

async fn vocabulary(att: &Attachment) -> Result<Vocabulary, ReadError> {
    let body = att
        .resolve(json!({ "type": "vesselRegistry" }))
        .await?
        .ok("vesselRegistry")?;
    let vessels = vessel_list(&body, "vesselRegistry answered without a vessels list")?;
    let mut vocab = Vocabulary {
        shapes: BTreeSet::new(),
        skipped: 0,
        cut: vessels.len() > MAX_VESSELS,
    };
    for vessel in vessels.iter().take(MAX_VESSELS) {
        let Some(shapes) = vessel.get("shapes").and_then(Value::as_array) else {
            vocab.skipped += 1;
            continue;
        };
        for s in shapes.iter().take(MAX_SHAPES_PER_VESSEL) {
            match shape_name(s) {
                Some(name) => {
                    vocab.shapes.insert(name.to_string());
                }
                None => vocab.skipped += 1,
            }
        }
    }
    Ok(vocab)
}

/// Notes on how much of an answer was left out.
fn left_out(out: &mut String, dropped: usize, cut: bool, (one, many): (&str, &str)) {
    if dropped > 0 {
        let _ = writeln!(out, "{}", skipped(dropped, one, many));
    }
    if cut {
        let _ = writeln!(out, "(only the first {MAX_VESSELS} vessels were read)");
    }
}

async fn shapes(att: &Attachment, filter: Option<&str>) -> Result<Reply, ReadError> {
    let vocab = vocabulary(att).await?;
    let needle = filter.map(str::to_lowercase);
    let matching: Vec<&String> = vocab
        .shapes
        .iter()
        .filter(|s| needle.as_ref().is_none_or(|n| s.to_lowercase().contains(n)))
        .collect();
    let total = vocab.shapes.len();
    let mut out = String::new();
    match filter.map(|f| clean(f, FIELD_CHARS)) {
        _ if total == 0 => out.push_str("Discovery advertises no shape.\n"),
        Some(f) if matching.is_empty() => {
            let _ = writeln!(
                out,
                "No advertised shape contains \"{f}\" ({total} advertised)."
            );
        }
        Some(f) => {
            let n = matching.len();
            let _ = writeln!(
                out,
                "Advertised shapes containing \"{f}\" ({n} of {total}):"
            );
        }
        None => {
            let _ = writeln!(out, "Advertised shapes ({total}):");
        }
    }
    for s in matching.iter().take(MAX_LISTED) {
        let _ = writeln!(out, "  {s}");
    }
    if matching.len() > MAX_LISTED {
        let _ = writeln!(out, "  … and {} more", matching.len() - MAX_LISTED);
    }
    left_out(&mut out, vocab.skipped, vocab.cut, ("entry", "entries"));
    out.push_str(
        "This is the anchor node's vocabulary: discovery answers vesselRegistry itself, so a \
         shape served only on a peer node is not listed; ask for one by name with mode vessels.",
    );
    Ok(Reply::ok(out))
}

/// One vessel of a vesselCapability answer, every field cleaned and any URL credential masked.
struct Vessel {
    id: String,
    endpoint: String,
    protocol: String,
    resolve: String,
}

fn vessel_row(v: &Value) -> Option<Vessel> {
    let url = |keys: &[&str]| {
        first_text(v, keys).map_or_else(|| "(not given)".into(), |u| redact_url_credentials(&u))
    };
    Some(Vessel {
        id: text(v, "vessel_id")?,
        endpoint: url(&["public_endpoint", "endpoint"]),
        protocol: text(v, "protocol").unwrap_or_else(|| "(not given)".into()),
        resolve: url(&["resolve_endpoint"]),
    })
}

async fn vessels(att: &Attachment, shape: &str) -> Result<Reply, ReadError> {
    let body = att
        .resolve(json!({ "type": "vesselCapability", "shape": shape }))
        .await?
        .ok("vesselCapability")?;
    let listed = vessel_list(&body, "vesselCapability answered without a vessels list")?;
    let rows: Vec<Vessel> = listed
        .iter()
        .take(MAX_VESSELS)
        .filter_map(vessel_row)
        .collect();
    let dropped = listed.len().min(MAX_VESSELS) - rows.len();
    let shown = clean(shape, FIELD_CHARS);
    let mut out = String::new();
    if rows.is_empty() {
        let _ = writeln!(
            out,
            "No vessel serves {shown} (vesselCapability names none)."
        );
    } else {
        let _ = writeln!(out, "Vessels serving {shown} ({}):", rows.len());
    }
    for r in &rows {
        let _ = writeln!(
            out,
            "  {} — endpoint {}, protocol {}, resolve {}",
            r.id, r.endpoint, r.protocol, r.resolve
        );
    }
    let cut = listed.len() > MAX_VESSELS;
    left_out(&mut out, dropped, cut, ("vessel row", "vessel rows"));
    match vocabulary(att).await {
        Ok(vocab) => out.push_str(&agreement(&vocab, shape, &shown, rows.len())),
        Err(ReadError::Resolve(e)) => {
            let _ = write!(
                out,
                "Not compared with the vocabulary: vesselRegistry: {}",
                metabob_wire::report::with_hint(&e)
            );
        }
        Err(ReadError::Malformed(why)) => {
            let _ = write!(out, "Not compared with the vocabulary: {why}");
        }
    }
    Ok(Reply::ok(out.trim_end().to_string()))
}

/// Whether the vocabulary and the capability rows tell the same story about `shape`.
fn agreement(vocab: &Vocabulary, shape: &str, shown: &str, serving: usize) -> String {
    match (vocab.shapes.contains(shape), serving > 0) {
        (true, true) => format!("The anchor's vocabulary lists {shown} too."),
        (false, false) => format!(
            "The anchor's vocabulary does not list {shown} either; registry_query mode shapes \
             lists what is advertised."
        ),
        (false, true) => format!(
            "Warning: vesselCapability names {serving} vessel(s) for {shown}, but the anchor's \
             vocabulary (vesselRegistry) does not list it. Two readings: the producers are on a \
             peer node, or one of the two views is stale."
        ),
        (true, false) => format!(
            "Warning: the anchor's vocabulary (vesselRegistry) lists {shown}, but \
             vesselCapability names no vessel for it. Two readings: its producer is reached \
             through a peer node, or one of the two views is stale."
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_names_are_bounded_single_tokens() {
        assert_eq!(shape_name(&json!("memoryNote")), Some("memoryNote"));
        assert_eq!(shape_name(&json!("mcp:tool_call")), Some("mcp:tool_call"));
        for bad in [
            json!(""),
            json!("a b"),
            json!("a\nb"),
            json!(3),
            json!("x".repeat(201)),
        ] {
            assert_eq!(shape_name(&bad), None, "{bad}");
        }
    }

    #[test]
    fn a_disagreement_names_both_readings() {
        let vocab = Vocabulary {
            shapes: ["memoryNote".to_string()].into(),
            skipped: 0,
            cut: false,
        };
        let peer = agreement(&vocab, "goalWalkState", "goalWalkState", 2);
        assert!(
            peer.starts_with("Warning: vesselCapability names 2"),
            "{peer}"
        );
        assert!(
            peer.contains("peer node") && peer.contains("stale"),
            "{peer}"
        );
        let stale = agreement(&vocab, "memoryNote", "memoryNote", 0);
        assert!(
            stale.starts_with("Warning: the anchor's vocabulary"),
            "{stale}"
        );
        assert!(
            stale.contains("peer node") && stale.contains("stale"),
            "{stale}"
        );
        assert!(!agreement(&vocab, "memoryNote", "memoryNote", 1).contains("Warning"));
        assert!(!agreement(&vocab, "nope", "nope", 0).contains("Warning"));
    }

    #[test]
    fn a_vessel_row_needs_an_id_and_masks_credentials() {
        let row =
            json!({"vessel_id": "v\n1", "endpoint": "http://u:secretsecret@h:1", "protocol": 7});
        let v = vessel_row(&row).unwrap();
        assert_eq!(v.id, "v 1");
        assert!(!v.endpoint.contains("secretsecret"), "{}", v.endpoint);
        assert_eq!(v.protocol, "(not given)");
        assert_eq!(v.resolve, "(not given)");
        assert!(vessel_row(&json!({"endpoint": "http://h"})).is_none());
        assert!(vessel_row(&json!("producer-1")).is_none());
    }
}

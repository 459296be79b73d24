//! Findings: `code_finding` concepts (SPEC.md §Findings). A task is a finding whose category is
//! `task`.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use serde_json::{Value, json};

use super::header::{self, Header};
use super::row::{BadRow, MAX_FILES_PER_ROW, MAX_IDS_PER_ROW, RowMeta, warn_skipped};
use crate::text::hex;

pub const FINDING_SHAPE: &str = "code_finding";
pub const FINDING_SOURCE_TYPE: &str = "metabob_annotation";

#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "UPPERCASE")]
pub enum Severity {
    Critical,
    High,
    Medium,
    Low,
    Info,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "CRITICAL",
            Severity::High => "HIGH",
            Severity::Medium => "MEDIUM",
            Severity::Low => "LOW",
            Severity::Info => "INFO",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Severity {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.trim().to_ascii_uppercase().as_str() {
            "CRITICAL" => Severity::Critical,
            "HIGH" => Severity::High,
            "MEDIUM" => Severity::Medium,
            "LOW" => Severity::Low,
            "INFO" => Severity::Info,
            other => {
                return Err(format!(
                    "severity {other:?} is not one of CRITICAL, HIGH, MEDIUM, LOW, INFO"
                ));
            }
        })
    }
}

/// A finding id (anchor: finding_id): `agf_` and the 8 bytes as 16 hex digits. The bytes are
/// the caller's to draw (`metabob_process::random::new_finding_id`), so the vocabulary holds
/// the form and no randomness.
pub fn finding_id(bytes: [u8; 8]) -> String {
    format!("agf_{}", hex(&bytes))
}

/// `[SEV][category] <name>: <summary>`, the summary every reader recognises (anchor: summary_line).
pub fn summary_line(severity: Severity, category: &str, name: &str, summary: &str) -> String {
    format!("[{severity}][{category}] {name}: {summary}")
}

/// Splits `[SEV][category] name: summary` into its parts; `None` for any other form.
pub fn parse_summary_line(s: &str) -> Option<(Severity, String, String)> {
    let rest = s.strip_prefix('[')?;
    let (sev, rest) = rest.split_once(']')?;
    let rest = rest.strip_prefix('[')?;
    let (cat, rest) = rest.split_once(']')?;
    let text = rest.trim_start();
    let text = text.split_once(": ").map_or(text, |(_, t)| t);
    Some((sev.parse().ok()?, cat.to_string(), text.to_string()))
}

/// A finding's recorded status (anchor: FindingStatus). Only `open` is work to do; any other
/// word a writer used is kept as written, since rows come from any key of the org.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FindingStatus {
    Open,
    /// The word the row holds, as its writer put it: data read from the ledger, not an error's
    /// text, so it stays a string.
    Other(String),
}

impl FindingStatus {
    pub fn parse(s: &str) -> FindingStatus {
        match s.trim() {
            "open" => FindingStatus::Open,
            other => FindingStatus::Other(other.to_string()),
        }
    }

    pub fn is_open(&self) -> bool {
        *self == FindingStatus::Open
    }

    pub fn as_str(&self) -> &str {
        match self {
            FindingStatus::Open => "open",
            FindingStatus::Other(s) => s,
        }
    }
}

impl std::fmt::Display for FindingStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for FindingStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A finding as recalled from the ledger; every field is read from the header block, except the
/// summary text and details.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub concept_id: String,
    pub seq: i64,
    pub created_ms: i64,
    /// The summary text without the `[SEV][category] name:` prefix.
    pub summary: String,
    pub severity: Severity,
    pub category: String,
    pub repo: Option<String>,
    pub repo_name: Option<String>,
    pub workspace: Option<String>,
    pub files: Vec<String>,
    pub lines: Option<String>,
    pub status: FindingStatus,
    pub finding_ids: Vec<String>,
    pub recorded_by: Option<String>,
    pub session: Option<String>,
    /// The body after the header block.
    pub details: String,
}

impl Finding {
    /// Reads a concept row, or names why it is refused; `None` when it is no finding (no
    /// finding id). Every field is bounded by `row` first (anchor: read_finding_row).
    pub fn read(c: &Value) -> Result<Option<Finding>, BadRow> {
        let Some(row) = RowMeta::read(c)? else {
            return Ok(None);
        };
        let h = Header::parse(&row.content);
        row.check_header(&h)?;
        let finding_ids = row.ids("finding_ids", h.list("finding_ids"), MAX_IDS_PER_ROW)?;
        if finding_ids.is_empty() {
            return Ok(None);
        }
        let files = h.list("files");
        if files.len() > MAX_FILES_PER_ROW {
            return Err(row.bad("files", format!("more than {MAX_FILES_PER_ROW} entries")));
        }
        let parsed = parse_summary_line(&row.summary);
        let severity = h
            .get("severity")
            .and_then(|s| s.parse().ok())
            .or(parsed.as_ref().map(|p| p.0))
            .unwrap_or(Severity::Info);
        let category = h
            .get("category")
            .map(str::to_owned)
            .or(parsed.as_ref().map(|p| p.1.clone()))
            .unwrap_or_default();
        Ok(Some(Finding {
            summary: parsed.map(|p| p.2).unwrap_or_else(|| row.summary.clone()),
            severity,
            category,
            repo: h.get("repo").map(str::to_owned),
            repo_name: h.get("repo_name").map(str::to_owned),
            workspace: h.get("workspace").map(str::to_owned),
            files,
            lines: h.get("lines").map(str::to_owned),
            status: FindingStatus::parse(h.get("status").unwrap_or("open")),
            finding_ids,
            recorded_by: h.get("recorded_by").map(str::to_owned),
            session: h.get("session").map(str::to_owned),
            details: header::body(&row.content).to_string(),
            concept_id: row.concept_id,
            seq: row.seq,
            created_ms: row.created_ms,
        }))
    }

    /// One row read on its own: a refused row is warned about and read as no finding.
    pub fn from_concept(c: &Value) -> Option<Finding> {
        Finding::read(c).unwrap_or_else(|bad| {
            warn_skipped("finding", &[bad]);
            None
        })
    }

    pub fn is_task(&self) -> bool {
        self.category.eq_ignore_ascii_case("task")
    }

    /// The id claims and verdicts are keyed on.
    pub fn id(&self) -> &str {
        &self.finding_ids[0]
    }

    pub fn has_id(&self, id: &str) -> bool {
        self.finding_ids.iter().any(|f| f == id)
    }
}

/// The plain form of a concept id (anchor: plain_concept_id): `concept:` prefixes and `⟨⟩`
/// wrappers removed in whichever order they nest, so `concept:⟨x⟩` and `⟨concept:x⟩` are `x`.
/// The one owner for the client and the embedded ledger alike.
pub fn plain_concept_id(id: &str) -> String {
    let mut s = id.trim();
    loop {
        let next = s.strip_prefix("concept:").unwrap_or(s).trim();
        let next = next
            .strip_prefix('⟨')
            .and_then(|r| r.strip_suffix('⟩'))
            .unwrap_or(next)
            .trim();
        if next == s {
            return s.to_string();
        }
        s = next;
    }
}

pub fn concept_id(c: &Value) -> Option<String> {
    c.get("id").and_then(Value::as_str).map(plain_concept_id)
}

/// What a new finding says; `to_pointer` composes the concept write.
/// A finding's `lines:` header: `file:start-end`, `file:start`, or none without a start.
pub fn lines_field(file: &str, start: Option<u32>, end: Option<u32>) -> Option<String> {
    match (start, end) {
        (Some(a), Some(b)) => Some(format!("{file}:{a}-{b}")),
        (Some(a), None) => Some(format!("{file}:{a}")),
        _ => None,
    }
}

#[derive(Clone, Debug)]
pub struct NewFinding {
    pub finding_ids: Vec<String>,
    pub files: Vec<String>,
    pub summary: String,
    pub details: String,
    pub severity: Severity,
    pub category: String,
    pub repo: String,
    pub repo_name: String,
    pub workspace: String,
    pub lines: Option<String>,
    pub status: FindingStatus,
    pub recorded_by: Option<String>,
    pub session: String,
}

impl NewFinding {
    /// `concept_create_write` for this finding (anchor: post_finding). The author stamp comes
    /// first, so every reader's first match is the stamp; with no identity it is omitted.
    pub fn to_pointer(&self) -> Value {
        let mut fields: Vec<(&str, String)> = Vec::new();
        if let Some(by) = &self.recorded_by {
            fields.push(("recorded_by", by.clone()));
        }
        fields.extend([
            ("session", self.session.clone()),
            ("repo", self.repo.clone()),
            ("repo_name", self.repo_name.clone()),
            ("workspace", self.workspace.clone()),
            ("files", self.files.join(", ")),
            ("lines", self.lines.clone().unwrap_or_default()),
            ("severity", self.severity.to_string()),
            ("category", self.category.clone()),
            ("status", self.status.to_string()),
            ("finding_ids", self.finding_ids.join(", ")),
        ]);
        let content = header::compose(&fields, &self.details);
        json!({
            "type": "concept_create_write",
            "conceptData": {
                "shape": FINDING_SHAPE,
                "source_type": FINDING_SOURCE_TYPE,
                "summary": summary_line(self.severity, &self.category, &self.repo_name, &self.summary),
                "content": content,
            }
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An open task of `git.lan/app` with the one id `id`; tests fill in what they need.
    pub(crate) fn finding(id: &str) -> Finding {
        Finding {
            concept_id: "concept_task".into(),
            seq: 1,
            created_ms: 0,
            summary: "fix a".into(),
            severity: Severity::High,
            category: "task".into(),
            repo: Some("git.lan/app".into()),
            repo_name: None,
            workspace: None,
            files: vec!["a.py".into()],
            lines: None,
            status: FindingStatus::Open,
            finding_ids: vec![id.into()],
            recorded_by: None,
            session: None,
            details: String::new(),
        }
    }

    #[test]
    fn a_new_finding_reads_back_the_same() {
        let nf = NewFinding {
            finding_ids: vec!["agf_1".into(), "agf_2".into()],
            files: vec!["a.py".into(), "b.py".into()],
            summary: "null check: missing".into(),
            details: "ref: main\nsee a.py".into(),
            severity: Severity::High,
            category: "task".into(),
            repo: "example.com/org/repo".into(),
            repo_name: "repo".into(),
            workspace: "repo".into(),
            lines: None,
            status: FindingStatus::Open,
            recorded_by: Some("metabob-mcp-abc".into()),
            session: "s".into(),
        };
        let p = nf.to_pointer();
        let row = json!({
            "id": "concept:⟨concept_9⟩", "seq": 3, "created_at": "2026-01-01T00:00:00.000Z",
            "summary": p["conceptData"]["summary"], "content": p["conceptData"]["content"],
        });
        let f = Finding::from_concept(&row).unwrap();
        assert_eq!(f.concept_id, "concept_9");
        assert_eq!(f.summary, "null check: missing");
        assert_eq!(f.severity, Severity::High);
        assert!(f.is_task());
        assert_eq!(f.files, vec!["a.py", "b.py"]);
        assert_eq!(f.id(), "agf_1");
        assert_eq!(f.recorded_by.as_deref(), Some("metabob-mcp-abc"));
        assert_eq!(f.details, "ref: main\nsee a.py");
        assert_eq!(f.created_ms, 1_767_225_600_000);
    }
}

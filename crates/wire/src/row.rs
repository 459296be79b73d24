//! Rows read from the ledger are untrusted input (SPEC.md §Hostile rows): any write key of the
//! org can write any row, so every field a reader uses is validated and bounded here, once,
//! before it becomes a `Finding` or a `Verdict`. A row that fails is skipped by its reader and
//! named in one warning; it never stops the read.

use serde_json::Value;

use super::finding::plain_concept_id;
use super::header::Header;
use crate::fields::field_rule;
use crate::text::parse_rfc3339_ms;

/// The latest instant a reader formats, 9999-12-31T23:59:59.999Z: RFC 3339 has four-digit
/// years, and a time past it is no time anyone wrote honestly.
pub const MAX_TIME_MS: i64 = 253_402_300_799_999;
/// Finding ids one row may name: one per file of a finding.
pub const MAX_IDS_PER_ROW: usize = 200;
/// Files one finding may name.
pub const MAX_FILES_PER_ROW: usize = 200;
/// A row's summary carries the `[SEV][category] name: ` prefix on top of the summary's own cap.
const SUMMARY_PREFIX_BYTES: usize = 1024;
/// Rows named in one warning; the rest are counted.
const NAMED_IN_WARNING: usize = 5;

/// Why one row was not read: the concept, the field, and what was wrong with it (never the
/// value itself, which may be anything).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{concept} ({field}: {why})")]
pub struct BadRow {
    pub concept: String,
    pub field: String,
    pub why: String,
}

/// What every row carries besides its content, validated (anchor: row_meta).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowMeta {
    pub concept_id: String,
    pub seq: i64,
    pub created_ms: i64,
    pub summary: String,
    pub content: String,
}

impl RowMeta {
    /// The row's id, order and time, and its texts within their caps. `None` for a row with no
    /// id at all, which no reader can name or act on.
    pub fn read(c: &Value) -> Result<Option<RowMeta>, BadRow> {
        let Some(raw_id) = c.get("id").and_then(Value::as_str) else {
            return Ok(None);
        };
        let concept_id = plain_concept_id(raw_id);
        let bad = |field: &str, why: String| BadRow {
            concept: short(&concept_id),
            field: field.to_string(),
            why,
        };
        if concept_id.is_empty() || !is_token(&concept_id, field_rule("concept_id").cap) {
            return Err(bad("id", "not a concept id".into()));
        }
        let seq = match c.get("seq") {
            None | Some(Value::Null) => 0,
            Some(v) => v
                .as_i64()
                .filter(|s| *s >= 0)
                .ok_or_else(|| bad("seq", "not a non-negative integer".into()))?,
        };
        let created_ms = match c.get("created_at") {
            None | Some(Value::Null) => 0,
            Some(v) => v
                .as_str()
                .and_then(parse_rfc3339_ms)
                .filter(|ms| (0..=MAX_TIME_MS).contains(ms))
                .ok_or_else(|| bad("created_at", "not an RFC 3339 time up to year 9999".into()))?,
        };
        let text = |field: &'static str, cap: usize| -> Result<String, BadRow> {
            let s = c.get(field).and_then(Value::as_str).unwrap_or_default();
            if s.len() > cap {
                return Err(bad(field, format!("longer than {cap} bytes")));
            }
            Ok(s.to_string())
        };
        if let Some(why) = c.get(SKIPPED_KEY).and_then(Value::as_str) {
            return Err(bad(
                "row",
                format!("left out by the ledger: {}", short(why)),
            ));
        }
        let summary = text("summary", summary_cap())?;
        let content = text("content", content_cap())?;
        Ok(Some(RowMeta {
            concept_id,
            seq,
            created_ms,
            summary,
            content,
        }))
    }

    pub fn bad(&self, field: &str, why: impl Into<String>) -> BadRow {
        BadRow {
            concept: short(&self.concept_id),
            field: short(field),
            why: why.into(),
        }
    }

    /// Checks each header value against its field's cap, the same caps the outgoing guard
    /// holds writes to.
    pub fn check_header(&self, h: &Header) -> Result<(), BadRow> {
        for (key, value) in h.fields() {
            let rule = field_rule(key);
            if value.len() > rule.cap {
                return Err(self.bad(key, format!("longer than {} bytes", rule.cap)));
            }
        }
        Ok(())
    }

    /// A header list of ids: at most `max`, each a token within the id cap.
    pub fn ids(
        &self,
        field: &'static str,
        ids: Vec<String>,
        max: usize,
    ) -> Result<Vec<String>, BadRow> {
        if ids.len() > max {
            return Err(self.bad(field, format!("more than {max} entries")));
        }
        let cap = field_rule("finding_id").cap;
        if let Some(i) = ids.iter().position(|id| !is_token(id, cap)) {
            return Err(self.bad(field, format!("entry {} is not an id", i + 1)));
        }
        Ok(ids)
    }
}

/// The content's cap: the largest prose body plus a header block of capped fields.
pub fn content_cap() -> usize {
    4 * field_rule("content").cap + MAX_FILES_PER_ROW * field_rule("file").cap / 4
}

/// The summary's cap: a summary field behind its `[SEV][category] repo: ` prefix.
pub fn summary_cap() -> usize {
    field_rule("summary").cap + field_rule("repo").cap + SUMMARY_PREFIX_BYTES
}

/// A row's stored texts (anchor: row-caps), each held to what every reader accepts: the ledger
/// refuses a write past any of them with 413, field by field, and a page leaves out an older
/// row that is larger. The `pointer` and `client_claim` objects count as their JSON text.
pub struct RowTexts<'a> {
    pub content: &'a str,
    pub summary: &'a str,
    pub pointer: &'a str,
    pub client_claim: &'a str,
    pub shape: &'a str,
    pub source_type: &'a str,
}

const POINTER_CAP: usize = 16 * 1024;
const CLIENT_CLAIM_CAP: usize = 8 * 1024;

impl RowTexts<'_> {
    /// Each text: its name, its bytes and its cap.
    fn measured(&self) -> [(&'static str, usize, usize); 6] {
        [
            ("content", self.content.len(), content_cap()),
            ("summary", self.summary.len(), summary_cap()),
            ("pointer", self.pointer.len(), POINTER_CAP),
            ("client_claim", self.client_claim.len(), CLIENT_CLAIM_CAP),
            ("shape", self.shape.len(), field_rule("shape").cap),
            (
                "source_type",
                self.source_type.len(),
                field_rule("source_type").cap,
            ),
        ]
    }

    /// The first text over its cap: its name, bytes and cap.
    pub fn over_cap(&self) -> Option<(&'static str, usize, usize)> {
        self.measured()
            .into_iter()
            .find(|(_, bytes, cap)| bytes > cap)
    }
}

/// The largest row every reader accepts, in bytes of its stored texts.
pub fn max_row_bytes() -> usize {
    let none = RowTexts {
        content: "",
        summary: "",
        pointer: "",
        client_claim: "",
        shape: "",
        source_type: "",
    };
    none.measured().iter().map(|(_, _, cap)| cap).sum()
}

/// The stored text one page of rows may hold (anchor: page-bytes). JSON escapes a byte into at
/// most six (`\u0001`), so a page's answer stays well under what a client reads
/// (the client's body cap, `MAX_BODY_BYTES` in metabob-net, which asserts this) whatever its rows hold, and any row a reader accepts fits.
pub const PAGE_BYTES: usize = 8 * 1024 * 1024;

/// What a ledger answers in a row's place when the row is over [`max_row_bytes`] (an older
/// row, written before the bound): `skipped` names why.
pub const SKIPPED_KEY: &str = "skipped";

/// Printable ASCII without spaces, within `cap` bytes: what ids are.
fn is_token(s: &str, cap: usize) -> bool {
    !s.is_empty() && s.len() <= cap && s.bytes().all(|b| b.is_ascii_graphic())
}

/// An id or key as a warning names it: bounded, whatever the row said.
fn short(id: &str) -> String {
    let cut: String = id.chars().filter(|c| !c.is_control()).take(64).collect();
    if cut.len() < id.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// Reads every row with `read`, skipping those that fail validation; one warning names them
/// (anchor: read_rows). A row `read` answers `None` for is simply not of this kind.
pub fn read_rows<T>(
    rows: &[Value],
    what: &str,
    read: impl Fn(&Value) -> Result<Option<T>, BadRow>,
) -> Vec<T> {
    let mut bad = Vec::new();
    let out = rows
        .iter()
        .filter_map(|row| match read(row) {
            Ok(t) => t,
            Err(e) => {
                bad.push(e);
                None
            }
        })
        .collect();
    warn_skipped(what, &bad);
    out
}

/// Rows already named by this process: a cell reads the same window several times (recall,
/// then each claim's read-back), and one bad row is worth one warning, not one per read.
static WARNED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
/// Past this many named rows, each read's warning names its rows again rather than growing the
/// memory of what was said.
const WARNED_MEMORY: usize = 1024;

/// The one warning for a read's skipped rows that this process has not named yet.
pub fn warn_skipped(what: &str, bad: &[BadRow]) {
    let bad: Vec<&BadRow> = match WARNED.lock() {
        Ok(mut warned) => bad
            .iter()
            .filter(|b| {
                let key = b.to_string();
                if warned.contains(&key) {
                    return false;
                }
                if warned.len() < WARNED_MEMORY {
                    warned.push(key);
                }
                true
            })
            .collect(),
        Err(_) => bad.iter().collect(),
    };
    if bad.is_empty() {
        return;
    }
    let named: Vec<String> = bad
        .iter()
        .take(NAMED_IN_WARNING)
        .map(ToString::to_string)
        .collect();
    let more = bad.len().saturating_sub(NAMED_IN_WARNING);
    tracing::warn!(
        "skipped {} {what} row(s) that fail validation: {}{}",
        bad.len(),
        named.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn meta_bounds_ids_order_and_time() {
        let ok = json!({"id": "concept:⟨concept_1⟩", "seq": 4, "created_at": "2026-01-01T00:00:00.000Z"});
        let m = RowMeta::read(&ok).expect("valid").expect("has an id");
        assert_eq!((m.concept_id.as_str(), m.seq), ("concept_1", 4));
        assert_eq!(RowMeta::read(&json!({"seq": 1})), Ok(None));
        for (row, field) in [
            (json!({"id": "concept_1", "seq": -1}), "seq"),
            (json!({"id": "concept_1", "seq": "7"}), "seq"),
            (
                json!({"id": "concept_1", "created_at": "yesterday"}),
                "created_at",
            ),
            (
                json!({"id": "concept_1", "created_at": "10000-01-01T00:00:00Z"}),
                "created_at",
            ),
            (json!({"id": "concept 1"}), "id"),
            (
                json!({"id": "concept_1", "summary": "x".repeat(10_000)}),
                "summary",
            ),
        ] {
            let err = RowMeta::read(&row).expect_err("refused");
            assert_eq!(err.field, field, "{row}");
        }
    }

    #[test]
    fn a_bad_row_is_named_without_its_value() {
        let row = json!({"id": format!("concept_{}", "9".repeat(300))});
        let err = RowMeta::read(&row).expect_err("an id over its cap");
        assert!(err.to_string().chars().count() < 100, "{err}");
        let rows = vec![
            json!({"id": "concept_1"}),
            json!({"id": "concept_2", "seq": -3}),
        ];
        let read = read_rows(&rows, "test", RowMeta::read);
        assert_eq!(read.len(), 1);
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use crate::claims::{MAX_CLAIM_MINUTES, holder, lapses_at};
    use crate::finding::Finding;
    use crate::text::rfc3339_ms;
    use crate::verdict::Verdict;

    use super::{MAX_TIME_MS, RowMeta};

    /// Header lines as a hostile writer might put them: known keys with any value, unknown keys,
    /// lines that are not `key: value`, and blank lines that end the block early.
    fn header_line() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            Just("verdict".to_string()),
            Just("claim_minutes".to_string()),
            Just("finding_ids".to_string()),
            Just("files".to_string()),
            Just("reviewed_by".to_string()),
            Just("fix".to_string()),
            Just("status".to_string()),
            "[a-z_]{1,12}",
        ];
        let value = prop_oneof![
            Just("claimed".to_string()),
            Just("fixed".to_string()),
            Just("agf_0123456789abcdef".to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            ".{0,40}",
            "[ -~]{0,5000}",
        ];
        prop_oneof![
            (key, value).prop_map(|(k, v)| format!("{k}: {v}")),
            ".{0,30}",
            Just(String::new()),
        ]
    }

    fn row() -> impl Strategy<Value = Value> {
        let id = prop_oneof![
            Just(Value::Null),
            "concept_[0-9a-f]{1,12}".prop_map(Value::from),
            ".{0,300}".prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
        ];
        let seq = prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| json!(f)),
            ".{0,10}".prop_map(Value::from),
        ];
        let created = prop_oneof![
            Just(Value::Null),
            (0i64..=MAX_TIME_MS + 10).prop_map(|ms| Value::from(rfc3339_ms(ms))),
            ".{0,30}".prop_map(Value::from),
            "[0-9]{4,6}-[0-9]{2}-[0-9]{2}T00:00:00Z".prop_map(Value::from),
        ];
        let content = prop::collection::vec(header_line(), 0..12).prop_map(|l| l.join("\n"));
        (id, seq, created, ".{0,80}", content).prop_map(|(id, seq, created, summary, content)| {
            json!({"id": id, "seq": seq, "created_at": created, "summary": summary, "content": content})
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// No row makes a reader panic, and whatever a reader accepts is within its bounds, so
        /// the holder rule and every time it prints stay total.
        #[test]
        fn readers_accept_only_bounded_rows(rows in prop::collection::vec(row(), 0..8), now in any::<i64>()) {
            let mut verdicts = Vec::new();
            for r in &rows {
                if let Ok(Some(m)) = RowMeta::read(r) {
                    prop_assert!((0..=MAX_TIME_MS).contains(&m.created_ms));
                    prop_assert!(m.seq >= 0);
                }
                if let Ok(Some(f)) = Finding::read(r) {
                    prop_assert!(!f.finding_ids.is_empty());
                    let _ = rfc3339_ms(f.created_ms);
                }
                if let Ok(Some(v)) = Verdict::read(r) {
                    if let Some(m) = v.claim_minutes {
                        prop_assert!((1..=MAX_CLAIM_MINUTES).contains(&m));
                    }
                    verdicts.push(v);
                }
            }
            if let Some(h) = holder(&verdicts, now) {
                let _ = rfc3339_ms(lapses_at(&h));
                let _ = rfc3339_ms(h.until_ms);
            }
        }
    }
}

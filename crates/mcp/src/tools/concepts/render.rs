//! How concept-db's answers are printed. Every field is read as untrusted: ids must look like
//! ids, numbers must be numbers, text is cut to a bound and stripped of control characters,
//! and a row that cannot be read is counted and left out, never fatal.

use std::fmt::Write as _;

use serde_json::Value;

use super::ContentMode;
use metabob_wire::fields::field_rule;
use metabob_wire::finding::plain_concept_id;
use metabob_wire::text::parse_rfc3339_ms;

/// Characters a preview shows at most, before it is cut back to a line boundary.
pub const PREVIEW_CHARS: usize = 700;
/// Characters `full` shows at most: a body from the ledger can be any size a writer chose.
pub const FULL_CHARS: usize = 32_000;
/// Bounds on the one-line fields.
pub const SUMMARY_CHARS: usize = 300;
pub const NAME_CHARS: usize = 100;
const BODY_INDENT: &str = "     ";

/// `s` on one line: control characters (newlines included) become spaces, and past `max`
/// characters it is cut with an ellipsis.
pub fn line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = flat.trim();
    match flat.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", flat[..at].trim_end()),
        None => flat.to_string(),
    }
}

/// A body with its line structure kept and every other control character removed.
fn clean_body(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .collect()
}

/// The body as a tool prints it, or `None` for `none`. A cut body ends at a line boundary when
/// one is in reach, and the last line says how much was left out.
pub fn render_body(content: &str, mode: ContentMode) -> Option<String> {
    let max = match mode {
        ContentMode::Omit => return None,
        ContentMode::Preview => PREVIEW_CHARS,
        ContentMode::Full => FULL_CHARS,
    };
    let body = clean_body(content);
    let body = body.trim_end();
    let Some((limit, _)) = body.char_indices().nth(max) else {
        return Some(body.to_string());
    };
    // Back to the last line end, unless that would leave (almost) nothing: one long line is
    // cut where the limit falls.
    let cut = match body[..limit].rfind('\n') {
        Some(nl) if nl >= limit / 4 => nl,
        _ => limit,
    };
    let shown = body[..cut].trim_end();
    let left = body.chars().count() - body[..cut].chars().count();
    let note = match mode {
        ContentMode::Preview => {
            format!("[preview: {left} more characters not shown; content: \"full\" shows them]")
        }
        _ => format!("[cut: {left} more characters; this tool prints at most {max}]"),
    };
    Some(format!("{shown}\n{note}"))
}

/// Appends a rendered body under a `body:` label, indented under its entry.
pub fn push_body(out: &mut String, content: &str, mode: ContentMode) {
    let Some(body) = render_body(content, mode) else {
        return;
    };
    if body.is_empty() {
        let _ = writeln!(out, "   body: (empty)");
        return;
    }
    let _ = writeln!(out, "   body:");
    for l in body.lines() {
        // A blank line stays blank: indentation alone would be trailing whitespace.
        let indent = if l.trim().is_empty() { "" } else { BODY_INDENT };
        let _ = writeln!(out, "{indent}{}", l.trim_end());
    }
}

/// An id from an answer: plain, printable ASCII without spaces, within the id cap.
pub fn read_id(v: Option<&Value>) -> Option<String> {
    let id = plain_concept_id(v?.as_str()?);
    let ok = !id.is_empty()
        && id.len() <= field_rule("concept_id").cap
        && id.bytes().all(|b| b.is_ascii_graphic());
    ok.then_some(id)
}

/// A one-line text field, bounded; empty when absent or not a string.
pub fn read_text(v: Option<&Value>, max: usize) -> String {
    v.and_then(Value::as_str)
        .map(|s| line(s, max))
        .unwrap_or_default()
}

/// A finite number, or `None`.
pub fn read_f64(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64).filter(|x| x.is_finite())
}

/// A non-negative count, or `None`.
pub fn read_count(v: Option<&Value>) -> Option<i64> {
    v.and_then(Value::as_i64).filter(|n| *n >= 0)
}

/// An RFC 3339 time as given, or `None` when it is not one.
pub fn read_time(v: Option<&Value>) -> Option<String> {
    let s = v?.as_str()?;
    (s.len() <= 40 && parse_rfc3339_ms(s).is_some()).then(|| s.to_string())
}

pub fn num(x: Option<f64>) -> String {
    x.map_or_else(|| "?".into(), |x| format!("{x:.2}"))
}

pub fn count(n: Option<i64>) -> String {
    n.map_or_else(|| "?".into(), |n| n.to_string())
}

/// Text that is absent shows as a dash, so a line never ends in an empty field.
pub fn or_dash(s: &str) -> &str {
    if s.is_empty() { "—" } else { s }
}

/// One concept of an answer, validated.
#[derive(Clone, Debug)]
pub struct ConceptRow {
    pub id: String,
    pub shape: String,
    pub source_type: String,
    pub summary: String,
    pub content: String,
    pub relevance: Option<f64>,
    pub loaded: Option<i64>,
    pub succeeded: Option<i64>,
    pub failed: Option<i64>,
    pub updated_at: Option<String>,
    pub budget: Option<i64>,
    pub priority: Option<f64>,
}

impl ConceptRow {
    /// `None` for a row without a readable id: nothing could name or act on it.
    pub fn read(v: &Value) -> Option<ConceptRow> {
        let id = read_id(v.get("id"))?;
        Some(ConceptRow {
            id,
            shape: read_text(v.get("shape"), NAME_CHARS),
            source_type: read_text(v.get("source_type"), NAME_CHARS),
            summary: read_text(v.get("summary"), SUMMARY_CHARS),
            content: v
                .get("content")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            relevance: read_f64(v.get("relevance")),
            loaded: read_count(v.get("times_loaded")),
            succeeded: read_count(v.get("times_succeeded")),
            failed: read_count(v.get("times_failed")),
            updated_at: read_time(v.get("updated_at")),
            budget: read_count(v.get("budget")),
            priority: read_f64(v.get("priority")),
        })
    }

    /// `id [source · shape]`, the head of every entry.
    pub fn head(&self) -> String {
        format!(
            "{} [{} · {}]",
            self.id,
            or_dash(&self.source_type),
            or_dash(&self.shape)
        )
    }

    /// `relevance 0.50 · loaded 0 · succeeded 0 · failed 0`.
    pub fn counts(&self) -> String {
        format!(
            "relevance {} · loaded {} · succeeded {} · failed {}",
            num(self.relevance),
            count(self.loaded),
            count(self.succeeded),
            count(self.failed)
        )
    }

    /// The summary line, when there is a summary.
    pub fn push_summary(&self, out: &mut String) {
        if !self.summary.is_empty() {
            let _ = writeln!(out, "   summary: {}", self.summary);
        }
    }
}

/// The rows of a list that read, and how many did not.
pub fn read_list<T>(
    v: &[Value],
    max: usize,
    read: impl Fn(&Value) -> Option<T>,
) -> (Vec<T>, usize) {
    let mut skipped = 0;
    let rows = v
        .iter()
        .filter_map(|x| {
            let r = read(x);
            skipped += usize::from(r.is_none());
            r
        })
        .take(max)
        .collect();
    (rows, skipped)
}

/// The closing line for rows left out, when any were.
pub fn push_skipped(out: &mut String, skipped: usize, what: &str) {
    if skipped > 0 {
        let _ = writeln!(
            out,
            "({skipped} {what} in the answer could not be read and are not shown.)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_preview_is_cut_at_a_line_and_says_how_much_is_left() {
        let body: String = (0..40)
            .map(|i| format!("line {i:02} of the body\n"))
            .collect();
        let shown = render_body(&body, ContentMode::Preview).expect("preview");
        let (kept, note) = shown.rsplit_once('\n').expect("a note line");
        assert!(kept.ends_with("of the body"), "{kept}");
        assert!(kept.chars().count() <= PREVIEW_CHARS);
        let left = body.trim_end().chars().count() - kept.chars().count();
        assert_eq!(
            note,
            format!("[preview: {left} more characters not shown; content: \"full\" shows them]")
        );
        assert_eq!(
            render_body(&body, ContentMode::Full).as_deref(),
            Some(body.trim_end())
        );
        assert_eq!(render_body(&body, ContentMode::Omit), None);
    }

    #[test]
    fn one_long_line_is_cut_where_the_limit_falls() {
        let body = "é".repeat(PREVIEW_CHARS * 2);
        let shown = render_body(&body, ContentMode::Preview).expect("preview");
        let (kept, note) = shown.split_once('\n').expect("a note line");
        assert_eq!(kept.chars().count(), PREVIEW_CHARS);
        assert!(
            note.contains(&format!("{PREVIEW_CHARS} more characters")),
            "{note}"
        );
    }

    #[test]
    fn hostile_fields_are_bounded_or_left_out() {
        let row = ConceptRow::read(&json!({
            "id": "⟨concept_1⟩", "shape": "s\u{1b}[31m", "summary": "x".repeat(5000),
            "relevance": "high", "times_loaded": -3, "updated_at": "yesterday", "content": 7
        }))
        .expect("an id is enough");
        assert_eq!(row.id, "concept_1");
        assert_eq!(row.shape, "s [31m");
        assert_eq!(row.summary.chars().count(), SUMMARY_CHARS + 1);
        assert_eq!(
            (row.relevance, row.loaded, row.updated_at.as_deref()),
            (None, None, None)
        );
        assert_eq!(
            row.counts(),
            "relevance ? · loaded ? · succeeded ? · failed ?"
        );
        assert!(row.content.is_empty());
        for bad in [
            json!({}),
            json!({"id": 5}),
            json!({"id": "has space"}),
            json!({"id": ""}),
        ] {
            assert!(ConceptRow::read(&bad).is_none(), "{bad}");
        }
        let (rows, skipped) = read_list(
            &[json!({"id": "a"}), json!(1), json!({"id": "b"})],
            10,
            ConceptRow::read,
        );
        assert_eq!((rows.len(), skipped), (2, 1));
    }

    #[test]
    fn line_flattens_and_cuts() {
        assert_eq!(line(" a\nb\tc ", 10), "a b c");
        assert_eq!(line("abcdef", 3), "abc…");
    }
}

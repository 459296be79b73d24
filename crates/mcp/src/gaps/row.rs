//! One row of the gap store (SPEC.md §Gap rows), read as hostile input: every field bounded and
//! validated; a row that is not a gap at all is skipped by the caller with one warning.

use serde_json::Value;

use metabob_wire::row::{BadRow, MAX_TIME_MS};
use metabob_wire::text::parse_rfc3339_ms;

/// Longest id, category, route, holder or path kept from a row.
const MAX_WORD: usize = 200;
/// Longest goal, summary or hold text kept; a path named past it is not seen.
const MAX_TEXT: usize = 4096;

/// The dispositions that park a gap for someone else's decision.
const PARKING: &[&str] = &[
    "needs_information",
    "needs_info",
    "awaiting_operator_review",
];

#[derive(Clone, Debug, PartialEq)]
pub struct Gap {
    pub id: String,
    pub category: String,
    pub route: String,
    /// The file the fix would edit, in the store's `repos/<vessel>/<path>` form.
    pub edit_site: Option<String>,
    /// Goal and summary, for the paths a gap mentions without an edit site.
    pub text: String,
    /// The vessel its remedy names, if any.
    pub remedy_vessel: Option<String>,
    pub updated_ms: i64,
    pub hold: Option<Hold>,
    pub lease: Option<Lease>,
}

/// Why a gap is held: an operator's ruling, a parking disposition, or a landing awaiting its
/// verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Hold {
    pub reason: String,
    pub review_by: Option<String>,
    pub lift: Option<String>,
}

/// A landing lease exactly as stored; the holder is whatever its writer said.
#[derive(Clone, Debug, PartialEq)]
pub struct Lease {
    pub holder: String,
    pub attempt: Option<u64>,
    /// `None` when the lease records no end (or one that is not a time).
    pub until_ms: Option<i64>,
}

fn word(v: Option<&Value>) -> Option<String> {
    let s = v?.as_str()?.trim();
    (!s.is_empty()).then(|| bounded(s, MAX_WORD))
}

/// `s` cut to at most `max` bytes at a character boundary, with control characters dropped so a
/// row cannot break the reply's lines.
fn bounded(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end]
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn time(v: Option<&Value>) -> Option<i64> {
    parse_rfc3339_ms(v?.as_str()?).filter(|ms| (0..=MAX_TIME_MS).contains(ms))
}

impl Gap {
    /// A row of the `substrateGap` answer (anchor: read_gap).
    pub fn read(row: &Value) -> Result<Option<Gap>, BadRow> {
        let Some(obj) = row.as_object() else {
            return Ok(None);
        };
        let bad = |field: &str, why: &str| BadRow {
            concept: "(a gap with no id)".into(),
            field: field.into(),
            why: why.into(),
        };
        let id = word(obj.get("id")).ok_or_else(|| bad("id", "missing or not a string"))?;
        let meta = obj.get("classification_metadata");
        let field = |k: &str| meta.and_then(|m| m.get(k));
        let text = [obj.get("goal"), obj.get("summary")]
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|s| bounded(s, MAX_TEXT))
            .collect::<Vec<_>>()
            .join("\n");
        Ok(Some(Gap {
            category: word(obj.get("category")).unwrap_or_else(|| "uncategorised".into()),
            route: word(obj.get("route")).unwrap_or_else(|| "no route".into()),
            edit_site: word(field("edit_site")).map(|p| p.trim_start_matches("./").to_string()),
            text,
            remedy_vessel: word(field("remedy_vessel")).map(|v| v.to_lowercase()),
            updated_ms: time(obj.get("updated_at")).unwrap_or(0),
            hold: read_hold(
                field("operator_hold"),
                field("disposition"),
                obj.get("landing"),
            ),
            lease: read_lease(obj.get("landing").and_then(|l| l.get("lease"))),
            id: id.clone(),
        }))
    }

    /// Whether its edit site or its text names `path` (a directory matches what is under it).
    pub fn relation(&self, path: &str) -> Option<Relation> {
        let dir = format!("{}/", path.trim_end_matches('/'));
        match &self.edit_site {
            Some(site) if site == path => Some(Relation::EditSite),
            Some(site) if site.starts_with(&dir) => Some(Relation::InDirectory),
            _ if self.text.contains(path) => Some(Relation::Mentions),
            _ => None,
        }
    }
}

/// How a gap concerns a path, in the order the listing shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Relation {
    EditSite,
    InDirectory,
    Mentions,
}

fn read_hold(
    hold: Option<&Value>,
    disposition: Option<&Value>,
    landing: Option<&Value>,
) -> Option<Hold> {
    if let Some(h) = hold.filter(|h| !h.is_null() && *h != &Value::Bool(false)) {
        let text = |k: &str| word(h.get(k));
        return Some(Hold {
            reason: format!(
                "held by operator ruling: {}",
                text("reason").unwrap_or_else(|| "no reason recorded".into())
            ),
            review_by: text("review_by"),
            lift: text("lift"),
        });
    }
    if let Some(d) = word(disposition).filter(|d| PARKING.contains(&d.as_str())) {
        return Some(Hold {
            reason: format!("parked: {d}"),
            review_by: None,
            lift: None,
        });
    }
    let awaiting =
        landing.and_then(|l| l.get("state")).and_then(Value::as_str) == Some("awaiting_verdict");
    awaiting.then(|| Hold {
        reason: "a landing awaits its verdict".into(),
        review_by: None,
        lift: None,
    })
}

fn read_lease(lease: Option<&Value>) -> Option<Lease> {
    let l = lease?;
    Some(Lease {
        holder: word(l.get("holder")).unwrap_or_else(|| "an unnamed holder".into()),
        attempt: l.get("attempt").and_then(Value::as_u64),
        until_ms: time(l.get("until")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_hostile_row_is_bounded_or_skipped() {
        assert!(Gap::read(&json!("not an object")).unwrap().is_none());
        assert!(Gap::read(&json!({"category": "x"})).is_err());
        let long = "é".repeat(10_000);
        let g = Gap::read(&json!({
            "id": long, "goal": format!("fix\u{7}{long}"), "updated_at": "year 3000",
            "classification_metadata": {"edit_site": 42, "operator_hold": false},
            "landing": {"lease": {"holder": "h", "until": "soon", "attempt": -1}},
        }))
        .unwrap()
        .unwrap();
        assert!(g.id.len() <= MAX_WORD && g.text.len() <= MAX_TEXT);
        assert!(!g.text.contains('\u{7}'));
        assert_eq!((g.edit_site, g.updated_ms, g.hold), (None, 0, None));
        let lease = g.lease.unwrap();
        assert_eq!((lease.until_ms, lease.attempt), (None, None));
    }

    #[test]
    fn relations_rank_edit_site_then_directory_then_mention() {
        let g = |site: Option<&str>, text: &str| Gap {
            id: "g".into(),
            category: "c".into(),
            route: "r".into(),
            edit_site: site.map(str::to_string),
            text: text.into(),
            remedy_vessel: None,
            updated_ms: 0,
            hold: None,
            lease: None,
        };
        let p = "repos/app/src/a.py";
        assert_eq!(g(Some(p), "").relation(p), Some(Relation::EditSite));
        assert_eq!(
            g(Some(p), "").relation("repos/app/src"),
            Some(Relation::InDirectory)
        );
        assert_eq!(
            g(None, "see repos/app/src/a.py").relation(p),
            Some(Relation::Mentions)
        );
        assert_eq!(g(Some("repos/app/src/ab.py"), "").relation(p), None);
    }
}

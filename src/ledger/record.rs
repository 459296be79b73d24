//! Recording a finding or a task, with the duplicate check (SPEC.md §finding record).

use std::collections::BTreeSet;

use super::recall::{LedgerView, Recalled};
use super::verdict::Standing;

/// Lowercased, every run of characters other than letters and digits one space.
pub fn normalize_summary(s: &str) -> String {
    let mut out = String::new();
    let mut gap = false;
    for c in s.chars().flat_map(char::to_lowercase) {
        if c.is_alphanumeric() {
            if gap && !out.is_empty() {
                out.push(' ');
            }
            gap = false;
            out.push(c);
        } else {
            gap = true;
        }
    }
    out
}

/// |A ∩ B| / |A ∪ B| over the normalized words.
pub fn jaccard(a: &str, b: &str) -> f64 {
    let (a, b) = (normalize_summary(a), normalize_summary(b));
    let a: BTreeSet<&str> = a.split(' ').filter(|w| !w.is_empty()).collect();
    let b: BTreeSet<&str> = b.split(' ').filter(|w| !w.is_empty()).collect();
    let union = a.union(&b).count();
    if union == 0 {
        return 1.0;
    }
    a.intersection(&b).count() as f64 / union as f64
}

/// Two summaries say the same thing: equal once normalized, or words overlapping at least 0.8
/// (anchor: duplicate-finding).
pub fn same_summary(a: &str, b: &str) -> bool {
    normalize_summary(a) == normalize_summary(b) || jaccard(a, b) >= 0.8
}

/// An open recalled finding on one of `files` with the same summary (anchor: find_open_duplicate).
pub fn find_open_duplicate<'a>(
    view: &'a LedgerView,
    files: &[String],
    summary: &str,
) -> Option<&'a Recalled> {
    view.findings.iter().find(|r| {
        r.finding.status == "open"
            && matches!(view.standing(&r.finding), Standing::Open)
            && r.files.iter().any(|f| files.contains(f))
            && same_summary(&r.finding.summary, summary)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_match_when_normalized_or_close() {
        assert_eq!(
            normalize_summary("  Null-check MISSING in  parse()! "),
            "null check missing in parse"
        );
        assert!(same_summary(
            "Null check missing in parse()",
            "null check missing in parse"
        ));
        assert!(same_summary(
            "the parser drops the last token of a line",
            "parser drops the last token of a line"
        ));
        assert!(!same_summary("parser drops tokens", "lexer drops tokens"));
    }
}

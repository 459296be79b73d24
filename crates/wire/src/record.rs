//! Recording a finding or a task, with the duplicate check (SPEC.md §Recording).

use std::collections::BTreeSet;

use super::finding::{FindingStatus, NewFinding, Severity, lines_field};
use super::repo_path::{NotRepoPath, check_repo_path};

/// A finding as a caller asks to record it, before the ledger's rules apply (anchor:
/// FindingDraft). `finding record` and `record_finding` both build one.
#[derive(Clone, Debug)]
pub struct FindingDraft {
    pub files: Vec<String>,
    pub summary: String,
    pub details: String,
    pub severity: Severity,
    pub category: String,
    pub line_start: Option<u32>,
    pub line_end: Option<u32>,
    pub status: FindingStatus,
}

/// Why a draft is refused before anything is asked of the ledger.
#[derive(Debug, thiserror::Error)]
pub enum DraftRefused {
    #[error("a finding needs at least one file, a summary and a category")]
    Incomplete,
    /// A file that is not a repository path (SPEC.md §Recording).
    #[error(transparent)]
    File(#[from] NotRepoPath),
}

impl FindingDraft {
    /// The draft trimmed, or refused when it names no file, no summary or no category, or a
    /// file that is not a repository path ([`check_repo_path`]).
    pub fn checked(mut self) -> Result<FindingDraft, DraftRefused> {
        self.summary = self.summary.trim().to_string();
        self.category = self.category.trim().to_string();
        // Trimmed as the header line keeps it, so the rule sees the name every reader reads.
        for f in &mut self.files {
            *f = f.trim().to_string();
        }
        if self.files.is_empty() || self.summary.is_empty() || self.category.is_empty() {
            return Err(DraftRefused::Incomplete);
        }
        for f in &self.files {
            check_repo_path(f)?;
        }
        Ok(self)
    }

    /// The write (anchor: draft_into_new): one `agf_` id per file, one concept for all. The ids
    /// come from `new_id`, called once per file (`metabob_process::random::new_finding_id`
    /// outside tests), so the vocabulary draws no randomness itself.
    pub fn into_new(
        self,
        repo: String,
        repo_name: String,
        recorded_by: Option<String>,
        session: String,
        mut new_id: impl FnMut() -> String,
    ) -> NewFinding {
        NewFinding {
            finding_ids: self.files.iter().map(|_| new_id()).collect(),
            lines: self
                .files
                .first()
                .and_then(|first| lines_field(first, self.line_start, self.line_end)),
            files: self.files,
            summary: self.summary,
            details: self.details,
            severity: self.severity,
            category: self.category,
            repo,
            workspace: repo_name.clone(),
            repo_name,
            status: self.status,
            recorded_by,
            session,
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(files: &[&str]) -> FindingDraft {
        FindingDraft {
            files: files.iter().map(|f| f.to_string()).collect(),
            summary: " s ".into(),
            details: String::new(),
            severity: Severity::Low,
            category: "task".into(),
            line_start: None,
            line_end: None,
            status: FindingStatus::Open,
        }
    }

    #[test]
    fn a_draft_names_only_repository_paths() {
        let d = draft(&[" a.py ", "src/b.py"]).checked().unwrap();
        assert_eq!(d.files, ["a.py", "src/b.py"]);
        assert_eq!(d.summary, "s");
        for bad in ["/etc/passwd", "../../etc/passwd", "a//b", "a\0b", " ./a.py"] {
            match draft(&["a.py", bad]).checked() {
                Err(DraftRefused::File(e)) => assert_eq!(e.path, bad.trim()),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        // No file at all is an incomplete draft; a blank one is no repository path.
        assert!(matches!(
            draft(&[]).checked(),
            Err(DraftRefused::Incomplete)
        ));
        let e = draft(&["  "]).checked().unwrap_err();
        assert!(
            e.to_string()
                .starts_with("file \"\" is not a repository path: it is empty;"),
            "{e}"
        );
    }

    #[test]
    fn a_draft_takes_one_id_per_file_from_its_caller() {
        let mut n = 0u8;
        let new = draft(&["a.py", "b.py", "c.py"])
            .checked()
            .unwrap()
            .into_new(
                "git.lan/app".into(),
                "app".into(),
                None,
                "s1".into(),
                || {
                    n += 1;
                    crate::finding::finding_id([n; 8])
                },
            );
        assert_eq!(
            new.finding_ids,
            [
                "agf_0101010101010101",
                "agf_0202020202020202",
                "agf_0303030303030303"
            ]
        );
        assert_eq!(new.files, ["a.py", "b.py", "c.py"]);
    }

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

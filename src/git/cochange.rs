//! Co-change from git history (SPEC.md §Co-change): which files changed in the same commits as
//! the given ones, over the recent history, for `predict_cochanges` and the context tools.

use std::collections::HashMap;

use serde::Serialize;

use super::{GitError, Repo};

/// How far back the history is read.
pub const HISTORY_DEPTH: usize = 500;
/// A commit touching more files than this is a sweep (a rename, a format run), not evidence.
pub const MAX_FILES_PER_COMMIT: usize = 30;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cochange {
    pub file: String,
    /// The share of the given files' commits that also touched this file.
    pub confidence: f64,
    /// How many of those commits touched it.
    pub commits: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CochangeReport {
    pub predictions: Vec<Cochange>,
    /// Commits (within the window, sweeps left out) that touched a given file.
    pub given_commits: usize,
    /// Commits read, and how many of them were left out as sweeps.
    pub scanned: usize,
    pub skipped_sweeps: usize,
}

/// Mines the newest [`HISTORY_DEPTH`] commits from HEAD (anchor: mine_cochanges). Each commit's
/// files are its changes against its first parent.
pub fn mine_cochanges(
    repo: &Repo,
    changed: &[String],
    limit: usize,
    threshold: f64,
) -> Result<CochangeReport, GitError> {
    let mut report = CochangeReport {
        predictions: Vec::new(),
        given_commits: 0,
        scanned: 0,
        skipped_sweeps: 0,
    };
    let Some(head) = repo.head()? else {
        return Ok(report);
    };
    let mut counts: HashMap<String, usize> = HashMap::new();
    for commit in repo.history(&head)?.take(HISTORY_DEPTH) {
        let commit = commit?;
        report.scanned += 1;
        let files = repo.changed_files(&commit.sha)?;
        if files.len() > MAX_FILES_PER_COMMIT {
            report.skipped_sweeps += 1;
            continue;
        }
        if !files.iter().any(|f| changed.contains(f)) {
            continue;
        }
        report.given_commits += 1;
        for f in files.into_iter().filter(|f| !changed.contains(f)) {
            *counts.entry(f).or_default() += 1;
        }
    }
    let given = report.given_commits.max(1) as f64;
    let mut predictions: Vec<Cochange> = counts
        .into_iter()
        .map(|(file, commits)| Cochange {
            confidence: commits as f64 / given,
            file,
            commits,
        })
        .filter(|c| c.confidence >= threshold)
        .collect();
    predictions.sort_by(|a, b| {
        b.confidence
            .total_cmp(&a.confidence)
            .then(b.commits.cmp(&a.commits))
            .then(a.file.cmp(&b.file))
    });
    predictions.truncate(limit);
    report.predictions = predictions;
    Ok(report)
}

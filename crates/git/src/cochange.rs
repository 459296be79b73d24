//! Co-change from git history (SPEC.md §Co-change): which files changed in the same commits as
//! the given ones, over the recent history, for `predict_cochanges` and the context tools.

use std::collections::HashMap;

use serde::Serialize;

use super::{GitError, Repo, read_err};

/// One tree entry: its id and mode.
type Entry = (gix::ObjectId, gix::objs::tree::EntryMode);

/// Answers "did this path change between two trees?" the way a pathspec-limited diff does: a
/// level whose subtree ids are equal is not opened. Each (tree, name) lookup is kept, since a
/// commit's tree is the next older commit's parent tree.
#[derive(Default)]
struct PathProbe {
    seen: HashMap<(gix::ObjectId, String), Option<Entry>>,
}

impl PathProbe {
    fn child(
        &mut self,
        repo: &Repo,
        tree: gix::ObjectId,
        name: &str,
    ) -> Result<Option<Entry>, GitError> {
        if let Some(e) = self.seen.get(&(tree, name.to_string())) {
            return Ok(*e);
        }
        let t = repo.repo.find_tree(tree).map_err(read_err)?;
        let e = t.find_entry(name).map(|e| (e.object_id(), e.mode()));
        self.seen.insert((tree, name.to_string()), e);
        Ok(e)
    }

    /// `old` is `None` for a root commit's (empty) parent tree.
    fn changed(
        &mut self,
        repo: &Repo,
        old: Option<gix::ObjectId>,
        new: gix::ObjectId,
        path: &str,
    ) -> Result<bool, GitError> {
        let (mut old, mut new) = (old, new);
        let mut parts = path.split('/').peekable();
        while let Some(name) = parts.next() {
            if old == Some(new) {
                return Ok(false);
            }
            let a = match old {
                Some(t) => self.child(repo, t, name)?,
                None => None,
            };
            let b = self.child(repo, new, name)?;
            match (a, b) {
                (None, None) => return Ok(false),
                (Some(x), Some(y)) if parts.peek().is_some() && x.1.is_tree() && y.1.is_tree() => {
                    (old, new) = (Some(x.0), y.0);
                }
                (a, b) => return Ok(a != b),
            }
        }
        Ok(old != Some(new))
    }
}

/// A commit's tree id, read once per commit.
fn tree_of(
    repo: &Repo,
    seen: &mut HashMap<gix::ObjectId, gix::ObjectId>,
    commit: gix::ObjectId,
) -> Result<gix::ObjectId, GitError> {
    if let Some(t) = seen.get(&commit) {
        return Ok(*t);
    }
    let t = repo
        .repo
        .find_commit(commit)
        .map_err(read_err)?
        .tree_id()
        .map_err(read_err)?
        .detach();
    seen.insert(commit, t);
    Ok(t)
}

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
    /// Commits read, and how many of those touching a given file were left out as sweeps.
    pub scanned: usize,
    pub skipped_sweeps: usize,
}

/// Mines the newest [`HISTORY_DEPTH`] commits from HEAD (anchor: mine_cochanges). Each commit's
/// files are its changes against its first parent. A commit is first asked, by path lookups in
/// its two trees, whether it changed a given file at all; only those that did are diffed whole,
/// which is what keeps this under `git log --name-only` over the same commits.
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
    let head = repo.must_resolve(&head)?;
    let walk = repo
        .repo
        .rev_walk([head])
        .sorting(super::newest_first())
        .all()
        .map_err(read_err)?;
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut probe = PathProbe::default();
    let mut trees = HashMap::new();
    for info in walk.take(HISTORY_DEPTH) {
        let info = info.map_err(read_err)?;
        report.scanned += 1;
        // Tree ids only: a commit's parent is the next commit read, so each is decoded once.
        let new = tree_of(repo, &mut trees, info.id)?;
        let old = match info.parent_ids.first() {
            Some(p) => Some(tree_of(repo, &mut trees, *p)?),
            None => None,
        };
        let mut touches = false;
        for f in changed {
            if probe.changed(repo, old, new, f)? {
                touches = true;
                break;
            }
        }
        if !touches {
            continue;
        }
        let mut files = Vec::new();
        repo.changed_paths(old, Some(new), "", &mut files)?;
        if files.len() > MAX_FILES_PER_COMMIT {
            report.skipped_sweeps += 1;
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

//! Co-change from git history (SPEC.md §Co-change): which files changed in the same commits as
//! the given ones, over the recent history, for `predict_cochanges` and the context tools.
//!
//! The history is mined once into a [`CochangeIndex`] (each commit of the window and the paths
//! it changed), which the MCP server keeps on disk beside the code index. A later call extends
//! it with the commits HEAD gained and reads the rest back, so a question about a repository
//! whose HEAD has not moved reads no git object at all.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{GitError, Repo, read_err};

/// How far back the history is read.
pub const HISTORY_DEPTH: usize = 500;
/// A commit touching more files than this is a sweep (a rename, a format run), not evidence.
pub const MAX_FILES_PER_COMMIT: usize = 30;
/// Bumped whenever the stored index's layout or what a commit's entry means changes.
pub const COCHANGE_INDEX_VERSION: u32 = 1;
/// A window of 500 commits is a few hundred kilobytes even with sweeps over large trees; a file
/// past this was not written by us and is discarded unread.
const MAX_INDEX_BYTES: u64 = 256 << 20;

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

/// One commit of the window: its id and the paths it changed against its first parent, as
/// indexes into [`CochangeIndex::paths`], ascending.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Mined {
    id: [u8; 20],
    files: Vec<u32>,
}

/// The mined window of one repository's history (anchor: CochangeIndex): the newest
/// [`HISTORY_DEPTH`] commits from `head`, newest first, each with the paths it changed. Paths
/// are stored once each and named by number, which keeps the file small and a question a scan
/// of integers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CochangeIndex {
    version: u32,
    /// The window's shape; an index mined with other constants is rebuilt, not reused.
    depth: u32,
    head: [u8; 20],
    paths: Vec<String>,
    commits: Vec<Mined>,
}

/// Why a stored index was not used as it was.
pub use metabob_process::stored::Unusable as Discarded;

/// What bringing an index up to HEAD took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refresh {
    /// HEAD has not moved: nothing was read.
    Current,
    /// HEAD moved forward: only the commits the window gained were diffed.
    Extended { diffed: usize },
    /// There was no usable index, or the one stored no longer describes an ancestor of HEAD
    /// (the history was rewritten): every commit of the window was diffed.
    Rebuilt { diffed: usize },
    /// An unborn branch: there is no history to mine.
    NoHistory,
}

impl CochangeIndex {
    /// The stored index at `path`, checked for shape; whether it fits the repository is
    /// [`CochangeIndex::refresh`]'s question.
    pub fn load(path: &Path) -> Result<CochangeIndex, Discarded> {
        let bytes = metabob_process::stored::read(path, MAX_INDEX_BYTES)?;
        let index: CochangeIndex = metabob_process::stored::decode(&bytes, COCHANGE_INDEX_VERSION)?;
        let n = index.paths.len() as u64;
        let in_range = index.commits.len() <= HISTORY_DEPTH
            && (index.commits.iter())
                .all(|c| c.files.is_sorted() && c.files.iter().all(|f| u64::from(*f) < n));
        if !in_range {
            return Err(Discarded::corrupt("a path or commit out of range"));
        }
        Ok(index)
    }

    /// Writes the index whole, atomically: a reader sees the old file or the new one.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        metabob_process::stored::write(path, self)
    }

    /// The index of `repo`'s HEAD (anchor: cochange_refresh). A `stored` index whose HEAD is an
    /// ancestor of today's is extended: the walk reads the window's commits, and only those it
    /// does not hold are diffed. One whose HEAD is not (a rebase, a reset, another branch) is
    /// dropped and the window mined whole, as is a missing one.
    pub fn refresh(
        repo: &Repo,
        stored: Option<CochangeIndex>,
    ) -> Result<(CochangeIndex, Refresh), GitError> {
        let empty = || CochangeIndex {
            version: COCHANGE_INDEX_VERSION,
            depth: HISTORY_DEPTH as u32,
            head: [0; 20],
            paths: Vec::new(),
            commits: Vec::new(),
        };
        // Compared as the refs name it: an unmoved HEAD reads no object, not even its commit.
        let Some(head) = repo.head_id()? else {
            return Ok((empty(), Refresh::NoHistory));
        };
        let stored = match stored.filter(|s| s.depth == HISTORY_DEPTH as u32) {
            // The common case, HEAD unmoved: the index read from disk is the answer, not a copy.
            Some(s) if s.head == head_bytes(head) => return Ok((s, Refresh::Current)),
            other => other,
        };
        let known = match stored {
            Some(s) if repo.is_ancestor_id(gix::ObjectId::from(s.head), head)? => Some(s),
            _ => None,
        };
        let extending = known.is_some();
        let mut reuse: HashMap<[u8; 20], Vec<&str>> = HashMap::new();
        if let Some(k) = &known {
            for c in &k.commits {
                let files = c.files.iter().map(|f| k.paths[*f as usize].as_str());
                reuse.insert(c.id, files.collect());
            }
        }

        let walk = repo.newest_first(head)?;
        let mut window = Vec::with_capacity(HISTORY_DEPTH);
        for info in walk.take(HISTORY_DEPTH) {
            let info = info.map_err(read_err)?;
            window.push((info.id, info.parent_ids.first().copied()));
        }
        let todo: Vec<usize> = (0..window.len())
            .filter(|i| !reuse.contains_key(&head_bytes(window[*i].0)))
            .collect();
        let diffed = todo.len();
        let mut mined = diff_commits(repo, &window, &todo)?;

        let mut out = empty();
        out.head = head_bytes(head);
        let mut ids: HashMap<String, u32> = HashMap::new();
        for (i, (commit, _)) in window.iter().enumerate() {
            let id = head_bytes(*commit);
            let paths: Vec<String> = match reuse.get(&id) {
                Some(files) => files.iter().map(|f| f.to_string()).collect(),
                None => mined.remove(&i).unwrap_or_default(),
            };
            let mut files: Vec<u32> = paths
                .into_iter()
                .map(|p| {
                    let next = ids.len() as u32;
                    *ids.entry(p).or_insert(next)
                })
                .collect();
            files.sort_unstable();
            files.dedup();
            out.commits.push(Mined { id, files });
        }
        out.paths = vec![String::new(); ids.len()];
        for (p, i) in ids {
            out.paths[i as usize] = p;
        }
        let refresh = if extending {
            Refresh::Extended { diffed }
        } else {
            Refresh::Rebuilt { diffed }
        };
        Ok((out, refresh))
    }

    /// The commit this index covers, full sha.
    pub fn head(&self) -> String {
        gix::ObjectId::from(self.head).to_string()
    }

    /// The files that changed with `changed` in the window (anchor: cochange_query). A given
    /// path names a file, or a directory and everything under it. Among the window's commits
    /// that touched a given path, sweeps are left out; each other file's count is how many of the
    /// rest touched it, its confidence that count over the rest.
    pub fn query(&self, changed: &[String], limit: usize, threshold: f64) -> CochangeReport {
        let given: Vec<&str> = changed.iter().map(|c| c.trim_end_matches('/')).collect();
        let names = |p: &str| {
            given.iter().any(|g| {
                p == *g || (p.len() > g.len() && p.starts_with(g) && p.as_bytes()[g.len()] == b'/')
            })
        };
        let touching: HashSet<u32> = (self.paths.iter().enumerate())
            .filter(|(_, p)| names(p))
            .map(|(i, _)| i as u32)
            .collect();
        let mut report = CochangeReport {
            predictions: Vec::new(),
            given_commits: 0,
            scanned: self.commits.len(),
            skipped_sweeps: 0,
        };
        let mut counts: HashMap<u32, usize> = HashMap::new();
        for c in &self.commits {
            if !c.files.iter().any(|f| touching.contains(f)) {
                continue;
            }
            if c.files.len() > MAX_FILES_PER_COMMIT {
                report.skipped_sweeps += 1;
                continue;
            }
            report.given_commits += 1;
            for f in &c.files {
                if !changed.contains(&self.paths[*f as usize]) {
                    *counts.entry(*f).or_default() += 1;
                }
            }
        }
        let given = report.given_commits.max(1) as f64;
        let mut predictions: Vec<Cochange> = counts
            .into_iter()
            .map(|(file, commits)| Cochange {
                confidence: commits as f64 / given,
                file: self.paths[file as usize].clone(),
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
        report
    }
}

fn head_bytes(id: gix::ObjectId) -> [u8; 20] {
    let mut out = [0; 20];
    // Every repository this reads is SHA-1 (the `sha1` feature is the only hash built in).
    out.copy_from_slice(&id.as_bytes()[..20]);
    out
}

/// Changed paths by the commit's place in the window.
type Paths = Vec<(usize, Vec<String>)>;

/// A commit's tree and its first parent's, the two sides of its diff.
type Sides = (gix::ObjectId, Option<gix::ObjectId>);

/// The paths each of `todo`'s commits of `window` changed against its first parent, by place in
/// the window. The trees come from the commits on this thread, which the walk has just
/// decoded; the trees are then diffed in contiguous runs on up to one thread per core, each with
/// its own handle on the repository and so its own caches. Within a run, a commit's parent tree
/// is the next commit's tree, read once, and the run goes the way the pack's deltas do.
fn diff_commits(
    repo: &Repo,
    window: &[(gix::ObjectId, Option<gix::ObjectId>)],
    todo: &[usize],
) -> Result<HashMap<usize, Vec<String>>, GitError> {
    // Below this many commits a thread costs more than it saves.
    const PER_THREAD: usize = 64;
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(todo.len().div_ceil(PER_THREAD))
        .clamp(1, 4);
    let mut seen = HashMap::new();
    let mut sides: Vec<Sides> = Vec::with_capacity(todo.len());
    for &i in todo {
        let (commit, parent) = window[i];
        let new = tree_of(repo, &mut seen, commit)?;
        let old = parent.map(|p| tree_of(repo, &mut seen, p)).transpose()?;
        sides.push((new, old));
    }
    let oldest_first = deltas_run_forward(repo, &sides)?;
    let run = |repo: &Repo, part: &[(usize, Sides)]| -> Result<Paths, GitError> {
        let mut out = Vec::with_capacity(part.len());
        let order: Box<dyn Iterator<Item = &(usize, Sides)>> = if oldest_first {
            Box::new(part.iter().rev())
        } else {
            Box::new(part.iter())
        };
        for &(i, (new, old)) in order {
            let mut files = Vec::new();
            repo.changed_paths(old, Some(new), "", &mut files)?;
            out.push((i, files));
        }
        Ok(out)
    };
    let todo: Vec<(usize, Sides)> = todo.iter().copied().zip(sides).collect();
    let parts: Vec<&[(usize, Sides)]> = todo.chunks(todo.len().div_ceil(threads).max(1)).collect();
    let results: Vec<Result<Paths, GitError>> = if parts.len() <= 1 {
        parts.iter().map(|p| run(repo, p)).collect()
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (parts.iter())
                .map(|part| {
                    // A gix handle is not Send without gix's `parallel` feature (Rc inside):
                    // each thread opens the repository again, its own handle and caches.
                    let dir = repo.git_dir();
                    scope.spawn(move || run(&Repo::open(&dir)?, part))
                })
                .collect();
            (handles.into_iter())
                .map(|h| h.join().expect("a diff thread does not panic"))
                .collect()
        })
    };
    let mut mined = HashMap::with_capacity(todo.len());
    for r in results {
        mined.extend(r?);
    }
    Ok(mined)
}

/// Whether this history's objects are stored as deltas on their older versions (as fast-import
/// writes them, and as a repack that reuses deltas keeps them) rather than the other way round
/// (as `git gc` computes them afresh, newest whole). The pack cache holds the objects asked
/// for, not the bases passed on the way to them, so the window is read in the chains'
/// direction: each object's base is then one read just before it. Judged by a vote of the
/// newest diffs, as a chain that starts afresh can mislead one of them.
fn deltas_run_forward(repo: &Repo, sides: &[Sides]) -> Result<bool, GitError> {
    const VOTERS: usize = 7;
    let mut votes = 0i32;
    for (newer, older) in sides.iter().take(VOTERS) {
        let Some(older) = older else { continue };
        votes += match repo.delta_order(*older, *newer)? {
            std::cmp::Ordering::Greater => 1,
            std::cmp::Ordering::Less => -1,
            std::cmp::Ordering::Equal => 0,
        };
    }
    Ok(votes > 0)
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

/// Mines the window from HEAD and answers for `changed` (anchor: mine_cochanges), with the
/// index at `cache` when one is given: read from it when it still fits HEAD, extended or
/// rebuilt when not, and written back when it changed. A cache that cannot be written costs
/// only the next call's time, so that failure is returned beside the answer, not instead of it.
pub fn mine_cochanges(
    repo: &Repo,
    cache: Option<&Path>,
    changed: &[String],
    limit: usize,
    threshold: f64,
) -> Result<(CochangeReport, Option<std::io::Error>), GitError> {
    let stored = cache.and_then(|p| CochangeIndex::load(p).ok());
    let (index, refresh) = CochangeIndex::refresh(repo, stored)?;
    let saved = match (cache, &refresh) {
        (Some(p), Refresh::Extended { .. } | Refresh::Rebuilt { .. }) => index.save(p).err(),
        _ => None,
    };
    Ok((index.query(changed, limit, threshold), saved))
}

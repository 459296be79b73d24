//! metabob-git: git reads, clone and fetch, all through gix (no `git` process, no libgit2).
//!
//! Must not depend on: the ledger, the cell, the MCP surface; it uses metabob-net only for the
//! smart-HTTP transport's trust and proxy.
//!
//! Everything the cells decide from git state — what a range holds, whether a fix is merged,
//! which remote branches hold a commit, where the fix is — reads through [`Repo`], so there is
//! one place that knows how. The `git` CLI is only the tests' oracle.
//!
//! The functions here block (the https transport runs reqwest's blocking client); async callers
//! run them on `tokio::task::spawn_blocking`.

mod clone;
pub mod cochange;
mod patch_id;
pub mod status;

use std::path::{Path, PathBuf};

use gix::bstr::ByteSlice;
use metabob_wire::report::Hint;

pub use clone::{BadOrigin, OriginFault, check_origin, clone_at};

/// A cause gix gives as one of many error types at one step (an object lookup, a ref walk, a
/// connection): each step of a read or fetch has its own gix type, so the cause is kept boxed,
/// whole and typed, rather than as one enum of every gix error this crate may meet.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What failed in a git read, clone or fetch. `Display` says what failed; the cause is the
/// `source` (gix's error, with its own causes), and what to do is the [`Hint`].
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The one wording of "not in a git checkout" (anchor: NotARepository): `finding close`
    /// and every other caller that needs a checkout says it through this variant.
    #[error("{} is not a git checkout", .0.display())]
    NotARepository(PathBuf),
    /// `url` has its credentials masked; the cause is gix's (or this crate's) own words, which
    /// may quote the URL whole: every surface redacts its line on the way out.
    #[error("clone of {url} failed")]
    Clone {
        url: String,
        #[source]
        source: Cause,
        /// The failure is this side's or a lasting refusal (a destination in use, a certificate
        /// nothing trusts, credentials refused, a 4xx), rather than a remote or network that did
        /// not answer, which can clear by itself.
        lasting: bool,
    },
    #[error("fetch from {remote} failed")]
    Fetch {
        remote: String,
        #[source]
        source: Cause,
    },
    /// The remote answered; writing what arrived into this repository failed.
    #[error("fetch from {remote} arrived, but writing it into the repository failed")]
    FetchStore {
        remote: String,
        #[source]
        source: Cause,
    },
    #[error("{name} was not found")]
    RefNotFound { name: String },
    #[error(
        "bad revision range {range:?}: expected A..B or a single revision that resolves to a commit"
    )]
    BadRange { range: String },
    #[error("revision range {range:?}: {side} is not a commit in this repository")]
    RangeSideMissing { range: String, side: String },
    #[error("reading the repository failed")]
    Read(#[source] Cause),
}

impl Hint for GitError {
    fn hint(&self) -> Option<String> {
        Some(match self {
            GitError::NotARepository(_) => {
                "run this in the clone, or pass --work-dir DIR of one".into()
            }
            GitError::Clone { source, .. } => {
                let general = "check the URL and that the remote is reachable";
                match clone::hint_in(source.as_ref()) {
                    Some(own) => format!("{own}; {general}"),
                    None => general.into(),
                }
            }
            GitError::Fetch { source, .. } => {
                let general = "check the network and the remote's URL, then retry";
                match clone::hint_in(source.as_ref()) {
                    Some(own) => format!("{own}; {general}"),
                    None => general.into(),
                }
            }
            GitError::FetchStore { .. } => {
                "check that the repository is writable and its disk has room, then retry".into()
            }
            GitError::RefNotFound { .. } => "check the name, or fetch first".into(),
            GitError::BadRange { .. } => return None,
            GitError::RangeSideMissing { .. } => {
                "check the name, and for a remote branch (origin/main) that the remote exists \
                 and was fetched"
                    .into()
            }
            GitError::Read(_) => "the repository may be damaged or busy, retry".into(),
        })
    }
}

fn read_err(e: impl std::error::Error + Send + Sync + 'static) -> GitError {
    GitError::Read(Box::new(e))
}

/// One commit as the ledger needs it: ids, message, and both times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitInfo {
    pub sha: String,
    pub parents: Vec<String>,
    /// The whole message (subject, body and trailers), decoded lossily as UTF-8.
    pub message: String,
    /// Unix seconds.
    pub author_time: i64,
    pub committer_time: i64,
}

/// One commit of [`Repo::scan_history`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scanned {
    pub sha: String,
    /// Unix seconds.
    pub committer_time: i64,
    /// The whole message, decoded lossily as UTF-8, when the scan's filter wanted it.
    pub message: Option<String>,
}

/// An open repository (work tree or bare).
pub struct Repo {
    repo: gix::Repository,
}

impl std::fmt::Debug for Repo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repo")
            .field("git_dir", &self.repo.git_dir())
            .finish()
    }
}

/// Commits decoded during a history scan are read once each; a cache this size keeps a long
/// walk's repeated tree/commit lookups (first-parent diffs, merge bases) off the pack decoder.
const OBJECT_CACHE_BYTES: usize = 16 * 1024 * 1024;
/// The pack decoder's cache of objects by place in the pack. A delta's chain is walked back only
/// to the first object held here, so reading versions of a file or tree in the order their
/// deltas were made costs one delta each instead of the whole chain (up to 50 deep after a
/// `git gc`). gix sets one only with its `max-performance-safe` feature, which would also turn
/// on its thread pool; the cap is a third of git's `core.deltaBaseCacheLimit` default.
const PACK_CACHE_BYTES: usize = 32 * 1024 * 1024;

impl Repo {
    fn wrap(mut repo: gix::Repository) -> Repo {
        repo.object_cache_size_if_unset(OBJECT_CACHE_BYTES);
        repo.objects.set_pack_cache(|| {
            Box::new(gix::odb::pack::cache::lru::MemoryCappedHashmap::new(
                PACK_CACHE_BYTES,
            ))
        });
        Repo { repo }
    }

    /// How many deltas stand between `id` and a whole object in its pack: 0 for a whole or loose
    /// object. Read from the entries' headers alone.
    fn delta_depth(&self, id: gix::ObjectId) -> Result<u32, GitError> {
        use gix::odb::find::Header;
        Ok(match self.repo.find_header(id).map_err(read_err)? {
            Header::Packed(p) => p.num_deltas,
            Header::Loose { .. } => 0,
        })
    }

    /// Whether the changed entries of tree `new` sit deeper in their delta chains than their
    /// versions in `old` (`Greater`: newer objects are stored as deltas on older ones), judged
    /// by the first changed pair whose depths differ, going down through changed subtrees.
    /// `Equal` when no pair tells.
    pub(crate) fn delta_order(
        &self,
        old: gix::ObjectId,
        new: gix::ObjectId,
    ) -> Result<std::cmp::Ordering, GitError> {
        use std::cmp::Ordering;
        let (a, b) = (self.find_tree(old)?, self.find_tree(new)?);
        let (a, b) = (tree_entries(Some(&a))?, tree_entries(Some(&b))?);
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            match tree_order(&a[i], &b[j]) {
                Ordering::Less => i += 1,
                Ordering::Greater => j += 1,
                Ordering::Equal => {
                    let (x, y) = (a[i].oid.to_owned(), b[j].oid.to_owned());
                    if x != y {
                        let by_depth = self.delta_depth(y)?.cmp(&self.delta_depth(x)?);
                        if by_depth != Ordering::Equal {
                            return Ok(by_depth);
                        }
                        if a[i].mode.is_tree() {
                            let below = self.delta_order(x, y)?;
                            if below != Ordering::Equal {
                                return Ok(below);
                            }
                        }
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        Ok(Ordering::Equal)
    }

    fn find_tree(&self, id: gix::ObjectId) -> Result<gix::Tree<'_>, GitError> {
        self.repo.find_tree(id).map_err(read_err)
    }

    /// Opens exactly `path` (a work tree's root or a bare repository's directory); a
    /// subdirectory of a work tree is not a repository here (use [`Repo::discover`]).
    pub fn open(path: &Path) -> Result<Repo, GitError> {
        gix::open(path)
            .map(Repo::wrap)
            .map_err(|_| GitError::NotARepository(path.to_path_buf()))
    }

    /// The repository `path` is in, walking up like git does; `Ok(None)` when there is none.
    pub fn discover(path: &Path) -> Result<Option<Repo>, GitError> {
        use gix::discover::upwards::Error as Up;
        match gix::discover(path) {
            Ok(repo) => Ok(Some(Repo::wrap(repo))),
            Err(gix::discover::Error::Discover(
                Up::NoGitRepository { .. }
                | Up::NoGitRepositoryWithinCeiling { .. }
                | Up::NoGitRepositoryWithinFs { .. }
                | Up::InaccessibleDirectory { .. },
            )) => Ok(None),
            Err(e) => Err(read_err(e)),
        }
    }

    /// The work tree's root; `None` for a bare repository.
    pub fn workdir(&self) -> Option<PathBuf> {
        self.repo.workdir().map(Path::to_path_buf)
    }

    /// The `.git` directory (or the bare repository's directory).
    pub fn git_dir(&self) -> PathBuf {
        self.repo.git_dir().to_path_buf()
    }

    /// The remote's URL as written in the configuration (what `git remote get-url` prints
    /// when no `insteadOf` applies): the repository identity is derived from this text.
    pub fn remote_url(&self, remote: &str) -> Option<String> {
        let key = format!("remote.{remote}.url");
        let value = self.repo.config_snapshot().string(key.as_str())?;
        Some(value.to_str_lossy().into_owned())
    }

    /// HEAD's commit, full sha; `None` on an unborn branch.
    pub fn head(&self) -> Result<Option<String>, GitError> {
        Ok(self.head_id()?.map(|id| id.to_string()))
    }

    /// HEAD's commit as the refs name it, without reading any object.
    pub(crate) fn head_id(&self) -> Result<Option<gix::ObjectId>, GitError> {
        let head = self.repo.head().map_err(read_err)?;
        Ok(head.id().map(gix::Id::detach))
    }

    /// The branch HEAD points to, short name; `None` when detached.
    pub fn head_branch(&self) -> Option<String> {
        let name = self.repo.head_name().ok()??;
        Some(name.shorten().to_str_lossy().into_owned())
    }

    fn resolve_id(&self, rev: &str) -> Result<Option<gix::ObjectId>, GitError> {
        let rev = rev.trim();
        // An option-looking or empty spec is never a revision; gix would reject it anyway,
        // but a caller passing user text should not depend on that.
        if rev.is_empty() || rev.starts_with('-') {
            return Ok(None);
        }
        let Ok(id) = self.repo.rev_parse_single(rev) else {
            // Unknown names, ambiguous prefixes and malformed specs all read as "does not
            // resolve": the caller asked a yes/no question about a name.
            return Ok(None);
        };
        let object = id.object().map_err(read_err)?;
        match object.peel_to_commit() {
            Ok(commit) => Ok(Some(commit.id)),
            // A tree or blob spec (HEAD:path) is not a commit.
            Err(_) => Ok(None),
        }
    }

    fn must_resolve(&self, rev: &str) -> Result<gix::ObjectId, GitError> {
        self.resolve_id(rev)?.ok_or_else(|| GitError::RefNotFound {
            name: rev.to_string(),
        })
    }

    /// Any commit-ish `git rev-parse` accepts (sha or prefix, branch, `origin/main`, `HEAD~2`,
    /// tags peeled to their commit); `None` when it does not resolve to a commit.
    pub fn resolve(&self, rev: &str) -> Result<Option<String>, GitError> {
        Ok(self.resolve_id(rev)?.map(|id| id.to_string()))
    }

    /// Fetches `remote` with its configured refspecs, updating `refs/remotes/<remote>/*` like
    /// `git fetch <remote>`. Nothing is written when the remote cannot be reached. An http(s)
    /// remote is reached with `net`'s trust and proxy choice.
    pub fn fetch(&self, remote: &str, net: &metabob_net::NetClient) -> Result<(), GitError> {
        clone::fetch(&self.repo, remote, net)
    }

    /// `git rev-list <range>`: "A..B" (reachable from B, not from A; an empty side is HEAD)
    /// or one revision; newest first by commit time.
    pub fn rev_list(&self, range: &str) -> Result<Vec<String>, GitError> {
        let bad = || GitError::BadRange {
            range: range.to_string(),
        };
        if range.contains("...") {
            return Err(bad());
        }
        let (hidden, tip) = match range.split_once("..") {
            Some((a, b)) => {
                fn side(s: &str) -> &str {
                    if s.is_empty() { "HEAD" } else { s }
                }
                // The range has its form; what is missing is one of its sides.
                let missing = |s: &str| GitError::RangeSideMissing {
                    range: range.to_string(),
                    side: s.to_string(),
                };
                let a = self.resolve_id(side(a))?.ok_or_else(|| missing(side(a)))?;
                let b = self.resolve_id(side(b))?.ok_or_else(|| missing(side(b)))?;
                (Some(a), b)
            }
            None => (None, self.resolve_id(range)?.ok_or_else(bad)?),
        };
        let walk = self
            .repo
            .rev_walk([tip])
            .sorting(newest_first())
            .with_hidden(hidden);
        walk.all()
            .map_err(read_err)?
            .map(|info| info.map(|i| i.id.to_string()).map_err(read_err))
            .collect()
    }

    fn info_of(&self, id: gix::ObjectId) -> Result<CommitInfo, GitError> {
        let commit = self.repo.find_commit(id).map_err(read_err)?;
        let decoded = commit.decode().map_err(read_err)?;
        Ok(CommitInfo {
            sha: id.to_string(),
            parents: decoded.parents().map(|p| p.to_string()).collect(),
            message: decoded.message.to_str_lossy().into_owned(),
            author_time: decoded.author().map_err(read_err)?.seconds(),
            committer_time: decoded.committer().map_err(read_err)?.seconds(),
        })
    }

    /// One commit by any revision that resolves to it; `RefNotFound` otherwise.
    pub fn commit(&self, sha: &str) -> Result<CommitInfo, GitError> {
        let id = self.must_resolve(sha)?;
        self.info_of(id)
    }

    /// Every ancestor of `tip` including it, newest first by commit time, each once: the
    /// scan behind "a commit on the target carries Fixes-Finding: <id> anywhere in its message".
    pub fn history(
        &self,
        tip: &str,
    ) -> Result<impl Iterator<Item = Result<CommitInfo, GitError>> + '_, GitError> {
        let walk = self.newest_first(self.must_resolve(tip)?)?;
        Ok(walk.map(move |info| {
            let info = info.map_err(read_err)?;
            self.info_of(info.id)
        }))
    }

    /// The same commits as [`Repo::history`], each as its sha and commit time, with its message
    /// only when `wanted` says the raw message may hold what the caller looks for
    /// (anchor: scan_history). The walk takes parents and times from the commit-graph file when
    /// the repository has one, so each commit is read once, for its message, and no commit's
    /// parents, author or message is copied out unless asked for.
    pub fn scan_history<'a>(
        &'a self,
        tip: &str,
        wanted: fn(&[u8]) -> bool,
    ) -> Result<impl Iterator<Item = Result<Scanned, GitError>> + 'a, GitError> {
        let walk = self.newest_first(self.must_resolve(tip)?)?;
        Ok(walk.map(move |info| {
            let info = info.map_err(read_err)?;
            let commit = self.repo.find_commit(info.id).map_err(read_err)?;
            let raw = commit.message_raw_sloppy();
            let message = wanted(raw).then(|| raw.to_str_lossy().into_owned());
            let committer_time = match info.commit_time {
                Some(t) => t,
                None => commit.time().map_err(read_err)?.seconds,
            };
            Ok(Scanned {
                sha: info.id.to_string(),
                committer_time,
                message,
            })
        }))
    }

    /// Every ancestor of `tip` including it, newest commit time first, each once.
    pub(crate) fn newest_first(
        &self,
        tip: gix::ObjectId,
    ) -> Result<gix::revision::Walk<'_>, GitError> {
        self.repo
            .rev_walk([tip])
            .sorting(newest_first())
            .all()
            .map_err(read_err)
    }

    /// `git merge-base --is-ancestor ancestor descendant` (a commit is its own ancestor).
    pub fn is_ancestor(&self, ancestor: &str, descendant: &str) -> Result<bool, GitError> {
        let a = self.must_resolve(ancestor)?;
        let d = self.must_resolve(descendant)?;
        self.is_ancestor_id(a, d)
    }

    fn is_ancestor_id(&self, a: gix::ObjectId, d: gix::ObjectId) -> Result<bool, GitError> {
        if a == d {
            return Ok(true);
        }
        // When `a` is an ancestor of `d` it is their one best merge base, so comparing the
        // base with `a` answers the question without walking all of `d`'s history.
        match self.repo.merge_base(a, d) {
            Ok(base) => Ok(base.detach() == a),
            Err(gix::repository::merge_base::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(read_err(e)),
        }
    }

    /// Short names (`main`, `task/t1`) of `refs/remotes/<remote>/*` other than `HEAD` whose
    /// history holds `sha`, sorted; what `git branch -r --contains` lists for that remote.
    pub fn remote_branches_containing(
        &self,
        sha: &str,
        remote: &str,
    ) -> Result<Vec<String>, GitError> {
        let id = self.must_resolve(sha)?;
        let prefix = format!("refs/remotes/{remote}/");
        let refs = self.repo.references().map_err(read_err)?;
        let mut out = Vec::new();
        for r in refs.prefixed(prefix.as_str()).map_err(read_err)? {
            let mut r = r.map_err(GitError::Read)?;
            // origin/HEAD is a pointer to another remote branch, not a branch of its own.
            if matches!(r.target(), gix::refs::TargetRef::Symbolic(_)) {
                continue;
            }
            let name = r.name().as_bstr().to_str_lossy().into_owned();
            let Some(short) = name.strip_prefix(&prefix) else {
                continue;
            };
            if short == "HEAD" {
                continue;
            }
            let short = short.to_string();
            let Ok(tip) = r.peel_to_commit() else {
                // A remote ref to a non-commit (a tag object of a tree) holds no history.
                continue;
            };
            if self.is_ancestor_id(id, tip.id)? {
                out.push(short);
            }
        }
        out.sort();
        Ok(out)
    }

    /// The branch `refs/remotes/<remote>/HEAD` points to, short name (`main`); `None` when the
    /// clone recorded no remote HEAD.
    pub fn remote_default_branch(&self, remote: &str) -> Option<String> {
        let name = format!("refs/remotes/{remote}/HEAD");
        let r = self.repo.try_find_reference(name.as_str()).ok()??;
        let gix::refs::TargetRef::Symbolic(target) = r.target() else {
            return None;
        };
        let target = target.as_bstr().to_str_lossy().into_owned();
        target
            .strip_prefix(&format!("refs/remotes/{remote}/"))
            .map(str::to_string)
    }

    /// Whether the clone has `refs/remotes/<remote>/<branch>` leading to a commit. The name is
    /// looked up as that exact ref, never read as a revision: `@` is a branch named `@`.
    pub fn has_remote_branch(&self, remote: &str, branch: &str) -> bool {
        let name = format!("refs/remotes/{remote}/{branch}");
        match self.repo.try_find_reference(name.as_str()) {
            // gix also tries the name under refs/heads/ and the like: only the exact ref counts.
            Ok(Some(mut r)) => r.name().as_bstr() == name.as_str() && r.peel_to_commit().is_ok(),
            _ => false,
        }
    }

    /// The trees a commit's change is measured between: its first parent's (the empty tree
    /// for a root commit) and its own.
    fn first_parent_trees(
        &self,
        id: gix::ObjectId,
    ) -> Result<(gix::Tree<'_>, gix::Tree<'_>, usize), GitError> {
        let commit = self.repo.find_commit(id).map_err(read_err)?;
        let tree = commit.tree().map_err(read_err)?;
        let parents: Vec<gix::ObjectId> = commit.parent_ids().map(|p| p.detach()).collect();
        let old = match parents.first() {
            Some(p) => self
                .repo
                .find_commit(*p)
                .map_err(read_err)?
                .tree()
                .map_err(read_err)?,
            None => self.repo.empty_tree(),
        };
        Ok((old, tree, parents.len()))
    }

    /// Blob-level changes between two trees, without rename detection (plumbing diff-tree
    /// does none by default), in tree order.
    fn tree_changes(
        &self,
        old: &gix::Tree<'_>,
        new: &gix::Tree<'_>,
    ) -> Result<Vec<gix::object::tree::diff::ChangeDetached>, GitError> {
        let mut opts = gix::diff::Options::default().with_rewrites(None);
        opts.track_path();
        let changes = self
            .repo
            .diff_tree_to_tree(Some(old), Some(new), Some(opts))
            .map_err(read_err)?;
        Ok(changes
            .into_iter()
            .filter(|c| !c.entry_mode().is_tree())
            .collect())
    }

    /// Paths a commit changed against its first parent (everything, for a root commit), like
    /// `git diff-tree --no-commit-id --name-only -r --root`.
    pub fn changed_files(&self, sha: &str) -> Result<Vec<String>, GitError> {
        let id = self.must_resolve(sha)?;
        let (old, new, _) = self.first_parent_trees(id)?;
        let mut out = Vec::new();
        self.changed_paths(Some(old.id), Some(new.id), "", &mut out)?;
        Ok(out)
    }

    /// The non-tree paths that differ between two trees (`None`: the empty side), in git's
    /// order, without opening subtrees whose ids are equal (anchor: changed_paths). The two
    /// entry lists are walked side by side in tree order, and a name becomes a string only when
    /// its entry changed: names are all a co-change question needs, so this skips the diff
    /// platform's per-change bookkeeping, which costs several times more.
    fn changed_paths(
        &self,
        old: Option<gix::ObjectId>,
        new: Option<gix::ObjectId>,
        prefix: &str,
        out: &mut Vec<String>,
    ) -> Result<(), GitError> {
        use gix::objs::tree::EntryRef;
        use std::cmp::Ordering;
        if old == new {
            return Ok(());
        }
        let read = |id: Option<gix::ObjectId>| id.map(|id| self.find_tree(id)).transpose();
        let (a, b) = (read(old)?, read(new)?);
        let (a, b) = (tree_entries(a.as_ref())?, tree_entries(b.as_ref())?);
        let (mut i, mut j) = (0, 0);
        // One side's entry alone: a tree is walked against nothing, a blob is a changed path.
        let one = |e: &EntryRef<'_>, side_old: bool, out: &mut Vec<String>| {
            let path = format!("{prefix}{}", e.filename.to_str_lossy());
            if e.mode.is_tree() {
                let id = Some(e.oid.to_owned());
                let (o, n) = if side_old { (id, None) } else { (None, id) };
                self.changed_paths(o, n, &format!("{path}/"), out)
            } else {
                out.push(path);
                Ok(())
            }
        };
        while i < a.len() || j < b.len() {
            let order = match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) => tree_order(x, y),
                (Some(_), None) => Ordering::Less,
                _ => Ordering::Greater,
            };
            match order {
                Ordering::Less => {
                    one(&a[i], true, out)?;
                    i += 1;
                }
                Ordering::Greater => {
                    one(&b[j], false, out)?;
                    j += 1;
                }
                Ordering::Equal => {
                    let (x, y) = (&a[i], &b[j]);
                    if x.oid != y.oid || x.mode != y.mode {
                        let path = format!("{prefix}{}", y.filename.to_str_lossy());
                        if x.mode.is_tree() {
                            let (o, n) = (Some(x.oid.to_owned()), Some(y.oid.to_owned()));
                            self.changed_paths(o, n, &format!("{path}/"), out)?;
                        } else {
                            // A mode change (a file made executable) is a change, as git lists it.
                            out.push(path);
                        }
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        Ok(())
    }

    /// A stable id of the change a commit makes against its first parent; equal for a
    /// cherry-pick of the same change (see `patch_id.rs` for how it follows
    /// `git patch-id --stable`). `None` for a merge commit and for an empty change.
    pub fn patch_id(&self, sha: &str) -> Result<Option<String>, GitError> {
        let id = self.must_resolve(sha)?;
        let (old, new, parents) = self.first_parent_trees(id)?;
        if parents > 1 {
            return Ok(None);
        }
        let changes = self.tree_changes(&old, &new)?;
        patch_id::of_changes(&self.repo, &changes)
    }

    /// Paths given relative to `workspace` (or absolute), as this repository names them: the
    /// workspace may sit below the work tree's root (anchor: workspace_paths).
    pub fn workspace_paths(&self, workspace: &Path, files: &[String]) -> Vec<String> {
        let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let root = real(&self.workdir().unwrap_or_else(|| workspace.to_path_buf()));
        let ws = real(workspace);
        files
            .iter()
            .map(|f| {
                // An absolute `f` replaces `ws` in the join.
                let abs = ws.join(f.trim_start_matches("./"));
                abs.strip_prefix(&root)
                    .map(|p| p.to_string_lossy().replace('\\', "/"))
                    .unwrap_or_else(|_| f.clone())
            })
            .collect()
    }

    /// The gix repository, for reads this wrapper does not name yet.
    pub fn inner(&self) -> &gix::Repository {
        &self.repo
    }
}

/// A tree's entries, borrowing its data; none for the empty side.
fn tree_entries<'a>(
    tree: Option<&'a gix::Tree<'_>>,
) -> Result<Vec<gix::objs::tree::EntryRef<'a>>, GitError> {
    match tree {
        Some(t) => t
            .iter()
            .map(|e| e.map(|e| e.inner).map_err(read_err))
            .collect(),
        None => Ok(Vec::new()),
    }
}

/// git's order of tree entries: by name, a tree's name read as if it ended in `/`. Two entries
/// compare equal only when they have one name and are both trees or both not.
fn tree_order(
    a: &gix::objs::tree::EntryRef<'_>,
    b: &gix::objs::tree::EntryRef<'_>,
) -> std::cmp::Ordering {
    let (x, y): (&[u8], &[u8]) = (a.filename, b.filename);
    let n = x.len().min(y.len());
    x[..n].cmp(&y[..n]).then_with(|| {
        let next = |name: &[u8], tree: bool| name.get(n).copied().or(tree.then_some(b'/'));
        next(x, a.mode.is_tree()).cmp(&next(y, b.mode.is_tree()))
    })
}

pub(crate) fn newest_first() -> gix::revision::walk::Sorting {
    gix::revision::walk::Sorting::ByCommitTime(
        gix::traverse::commit::simple::CommitTimeOrder::NewestFirst,
    )
}

//! The work tree against HEAD, as far as `mark_complete` needs it: which of a finding's files
//! hold uncommitted changes, whether any tracked file does, and whether a path is ignored.
//! Paths are repository-relative with `/`.

use gix::bstr::ByteSlice;

use super::{GitError, Repo, read_err};

/// How one path stands against HEAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathState {
    /// Same in HEAD, the index and the work tree.
    Clean,
    /// Modified, staged or deleted.
    Changed,
    /// On disk, in neither HEAD nor the index, and not ignored.
    Untracked,
    /// On disk or not, untracked and matched by an ignore rule.
    Ignored,
    /// Nowhere: not on disk, not in HEAD, not in the index.
    Absent,
}

/// A work-tree file larger than this is not hashed (its state is an error naming the bound):
/// far past any source file a finding names.
const MAX_HASHED_BYTES: u64 = 256 << 20;

impl Repo {
    fn worktree_blob(&self, path: &str) -> Result<Option<gix::ObjectId>, GitError> {
        let Some(root) = self.workdir() else {
            return Ok(None);
        };
        let full = root.join(path);
        let meta = match std::fs::symlink_metadata(&full) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(read_err(e)),
        };
        // As git hashes them: a link by its target's name, never by what it points at (which
        // may be anything, `/dev/zero` included); a regular file within a bound; nothing else
        // (a FIFO would block the read) is a blob at all.
        let data = if meta.file_type().is_symlink() {
            use std::os::unix::ffi::OsStrExt as _;
            std::fs::read_link(&full)
                .map_err(read_err)?
                .as_os_str()
                .as_bytes()
                .to_vec()
        } else if meta.is_file() {
            metabob_process::files::read_bounded_bytes(&full, MAX_HASHED_BYTES).map_err(read_err)?
        } else {
            return Ok(None);
        };
        gix::objs::compute_hash(self.repo.object_hash(), gix::object::Kind::Blob, &data)
            .map(Some)
            .map_err(read_err)
    }

    /// Each path's state (anchor: path_states): the work tree's blob against the index's
    /// and HEAD's.
    pub fn path_states(&self, paths: &[String]) -> Result<Vec<PathState>, GitError> {
        let head_tree = self.repo.head_tree().ok();
        let index = self.repo.index_or_empty().map_err(read_err)?;
        let mut excludes = None;
        let mut out = Vec::with_capacity(paths.len());
        for path in paths {
            let in_head = match &head_tree {
                Some(t) => t
                    .lookup_entry_by_path(path)
                    .map_err(read_err)?
                    .map(|e| e.object_id()),
                None => None,
            };
            let in_index = index.entry_by_path(path.as_bytes().as_bstr()).map(|e| e.id);
            let on_disk = self.worktree_blob(path)?;
            let state = match (in_head, in_index, on_disk) {
                (None, None, disk) => {
                    if excludes.is_none() {
                        excludes = Some(
                            self.repo
                                .excludes(&index, None, Default::default())
                                .map_err(read_err)?,
                        );
                    }
                    let stack = excludes.as_mut().expect("set above");
                    let ignored = stack
                        .at_entry(path.as_str(), None)
                        .map_err(read_err)?
                        .is_excluded();
                    match (ignored, disk) {
                        (true, _) => PathState::Ignored,
                        (false, Some(_)) => PathState::Untracked,
                        (false, None) => PathState::Absent,
                    }
                }
                (h, i, d) if h == i && i == d => PathState::Clean,
                _ => PathState::Changed,
            };
            out.push(state);
        }
        Ok(out)
    }

    /// Tracked files with uncommitted changes, at most `cap` of them (anchor: changed_tracked).
    /// A file whose size and modification time match the index is taken as unchanged, as git
    /// does; only the others are hashed.
    pub fn changed_tracked(&self, cap: usize) -> Result<Vec<String>, GitError> {
        let Some(root) = self.workdir() else {
            return Ok(Vec::new());
        };
        let index = self.repo.index_or_empty().map_err(read_err)?;
        let head_tree = self.repo.head_tree().ok();
        let mut out = Vec::new();
        for entry in index.entries() {
            if out.len() >= cap {
                break;
            }
            let path = entry.path(&index).to_str_lossy().into_owned();
            let meta = std::fs::symlink_metadata(root.join(&path));
            let worktree_differs = match meta {
                Err(_) => true,
                Ok(m) => {
                    let mtime = m
                        .modified()
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map(|d| d.as_secs() as u32);
                    let same_stat =
                        m.len() as u32 == entry.stat.size && mtime == Some(entry.stat.mtime.secs);
                    !same_stat && self.worktree_blob(&path)? != Some(entry.id)
                }
            };
            let staged = match &head_tree {
                Some(t) => {
                    t.lookup_entry_by_path(&path)
                        .map_err(read_err)?
                        .map(|e| e.object_id())
                        != Some(entry.id)
                }
                None => true,
            };
            if worktree_differs || staged {
                out.push(path);
            }
        }
        Ok(out)
    }
}

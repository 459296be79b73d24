//! The workspace listing: which files the index covers, by name, extension and size alone.
//!
//! The walk leaves out what the workspace's ignore files leave out, so the graph covers the code
//! a person works on, not build output or vendored trees that happen to match an extension.
//! Inside a git checkout the files are read as ripgrep reads them: `.gitignore` from the
//! checkout's root down, `.git/info/exclude`, and `.ignore` in the workspace and above it (so a
//! package of a monorepo keeps its root's rules). Outside a checkout only the workspace's own
//! `.gitignore` and `.ignore` files count: an exported tree keeps its rules, and a stray
//! `~/.gitignore` cannot empty the index. The user's global git excludes never count, so the
//! same tree lists the same files on every machine. Hidden entries and the options' excluded
//! directory names are skipped on top.

use std::path::Path;
use std::time::UNIX_EPOCH;

use ignore::WalkBuilder;
use serde::{Deserialize, Serialize};

use super::{IndexOptions, Lang, MAX_FILE_BYTES, MAX_FILES, ext_of};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScannedFile {
    /// Workspace-relative, `/`-separated.
    pub path: String,
    pub size: u64,
    pub mtime_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scan {
    /// At most `MAX_FILES`, in walk order (each directory's entries sorted by name).
    pub files: Vec<ScannedFile>,
    pub too_large: Vec<String>,
    /// Names that are not UTF-8 cannot be stored as paths.
    pub unreadable: Vec<Skipped>,
    pub cap_hit: bool,
}

/// Lists the files an index with `opts` covers. Symlinks are not followed (no cycles, nothing
/// outside the root); an unreadable subdirectory is passed over. The listing is a function of
/// the tree alone, so a persisted index re-lists with this and compares: an edit the rules hide
/// changes nothing, an edit to the rules that shows or hides a file changes the listing.
pub fn scan(root: &Path, opts: &IndexOptions) -> std::io::Result<Scan> {
    let opts = opts.normalized();
    // The walker reports an unreadable root as one more skipped entry; the caller needs to know.
    std::fs::read_dir(root)?;
    let in_checkout = std::path::absolute(root)?
        .ancestors()
        .any(|dir| dir.join(".git").exists() || dir.join(".jj").exists());
    let exclude = opts.exclude.clone();
    let walk = WalkBuilder::new(root)
        .standard_filters(true)
        .git_global(false)
        .require_git(in_checkout)
        .parents(in_checkout)
        .follow_links(false)
        // Sorted, so the files kept under the cap are the same on every run.
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |e| {
            let is_dir = e.file_type().is_some_and(|t| t.is_dir());
            !(is_dir && exclude.iter().any(|x| e.file_name() == x.as_str()))
        })
        .build();

    let mut out = Scan::default();
    for entry in walk {
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let name = entry.file_name().to_string_lossy();
        let ext = ext_of(&name);
        if Lang::from_ext(ext).is_none() || !opts.include.iter().any(|x| x == ext) {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        let rel = entry.path().strip_prefix(root).unwrap_or(entry.path());
        let parts: Option<Vec<&str>> = rel.iter().map(|c| c.to_str()).collect();
        let Some(path) = parts.map(|p| p.join("/")) else {
            let path = rel.iter().map(|c| c.to_string_lossy()).collect::<Vec<_>>();
            out.unreadable.push(Skipped {
                path: path.join("/"),
                reason: "name is not utf-8".into(),
            });
            continue;
        };
        if meta.len() > MAX_FILE_BYTES {
            out.too_large.push(path);
        } else if out.files.len() == MAX_FILES {
            out.cap_hit = true;
            break;
        } else {
            let mtime_ns = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as u64);
            out.files.push(ScannedFile {
                path,
                size: meta.len(),
                mtime_ns,
            });
        }
    }
    Ok(out)
}

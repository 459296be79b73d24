//! The workspace listing: which files the index covers, by name, extension and size alone.

use std::path::Path;
use std::time::UNIX_EPOCH;

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
/// outside the root); an unreadable subdirectory is passed over.
pub fn scan(root: &Path, opts: &IndexOptions) -> std::io::Result<Scan> {
    let opts = opts.normalized();
    let mut out = Scan::default();
    walk(root, "", &opts, &mut out, true)?;
    Ok(out)
}

fn walk(
    dir: &Path,
    rel: &str,
    opts: &IndexOptions,
    out: &mut Scan,
    top: bool,
) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if top => return Err(e),
        Err(_) => return Ok(()),
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    // Sorted, so the files kept under the cap are the same on every run.
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let Ok(ft) = entry.file_type() else { continue };
        let os_name = entry.file_name();
        let name = os_name.to_string_lossy();
        let path = format!("{rel}{name}");
        if ft.is_dir() {
            if !name.starts_with('.') && !opts.exclude.iter().any(|x| *x == name) {
                walk(&entry.path(), &format!("{path}/"), opts, out, false)?;
            }
            continue;
        }
        let ext = ext_of(&name);
        if !ft.is_file() || Lang::from_ext(ext).is_none() || !opts.include.iter().any(|x| x == ext)
        {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if os_name.to_str().is_none() {
            out.unreadable.push(Skipped {
                path,
                reason: "name is not utf-8".into(),
            });
        } else if meta.len() > MAX_FILE_BYTES {
            out.too_large.push(path);
        } else if out.files.len() == MAX_FILES {
            out.cap_hit = true;
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
        if out.cap_hit {
            break;
        }
    }
    Ok(())
}

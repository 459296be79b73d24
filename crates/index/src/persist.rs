//! The whole-index cache: one JSON document, written atomically, taken whole or discarded whole.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::Path;

use petgraph::graph::DiGraph;
use serde::{Deserialize, Serialize};

use super::{Component, EdgeKind, FileRec, Index, IndexOptions, Scan, Skipped, scan};

/// Bumped whenever the document's shape or what parsing extracts changes.
pub const CACHE_VERSION: u32 = 2;
/// An index of the most files the scan takes is a few tens of megabytes; a cache file past
/// this was not written by us and is discarded unread.
const MAX_CACHE_BYTES: u64 = 512 << 20;

/// Why a cache was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Discarded {
    #[error("missing")]
    Missing,
    #[error("unreadable({0})")]
    Unreadable(String),
    #[error("version({found}, {expected})")]
    Version { found: u32, expected: u32 },
    #[error("corrupt({0})")]
    Corrupt(String),
    #[error("root_changed")]
    RootChanged,
    #[error("options_changed")]
    OptionsChanged,
    /// A stored file is gone, or its size or mtime differs.
    #[error("file_changed({0})")]
    FileChanged(String),
    /// The listing has a file that the stored one has not.
    #[error("new_file({0})")]
    NewFile(String),
}

#[derive(Serialize, Deserialize)]
struct Doc<'a> {
    version: u32,
    root: Cow<'a, str>,
    options: Cow<'a, IndexOptions>,
    scan: Cow<'a, Scan>,
    files: Cow<'a, [FileRec]>,
    unreadable: Cow<'a, [Skipped]>,
    components: Cow<'a, [Component]>,
    edges: Vec<(u32, u32, EdgeKind)>,
    elapsed_ms: u64,
}

#[derive(Deserialize)]
struct Header {
    version: u32,
}

impl Index {
    /// Writes a complete index; a partial one is refused (`InvalidInput`), since a cache is
    /// only worth loading when it answers without parsing anything.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let Some(options) = self.opts.as_ref().filter(|_| self.is_complete()) else {
            let msg = "only a complete index is saved";
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, msg));
        };
        let doc = Doc {
            version: CACHE_VERSION,
            root: self.root.to_string_lossy(),
            options: Cow::Borrowed(options),
            scan: Cow::Borrowed(&self.scan),
            files: Cow::Borrowed(&self.files),
            unreadable: Cow::Borrowed(&self.unreadable),
            components: Cow::Borrowed(&self.components),
            edges: (self.graph.raw_edges().iter())
                .map(|e| {
                    (
                        e.source().index() as u32,
                        e.target().index() as u32,
                        e.weight,
                    )
                })
                .collect(),
            elapsed_ms: self.elapsed_ms,
        };
        let bytes = serde_json::to_vec(&doc).map_err(std::io::Error::other)?;
        metabob_wire::util::write_atomic(path, &bytes, Some(0o600))
    }

    /// The cached index for `root` and `opts`, if every candidate file still stats the same.
    pub fn load(path: &Path, root: &Path, opts: &IndexOptions) -> Result<Index, Discarded> {
        let bytes = metabob_wire::util::read_bounded_bytes(path, MAX_CACHE_BYTES).map_err(|e| {
            match e.kind() {
                std::io::ErrorKind::NotFound => Discarded::Missing,
                _ => Discarded::Unreadable(e.to_string()),
            }
        })?;
        let doc: Doc =
            serde_json::from_slice(&bytes).map_err(|e| {
                match serde_json::from_slice::<Header>(&bytes) {
                    Ok(h) if h.version != CACHE_VERSION => version(h.version),
                    _ => Discarded::Corrupt(e.to_string()),
                }
            })?;
        if doc.version != CACHE_VERSION {
            return Err(version(doc.version));
        }
        let index = Index::new(root);
        if index.root.to_string_lossy() != doc.root {
            return Err(Discarded::RootChanged);
        }
        let opts = opts.normalized();
        if *doc.options != opts {
            return Err(Discarded::OptionsChanged);
        }
        let n = doc.components.len() as u64;
        let bad_file = doc
            .files
            .iter()
            .any(|f| f.count == 0 || f.first as u64 + f.count as u64 > n);
        let bad_edge = doc
            .edges
            .iter()
            .any(|(a, b, _)| *a as u64 >= n || *b as u64 >= n);
        if bad_file || bad_edge {
            return Err(Discarded::Corrupt("component or edge out of range".into()));
        }
        let now = scan(&index.root, &opts).map_err(|e| Discarded::Unreadable(e.to_string()))?;
        if let Some(d) = difference(&doc.scan, &now) {
            return Err(d);
        }

        let mut graph = DiGraph::with_capacity(n as usize, doc.edges.len());
        for _ in 0..n {
            graph.add_node(());
        }
        graph.extend_with_edges(doc.edges);
        let files = doc.files.into_owned();
        let by_path = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.path.clone(), i))
            .collect();
        let next = now.files.len();
        Ok(Index {
            opts: Some(opts),
            scan: now,
            next,
            files,
            by_path,
            unreadable: doc.unreadable.into_owned(),
            components: doc.components.into_owned(),
            graph,
            edges_for: next,
            elapsed_ms: doc.elapsed_ms,
            ..index
        })
    }
}

fn version(found: u32) -> Discarded {
    Discarded::Version {
        found,
        expected: CACHE_VERSION,
    }
}

/// The first way the current listing differs from the stored one, if any.
fn difference(old: &Scan, new: &Scan) -> Option<Discarded> {
    let listed: HashMap<&str, _> = new.files.iter().map(|f| (f.path.as_str(), f)).collect();
    for f in &old.files {
        if listed.get(f.path.as_str()) != Some(&f) {
            return Some(Discarded::FileChanged(f.path.clone()));
        }
    }
    for p in &old.too_large {
        if !new.too_large.contains(p) {
            return Some(Discarded::FileChanged(p.clone()));
        }
    }
    let known: HashSet<&String> = old
        .files
        .iter()
        .map(|f| &f.path)
        .chain(&old.too_large)
        .collect();
    let added = new
        .files
        .iter()
        .map(|f| &f.path)
        .chain(&new.too_large)
        .find(|p| !known.contains(p));
    if let Some(p) = added {
        return Some(Discarded::NewFile(p.clone()));
    }
    (old != new).then(|| Discarded::NewFile("(listing beyond the file cap)".into()))
}

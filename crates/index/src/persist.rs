//! The whole-index cache: one document, written atomically, taken whole or discarded whole.
//!
//! The document is binary (postcard). Paths are the listing's own; names and qualified names are
//! stored once each; a component's id, file and language come from its file rather than being
//! repeated; an edge's source is stored as its step from the previous edge's. Version 2 was JSON
//! of the in-memory records: [`Index::migrate`] reads such a file once and rewrites it.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::Path;

use petgraph::graph::DiGraph;
use serde::{Deserialize, Serialize};

use metabob_process::stored::{self, Unusable};

use super::{Component, EdgeKind, FileRec, Index, IndexOptions, Kind, Lang, Scan, Skipped, scan};

/// Bumped whenever the document's shape or what parsing extracts changes.
pub const CACHE_VERSION: u32 = 3;
/// The JSON document that came before the binary one; read only to migrate it.
pub const LEGACY_JSON_VERSION: u32 = 2;
/// An index of the most files the scan takes is a few tens of megabytes; a cache file past
/// this was not written by us and is discarded unread.
const MAX_CACHE_BYTES: u64 = 512 << 20;

/// Why a cache was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Discarded {
    /// Missing, unreadable, of another version or corrupt, as for every stored file.
    #[error(transparent)]
    Stored(#[from] Unusable),
    #[error("root_changed")]
    RootChanged,
    #[error("options_changed")]
    OptionsChanged,
    /// A stored file is gone, or its size or mtime differs.
    #[error("file_changed({path})")]
    FileChanged { path: String },
    /// The listing has a file that the stored one has not.
    #[error("new_file({path})")]
    NewFile { path: String },
}

#[derive(Serialize, Deserialize)]
struct Packed {
    /// First, so a document of another version is named by it even when the rest differs.
    version: u32,
    root: String,
    options: IndexOptions,
    scan: Scan,
    unreadable: Vec<Skipped>,
    elapsed_ms: u64,
    /// Every distinct name and qualified name, once.
    symbols: Vec<String>,
    files: Vec<PackedFile>,
    /// In file order: each file's components follow the previous file's.
    components: Vec<PackedComponent>,
    /// In the graph's order: (source minus the previous edge's source, target, kind).
    edges: Vec<(i64, u32, EdgeKind)>,
}

#[derive(Serialize, Deserialize)]
struct PackedFile {
    /// Its place in `scan.files`, whose path is its path.
    scanned: u32,
    lang: Lang,
    count: u32,
}

#[derive(Serialize, Deserialize)]
struct PackedComponent {
    name: u32,
    qualified: u32,
    kind: Kind,
    start_line: u32,
    /// `end_line - start_line`.
    lines: u32,
    id: IdForm,
}

/// How a component's id relates to `file::qualified_name@start_line`, the form parsing gives.
#[derive(Serialize, Deserialize)]
enum IdForm {
    Derived,
    /// The derived form plus `#n`: the n-th definition of the name on its line.
    Twin(u32),
    /// Any other id, stored as it is: the id is data, not an error's words.
    Verbatim(String),
}

fn derived_id(file: &str, qualified: &str, start_line: u32) -> String {
    format!("{file}::{qualified}@{start_line}")
}

/// Strings stored once each, named by their place.
#[derive(Default)]
struct Symbols<'a> {
    ids: HashMap<&'a str, u32>,
    list: Vec<String>,
}

impl<'a> Symbols<'a> {
    fn id(&mut self, s: &'a str) -> u32 {
        *self.ids.entry(s).or_insert_with(|| {
            self.list.push(s.to_string());
            self.list.len() as u32 - 1
        })
    }
}

fn invalid(msg: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.to_string())
}

fn corrupt(msg: &'static str) -> Discarded {
    Unusable::corrupt(msg).into()
}

impl Index {
    /// Writes a complete index; a partial one is refused (`InvalidInput`), since a cache is
    /// only worth loading when it answers without parsing anything.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        stored::write(path, &self.packed()?)
    }

    fn complete_options(&self) -> std::io::Result<&IndexOptions> {
        self.opts
            .as_ref()
            .filter(|_| self.is_complete())
            .ok_or_else(|| {
                let msg = "only a complete index is saved";
                std::io::Error::new(std::io::ErrorKind::InvalidInput, msg)
            })
    }

    fn packed(&self) -> std::io::Result<Packed> {
        let options = self.complete_options()?.clone();
        let place: HashMap<&str, u32> = (self.scan.files.iter().enumerate())
            .map(|(i, f)| (f.path.as_str(), i as u32))
            .collect();
        let mut symbols = Symbols::default();
        let mut files = Vec::with_capacity(self.files.len());
        let mut components = Vec::with_capacity(self.components.len());
        let mut next = 0u32;
        for f in &self.files {
            let scanned = *place
                .get(f.path.as_str())
                .ok_or_else(|| invalid("a parsed file is not in the listing"))?;
            if f.first != next {
                return Err(invalid("components are not in file order"));
            }
            next = next.saturating_add(f.count);
            files.push(PackedFile {
                scanned,
                lang: f.lang,
                count: f.count,
            });
            let comps = (self.components.get(f.first as usize..next as usize))
                .ok_or_else(|| invalid("a file's components are out of range"))?;
            for c in comps {
                if c.file != f.path || c.language != f.lang || c.end_line < c.start_line {
                    return Err(invalid("a component does not match its file"));
                }
                let base = derived_id(&c.file, &c.qualified_name, c.start_line);
                let id = match c.id.strip_prefix(base.as_str()) {
                    Some("") => IdForm::Derived,
                    Some(rest) => match rest.strip_prefix('#').and_then(|n| n.parse().ok()) {
                        Some(n) => IdForm::Twin(n),
                        None => IdForm::Verbatim(c.id.clone()),
                    },
                    None => IdForm::Verbatim(c.id.clone()),
                };
                components.push(PackedComponent {
                    name: symbols.id(&c.name),
                    qualified: symbols.id(&c.qualified_name),
                    kind: c.kind,
                    start_line: c.start_line,
                    lines: c.end_line - c.start_line,
                    id,
                });
            }
        }
        if next as usize != self.components.len() {
            return Err(invalid("a component belongs to no file"));
        }
        let mut previous = 0i64;
        let edges = (self.graph.raw_edges().iter())
            .map(|e| {
                let source = e.source().index() as i64;
                let step = source - previous;
                previous = source;
                (step, e.target().index() as u32, e.weight)
            })
            .collect();
        Ok(Packed {
            version: CACHE_VERSION,
            root: self.root.to_string_lossy().into_owned(),
            options,
            scan: self.scan.clone(),
            unreadable: self.unreadable.clone(),
            elapsed_ms: self.elapsed_ms,
            symbols: symbols.list,
            files,
            components,
            edges,
        })
    }

    /// The cached index for `root` and `opts`, if every candidate file still stats the same.
    pub fn load(path: &Path, root: &Path, opts: &IndexOptions) -> Result<Index, Discarded> {
        let doc: Packed = stored::decode(&stored::read(path, MAX_CACHE_BYTES)?, CACHE_VERSION)?;
        let mut index = Index::new(root);
        check_root_and_options(&index, &doc.root, &doc.options, opts)?;
        let files = unpack_files(&doc)?;
        let components = unpack_components(&doc, &files)?;
        let edges = unpack_edges(&doc.edges, components.len())?;
        index.restore(
            opts,
            doc.scan,
            files,
            doc.unreadable,
            components,
            edges,
            doc.elapsed_ms,
        )?;
        Ok(index)
    }

    /// The index at `path`; when there is none, the version-2 JSON cache at `legacy`, read once,
    /// written to `path` in the current form and then removed (anchor: index_migrate). A
    /// legacy cache that no longer holds is removed too: nothing would ever read it again.
    pub fn migrate(
        path: &Path,
        legacy: &Path,
        root: &Path,
        opts: &IndexOptions,
    ) -> Result<Index, Discarded> {
        match Index::load(path, root, opts) {
            Err(Discarded::Stored(Unusable::Missing)) if legacy.exists() => {}
            other => return other,
        }
        let loaded = Index::load_legacy_json(legacy, root, opts);
        if let Ok(index) = &loaded
            && index.save(path).is_err()
        {
            // Not rewritten: keep the old file, which still answers next time.
            return loaded;
        }
        let _ = std::fs::remove_file(legacy);
        loaded
    }

    /// Reads a version-2 JSON cache (the form before [`CACHE_VERSION`] 3).
    pub fn load_legacy_json(
        path: &Path,
        root: &Path,
        opts: &IndexOptions,
    ) -> Result<Index, Discarded> {
        let bytes = stored::read(path, MAX_CACHE_BYTES)?;
        let doc: LegacyDoc = serde_json::from_slice(&bytes).map_err(|e| {
            match serde_json::from_slice::<Header>(&bytes) {
                Ok(h) if h.version != LEGACY_JSON_VERSION => legacy_version(h.version),
                _ => Unusable::corrupt(e).into(),
            }
        })?;
        if doc.version != LEGACY_JSON_VERSION {
            return Err(legacy_version(doc.version));
        }
        let mut index = Index::new(root);
        check_root_and_options(&index, &doc.root, &doc.options, opts)?;
        let n = doc.components.len() as u64;
        let bad_file =
            (doc.files.iter()).any(|f| f.count == 0 || f.first as u64 + f.count as u64 > n);
        if bad_file {
            return Err(corrupt("component or edge out of range"));
        }
        let edges = doc.edges;
        if edges
            .iter()
            .any(|(a, b, _)| *a as u64 >= n || *b as u64 >= n)
        {
            return Err(corrupt("component or edge out of range"));
        }
        index.restore(
            opts,
            doc.scan.into_owned(),
            doc.files.into_owned(),
            doc.unreadable.into_owned(),
            doc.components.into_owned(),
            edges,
            doc.elapsed_ms,
        )?;
        Ok(index)
    }

    /// Writes the version-2 JSON cache: only so the migration can be tested against a file as
    /// the previous release wrote it.
    #[doc(hidden)]
    pub fn save_legacy_json(&self, path: &Path) -> std::io::Result<()> {
        let options = self.complete_options()?;
        let doc = LegacyDoc {
            version: LEGACY_JSON_VERSION,
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
        metabob_process::files::write_atomic(path, &bytes, Some(0o600))
    }

    /// Takes a decoded and range-checked document as this index, once the workspace still
    /// lists and stats as it did.
    #[allow(clippy::too_many_arguments)]
    fn restore(
        &mut self,
        opts: &IndexOptions,
        stored: Scan,
        files: Vec<FileRec>,
        unreadable: Vec<Skipped>,
        components: Vec<Component>,
        edges: Vec<(u32, u32, EdgeKind)>,
        elapsed_ms: u64,
    ) -> Result<(), Discarded> {
        let opts = opts.normalized();
        let now = scan(&self.root, &opts).map_err(Unusable::unreadable)?;
        if let Some(d) = difference(&stored, &now) {
            return Err(d);
        }
        let mut graph = DiGraph::with_capacity(components.len(), edges.len());
        for _ in 0..components.len() {
            graph.add_node(());
        }
        graph.extend_with_edges(edges);
        let by_path = (files.iter().enumerate())
            .map(|(i, f)| (f.path.clone(), i))
            .collect();
        let next = now.files.len();
        self.opts = Some(opts);
        self.scan = now;
        self.next = next;
        self.files = files;
        self.by_path = by_path;
        self.unreadable = unreadable;
        self.components = components;
        self.graph = graph;
        self.edges_for = next;
        self.elapsed_ms = elapsed_ms;
        Ok(())
    }
}

fn check_root_and_options(
    index: &Index,
    root: &str,
    stored: &IndexOptions,
    opts: &IndexOptions,
) -> Result<(), Discarded> {
    if index.root.to_string_lossy() != root {
        return Err(Discarded::RootChanged);
    }
    if *stored != opts.normalized() {
        return Err(Discarded::OptionsChanged);
    }
    Ok(())
}

fn unpack_files(doc: &Packed) -> Result<Vec<FileRec>, Discarded> {
    let mut first = 0u32;
    let mut seen = HashSet::new();
    let mut files = Vec::with_capacity(doc.files.len());
    for f in &doc.files {
        let scanned = (doc.scan.files.get(f.scanned as usize))
            .ok_or_else(|| corrupt("a file out of the listing"))?;
        if f.count == 0 || !seen.insert(f.scanned) {
            return Err(corrupt("a file with no components, or listed twice"));
        }
        files.push(FileRec {
            path: scanned.path.clone(),
            lang: f.lang,
            first,
            count: f.count,
            links: Default::default(),
        });
        first = (first.checked_add(f.count)).ok_or_else(|| corrupt("component count"))?;
    }
    if first as usize != doc.components.len() {
        return Err(corrupt("component count"));
    }
    Ok(files)
}

fn unpack_components(doc: &Packed, files: &[FileRec]) -> Result<Vec<Component>, Discarded> {
    let symbol =
        |i: u32| (doc.symbols.get(i as usize)).ok_or_else(|| corrupt("a name out of range"));
    let mut out = Vec::with_capacity(doc.components.len());
    for f in files {
        let packed = &doc.components[f.first as usize..(f.first + f.count) as usize];
        for c in packed {
            let qualified = symbol(c.qualified)?;
            let end_line = (c.start_line.checked_add(c.lines))
                .ok_or_else(|| corrupt("a component's lines"))?;
            let id = match &c.id {
                IdForm::Derived => derived_id(&f.path, qualified, c.start_line),
                IdForm::Twin(n) => format!("{}#{n}", derived_id(&f.path, qualified, c.start_line)),
                IdForm::Verbatim(id) => id.clone(),
            };
            out.push(Component {
                id,
                name: symbol(c.name)?.clone(),
                qualified_name: qualified.clone(),
                kind: c.kind,
                file: f.path.clone(),
                start_line: c.start_line,
                end_line,
                language: f.lang,
            });
        }
    }
    Ok(out)
}

fn unpack_edges(
    packed: &[(i64, u32, EdgeKind)],
    n: usize,
) -> Result<Vec<(u32, u32, EdgeKind)>, Discarded> {
    let mut source = 0i64;
    packed
        .iter()
        .map(|(step, target, kind)| {
            source = source
                .checked_add(*step)
                .ok_or_else(|| corrupt("an edge out of range"))?;
            if source < 0 || source as usize >= n || *target as usize >= n {
                return Err(corrupt("component or edge out of range"));
            }
            Ok((source as u32, *target, *kind))
        })
        .collect()
}

/// The version-2 JSON document.
#[derive(Serialize, Deserialize)]
struct LegacyDoc<'a> {
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

fn legacy_version(found: u32) -> Discarded {
    Unusable::Version {
        found,
        expected: LEGACY_JSON_VERSION,
    }
    .into()
}

/// The first way the current listing differs from the stored one, if any.
fn difference(old: &Scan, new: &Scan) -> Option<Discarded> {
    let listed: HashMap<&str, _> = new.files.iter().map(|f| (f.path.as_str(), f)).collect();
    for f in &old.files {
        if listed.get(f.path.as_str()) != Some(&f) {
            return Some(Discarded::FileChanged {
                path: f.path.clone(),
            });
        }
    }
    for p in &old.too_large {
        if !new.too_large.contains(p) {
            return Some(Discarded::FileChanged { path: p.clone() });
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
        return Some(Discarded::NewFile { path: p.clone() });
    }
    (old != new).then(|| Discarded::NewFile {
        path: "(listing beyond the file cap)".into(),
    })
}

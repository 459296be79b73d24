//! Local tier: an in-process code graph of one workspace, built with tree-sitter, never the network.
//!
//! Public surface:
//! - `Index::new(root)`, `Index::run(&mut self, &IndexOptions, budget) -> Result<RunReport, IndexError>`
//!   (resumable under a time budget), `Index::reset()` (next run starts over), `Index::stats()`.
//! - Queries: `search(query, limit, file_filter)`, `impact(changed, Direction, max_depth, include_tests)`,
//!   `components_in_file(file)`, `component_for_line(file, line)`.
//! - `Index::save(path)` / `Index::load(path, root, opts) -> Result<Index, Discarded>`: whole-index cache.
//! - Free functions: `tokenize(s)`, `is_test_path(path)`, `scan(root, opts)` (the file listing alone).
//!
//! The cache is all-or-nothing. Incoming CALLS edges of a file are created while *other* files are
//! resolved, and component ids embed start lines, so re-parsing one changed file would leave its
//! callers pointing at ids that no longer exist; any doubt about any file discards the whole cache.
//! `load` re-lists the workspace (stat only, no parsing: ~10 ms for 2000 files) so an added, removed,
//! resized or touched candidate file is detected, not only a change to a stored one.
//!
//! A run on a complete index does nothing: changes made after indexing are seen after `reset()`
//! or through a cache that `load` discards.

mod graph;
mod parse;
mod persist;
mod scan;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use petgraph::graph::DiGraph;
use serde::{Deserialize, Serialize};

pub use graph::{Affected, AffectedFile, Direction, Impact, SearchHit, is_test_path, tokenize};
pub use persist::{CACHE_VERSION, Discarded};
pub use scan::{Scan, ScannedFile, Skipped, scan};

/// Files past this many (in sorted path order) are not indexed.
pub const MAX_FILES: usize = 2000;
/// Files larger than this are skipped unread.
pub const MAX_FILE_BYTES: u64 = 200 * 1024;
/// A call whose name is defined in more places than this (none of them in the caller's file) is
/// too ambiguous to say which is meant, so it gets no edge rather than an arbitrary few.
pub const CALL_FANOUT: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("local_index_unavailable({module}: {reason})")]
    Unavailable { module: String, reason: String },
    #[error("local_index_io({path}: {source})")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexOptions {
    /// File extensions, with or without the leading dot.
    pub include: Vec<String>,
    /// Directory names skipped wherever they occur (dot-directories always are).
    pub exclude: Vec<String>,
}

impl Default for IndexOptions {
    fn default() -> Self {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect();
        IndexOptions {
            include: s(&["ts", "tsx", "js", "jsx", "mjs", "cjs", "py", "rs", "go"]),
            exclude: s(&[
                "node_modules",
                ".git",
                "dist",
                "build",
                ".next",
                ".nuxt",
                "coverage",
                ".turbo",
                ".cache",
                "__pycache__",
                ".venv",
                "venv",
                "vendor",
                "target",
            ]),
        }
    }
}

impl IndexOptions {
    /// Sorted, deduplicated, dots stripped: two spellings of the same options compare equal.
    fn normalized(&self) -> IndexOptions {
        let norm = |v: &[String], strip: bool| {
            let mut v: Vec<String> = v
                .iter()
                .map(|s| {
                    if strip {
                        s.trim_start_matches('.')
                    } else {
                        s.as_str()
                    }
                    .to_string()
                })
                .filter(|s| !s.is_empty())
                .collect();
            v.sort();
            v.dedup();
            v
        };
        IndexOptions {
            include: norm(&self.include, true),
            exclude: norm(&self.exclude, false),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    Python,
    JavaScript,
    TypeScript,
    Tsx,
    Rust,
    Go,
}

impl Lang {
    pub fn from_ext(ext: &str) -> Option<Lang> {
        Some(match ext {
            "py" => Lang::Python,
            "js" | "jsx" | "mjs" | "cjs" => Lang::JavaScript,
            "ts" | "mts" | "cts" => Lang::TypeScript,
            "tsx" => Lang::Tsx,
            "rs" => Lang::Rust,
            "go" => Lang::Go,
            _ => return None,
        })
    }

    pub fn grammar(self) -> tree_sitter::Language {
        match self {
            Lang::Python => tree_sitter_python::LANGUAGE.into(),
            Lang::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Lang::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Lang::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
            Lang::Rust => tree_sitter_rust::LANGUAGE.into(),
            Lang::Go => tree_sitter_go::LANGUAGE.into(),
        }
    }

    /// The crate that ships the grammar, as named in `local_index_unavailable(..)`.
    pub fn module(self) -> &'static str {
        match self {
            Lang::Python => "tree-sitter-python",
            Lang::JavaScript => "tree-sitter-javascript",
            Lang::TypeScript | Lang::Tsx => "tree-sitter-typescript",
            Lang::Rust => "tree-sitter-rust",
            Lang::Go => "tree-sitter-go",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Lang::Python => "python",
            Lang::JavaScript => "javascript",
            Lang::TypeScript => "typescript",
            Lang::Tsx => "tsx",
            Lang::Rust => "rust",
            Lang::Go => "go",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Module,
    Function,
    Method,
    Class,
    Struct,
    Interface,
    Trait,
    Enum,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Module => "module",
            Kind::Function => "function",
            Kind::Method => "method",
            Kind::Class => "class",
            Kind::Struct => "struct",
            Kind::Interface => "interface",
            Kind::Trait => "trait",
            Kind::Enum => "enum",
        }
    }

    fn is_type(self) -> bool {
        matches!(
            self,
            Kind::Class | Kind::Struct | Kind::Interface | Kind::Trait | Kind::Enum
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Component {
    /// `file::qualified@start_line`; a module is `file::<module>@1`.
    pub id: String,
    pub name: String,
    pub qualified_name: String,
    pub kind: Kind,
    pub file: String,
    pub start_line: u32,
    pub end_line: u32,
    pub language: Lang,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EdgeKind {
    Calls,
    Imports,
    Contains,
}

/// One parsed file: its components are `components[first..first + count]`, the module first.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct FileRec {
    path: String,
    lang: Lang,
    first: u32,
    count: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct IndexStats {
    pub root: String,
    pub files_indexed: usize,
    pub components: usize,
    pub calls_edges: usize,
    pub imports_edges: usize,
    pub languages: BTreeMap<String, usize>,
    pub complete: bool,
    pub pending_files: usize,
    pub skipped_too_large: usize,
    pub skipped_unreadable: usize,
    pub unreadable: Vec<Skipped>,
    pub file_cap_hit: bool,
    pub elapsed_ms: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub complete: bool,
    pub files_parsed: usize,
    pub parsed_this_run: usize,
    pub files_pending: usize,
    pub elapsed_ms: u64,
    /// Set when partial: what the queries cover and how to go on.
    pub note: Option<String>,
}

pub struct Index {
    root: PathBuf,
    opts: Option<IndexOptions>,
    scan: Scan,
    /// Position in `scan.files` of the next file to parse.
    next: usize,
    files: Vec<FileRec>,
    unreadable: Vec<Skipped>,
    components: Vec<Component>,
    /// Per component, the names it calls; per file, its raw import specifiers. Kept to rebuild the
    /// edges as more files arrive; not saved, since only a complete index is.
    calls: Vec<Vec<Box<str>>>,
    parents: Vec<Option<u32>>,
    imports: Vec<Vec<String>>,
    /// Node `i` is `components[i]`.
    graph: DiGraph<(), EdgeKind>,
    by_path: HashMap<String, usize>,
    /// `next` when the edges were last built.
    edges_for: usize,
    elapsed_ms: u64,
    parsers: parse::Parsers,
}

impl Index {
    pub fn new(root: &Path) -> Index {
        Index {
            root: root.canonicalize().unwrap_or_else(|_| root.to_path_buf()),
            opts: None,
            scan: Scan::default(),
            next: 0,
            files: Vec::new(),
            unreadable: Vec::new(),
            components: Vec::new(),
            calls: Vec::new(),
            parents: Vec::new(),
            imports: Vec::new(),
            graph: DiGraph::new(),
            by_path: HashMap::new(),
            edges_for: 0,
            elapsed_ms: 0,
            parsers: parse::Parsers::default(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Forgets everything; the next `run` scans and parses from scratch.
    pub fn reset(&mut self) {
        let root = std::mem::take(&mut self.root);
        let parsers = std::mem::take(&mut self.parsers);
        *self = Index {
            parsers,
            ..Index::new(&root)
        };
    }

    pub fn is_complete(&self) -> bool {
        self.opts.is_some() && self.next >= self.scan.files.len()
    }

    /// Parses pending files until none is left or `budget` is spent (at least one file per call,
    /// so repeated calls always progress), then (re)builds the edges over what is parsed.
    pub fn run(&mut self, opts: &IndexOptions, budget: Duration) -> Result<RunReport, IndexError> {
        let start = Instant::now();
        let opts = opts.normalized();
        if self.opts.as_ref() != Some(&opts) {
            self.reset();
            self.scan = scan(&self.root, &opts).map_err(|source| IndexError::Io {
                path: self.root.display().to_string(),
                source,
            })?;
            self.unreadable = self.scan.unreadable.clone();
            self.opts = Some(opts);
        }
        let mut parsed_now = 0;
        let mut failure = None;
        while self.next < self.scan.files.len() {
            if let Err(e) = self.parse_next() {
                failure = Some(e);
                break;
            }
            parsed_now += 1;
            if start.elapsed() >= budget {
                break;
            }
        }
        if self.edges_for != self.next {
            self.build_edges();
            self.edges_for = self.next;
        }
        self.elapsed_ms = start.elapsed().as_millis() as u64;
        if let Some(e) = failure {
            return Err(e);
        }
        let pending = self.scan.files.len() - self.next;
        Ok(RunReport {
            complete: pending == 0,
            files_parsed: self.files.len(),
            parsed_this_run: parsed_now,
            files_pending: pending,
            elapsed_ms: self.elapsed_ms,
            note: (pending > 0).then(|| {
                format!(
                    "partial index: queries answer over the {} files parsed so far, \
                     {pending} pending; run again to resume",
                    self.files.len()
                )
            }),
        })
    }

    /// Parses `scan.files[next]`; a file that cannot be read or parsed is recorded as skipped.
    /// Only a grammar that cannot load is an error, and then the file stays pending.
    fn parse_next(&mut self) -> Result<(), IndexError> {
        let entry = &self.scan.files[self.next];
        let lang = Lang::from_ext(ext_of(&entry.path)).expect("scan only lists known extensions");
        let parser = self.parsers.get(lang)?;
        let skip = |reason: String| Skipped {
            path: entry.path.clone(),
            reason,
        };
        let parsed = match std::fs::read(self.root.join(&entry.path)) {
            Err(e) => Err(skip(e.to_string())),
            Ok(bytes) => match String::from_utf8(bytes) {
                Err(_) => Err(skip("invalid utf-8".into())),
                Ok(src) => parser
                    .parse(&entry.path, lang, &src)
                    .ok_or_else(|| skip("parse failed".into())),
            },
        };
        self.next += 1;
        match parsed {
            Err(s) => self.unreadable.push(s),
            Ok(p) => {
                let first = self.components.len() as u32;
                let path = p.components[0].file.clone();
                self.by_path.insert(path.clone(), self.files.len());
                self.files.push(FileRec {
                    path,
                    lang,
                    first,
                    count: p.components.len() as u32,
                });
                for c in p.components {
                    self.graph.add_node(());
                    self.components.push(c);
                }
                self.calls.extend(p.calls);
                self.parents
                    .extend(p.parents.into_iter().map(|o| o.map(|i| i + first)));
                self.imports.push(p.imports);
            }
        }
        Ok(())
    }

    pub fn stats(&self) -> IndexStats {
        let count = |k| self.graph.edge_weights().filter(|w| **w == k).count();
        let mut languages = BTreeMap::new();
        for f in &self.files {
            *languages.entry(f.lang.name().to_string()).or_insert(0) += 1;
        }
        IndexStats {
            root: self.root.display().to_string(),
            files_indexed: self.files.len(),
            components: self.components.len(),
            calls_edges: count(EdgeKind::Calls),
            imports_edges: count(EdgeKind::Imports),
            languages,
            complete: self.is_complete(),
            pending_files: self.scan.files.len() - self.next,
            skipped_too_large: self.scan.too_large.len(),
            skipped_unreadable: self.unreadable.len(),
            unreadable: self.unreadable.clone(),
            file_cap_hit: self.scan.cap_hit,
            elapsed_ms: self.elapsed_ms,
        }
    }

    /// Workspace-relative with `/`, whether given relative or absolute under the root.
    fn rel_path(&self, file: &str) -> String {
        let p = Path::new(file);
        let rel = if p.is_absolute() {
            match p.strip_prefix(&self.root) {
                Ok(r) => r.to_path_buf(),
                Err(_) => match p
                    .canonicalize()
                    .ok()
                    .and_then(|c| c.strip_prefix(&self.root).ok().map(Path::to_path_buf))
                {
                    Some(r) => r,
                    None => return file.to_string(),
                },
            }
        } else {
            p.to_path_buf()
        };
        let parts: Vec<_> = rel
            .components()
            .filter_map(|c| match c {
                std::path::Component::Normal(s) => Some(s.to_string_lossy()),
                _ => None,
            })
            .collect();
        parts.join("/")
    }

    fn file_range(&self, file: &str) -> Option<std::ops::Range<usize>> {
        let f = &self.files[*self.by_path.get(&self.rel_path(file))?];
        Some(f.first as usize..(f.first + f.count) as usize)
    }

    /// The file's components in source order, its module first; empty when not indexed.
    pub fn components_in_file(&self, file: &str) -> Vec<&Component> {
        self.file_range(file)
            .map(|r| self.components[r].iter().collect())
            .unwrap_or_default()
    }

    /// The innermost component whose lines contain `line`, else the file's module.
    pub fn component_for_line(&self, file: &str, line: u32) -> Option<&Component> {
        let comps = &self.components[self.file_range(file)?];
        comps[1..]
            .iter()
            .filter(|c| c.start_line <= line && line <= c.end_line)
            .min_by_key(|c| (c.end_line - c.start_line, std::cmp::Reverse(c.start_line)))
            .or(comps.first())
    }
}

fn ext_of(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.rsplit_once('.').map(|(_, e)| e).unwrap_or("")
}

//! metabob-index: the local tier, an in-process code graph of one workspace, built with
//! tree-sitter.
//!
//! Must not depend on: the network stack (metabob-net, hyper, reqwest, rustls), a ledger store
//! or MCP (tests/layers.rs holds this); only metabob-wire and metabob-process of ours.
//!
//! Public surface:
//! - `Index::new(root)`; `run(&mut self, &IndexOptions, budget) -> Result<RunReport, IndexError>`
//!   parses until done or out of budget and resumes on the next call; `reset()`; `stats()`.
//! - Queries: `search(query, limit, file_filter)`, `impact(changed, Direction, max_depth,
//!   include_tests)`, `components_in_file(file)`, `component_for_line(file, line)`.
//! - Cache: `save(path)`, `Index::load(path, root, opts) -> Result<Index, Discarded>`.
//! - Free functions: `tokenize(s)`, `is_test_path(path)`, `scan(root, opts)` (the listing alone).
//!
//! Rules (details at each function):
//! - Calls resolve by name over the whole graph: to the caller's own file's definitions of the
//!   name if any, else to all of them, and to none when they are more than `CALL_FANOUT` (8).
//! - Imports resolve to indexed files: JS/TS relative specifiers with extension and `index`
//!   fallbacks; Python dots from the package, absolute names from the importer's directory up to
//!   the root; Rust `mod`/`use` paths under the nearest `src/`; Go import paths by their
//!   trailing segments against package directories. Anything else (packages) gets no edge.
//! - Partial runs: the edges are rebuilt after every run, so queries answer over what is parsed.
//!
//! The cache is all-or-nothing. A file's incoming CALLS edges are made while *other* files are
//! resolved, and component ids embed start lines, so re-parsing one changed file would leave its
//! callers pointing at ids that no longer exist: any doubt about any file discards the whole cache.
//! `load` re-lists the workspace (stat only, no parsing: ~30 ms for the 2000 files of the Python
//! stdlib, against ~60 ms to read the JSON), so an added, removed, resized or touched candidate
//! file is caught, not only a change to a stored one. A complete index never re-scans by itself:
//! `run` on it does nothing, and later edits are seen after `reset()` or a discarded cache.

mod graph;
mod parse;
mod persist;
mod scan;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use petgraph::graph::DiGraph;
use serde::{Deserialize, Serialize};

pub use graph::{Affected, AffectedFile, Direction, Impact, SearchHit, is_test_path, tokenize};
pub use persist::{CACHE_VERSION, Discarded, LEGACY_JSON_VERSION};
pub use scan::{Scan, ScannedFile, Skipped, scan};

/// Files past this many are not indexed, in a stable order: depth first, each directory's
/// entries sorted by name.
pub const MAX_FILES: usize = 2000;
/// Files larger than this are skipped unread.
pub const MAX_FILE_BYTES: u64 = 200 * 1024;
/// A call whose name has more definitions than this (none in the caller's own file) gets no
/// edge: that is too ambiguous to tell which is meant, and any few would be an arbitrary pick.
pub const CALL_FANOUT: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("local_index_unavailable({module}: {source})")]
    Unavailable {
        module: String,
        #[source]
        source: tree_sitter::LanguageError,
    },
    #[error("local_index_io({path}: {source})")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// No advice: the line names the grammar or the file and what failed.
impl metabob_wire::report::Hint for IndexError {}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexOptions {
    /// File extensions, with or without the leading dot.
    pub include: Vec<String>,
    /// Directory names skipped wherever they occur (dot-directories always are).
    pub exclude: Vec<String>,
}

impl Default for IndexOptions {
    fn default() -> Self {
        let words = |s: &str| s.split_whitespace().map(String::from).collect();
        IndexOptions {
            include: words("ts tsx js jsx mjs cjs py rs go"),
            exclude: words(
                "node_modules .git dist build .next .nuxt coverage .turbo .cache __pycache__ \
                 .venv venv vendor target",
            ),
        }
    }
}

impl IndexOptions {
    /// Sorted, deduplicated, dots stripped: two spellings of the same options compare equal.
    fn normalized(&self) -> IndexOptions {
        let norm = |v: &[String], dot: &[char]| {
            let v = v.iter().map(|s| s.trim_start_matches(dot).to_string());
            let mut v: Vec<String> = v.filter(|s| !s.is_empty()).collect();
            v.sort();
            v.dedup();
            v
        };
        IndexOptions {
            include: norm(&self.include, &['.']),
            exclude: norm(&self.exclude, &[]),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
        !matches!(self, Kind::Module | Kind::Function | Kind::Method)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Component {
    /// `file::qualified_name@start_line`; a module is `file::<module>@1`.
    pub id: String,
    pub name: String,
    pub qualified_name: String,
    pub kind: Kind,
    pub file: String,
    pub start_line: u32,
    pub end_line: u32,
    pub language: Lang,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
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
    /// Kept to rebuild the edges as more files arrive; not saved, since only a complete index is.
    #[serde(skip)]
    links: parse::Links,
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
    /// Set when partial: what the answers cover, and how to go on.
    pub note: Option<String>,
}

#[derive(Default)]
pub struct Index {
    root: PathBuf,
    /// `None` until the first run (or after `reset`).
    opts: Option<IndexOptions>,
    scan: Scan,
    /// Position in `scan.files` of the next file to parse.
    next: usize,
    files: Vec<FileRec>,
    by_path: HashMap<String, usize>,
    unreadable: Vec<Skipped>,
    components: Vec<Component>,
    /// Node `i` is `components[i]`.
    graph: DiGraph<(), EdgeKind>,
    /// `next` when the edges were last built.
    edges_for: usize,
    elapsed_ms: u64,
    parsers: parse::Parsers,
    buf: Vec<u8>,
}

impl Index {
    pub fn new(root: &Path) -> Index {
        let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        Index {
            root,
            ..Index::default()
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Forgets everything; the next `run` scans and parses from scratch.
    pub fn reset(&mut self) {
        let (root, parsers) = (
            std::mem::take(&mut self.root),
            std::mem::take(&mut self.parsers),
        );
        *self = Index {
            root,
            parsers,
            ..Index::default()
        };
    }

    pub fn is_complete(&self) -> bool {
        self.opts.is_some() && self.next == self.scan.files.len()
    }

    /// Parses pending files until none is left or `budget` is spent (at least one file per call,
    /// so repeated calls always progress), then rebuilds the edges over what is parsed. Other
    /// options than the last run's start over.
    pub fn run(&mut self, opts: &IndexOptions, budget: Duration) -> Result<RunReport, IndexError> {
        self.run_with(opts, budget, &AtomicBool::new(false), &mut |_, _| {})
    }

    /// [`Index::run`] that also stops, resumable like an exhausted budget, once `stop` is set
    /// (a cancelled call), and reports `(parsed, total)` files as it goes.
    pub fn run_with(
        &mut self,
        opts: &IndexOptions,
        budget: Duration,
        stop: &AtomicBool,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<RunReport, IndexError> {
        let start = Instant::now();
        let opts = opts.normalized();
        if self.opts.as_ref() != Some(&opts) {
            self.reset();
            self.scan = scan(&self.root, &opts).map_err(|source| {
                let path = self.root.display().to_string();
                IndexError::Io { path, source }
            })?;
            self.unreadable = self.scan.unreadable.clone();
            self.opts = Some(opts);
        }
        let (before, mut failure) = (self.next, None);
        while self.next < self.scan.files.len() {
            if let Err(e) = self.parse_next() {
                failure = Some(e);
                break;
            }
            if self.next % 100 == 0 {
                progress(self.next, self.scan.files.len());
            }
            if start.elapsed() >= budget || stop.load(Ordering::Relaxed) {
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
        let (parsed, pending) = (self.files.len(), self.scan.files.len() - self.next);
        Ok(RunReport {
            complete: pending == 0,
            files_parsed: parsed,
            parsed_this_run: self.next - before,
            files_pending: pending,
            elapsed_ms: self.elapsed_ms,
            note: (pending > 0).then(|| {
                format!(
                    "partial index: answers cover the {parsed} files parsed so far, {pending} \
                     pending; run again to resume"
                )
            }),
        })
    }

    /// Parses `scan.files[next]`; a file that cannot be read or parsed is recorded as skipped.
    /// Only a grammar that cannot load is an error, and then the file stays pending.
    fn parse_next(&mut self) -> Result<(), IndexError> {
        let path = self.scan.files[self.next].path.clone();
        let lang = Lang::from_ext(ext_of(&path)).expect("scan lists only known extensions");
        let parser = self.parsers.get(lang)?;
        self.next += 1;
        // One buffer for every file: a fresh one each time costs more in malloc than the copy.
        self.buf.clear();
        // The scan sized the file, but it may have grown since: the cap holds at the read.
        let read = std::fs::File::open(self.root.join(&path)).and_then(|f| {
            std::io::Read::read_to_end(
                &mut std::io::Read::take(f, MAX_FILE_BYTES + 1),
                &mut self.buf,
            )
        });
        let parsed = match read.map(|_| std::str::from_utf8(&self.buf)) {
            Ok(_) if self.buf.len() as u64 > MAX_FILE_BYTES => Err(format!(
                "grew past {} KB since the scan",
                MAX_FILE_BYTES / 1024
            )),
            Err(e) => Err(e.to_string()),
            Ok(Err(_)) => Err("invalid utf-8".to_string()),
            Ok(Ok(src)) => parser
                .parse(&path, lang, src)
                .ok_or("parse failed".to_string()),
        };
        match parsed {
            Err(reason) => self.unreadable.push(Skipped { path, reason }),
            Ok((components, links)) => {
                let (first, count) = (self.components.len() as u32, components.len() as u32);
                self.by_path.insert(path.clone(), self.files.len());
                self.files.push(FileRec {
                    path,
                    lang,
                    first,
                    count,
                    links,
                });
                for c in components {
                    self.graph.add_node(());
                    self.components.push(c);
                }
            }
        }
        Ok(())
    }

    pub fn stats(&self) -> IndexStats {
        let count = |k| self.graph.edge_weights().filter(|w| **w == k).count();
        let mut languages = BTreeMap::new();
        for f in &self.files {
            *languages
                .entry(metabob_wire::text::wire_name(&f.lang))
                .or_insert(0) += 1;
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
        let rel = match p.strip_prefix(&self.root) {
            _ if p.is_relative() => p.to_path_buf(),
            Ok(r) => r.to_path_buf(),
            Err(_) => match p
                .canonicalize()
                .map(|c| c.strip_prefix(&self.root).map(Into::into))
            {
                Ok(Ok(r)) => r,
                _ => return file.to_string(),
            },
        };
        let rel = rel.to_string_lossy().replace('\\', "/");
        graph::normalize(&rel).unwrap_or(rel)
    }

    fn file_components(&self, file: &str) -> Option<&[Component]> {
        let f = &self.files[*self.by_path.get(&self.rel_path(file))?];
        Some(&self.components[f.first as usize..(f.first + f.count) as usize])
    }

    /// The file's components in source order, its module first; empty when not indexed.
    pub fn components_in_file(&self, file: &str) -> Vec<&Component> {
        self.file_components(file)
            .unwrap_or_default()
            .iter()
            .collect()
    }

    /// The innermost component whose lines contain `line`, else the file's module.
    pub fn component_for_line(&self, file: &str, line: u32) -> Option<&Component> {
        let comps = self.file_components(file)?;
        let inside = comps[1..]
            .iter()
            .filter(|c| c.start_line <= line && line <= c.end_line);
        // Among nested ones the last to start is the innermost.
        inside.max_by_key(|c| c.start_line).or(comps.first())
    }
}

fn ext_of(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.rsplit_once('.').map_or("", |(_, e)| e)
}

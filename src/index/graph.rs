//! Edges (calls by name, imports by path), and the queries over them: search and impact.

use std::collections::{HashMap, VecDeque};

use petgraph::Direction as Dir;
use petgraph::graph::NodeIndex;
use petgraph::visit::EdgeRef;
use serde::{Deserialize, Serialize};

use super::{CALL_FANOUT, Component, EdgeKind, FileRec, Index, Kind, Lang};

impl Index {
    /// Rebuilds every edge from the parsed files. Calls resolve by name over the whole graph:
    /// to the caller's own file's definitions of that name when there are any, else to all of
    /// them, and to none when that is more than `CALL_FANOUT` (too ambiguous to be useful).
    pub(super) fn build_edges(&mut self) {
        let mut edges = Vec::new();
        for f in &self.files {
            for i in f.first + 1..f.first + f.count {
                edges.push((f.first, i, EdgeKind::Contains));
                if let Some(p) = self.parents[i as usize] {
                    edges.push((p, i, EdgeKind::Contains));
                }
            }
        }

        let mut go_dirs: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, f) in self.files.iter().enumerate() {
            if f.lang == Lang::Go && !f.path.ends_with("_test.go") {
                go_dirs.entry(dir_of(&f.path)).or_default().push(i);
            }
        }
        for (i, f) in self.files.iter().enumerate() {
            let mut targets: Vec<usize> = Vec::new();
            for spec in &self.imports[i] {
                match f.lang {
                    Lang::Python => targets.extend(self.resolve_python(&f.path, spec)),
                    Lang::Rust => targets.extend(self.resolve_rust(&f.path, spec)),
                    Lang::Go => {
                        let dir = go_dirs
                            .keys()
                            .filter(|d| spec == **d || spec.ends_with(&format!("/{d}")))
                            .max_by_key(|d| d.len());
                        targets.extend(dir.map(|d| go_dirs[d].clone()).unwrap_or_default());
                    }
                    _ => targets.extend(self.resolve_js(&f.path, spec)),
                }
            }
            targets.sort_unstable();
            targets.dedup();
            for t in targets.into_iter().filter(|t| *t != i) {
                edges.push((f.first, self.files[t].first, EdgeKind::Imports));
            }
        }

        let mut by_name: HashMap<&str, Vec<u32>> = HashMap::new();
        for (i, c) in self.components.iter().enumerate() {
            if c.kind != Kind::Module {
                by_name.entry(c.name.as_str()).or_default().push(i as u32);
            }
        }
        for (i, names) in self.calls.iter().enumerate() {
            let file = &self.components[i].file;
            for name in names {
                let Some(all) = by_name.get(&**name) else {
                    continue;
                };
                let local: Vec<u32> = all
                    .iter()
                    .copied()
                    .filter(|t| self.components[*t as usize].file == *file)
                    .collect();
                let targets = if local.is_empty() { all } else { &local };
                if targets.len() <= CALL_FANOUT {
                    let targets = targets.iter().filter(|t| **t as usize != i);
                    edges.extend(targets.map(|t| (i as u32, *t, EdgeKind::Calls)));
                }
            }
        }
        self.graph.clear_edges();
        self.graph.extend_with_edges(edges);
    }

    fn file_index(&self, path: &str) -> Option<usize> {
        self.by_path.get(path).copied()
    }

    /// `./x`, `../x` with the usual extension and `index` fallbacks; `./x.js` may name `x.ts`.
    fn resolve_js(&self, from: &str, spec: &str) -> Option<usize> {
        if !(spec.starts_with("./") || spec.starts_with("../") || spec == "." || spec == "..") {
            return None;
        }
        let base = normalize(&format!("{}/{spec}", dir_of(from)))?;
        const EXTS: [&str; 8] = ["ts", "tsx", "js", "jsx", "mjs", "cjs", "mts", "cts"];
        let stem = ["js", "jsx", "mjs", "cjs"]
            .iter()
            .find_map(|e| base.strip_suffix(&format!(".{e}")))
            .unwrap_or(&base);
        std::iter::once(base.clone())
            .chain(EXTS.iter().map(|e| format!("{base}.{e}")))
            .chain(EXTS.iter().map(|e| format!("{stem}.{e}")))
            .chain(EXTS.iter().map(|e| format!("{base}/index.{e}")))
            .find_map(|p| self.file_index(p.trim_start_matches('/')))
    }

    /// Relative dots from the importing package; absolute names from the importer's directory
    /// upward to the root (nearest first), which covers `src/` layouts and script directories.
    fn resolve_python(&self, from: &str, spec: &str) -> Option<usize> {
        let dots = spec.len() - spec.trim_start_matches('.').len();
        let rest = spec[dots..].replace('.', "/");
        let try_at = |dir: &str| {
            let base = join_path(dir, &rest);
            let init = join_path(&base, "__init__.py");
            let module = (!rest.is_empty()).then(|| format!("{base}.py"));
            module
                .and_then(|m| self.file_index(&m))
                .or_else(|| self.file_index(&init))
        };
        let mut dir = dir_of(from);
        if dots > 0 {
            for _ in 1..dots {
                dir = parent_dir(dir)?;
            }
            return try_at(dir);
        }
        loop {
            if let Some(i) = try_at(dir) {
                return Some(i);
            }
            dir = parent_dir(dir)?;
        }
    }

    /// Best effort: the crate root is the nearest `src/` above the file; `crate::`, `self::`,
    /// `super::` and bare paths map to `a/b.rs` or `a/b/mod.rs`, longest existing prefix wins.
    fn resolve_rust(&self, from: &str, spec: &str) -> Option<usize> {
        let spec: String = spec.chars().filter(|c| !c.is_whitespace()).collect();
        let segs: Vec<&str> = spec.split("::").filter(|s| !s.is_empty()).collect();
        let (root, module) = match from.rfind("src/") {
            Some(i) if i == 0 || from[..i].ends_with('/') => (&from[..i + 3], &from[i + 4..]),
            _ => (dir_of(from), from.rsplit('/').next().unwrap_or(from)),
        };
        let mut here: Vec<&str> = module.trim_end_matches(".rs").split('/').collect();
        if matches!(here.last(), Some(&("lib" | "main" | "mod"))) {
            here.pop();
        }
        let mut candidates: Vec<Vec<&str>> = Vec::new();
        match segs.first() {
            Some(&"crate") => candidates.push(segs[1..].to_vec()),
            Some(&"self") => candidates.push([&here[..], &segs[1..]].concat()),
            Some(&"super") => {
                let ups = segs.iter().take_while(|s| **s == "super").count();
                let keep = here.len().checked_sub(ups)?;
                candidates.push([&here[..keep], &segs[ups..]].concat());
            }
            Some(_) => {
                candidates.push([&here[..], &segs[..]].concat());
                candidates.push(segs.clone());
            }
            None => {}
        }
        candidates.iter().find_map(|segs| {
            (1..=segs.len()).rev().find_map(|k| {
                let base = join_path(root, &segs[..k].join("/"));
                self.file_index(&format!("{base}.rs"))
                    .or_else(|| self.file_index(&format!("{base}/mod.rs")))
            })
        })
    }
}

fn dir_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

fn parent_dir(dir: &str) -> Option<&str> {
    (!dir.is_empty()).then(|| dir_of(dir))
}

fn join_path(dir: &str, rest: &str) -> String {
    match (dir.is_empty(), rest.is_empty()) {
        (true, _) => rest.to_string(),
        (_, true) => dir.to_string(),
        _ => format!("{dir}/{rest}"),
    }
}

/// Resolves `.` and `..`; `None` when it climbs above the root.
fn normalize(path: &str) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            p => out.push(p),
        }
    }
    Some(out.join("/"))
}

/// Lowercase words of an identifier or path: splits on anything not alphanumeric and at
/// camelCase humps (`HTTPServer` gives `http`, `server`).
pub fn tokenize(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in s
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let chars: Vec<char> = word.chars().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let (prev, c) = (chars[i - 1], chars[i]);
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            if c.is_uppercase() && (!prev.is_uppercase() || next_lower) {
                out.push(chars[start..i].iter().collect::<String>().to_lowercase());
                start = i;
            }
        }
        out.push(chars[start..].iter().collect::<String>().to_lowercase());
    }
    out
}

pub fn is_test_path(path: &str) -> bool {
    let path = path.replace('\\', "/");
    let (dirs, name) = path.rsplit_once('/').unwrap_or(("", &path));
    dirs.split('/')
        .any(|d| matches!(d, "tests" | "test" | "__tests__"))
        || (name.starts_with("test_") && name.ends_with(".py"))
        || name.ends_with("_test.py")
        || name.ends_with("_test.go")
        || [".test.ts", ".test.js", ".test.tsx", ".test.jsx"]
            .iter()
            .any(|s| name.ends_with(s))
        || name.contains(".spec.")
}

#[derive(Debug, Clone, Serialize)]
pub struct SearchHit {
    #[serde(flatten)]
    pub component: Component,
    /// Query tokens found in the name (the first ranking key).
    pub name_hits: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// What the changed code depends on: callees, imported files.
    Forward,
    /// What depends on the changed code: callers, importing files.
    Backward,
    Both,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Affected {
    pub id: String,
    pub name: String,
    pub qualified_name: String,
    pub kind: Kind,
    pub start_line: u32,
    pub end_line: u32,
    pub depth: usize,
    /// Edge kinds from a changed component to this one, in order.
    pub via: Vec<EdgeKind>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AffectedFile {
    pub file: String,
    pub is_test: bool,
    pub components: Vec<Affected>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Impact {
    /// The changed files found in the index, workspace-relative.
    pub changed_files: Vec<String>,
    pub not_indexed: Vec<String>,
    /// Components of the changed files, the starting points (not listed as affected).
    pub seeds: usize,
    pub affected_total: usize,
    /// Ordered by smallest depth, then path; components within by depth, then line.
    pub files: Vec<AffectedFile>,
}

impl Index {
    /// Every query token must occur inside some token of the name, path or kind.
    pub fn search(&self, query: &str, limit: usize, file_filter: &[String]) -> Vec<SearchHit> {
        let q = tokenize(query);
        if q.is_empty() {
            return Vec::new();
        }
        let hit = |toks: &[String], t: &String| toks.iter().any(|x| x.contains(t.as_str()));
        let mut hits: Vec<SearchHit> = Vec::new();
        for f in &self.files {
            if !file_filter.is_empty() && !file_filter.iter().any(|s| f.path.contains(s.as_str())) {
                continue;
            }
            let path_toks = tokenize(&f.path);
            for c in &self.components[f.first as usize..(f.first + f.count) as usize] {
                let mut name_toks = tokenize(&c.name);
                name_toks.extend(tokenize(&c.qualified_name));
                let kind = [c.kind.as_str().to_string()];
                let matched = q
                    .iter()
                    .all(|t| hit(&name_toks, t) || hit(&path_toks, t) || hit(&kind, t));
                if matched {
                    let name_hits = q.iter().filter(|t| hit(&name_toks, t)).count();
                    hits.push(SearchHit {
                        component: c.clone(),
                        name_hits,
                    });
                }
            }
        }
        hits.sort_by(|a, b| {
            let key = |h: &SearchHit| {
                let c = &h.component;
                (
                    std::cmp::Reverse(h.name_hits),
                    c.name.len(),
                    c.file.clone(),
                    c.start_line,
                )
            };
            key(a).cmp(&key(b))
        });
        hits.truncate(limit);
        hits
    }

    /// Breadth-first over CALLS and IMPORTS from every component of the changed files. Test files
    /// are neither listed nor walked through unless `include_tests`.
    pub fn impact(
        &self,
        changed_files: &[String],
        direction: Direction,
        max_depth: usize,
        include_tests: bool,
    ) -> Impact {
        let mut changed = Vec::new();
        let mut not_indexed = Vec::new();
        // Node -> (depth, the node and edge it was reached by).
        let mut seen: HashMap<u32, (usize, Option<(u32, EdgeKind)>)> = HashMap::new();
        let mut queue = VecDeque::new();
        for file in changed_files {
            let rel = self.rel_path(file);
            match self.file_index(&rel).map(|i| &self.files[i]) {
                Some(FileRec { first, count, .. }) => {
                    for n in *first..first + count {
                        if seen.insert(n, (0, None)).is_none() {
                            queue.push_back(n);
                        }
                    }
                    changed.push(rel);
                }
                None => not_indexed.push(rel),
            }
        }
        let seeds = seen.len();
        let dirs: &[Dir] = match direction {
            Direction::Forward => &[Dir::Outgoing],
            Direction::Backward => &[Dir::Incoming],
            Direction::Both => &[Dir::Outgoing, Dir::Incoming],
        };
        while let Some(n) = queue.pop_front() {
            let depth = seen[&n].0;
            if depth >= max_depth {
                continue;
            }
            let mut next: Vec<(u32, EdgeKind)> = Vec::new();
            for d in dirs {
                for e in self.graph.edges_directed(NodeIndex::new(n as usize), *d) {
                    let other = if *d == Dir::Outgoing {
                        e.target()
                    } else {
                        e.source()
                    };
                    if *e.weight() != EdgeKind::Contains {
                        next.push((other.index() as u32, *e.weight()));
                    }
                }
            }
            // Sorted, so which path is reported does not hang on edge insertion order.
            next.sort_by_key(|(m, k)| (*m, *k as u8));
            for (m, kind) in next {
                if seen.contains_key(&m)
                    || (!include_tests && is_test_path(&self.components[m as usize].file))
                {
                    continue;
                }
                seen.insert(m, (depth + 1, Some((n, kind))));
                queue.push_back(m);
            }
        }

        let mut affected: Vec<(&Component, Affected)> = Vec::new();
        for (&n, &(depth, _)) in seen.iter().filter(|(_, (d, _))| *d > 0) {
            let mut via = Vec::new();
            let mut at = n;
            while let Some((_, Some((prev, kind)))) = seen.get(&at) {
                via.push(*kind);
                at = *prev;
            }
            via.reverse();
            let c = &self.components[n as usize];
            affected.push((
                c,
                Affected {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    qualified_name: c.qualified_name.clone(),
                    kind: c.kind,
                    start_line: c.start_line,
                    end_line: c.end_line,
                    depth,
                    via,
                },
            ));
        }
        affected.sort_by(|(ca, a), (cb, b)| {
            (a.depth, &ca.file, a.start_line, &a.id).cmp(&(b.depth, &cb.file, b.start_line, &b.id))
        });
        let affected_total = affected.len();
        let mut files: Vec<AffectedFile> = Vec::new();
        let mut slot: HashMap<&str, usize> = HashMap::new();
        for (c, a) in affected {
            let i = *slot.entry(c.file.as_str()).or_insert_with(|| {
                files.push(AffectedFile {
                    file: c.file.clone(),
                    is_test: is_test_path(&c.file),
                    components: Vec::new(),
                });
                files.len() - 1
            });
            files[i].components.push(a);
        }
        Impact {
            changed_files: changed,
            not_indexed,
            seeds,
            affected_total,
            files,
        }
    }
}

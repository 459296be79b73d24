//! Edges (calls by name, imports by path), and the queries over them: search and impact.

use std::collections::{HashMap, VecDeque};

use petgraph::Direction as Dir;
use petgraph::graph::NodeIndex;
use petgraph::visit::EdgeRef;
use serde::{Deserialize, Serialize};

use super::{CALL_FANOUT, Component, EdgeKind, Index, Kind, Lang};

impl Index {
    /// Rebuilds every edge from the parsed files. A call resolves by name over the whole graph:
    /// to the caller's own file's definitions of that name when there are any, else to all of
    /// them, and to none when they are more than `CALL_FANOUT`.
    pub(super) fn build_edges(&mut self) {
        let mut edges = Vec::new();
        let mut by_name: HashMap<&str, Vec<u32>> = HashMap::new();
        let mut go_dirs: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, f) in self.files.iter().enumerate() {
            for j in f.first + 1..f.first + f.count {
                edges.push((f.first, j, EdgeKind::Contains));
                by_name
                    .entry(&self.components[j as usize].name)
                    .or_default()
                    .push(j);
            }
            for (j, p) in (f.first..).zip(&f.links.parents) {
                edges.extend(p.map(|p| (f.first + p, j, EdgeKind::Contains)));
            }
            if f.lang == Lang::Go && !f.path.ends_with("_test.go") {
                go_dirs.entry(dir_of(&f.path)).or_default().push(i);
            }
        }
        for (i, f) in self.files.iter().enumerate() {
            let mut targets: Vec<usize> = (f.links.imports.iter())
                .flat_map(|spec| match f.lang {
                    Lang::Python => self.resolve_python(&f.path, spec).into_iter().collect(),
                    Lang::Rust => self.resolve_rust(&f.path, spec).into_iter().collect(),
                    Lang::Go => go_package(&go_dirs, spec),
                    _ => self.resolve_js(&f.path, spec).into_iter().collect(),
                })
                .filter(|t| *t != i)
                .collect();
            targets.sort_unstable();
            targets.dedup();
            edges.extend(
                targets
                    .iter()
                    .map(|t| (f.first, self.files[*t].first, EdgeKind::Imports)),
            );

            // A name's definitions are in index order, so this file's are one run of them.
            let (lo, hi) = (f.first, f.first + f.count);
            for &(caller, start, end) in &f.links.calls {
                let (caller, name) = (
                    f.first + caller,
                    &f.links.names[start as usize..end as usize],
                );
                let Some(all) = by_name.get(name) else {
                    continue;
                };
                let local = all.partition_point(|t| *t < lo)..all.partition_point(|t| *t < hi);
                let targets = if local.is_empty() {
                    &all[..]
                } else {
                    &all[local]
                };
                if targets.len() <= CALL_FANOUT {
                    let targets = targets.iter().filter(|t| **t != caller);
                    edges.extend(targets.map(|t| (caller, *t, EdgeKind::Calls)));
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
            .find_map(|p| self.file_index(&p))
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

/// The package directory sharing the most trailing segments with the import path: at least two
/// (`example.com/m/pkg/util` ~ `go/pkg/util`), or all of the directory's own.
fn go_package(dirs: &HashMap<&str, Vec<usize>>, spec: &str) -> Vec<usize> {
    let shared = |d: &str| {
        d.rsplit('/')
            .zip(spec.rsplit('/'))
            .take_while(|(a, b)| a == b)
            .count()
    };
    let best = dirs
        .keys()
        .map(|d| (shared(d), d.len(), *d))
        .filter(|(s, _, d)| *s >= 2 || (*s > 0 && *s == d.split('/').count()))
        .max();
    best.map(|(_, _, d)| dirs[d].clone()).unwrap_or_default()
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
pub(super) fn normalize(path: &str) -> Option<String> {
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

metabob_wire::display_as_wire_name!(Direction);

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
    /// Components of the changed files: the starting points, not listed as affected.
    pub seeds: usize,
    pub affected_total: usize,
    /// By smallest depth, then path; the components within by depth, then line.
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
            if !(file_filter.is_empty() || file_filter.iter().any(|s| f.path.contains(s))) {
                continue;
            }
            let path_toks = tokenize(&f.path);
            for c in &self.components[f.first as usize..(f.first + f.count) as usize] {
                let mut name_toks = tokenize(&c.name);
                name_toks.extend(tokenize(&c.qualified_name));
                let kind = [c.kind.as_str().to_string()];
                if q.iter()
                    .all(|t| hit(&name_toks, t) || hit(&path_toks, t) || hit(&kind, t))
                {
                    let name_hits = q.iter().filter(|t| hit(&name_toks, t)).count();
                    hits.push(SearchHit {
                        component: c.clone(),
                        name_hits,
                    });
                }
            }
        }
        hits.sort_by(|a, b| {
            let (x, y) = (&a.component, &b.component);
            (b.name_hits, x.name.len(), &x.file, x.start_line).cmp(&(
                a.name_hits,
                y.name.len(),
                &y.file,
                y.start_line,
            ))
        });
        hits.truncate(limit);
        hits
    }

    /// Breadth-first over CALLS and IMPORTS from every component of the changed files (which
    /// makes their members count as changed; CONTAINS is not walked beyond that). Test files are
    /// neither listed nor walked through unless `include_tests`.
    pub fn impact(
        &self,
        changed_files: &[String],
        direction: Direction,
        max_depth: usize,
        include_tests: bool,
    ) -> Impact {
        let (mut changed_files_found, mut not_indexed) = (Vec::new(), Vec::new());
        // Per node reached: its depth, and the node and edge kind it was first reached by.
        let mut seen: HashMap<u32, (usize, Option<(u32, EdgeKind)>)> = HashMap::new();
        let mut queue = VecDeque::new();
        for file in changed_files {
            let rel = self.rel_path(file);
            let Some(f) = self.file_index(&rel).map(|i| &self.files[i]) else {
                not_indexed.push(rel);
                continue;
            };
            for n in f.first..f.first + f.count {
                seen.insert(n, (0, None));
                queue.push_back(n);
            }
            changed_files_found.push(rel);
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
            for &d in dirs {
                for e in self.graph.edges_directed(NodeIndex::new(n as usize), d) {
                    let other = if d == Dir::Outgoing {
                        e.target()
                    } else {
                        e.source()
                    };
                    next.push((other.index() as u32, *e.weight()));
                }
            }
            // Sorted, so which path is reported does not hang on edge insertion order.
            next.sort();
            for (m, kind) in next {
                let test = !include_tests && is_test_path(&self.components[m as usize].file);
                if kind != EdgeKind::Contains && !test && !seen.contains_key(&m) {
                    seen.insert(m, (depth + 1, Some((n, kind))));
                    queue.push_back(m);
                }
            }
        }

        let mut affected: Vec<(&Component, Affected)> = Vec::new();
        for (&n, &(depth, _)) in seen.iter().filter(|(_, (depth, _))| *depth > 0) {
            let (mut via, mut at) = (Vec::new(), n);
            while let Some((_, Some((prev, kind)))) = seen.get(&at) {
                via.push(*kind);
                at = *prev;
            }
            via.reverse();
            let c = &self.components[n as usize];
            let (id, name, qualified_name) =
                (c.id.clone(), c.name.clone(), c.qualified_name.clone());
            let (kind, start_line, end_line) = (c.kind, c.start_line, c.end_line);
            let a = Affected {
                id,
                name,
                qualified_name,
                kind,
                start_line,
                end_line,
                depth,
                via,
            };
            affected.push((c, a));
        }
        affected.sort_by(|(c, a), (d, b)| {
            (a.depth, &c.file, a.start_line, &a.id).cmp(&(b.depth, &d.file, b.start_line, &b.id))
        });
        let affected_total = affected.len();
        let mut files: Vec<AffectedFile> = Vec::new();
        let mut slot: HashMap<&str, usize> = HashMap::new();
        for (c, a) in affected {
            let i = *slot.entry(&c.file).or_insert_with(|| {
                let (file, is_test) = (c.file.clone(), is_test_path(&c.file));
                files.push(AffectedFile {
                    file,
                    is_test,
                    components: Vec::new(),
                });
                files.len() - 1
            });
            files[i].components.push(a);
        }
        Impact {
            changed_files: changed_files_found,
            not_indexed,
            seeds,
            affected_total,
            files,
        }
    }
}

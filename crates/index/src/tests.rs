//! Parsing, the graph and its queries, over a small workspace in every language; the scan
//! and the saved cache are tested in `scan_and_cache`.

use std::path::Path;
use std::time::Duration;

use super::*;

mod scan_and_cache;

/// A small workspace in every language: `=== path` starts a file.
const WORKSPACE: &str = r#"=== py/app.py
import os
from pkg import util
from pkg.models import User


class Service:
    def run(self):
        return helper(1)

    def stop(self):
        self.run()


def helper(x):
    return util.format_name(x)
=== py/pkg/__init__.py
=== py/pkg/util.py
from .models import User

def format_name(x):
    return str(x)
=== py/pkg/models.py
class User:
    pass
=== py/tests/test_app.py
from app import helper

def test_helper():
    assert helper(1)
=== js/main.js
const { greet } = require('./lib/greet');
import { Widget } from './widget';

function main() {
  greet('x');
  const w = new Widget();
  w.render();
}
=== js/lib/greet.js
export const greet = (name) => {
  return format(name);
};
function format(n) { return n; }
=== js/widget/index.js
export class Widget {
  render() {
    return 1;
  }
}
=== js/widget.test.js
import { Widget } from './widget';
test('w', () => new Widget());
=== ts/a.ts
import { b } from './b.js';
export function a(): number {
  return b();
}
=== ts/b.ts
export function b() { return 1; }
interface Shape { area(): number }
=== ts/view.tsx
import { a } from './a';
export function View() {
  return <Panel>{a()}</Panel>;
}
const Panel = (p) => <div>{p.children}</div>;
export function Page() {
  return <Panel />;
}
=== rs/src/lib.rs
mod store;
use metabob_mcp_server::store::Store;

pub fn open() -> Store {
    Store::new()
}
=== rs/src/store.rs
pub struct Store {}

impl Store {
    pub fn new() -> Self {
        Store {}
    }
}

pub trait Saver {
    fn save(&self) {}
}
=== go/pkg/util/util.go
package util

func Helper() int {
	return 1
}
=== go/cmd/main.go
package main

import (
	"fmt"
	"example.com/proj/pkg/util"
)

type Server struct{}

func (s *Server) Start() {
	fmt.Println(util.Helper())
}

func main() {
	s := &Server{}
	s.Start()
}
"#;

const FILE_COUNT: usize = 16;

fn write(root: &Path, rel: &str, body: &[u8]) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
    std::fs::write(path, body).expect("write fixture");
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for file in WORKSPACE.split("=== ").skip(1) {
        let (path, body) = file.split_once('\n').expect("a path line");
        write(dir.path(), path, body.as_bytes());
    }
    dir
}

fn indexed(root: &Path) -> Index {
    let mut index = Index::new(root);
    let report = index.run(&IndexOptions::default(), Duration::from_secs(60));
    assert!(report.expect("run").complete);
    index
}

/// `from -> to` ids of every edge of `kind`, sorted.
fn edges(index: &Index, kind: EdgeKind) -> Vec<String> {
    let id = |n: petgraph::graph::NodeIndex| &index.components[n.index()].id;
    let edges = index.graph.raw_edges().iter().filter(|e| e.weight == kind);
    let mut v: Vec<String> = edges
        .map(|e| format!("{} -> {}", id(e.source()), id(e.target())))
        .collect();
    v.sort();
    v
}

/// `id depth` of the affected components, in the order reported.
fn affected(i: &Impact) -> Vec<String> {
    let comps = i.files.iter().flat_map(|f| &f.components);
    comps.map(|c| format!("{} {}", c.id, c.depth)).collect()
}

#[test]
fn components_with_lines_and_kinds() {
    let ws = workspace();
    let index = indexed(ws.path());
    let comps = |file: &str| -> Vec<String> {
        let comps = index.components_in_file(file).into_iter();
        comps
            .map(|c| {
                format!(
                    "{} {:?} {}-{}",
                    c.qualified_name, c.kind, c.start_line, c.end_line
                )
            })
            .collect()
    };
    let want = [
        "<module> Module 1-15",
        "Service Class 6-11",
        "Service.run Method 7-8",
    ];
    assert_eq!(comps("py/app.py")[..3], want);
    assert_eq!(
        comps("py/app.py")[3..],
        ["Service.stop Method 10-11", "helper Function 14-15"]
    );
    assert_eq!(
        index.components_in_file("py/app.py")[2].id,
        "py/app.py::Service.run@7"
    );
    let want = [
        "Store Struct 1-1",
        "Store.new Method 4-6",
        "Saver Trait 9-11",
    ];
    assert_eq!(comps("rs/src/store.rs")[1..4], want);
    assert_eq!(comps("rs/src/store.rs")[4], "Saver.save Method 10-10");
    let want = [
        "Server Struct 8-8",
        "Server.Start Method 10-12",
        "main Function 14-17",
    ];
    assert_eq!(comps("go/cmd/main.go")[1..], want);
    assert_eq!(
        comps("js/lib/greet.js")[1..],
        ["greet Function 1-3", "format Function 4-4"]
    );
    assert_eq!(comps("js/widget/index.js")[2], "Widget.render Method 2-4");
    assert_eq!(
        comps("ts/b.ts")[1..],
        ["b Function 1-1", "Shape Interface 2-2"]
    );
    assert_eq!(
        comps("ts/view.tsx")[1..],
        [
            "View Function 2-4",
            "Panel Function 5-5",
            "Page Function 6-8"
        ]
    );

    let line = |f, l| {
        index
            .component_for_line(f, l)
            .map(|c| c.qualified_name.as_str())
    };
    assert_eq!(line("py/app.py", 8), Some("Service.run"));
    assert_eq!(line("py/app.py", 9), Some("Service"));
    assert_eq!(line("py/app.py", 4), Some("<module>"));
    let abs = ws.path().join("py/app.py").to_string_lossy().to_string();
    assert_eq!(line(&abs, 15), Some("helper"));
    assert_eq!(line("py/pkg/../app.py", 15), Some("helper"));
    assert_eq!(line("nope.py", 1), None);
}

#[test]
fn calls_resolve_across_files() {
    let ws = workspace();
    let calls = edges(&indexed(ws.path()), EdgeKind::Calls);
    for edge in [
        "py/app.py::Service.run@7 -> py/app.py::helper@14",
        "py/app.py::Service.stop@10 -> py/app.py::Service.run@7",
        "py/app.py::helper@14 -> py/pkg/util.py::format_name@3",
        "py/tests/test_app.py::test_helper@3 -> py/app.py::helper@14",
        "js/main.js::main@4 -> js/lib/greet.js::greet@1",
        "js/main.js::main@4 -> js/widget/index.js::Widget@1",
        "js/main.js::main@4 -> js/widget/index.js::Widget.render@2",
        "js/lib/greet.js::greet@1 -> js/lib/greet.js::format@4",
        "js/widget.test.js::<module>@1 -> js/widget/index.js::Widget@1",
        "ts/view.tsx::View@2 -> ts/a.ts::a@2",
        "ts/view.tsx::View@2 -> ts/view.tsx::Panel@5",
        "ts/view.tsx::Page@6 -> ts/view.tsx::Panel@5",
        "ts/a.ts::a@2 -> ts/b.ts::b@1",
        "rs/src/lib.rs::open@4 -> rs/src/store.rs::Store.new@4",
        "go/cmd/main.go::Server.Start@10 -> go/pkg/util/util.go::Helper@3",
        "go/cmd/main.go::main@14 -> go/cmd/main.go::Server.Start@10",
    ] {
        assert!(
            calls.iter().any(|e| e == edge),
            "missing {edge} in {calls:#?}"
        );
    }
    assert_eq!(calls.len(), 16, "{calls:#?}");
}

#[test]
fn call_fanout_is_capped_and_the_own_file_wins() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    // `dup` is defined in 9 files (> 8: no edge), `few` in 2 (both linked).
    for (i, name) in ["dup"; 8].into_iter().chain(["few"; 2]).enumerate() {
        write(
            root,
            &format!("d{i}.py"),
            format!("def {name}():\n    pass\n").as_bytes(),
        );
    }
    write(
        root,
        "z.py",
        b"def caller():\n    dup()\n    return f\"{few()}\"\n",
    );
    // The 9th `dup` is in the caller's own file: that one is meant.
    write(
        root,
        "local.py",
        b"def dup():\n    pass\ndef user():\n    dup()\n",
    );
    let calls = edges(&indexed(root), EdgeKind::Calls);
    let want = [
        "local.py::user@3 -> local.py::dup@1",
        "z.py::caller@1 -> d8.py::few@1",
        "z.py::caller@1 -> d9.py::few@1",
    ];
    assert_eq!(calls, want);
}

#[test]
fn imports_resolve_per_language() {
    let ws = workspace();
    let index = indexed(ws.path());
    let imports = edges(&index, EdgeKind::Imports)
        .join("\n")
        .replace("::<module>@1", "");
    let want = "go/cmd/main.go -> go/pkg/util/util.go
js/main.js -> js/lib/greet.js
js/main.js -> js/widget/index.js
js/widget.test.js -> js/widget/index.js
py/app.py -> py/pkg/__init__.py
py/app.py -> py/pkg/models.py
py/app.py -> py/pkg/util.py
py/pkg/util.py -> py/pkg/models.py
py/tests/test_app.py -> py/app.py
rs/src/lib.rs -> rs/src/store.rs
ts/a.ts -> ts/b.ts
ts/view.tsx -> ts/a.ts";
    assert_eq!(imports, want);
    let stats = index.stats();
    assert_eq!((stats.imports_edges, stats.files_indexed), (12, FILE_COUNT));
    assert_eq!((stats.languages["python"], stats.languages["tsx"]), (5, 1));
}

#[test]
fn impact_directions_depth_and_tests() {
    let ws = workspace();
    let index = indexed(ws.path());
    let changed = ["py/pkg/util.py".to_string(), "gone.py".to_string()];
    let back = index.impact(&changed, Direction::Backward, 10, true);
    assert_eq!(
        (back.changed_files, back.not_indexed, back.seeds),
        (vec![changed[0].clone()], vec![changed[1].clone()], 2)
    );
    let want = [
        "py/app.py::<module>@1 1",
        "py/app.py::helper@14 1",
        "py/app.py::Service.run@7 2",
        "py/app.py::Service.stop@10 3",
        "py/tests/test_app.py::<module>@1 2",
        "py/tests/test_app.py::test_helper@3 2",
    ];
    assert_eq!(
        affected(&index.impact(&changed, Direction::Backward, 10, true)),
        want
    );
    assert!(back.files[1].is_test && !back.files[0].is_test);
    assert_eq!(back.files[0].components[3].via, [EdgeKind::Calls; 3]);

    let no_tests = index.impact(&changed, Direction::Backward, 10, false);
    assert_eq!(affected(&no_tests), want[..4]);
    assert_eq!(
        affected(&index.impact(&changed, Direction::Backward, 1, true)),
        want[..2]
    );
    assert_eq!(
        index
            .impact(&changed, Direction::Backward, 0, true)
            .affected_total,
        0
    );

    let abs = ws.path().join("py/app.py").to_string_lossy().to_string();
    let fwd = index.impact(&[abs], Direction::Forward, 10, true);
    let want = [
        "py/pkg/__init__.py::<module>@1 1",
        "py/pkg/models.py::<module>@1 1",
        "py/pkg/util.py::<module>@1 1",
        "py/pkg/util.py::format_name@3 1",
    ];
    assert_eq!(affected(&fwd), want);
    assert_eq!(fwd.files[2].components[0].via, [EdgeKind::Imports]);

    let both = index.impact(&["py/app.py".into()], Direction::Both, 10, true);
    let tests = [
        "py/tests/test_app.py::<module>@1 1",
        "py/tests/test_app.py::test_helper@3 1",
    ];
    assert_eq!(affected(&both), [&want[..], &tests].concat());
}

#[test]
fn search_tokens_and_ranking() {
    assert_eq!(tokenize("getUserName"), ["get", "user", "name"]);
    let want = ["http", "server", "v2", "load", "config", "py"];
    assert_eq!(tokenize("HTTPServer_v2 load-config.py"), want);
    let dir = tempfile::tempdir().expect("tempdir");
    let users = "function getUserName() {}\nfunction fetch_user_record() {}\nfunction user() {}\n";
    write(dir.path(), "src/users.ts", users.as_bytes());
    write(dir.path(), "src/names.ts", b"function userId() {}\n");
    write(dir.path(), "lib/parse-config.js", b"function readIt() {}\n");
    let index = indexed(dir.path());
    let names = |q: &str, filter: &[&str]| -> Vec<String> {
        let filter: Vec<String> = filter.iter().map(|s| s.to_string()).collect();
        index
            .search(q, 10, &filter)
            .into_iter()
            .map(|h| h.component.name)
            .collect()
    };
    // Two name hits beat one ("name" is only in the path of `userId`), then the shorter name.
    assert_eq!(names("user name", &[]), ["getUserName", "userId"]);
    assert_eq!(
        names("user", &[]),
        [
            "user",
            "users",
            "userId",
            "getUserName",
            "fetch_user_record"
        ]
    );
    assert_eq!(names("user rec", &[]), ["fetch_user_record"]);
    assert_eq!(names("function read", &[]), ["readIt"]);
    assert_eq!(names("parse config", &[]), ["parse-config", "readIt"]);
    assert_eq!(names("read", &["lib/"]), ["readIt"]);
    assert!(names("read", &["src/"]).is_empty());
    assert!(names("usr", &[]).is_empty());
    assert!(names(" - ", &[]).is_empty());
    assert_eq!(index.search("user", 2, &[]).len(), 2);
}

#[test]
fn test_paths() {
    for p in [
        "a/test_x.py",
        "x_test.py",
        "x_test.go",
        "a.test.tsx",
        "b.spec.rb",
        "tests/x.rs",
    ] {
        assert!(is_test_path(p), "{p}");
    }
    for p in [
        "testing.py",
        "contest.py",
        "src/latest/x.go",
        "a.testx.js",
        "x_test.rs",
    ] {
        assert!(!is_test_path(p), "{p}");
    }
    assert!(is_test_path("a/__tests__/b.js") && is_test_path("test/b.js"));
}

#[test]
#[allow(unsafe_code)] // the one way to hand tree-sitter a grammar it must refuse
fn an_unloadable_grammar_is_unavailable() {
    // The server keeps the index behind a mutex used from blocking threads.
    fn is_send<T: Send>() {}
    is_send::<Index>();

    // A language whose ABI version (its first field) no tree-sitter accepts.
    static FAKE: [u64; 128] = {
        let mut raw = [0; 128];
        raw[0] = 99;
        raw
    };
    // SAFETY: `set_language` reads only the version before refusing it, and dropping the
    // language reads at most a field inside this zeroed, static, properly aligned block.
    let fake = unsafe { tree_sitter::Language::from_raw(FAKE.as_ptr().cast()) };
    let err = parse::LangParser::new(Lang::Python, fake)
        .err()
        .expect("refused");
    let want = "local_index_unavailable(tree-sitter-python: Incompatible language version 99. \
                Expected minimum 13, maximum 15)";
    assert_eq!(err.to_string(), want);
}

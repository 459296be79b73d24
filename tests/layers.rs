//! The layering rules of the workspace (docs/ARCHITECTURE.md), read from Cargo's own resolved
//! graph: what each library crate links in a normal build, transitively. A forbidden edge
//! anywhere below a crate fails here, naming the path that brought it in.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// What metabob-process must never link. Our other crates are named one by one, since a
/// `metabob-*` prefix would match the wire crate it does use;
/// `every_crate_of_ours_but_wire_is_banned_from_process_by_name` keeps the list whole.
const PROCESS_BANS: &[&str] = &[
    "metabob-net",
    "metabob-git",
    "metabob-index",
    "metabob-cell",
    "metabob-mcp-server",
    "metabob-ledger",
    "metabob-mcp",
    "tokio",
    "hyper",
    "reqwest",
    "rustls",
    "rusqlite",
    "tokio-postgres",
    "gix",
    "tree-sitter*",
    "rmcp",
];

/// Each crate, and the packages it must never link (a name ending in `*` is a prefix).
const RULES: &[(&str, &[&str], &str)] = &[
    (
        "metabob-wire",
        &[
            "metabob-*",
            "tokio",
            "hyper",
            "reqwest",
            "rustls",
            "rusqlite",
            "tokio-postgres",
            "gix",
            "tree-sitter*",
            "rmcp",
            "tracing-subscriber",
            "getrandom",
            "postcard",
        ],
        "the vocabulary links no logging setup, no randomness and no store, and has no network, \
         no git, no parser and no MCP: a reader or another client takes it alone",
    ),
    (
        "metabob-process",
        PROCESS_BANS,
        "the house rules run in every process, so they reach no network, no store, no git, no \
         parser and no MCP, and of our crates only the vocabulary",
    ),
    (
        "metabob-index",
        &[
            "metabob-net",
            "hyper",
            "reqwest",
            "rustls",
            "tokio-rustls",
            "tokio-postgres",
            "rmcp",
        ],
        "the index crate never links the network stack",
    ),
    (
        "metabob-ledger",
        &[
            "rmcp",
            "tree-sitter*",
            "metabob-index",
            "metabob-mcp-server",
            "metabob-cell",
            "gix",
        ],
        "the ledger server never links rmcp or tree-sitter",
    ),
    (
        "metabob-mcp-server",
        &["tokio-postgres", "metabob-ledger"],
        "the MCP server reaches the ledger only over HTTP, so it never links the PostgreSQL store",
    ),
    (
        "metabob-cell",
        &[
            "metabob-ledger",
            "metabob-mcp-server",
            "rmcp",
            "tokio-postgres",
        ],
        "a cell talks to the ledger over the attachment and serves no MCP itself",
    ),
];

/// Package name → the names of its normal (non-dev, non-build) dependencies.
fn normal_graph() -> BTreeMap<String, Vec<String>> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let name_of: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let mut graph = BTreeMap::new();
    for node in meta["resolve"]["nodes"].as_array().unwrap() {
        let deps = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| {
                d["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k["kind"].is_null())
            })
            .map(|d| name_of[d["pkg"].as_str().unwrap()].to_string())
            .collect();
        graph.insert(name_of[node["id"].as_str().unwrap()].to_string(), deps);
    }
    graph
}

/// Every package `from` links, each with the chain that first reached it.
fn reached(graph: &BTreeMap<String, Vec<String>>, from: &str) -> BTreeMap<String, Vec<String>> {
    let mut seen = BTreeMap::new();
    let mut queue = VecDeque::from([vec![from.to_string()]]);
    while let Some(chain) = queue.pop_front() {
        let last = chain.last().unwrap();
        for dep in graph.get(last).into_iter().flatten() {
            if !seen.contains_key(dep) {
                let mut next = chain.clone();
                next.push(dep.clone());
                seen.insert(dep.clone(), next.clone());
                queue.push_back(next);
            }
        }
    }
    seen
}

fn violations(graph: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut out = Vec::new();
    for (krate, banned, why) in RULES {
        assert!(
            graph.contains_key(*krate),
            "{krate} is not in the workspace"
        );
        for (dep, chain) in reached(graph, krate) {
            let hit = banned.iter().any(|b| match b.strip_suffix('*') {
                Some(prefix) => dep.starts_with(prefix),
                None => dep == *b,
            });
            if hit {
                out.push(format!(
                    "{krate} links {dep} ({}): {why}",
                    chain.join(" -> ")
                ));
            }
        }
    }
    out
}

#[test]
fn each_crate_links_only_the_layers_below_it() {
    let graph = normal_graph();
    let bad = violations(&graph);
    assert!(bad.is_empty(), "forbidden edges:\n{}", bad.join("\n"));
    // The binary links every layer: nothing of the workspace is orphaned.
    let all: BTreeSet<String> = reached(&graph, "metabob-mcp").into_keys().collect();
    for (krate, _, _) in RULES {
        assert!(all.contains(*krate), "the binary does not link {krate}");
    }
}

#[test]
fn a_forbidden_edge_deep_below_a_crate_is_named_with_its_path() {
    let mut graph = normal_graph();
    // As if the index crate grew a dependency that pulls in the HTTP client.
    graph
        .get_mut("metabob-index")
        .unwrap()
        .push("metabob-git".into());
    let bad = violations(&graph);
    assert!(
        bad.iter().any(|v| v.starts_with(
            "metabob-index links metabob-net (metabob-index -> metabob-git -> metabob-net)"
        )),
        "{bad:#?}"
    );
}

#[test]
fn every_crate_of_ours_but_wire_is_banned_from_process_by_name() {
    let graph = normal_graph();
    let missing: Vec<&String> = graph
        .keys()
        .filter(|name| name.starts_with("metabob-"))
        .filter(|name| !["metabob-wire", "metabob-process"].contains(&name.as_str()))
        .filter(|name| !PROCESS_BANS.contains(&name.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "crates of ours metabob-process may link, since PROCESS_BANS does not name them: \
         {missing:?}"
    );
}

#[test]
fn the_vocabulary_reaching_back_into_process_is_named_with_its_path() {
    let mut graph = normal_graph();
    // As if wire grew a dependency on the house rules (which link the logging setup).
    graph
        .get_mut("metabob-wire")
        .unwrap()
        .push("metabob-process".into());
    let bad = violations(&graph);
    assert!(
        bad.iter().any(|v| v
            .starts_with("metabob-wire links metabob-process (metabob-wire -> metabob-process)")),
        "{bad:#?}"
    );
    assert!(
        bad.iter().any(|v| v.starts_with(
            "metabob-wire links tracing-subscriber (metabob-wire -> metabob-process -> \
             tracing-subscriber)"
        )),
        "{bad:#?}"
    );
}

/// One path per item: the cell crate's ledger modules speak the wire vocabulary but do not
/// re-export it whole, so a type has one home to import it from.
#[test]
fn the_cell_crate_re_exports_no_wire_module_whole() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/cell/src");
    let mut found = Vec::new();
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (n, line) in text.lines().enumerate() {
                    let l = line.trim();
                    if l.starts_with("pub use metabob_wire::") && l.ends_with("::*;") {
                        found.push(format!("{}:{}: {l}", path.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "glob re-exports of wire modules:\n{}",
        found.join("\n")
    );
}

//! SPEC.md and the code cite each other; these checks keep both directions pointing at
//! something real.
//!
//! SPEC.md → code: a citation `path@anchor` names an item defined in that file (fn, struct,
//! enum, const, static, trait, type, mod, macro_rules!) or a marker `anchor: NAME` in one of its
//! comments. Only comments count for markers, so a field initialiser `anchor: x,` is not one.
//!
//! Code → SPEC.md: a comment under src/ or crates/ cites a section as `(SPEC.md §Heading)`, and the heading
//! must be one of SPEC.md's, compared exactly. The reference is read on its own line: inside
//! parentheses it runs to the `)` that closes them (a heading may hold balanced parentheses,
//! like "`GET /health` (public)"); outside them it runs to the end of the line, less trailing
//! sentence punctuation. A reference wrapped across two lines therefore reads as its first half
//! and is reported, which is the point: it could not be searched for either.

use std::path::{Path, PathBuf};

fn citations(spec: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for chunk in spec.split('`').skip(1).step_by(2) {
        if let Some((path, anchor)) = chunk.split_once('@')
            && (path.starts_with("src/")
                || path.starts_with("crates/")
                || path.starts_with("tests/"))
            && !anchor.is_empty()
            && !anchor.contains(char::is_whitespace)
        {
            out.push((path.to_string(), anchor.to_string()));
        }
    }
    out
}

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

/// The lines of `source` that are comments. Line-granular on purpose: a line comment is a line
/// that starts with `//`; a block comment starts where a line opens with `/*` and ends on the
/// line holding its `*/`. Looking for `/*` anywhere would take a glob in a string literal
/// (`"src/**/*.rs"`) for a comment.
fn comment_lines(source: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut in_block = false;
    for line in source.lines() {
        let t = line.trim_start();
        if in_block || t.starts_with("/*") {
            out.push(line);
            // Past the opener, so `/*/` does not read as opened and closed.
            let rest = if in_block { t } else { &t[2..] };
            in_block = !rest.contains("*/");
        } else if t.starts_with("//") {
            out.push(line);
        }
    }
    out
}

fn defines(source: &str, anchor: &str) -> bool {
    let marker = format!("anchor: {anchor}");
    let marked = comment_lines(source).iter().any(|line| {
        line.match_indices(&marker)
            .any(|(i, m)| !line[i + m.len()..].starts_with(is_name_char))
    });
    if marked {
        return true;
    }
    [
        "fn",
        "struct",
        "enum",
        "const",
        "static",
        "trait",
        "type",
        "mod",
        "macro_rules!",
    ]
    .iter()
    .any(|kw| {
        source
            .match_indices(&format!("{kw} {anchor}"))
            .any(|(i, m)| {
                let after = source[i + m.len()..].chars().next();
                let before = source[..i].chars().last();
                !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    && !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
    })
}

/// SPEC.md's headings: the text after the `#`s of an ATX heading, outside fenced code, where a
/// `# comment` in a shell sample is not a heading.
fn headings(spec: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in spec.lines() {
        if line.starts_with("```") || line.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        let level = line.len() - line.trim_start_matches('#').len();
        if !fenced && (1..=6).contains(&level) && line[level..].starts_with(' ') {
            out.push(line[level..].trim());
        }
    }
    out
}

/// Every `SPEC.md §X` in `source`, as (1-based line, X), read by the rule in the module comment.
fn section_refs(source: &str) -> Vec<(usize, String)> {
    const MARK: &str = "SPEC.md §";
    let mut out = Vec::new();
    for (n, line) in source.lines().enumerate() {
        let opened_before = |i: usize| {
            let before = &line[..i];
            before.matches('(').count() > before.matches(')').count()
        };
        for (i, _) in line.match_indices(MARK) {
            let rest = &line[i + MARK.len()..];
            let mut depth = 0usize;
            let mut end = None;
            for (j, c) in rest.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth > 0 => depth -= 1,
                    ')' if opened_before(i) => {
                        end = Some(j);
                        break;
                    }
                    _ => {}
                }
            }
            let x = match end {
                Some(j) => rest[..j].trim(),
                None => rest.trim_end().trim_end_matches(['.', ',', ';', ':']),
            };
            out.push((n + 1, x.to_string()));
        }
    }
    out
}

/// One line per reference in `sources` (path, text) that names no heading of `spec`.
fn stale_section_refs(spec: &str, sources: &[(String, String)]) -> Vec<String> {
    let known = headings(spec);
    let mut out = Vec::new();
    for (path, text) in sources {
        for (line, x) in section_refs(text) {
            if !known.contains(&x.as_str()) {
                out.push(format!("{path}:{line}: SPEC.md §{x}"));
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

#[test]
fn every_spec_citation_names_an_existing_anchor() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let spec = std::fs::read_to_string(root.join("SPEC.md")).expect("SPEC.md exists");
    let cites = citations(&spec);
    assert!(
        cites.len() >= 20,
        "SPEC.md cites only {} anchors; expected the contract to cite its code",
        cites.len()
    );
    let mut missing = Vec::new();
    for (path, anchor) in &cites {
        match std::fs::read_to_string(root.join(path)) {
            Ok(src) if defines(&src, anchor) => {}
            Ok(_) => missing.push(format!("{path}@{anchor}: no such anchor in the file")),
            Err(e) => missing.push(format!("{path}@{anchor}: {e}")),
        }
    }
    assert!(
        missing.is_empty(),
        "stale SPEC.md citations:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_anchor_check_tells_definitions_from_mentions() {
    let src = "fn attach_check() {}\n// anchor: org-check\nlet x = attach_checked;";
    assert!(defines(src, "attach_check"));
    assert!(defines(src, "org-check"));
    assert!(!defines(src, "attach_checked"));
    assert!(!defines(src, "attach"));
    assert!(!defines(src, "org"), "a marker names the whole word");

    // A struct field named `anchor` is code, not a marker.
    let field = "let a = Anchor {\n    anchor: org_check,\n};\nlet b = Anchor { anchor: other };";
    assert!(!defines(field, "org_check"));
    assert!(!defines(field, "other"));

    let doc = "/// Proves the key (anchor: org_check). Then\n//! anchor: top\n";
    assert!(defines(doc, "org_check"));
    assert!(defines(doc, "top"));
    let block =
        "let g = \"src/**/*.rs\";\nlet a = A { anchor: g };\n/* one\n   anchor: inner\n*/\n";
    assert!(defines(block, "inner"));
    assert!(!defines(block, "g"), "a glob in a string opens no comment");
    assert!(defines("macro_rules! tool {\n}", "tool"));
}

#[test]
fn every_spec_reference_in_the_source_names_a_heading() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let spec = std::fs::read_to_string(root.join("SPEC.md")).expect("SPEC.md exists");
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files).expect("src/ can be listed");
    rust_files(&root.join("crates"), &mut files).expect("crates/ can be listed");
    let sources: Vec<(String, String)> = files
        .iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let rel = p.strip_prefix(root).unwrap_or(p).display().to_string();
            (rel, text)
        })
        .collect();
    let cited: usize = sources.iter().map(|(_, t)| section_refs(t).len()).sum();
    assert!(
        cited >= 20,
        "the source cites only {cited} SPEC.md sections; did the reference form change?"
    );
    let stale = stale_section_refs(&spec, &sources);
    assert!(
        stale.is_empty(),
        "SPEC.md § references that name no heading (write `(SPEC.md §<exact heading>)` on one \
         line):\n{}",
        stale.join("\n")
    );
}

#[test]
fn the_section_check_fails_on_a_stale_reference() {
    let spec = "# Contract\n## Network\n```sh\n# not a heading\n```\n#### `GET /health` (public)\n\
                ### task renew and task release\n#nospace\n";
    assert_eq!(
        headings(spec),
        [
            "Contract",
            "Network",
            "`GET /health` (public)",
            "task renew and task release"
        ]
    );
    let src = |text: &str| vec![("src/a.rs".to_string(), text.to_string())];

    let good = "//! The one path (see SPEC.md §Network): proxies.\n\
                /// Health (SPEC.md §`GET /health` (public)).\n\
                // Claims are read from task.json, see SPEC.md §task renew and task release.\n";
    assert_eq!(
        section_refs(good),
        [
            (1, "Network".to_string()),
            (2, "`GET /health` (public)".to_string()),
            (3, "task renew and task release".to_string()),
        ]
    );
    assert!(stale_section_refs(spec, &src(good)).is_empty());

    let stale = "fn a() {}\n//! Recording (SPEC.md §No such heading).\n// (SPEC.md §network)\n\
                 // (SPEC.md §not a heading)\n// (SPEC.md §task renew\n// and task release)\n";
    assert_eq!(
        stale_section_refs(spec, &src(stale)),
        [
            "src/a.rs:2: SPEC.md §No such heading",
            "src/a.rs:3: SPEC.md §network",
            "src/a.rs:4: SPEC.md §not a heading",
            "src/a.rs:5: SPEC.md §task renew",
        ]
    );
}

//! SPEC.md cites code as `path@anchor`; this keeps every citation pointing at something real.
//! An anchor is an item defined in that file (fn, struct, enum, const, static, trait, type,
//! mod) or a marker `anchor: NAME` in one of its comments.

use std::path::Path;

fn citations(spec: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for chunk in spec.split('`').skip(1).step_by(2) {
        if let Some((path, anchor)) = chunk.split_once('@')
            && (path.starts_with("src/") || path.starts_with("tests/"))
            && !anchor.is_empty()
            && !anchor.contains(char::is_whitespace)
        {
            out.push((path.to_string(), anchor.to_string()));
        }
    }
    out
}

fn defines(source: &str, anchor: &str) -> bool {
    if source.contains(&format!("anchor: {anchor})"))
        || source.contains(&format!("anchor: {anchor}\n"))
        || source.contains(&format!("anchor: {anchor},"))
    {
        return true;
    }
    [
        "fn", "struct", "enum", "const", "static", "trait", "type", "mod",
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
}

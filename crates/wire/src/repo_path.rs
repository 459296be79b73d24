//! A finding's files are repository paths (SPEC.md §Recording): names relative to the
//! repository's root that stay inside it. The one owner of the rule: every writer (`finding
//! record`, `record_finding`, the goal board), the ledger's own write path and `task pull`'s
//! reading of older rows ask [`check_repo_path`].
//!
//! A path is refused, never rewritten: what a writer sends is what every reader reads, so the
//! ledger, which can only accept or refuse, applies the same rule as the client. `/` and `\`
//! both separate segments, since a harness on Windows would read `\` so. Lengths are not this
//! rule's: the guard's `files` cap and the row bounds hold them.

use std::fmt;

/// Which rule a path broke; `Display` is the clause a refusal line ends with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathRule {
    /// Nothing at all (after trimming).
    Empty,
    /// A NUL byte, which no store keeps and no file system names.
    Nul,
    /// Another control character: a newline would end the header line the name is kept on.
    Control,
    /// A comma: a finding's `files:` line separates its names with commas, so the name would
    /// come back as two.
    Comma,
    /// A leading `/` or `\`.
    Absolute,
    /// A leading Windows drive, `C:`.
    Drive,
    /// A `..` segment, which climbs out of where it is.
    Parent,
    /// A `.` segment: the same file would have two names.
    Dot,
    /// An empty segment: `a//b` or a trailing `/`.
    EmptySegment,
}

impl PathRule {
    /// A short name for the rule, for tests and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            PathRule::Empty => "empty",
            PathRule::Nul => "nul",
            PathRule::Control => "control_character",
            PathRule::Comma => "comma",
            PathRule::Absolute => "absolute",
            PathRule::Drive => "drive",
            PathRule::Parent => "parent_segment",
            PathRule::Dot => "dot_segment",
            PathRule::EmptySegment => "empty_segment",
        }
    }
}

impl fmt::Display for PathRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathRule::Empty => "it is empty",
            PathRule::Nul => "it holds a NUL byte",
            PathRule::Control => "it holds a control character",
            PathRule::Comma => {
                "it holds a comma, which separates the names on a finding's `files:` line"
            }
            PathRule::Absolute => "it is absolute",
            PathRule::Drive => "it starts with a drive letter",
            PathRule::Parent => "it has a `..` segment",
            PathRule::Dot => "it has a `.` segment",
            PathRule::EmptySegment => "it has an empty segment (`//`, or a `/` at its end)",
        })
    }
}

/// How much of a refused path a line shows, in bytes once escaped: the path comes from
/// whoever wrote it, and the line naming it (a warning, a park's reason) stays short.
const SHOWN_BYTES: usize = 200;

/// A path that is not a repository path, and the rule it broke (anchor: NotRepoPath).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "file {} is not a repository path: {rule}; give the path relative to the repository root",
    self.shown()
)]
pub struct NotRepoPath {
    pub path: String,
    pub rule: PathRule,
}

impl NotRepoPath {
    /// The path quoted with control characters escaped, cut after [`SHOWN_BYTES`] bytes.
    pub fn shown(&self) -> String {
        let quoted = format!("{:?}", self.path);
        let inner = &quoted[1..quoted.len() - 1];
        if inner.len() <= SHOWN_BYTES {
            return quoted;
        }
        let mut end = SHOWN_BYTES;
        while !inner.is_char_boundary(end) {
            end -= 1;
        }
        format!("\"{}…\"", &inner[..end])
    }
}

/// Whether `path` names a file inside the repository, relative to its root (anchor:
/// check_repo_path); the first rule it breaks, checked in [`PathRule`]'s order, otherwise.
pub fn check_repo_path(path: &str) -> Result<(), NotRepoPath> {
    rule_broken(path).map_or(Ok(()), |rule| {
        Err(NotRepoPath {
            path: path.to_string(),
            rule,
        })
    })
}

fn rule_broken(path: &str) -> Option<PathRule> {
    if path.is_empty() {
        return Some(PathRule::Empty);
    }
    if path.contains('\0') {
        return Some(PathRule::Nul);
    }
    if path.chars().any(char::is_control) {
        return Some(PathRule::Control);
    }
    if path.contains(',') {
        return Some(PathRule::Comma);
    }
    if path.starts_with(['/', '\\']) {
        return Some(PathRule::Absolute);
    }
    let mut chars = path.chars();
    if chars.next().is_some_and(|c| c.is_ascii_alphabetic()) && chars.next() == Some(':') {
        return Some(PathRule::Drive);
    }
    path.split(['/', '\\']).find_map(|segment| match segment {
        "" => Some(PathRule::EmptySegment),
        ".." => Some(PathRule::Parent),
        "." => Some(PathRule::Dot),
        _ => None,
    })
}

/// `files` split into the repository paths, in order, and the refusals of the rest.
pub fn partition_repo_paths(files: &[String]) -> (Vec<String>, Vec<NotRepoPath>) {
    let mut kept = Vec::new();
    let mut refused = Vec::new();
    for f in files {
        match check_repo_path(f) {
            Ok(()) => kept.push(f.clone()),
            Err(e) => refused.push(e),
        }
    }
    (kept, refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(path: &str) -> Option<PathRule> {
        check_repo_path(path).err().map(|e| e.rule)
    }

    #[test]
    fn repository_paths_pass() {
        for ok in [
            "a.py",
            "src/parse.py",
            "repos/app/src/a.py",
            ".github/workflows/ci.yml",
            "a..b/c...d",
            "..a/b..",
            "dir with spaces/file name.txt",
            "src\\win.c",
            "ünï/cödé.rs",
            "C",
            "1:2",
            "ab:c",
        ] {
            assert_eq!(rule(ok), None, "{ok:?}");
        }
    }

    #[test]
    fn each_rule_is_named() {
        for (path, want) in [
            ("", PathRule::Empty),
            ("a\0b", PathRule::Nul),
            ("/etc\0", PathRule::Nul),
            ("a\nb", PathRule::Control),
            ("a\tb", PathRule::Control),
            ("a\u{7f}", PathRule::Control),
            ("a,b.py", PathRule::Comma),
            ("/etc/passwd", PathRule::Absolute),
            ("//server/share", PathRule::Absolute),
            ("\\windows\\system32", PathRule::Absolute),
            ("C:\\Windows", PathRule::Drive),
            ("c:/x", PathRule::Drive),
            ("C:", PathRule::Drive),
            ("a:b", PathRule::Drive),
            ("../../etc/passwd", PathRule::Parent),
            ("..", PathRule::Parent),
            ("a/../../b", PathRule::Parent),
            ("a/..", PathRule::Parent),
            ("..\\..\\x", PathRule::Parent),
            (".", PathRule::Dot),
            ("./a.py", PathRule::Dot),
            ("a/./b", PathRule::Dot),
            ("a//b", PathRule::EmptySegment),
            ("a/", PathRule::EmptySegment),
            ("a\\\\b", PathRule::EmptySegment),
        ] {
            assert_eq!(rule(path), Some(want), "{path:?}");
        }
    }

    #[test]
    fn the_refusal_names_the_path_the_rule_and_what_to_do() {
        let e = check_repo_path("../../etc/passwd").unwrap_err();
        assert_eq!(
            e.to_string(),
            "file \"../../etc/passwd\" is not a repository path: it has a `..` segment; give the \
             path relative to the repository root"
        );
        // A NUL or a newline is shown escaped: the line stays one line.
        let e = check_repo_path("a\0b\nc").unwrap_err();
        assert!(e.to_string().starts_with("file \"a\\0b\\nc\" "), "{e}");
        assert!(!e.to_string().contains('\n'));
    }

    #[test]
    fn a_long_path_is_shown_cut() {
        let long = format!("/{}", "é".repeat(5000));
        let e = check_repo_path(&long).unwrap_err();
        assert_eq!(e.rule, PathRule::Absolute);
        let shown = e.shown();
        assert!(shown.starts_with("\"/éé"), "{shown}");
        assert!(shown.ends_with("é…\""), "{shown}");
        assert!(shown.len() <= SHOWN_BYTES + "\"…\"".len(), "{shown}");
        // Escapes count as what they take on the line.
        let e = check_repo_path(&"\u{1}".repeat(1000)).unwrap_err();
        assert_eq!(e.rule, PathRule::Control);
        assert!(
            e.shown().len() <= SHOWN_BYTES + "\"…\"".len(),
            "{}",
            e.shown()
        );
        let short = check_repo_path("/x").unwrap_err();
        assert_eq!(short.shown(), "\"/x\"");
    }

    #[test]
    fn partition_keeps_the_good_in_order() {
        let files: Vec<String> = ["a.py", "/etc/passwd", "b.py", "../c"]
            .map(String::from)
            .to_vec();
        let (kept, refused) = partition_repo_paths(&files);
        assert_eq!(kept, ["a.py", "b.py"]);
        let rules: Vec<PathRule> = refused.iter().map(|e| e.rule).collect();
        assert_eq!(rules, [PathRule::Absolute, PathRule::Parent]);
    }
}

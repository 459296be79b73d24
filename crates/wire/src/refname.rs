//! Checking a task's `ref:` before the clone uses it.
//!
//! Task details are written by agents, so the branch a task names is untrusted text. It is
//! accepted when `git check-ref-format --branch` run outside any repository would accept it,
//! and when it also passes two rules of ours: no leading `-` and at most [`MAX_REF_LEN`] bytes.
//! The git rules are re-implemented here (the binary never shells out to git for its own
//! decisions); `tests/refs/refname.rs` holds them to the real git CLI over a generated corpus.

use crate::report::Hint;

/// The longest `ref:` accepted, in bytes of its UTF-8 encoding. Bytes rather than characters
/// because the limits that bite further down (file names under `.git/refs/`, path buffers)
/// count bytes, and a byte count cannot be gamed with multi-byte characters.
pub const MAX_REF_LEN: usize = 100;

/// Why a `ref:` was refused: one variant per rule, the first rule broken wins.
///
/// Display is one line naming the rule; its [`Hint`] says what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefRefused {
    #[error("ref refused: the name is empty")]
    Empty,
    #[error("ref refused: the name is {len} bytes, over the {MAX_REF_LEN}-byte limit")]
    TooLong { len: usize },
    #[error("ref refused: the name starts with '-', which a command line would read as an option")]
    LeadingDash,
    #[error(
        "ref refused: the name contains {}",
        shown(*.0)
    )]
    ControlOrSpace(char),
    #[error(
        "ref refused: the name contains '{0}', which git reserves for revision syntax (~ ^ : ? * [ \\)"
    )]
    Forbidden(char),
    #[error("ref refused: the name contains \"..\", which git reads as a range")]
    DoubleDot,
    #[error(
        "ref refused: the name contains \"@{{\", which git reads as reflog or upstream syntax (this also covers @{{-N}})"
    )]
    AtBrace,
    #[error("ref refused: the name has an empty path component (a leading '/' or \"//\")")]
    EmptyComponent,
    #[error("ref refused: the name ends with '/'")]
    EndsWithSlash,
    #[error("ref refused: a path component starts with '.', which git keeps for hidden files")]
    ComponentStartsWithDot,
    #[error("ref refused: a path component ends with \".lock\", which git uses for its lock files")]
    ComponentEndsWithLock,
    #[error("ref refused: the name ends with '.'")]
    EndsWithDot,
    #[error("ref refused: \"HEAD\" names the checked-out commit, not a branch")]
    Head,
}

impl Hint for RefRefused {
    fn hint(&self) -> Option<String> {
        let what = match self {
            RefRefused::Empty => "name a branch, or drop the ref: line to clone the default branch",
            RefRefused::TooLong { .. } => "use a shorter branch name",
            RefRefused::LeadingDash => "rename the branch",
            RefRefused::ControlOrSpace(_) => {
                "branch names cannot hold spaces or control characters"
            }
            RefRefused::Forbidden(_) => "remove it",
            RefRefused::DoubleDot => "use a single dot",
            RefRefused::AtBrace => "remove it",
            RefRefused::EmptyComponent => "separate components with one '/'",
            RefRefused::EndsWithSlash => "drop the trailing slash",
            RefRefused::ComponentStartsWithDot => "rename that component",
            RefRefused::ComponentEndsWithLock => "rename that component",
            RefRefused::EndsWithDot => "drop the trailing dot",
            RefRefused::Head => "name the branch itself",
        };
        Some(what.to_string())
    }
}

/// Accepts a branch name exactly when `git check-ref-format --branch NAME` does outside a
/// repository, and it neither starts with `-` nor exceeds [`MAX_REF_LEN`] bytes.
///
/// Outside a repository git does not expand `@{-N}`; any `@{` is refused here anyway, so a
/// name can never mean "the branch checked out before" in the clone. A lone `@` is accepted,
/// as git accepts it: under `refs/heads/` it is an ordinary name.
pub fn validate_ref(name: &str) -> Result<(), RefRefused> {
    if name.is_empty() {
        return Err(RefRefused::Empty);
    }
    if name.len() > MAX_REF_LEN {
        return Err(RefRefused::TooLong { len: name.len() });
    }
    // git refuses this too (strbuf_check_branch_ref), but it is also our own rule: the
    // name reaches command lines where it would be taken for an option.
    if name.starts_with('-') {
        return Err(RefRefused::LeadingDash);
    }
    let mut prev = '\0';
    for c in name.chars() {
        // Bytes 0x80 and up are fine for git, so only ASCII controls count; NUL is among
        // them because git could never be handed such a name at all.
        if c.is_ascii_control() || c == ' ' {
            return Err(RefRefused::ControlOrSpace(c));
        }
        if matches!(c, '~' | '^' | ':' | '?' | '*' | '[' | '\\') {
            return Err(RefRefused::Forbidden(c));
        }
        if prev == '.' && c == '.' {
            return Err(RefRefused::DoubleDot);
        }
        if prev == '@' && c == '{' {
            return Err(RefRefused::AtBrace);
        }
        prev = c;
    }
    // git checks `refs/heads/NAME`, so every component of NAME is a component there; the
    // one-level and lone-`@` rules of check_refname_format never apply to a branch name.
    let mut components = name.split('/').peekable();
    while let Some(component) = components.next() {
        if component.is_empty() {
            return Err(if components.peek().is_none() {
                RefRefused::EndsWithSlash
            } else {
                RefRefused::EmptyComponent
            });
        }
        if component.starts_with('.') {
            return Err(RefRefused::ComponentStartsWithDot);
        }
        if component.ends_with(".lock") {
            return Err(RefRefused::ComponentEndsWithLock);
        }
    }
    if name.ends_with('.') {
        return Err(RefRefused::EndsWithDot);
    }
    if name == "HEAD" {
        return Err(RefRefused::Head);
    }
    Ok(())
}

/// A refused character as a person can read it in a one-line message.
fn shown(c: char) -> String {
    if c == ' ' {
        "a space".to_string()
    } else {
        format!("the control character '{}'", c.escape_debug())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_has_its_own_variant() {
        let cases: &[(&str, RefRefused)] = &[
            ("", RefRefused::Empty),
            ("-x", RefRefused::LeadingDash),
            ("a b", RefRefused::ControlOrSpace(' ')),
            ("a\tb", RefRefused::ControlOrSpace('\t')),
            ("a\0b", RefRefused::ControlOrSpace('\0')),
            ("a\u{7f}", RefRefused::ControlOrSpace('\u{7f}')),
            ("a~1", RefRefused::Forbidden('~')),
            ("a\\b", RefRefused::Forbidden('\\')),
            ("a..b", RefRefused::DoubleDot),
            ("@{-1}", RefRefused::AtBrace),
            ("a@{u}", RefRefused::AtBrace),
            ("/a", RefRefused::EmptyComponent),
            ("a//b", RefRefused::EmptyComponent),
            ("a/", RefRefused::EndsWithSlash),
            (".a", RefRefused::ComponentStartsWithDot),
            ("a/.b", RefRefused::ComponentStartsWithDot),
            ("a.lock", RefRefused::ComponentEndsWithLock),
            ("a.lock/b", RefRefused::ComponentEndsWithLock),
            ("a.", RefRefused::EndsWithDot),
            ("HEAD", RefRefused::Head),
        ];
        for (name, want) in cases {
            assert_eq!(validate_ref(name).as_ref(), Err(want), "{name:?}");
        }
    }

    #[test]
    fn ordinary_and_unusual_but_valid_names_pass() {
        for name in [
            "main",
            "task/agf_1",
            "@",
            "a@b",
            "{",
            "x-",
            "lock",
            "a.lock.b",
            "HEAD/x",
            "a/HEAD",
            "héllo/wörld",
            "refs/heads/x",
        ] {
            assert_eq!(validate_ref(name), Ok(()), "{name:?}");
        }
    }

    #[test]
    fn the_length_limit_counts_bytes() {
        assert_eq!(validate_ref(&"a".repeat(MAX_REF_LEN)), Ok(()));
        assert_eq!(
            validate_ref(&"a".repeat(MAX_REF_LEN + 1)),
            Err(RefRefused::TooLong { len: 101 })
        );
        // 50 two-byte characters fit exactly; one more does not.
        assert_eq!(validate_ref(&"é".repeat(50)), Ok(()));
        assert_eq!(
            validate_ref(&"é".repeat(51)),
            Err(RefRefused::TooLong { len: 102 })
        );
    }

    #[test]
    fn display_is_one_line_that_names_the_rule_and_the_hint_what_to_do() {
        let all = [
            RefRefused::Empty,
            RefRefused::TooLong { len: 130 },
            RefRefused::LeadingDash,
            RefRefused::ControlOrSpace('\t'),
            RefRefused::Forbidden(':'),
            RefRefused::DoubleDot,
            RefRefused::AtBrace,
            RefRefused::EmptyComponent,
            RefRefused::EndsWithSlash,
            RefRefused::ComponentStartsWithDot,
            RefRefused::ComponentEndsWithLock,
            RefRefused::EndsWithDot,
            RefRefused::Head,
        ];
        for e in all {
            let line = e.to_string();
            assert!(!line.contains('\n') && !line.contains('\t'), "{line:?}");
            assert!(line.starts_with("ref refused: "), "{line}");
            // The advice is the hint's alone: the rule's words never say what to do.
            let hint = e.hint().expect("every refusal says what to do");
            assert!(!line.contains(&hint), "{line}");
        }
        let long = RefRefused::TooLong { len: 130 };
        assert_eq!(
            long.to_string(),
            "ref refused: the name is 130 bytes, over the 100-byte limit"
        );
        assert_eq!(
            crate::report::with_hint(&long),
            "ref refused: the name is 130 bytes, over the 100-byte limit; use a shorter branch name"
        );
        assert!(
            RefRefused::ControlOrSpace('\t')
                .to_string()
                .ends_with("contains the control character '\\t'")
        );
        assert!(
            RefRefused::ControlOrSpace(' ')
                .to_string()
                .ends_with("contains a space")
        );
        assert!(RefRefused::AtBrace.to_string().contains("\"@{\""));
    }
}

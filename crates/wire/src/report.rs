//! How a library error reaches a person (docs/ARCHITECTURE.md, "How an error travels").
//!
//! A library error says what failed and keeps what caused it as a typed `source`; it carries no
//! advice. Advice is its type's [`Hint`], written once, and every surface (the CLI's last line,
//! an MCP tool's reply) joins the two the same way through [`line`] and [`with_hint`].

use std::error::Error;

/// What a person can do about an error, kept apart from its cause so that a caller can tell
/// them apart (the MCP reply, `-v`), and so that wrapping an error never repeats its advice.
pub trait Hint: Error {
    /// The advice for this error, when there is any; an error that wraps another usually
    /// returns the wrapped one's.
    fn hint(&self) -> Option<String> {
        None
    }
}

/// The causes under `e`, outermost first (not `e` itself).
pub fn causes<'a>(e: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(e.source(), |&c| c.source())
}

/// The one line for `e`: its own words, then each cause it does not already say. Libraries such
/// as gix often name only the step that failed and keep the reason in a source; a person needs
/// the reason on the line, while `-v` prints each cause on a line of its own.
pub fn line(e: &(dyn Error + 'static)) -> String {
    let mut line = e.to_string();
    for cause in causes(e) {
        let text = cause.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

/// The line a surface shows: [`line`], then `; ` and the hint when there is one.
pub fn with_hint<E: Hint + 'static>(e: &E) -> String {
    join(line(e), e.hint().as_deref())
}

/// `cause; hint`: the one place the two are joined, so every surface words it alike.
pub fn join(cause: String, hint: Option<&str>) -> String {
    match hint {
        Some(hint) => format!("{cause}; {hint}"),
        None => cause,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot open the store")]
    struct Open(#[source] std::io::Error);

    impl Hint for Open {
        fn hint(&self) -> Option<String> {
            Some("check the directory's permissions".into())
        }
    }

    #[derive(Debug, thiserror::Error)]
    #[error("saying {0} already")]
    struct Says(#[source] std::io::Error, &'static str);

    #[test]
    fn a_cause_joins_the_line_unless_the_line_says_it_already() {
        let e = Open(std::io::Error::other("disk full"));
        assert_eq!(line(&e), "cannot open the store: disk full");
        assert_eq!(
            with_hint(&e),
            "cannot open the store: disk full; check the directory's permissions"
        );
        let said = Says(std::io::Error::other("disk full"), "disk full");
        assert_eq!(line(&said), "saying disk full already");
        assert_eq!(causes(&said).count(), 1);
    }

    #[test]
    fn the_causes_are_listed_outermost_first() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] Open);
        let e = Outer(Open(std::io::Error::other("disk full")));
        let words: Vec<String> = causes(&e).map(|c| c.to_string()).collect();
        assert_eq!(words, ["cannot open the store", "disk full"]);
        assert_eq!(line(&e), "outer: cannot open the store: disk full");
    }
}

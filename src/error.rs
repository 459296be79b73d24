//! The CLI's one error type: a line for people, the exit code it maps to, and the error that
//! caused it, kept whole so that `-v` can print its chain (docs/ARCHITECTURE.md, "How an error
//! travels").

use std::error::Error;
use std::fmt;

use metabob_wire::report::{self, Hint};

/// Exit codes shared by every command (seed spec §task pull, §finding close, §attach --check).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    Failure = 1,
    NotAttached = 2,
    NothingOpen = 3,
    TryLater = 4,
    /// `task pull`: the task taken failed for a cause of its own and was parked; pull again.
    TaskFailed = 5,
    /// `cell run`: stopped by SIGINT (128 + 2, as a shell reports it).
    Interrupted = 130,
    /// `cell run`: stopped by SIGTERM, what `docker stop` sends (128 + 15).
    Terminated = 143,
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        std::process::ExitCode::from(e as u8)
    }
}

/// A library error the CLI keeps as the first link of a failure's chain.
type Source = Box<dyn Error + Send + Sync + 'static>;

/// A failure a command reports: one line, the cause and then, when there is one, what to do
/// (`error: <cause>; <hint>`), as jj's errors carry a hint apart from their message. The hint
/// has this one place and this one format (`report::join`), so no command words it its own way.
#[derive(Debug)]
pub struct CliError {
    pub exit: Exit,
    pub cause: String,
    pub hint: Option<String>,
    /// The library error behind the line, when one is: `-v` prints it and its causes.
    source: Option<Source>,
}

impl CliError {
    pub fn failure(cause: impl Into<String>) -> Self {
        CliError {
            exit: Exit::Failure,
            cause: cause.into(),
            hint: None,
            source: None,
        }
    }

    pub fn not_attached(cause: impl Into<String>) -> Self {
        CliError {
            exit: Exit::NotAttached,
            ..CliError::failure(cause)
        }
    }

    /// A library error met while doing `context` (a command's name, say): the line is the
    /// context, then the error with its causes; the error's own hint comes with it.
    pub fn caused_by<E: Hint + Send + Sync + 'static>(context: &str, e: E) -> Self {
        CliError {
            cause: format!("{context}: {}", report::line(&e)),
            hint: e.hint(),
            source: Some(Box::new(e)),
            ..CliError::failure("")
        }
    }

    /// Keeps `e` as the first link of the chain under a line the command words itself (a flag's
    /// value that does not parse, say), so `-v` still shows what the parser said.
    pub fn because<E: Error + Send + Sync + 'static>(mut self, e: E) -> Self {
        self.source = Some(Box::new(e));
        self
    }

    /// What the user can do about it (replaces the library error's own hint).
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn exit(mut self, exit: Exit) -> Self {
        self.exit = exit;
        self
    }

    /// Every link under the line, outermost first: the library error, then its causes.
    pub fn chain(&self) -> Vec<String> {
        let Some(source) = &self.source else {
            return Vec::new();
        };
        let top: &(dyn Error + 'static) = source.as_ref();
        std::iter::once(top)
            .chain(report::causes(top))
            .map(|e| e.to_string())
            .collect()
    }
}

/// Any library error with its hint becomes a failure whose line is the error's own.
impl<E: Hint + Send + Sync + 'static> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError {
            cause: report::line(&e),
            hint: e.hint(),
            source: Some(Box::new(e)),
            ..CliError::failure("")
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&report::join(self.cause.clone(), self.hint.as_deref()))
    }
}

pub type CliResult = Result<Exit, CliError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read the ledger's answer")]
    struct Unread(#[source] std::io::Error);

    impl Hint for Unread {
        fn hint(&self) -> Option<String> {
            Some("retry".into())
        }
    }

    #[test]
    fn the_hint_follows_the_cause_in_one_line() {
        let e = CliError::failure("finding close: no commits named").hint("give --commits RANGE");
        assert_eq!(
            e.to_string(),
            "finding close: no commits named; give --commits RANGE"
        );
        assert_eq!(CliError::not_attached("no key").to_string(), "no key");
        assert_eq!(CliError::not_attached("no key").exit, Exit::NotAttached);
    }

    #[test]
    fn a_library_error_keeps_its_chain_and_brings_its_hint() {
        let e = CliError::caused_by("task show", Unread(std::io::Error::other("reset")));
        assert_eq!(
            e.to_string(),
            "task show: cannot read the ledger's answer: reset; retry"
        );
        assert_eq!(e.chain(), ["cannot read the ledger's answer", "reset"]);
        let plain: CliError = Unread(std::io::Error::other("reset")).into();
        assert_eq!(
            plain.to_string(),
            "cannot read the ledger's answer: reset; retry"
        );
        assert!(CliError::failure("x").chain().is_empty());
    }
}

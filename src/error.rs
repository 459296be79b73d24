//! The CLI's one error type: a line for people and the exit code it maps to.

use std::fmt;

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

/// A failure a command reports: one line, the cause and then, when there is one, what to do
/// (`error: <cause>; <hint>`), as jj's errors carry a hint apart from their message. The hint
/// has this one place and this one format, so no command words it its own way.
#[derive(Debug)]
pub struct CliError {
    pub exit: Exit,
    pub cause: String,
    pub hint: Option<String>,
}

impl CliError {
    pub fn failure(cause: impl Into<String>) -> Self {
        CliError {
            exit: Exit::Failure,
            cause: cause.into(),
            hint: None,
        }
    }

    pub fn not_attached(cause: impl Into<String>) -> Self {
        CliError {
            exit: Exit::NotAttached,
            cause: cause.into(),
            hint: None,
        }
    }

    /// What the user can do about it.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.cause)?;
        match &self.hint {
            Some(hint) => write!(f, "; {hint}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for CliError {}

pub type CliResult = Result<Exit, CliError>;

#[cfg(test)]
mod tests {
    use super::*;

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
}

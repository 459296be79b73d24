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
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        std::process::ExitCode::from(e as u8)
    }
}

/// A failure a command reports: one line naming the cause and what to do.
#[derive(Debug)]
pub struct CliError {
    pub exit: Exit,
    pub line: String,
}

impl CliError {
    pub fn failure(line: impl Into<String>) -> Self {
        CliError {
            exit: Exit::Failure,
            line: line.into(),
        }
    }
    pub fn not_attached(line: impl Into<String>) -> Self {
        CliError {
            exit: Exit::NotAttached,
            line: line.into(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line)
    }
}

impl std::error::Error for CliError {}

pub type CliResult = Result<Exit, CliError>;

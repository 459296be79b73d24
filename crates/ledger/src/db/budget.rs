//! One request's time budget and how it stops SQLite work that runs past it.

use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::errors::ApiError;

/// How many SQLite virtual-machine steps run between two looks at the request's deadline: a
/// look is one clock read, and a thousand steps take microseconds, so work stops promptly once
/// the budget is spent and costs nothing measurable before.
const PROGRESS_STEPS: i32 = 1000;

/// One request's time budget for its database work: the deadline, and the budget it came from
/// (which the 503 names).
// anchor: Budget
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub(super) deadline: Instant,
    ms: u64,
}

impl Budget {
    /// A budget of `ms` milliseconds from now.
    pub fn start(ms: u64) -> Budget {
        let now = Instant::now();
        Budget {
            deadline: now.checked_add(Duration::from_millis(ms)).unwrap_or(now),
            ms,
        }
    }

    pub(super) fn passed(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Whole milliseconds left before the deadline (0 once it has passed).
    pub(super) fn left_ms(&self) -> u64 {
        let left = self.deadline.saturating_duration_since(Instant::now());
        u64::try_from(left.as_millis()).unwrap_or(u64::MAX)
    }

    pub fn exceeded(&self) -> ApiError {
        ApiError::BudgetExceeded { budget_ms: self.ms }
    }

    /// Stops `conn`'s statements once the deadline passes: SQLite asks the handler every few
    /// steps, and a `true` makes the running statement (and any started after) fail as
    /// interrupted, which rolls back an open transaction.
    pub(super) fn arm(&self, conn: &Connection) {
        let deadline = self.deadline;
        conn.progress_handler(PROGRESS_STEPS, Some(move || Instant::now() >= deadline));
    }

    /// The answer of work run under this budget: an interrupt is this budget running out.
    pub(super) fn settle<T>(&self, out: Result<T, ApiError>) -> Result<T, ApiError> {
        match out {
            Err(ApiError::Interrupted) => Err(self.exceeded()),
            other => other,
        }
    }
}

pub(super) fn disarm(conn: &Connection) {
    conn.progress_handler(0, None::<fn() -> bool>);
}

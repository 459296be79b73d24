//! Parked tasks (SPEC.md §Parked tasks): a task that fails for a reason of its own is withdrawn
//! for good, so one poison task never ends the cells that try it. This module owns when a task
//! is parked and how it comes back; the standing rule in `verdict.rs` owns what a park means.

use serde::Serialize;

/// Failures by this many distinct cells park a task, unless the fleet says otherwise
/// (`--park-after`, `METABOB_PARK_AFTER`).
pub const DEFAULT_PARK_AFTER: usize = 2;

/// A park as written: why, and the cells whose failures led to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Parked {
    pub reason: String,
    pub tried_by: Vec<String>,
}

/// What `task reopen` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reopen {
    Reopened,
    /// Not parked: nothing was written.
    NotParked,
    /// Closed by a verdict: reopening it would offer finished work again.
    Closed,
}
